"""parse_document on the shared document corpus, and on every kind of bad input.

Every corpus file with a reference Markdown (Docling's groundtruth, shipped beside the sources)
must parse and recover at least its measured share of the reference's words (``RECALL_FLOORS``);
the two PDFs without one must yield text on every page. Bad inputs are built here. The formats
issue 13 added (encodings, XLSX/CSV, e-mail, archives, legacy Office, encrypted PDFs, more
image types, DOCX that Docling fails on) are tested in ``test_formats_*.py``.
"""

from __future__ import annotations

import collections
import functools
import io
import json
import os
import random
import re
import shutil
import zipfile
from pathlib import Path

import pytest
from PIL import Image, ImageDraw, ImageFont

from adiyan.ingest import ParseError, parse_document
from adiyan.ingest.ocr import OcrUnavailable, recognize
from adiyan.ingest.quality import measure

DOCS = Path(__file__).parents[1].parent / "shared/datasets/documents"
# Word recall measured on this corpus with the parser of issue 13 (docling 2.143, python-pptx 1.0.2),
# minus about 0.01 and rounded down; every file not listed measured 1.000 and has the floor 0.99.
# Measured: 2305.03393v1-pg9 0.967, code_and_formula 0.993, multi_page 0.999, picture_classification
# 0.995, redp5110_sampled 1.000, right_to_left_01/02/03 0.987/0.965/0.964, table_mislabeled_as_picture
# 0.968; powerpoint_comments 0.578, powerpoint_sample 0.971, pptx_chart 0.867; wiki_duck 0.993;
# escaped_characters 0.971.
RECALL_FLOORS = {
    "pdf/2305.03393v1-pg9.pdf": 0.95, "pdf/code_and_formula.pdf": 0.98, "pdf/multi_page.pdf": 0.98,
    "pdf/picture_classification.pdf": 0.98, "pdf/redp5110_sampled.pdf": 0.98, "pdf/right_to_left_01.pdf": 0.97,
    "pdf/right_to_left_02.pdf": 0.95, "pdf/right_to_left_03.pdf": 0.95, "pdf/table_mislabeled_as_picture.pdf": 0.95,
    # The reference includes the deck's review comments (authors, dates, text: all 65 missing words),
    # which are not slide content and are not read (pptx_text.py).
    "pptx/powerpoint_comments.pptx": 0.56,
    "pptx/powerpoint_sample.pptx": 0.96,
    "pptx/pptx_chart.pptx": 0.85,  # the reference names the chart type ("bar chart", "other"); we do not
    "html/wiki_duck.html": 0.98, "md/escaped_characters.md": 0.96,
}
DEFAULT_FLOOR = 0.99
# Pages whose text layer fails the quality check (issue 23) and the tier that reads them instead:
# page 3 of the Redbook has a "Highlights" box whose font has no Unicode map (228 U+FFFD from
# Docling, control codes from PDFium: 19% / 16% of the page); OCR reads it.
FALLBACK_PAGES = {"pdf/redp5110_sampled.pdf": {3: "ocr:rapidocr"}}


def word_recall(extracted: str, reference: str) -> float:
    """Share of the reference's words found in the extraction, counting repeats (multiset recall).

    Words are lowercase alphanumeric runs; HTML comments (Docling's ``<!-- image -->``) are not words.
    """
    def words(text: str) -> collections.Counter:
        return collections.Counter(re.findall(r"[^\W_]+", re.sub(r"<!--.*?-->", " ", text, flags=re.S).lower()))

    want, got = words(reference), words(extracted)
    total = sum(want.values())
    return sum(min(n, got[w]) for w, n in want.items()) / total if total else 1.0


def groundtruth(source: Path) -> Path | None:
    """Reference Markdown: ``<name>.md`` (DOCX/HTML/MD/PPTX) or ``<stem>.md`` (PDF)."""
    for name in (source.name + ".md", source.stem + ".md"):
        if (path := source.parent.parent / "groundtruth" / name).exists():
            return path
    return None


