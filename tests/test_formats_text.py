"""Text, Markdown, HTML and CSV in the encodings users' files come in (issue 13).

Each test writes known words in one encoding and checks they all come back (word recall against
the words written: one misread byte breaks a word, e.g. "crème" read as cp1250 is "crčme"), and
that the report names the encoding, where it came from and how sure detection was. Files no
encoding reads plausibly are refused, naming the file and saying detection was not confident.
"""

from __future__ import annotations

import codecs
import random

import pytest

from adiyan.ingest import ParseError, parse_document
from tests.test_parse import assert_refused, word_recall

WESTERN = ("Über die Straße gehen Mädchen und Jungen zur Bäckerei. Le café était plein, les élèves "
           "déjeunaient à côté; une crème brûlée coûtait déjà cinq francs. El niño comió piña en la montaña.")
CP1252_ONLY = "Price: “five” euros – €5 — a ‘quoted’ œuvre… ™"  # bytes 0x80-0x9F: cp1252, not latin-1
RUSSIAN = ("Привет, как дела? Это тестовый документ на русском языке. Москва большой город, "
           "а Волга длинная река. ") * 2
GREEK = "Καλημέρα κόσμε, αυτό είναι ένα ελληνικό κείμενο για τη δοκιμή της κωδικοποίησης. " * 2


def wrap(text: str, fmt: str) -> str:
    if fmt == ".html":
        return f"<html><head><title>t</title></head><body><p>{text}</p></body></html>"
    return text


@pytest.mark.parametrize("fmt", [".txt", ".md", ".html"])
@pytest.mark.parametrize(("codec", "bom", "expected"), [
    ("utf-16-le", codecs.BOM_UTF16_LE, "utf-16-le"), ("utf-16-be", codecs.BOM_UTF16_BE, "utf-16-be"),
    ("utf-32-le", codecs.BOM_UTF32_LE, "utf-32-le"), ("utf-32-be", codecs.BOM_UTF32_BE, "utf-32-be"),
    ("utf-8", codecs.BOM_UTF8, "utf-8"),
])
def test_unicode_with_a_byte_order_mark_is_read(fmt, codec, bom, expected):
    data = bom + wrap(WESTERN, fmt).encode(codec)
    parsed = parse_document(data, f"notes{fmt}")
    assert word_recall(parsed.text, WESTERN) == 1.0, parsed.text[:200]
    report = parsed.report
    assert (report.encoding, report.encoding_source, report.encoding_confidence) == (expected, "bom", 1.0)
    assert "\ufeff" not in parsed.text


@pytest.mark.parametrize("fmt", [".txt", ".md", ".html", ".csv"])
@pytest.mark.parametrize(("codec", "text"), [("latin-1", WESTERN), ("cp1252", WESTERN + " " + CP1252_ONLY)])
def test_legacy_western_text_is_detected(fmt, codec, text):
    """No BOM, no declaration: charset-normalizer's candidates tie among Western code pages; cp1252 wins."""
    body = f"note\n{text}\n" if fmt == ".csv" else wrap(text, fmt)
    parsed = parse_document(body.encode(codec), f"legacy{fmt}")
    recall = word_recall(parsed.text, text)
    report = parsed.report
    print(f"{codec}{fmt}: recall {recall:.3f}, {report.encoding} ({report.encoding_source}, "
          f"{report.encoding_confidence})")
    assert recall == 1.0, parsed.text[:300]
    assert (report.encoding, report.encoding_source) == ("cp1252", "detected")
    assert report.encoding_confidence >= 0.9
    if codec == "cp1252":  # the bytes latin-1 lacks (0x80-0x9F); Docling's HTML turns “ ” into plain quotes
        assert "€5" in parsed.text and "œuvre" in parsed.text
        assert fmt in (".html", ".csv") or "“five”" in parsed.text


@pytest.mark.parametrize(("codec", "text", "expected"), [("cp1251", RUSSIAN, "cp1251"), ("koi8-r", RUSSIAN, "koi8-r"),
                                                         ("cp1253", GREEK, "cp1253")])
def test_non_western_legacy_text_is_detected(codec, text, expected):
    parsed = parse_document(text.encode(codec), "notes.txt")
    assert word_recall(parsed.text, text) == 1.0, parsed.text[:200]
    assert (parsed.report.encoding, parsed.report.encoding_source) == (expected, "detected")


