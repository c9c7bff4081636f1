"""The store contract: one suite, run against both engines (Qdrant's embedded engine and
qdrant-client, whose local mode stands in for a server). The same-model rule is enforced."""

import numpy as np
import pytest

from adiyan.store import Cond, EdgeStore, EmbedderMismatchError, Empty, Filter, Point, ServerStore


@pytest.fixture(params=["edge", "local"])
def store(request, tmp_path):
    s = EdgeStore(tmp_path / "data") if request.param == "edge" else ServerStore(path=str(tmp_path / "ql"))
    yield s
    s.close()


def _unit(rng, n, d):
    v = rng.standard_normal((n, d)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_search_filter_delete_match_numpy(store):
    rng = np.random.default_rng(0)
    vecs = _unit(rng, 60, 16)
    store.ensure_collection("c", dim=16, embedder_id="toy", normalized=True)
    store.upsert("c", [Point(f"00000000-0000-0000-0000-{i:012d}", vecs[i],
                             {"owner_identity": f"o{i % 3}", "visibility": "global" if i % 2 else "private",
                              "source_filename": f"o{i % 3}/f{i}", "i": i}) for i in range(60)])
    assert store.count("c") == 60
    q = vecs[7]
    hits = store.search("c", q, 5, exact=True)
    expected = np.argsort(-(vecs @ q), kind="stable")[:5]
    assert [h.payload["i"] for h in hits] == expected.tolist()
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)
    flt = Filter(should=(Cond("visibility", "global"), Cond("owner_identity", "o0")))
    allowed = [i for i in range(60) if i % 2 or i % 3 == 0]
    fh = store.search("c", q, 10, flt=flt, exact=True)
    assert len(fh) == 10 and all(h.payload["i"] in allowed for h in fh)
    ref = sorted(allowed, key=lambda i: -float(vecs[i] @ q))[:10]
    assert [h.payload["i"] for h in fh] == ref
    assert store.count("c", flt) == len(allowed)
    store.delete("c", Filter(must=(Cond("owner_identity", "o1"),)))
    assert store.count("c") == 40
    assert sorted(p.payload["i"] for p in store.scroll("c", flt=Filter(must=(Cond("owner_identity", "o2"),)))) \
        == list(range(2, 60, 3))


def test_collection_records_the_embedder(store):
    meta = store.ensure_collection("kb", dim=384, embedder_id="minilm", normalized=True)
    assert (meta.embedder_id, meta.dim, meta.normalized) == ("minilm", 384, True)
    again = store.collection_meta("kb")
    assert (again.embedder_id, again.dim) == ("minilm", 384)
    with pytest.raises(EmbedderMismatchError, match="built with embedder 'minilm'.*'mpnet'"):
        store.ensure_collection("kb", dim=768, embedder_id="mpnet", normalized=True)
    with pytest.raises(EmbedderMismatchError):  # same width, different model: still refused
        store.ensure_collection("kb", dim=384, embedder_id="sentence-transformers:/x", normalized=True)


def test_edge_store_persists_across_reopen(tmp_path):
    rng = np.random.default_rng(1)
    vecs = _unit(rng, 20, 8)
    s = EdgeStore(tmp_path / "d")
    s.ensure_collection("c", dim=8, embedder_id="toy")
    s.upsert("c", [Point(f"00000000-0000-0000-0000-{i:012d}", vecs[i], {"i": i}) for i in range(20)])
    before = [(h.id, round(h.score, 6)) for h in s.search("c", vecs[3], 5, exact=True)]
    s.close()
    s2 = EdgeStore(tmp_path / "d")
    assert s2.count("c") == 20
    assert [(h.id, round(h.score, 6)) for h in s2.search("c", vecs[3], 5, exact=True)] == before
    s2.close()


def _pid(i: int) -> str:
    return f"00000000-0000-0000-0000-{i:012d}"


def test_upsert_same_id_overwrites(store):
    store.ensure_collection("c", dim=4, embedder_id="toy")
    store.upsert("c", [Point(_pid(1), np.array([1, 0, 0, 0], np.float32), {"v": "old"})])
    store.upsert("c", [Point(_pid(1), np.array([0, 1, 0, 0], np.float32), {"v": "new"})])
    assert store.count("c") == 1
    hit = store.search("c", np.array([0, 1, 0, 0], np.float32), 1, exact=True)[0]
    assert hit.payload["v"] == "new" and hit.score == pytest.approx(1.0, abs=1e-6)