def sources(*formats: str, with_groundtruth: bool | None = None) -> list:
    paths = [p for fmt in formats for p in sorted((DOCS / fmt / "sources").glob("*"))]
    if with_groundtruth is not None:
        paths = [p for p in paths if (groundtruth(p) is not None) == with_groundtruth]
    return [pytest.param(p, id=f"{p.parent.parent.name}/{p.name}") for p in paths]


def render_text(text: str, size=(1400, 260)) -> Image.Image:
    """Black text on white, in DejaVu Sans when the system has it."""
    fonts = sorted(Path("/usr/share/fonts").rglob("DejaVuSans-Bold.ttf"))
    font = ImageFont.truetype(str(fonts[0]), 72) if fonts else ImageFont.load_default(size=72)
    image = Image.new("RGB", size, "white")
    ImageDraw.Draw(image).text((40, 80), text, fill="black", font=font)
    return image


def image_bytes(image: Image.Image, fmt: str, **kwargs) -> bytes:
    out = io.BytesIO()
    image.save(out, format=fmt, **kwargs)
    return out.getvalue()


def build_pdf(objects: list[bytes], trailer_extra: bytes = b"") -> bytes:
    """A well-formed PDF (correct xref offsets) from numbered object bodies; object 1 is the catalog."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R %s>>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, trailer_extra, xref)
    return bytes(out)


def text_pdf_objects(text: bytes) -> list[bytes]:
    content = b"BT /F1 24 Tf 72 700 Td (%s) Tj ET" % text
    return [b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
            b" /Resources << /Font << /F1 5 0 R >> >> >>",
            b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content),
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]


def assert_refused(data: bytes, filename: str, code: str, *, match: str = "", **kwargs) -> ParseError:
    with pytest.raises(ParseError) as info:
        parse_document(data, filename, **kwargs)
    error = info.value
    assert str(error).startswith(f"{filename}: "), str(error)
    assert error.code == code, str(error)
    assert re.search(match, error.reason), error.reason
    return error


# ----------------------------------------------------------------------------- the corpus


def test_corpus_is_present():
    """Guards the parametrized tests below against passing by collecting nothing."""
    counts = {fmt: len(list((DOCS / fmt / "sources").glob("*"))) for fmt in ("docx", "html", "md", "pdf", "pptx")}
    assert all(counts.values()), counts


@functools.cache
def parse_corpus_file(source: Path):
    """One parse per corpus file per session (the Redbook's OCR'd page costs seconds; two tests read it)."""
    return parse_document(source.read_bytes(), source.name)


@pytest.mark.parametrize("source", sources("docx", "html", "md", "pdf", "pptx", with_groundtruth=True))
def test_documents_recover_their_reference_words(source: Path):
    """A parser that refuses a file, or loses its text, fails here: each file has its own floor."""
    parsed = parse_corpus_file(source)
    key = f"{source.parent.parent.name}/{source.name}"
    recall = word_recall(parsed.text, groundtruth(source).read_text(encoding="utf-8"))
    report = parsed.report
    print(f"{key}: word recall {recall:.3f} (floor {RECALL_FLOORS.get(key, DEFAULT_FLOOR)}), {len(report.units)} "
          f"units, tiers {sorted(report.tiers)}, warnings {[(w.code, w.unit) for w in report.warnings]}")
    assert recall >= RECALL_FLOORS.get(key, DEFAULT_FLOOR)
    assert report.total_chars == len(parsed.text) > 0
    assert report.authored_markdown == (source.suffix == ".md")
    assert [u.unit for u in report.units] == list(range(1, len(report.units) + 1))
    warned = {w.unit for w in report.warnings}
    for unit in report.units:  # every unit gave text, or is named in a warning
        assert unit.chars > 0 or unit.unit in warned, unit
    expected_tiers = {".md": {"markdown"}, ".pptx": {"python-pptx"}}.get(source.suffix, {"docling"})
    fallbacks = FALLBACK_PAGES.get(key, {})
    assert report.tiers == expected_tiers | set(fallbacks.values())
    assert {u.unit: u.tier for u in report.units if u.tier and u.tier not in expected_tiers} == fallbacks
    assert {w.unit for w in report.warnings if w.code == "garbled_text_layer"} == set(fallbacks)
    for unit in report.units:  # the quality figures of every unit, and none stored as garbage
        assert unit.quality is not None and unit.quality["replacement_share"] <= 0.05, unit
    if source.suffix == ".md":
        assert parsed.text == source.read_text(encoding="utf-8")  # authored Markdown is kept as written
    if source.suffix == ".pptx":
        assert all(f"## Slide {u.unit}" in parsed.text for u in report.units if u.chars)


def test_every_corpus_file_with_a_reference_is_scored():
    """The recall test above covers 94 files (DOCX 33, HTML 32, MD 10, PDF 11, PPTX 8); a renamed groundtruth
    must not drop one silently."""
    scored = sources("docx", "html", "md", "pdf", "pptx", with_groundtruth=True)
    assert len(scored) == 94, len(scored)
    assert set(RECALL_FLOORS) <= {f"{p.values[0].parent.parent.name}/{p.values[0].name}" for p in scored}


@pytest.mark.parametrize("source", sources("docx", "html", "md", with_groundtruth=False))
def test_sources_without_reference_still_yield_text(source: Path):
    """The corpus' one such file is a PNG among the HTML sources: it is read by OCR."""
    parsed = parse_document(source.read_bytes(), source.name)
    print(f"{source.name}: {parsed.report.total_chars} chars by {sorted(parsed.report.tiers)}")
    assert parsed.text.strip()
    if parsed.report.format == "image":
        assert parsed.report.tiers == {"ocr:rapidocr"}
        assert "docling" in parsed.text.lower()  # the word the picture shows largest