@pytest.mark.parametrize(("declared", "codec"), [("iso-8859-1", "latin-1"), ("windows-1252", "cp1252"),
                                                 ("koi8-r", "koi8-r")])
def test_html_meta_charset_is_honoured_before_detection(declared, codec):
    text = RUSSIAN if codec == "koi8-r" else WESTERN
    page = f'<html><head><meta http-equiv="Content-Type" content="text/html; charset={declared}"></head>' \
           f"<body><p>{text}</p></body></html>"
    parsed = parse_document(page.encode(codec), "page.html")
    assert word_recall(parsed.text, text) == 1.0
    assert (parsed.report.encoding, parsed.report.encoding_source, parsed.report.encoding_confidence) == \
        (codecs.lookup(declared).name, "declared", 1.0)


def test_a_bom_outranks_a_contradicting_meta_charset():
    page = f'<html><head><meta charset="iso-8859-1"></head><body><p>{WESTERN}</p></body></html>'
    parsed = parse_document(codecs.BOM_UTF16_LE + page.encode("utf-16-le"), "page.html")
    assert word_recall(parsed.text, WESTERN) == 1.0
    assert parsed.report.encoding == "utf-16-le"


def test_utf8_is_taken_as_is_and_reported_certain():
    parsed = parse_document(WESTERN.encode("utf-8"), "notes.md")
    assert parsed.text == WESTERN
    assert (parsed.report.encoding, parsed.report.encoding_source, parsed.report.encoding_confidence) == \
        ("utf-8", "utf-8", 1.0)


def test_encoding_is_stored_in_the_report_dict():
    stored = parse_document(WESTERN.encode("latin-1"), "notes.txt").report.to_dict()
    assert (stored["encoding"], stored["encoding_source"]) == ("cp1252", "detected")
    assert 0.9 <= stored["encoding_confidence"] <= 1.0


@pytest.mark.parametrize(("data", "match"), [
    # Uniform random bytes: every code page decodes them, none plausibly.
    (random.Random(7).randbytes(4000), "could not be detected with confidence"),
    (bytes(b | 0x80 for b in random.Random(8).randbytes(300)), "could not be detected with confidence"),
    # UTF-8 for "Grüße" beside latin-1 for "Grüße": no single encoding reads both.
    ("Grüße aus Ljubljana. ".encode() + "Grüße".encode("latin-1"), "mixes encodings"),
    (b"safe text \xc0\xaf etc", "malformed UTF-8"),  # an overlong '/'
    (b"surrogate \xed\xa0\x80 here", "malformed UTF-8"),
])
@pytest.mark.parametrize("filename", ["notes.txt", "notes.md", "page.html", "table.csv"])
def test_undetectable_text_is_refused_saying_why(filename, data, match):
    error = assert_refused(data, filename, "bad_encoding", match=match)
    assert "not valid UTF-8 at byte" in error.reason


def test_a_bom_with_a_broken_body_is_refused():
    assert_refused(codecs.BOM_UTF16_LE + b"a\x00\x00\xd8", "wide.txt", "bad_encoding",
                   match="utf-16-le byte-order mark but is not valid utf-16-le")


def test_refusal_is_a_parse_error_not_a_crash():
    with pytest.raises(ParseError) as info:
        parse_document(random.Random(9).randbytes(2000), "blob.txt")
    assert str(info.value).startswith("blob.txt: ")


# ----------------------------------------------------------------------------- source and config files (issue 23)

