"""EPUB books (issue 23, item 10): each spine document a chapter unit, and the book in the book-pages collection.

The EPUBs are built here as the specification lays them out (a stored ``mimetype`` first,
``META-INF/container.xml``, an OPF package document with manifest and spine, and an EPUB 3
navigation document or an EPUB 2 NCX), with known words in every chapter.
"""

from __future__ import annotations

import io
import random
import time
import zipfile

import pytest

from adiyan.ingest import parse_document
from adiyan.kb.pages import PAGE_CHARS, book_pages
from tests.test_book_pages import _retriever, shared_embedder  # noqa: F401 - the fixture is used by name
from tests.test_parse import assert_refused, word_recall

CHAPTERS = [
    ("Arrival at the Harbour", ["The ferry left the harbour at dawn, loaded with crates of oranges.",
                                "Captain Ilse Marrow counted forty-two passengers on the upper deck."]),
    ("The Lighthouse Keeper", ["Old Tomas kept the lamp burning through the winter storms.",
                               "His logbook recorded every ship that passed the northern reef."]),
    ("Storm over the Reef", ["On the third night the wind tore the shutters from the lantern room.",
                             "By morning the reef had claimed two fishing boats but no lives."]),
]
WORDS = ("harbour ferry lantern reef keeper storm island captain passengers oranges winter logbook ship "
         "morning boats lamp shutters wind fishing deck crates dawn northern night lives old").split()


def _xhtml(title: str, paragraphs: list[str], heading: bool = True) -> str:
    body = (f"<h1>{title}</h1>" if heading else "") + "".join(f"<p>{p}</p>" for p in paragraphs)
    return ('<?xml version="1.0" encoding="utf-8"?>\n<!DOCTYPE html>\n<html xmlns="http://www.w3.org/1999/xhtml" '
            f'xmlns:epub="http://www.idpf.org/2007/ops"><head><title>Book</title></head><body><section '
            f'epub:type="chapter">{body}</section></body></html>')


