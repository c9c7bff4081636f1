"""Office formats of issue 13: DOCX that Docling fails on, XLSX, CSV, and legacy .doc/.ppt/.xls/.rtf.

Every file is generated here with known words; each test checks the recall of those words in
the extracted text and the tier each unit records. Where a test replaces Docling with a double,
the double only raises (or returns nothing), to drive the fallback path, and says so.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import openpyxl
import pytest
import xlsxwriter
from docx import Document
from docx.oxml.ns import qn
from lxml import etree
from PIL import Image
from pptx import Presentation
from pptx.util import Inches

from adiyan.ingest import ParseError, parse_document
from adiyan.ingest.docling_convert import _convert
from adiyan.ingest.docx_text import docx_markdown, strip_xml_comments
from tests.test_parse import assert_refused, word_recall

SOFFICE = shutil.which("soffice")
# CI sets CI_REQUIRE_SYSTEM_TOOLS=1 (.ci/run installs LibreOffice): there a missing soffice fails, never skips
needs_soffice = pytest.mark.skipif(SOFFICE is None and os.environ.get("CI_REQUIRE_SYSTEM_TOOLS") != "1",
                                   reason="LibreOffice (soffice) is not on PATH: "
                                   "ADIYAN_INSTALL_LIBREOFFICE=1 bash scripts/install.sh")
DOCX_WORDS = ("Quarterly alpaca report The herd grew by eleven animals near Cusco "
              "Species Count Region alpaca 42 Andes llama 17 vicuña only")


def png() -> io.BytesIO:
    out = io.BytesIO()
    Image.new("RGB", (60, 40), "teal").save(out, "PNG")
    out.seek(0)
    return out


def docx_bytes(*, comments: bool, where: str = "body") -> bytes:
    """A heading, a paragraph, a picture and a table whose last row has fewer cells than the others.

    ``comments`` puts XML comments and a processing instruction where real files have them
    (Unstructured's tables-with-incomplete-rows.docx has a comment before each table): between
    body blocks (``where="body"``) or inside a table row (``where="row"``).
    """
    document = Document()
    document.add_heading("Quarterly alpaca report", 1)
    document.add_paragraph("The herd grew by eleven animals near Cusco.")
    document.add_picture(png())
    table = document.add_table(rows=4, cols=3)
    for r, row in enumerate([("Species", "Count", "Region"), ("alpaca", "42", "Andes"), ("llama", "17", "Andes")]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    last = table.rows[3]._tr
    for tc in last.findall(qn("w:tc"))[1:]:
        last.remove(tc)  # the ragged row: one cell where the others have three
    table.cell(3, 0).text = "vicuña only"
    if comments and where == "body":
        body = document.element.body
        body.insert(0, etree.Comment(" table: a ragged last row "))
        body.insert(3, etree.ProcessingInstruction("mso-application", 'progid="Word.Document"'))
        table._tbl.addprevious(etree.Comment(" inline image on paragraph by itself "))
    elif comments and where == "row":
        table.rows[1]._tr.append(etree.Comment(" a comment inside a row "))
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


# ----------------------------------------------------------------------------- DOCX


def test_docling_itself_fails_on_xml_comments_which_is_the_cause():
    """The upstream failure, reproduced: lxml's QName() on a comment node (whose tag is the Cython
    function etree.Comment). If this starts passing, Docling fixed it and strip_xml_comments can go."""
    with pytest.raises(ParseError, match=r"Invalid input tag of type <class '_cython_[\d_]+\.cython_function_or_method'>"):
        _convert(docx_bytes(comments=True), ".docx", "commented.docx", "unreadable_document")
    with pytest.raises(ValueError, match="Invalid input tag of type"):
        etree.QName(etree.Comment("x"))


def test_docling_silently_empties_a_table_with_a_comment_in_a_row():
    """The quieter half of the same bug: no error, the table's cells come back empty."""
    result = _convert(docx_bytes(comments=True, where="row"), ".docx", "row.docx", "unreadable_document")
    markdown = result.document.export_to_markdown()
    # The rows from the commented one on come back empty; the header row before it survives.
    assert "Species" in markdown and "Andes" not in markdown and "llama" not in markdown


