"""PDF text layers that decode to garbage (issue 23, item 9), and the tiers that recover the words.

The PDFs are built here with fontTools from DejaVu Sans (the system font the OCR tests render
with too); none carries a ToUnicode map, so a reader must work out what the codes mean:

- ``type1c``: an embedded CFF (Type 1 compact) font whose *built-in* encoding maps the codes
  0x21.. to standard glyph names (``T``, ``h``, ``e``...), and no /Encoding in the PDF. PDFium
  reads the font's encoding; docling-parse takes the codes as ASCII and gives ``"*'!37+%-!...``.
- ``uxxxx``: the standard Helvetica with a /Differences encoding naming glyphs ``u0054`` (a valid
  AGL name for U+0054); PDFium maps them, docling-parse gives ``u0054u0068u0065...``.
- ``gnames``: an embedded TrueType whose glyphs are named ``g1``, ``g2``... (as font subsetters
  name them), mapped by /Differences: nothing in the file says which letter ``g7`` is, so
  docling-parse gives U+FFFD for every character and PDFium the raw codes; the page renders
  correctly and OCR reads it.
- ``type1c_letters``: the CFF font with glyphs named ``g1``... and codes from 0x41 on: both
  extractors give letters that spell nothing; PDFium says it could map none of them, so OCR.
- ``blank_glyphs``: Helvetica with /Differences naming glyphs no font has: nothing maps and
  nothing is drawn; every tier fails, and the document is refused by name.
"""

from __future__ import annotations

import io
import zlib
from pathlib import Path

import pytest
from fontTools.agl import UV2AGL
from fontTools.fontBuilder import FontBuilder
from fontTools.pens.t2CharStringPen import T2CharStringPen
from fontTools.pens.ttGlyphPen import TTGlyphPen
from fontTools.ttLib import TTFont

from adiyan.ingest import parse_document
from adiyan.ingest.quality import measure
from tests.test_parse import assert_refused, build_pdf, text_pdf_objects, word_recall

FONT = next(iter(sorted(Path("/usr/share/fonts").rglob("DejaVuSans.ttf"))), None)
pytestmark = pytest.mark.skipif(FONT is None, reason="DejaVu Sans is not installed (fonts-dejavu-core)")
LINES = ["Quarterly maintenance report for the northern water treatment plant.",
         "The inspection found corrosion on two pumps and a cracked valve housing.",
         "Engineers replaced the valve and scheduled the pumps for repair next month.",
         "Water quality stayed within every limit during the whole inspection period."]
TEXT = " ".join(LINES)
CHARS = sorted(set(TEXT))
FIRST_CODE = 0x21  # codes 0x21.. in order of the characters: as a subsetting font tool assigns them
CODE = {c: FIRST_CODE + i for i, c in enumerate(CHARS)}
LETTER_CODE = {c: 0x41 + i for i, c in enumerate(CHARS)}  # codes from "A" on: the raw codes read as letters
UNITS_PER_EM = 2048


def _source():
    font = TTFont(str(FONT))
    return font, font.getGlyphSet(), font.getBestCmap()


def _agl(c: str) -> str:
    return "space" if c == " " else UV2AGL[ord(c)]


def _string(line: str, code: dict) -> bytes:
    raw = bytes(code[c] for c in line)
    return raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")


def _pdf(font_dict: bytes, extra: list[bytes] = (), code: dict = CODE) -> bytes:
    content = b"BT /F1 13 Tf 16 TL 56 720 Td " + b" ".join(b"(%s) '" % _string(line, code) for line in LINES) + b" ET"
    return build_pdf([b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
                      b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
                      b" /Resources << /Font << /F1 5 0 R >> >> >>",
                      b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content), font_dict, *extra])


def _widths(source, cmap) -> bytes:
    return b" ".join(b"%d" % round(source["hmtx"][cmap[ord(c)]][0] * 1000 / UNITS_PER_EM) for c in CHARS)


