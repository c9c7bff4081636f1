"""More signals through the product path (issue 27 §3): extra embedders written as Qdrant named vectors
by the knowledge base's write path and fused by the retrieval pipeline, RM3 expansion of the BM25
query, and a title field. Real models (MiniLM, the main embedder; mpnet, the extra one) and the
embedded engine; every expected number is computed here by hand from the engine's own lists.
"""

from __future__ import annotations

import numpy as np
import pytest

from adiyan.factory import open_kb, open_retriever
from adiyan.retrieval.pipeline import InertSetting, Retriever, UnsupportedSetting
from adiyan.retrieval.rm3 import expand, relevance_model
from adiyan.store.base import EmbedderMismatchError, Sparse

from tests.conftest import MODEL_DIR, ROOT

DOCS = {
    "refunds.md": "# Refunds\n\nForm RF-22 requests a refund; the office must receive it within 14 days.",
    "refund_late.md": "# Late refunds\n\nA refund form that reaches the office after the deadline is refused.",
    "deadlines.md": "# Office deadlines\n\nThe office deadline for payments and cancellations is noon on Friday.",
    "lakes.md": "# Lakes\n\nBled and Bohinj are glacial lakes; boats leave the Bled pier every hour.",
    "hikes.md": "# Mountain hikes\n\nThe Triglav trek crosses two passes; boots and a rain jacket are required.",
    "food.md": "# Food\n\nPicnic lunches are served on every hike; dinner is at the hut.",
}
PRIVATE = {"alice.md": "# Alice's refund\n\nAlice's private note: her refund form RF-22 was sent on Monday."}
QUERIES = ["How do I ask for a refund?", "Which lakes can I visit?", "What do I need for the mountain trek?"]


def ingest_all(kb):
    """DOCS as the office's global documents, PRIVATE as alice's private ones."""
    for name, text in DOCS.items():
        kb.ingest_text(text, name, "office", "global")
    for name, text in PRIVATE.items():
        kb.ingest_text(text, name, "alice", "private")
    kb.finish_ingest()
    return kb


def _kb(make_settings, **overrides):
    s = make_settings(**{"embedder.extra": ["mpnet"], **overrides})
    return s, ingest_all(open_kb(s, progress=False))


def _z(scores: dict) -> dict:
    """(s - mean) / population std; a constant list is all 0 (fusion.normalise's stated convention)."""
    v = np.array(list(scores.values()), dtype=np.float64)
    return dict(zip(scores, (v - v.mean()) / v.std() if v.std() > 0 else np.zeros_like(v)))


def test_a_named_vector_searched_alone_equals_a_knowledge_base_of_that_model(make_settings, tmp_path):
    s, kb = _kb(make_settings)
    only = open_kb(make_settings(**{"embedder.name": "mpnet", "paths.data_dir": str(tmp_path / "only")}),
                   progress=False)
    for name, text in DOCS.items():
        only.ingest_text(text, name, "office", "global")
    for name, text in PRIVATE.items():
        only.ingest_text(text, name, "alice", "private")
    only.finish_ingest()
    assert kb.signals() == ["dense", "mpnet", "bm25"]
    for q in QUERIES:
        for who in ("bob", "alice"):
            a = kb.search(q, 10, mode="dense", signal="mpnet", requester=who, exact=True)
            b = only.search(q, 10, mode="dense", requester=who, exact=True)
            assert [c.key for c in a] == [c.key for c in b]
            assert np.allclose([c.score for c in a], [c.score for c in b], atol=1e-6)
    # the access filter holds on the named vector: alice's note ranks first for her, never for bob
    q = "Alice's refund form RF-22"
    assert kb.search(q, 3, mode="dense", signal="mpnet", requester="alice")[0].source == "alice/alice.md"
    for who in ("bob", None):
        for signal in ("dense", "mpnet"):
            assert all(c.source != "alice/alice.md" for c in kb.search(q, 10, mode="dense", signal=signal,
                                                                         requester=who))
        assert all(c.source != "alice/alice.md" for c in kb.search(q, 10, mode="hybrid", requester=who))
    kb.close()
    only.close()