@pytest.mark.parametrize("where", ["body", "row"])
def test_docx_with_comments_pictures_and_ragged_tables_is_read_by_docling(where):
    data = docx_bytes(comments=True, where=where)
    parsed = parse_document(data, "alpacas.docx")
    print(parsed.text)
    assert word_recall(parsed.text, DOCX_WORDS) == 1.0
    assert parsed.report.tiers == {"docling"} and parsed.report.warnings == []
    cleaned, parts = strip_xml_comments(data)
    assert parts == 1 and b"<!--" not in cleaned


def test_strip_xml_comments_keeps_text_around_a_comment():
    document = Document()
    paragraph = document.add_paragraph("")
    run = paragraph.add_run("before")
    t = run._r.find(qn("w:t"))
    comment = etree.Comment("hidden")
    t.append(comment)
    comment.tail = " after"
    out = io.BytesIO()
    document.save(out)
    cleaned, _ = strip_xml_comments(out.getvalue())
    assert parse_document(cleaned, "tail.docx").text == "before after"
    clean = docx_bytes(comments=False)
    assert strip_xml_comments(clean) == (clean, 0)  # nothing to strip: the very same bytes go to Docling


def test_python_docx_reads_the_file_docling_fails_on():
    assert word_recall(docx_markdown(docx_bytes(comments=True), "commented.docx"), DOCX_WORDS) == 1.0


@pytest.mark.parametrize("docling", ["raises", "returns nothing"])
def test_docx_falls_back_to_python_docx_when_docling_fails(monkeypatch, docling):
    """Test double (control flow only): Docling's DOCX conversion raises, or returns no text."""
    from adiyan.ingest import docx_text

    def failing(data, extension, filename, report):
        if docling == "raises":
            raise ParseError(filename, "unreadable_document", "Docling could not convert it: simulated failure")
        return ""

    monkeypatch.setattr(docx_text, "flow_document_to_markdown", failing)
    parsed = parse_document(docx_bytes(comments=False), "alpacas.docx")
    assert word_recall(parsed.text, DOCX_WORDS) == 1.0
    assert [(u.kind, u.tier) for u in parsed.report.units] == [("document", "python-docx")]
    assert [w.code for w in parsed.report.warnings] == ["docling_failed"]
    assert parsed.text.startswith("# Quarterly alpaca report")
    assert "| vicuña only |  |  |" in parsed.text


# ----------------------------------------------------------------------------- XLSX

SHEET_WORDS = "Vessel Berths Port Albatross 12 Valletta Cormorant 8 Gozo Tour EUR Blue grotto 35.5 marmalade"


def workbook_openpyxl() -> bytes:
    workbook = openpyxl.Workbook()
    fleet = workbook.active
    fleet.title = "Fleet"
    for row in (["Vessel", "Berths", "Port"], ["Albatross", 12, "Valletta"], ["Cormorant", 8, "Gozo"]):
        fleet.append(row)
    prices = workbook.create_sheet("Prices")
    prices.append(["Tour", "EUR"])
    prices.append(["Blue grotto", 35.5])
    prices["D6"] = "marmalade"
    workbook.create_sheet("Empty")
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()


def workbook_xlsxwriter() -> bytes:
    """The same content from another writer (no shared strings table; a merged header cell)."""
    out = io.BytesIO()
    workbook = xlsxwriter.Workbook(out, {"in_memory": True, "strings_to_numbers": False})
    fleet = workbook.add_worksheet("Fleet")
    fleet.merge_range("A1:C1", "Fleet list marmalade")
    for r, row in enumerate([["Vessel", "Berths", "Port"], ["Albatross", 12, "Valletta"], ["Cormorant", 8, "Gozo"]], 1):
        fleet.write_row(r, 0, row)
    prices = workbook.add_worksheet("Prices")
    prices.write_row(0, 0, ["Tour", "EUR"])
    prices.write_row(1, 0, ["Blue grotto", 35.5])
    workbook.add_worksheet("Empty")
    workbook.close()
    return out.getvalue()


