"""The book-pages collection (adiyan/kb/pages.py): page-level results with the right page number,
the evalset's book indexed page by page, and the access policy over the book-pages read path."""

import json
import sqlite3
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adiyan.cache import CachedEmbedder, EmbeddingCache
from adiyan.config import load_settings
from adiyan.factory import open_kb, open_retriever
from adiyan.kb import DocumentNotFound
from adiyan.kb.pages import PAGE_CHARS, book_pages, top_level_chapters
from adiyan.store.base import Cond, Filter
from adiyan.types import OWNER
from tests.test_access_policy import COMMON, EXAMPLES, REQUESTERS, docs_strategy
from tests.test_parse import build_pdf

BOOK = Path(__file__).resolve().parents[1] / "evalsets" / "adiyan_full" / "docs" / "field_guide_book.md"
# One distinct fact per page; the question about the glacier is answered on page 3 only.
PAGE_LINES = [b"Chapter 1 Arrival. The bus from Ljubljana leaves at seven every morning.",
              b"The ferry across the lake carries bicycles but not cars.",
              b"Chapter 2 The Land. The Belopeska Glacier shrank to 0.7 hectares by 2024.",
              b"The hut warden serves soup until nine in the evening.",
              b"Chapter 3 Animals. Ibex were brought back to the valley in 1971."]


@pytest.fixture(scope="module")
def shared_embedder(minilm, tmp_path_factory):
    # Real minilm behind a cache, as in the KB's property test: repeated texts cost nothing.
    return CachedEmbedder(minilm, EmbeddingCache(tmp_path_factory.mktemp("emb") / "e.sqlite"))


def multipage_pdf(lines: list[bytes]) -> bytes:
    """A real PDF with one text line per page (Helvetica, correct xref), parsed by Docling."""
    n = len(lines)
    kids = b" ".join(b"%d 0 R" % (3 + 2 * i) for i in range(n))
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, n)]
    font = 3 + 2 * n
    for line in lines:
        content = b"BT /F1 12 Tf 72 700 Td (%s) Tj ET" % line
        objects.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R"
                       b" /Resources << /Font << /F1 %d 0 R >> >> >>" % (len(objects) + 2, font))
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content))
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    return build_pdf(objects)


def _retriever(tmp, embedder, engine="edge", **extra):
    s = load_settings(environ={}, overrides={"paths.data_dir": str(tmp), "store.engine": engine,
                                             "store.exact": True, **extra})
    return open_retriever(s, open_kb(s, embedder=embedder), entry_point="tests")


def test_pdf_book_page_numbers(shared_embedder, tmp_path):
    """The glacier question is answered on page 3 of 5: the first result is page 3, with its chapter."""
    rp = _retriever(tmp_path, shared_embedder, **{"ingest.book_min_pages": 3})
    try:
        rp.kb.ingest_document(multipage_pdf(PAGE_LINES), "guide.pdf", "alice", "private")
        res = rp.search_book_pages("How large is the Belopeska Glacier now?", "alice", top_k=3, floor=-1.0)
        assert [c.page for c in res][:1] == [3]
        assert "Belopeska" in res[0].text and res[0].payload["page_count"] == 5
        assert res[0].payload["chapter"] == "Chapter 2 The Land. The Belopeska Glacier shrank to 0.7 hectares by 2024."
        assert len({(c.source, c.page) for c in res}) == len(res)  # one result per page
        page = rp.kb.book_pages.get_page("alice/guide.pdf", 5, "alice")
        assert page["text"] == PAGE_LINES[4].decode() and page["page_count"] == 5
        # hidden == missing, on both book read paths
        for call in (lambda k: rp.search_book_pages("glacier", "bob", within=k),
                     lambda k: rp.kb.book_pages.get_page(k, 1, "bob")):
            for k in ("alice/guide.pdf", "alice/none.pdf"):
                with pytest.raises(DocumentNotFound) as err:
                    call(k)
                assert str(err.value) == f"no document {k!r}"
        assert rp.search_book_pages("glacier", "bob", floor=-1.0) == []
        # a PDF below book_min_pages is not a book
        rp.kb.ingest_document(multipage_pdf(PAGE_LINES[:2]), "short.pdf", "alice", "global")
        assert rp.kb.store.count(rp.kb.book_pages.collection, Filter(must=(Cond("source_filename", "alice/short.pdf"),))) == 0
        assert all(c.source == "alice/guide.pdf" for c in rp.search_book_pages("ferry", "alice", top_k=10, floor=-1.0))
    finally:
        rp.kb.store.close()