def test_weighted_fusion_of_three_signals_equals_the_sum_by_hand(make_settings):
    weights = {"dense": 0.5, "mpnet": 0.3, "bm25": 0.2}
    s, kb = _kb(make_settings, **{"retrieval.mode": "hybrid", "retrieval.fusion": "weighted",
                                  "retrieval.fusion_norm": "z", "retrieval.fusion_weights": weights,
                                  "retrieval.hybrid_prefetch": 5, "retrieval.rank_depth": 5})
    r = open_retriever(s, kb)
    for q in QUERIES:
        lists = {sig: {c.key: c.score for c in kb.search(q, 5, mode="bm25" if sig == "bm25" else "dense", signal=sig,
                                                         requester="bob")} for sig in weights}
        z = {sig: _z(d) for sig, d in lists.items()}
        keys = set().union(*lists.values())
        by_hand = {k: sum(w * z[sig].get(k, min(z[sig].values())) for sig, w in weights.items()) for k in keys}
        want = sorted(by_hand.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
        got = r.retrieve(q, "bob").ranked
        assert [c.key for c in got] == [k for k, _ in want]
        assert np.allclose([c.score for c in got], [v for _, v in want], atol=1e-9)
    # a weight of 1 on one signal gives that signal's own order
    s1 = s.with_overrides({"retrieval.fusion_weights": {"dense": 0.0, "mpnet": 1.0, "bm25": 0.0}})
    one = open_retriever(s1, kb).retrieve(QUERIES[0], "bob").ranked
    assert [c.key for c in one] == [c.key for c in kb.search(QUERIES[0], 5, mode="dense", signal="mpnet",
                                                             requester="bob")]
    kb.close()


def test_engine_rrf_fuses_every_signal_the_collection_carries(make_settings):
    s, kb = _kb(make_settings)
    q, k, pre = QUERIES[2], 60, 20  # a search fetches max(prefetch, limit) a list: 20 here
    lists = [kb.search(q, pre, mode="dense", signal=sig, requester="bob", exact=True) for sig in ("dense", "mpnet")]
    lists.append(kb.search(q, pre, mode="bm25", requester="bob"))
    by_hand: dict[str, float] = {}
    for hits in lists:
        for rank, c in enumerate(hits, 1):
            by_hand[c.key] = by_hand.get(c.key, 0.0) + 1 / (k + rank)
    got = kb.search(q, 20, mode="hybrid", prefetch=pre, rrf_k=k, requester="bob", exact=True)
    assert {c.key: round(c.score, 6) for c in got} == {key: round(v, 6) for key, v in by_hand.items()}  # float32
    kb.close()


def test_rm3_weights_by_hand():
    counts = {"a": {1: 2, 3: 2}, "b": {3: 1, 4: 3}}  # two feedback documents, 4 terms each
    assert relevance_model(counts.values()) == {1: 0.25, 3: 0.375, 4: 0.375}
    q = Sparse((1, 2), (1.0, 1.0))
    out = expand(q, ["a", "b"], counts.__getitem__, terms=2, weight=0.6)
    # original terms 0.6 * 1/2 each; feedback terms 3 and 4 (0.375 each, tie by id; 1 is third) 0.4 * 1/2 each
    assert out.indices == (1, 2, 3, 4)
    assert np.allclose(out.values, (0.3, 0.3, 0.2, 0.2))
    assert expand(q, ["a", "b"], counts.__getitem__, terms=3, weight=1.0).values == (0.5, 0.5)
    with pytest.raises(ValueError, match="rm3_weight"):
        expand(q, [], counts.__getitem__, terms=3, weight=1.5)


def test_rm3_brings_in_a_chunk_without_the_query_terms(make_settings):
    base = {"embedder.extra": [], "retrieval.mode": "bm25", "retrieval.rank_depth": 10}
    s, kb = _kb(make_settings, **base)
    q = "refund form"
    plain = open_retriever(s, kb).retrieve(q, "bob").ranked
    assert "office/deadlines.md" not in {c.source for c in plain}  # it has neither "refund" nor "form"
    rm3 = s.with_overrides({"retrieval.rm3_docs": 2, "retrieval.rm3_terms": 6, "retrieval.rm3_weight": 0.5})
    expanded = open_retriever(rm3, kb).retrieve(q, "bob").ranked
    assert "office/deadlines.md" in {c.source for c in expanded}  # "office", "deadline": the feedback's terms
    assert all(c.source != "alice/alice.md" for c in expanded)  # feedback is drawn from what bob may see
    keep = s.with_overrides({"retrieval.rm3_docs": 2, "retrieval.rm3_weight": 1.0})
    assert [c.key for c in open_retriever(keep, kb).retrieve(q, "bob").ranked] == [c.key for c in plain]
    # the term counts are the engine's: "refund" twice in a chunk counts 2
    counts = kb.term_counts("refund refund office")
    assert sorted(counts.values()) == [1, 2]
    kb.close()


def test_the_title_field_ranks_by_the_title_only(make_settings):
    s, kb = _kb(make_settings, **{"embedder.extra": [], "store.title_field": True})
    assert kb.signals() == ["dense", "bm25", "title"]
    assert kb.document_title("# Late refunds\n\nA refund form ...") == "Late refunds"
    hits = kb.search("lakes", 10, mode="bm25", signal="title", requester="bob")
    assert [c.source for c in hits] == ["office/lakes.md"]
    refund = kb.search("refund", 10, mode="bm25", signal="title", requester="bob")
    assert {c.source for c in refund} == {"office/refunds.md", "office/refund_late.md"}  # never alice's
    assert "alice/alice.md" in {c.source for c in kb.search("refund", 10, mode="bm25", signal="title",
                                                            requester="alice")}
    # "office" is in one title and three bodies: the title field finds the one, the chunk's BM25 all three
    assert [c.source for c in kb.search("office", 10, mode="bm25", signal="title", requester="bob")] == [
        "office/deadlines.md"]
    assert {c.source for c in kb.search("office", 10, mode="bm25", requester="bob")} == {
        "office/deadlines.md", "office/refunds.md", "office/refund_late.md"}
    kb.close()


def test_signals_are_refused_by_name_where_they_cannot_act(make_settings, tmp_path):
    s, kb = _kb(make_settings)
    with pytest.raises(InertSetting, match=r"embedder\.extra=\['mpnet'\].*retrieval\.mode=hybrid.*here retrieval\.mode=dense"):
        Retriever.from_settings(s, kb, entry_point="adiyan search")
    with pytest.raises(UnsupportedSetting, match=r"retrieval\.fusion=convex .*3 \(dense, mpnet, bm25\)"):
        Retriever.from_settings(s.with_overrides({"retrieval.mode": "hybrid", "retrieval.fusion": "convex"}), kb)
    with pytest.raises(UnsupportedSetting, match=r"retrieval\.fusion_weights=.*missing: \['mpnet'\]"):
        Retriever.from_settings(s.with_overrides({"retrieval.mode": "hybrid", "retrieval.fusion": "weighted",
                                                  "retrieval.fusion_weights": {"dense": 0.5, "bm25": 0.5}}), kb)
    with pytest.raises(UnsupportedSetting, match=r"retrieval\.fusion_weights=.*sum to 1"):
        Retriever.from_settings(s.with_overrides({"retrieval.mode": "hybrid", "retrieval.fusion": "weighted",
                                                  "retrieval.fusion_weights": {"dense": 0.5, "bm25": 0.5,
                                                                               "mpnet": 0.5}}), kb)
    kb.close()
    # the same data directory opened with other named vectors is refused, naming the setting
    with pytest.raises(EmbedderMismatchError, match="embedder.extra"):
        open_kb(s.with_overrides({"embedder.extra": []}), progress=False)
    with pytest.raises(ValueError, match="already the main embedder"):
        open_kb(s.with_overrides({"embedder.extra": ["minilm"]}), progress=False)


def test_llama_cpp_is_loaded_with_passive_openmp_threads(tmp_path):
    """OpenMP reads OMP_WAIT_POLICY once, when llama.cpp's runtime loads: the first import of llama_cpp
    must see PASSIVE (spinning threads cost a 3-token embedding 1.33 CPU-seconds against 0.034 on the
    loaded 2-core machine, adiyan/models/base.py), and a value the user set is kept."""
    import subprocess
    import sys

    probe = (
        "import builtins, os, sys\n"
        "seen = []\n"
        "real = builtins.__import__\n"
        "def spy(name, *a, **k):\n"
        "    if name == 'llama_cpp' and 'llama_cpp' not in sys.modules:\n"
        "        seen.append(os.environ.get('OMP_WAIT_POLICY'))\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = spy\n"
        "from adiyan.models import load_embedder\n"
        f"load_embedder('nomic-embed-text', models_dir={str(MODEL_DIR)!r}, progress=False)\n"
        "print(seen[0])\n")
    env = {k: v for k, v in __import__("os").environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", probe], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.stdout.strip().splitlines()[-1] == "PASSIVE", out.stderr[-2000:]
    out = subprocess.run([sys.executable, "-c", probe], env={**env, "OMP_WAIT_POLICY": "ACTIVE"}, cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.stdout.strip().splitlines()[-1] == "ACTIVE", out.stderr[-2000:]