@pytest.mark.parametrize("build", [workbook_openpyxl, workbook_xlsxwriter])
def test_xlsx_is_one_unit_per_sheet(build):
    parsed = parse_document(build(), "fleet.xlsx")
    print(parsed.text)
    assert word_recall(parsed.text, SHEET_WORDS) == 1.0
    report = parsed.report
    assert [(u.unit, u.kind, u.tier) for u in report.units] == [(1, "sheet", "docling"), (2, "sheet", "docling"),
                                                                (3, "sheet", "")]
    assert [(w.code, w.unit) for w in report.warnings] == [("empty_sheet", 3)]
    assert parsed.text.index("## Sheet: Fleet") < parsed.text.index("Albatross") < parsed.text.index("## Sheet: Prices")
    assert "| Albatross" in parsed.text  # a Markdown table row


def test_xlsx_falls_back_to_openpyxl_when_docling_fails(monkeypatch):
    """Test double (control flow only): Docling's conversion raises."""
    from adiyan.ingest import sheets

    def failing(data, extension, filename, code):
        raise ParseError(filename, code, "Docling could not convert it: simulated failure")

    monkeypatch.setattr(sheets, "_convert", failing)
    parsed = parse_document(workbook_openpyxl(), "fleet.xlsx")
    assert word_recall(parsed.text, SHEET_WORDS) == 1.0
    assert [u.tier for u in parsed.report.units] == ["openpyxl", "openpyxl", ""]
    assert [w.code for w in parsed.report.warnings] == ["docling_failed", "empty_sheet"]
    assert "| Albatross | 12 | Valletta |" in parsed.text


def test_xlsx_without_a_workbook_part_is_refused():
    package = io.BytesIO()
    with zipfile.ZipFile(package, "w") as z:
        z.writestr("[Content_Types].xml", "<Types/>")
    assert_refused(package.getvalue(), "book.xlsx", "missing_main_part", match="xl/workbook.xml")


# ----------------------------------------------------------------------------- CSV

CSV_TEXT = 'Name;City;Note\nÅsa Öberg;Malmö;"rödbetor; färska"\nJosé Niño;Sevilla;"two\nlines"\n'


@pytest.mark.parametrize(("codec", "expected"), [("utf-8", "utf-8"), ("cp1252", "cp1252")])
def test_csv_is_a_markdown_table(codec, expected):
    parsed = parse_document(CSV_TEXT.encode(codec), "people.csv")
    print(parsed.text)
    assert word_recall(parsed.text, CSV_TEXT) == 1.0
    assert [(u.kind, u.tier) for u in parsed.report.units] == [("sheet", "docling")]
    assert parsed.report.encoding == expected
    assert "rödbetor; färska" in parsed.text  # the quoted delimiter stayed inside its cell


def test_tsv_is_read_as_csv():
    parsed = parse_document(CSV_TEXT.replace(";", "\t").encode(), "people.tsv")
    assert word_recall(parsed.text, CSV_TEXT) == 1.0 and parsed.report.format == "csv"


def test_csv_falls_back_to_the_csv_module_when_docling_fails(monkeypatch):
    """Test double (control flow only): Docling's conversion raises."""
    from adiyan.ingest import sheets

    def failing(data, extension, filename, code):
        raise ParseError(filename, code, "Docling could not convert it: simulated failure")

    monkeypatch.setattr(sheets, "_convert", failing)
    parsed = parse_document(CSV_TEXT.encode("cp1252"), "people.csv")
    assert word_recall(parsed.text, CSV_TEXT) == 1.0
    assert [u.tier for u in parsed.report.units] == ["csv"]
    assert [w.code for w in parsed.report.warnings] == ["docling_failed"]
    assert "| Åsa Öberg | Malmö | rödbetor; färska |" in parsed.text


# ----------------------------------------------------------------------------- legacy Office

RTF = (b"{\\rtf1\\ansi\\deff0{\\fonttbl{\\f0 Times;}}\\f0\\fs24 Quokka ledger caf\\'e9 4711 for "
       b"Rottnest Island.\\par Second paragraph about wombats.\\par}")
RTF_WORDS = "Quokka ledger café 4711 for Rottnest Island Second paragraph about wombats"
OLE2 = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 1024


@pytest.mark.parametrize(("filename", "data"), [("letter.doc", OLE2), ("letter.doc", RTF), ("notes.rtf", RTF),
                                                ("deck.ppt", OLE2), ("book.xls", OLE2)])