def test_set_payload_on_empty_field(store):
    store.ensure_collection("c", dim=4, embedder_id="toy")
    v = np.array([1, 0, 0, 0], np.float32)
    store.upsert("c", [Point(_pid(1), v, {"visibility": "global"}), Point(_pid(2), v, {"text": "legacy"}),
                       Point(_pid(3), v, {"visibility": None})])
    legacy = Filter(must=(Empty("visibility"),))
    assert store.count("c", legacy) == 2
    store.set_payload("c", {"visibility": "private", "owner_identity": "o"}, legacy)
    assert store.count("c", legacy) == 0
    assert store.count("c", Filter(must=(Cond("visibility", "private"), Cond("owner_identity", "o")))) == 2
    assert store.count("c", Filter(must=(Cond("visibility", "global"),))) == 1


def test_scroll_pages_through_everything(store):
    rng = np.random.default_rng(3)
    store.ensure_collection("c", dim=8, embedder_id="toy")
    vecs = _unit(rng, 2500, 8)
    store.upsert("c", [Point(_pid(i), vecs[i], {"i": i}) for i in range(2500)])
    seen = [p.payload["i"] for p in store.scroll("c")]
    assert sorted(seen) == list(range(2500))  # > one page of 1000, no duplicates
    with_vec = next(iter(store.scroll("c", with_vectors=True)))
    np.testing.assert_allclose(with_vec.vector, vecs[with_vec.payload["i"]], atol=1e-6)


def test_score_threshold(store):
    store.ensure_collection("c", dim=2, embedder_id="toy")
    store.upsert("c", [Point(_pid(i), np.array([np.cos(a), np.sin(a)], np.float32), {"i": i})
                       for i, a in enumerate([0.0, 0.5, 1.0, 1.5])])
    hits = store.search("c", np.array([1, 0], np.float32), 4, exact=True, score_threshold=0.6)
    # cos(0)=1, cos(0.5)=0.878, cos(1.0)=0.540, cos(1.5)=0.071
    assert [h.payload["i"] for h in hits] == [0, 1]


def test_edge_hnsw_with_ef_and_filter_agrees_with_exact(tmp_path):
    """Real HNSW after optimize(): with a generous ef it finds what brute force finds, filtered too."""
    rng = np.random.default_rng(5)
    n, d = 3000, 32
    vecs = _unit(rng, n, d)
    s = EdgeStore(tmp_path / "d", hnsw_m=16, hnsw_ef_construct=100, full_scan_threshold=10)
    s.ensure_collection("c", dim=d, embedder_id="toy")
    s.upsert("c", [Point(_pid(i), vecs[i], {"visibility": "global" if i % 2 else "private"}) for i in range(n)])
    s.optimize("c")
    flt = Filter(must=(Cond("visibility", "global"),))
    recall = []
    for q in _unit(rng, 20, d):
        exact = {h.id for h in s.search("c", q, 10, flt=flt, exact=True)}
        approx = {h.id for h in s.search("c", q, 10, flt=flt, ef=256)}
        recall.append(len(exact & approx) / 10)
    assert np.mean(recall) >= 0.95, recall
    s.close()


def _lexical_corpus(store, rng):
    from adiyan.store import LexicalEncoder

    enc = LexicalEncoder()
    texts = [f"common words about travel and prices number {i}" for i in range(40)]
    texts[13] += " zygomorphic"
    texts[27] += " zygomorphic zygomorphic"
    vecs = _unit(rng, 40, 16)
    store.ensure_collection("h", dim=16, embedder_id="toy")
    store.upsert("h", [Point(_pid(i), vecs[i], {"i": i, "visibility": "global" if i != 27 else "private"},
                             sparse=enc.document(texts[i])) for i in range(40)])
    return enc, vecs


def test_sparse_search_finds_the_rare_term(store):
    enc, _ = _lexical_corpus(store, np.random.default_rng(7))
    hits = store.sparse_search("h", enc.query("zygomorphic flowers"), 5)
    assert [h.payload["i"] for h in hits] == [27, 13]  # tf 2 beats tf 1; nothing else has the term
    only_global = store.sparse_search("h", enc.query("zygomorphic"), 5, flt=Filter(must=(Cond("visibility", "global"),)))
    assert [h.payload["i"] for h in only_global] == [13]