SOURCES = {
    ".py": ("python", 'def reconcile_ledger(entries):\n    """Match every invoice to its payment."""\n'
                      '    return [e for e in entries if e.amount > 0]\n'),
    ".js": ("javascript", "function reconcileLedger(entries) {\n  // match every invoice to its payment\n"
                          "  return entries.filter((e) => e.amount > 0);\n}\n"),
    ".ts": ("typescript", "interface Invoice { amount: number; payer: string }\n"
                          "export const unpaid = (xs: Invoice[]): Invoice[] => xs.filter((x) => x.amount > 0);\n"),
    ".go": ("go", "package ledger\n\n// Reconcile matches every invoice to its payment.\n"
                  "func Reconcile(entries []Entry) []Entry { return entries }\n"),
    ".java": ("java", "public class Ledger {\n  /** Match every invoice to its payment. */\n"
                      "  public static int reconcile(int[] entries) { return entries.length; }\n}\n"),
    ".json": ("json", '{"service": "ledger", "retries": 3, "endpoints": ["invoices", "payments"]}\n'),
    ".yaml": ("yaml", "service: ledger\nretries: 3\nendpoints:\n  - invoices\n  - payments\n"),
    ".yml": ("yaml", "jobs:\n  reconcile:\n    runs-on: nightly\n    steps: [checkout, reconcile, report]\n"),
    ".toml": ("toml", '[service]\nname = "ledger"\nretries = 3\nendpoints = ["invoices", "payments"]\n'),
    ".xml": ("xml", '<?xml version="1.0"?>\n<service name="ledger"><endpoint>invoices</endpoint>'
                    "<endpoint>payments</endpoint></service>\n"),
    ".ini": ("ini", "[service]\nname = ledger\nretries = 3\n; invoices and payments endpoints\n"),
    ".log": ("log", "2024-05-01 12:00:03 INFO reconcile started: 418 invoices\n"
                    "2024-05-01 12:00:09 WARN payment 7731 has no invoice\n"),
}


@pytest.mark.parametrize("extension", sorted(SOURCES))
def test_source_and_config_files_are_read_as_text_with_their_language(extension):
    language, source = SOURCES[extension]
    parsed = parse_document(source.encode("utf-8"), f"repo/src/ledger{extension}")
    report = parsed.report
    assert parsed.text == source  # as written: indentation, comments and punctuation kept
    assert word_recall(parsed.text, source) == 1.0
    assert (report.format, report.language, report.method) == ("code", language, "as-is")
    assert [(u.kind, u.tier) for u in report.units] == [("document", "code")]
    assert not report.authored_markdown  # a "# comment" is not a Markdown heading
    assert report.to_dict()["language"] == language


def test_source_files_declare_their_encoding_as_their_language_does():
    xml = '<?xml version="1.0" encoding="ISO-8859-1"?>\n<menu>Café crème brûlée</menu>\n'
    parsed = parse_document(xml.encode("latin-1"), "menu.xml")
    assert "Café crème brûlée" in parsed.text
    assert (parsed.report.encoding, parsed.report.encoding_source) == ("iso8859-1", "declared")
    py = '#!/usr/bin/env python3\n# -*- coding: koi8-r -*-\nGREETING = "Привет, как дела?"\n'
    parsed = parse_document(py.encode("koi8-r"), "greet.py")
    assert "Привет, как дела?" in parsed.text and parsed.report.encoding_source == "declared"


def test_a_video_named_ts_is_refused_not_read_as_typescript():
    packet = b"\x47\x40\x00\x10" + b"\x00" * 184  # MPEG-TS: a 0x47 sync byte every 188 bytes
    assert_refused(packet * 4, "clip.ts", "content_mismatch", match="MPEG transport stream")


def test_text_starting_with_bm_is_text_and_a_bitmap_is_still_a_bitmap():
    """"BM" alone made any text starting with it a BMP ("BMI was associated with..." refused as
    content_mismatch: found by benchmarks/scale.py on a SciFact sentence); a BMP's header has more."""
    from PIL import Image

    from tests.test_parse import image_bytes

    text = b"BMI was associated with a lower risk, adjusted for age and sex."
    assert parse_document(text, "finding.txt").text.strip() == text.decode()
    assert_refused(image_bytes(Image.new("RGB", (8, 8)), "BMP"), "notes.txt", "content_mismatch", match="BMP")


def test_binary_content_under_a_source_extension_is_refused():
    assert_refused(b"%PDF-1.7\n...", "config.json", "content_mismatch", match="PDF")
    assert_refused(random.Random(11).randbytes(3000), "server.log", "bad_encoding")


@pytest.mark.parametrize(("filename", "data", "three"), [("two.txt", b"ok", b"ok!"), ("one.py", b"\n 1 \n", b"\n 1 2 3\n"),
                                                      ("mark.md", b"--", b"---")])
def test_one_or_two_characters_are_no_text(filename, data, three):
    """A unit of one or two characters (a page number, a stray mark) is "no text", not a document."""
    assert_refused(data, filename, "no_text")
    assert parse_document(three, filename).text.strip()  # three characters are text