def test_legacy_office_without_libreoffice_is_refused_naming_the_converter(monkeypatch, tmp_path, filename, data):
    """Test double (control flow only): PATH points at an empty folder, so soffice is not found."""
    monkeypatch.setenv("PATH", str(tmp_path))
    error = assert_refused(data, filename, "converter_missing", match="soffice is not on PATH")
    assert "apt-get install libreoffice-writer-nogui libreoffice-calc-nogui libreoffice-impress-nogui" in error.reason


@pytest.mark.parametrize(("filename", "data", "found"), [("letter.doc", b"%PDF-1.4\n...", "PDF"),
                                                         ("notes.rtf", OLE2, "OLE2"), ("book.xls", RTF, "RTF")])
def test_legacy_names_on_other_content_are_refused(filename, data, found):
    assert_refused(data, filename, "content_mismatch", match=found)


def test_a_modern_deck_named_ppt_is_read_as_pptx_without_conversion(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no soffice: proves no conversion ran
    deck = Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[5])
    slide.shapes.title.text = "Numbat survey results"
    out = io.BytesIO()
    deck.save(out)
    parsed = parse_document(out.getvalue(), "survey.ppt")
    assert "Numbat survey results" in parsed.text
    assert [u.tier for u in parsed.report.units] == ["python-pptx"]
    assert [w.code for w in parsed.report.warnings] == ["extension_mismatch"]


@needs_soffice
@pytest.mark.parametrize("filename", ["notes.rtf", "letter.doc"])
def test_rtf_is_converted_by_libreoffice(filename):
    parsed = parse_document(RTF, filename)
    assert word_recall(parsed.text, RTF_WORDS) == 1.0
    assert [(u.kind, u.tier) for u in parsed.report.units] == [("document", "libreoffice+docling")]
    assert parsed.report.method == "libreoffice+docling"


def soffice_convert(data: bytes, source_ext: str, target: str, tmp_path: Path) -> bytes:
    """Make a legacy file the way users get them: LibreOffice saving a modern one in the old format."""
    source = tmp_path / f"source{source_ext}"
    source.write_bytes(data)
    subprocess.run([SOFFICE, "--headless", f"-env:UserInstallation={(tmp_path / 'profile').as_uri()}",
                    "--convert-to", target, "--outdir", str(tmp_path / "out"), str(source)],
                   check=True, capture_output=True, timeout=180)
    return (tmp_path / "out" / f"source.{target.split(':')[0]}").read_bytes()


LETTER_WORDS = "Quarterly alpaca report The herd grew by eleven animals near Cusco Shearing starts in November"


def letter_bytes() -> bytes:
    document = Document()
    document.add_heading("Quarterly alpaca report", 1)
    document.add_paragraph("The herd grew by eleven animals near Cusco.")
    document.add_paragraph("Shearing starts in November.")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def deck_bytes() -> bytes:
    deck = Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[5])
    slide.shapes.title.text = "Numbat survey results"
    slide.shapes.add_textbox(Inches(1), Inches(2), Inches(6), Inches(1)).text_frame.text = "Forty two numbats counted"
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


@pytest.mark.slow
@needs_soffice
@pytest.mark.parametrize(("name", "build", "source_ext", "target", "words", "tier"), [
    # No table: LibreOffice 7.4's .doc export writes a table as one run of text ("SpeciesCountRegion..."),
    # a quirk of making the test file, not of reading one (a real .doc's tables convert as tables).
    ("letter.doc", letter_bytes, ".docx", "doc", LETTER_WORDS, "libreoffice+docling"),
    ("deck.ppt", deck_bytes, ".pptx", "ppt", "Numbat survey results Forty two numbats counted",
     "libreoffice+python-pptx"),
    ("fleet.xls", workbook_openpyxl, ".xlsx", "xls", SHEET_WORDS, "libreoffice+docling"),
])
def test_legacy_binary_office_files_are_converted(tmp_path, name, build, source_ext, target, words, tier):
    legacy = soffice_convert(build(), source_ext, target, tmp_path)
    assert legacy.startswith(b"\xd0\xcf\x11\xe0")  # a real OLE2 file, not a renamed zip
    parsed = parse_document(legacy, name)
    print(parsed.text)
    assert word_recall(parsed.text, words) == 1.0
    assert {u.tier for u in parsed.report.units if u.chars} == {tier}
