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
