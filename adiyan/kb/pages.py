"""The fourth collection, ``<prefix>book_pages``: long multi-chapter documents, page by page.

A committed document is a **book** when it is a PDF of at least ``ingest.book_min_pages`` pages,
an EPUB of at least two chapters (or of at least ``ingest.book_min_pages`` pages), or its parsed
Markdown (Markdown, DOCX, ...) has at least two top-level chapters: headings at the shallowest
heading level it uses (a Markdown book is ``# Title`` + ``# Chapter 1`` ...; Docling
renders a DOCX's Heading 1 one level below its Title, so a DOCX with a Title counts its Title
only). Its **pages** are the parser's page units for a PDF (the parser joins the pages' texts
with a blank line and records each page's length, so page n is recovered exactly), for an EPUB
windows of ``PAGE_CHARS`` within each chapter unit (recovered the same way; a page never spans
two chapters, and its ``chapter`` is the unit's table-of-contents title) and, for everything
else, fixed windows of ``PAGE_CHARS`` characters of the text, each cut back to its
last paragraph break (else its last blank) so no word is split.

Each page is stored as passages (the knowledge base's chunking config, applied within the page,
so the embedder sees text it can read whole). Every point carries the KB chunk payload
(``source_filename``, ``owner_identity``, ``visibility``, ``ingested_at``, ``doc_version``, text)
plus ``page``, ``page_count``, ``chapter`` and ``heading_path`` (at the passage's start).

Access is the knowledge base's, applied the same way: the access filter inside the engine query
(owner role bypasses it) and the committed-version gate (:func:`adiyan.kb.policy.committed_only`),
so a page is shown only while its document's committed record names its version, visibility and
owner; a hidden book answers exactly like a missing one (:class:`adiyan.kb.DocumentNotFound`).
Pages are derived from the committed record (its stored text and report), written right after
the KB's commit (:meth:`BookPages.sync`) and re-derived when the KB is opened, so an index
built before this collection existed, or a crash between the commit and the sync, is repaired.
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3
import threading
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from ..chunking import chunk_text
from ..cache import embedder_identity
from . import DocumentNotFound
from .policy import access_filter, committed_only
from ..store.base import Cond, Filter, Point
from ..types import OWNER, Requester, RetrievedChunk

log = logging.getLogger(__name__)
PAGE_CHARS = 3000  # a Markdown / DOCX "page": about one printed page (~500 words)
_POINT_NS = uuid.UUID("0b7e3c55-8f1d-4a2b-b6b9-2f0c9d41a7e3")
_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
_PDF_CHAPTER = re.compile(r"^(?:#+\s*)?((?:chapter|part)\s+[\w.:-]+.*)$", re.IGNORECASE | re.MULTILINE)
GATE_ROUNDS = 4
# Formats whose chapters make a book (a deck's slides or a sheet's tabs are not chapters); "text" is
# ingest_text's, text written by a person
CHAPTER_FORMATS = ("markdown", "text", "docx", "doc", "rtf")
RULES = 3  # bump when what makes a book or a page changes: every book is then re-derived on open


@dataclass(frozen=True)
class Page:
    number: int  # 1-based, the parser's page number for a PDF
    start: int  # offset of the page in the document's text
    text: str
    chapter: str | None = None  # an EPUB page: its chapter unit's title (else chapters come from headings)


def headings(text: str, pdf: bool = False) -> list[tuple[int, int, str]]:
    """(offset, level, title) of every heading; in a PDF (no Markdown headings from the native
    parser) the lines that start with "Chapter ..." / "Part ..." are chapters."""
    if pdf:
        return [(m.start(), 1, m.group(1).strip()) for m in _PDF_CHAPTER.finditer(text)]
    return [(m.start(), len(m.group(1)), m.group(2).strip()) for m in _HEADING.finditer(text)]


def top_level_chapters(text: str) -> list[str]:
    """The headings at the shallowest level the text uses."""
    hs = headings(text)
    if not hs:
        return []
    top = min(level for _, level, _ in hs)
    return [title for _, level, title in hs if level == top]


def unit_spans(text: str, report: dict, kind: str) -> list[tuple[dict, int, str]] | None:
    """(unit, offset, text) of each ``kind`` unit with text: the parser joins them with a blank line and
    records each one's length; None when the units do not add up to the text."""
    units = [u for u in report.get("units", []) if u.get("kind") == kind]
    spans, pos = [], 0
    for u in units:
        n = int(u.get("chars", 0))
        if n <= 0:
            continue  # an empty unit contributed nothing to the text
        if spans:
            if text[pos:pos + 2] != "\n\n":
                return None
            pos += 2
        spans.append((u, pos, text[pos:pos + n]))
        pos += n
    return spans if spans and pos == len(text) else None