@pytest.mark.parametrize(("name", "pages", "garbled"), [("skipped_1page.pdf", 3, 2), ("skipped_2pages.pdf", 4, 3)])
def test_pdfs_without_reference_yield_text_on_every_page(name, pages, garbled):
    """Korean report pages with no groundtruth: every page has text, and the figure's English labels are read.

    One page's figure labels use a font Docling maps only in part: 10% of its characters came out as
    U+FFFD ("블록�인" for 블록체인, blockchain); PDFium maps them (4% unmapped), so PDFium's text is kept."""
    source = DOCS / "pdf/sources" / name
    parsed = parse_document(source.read_bytes(), source.name)
    assert [(u.unit, u.tier) for u in parsed.report.units] == [
        (n, "pdfium" if n == garbled else "docling") for n in range(1, pages + 1)]
    assert all(u.chars > 0 for u in parsed.report.units)
    assert [(w.code, w.unit) for w in parsed.report.warnings] == [("garbled_text_layer", garbled)]
    (rejected,) = parsed.report.units[garbled - 1].rejected
    assert rejected["tier"] == "docling" and rejected["quality"]["replacement_share"] > 0.05
    for label in ("(Blockchain)", "(Edge Computing)", "(Next AI)", "보안기술", "블록체인", "엣지컴퓨팅"):
        assert label in parsed.text, label


def test_pdf_page_without_text_layer_is_reported_by_number():
    """Page 17 of this IBM Redbook sample is blank: rendered, OCR'd, and still named as empty (page 3's
    garbled box: ``FALLBACK_PAGES``)."""
    report = parse_corpus_file(DOCS / "pdf/sources/redp5110_sampled.pdf").report
    assert [(w.code, w.unit) for w in report.warnings] == [("garbled_text_layer", 3), ("empty_page", 17)]
    assert report.units[16].chars == 0 and report.units[16].tier == ""
    assert [r["problem"] for r in report.units[16].rejected] == ["no text"] * 3
    assert {u.tier for u in report.units if u.unit not in (3, 17)} == {"docling"}


