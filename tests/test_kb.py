"""The knowledge-base slice on the real minilm: ingest, replace, the access policy, the same-model rule."""

import re

import pytest

from adiyan.factory import open_kb, open_retriever
from adiyan.kb import IngestError, IngestItem, source_key, validate_filename
from adiyan.store import EmbedderMismatchError, open_store
from adiyan.types import OWNER

TEXT_A = "# Prices\n\nThe Julian Alps Weekend (TR-JUL-03) costs 450 euros per person.\n"
TEXT_B = "# Secrets\n\nThe safe code of the Ljubljana office is 7319.\n"


@pytest.fixture
def kb(make_settings, minilm):
    """The retrieval pipeline (all six read paths) over a fresh KB (``kb.kb`` for writes)."""
    s = make_settings()
    store = open_store(s)
    yield open_retriever(s, open_kb(s, embedder=minilm, store=store))
    store.close()


def test_reingest_is_a_noop_and_a_change_replaces(kb):
    r1 = kb.kb.ingest_text(TEXT_A, "prices.md", "office", "global")
    assert r1.changed and r1.n_chunks == 1
    r2 = kb.kb.ingest_text(TEXT_A, "prices.md", "office", "global")
    assert not r2.changed and kb.kb.count_chunks() == 1
    r3 = kb.kb.ingest_text(TEXT_A.replace("450", "470"), "prices.md", "office", "global")
    assert r3.changed and kb.kb.count_chunks() == 1
    top = kb.retrieve_knowledge_base("Julian Alps price", "anyone").chunks[0]
    assert "470" in top.text and top.source == "office/prices.md"


def test_private_chunks_never_reach_another_requester(kb):
    kb.kb.ingest_text(TEXT_A, "prices.md", "office", "global")
    kb.kb.ingest_text(TEXT_B, "safe.md", "alice", "private")
    for requester in ["bob", None, "office"]:
        got = kb.retrieve_knowledge_base("safe code of the office", requester, top_k=4)
        assert all(c.source != "alice/safe.md" for c in got.chunks)
        assert all(d["source"] != "alice/safe.md" for d in kb.list_documents(requester))
    own = kb.retrieve_knowledge_base("safe code of the office", "alice", top_k=1)
    assert own.chunks[0].source == "alice/safe.md"
    assert {d["source"] for d in kb.list_documents(OWNER)} == {"office/prices.md", "alice/safe.md"}


def test_floor_drops_results_and_says_so(kb):
    kb.kb.ingest_text(TEXT_A, "prices.md", "office", "global")
    res = kb.retrieve_knowledge_base("quantum chromodynamics lattice", "x", floor=0.99)
    assert res.chunks == [] and res.dropped_below_floor == 1
    assert "below the floor 0.990" in res.empty_reason


def test_querying_with_another_embedder_raises(make_settings, minilm, mpnet):
    s = make_settings()
    store = open_store(s)
    open_kb(s, embedder=minilm, store=store).ingest_text(TEXT_A, "prices.md", "office", "global")
    with pytest.raises(EmbedderMismatchError, match="minilm"):
        open_kb(s, embedder=mpnet, store=store)
    store.close()


REFUSED = {"../etc/passwd": "'..' path component", "a/../b.md": "'..' path component", "./a.md": "'.' path component",
           "/abs.md": "absolute path", "C:evil.md": "drive", "a\\b.md": "'\\'", "nul\x00.md": "NUL byte",
           "..": "'..' path component", "": "empty file name", "a//b.md": "empty path component",
           "a/b/": "empty path component", "a/ /b.md": "blank", "n" * 300 + ".md": "longer than 255 bytes",
           "/".join(["d"] * 40) + ".md": "deeper than 32", "/".join(["d" * 200] * 6): "longer than 1024 bytes"}


@pytest.mark.parametrize("name,reason", REFUSED.items(), ids=[repr(n[:20]) for n in REFUSED])
def test_file_names_are_keys_not_paths(name, reason):
    with pytest.raises(IngestError, match=re.escape(reason)):
        validate_filename(name)


@pytest.mark.parametrize("name", ["a/b.md", "Co..md", "Harris, Forbes & Co..md", "a..b.md", "..hidden.md",
                                  "docs/2024/report.pdf", "archive.zip/docs/a.txt", "mail.eml/invoice.pdf"])
def test_relative_names_of_plain_components_are_keys(name):
    """``..`` only matters as a whole component: ``Co..md`` is a name, not a traversal."""
    assert validate_filename(name) == name
    assert source_key("alice", name) == f"alice/{name}"