def _embedded(subtype: bytes, program: bytes, file_key: bytes, flags: int, encoding: bytes = b"",
              code: dict = CODE) -> bytes:
    source, _, cmap = _source()
    first = min(code.values())
    packed = zlib.compress(program)
    stream_extra = b"/Subtype /Type1C" if file_key == b"FontFile3" else b"/Length1 %d" % len(program)
    return _pdf(b"<< /Type /Font /Subtype /%s /BaseFont /ABCDEF+Report /FirstChar %d /LastChar %d /Widths [%s]"
                b" /FontDescriptor 6 0 R %s >>" % (subtype, first, first + len(CHARS) - 1,
                                                   _widths(source, cmap), encoding),
                [b"<< /Type /FontDescriptor /FontName /ABCDEF+Report /Flags %d /FontBBox [-1021 -463 1793 1232]"
                 b" /ItalicAngle 0 /Ascent 928 /Descent -236 /CapHeight 729 /StemV 80 /%s 7 0 R >>" % (flags, file_key),
                 b"<< /Length %d /Filter /FlateDecode %s >>\nstream\n%s\nendstream" % (len(packed), stream_extra, packed)],
                code)


def type1c_pdf(glyph_name=_agl, code: dict = CODE) -> bytes:
    """An embedded CFF font with a built-in encoding (codes -> glyph names), no /Encoding, no ToUnicode."""
    source, glyphs, cmap = _source()
    charstrings = {".notdef": T2CharStringPen(500, None).getCharString()}
    for c in CHARS:
        pen = T2CharStringPen(source["hmtx"][cmap[ord(c)]][0], glyphs)
        glyphs[cmap[ord(c)]].draw(pen)
        charstrings[glyph_name(c)] = pen.getCharString()
    builder = FontBuilder(UNITS_PER_EM, isTTF=False)
    builder.setupGlyphOrder([".notdef"] + [glyph_name(c) for c in CHARS])
    builder.setupCharacterMap({})
    builder.setupCFF("ABCDEF+Report", {"FullName": "Report"}, charstrings, {})
    cff = builder.font["CFF "].cff
    encoding = [".notdef"] * 256
    for c in CHARS:
        encoding[code[c]] = glyph_name(c)
    cff.topDictIndex[0].Encoding = encoding
    out = io.BytesIO()
    cff.compile(out, builder.font)
    return _embedded(b"Type1", out.getvalue(), b"FontFile3", flags=4, code=code)


def type1c_letters_pdf() -> bytes:
    """The CFF font with glyphs named g1, g2... and codes from "A" on: both extractors give the raw codes,
    which read as letters that spell nothing, and PDFium knows it maps none of them."""
    return type1c_pdf(lambda c: f"g{CHARS.index(c) + 1}", LETTER_CODE)


def gnames_pdf() -> bytes:
    """An embedded TrueType font with glyphs named g1, g2..., mapped by /Differences; no ToUnicode."""
    source, glyphs, cmap = _source()
    name = {c: f"g{i}" for i, c in enumerate(CHARS, start=1)}
    outlines, metrics = {".notdef": TTGlyphPen(None).glyph()}, {".notdef": (500, 0)}
    for c in CHARS:
        pen = TTGlyphPen(glyphs)
        glyphs[cmap[ord(c)]].draw(pen)
        outlines[name[c]] = pen.glyph()
        metrics[name[c]] = source["hmtx"][cmap[ord(c)]]
    builder = FontBuilder(UNITS_PER_EM, isTTF=True)
    builder.setupGlyphOrder([".notdef"] + [name[c] for c in CHARS])
    builder.setupCharacterMap({})
    builder.setupGlyf(outlines)
    builder.setupHorizontalMetrics(metrics)
    builder.setupHorizontalHeader(ascent=1901, descent=-483)
    builder.setupNameTable({"familyName": "Report", "styleName": "Regular"})
    builder.setupOS2()
    builder.setupPost()
    out = io.BytesIO()
    builder.save(out)
    differences = b" ".join(b"%d /%s" % (CODE[c], name[c].encode()) for c in CHARS)
    return _embedded(b"TrueType", out.getvalue(), b"FontFile2", flags=32,
                     encoding=b"/Encoding << /Type /Encoding /Differences [%s] >>" % differences)


def _helvetica(glyph_name) -> bytes:
    differences = b" ".join(b"%d /%s" % (CODE[c], glyph_name(c).encode()) for c in CHARS)
    return _pdf(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica"
                b" /Encoding << /Type /Encoding /Differences [%s] >> >>" % differences)


def uxxxx_pdf() -> bytes:
    return _helvetica(lambda c: "u%04X" % ord(c))


def blank_glyphs_pdf() -> bytes:
    return _helvetica(lambda c: f"glyph{CODE[c]}")


def _first_tier_text(data: bytes) -> str:
    """What Docling's text layer gives for page 1 (the tier the parser used before issue 23)."""
    from adiyan.ingest.docling_convert import pdf_page_texts
    from adiyan.ingest.report import ExtractionReport

    _, pages, _ = pdf_page_texts(data, "x.pdf", ExtractionReport("x.pdf", "pdf", "docling"))
    return pages[1]