def test_evalset_book_is_indexed_page_by_page(shared_embedder, tmp_path):
    """field_guide_book.md (10 top-level headings: title + 9 chapters) is a book; the other
    evalset Markdown files (one top-level title each) are not. Page windows cover the whole text."""
    text = BOOK.read_text(encoding="utf-8")
    assert len(top_level_chapters(text)) == 10
    for other in ("staff_handbook.md", "faq.md", "price_list.md", "mira_notes.md"):
        assert book_pages((BOOK.parent / other).read_text(encoding="utf-8"), {"format": "markdown"}, 10) == []
    assert book_pages(text, {"format": "pptx"}, 10) == []  # a deck's slide titles are not chapters
    pages = book_pages(text, {"format": "markdown"}, 10)
    assert "".join(p.text for p in pages) == text and all(len(p.text) <= PAGE_CHARS for p in pages)
    rp = _retriever(tmp_path, shared_embedder)
    try:
        rp.kb.ingest_document(BOOK, "field_guide_book.md", "adiyan-office", "global")
        rp.kb.ingest_document(BOOK.parent / "faq.md", "faq.md", "adiyan-office", "global")
        res = rp.search_book_pages("In which year were alpine ibex reintroduced?", "anyone", top_k=3, floor=-1.0)
        assert {c.source for c in res} == {"adiyan-office/field_guide_book.md"}
        want = next(p.number for p in pages if "1971" in p.text)
        assert res[0].page == want and "1971" in res[0].text
        assert res[0].payload["chapter"] == "Chapter 6: Plants and Animals"
        assert res[0].payload["heading_path"][0] == "Chapter 6: Plants and Animals"
        # the KB read path's chunks of the book carry their page too (adiyan ask shows it)
        kb_top = rp.retrieve_knowledge_base("In which year were alpine ibex reintroduced?", "anyone", top_k=1)
        assert kb_top.chunks[0].source == "adiyan-office/field_guide_book.md" and kb_top.chunks[0].page == want
        faq = rp.retrieve_knowledge_base("Can I bring my dog?", "anyone", top_k=1).chunks[0]
        assert faq.source == "adiyan-office/faq.md" and faq.page is None
    finally:
        rp.kb.store.close()


def test_pages_follow_the_committed_version(shared_embedder, tmp_path):
    """Re-ingesting a global book as private hides its pages from others at once; re-opening a KB
    whose pages collection was lost re-derives the pages from the committed records."""
    rp = _retriever(tmp_path, shared_embedder)
    try:
        rp.kb.ingest_text(_book("alice", 0, "global"), "b.md", "alice", "global")
        assert [c.source for c in rp.search_book_pages(COMMON, "bob", floor=-1.0)] == ["alice/b.md"]
        rp.kb.ingest_text(_book("alice", 0, "private"), "b.md", "alice", "private")
        assert rp.search_book_pages(COMMON, "bob", floor=-1.0) == []
        assert "SECRET-alice-0-private" in rp.search_book_pages(COMMON, "alice", floor=-1.0)[0].text
        rp.kb.remove_documents(["alice/b.md"])
        assert rp.kb.store.count(rp.kb.book_pages.collection) == 0
        rp.kb.ingest_text(_book("carol", 1, "global"), "c.md", "carol", "global")
        rp.kb.store.drop_collection(rp.kb.book_pages.collection)
        (rp.kb.raw.root / "book_pages_checked.sqlite").unlink()
    finally:
        rp.kb.store.close()
    rp = _retriever(tmp_path, shared_embedder)
    try:
        assert [c.source for c in rp.search_book_pages(COMMON, "bob", floor=-1.0)] == ["carol/c.md"]
    finally:
        rp.kb.store.close()


def _checked_rows(root: Path) -> dict[str, str]:
    conn = sqlite3.connect(root / "book_pages_checked.sqlite")
    try:
        return dict(conn.execute("SELECT key, state FROM checked"))
    finally:
        conn.close()


def test_the_synced_state_is_a_row_per_document_and_an_old_json_file_is_imported(shared_embedder, tmp_path):
    """What the book-pages sync has seen is a table row per document (a sync reads and writes only its
    own keys; it was one JSON file rewritten whole by every sync, quadratic in the collection's size):
    removing a document removes its row only, and an earlier version's JSON file is imported when the
    knowledge base is next opened, then removed, with nothing re-derived by the next sync."""
    rp = _retriever(tmp_path, shared_embedder)
    try:
        root = rp.kb.raw.root
        rp.kb.ingest_text(_book("alice", 0, "global"), "a.md", "alice", "global")
        rp.kb.ingest_text(_book("bob", 1, "global"), "b.md", "bob", "global")
        rows = _checked_rows(root)
        assert {"alice/a.md", "bob/b.md"} <= set(rows)
        rp.kb.remove_documents(["alice/a.md"])
        after = _checked_rows(root)
        assert "alice/a.md" not in after and after["bob/b.md"] == rows["bob/b.md"]
        (root / "book_pages_checked.sqlite").unlink()
        (root / "book_pages_checked.json").write_text(json.dumps({k: json.loads(v) for k, v in after.items()}))
        # opened again (as the next open of the knowledge base does): the JSON file is imported once, here
        old = rp.kb.book_pages
        pages = type(old)(rp.kb, collection=old.collection, min_pdf_pages=old.min_pdf_pages, page_chars=old.page_chars)
        rp.kb.book_pages, rederived = pages, []
        assert not (root / "book_pages_checked.json").exists() and _checked_rows(root) == after
        real = pages._sync_one
        pages._sync_one = lambda key, rec: rederived.append(key) or real(key, rec)  # a spy around the real one
        pages.sync()
        assert rederived == []
        assert not (root / "book_pages_checked.json").exists() and _checked_rows(root) == after
        # a sync that fails after the commit leaves no row claiming the new version is synced, so the next
        # sync re-derives it; a row of a document no longer committed is dropped by the full sync on open
        pages._sync_one = lambda key, rec: (_ for _ in ()).throw(OSError("disk full"))  # a double: the failure
        rp.kb.ingest_text(_book("bob", 2, "global"), "b.md", "bob", "global")
        assert "bob/b.md" not in _checked_rows(root) and pages.errors
        pages._sync_one = real
        conn = sqlite3.connect(root / "book_pages_checked.sqlite")
        with conn:
            conn.execute("INSERT INTO checked (key, state) VALUES ('ghost/x.md', '[]')")
        conn.close()
        pages.sync()
        rows = _checked_rows(root)
        assert "bob/b.md" in rows and rows["bob/b.md"] != after["bob/b.md"] and "ghost/x.md" not in rows
        assert "SECRET-bob-2-global" in rp.search_book_pages(COMMON, "bob", floor=-1.0)[0].text
    finally:
        rp.kb.store.close()