# ----------------------------------------------------------------------------- OCR paths


def test_scanned_pdf_pages_are_ocrd(tmp_path):
    """A PDF of page images (no text layer): the text page is OCR'd, the blank page is warned about."""
    path = tmp_path / "scan.pdf"
    render_text("INVOICE TOTAL 4711 EUROS").save(path, "PDF", save_all=True,
                                                   append_images=[Image.new("RGB", (1400, 260), "white")])
    parsed = parse_document(path.read_bytes(), path.name)
    units = parsed.report.units
    print(f"scan.pdf: {parsed.text!r}, OCR {parsed.report.ocr_seconds:.2f}s")
    assert "INVOICE" in parsed.text and "4711" in parsed.text
    assert (units[0].tier, units[1].tier) == ("ocr:rapidocr", "")
    assert [(w.code, w.unit) for w in parsed.report.warnings] == [("empty_page", 2)]


def test_multipage_tiff_is_ocrd_frame_by_frame(tmp_path):
    path = tmp_path / "fax.TIFF"  # extensions are matched case-insensitively
    render_text("INVOICE TOTAL 4711 EUROS").save(path, "TIFF", save_all=True,
                                                   append_images=[Image.new("RGB", (1400, 260), "white")])
    parsed = parse_document(path.read_bytes(), path.name)
    assert "4711" in parsed.text
    assert [(u.unit, u.tier) for u in parsed.report.units] == [(1, "ocr:rapidocr"), (2, "")]
    assert [(w.code, w.unit) for w in parsed.report.warnings] == [("empty_image", 2)]


def test_tesseract_fallback_reports_itself_unavailable(tmp_path, monkeypatch):
    """Runs everywhere (CI installs tesseract): PATH without it, and no engine loaded earlier."""
    import adiyan.ingest.ocr as ocr_module

    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(ocr_module, "_loaded", {})
    with pytest.raises(OcrUnavailable, match="tesseract is not on PATH"):
        recognize(render_text("4711"), "tesseract")
    assert_refused(image_bytes(render_text("4711"), "PNG"), "scan.png", "ocr_unavailable",
                   match="tesseract is not on PATH", ocr="tesseract")


@pytest.mark.skipif(shutil.which("tesseract") is None and os.environ.get("CI_REQUIRE_SYSTEM_TOOLS") != "1",
                    reason="tesseract is not installed here (CI installs it: .ci/run)")
def test_tesseract_reads_when_installed():
    parsed = parse_document(image_bytes(render_text("INVOICE TOTAL 4711"), "PNG"), "scan.png", ocr="tesseract")
    assert "4711" in parsed.text and parsed.report.tiers == {"ocr:tesseract"}


def test_image_without_ocr_is_refused():
    assert_refused(image_bytes(render_text("4711"), "PNG"), "scan.png", "ocr_unavailable", match="disabled", ocr="none")


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("filename", ["../secret.md", "a/../b.md", "a\\b.md", "nul\x00.md", "/etc/notes.md",
                                      "C:notes.md", "a//b.md", "./notes.md", "docs/", ""])
def test_unsafe_names_are_refused_before_anything_else(filename):
    assert_refused(b"# fine content", filename, "unsafe_name")


@pytest.mark.parametrize("filename", ["notes..md", "Harris__Forbes__amp__Co..md", "docs/2024/notes.md", "...md"])
def test_names_with_dots_or_folders_are_keys_not_traversals(filename):
    """'..' is refused as a path component only (issue 13: a BEIR id such as 'Co.' gave 'Co..md')."""
    assert parse_document(b"# fine content", filename).report.filename == filename


@pytest.mark.parametrize("filename", ["notes.odt", "backup.7z", "README", "clip.mp4"])
def test_unsupported_extensions_are_refused(filename):
    assert_refused(b"anything", filename, "unsupported_extension", match="supported: ")