def test_same_file_name_in_two_folders_is_two_documents(kb, tmp_path):
    """``a/notes.txt`` and ``b/notes.txt`` are keyed by their relative paths; neither replaces the other,
    and the raw store keeps their bytes by content hash, never under a path built from the key."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "notes.txt").write_text("Notes of folder A: the kayak trip starts at Bovec. Marker FOLDER-A.")
    (tmp_path / "b" / "notes.txt").write_text("Notes of folder B: the wine tour starts at Brda. Marker FOLDER-B.")
    items = [IngestItem(tmp_path / rel, rel, "alice", "private") for rel in ("a/notes.txt", "b/notes.txt")]
    res = kb.kb.ingest_many(items)
    assert [r.source for r in res] == ["alice/a/notes.txt", "alice/b/notes.txt"] and all(r.changed for r in res)
    assert "FOLDER-A" in kb.get_document_text("alice/a/notes.txt", "alice")
    assert "FOLDER-B" in kb.get_document_text("alice/b/notes.txt", "alice")
    assert [d["source"] for d in kb.list_documents("alice")] == ["alice/a/notes.txt", "alice/b/notes.txt"]
    hits = kb.search_within_document("alice/b/notes.txt", "wine tour", "alice", floor=-1.0).chunks
    assert hits and {c.source for c in hits} == {"alice/b/notes.txt"}
    stored = [p.relative_to(kb.kb.raw.root).as_posix() for p in kb.kb.raw.root.rglob("*") if p.is_file()]
    assert not [p for p in stored if "notes" in p], stored  # blobs by hash: files/<sha[:2]>/<sha256>[.md]
    assert all(re.fullmatch(r"files/[0-9a-f]{2}/[0-9a-f]{64}(\.md)?", p) for p in stored if p.startswith("files/"))


def test_two_items_of_one_batch_with_one_key_are_refused_by_name(kb):
    res = kb.kb.ingest_many([(b"First version. Marker DUP-1.", "notes.txt", "alice", "private"),
                             (b"Second version. Marker DUP-2.", "notes.txt", "alice", "private")])
    assert res[0].changed and isinstance(res[1], IngestError)
    assert str(res[1]).startswith("'alice/notes.txt': same key as item 1 earlier in this batch")
    assert "DUP-1" in kb.get_document_text("alice/notes.txt", "alice")  # the first one stands


def test_empty_document_is_an_error_naming_the_file(kb):
    with pytest.raises(IngestError, match="'empty.md': no text"):
        kb.kb.ingest_text("  \n", "empty.md", "office", "global")
    assert kb.kb.count_chunks() == 0


@pytest.mark.parametrize("mode", ["bm25", "hybrid"])
def test_lexical_modes_find_exact_tokens_under_the_policy(make_settings, minilm, mode):
    s = make_settings(**{"retrieval.mode": mode})
    store = open_store(s)
    kb = open_retriever(s, open_kb(s, embedder=minilm, store=store))
    kb.kb.ingest_text(TEXT_A, "prices.md", "office", "global")
    kb.kb.ingest_text(TEXT_B, "safe.md", "alice", "private")
    kb.kb.ingest_text("# Codes\n\nThe refund form is RF-22; the equipment list is EQ-5.\n", "codes.md", "office", "global")
    res = kb.retrieve_knowledge_base("RF-22", "bob", top_k=2)
    assert res.mode == mode and res.chunks[0].source == "office/codes.md"
    assert all(c.source != "alice/safe.md" for c in kb.retrieve_knowledge_base("safe code 7319", "bob", top_k=3).chunks)
    assert kb.retrieve_knowledge_base("safe code 7319", "alice", top_k=1).chunks[0].source == "alice/safe.md"
    store.close()


def test_knowledge_base_closes_as_a_context_manager(make_settings, minilm):
    """``with open_kb(...) as kb`` releases the embedded engine's folder on the way out (a second
    open of the folder in this process fails while the first holds it), and nothing in the
    package closes ``kb.store`` by hand any more."""
    import ast
    from pathlib import Path

    import adiyan

    s = make_settings()
    with open_kb(s, embedder=minilm) as kb:
        kb.ingest_text(TEXT_A, "prices.md", "office", "global")
        with pytest.raises(Exception, match="already accessed|in use|held by another|WouldBlock"):
            open_kb(s, embedder=minilm)  # the folder is still held by the open knowledge base
    with open_kb(s, embedder=minilm) as again:  # released: it opens, with the document
        assert again.count_chunks() == 1
    pkg = Path(adiyan.__file__).parent
    by_hand = [f"{p.relative_to(pkg)}:{n.lineno}" for p in sorted(pkg.rglob("*.py"))
               for n in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
               if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "close"
               and isinstance(n.func.value, ast.Attribute) and n.func.value.attr == "store"
               and "kb" in ast.unparse(n.func.value.value)]
    assert not by_hand, f"kb.store closed by hand (use kb.close() or `with open_kb(...)`): {by_hand}"


def test_bm25_reencode_page_by_page_gives_the_scores_of_one_pass(make_settings, minilm, monkeypatch):
    """After a BM25 length drift every chunk's sparse vector is re-encoded and written back page by
    page (a million chunks with their vectors do not fit in memory at once: benchmarks/scale.py);
    paging changes nothing: every chunk kept, the same BM25 scores as one pass over everything."""
    from adiyan.kb import KnowledgeBase

    texts = [f"Tour {i} visits {'the lake ' * (i % 5 + 1)}and the old town of Ljubljana." for i in range(23)]
    scores = {}
    for page in (5, 10 ** 9):
        s = make_settings(paths__data_dir=str(make_settings().paths.data_dir / f"page{page}"))
        store = open_store(s)
        kb = open_kb(s, embedder=minilm, store=store)
        kb.ingest_many([IngestItem(t.encode(), f"t{i}.txt", "office", "global") for i, t in enumerate(texts)])
        monkeypatch.setattr(KnowledgeBase, "REENCODE_PAGE", page)
        stats = kb.refresh_bm25_stats(force=True)
        assert stats["reencoded"] == 23 and kb.count_chunks() == 23
        hits = kb.search("lake", 23, requester=OWNER, mode="bm25")
        scores[page] = sorted((-round(h.score, 5), h.source) for h in hits)  # equal scores: any order
        store.close()
    assert len(scores[5]) == 23 and scores[5] == scores[10 ** 9]