def test_hybrid_is_rrf_of_both_sides_under_the_filter(store):
    enc, vecs = _lexical_corpus(store, np.random.default_rng(7))
    q_dense, q_sparse = vecs[5], enc.query("zygomorphic")
    flt = Filter(must=(Cond("visibility", "global"),))
    dense = [h.payload["i"] for h in store.search("h", q_dense, 10, flt=flt, exact=True)]
    sparse = [h.payload["i"] for h in store.sparse_search("h", q_sparse, 10, flt=flt)]
    fused = store.hybrid_search("h", q_dense, q_sparse, 5, flt=flt, prefetch=10, rrf_k=60, exact=True)
    assert 27 not in [h.payload["i"] for h in fused]  # the filter holds on the sparse side too
    # each side exactly: only 13 (global) and 27 (private) hold the term; doc 5's own vector is the query
    assert sparse == [13] and dense[0] == 5
    expected = {}
    for run in (dense, sparse):
        for rank, i in enumerate(run, 1):
            expected[i] = expected.get(i, 0.0) + 1.0 / (60 + rank)
    got = {h.payload["i"]: h.score for h in fused}
    top = sorted(expected, key=lambda i: -expected[i])[:5]
    assert set(got) == set(top)
    # scores are the paper's RRF (ranks from 1): doc 5 is first on the dense side only
    for i, score in got.items():
        assert score == pytest.approx(expected[i], rel=1e-6), i
    assert got[5] == pytest.approx(1 / 61, rel=1e-6)  # dense rank 1, absent from the sparse side
    assert 13 not in dense and got[13] == pytest.approx(1 / 61, rel=1e-6)  # sparse rank 1 only


def test_hybrid_ties_are_ordered_by_point_id_and_cut_the_same_way_every_time(store):
    """Disjoint dense and sparse lists tie at every rank (1/(k+r) from each side); Qdrant returns tied
    points in an order that changes between processes, which moved SciFact nDCG@10 by 0.003 from one
    run to the next. Ties are settled by point id, also at the cut."""
    from adiyan.store.base import LexicalEncoder

    enc = LexicalEncoder()
    e1 = np.eye(8, dtype=np.float32)[0]
    vecs, texts = [], []
    for i in range(10):
        if i < 5:  # near e1, more so for smaller i: the dense side ranks 0..4
            v = e1 + (0.1 + 0.2 * i) * np.eye(8, dtype=np.float32)[1 + i % 7]
            texts.append("plain words only")
        else:  # away from e1, holding the rare term more often for larger i: the sparse side ranks 9..5
            v = -e1 + 0.1 * np.eye(8, dtype=np.float32)[1 + i % 7]
            texts.append("quokka " * (i - 4) + "plain words")
        vecs.append(v / np.linalg.norm(v))
    # ids in reverse of the lists' order, so id order differs from any insertion or rank order
    ids = {i: _pid(100 - i) for i in range(10)}
    store.ensure_collection("t", dim=8, embedder_id="toy")
    store.upsert("t", [Point(ids[i], vecs[i], {"i": i}, sparse=enc.document(texts[i])) for i in range(10)])
    dense = [h.payload["i"] for h in store.search("t", e1, 5, exact=True)]
    sparse = [h.payload["i"] for h in store.sparse_search("t", enc.query("quokka"), 5)]
    assert dense == [0, 1, 2, 3, 4] and sparse == [9, 8, 7, 6, 5]
    fused = store.hybrid_search("t", e1, enc.query("quokka"), 5, prefetch=5, rrf_k=60, exact=True)
    # rank r on either side scores 1/(60 + r): pairs (0, 9), (1, 8), (2, 7) tie; the smaller point id
    # (the larger i) first, and the fifth place goes to the pair's smaller id
    assert [h.payload["i"] for h in fused] == [9, 0, 8, 1, 7]
    assert [h.score for h in fused] == pytest.approx([1 / 61, 1 / 61, 1 / 62, 1 / 62, 1 / 63], rel=1e-6)