@pytest.mark.parametrize("filename", ["empty.pdf", "empty.md", "empty.docx", "empty.png"])
def test_zero_byte_files_are_refused(filename):
    assert_refused(b"", filename, "empty_file", match="0 bytes")


def test_files_over_the_size_limit_are_refused():
    assert_refused(b"x" * 101, "big.txt", "too_large", match="101 bytes, over the limit of 100", max_bytes=100)
    assert parse_document(b"x" * 100, "fits.txt", max_bytes=100).text == "x" * 100


def test_truncated_pdf_is_refused(tmp_path):
    path = tmp_path / "cut.pdf"
    whole = (DOCS / "pdf/sources/multi_page.pdf").read_bytes()
    path.write_bytes(whole[: len(whole) // 2])
    assert_refused(path.read_bytes(), path.name, "truncated_pdf", match="%%EOF")


def test_pdf_docling_cannot_read_is_refused_with_its_reason(tmp_path):
    path = tmp_path / "garbled.pdf"
    path.write_bytes(b"%PDF-1.4\nthis is not a PDF body\n%%EOF\n")
    assert_refused(path.read_bytes(), path.name, "unreadable_pdf", match="Docling could not convert it")


def test_encrypted_pdf_is_refused(tmp_path):
    path = tmp_path / "locked.pdf"
    encrypt = b"<< /Filter /Standard /V 1 /R 2 /O <%s> /U <%s> /P -4 >>" % (b"11" * 32, b"22" * 32)
    file_id = b"<%s>" % (b"33" * 16)
    path.write_bytes(build_pdf(text_pdf_objects(b"Top secret") + [encrypt],
                               b"/Encrypt 6 0 R /ID [%s %s] " % (file_id, file_id)))
    # Its /U entry is not what the empty password gives, so it needs a user password (test_formats_pdf_image.py
    # builds real encrypted PDFs of both kinds).
    assert_refused(path.read_bytes(), path.name, "encrypted_pdf", match="needs a password to open")
    # The same document without the /Encrypt entry reads fine: the builder itself is sound.
    assert parse_document(build_pdf(text_pdf_objects(b"Top secret")), "open.pdf").text == "Top secret"


@pytest.mark.parametrize("filename", ["letter.docx", "deck.pptx"])
def test_office_files_that_are_not_zips_are_refused(filename):
    assert_refused(b"just some text", filename, "not_a_zip")
    assert_refused(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 512, filename, "not_a_zip", match="OLE2")
    assert_refused(b"PK\x03\x04" + b"\x00" * 64, filename, "not_a_zip", match="corrupt zip")


@pytest.mark.parametrize(("filename", "main_part"), [("letter.docx", "word/document.xml"),
                                                     ("deck.pptx", "ppt/presentation.xml")])
def test_office_zips_without_their_main_part_are_refused(tmp_path, filename, main_part):
    path = tmp_path / filename
    with zipfile.ZipFile(path, "w") as package:
        package.writestr("[Content_Types].xml", '<?xml version="1.0"?><Types/>')
        package.writestr("docProps/app.xml", "<Properties/>")
    assert_refused(path.read_bytes(), filename, "missing_main_part", match=re.escape(main_part))


@pytest.mark.parametrize(("filename", "main_part", "reader"), [("letter.docx", "word/document.xml", "Docling"),
                                                               ("deck.pptx", "ppt/presentation.xml", "python-pptx")])
def test_office_zips_with_a_broken_main_part_are_refused(tmp_path, filename, main_part, reader):
    path = tmp_path / filename
    with zipfile.ZipFile(path, "w") as package:
        package.writestr("[Content_Types].xml", '<?xml version="1.0"?><Types/>')
        package.writestr(main_part, "this is not XML")
    assert_refused(path.read_bytes(), filename, "unreadable_document", match=f"^{reader} could not")


@pytest.mark.parametrize(("filename", "data", "found"), [
    ("report.pdf", image_bytes(Image.new("RGB", (8, 8)), "PNG"), "PNG"),
    ("photo.png", image_bytes(Image.new("RGB", (8, 8)), "JPEG"), "JPEG"),
    ("notes.txt", b"%PDF-1.7\n...", "PDF"),
    ("page.html", b"PK\x03\x04rest of a zip", "zip"),
    ("scan.tif", b"plain text", "TIFF signature"),
])
def test_content_that_contradicts_the_extension_is_refused(filename, data, found):
    assert_refused(data, filename, "content_mismatch", match=found)


def test_unreadable_image_is_refused():
    assert_refused(b"\x89PNG\r\n\x1a\n" + b"\x00" * 40, "broken.png", "unreadable_image")


@pytest.mark.parametrize("filename", ["notes.md", "notes.txt", "page.html"])
def test_bytes_no_encoding_reads_as_text_are_refused_not_guessed(filename):
    """latin-1 decodes anything; random bytes must still be refused, saying detection was not confident."""
    rng = random.Random(13)
    noise = bytes(rng.randrange(256) for _ in range(3000))
    assert_refused(noise, filename, "bad_encoding", match=r"not valid UTF-8 .*could not be detected with confidence")


def test_utf8_bom_is_accepted_and_dropped():
    assert parse_document("\ufeff# Café".encode("utf-8"), "notes.md").text == "# Café"


def test_html_declared_charset_is_honoured():
    page = '<html><head><meta charset="iso-8859-1"></head><body><p>Café crème brûlée</p></body></html>'
    parsed = parse_document(page.encode("latin-1"), "menu.html")
    assert "Café crème brûlée" in parsed.text
    old_style = page.replace('<meta charset="iso-8859-1">',
                             '<meta http-equiv="Content-Type" content="text/html; charset=windows-1252">')
    assert "Café crème brûlée" in parse_document(old_style.encode("cp1252"), "menu.htm").text
    unknown = page.replace("iso-8859-1", "klingon-8").encode("latin-1")
    assert_refused(unknown, "menu.html", "bad_encoding", match="unknown charset 'klingon-8'")


@pytest.mark.parametrize(("filename", "data"), [
    ("blank.md", b"  \n\n\t\n"),
    ("blank.txt", b"\n"),
    ("picture.html", b"<html><body><img src='x.png'></body></html>"),
])
def test_documents_without_text_are_errors_not_empty_successes(filename, data):
    assert_refused(data, filename, "no_text")


def test_blank_scanned_pdf_is_an_error_that_names_the_page(tmp_path):
    path = tmp_path / "blank.pdf"
    Image.new("RGB", (600, 800), "white").save(path, "PDF")
    assert_refused(path.read_bytes(), path.name, "no_text", match="page 1 of blank.pdf")


def test_unknown_ocr_setting_is_a_caller_error():
    with pytest.raises(ValueError, match="ocr must be one of") as info:
        parse_document(b"text", "a.txt", ocr="easyocr")
    assert not isinstance(info.value, ParseError)


# ----------------------------------------------------------------------------- the report


def test_report_serializes_for_storage():
    parsed = parse_document((DOCS / "md/sources/duck.md").read_bytes(), "duck.md")
    stored = json.loads(json.dumps(parsed.report.to_dict()))
    assert stored["format"] == "markdown" and stored["authored_markdown"] is True
    assert stored["units"] == [{"unit": 1, "kind": "document", "tier": "markdown", "chars": len(parsed.text.strip()),
                                "quality": measure(parsed.text).to_dict(), "rejected": [], "title": None}]
    assert stored["total_chars"] == len(parsed.text) and stored["warnings"] == []
    assert stored["tiers"] == ["markdown"] and stored["seconds"] >= 0


# ----------------------------------------------------------------------------- the parse cache


def test_parse_cache_key_changes_with_everything_that_can_change_a_parse(tmp_path, monkeypatch):
    """Keyed by bytes, extension, OCR engine, size limit, parser code, word list and PDFium build: changing
    any one gives a new key, and a parser change (here: one byte of one module) parses afresh."""
    from adiyan.cache import CallCache
    from adiyan.config import IngestConfig
    from adiyan.ingest import parse as parse_module

    names = {f.name for f in parse_module.parser_files()}
    assert {"parse.py", "pdf_tiers.py", "pdfium_text.py", "quality.py", "epub.py"} <= names
    assert names == {f.name for f in (Path(parse_module.__file__).parent).glob("*.py")}
    cache = CallCache(tmp_path / "parsed.sqlite", "parse")
    ingest = IngestConfig()
    base = parse_module.parse_cache_fields(b"# notes", "a.md", ingest)
    keys = {cache.key(base)}
    for field, value in [("sha256", "0" * 64), ("ext", ".txt"), ("ocr", "none"), ("max_bytes", 1), ("code", "x"),
                         ("wordlist", "y"), ("pdfium", "pdfium 1")]:
        assert base[field] != value
        keys.add(cache.key({**base, field: value}))
    assert len(keys) == 8
    assert parse_module.parse_cache_fields(b"# notes", "a.md", ingest.model_copy(update={"ocr": "none"}))["ocr"] == "none"

    assert "cached" not in parse_module.parse_cached(b"# notes", "a.md", ingest, cache)[1]
    assert parse_module.parse_cached(b"# notes", "b.md", ingest, cache)[1]["cached"] is True
    copies = []
    for f in parse_module.parser_files():
        (tmp_path / f.name).write_bytes(f.read_bytes())
        copies.append(tmp_path / f.name)
    monkeypatch.setattr(parse_module, "parser_files", lambda: copies)
    monkeypatch.setattr(parse_module, "_PARSER_CODE", None)
    same = parse_module._parser_code_hash()
    assert same == base["code"]  # the same sources hash the same
    (tmp_path / "quality.py").write_bytes((tmp_path / "quality.py").read_bytes() + b"\n")
    monkeypatch.setattr(parse_module, "_PARSER_CODE", None)
    assert parse_module._parser_code_hash() != same
    assert "cached" not in parse_module.parse_cached(b"# notes", "a.md", ingest, cache)[1]


def test_text_quality_fast_paths_give_the_figures_of_the_unicode_lookups():
    """measure() answers ASCII text without a Unicode name or category per character (5x faster on the
    scale benchmark's million one-chunk documents); the figures must be the ones the lookups give."""
    import random
    import unicodedata

    from adiyan.ingest import quality

    def slow_token(token):
        if token.isdigit() or not all(ch.isdigit() or unicodedata.name(ch, "").startswith("LATIN") for ch in token):
            return None
        return unicodedata.normalize("NFKD", token).encode("ascii", "ignore").decode("ascii").lower() or None

    rng = random.Random(3)
    alphabet = "abcXYZ019 .,;\t\n\x00\x07\x1b\x7f_-éßΩ한\ufffd"
    texts = ["BMI was associated with a lower risk (HR 0.81; 95% CI 0.7-0.9).", "x\x00y\x07 z\x7f", "ASCII_only 42 foo_bar"]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 80))) for _ in range(400)]
    for text in texts:
        for token in quality._TOKEN.findall(text):
            assert quality._latin_token(token) == slow_token(token), token
        if text.isascii():
            visible = [ch for ch in text if not ch.isspace()]
            assert sum(1 for ch in visible if quality._bad(ch)) == sum(1 for ch in visible if ch < " " or ch == "\x7f")
    q = measure("x\x00y\x07 z\x7f")
    assert (q.visible, round(q.replacement_share, 4)) == (6, 0.5)  # 3 of the 6 visible characters are controls