def _book(owner: str, i: int, vis: str) -> str:
    return (f"# Part A {i}\n\n{COMMON} Marker SECRET-{owner}-{i}-{vis} belongs to {owner}.\n\n"
            f"# Part B {i}\n\nMore about the {COMMON.lower()}\n")


@pytest.mark.parametrize("engine", ["edge", "local"])
@given(docs=docs_strategy, requester=st.sampled_from(REQUESTERS))
@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_book_pages_access_policy(engine, shared_embedder, docs, requester):
    """Generated books, owners, visibilities and requesters (the KB property's generator): no page of
    another owner's private book reaches a requester, the owner role sees every book, and a hidden
    book answers like a missing one."""
    with tempfile.TemporaryDirectory() as tmp:
        rp = _retriever(tmp, shared_embedder, engine)
        try:
            keys = []
            for i, (owner, vis) in enumerate(docs):
                rp.kb.ingest_text(_book(owner, i, vis), f"book{i}.md", owner, vis)
                keys.append(f"{owner}/book{i}.md")
            visible = {k for k, (o, v) in zip(keys, docs) if v == "global" or o == requester}
            hidden_secrets = [f"SECRET-{o}-{i}-{v}" for i, (k, (o, v)) in enumerate(zip(keys, docs)) if k not in visible]
            res = rp.search_book_pages(COMMON, requester, top_k=20, floor=-1.0)
            assert {c.source for c in res} == visible  # every permitted book, nothing else
            for c in res:
                assert not any(s in c.text for s in hidden_secrets)
            owner_res = rp.search_book_pages(COMMON, OWNER, top_k=20, floor=-1.0)
            assert {c.source for c in owner_res} == set(keys)
            for k in keys + ["nobody/missing.md"]:
                if k in visible:
                    assert {c.source for c in rp.search_book_pages(COMMON, requester, within=k, floor=-1.0)} == {k}
                else:
                    for call in (lambda k=k: rp.search_book_pages(COMMON, requester, within=k),
                                 lambda k=k: rp.kb.book_pages.get_page(k, 1, requester)):
                        with pytest.raises(DocumentNotFound) as err:
                            call()
                        assert str(err.value) == f"no document {k!r}"
        finally:
            rp.kb.store.close()


def test_run_metrics_name_each_qdrant_engine(shared_embedder, tmp_path):
    """Issue 14 item 5: the KB runs the embedded edge engine in <data_dir>/qdrant, mem0 Qdrant's local
    mode in <data_dir>/memory/qdrant (no mem0 provider for edge): two engines, said so; with a
    server URL both name the same server and the run says they share it."""
    from adiyan.factory import describe_engines

    rp = _retriever(tmp_path, shared_embedder)
    try:
        s = load_settings(environ={}, overrides={"paths.data_dir": str(tmp_path)})
        e = describe_engines(s, kb=rp.kb)
        assert e["knowledge_base"]["engine"] == "edge" and e["knowledge_base"]["where"] == str(tmp_path / "qdrant")
        assert e["knowledge_base"]["collections"] == ["adiyan_knowledge_base", "adiyan_book_pages"]
        assert e["memory"] == {"engine": "local", "where": str(tmp_path / "memory" / "qdrant"), "used": False}
        assert e["shared"] is False
    finally:
        rp.kb.store.close()
    server = load_settings(environ={}, overrides={"paths.data_dir": str(tmp_path), "store.engine": "server",
                                                  "store.url": "http://qdrant.example:6333"})
    e = describe_engines(server)
    assert e["knowledge_base"]["where"] == e["memory"]["where"] == "http://qdrant.example:6333" and e["shared"] is True