def build_epub(chapters=CHAPTERS, *, version: int = 3, cover: bool = True, encrypted: bool = False,
               headings: bool = True) -> bytes:
    """An EPUB 3 (nav document) or EPUB 2 (NCX) with a picture-only cover and one XHTML file per chapter."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(zipfile.ZipInfo("mimetype"), "application/epub+zip")  # stored, first: as the spec asks
        z.writestr("META-INF/container.xml", '<?xml version="1.0"?><container version="1.0" '
                   'xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles><rootfile '
                   'full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/></rootfiles></container>')
        items, spine, nav_links, ncx_points = [], [], [], []
        if cover:
            z.writestr("OEBPS/text/cover.xhtml", '<html xmlns="http://www.w3.org/1999/xhtml"><body>'
                       '<img src="../images/cover.png" alt=""/></body></html>')
            items.append('<item id="cover" href="text/cover.xhtml" media-type="application/xhtml+xml"/>')
            spine.append('<itemref idref="cover"/>')
        for i, (title, paragraphs) in enumerate(chapters, start=1):
            name = f"text/ch{i:03d}.xhtml"
            z.writestr(f"OEBPS/{name}", _xhtml(title, paragraphs, headings))
            items.append(f'<item id="ch{i}" href="{name}" media-type="application/xhtml+xml"/>')
            spine.append(f'<itemref idref="ch{i}"/>')
            nav_links.append(f'<li><a href="{name}#start">{title}</a></li>')
            ncx_points.append(f'<navPoint id="p{i}" playOrder="{i}"><navLabel><text>{title}</text></navLabel>'
                              f'<content src="{name}"/></navPoint>')
        if version == 3:
            z.writestr("OEBPS/nav.xhtml", '<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub='
                       '"http://www.idpf.org/2007/ops"><body><nav epub:type="toc"><ol>' + "".join(nav_links)
                       + "</ol></nav></body></html>")
            items.append('<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>')
            toc = ""
        else:
            z.writestr("OEBPS/toc.ncx", '<?xml version="1.0"?><ncx xmlns="http://www.daisy.org/z3986/2005/ncx/" '
                       'version="2005-1"><navMap>' + "".join(ncx_points) + "</navMap></ncx>")
            items.append('<item id="ncx" href="toc.ncx" media-type="application/x-dtbncx+xml"/>')
            toc = ' toc="ncx"'
        if encrypted:
            z.writestr("META-INF/encryption.xml", '<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container" '
                       'xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData><enc:EncryptionMethod '
                       'Algorithm="http://www.w3.org/2001/04/xmlenc#aes128-cbc"/><enc:CipherData><enc:CipherReference '
                       'URI="OEBPS/text/ch001.xhtml"/></enc:CipherData></enc:EncryptedData></encryption>')
        z.writestr("OEBPS/content.opf", f'<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" '
                   f'version="{version}.0" unique-identifier="id"><metadata xmlns:dc="http://purl.org/dc/elements/1.1/">'
                   '<dc:title>The Reef</dc:title></metadata><manifest>' + "".join(items) + f"</manifest><spine{toc}>"
                   + "".join(spine) + "</spine></package>")
    return out.getvalue()


def _all_text(chapters=CHAPTERS) -> str:
    return " ".join(f"{title} {' '.join(paragraphs)}" for title, paragraphs in chapters)


@pytest.mark.parametrize("version", [3, 2])
def test_epub_chapters_are_units_titled_by_the_table_of_contents(version):
    parsed = parse_document(build_epub(version=version), "reef.epub")
    report = parsed.report
    recall = word_recall(parsed.text, _all_text())
    print(f"EPUB {version}: recall {recall:.3f}, units {[(u.unit, u.kind, u.tier, u.chars, u.title) for u in report.units]}")
    assert recall == 1.0
    assert report.format == "epub" and not report.authored_markdown
    assert [(u.unit, u.kind, u.tier, u.title) for u in report.units] == [(1, "chapter", "", None)] + [
        (n, "chapter", "docling", title) for n, (title, _) in enumerate(CHAPTERS, start=2)]
    assert [(w.code, w.unit) for w in report.warnings] == [("empty_chapter", 1)]  # the picture-only cover
    for unit, (_, paragraphs) in zip(report.units[1:], CHAPTERS):  # each unit's text is its chapter's, whole
        assert unit.quality["word_share"] is None or unit.quality["word_share"] > 0.8


def test_chapter_without_a_toc_entry_is_titled_by_its_first_heading():
    data = build_epub(version=3)
    broken = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(broken, "w") as dst:
        for info in src.infolist():  # a navigation document that lists nothing
            body = src.read(info)
            dst.writestr(info, b'<html xmlns="http://www.w3.org/1999/xhtml"><body/></html>'
                         if info.filename == "OEBPS/nav.xhtml" else body)
    parsed = parse_document(broken.getvalue(), "reef.epub")
    assert [u.title for u in parsed.report.units[1:]] == [title for title, _ in CHAPTERS]


@pytest.mark.slow
def test_three_hundred_page_epub_is_a_book_of_chapter_pages():
    """The seed's 300-page book as an EPUB: 30 chapters of ten pages each; pages never span two chapters.
    Slow: Docling's HTML backend takes ~0.5 s per 26,000-character chapter here (~20 s in all)."""
    rng = random.Random(23)
    chapters = []
    for c in range(1, 31):
        paragraphs = [" ".join(rng.choice(WORDS) for _ in range(60)).capitalize() + f". Chapter {c} fact {p}."
                      for p in range(60)]  # ~26,000 characters: ten pages cut at paragraph breaks
        chapters.append((f"Chapter {c}: The Reef, part {c}", paragraphs))
    data = build_epub(chapters, cover=False)
    started = time.perf_counter()
    parsed = parse_document(data, "big.epub", max_bytes=len(data))
    seconds = time.perf_counter() - started
    pages = book_pages(parsed.text, parsed.report.to_dict(), min_pdf_pages=10)
    print(f"300-page EPUB: {len(data)} bytes, {len(parsed.text)} chars, {len(pages)} pages, parsed in {seconds:.1f} s")
    assert word_recall(parsed.text, _all_text(chapters)) == 1.0
    assert len(parsed.report.units) == 30 and {u.kind for u in parsed.report.units} == {"chapter"}
    assert len(parsed.text) / PAGE_CHARS <= len(pages) and 270 <= len(pages) <= 330
    assert [p.number for p in pages] == list(range(1, len(pages) + 1))
    assert all(len(p.text) <= PAGE_CHARS for p in pages)
    for page in pages:  # each page's chapter is the one its text comes from, and the page lies inside it
        number = int(page.chapter.split(":")[0].split()[1])
        assert f"Chapter {number} fact" in page.text or page.text.startswith(f"# Chapter {number}:")
        assert not any(f"Chapter {other} fact" in page.text for other in range(1, 31) if other != number)
    assert {p.chapter for p in pages} == {title for title, _ in chapters}


def test_epub_goes_to_the_book_pages_collection_with_its_chapters(shared_embedder, tmp_path):  # noqa: F811
    rp = _retriever(tmp_path, shared_embedder)
    try:
        rp.kb.ingest_document(build_epub(), "reef.epub", "alice", "private")
        res = rp.search_book_pages("Who kept the lamp burning through the winter?", "alice", top_k=3, floor=-1.0)
        assert res and res[0].payload["chapter"] == "The Lighthouse Keeper" and "Tomas" in res[0].text
        assert rp.search_book_pages("lamp", "bob", floor=-1.0) == []  # private: hidden from others
    finally:
        rp.kb.store.close()


def test_drm_protected_epub_is_refused_by_name():
    assert_refused(build_epub(encrypted=True), "locked.epub", "encrypted_epub", match="DRM-protected: 1 of its 4 chapters")


def test_a_zip_that_is_not_an_epub_is_refused():
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("notes.txt", "hello")
    assert_refused(out.getvalue(), "book.epub", "unreadable_epub", match="no META-INF/container.xml")
    assert_refused(b"plain text, not a zip", "book.epub", "not_a_zip")


def test_epub_that_unpacks_too_large_is_refused():
    """A zip bomb dressed as a book: a chapter of 2 MB of one repeated sentence packs into a few KiB."""
    data = build_epub([("Filler", ["All work and no play. " * 100_000])], cover=False)
    assert len(data) < 20_000
    assert_refused(data, "reef.epub", "archive_limit", match="unpacks to .* over 10 times", max_bytes=100_000)