def pdf_pages(text: str, report: dict) -> list[Page] | None:
    """The PDF's pages from the parser's units; None when the units do not add up to the text."""
    spans = unit_spans(text, report, "page")
    return [Page(int(u["unit"]), start, body) for u, start, body in spans] if spans else None


def epub_pages(text: str, report: dict, size: int = PAGE_CHARS) -> list[Page]:
    """Windows of ``size`` within each chapter unit, numbered through the book; [] when the units do not add up."""
    pages: list[Page] = []
    for u, start, body in unit_spans(text, report, "chapter") or []:
        for w in window_pages(body, size):
            pages.append(Page(len(pages) + 1, start + w.start, w.text, u.get("title") or f"Chapter {u['unit']}"))
    return pages


def window_pages(text: str, size: int = PAGE_CHARS) -> list[Page]:
    """Fixed windows of ``size`` characters, each cut back to its last paragraph break (past
    half the window), else its last blank, so pages end between paragraphs or words."""
    pages, start, n = [], 0, 0
    while start < len(text):
        end = min(start + size, len(text))
        if end < len(text):
            cut = text.rfind("\n\n", start + size // 2, end - 1)
            if cut != -1:
                cut += 2  # the blank line ends this page
            else:
                cut = max(text.rfind(" ", start + size // 2, end), text.rfind("\n", start + size // 2, end))
            end = cut if cut > start else end
        body = text[start:end]
        if body.strip():
            n += 1
            pages.append(Page(n, start, body))
        start = end
    return pages


def book_pages(text: str, report: dict, min_pdf_pages: int, page_chars: int = PAGE_CHARS) -> list[Page]:
    """The pages of a book, or [] when the document is not one."""
    if report.get("format") == "pdf":
        n_units = sum(1 for u in report.get("units", []) if u.get("kind") == "page")
        if n_units < min_pdf_pages:
            return []
        return pdf_pages(text, report) or window_pages(text, page_chars)
    if report.get("format") == "epub":
        pages = epub_pages(text, report, page_chars)
        chapters = len(unit_spans(text, report, "chapter") or [])
        return pages if chapters >= 2 or len(pages) >= min_pdf_pages else []
    if report.get("format") in CHAPTER_FORMATS and len(top_level_chapters(text)) >= 2:
        return window_pages(text, page_chars)
    return []


def heading_path_at(hs: list[tuple[int, int, str]], offset: int) -> list[str]:
    """The heading path in effect at ``offset`` (headings starting at or before it)."""
    stack: list[tuple[int, str]] = []
    for pos, level, title in hs:
        if pos > offset:
            break
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, title))
    return [t for _, t in stack]


class BookPages:
    """The book-pages collection of one knowledge base (attached by ``adiyan.factory.open_kb``)."""

    def __init__(self, kb, *, collection: str, min_pdf_pages: int, page_chars: int = PAGE_CHARS):
        self.kb = kb
        self.collection = collection
        self.min_pdf_pages = min_pdf_pages
        self.page_chars = page_chars
        self.errors: list[str] = []  # syncs that failed (the KB's commit stands; the next open retries)
        # key -> [doc_version, visibility, owner, min_pdf_pages, page_chars, RULES] already synced: opening a large KB
        # re-derives nothing that did not change (a lost or stale row only costs a re-check). A table, so a
        # sync reads and writes only its own keys (it was one JSON file read and rewritten whole by every
        # sync: quadratic in the collection's size, 30% of the write path at 150,000 documents)
        self._checked_db = kb.raw.root / "book_pages_checked.sqlite"
        self._legacy_checked = kb.raw.root / "book_pages_checked.json"
        self._guard = threading.Lock()
        self._prepare_checked()  # once per open, not on each of a sync's connections (the ingest hot path)
        kb.store.ensure_collection(collection, dim=kb.embedder.dim, embedder_id=embedder_identity(kb.embedder),
                                   normalized=kb.embedder.normalized)

    # -- write: pages follow the committed records --------------------------------------------
    def sync(self, keys: Iterable[str] | None = None) -> dict[str, int]:
        """Make the pages of ``keys`` (every committed document when None) those of the committed
        version: {key: pages written} for the books (re)written. Never raises: the KB's commit is
        already made; a failure is logged, kept in ``errors`` and retried when the KB is next opened."""
        keys_all = keys is None
        if keys_all:
            records = {r.source_key: r for r in self.kb.raw.list(OWNER)}
            keys = list(records)
        else:
            keys = list(dict.fromkeys(keys))
            records = {k: r for k in keys if (r := self.kb.raw.get(k, OWNER)) is not None}
        written = {}
        with self._guard:
            checked = self._read_checked(None if keys_all else keys)
        todo: list[tuple[str, object, str | None]] = []  # (key, committed record or None, its state)
        for key in keys:
            rec = records.get(key)
            state = (json.dumps([rec.doc_version, rec.visibility, rec.owner_identity, self.min_pdf_pages,
                                 self.page_chars, RULES]) if rec else None)
            if state is None or checked.get(key) != state:
                todo.append((key, rec, state))
        if keys_all:  # rows of documents no longer committed (a crash after a removal): their pages go too
            todo += [(key, None, None) for key in checked if key not in records]
        # forget the old state before touching the pages, so a crash in between re-derives them on the next
        # open instead of trusting a row that no longer describes the collection
        self._write_checked(delete=[key for key, _, _ in todo if key in checked])
        done: list[tuple[str, str]] = []
        for key, rec, state in todo:
            try:
                n = self._sync_one(key, rec)
            except Exception as exc:  # noqa: BLE001 - see the docstring: logged, kept, retried on open
                msg = f"{key!r}: book pages not updated: {type(exc).__name__}: {exc}"
                log.warning(msg)
                self.errors.append(msg)
                continue
            if n:
                written[key] = n
            if state is not None:
                done.append((key, state))
        self._write_checked(insert=done)
        return written

    def _write_checked(self, *, delete: list[str] = (), insert: list[tuple[str, str]] = ()) -> None:
        if not delete and not insert:
            return
        with self._guard:
            conn = self._connect()
            try:
                with conn:  # one transaction
                    conn.executemany("DELETE FROM checked WHERE key = ?", [(k,) for k in delete])
                    conn.executemany("INSERT OR REPLACE INTO checked (key, state) VALUES (?, ?)", insert)
            finally:
                conn.close()

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self._checked_db, timeout=60)

    def _prepare_checked(self) -> None:
        """The table, and the JSON file of earlier versions imported into it once, then removed."""
        conn = self._connect()
        try:
            conn.execute("CREATE TABLE IF NOT EXISTS checked (key TEXT PRIMARY KEY, state TEXT NOT NULL)")
            if self._legacy_checked.exists():
                try:
                    old = json.loads(self._legacy_checked.read_text())
                except (OSError, ValueError):  # gone (another process imported it) or unreadable: a re-check
                    old = {}
                rows = [(k, json.dumps(v)) for k, v in old.items()] if isinstance(old, dict) else []
                with conn:
                    conn.executemany("INSERT OR IGNORE INTO checked (key, state) VALUES (?, ?)", rows)
                self._legacy_checked.unlink(missing_ok=True)
        finally:
            conn.close()

    def _read_checked(self, keys: list[str] | None) -> dict[str, str]:
        """{key: state as JSON} of ``keys`` (every key when None)."""
        conn = self._connect()
        try:
            if keys is None:
                return dict(conn.execute("SELECT key, state FROM checked"))
            out: dict[str, str] = {}
            for i in range(0, len(keys), 500):
                part = keys[i:i + 500]
                out.update(conn.execute(f"SELECT key, state FROM checked WHERE key IN ({','.join('?' * len(part))})",
                                        part))
            return out
        finally:
            conn.close()

    def _sync_one(self, key: str, rec) -> int:
        mine = Filter(must=(Cond("source_filename", key),))
        if rec is None:
            self.kb.store.delete(self.collection, mine)
            return 0
        text = self.kb.raw.read_blob(rec.text_sha256, ".md").decode("utf-8")
        points = self._points(rec, text)
        self.kb.store.delete(self.collection, mine)
        if points:
            self.kb.store.upsert(self.collection, points)
            self._tag_kb_chunks(rec, text)
        return len({p.payload["page"] for p in points})

    def _tag_kb_chunks(self, rec, text: str) -> None:
        """Give the book's knowledge-base chunks their page too (``page`` in the payload), so answers
        from the KB read paths name the page (``adiyan ask``'s sources): a chunk's page is the one
        holding its longest line (chunk texts may carry a heading-path prefix, so not its start)."""
        pages = book_pages(text, rec.report, self.min_pdf_pages, self.page_chars)
        ends = [p.start + len(p.text) for p in pages]
        version = Filter(must=(Cond("source_filename", rec.source_key), Cond("doc_version", rec.doc_version)))
        by_page: dict[int, list[int]] = {}
        for point in self.kb.store.scroll(self.kb.collection, flt=version):
            line = max(point.payload.get("text", "").splitlines() or [""], key=len)
            at = text.find(line) if line.strip() else -1
            if at >= 0:
                number = next((p.number for p, end in zip(pages, ends) if at < end), pages[-1].number)
                by_page.setdefault(number, []).append(point.payload["chunk_index"])
        for number, indexes in by_page.items():  # one engine update per page
            self.kb.store.set_payload(self.kb.collection, {"page": number}, version.and_(
                Filter(should=tuple(Cond("chunk_index", i) for i in indexes))))

    def _points(self, rec, text: str) -> list[Point]:
        pages = book_pages(text, rec.report, self.min_pdf_pages, self.page_chars)
        if not pages:
            return []
        hs = headings(text, pdf=rec.report.get("format") == "pdf")
        chapter_level = min((lv for _, lv, _ in hs), default=1)
        passages = []
        for page in pages:
            for c in chunk_text(page.text, self.kb.chunking, embedder=self.kb.embedder, authored_markdown=False):
                path = heading_path_at(hs, page.start + max(c.start, 0))
                chapter = page.chapter or next((t for _, lv, t in reversed(
                    [h for h in hs if h[0] <= page.start + max(c.start, 0)]) if lv == chapter_level), None)
                passages.append((page.number, chapter, path, c.text))
        vectors = self.kb.embedder.embed([t for *_, t in passages], "document")
        out = []
        for i, ((number, chapter, path, body), vec) in enumerate(zip(passages, vectors)):
            out.append(Point(str(uuid.uuid5(_POINT_NS, f"{rec.source_key}\x00{rec.doc_version}\x00{i}")), vec, {
                "source_filename": rec.source_key, "chunk_index": i, "ingested_at": rec.ingested_at,
                "owner_identity": rec.owner_identity, "visibility": rec.visibility, "doc_version": rec.doc_version,
                "text": body, "page": number, "page_count": len(pages), "chapter": chapter,
                "heading_path": path}))
        return out

    # -- read: the book-pages read path ---------------------------------------------------------
    def search(self, query: str, requester: Requester | str | None, k: int = 5, *,
               within: str | None = None, floor: float | None = None, ef: int | None = None,
               exact: bool = False) -> list[RetrievedChunk]:
        """The k best *pages* for ``query`` that the requester may see: one result per (book, page),
        its best passage as text, ``page`` / ``chapter`` / ``heading_path`` in the payload.

        ``within`` one book: DocumentNotFound when it is missing or hidden (same message)."""
        if within is not None:
            self.kb.record(within, requester)  # hidden == missing
        flt = access_filter(requester)
        if within is not None:
            within_flt = Filter(must=(Cond("source_filename", within),))
            flt = within_flt if flt is None else flt.and_(within_flt)
        qv = self.kb.embedder.embed([query], "query")[0]
        fetch = 4 * k
        for _ in range(GATE_ROUNDS):
            hits = self.kb.store.search(self.collection, qv, fetch, flt=flt, ef=ef, exact=exact)
            kept, _stale = committed_only(hits, self.kb.raw.committed)
            pages: dict[tuple[str, int], RetrievedChunk] = {}
            for h in kept:
                if floor is not None and h.score < floor:
                    continue
                pages.setdefault((h.payload["source_filename"], int(h.payload["page"])), RetrievedChunk.from_hit(h))
            if len(pages) >= k or len(hits) < fetch:
                break
            fetch *= 4
        return list(pages.values())[:k]

    def get_page(self, source: str, page: int, requester: Requester | str | None) -> dict:
        """Page ``page`` of a book: {source, page, page_count, chapter, heading_path, text}.

        DocumentNotFound when the book is missing or hidden (same message), or has no such page."""
        rec = self.kb.record(source, requester)
        flt = Filter(must=(Cond("source_filename", source), Cond("doc_version", rec.doc_version),
                           Cond("page", int(page))))
        parts = sorted(self.kb.store.scroll(self.collection, flt=flt), key=lambda p: p.payload["chunk_index"])
        if not parts:
            raise DocumentNotFound(f"no page {page} in {source!r}")
        text = self.kb.raw.read_blob(rec.text_sha256, ".md").decode("utf-8")  # the page again, exactly
        pages = book_pages(text, rec.report, self.min_pdf_pages, self.page_chars)
        body = next(pg.text for pg in pages if pg.number == int(page))
        first = parts[0].payload
        return {"source": source, "page": int(page), "page_count": first["page_count"], "chapter": first["chapter"],
                "heading_path": first["heading_path"], "text": body}


__all__ = ["PAGE_CHARS", "BookPages", "DocumentNotFound", "Page", "book_pages", "epub_pages", "pdf_pages",
           "top_level_chapters", "unit_spans", "window_pages"]