@pytest.mark.parametrize(("build", "tier", "problem"), [
    (type1c_pdf, "pdfium", "letters and digits"),
    (uxxxx_pdf, "pdfium", "English words"),
    (gnames_pdf, "ocr:rapidocr", "replacement or control characters"),
    (type1c_letters_pdf, "ocr:rapidocr", "no Unicode mapping"),
])
def test_garbled_text_layer_falls_back_to_a_tier_that_reads_it(build, tier, problem):
    data = build()
    layer = _first_tier_text(data)
    parsed = parse_document(data, "report.pdf")
    recall, layer_recall = word_recall(parsed.text, TEXT), word_recall(layer, TEXT)
    (unit,) = parsed.report.units
    print(f"{build.__name__}: text layer {layer[:50]!r} (recall {layer_recall:.3f}) -> {unit.tier} recall "
          f"{recall:.3f}, quality {unit.quality}, rejected {unit.rejected}")
    assert layer_recall < 0.1  # the first tier really is garbage: the case the issue found
    assert recall >= 0.95
    assert unit.tier == tier
    assert unit.rejected[0]["tier"] == "docling" and problem in unit.rejected[0]["problem"]
    assert unit.rejected[0]["quality"] == measure(layer).to_dict()
    assert unit.quality == measure(parsed.text).to_dict() and unit.quality["replacement_share"] == 0.0
    assert [w.code for w in parsed.report.warnings] == ["garbled_text_layer"]
    assert tier in parsed.report.warnings[0].message and "page 1 of report.pdf" in parsed.report.warnings[0].message


def test_without_ocr_a_page_no_extractor_reads_is_refused_by_name():
    """gnames needs OCR; with OCR off no tier reads it, and the garbage is not stored."""
    assert_refused(gnames_pdf(), "report.pdf", "garbled_text", ocr="none",
                   match=r"page 1 of report\.pdf: .*docling: \d+% replacement.*pdfium: .*OCR is disabled")


def test_a_page_every_tier_fails_is_refused_naming_each_tier():
    err = assert_refused(blank_glyphs_pdf(), "report.pdf", "garbled_text", match=r"docling: .*pdfium: .*ocr")
    (unit,) = err.report.units
    assert unit.chars == 0 and unit.tier == "" and [r["tier"] for r in unit.rejected] == ["docling", "pdfium", "ocr:rapidocr"]


def test_garbled_pages_are_replaced_and_good_pages_kept():
    """Page by page: a good page stays on the first tier, a garbled one beside it falls back."""
    from pypdfium2 import PdfDocument  # test-only: merges the generated pages into one document

    good = build_pdf(text_pdf_objects(b"The pumps were repaired in June."))
    merged = PdfDocument.new()
    for part in (good, type1c_pdf()):
        merged.import_pages(PdfDocument(part))
    out = io.BytesIO()
    merged.save(out)
    parsed = parse_document(out.getvalue(), "two.pdf")
    assert [(u.unit, u.tier) for u in parsed.report.units] == [(1, "docling"), (2, "pdfium")]
    assert [(w.code, w.unit) for w in parsed.report.warnings] == [("garbled_text_layer", 2)]
    assert word_recall(parsed.text, "The pumps were repaired in June. " + TEXT) >= 0.95


FINNISH = ["Kaupunginvaltuusto hyväksyi eilen uuden liikennesuunnitelman, joka vähentää autoliikennettä.",
           "Asukkaat voivat edelleen ajaa omilla autoillaan, mutta vierailijoiden on pysäköitävä laidalla."]


def test_a_page_in_another_language_keeps_its_text_layer():
    """Few English words is not garbage: PDFium maps every character, so Docling's text layer stays."""
    content = b"BT /F1 12 Tf 16 TL 56 720 Td " + b" ".join(b"(%s) '" % line.encode("cp1252") for line in FINNISH) + b" ET"
    data = build_pdf([b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
                      b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
                      b" /Resources << /Font << /F1 5 0 R >> >> >>",
                      b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content),
                      b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"])
    parsed = parse_document(data, "liikenne.pdf")
    (unit,) = parsed.report.units
    assert word_recall(parsed.text, " ".join(FINNISH)) == 1.0
    assert unit.quality["word_share"] < 0.4  # the doubt was raised...
    assert (unit.tier, unit.rejected, parsed.report.warnings) == ("docling", (), [])  # ...and the layer kept
