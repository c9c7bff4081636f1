"""Bytes of a text, Markdown, HTML or CSV file to str, with the encoding and how sure we are of it.

Order: a byte-order mark (UTF-8/16/32) decides; then a declared charset: for HTML a ``<meta
charset>`` (as browsers do), for XML its ``<?xml ... encoding="..."?>``, for Python its PEP 263
``# -*- coding: ... -*-`` line; then UTF-16 without a mark (a NUL in every other byte); then strict UTF-8,
which random bytes essentially never pass; then charset-normalizer's detection. Detection among the Western single-byte code pages is often a
tie (cp1250, cp1252 and latin-1 read "Grüße" alike); a tie goes to cp1252, the WHATWG default
for legacy Western text and a superset of latin-1's printable characters.

Refused, saying why (latin-1 decodes any byte string, so "it decoded" proves nothing): bytes no
encoding reads as plausible text (charset-normalizer's mess ratio over its 0.2 threshold);
malformed UTF-8 (every non-ASCII byte sits in a UTF-8-shaped sequence, yet it does not decode:
overlong forms, surrogates), which a legacy code page would turn into confident nonsense; and
UTF-8 mixed with a single-byte encoding (two or more UTF-8-encoded accented letters, ``C3 BC``
for ü, beside bytes that are not UTF-8), which no single encoding reads right. Detection on a
sentence or two is weak (charset-normalizer reads one KOI8-R sentence as Shift-JIS); the
report's ``encoding_confidence`` is charset-normalizer's (1 - mess ratio), not a guarantee.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

from charset_normalizer import from_bytes

from .report import ParseError

# Longest first: the UTF-32-LE mark begins with the UTF-16-LE one.
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be"), (codecs.BOM_UTF8, "utf-8"),
         (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))
# A <meta charset=...> or <meta http-equiv=... content="...; charset=..."> in the document head.
_META_CHARSET = re.compile(rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.IGNORECASE)
# Where each kind of file declares its encoding, searched in its first 4 KiB (Python: first two lines only).
_DECLARATIONS = {
    "html": _META_CHARSET,
    "xml": re.compile(rb"""\A\s*<\?xml[^>]*?encoding\s*=\s*["']([A-Za-z0-9._:-]+)["']"""),
    "python": re.compile(rb"\A(?:[^\n]*\n)?[ \t\f]*#[^\n]*?coding[:=][ \t]*([-\w.]+)"),
}
MAX_MESS = 0.2  # charset-normalizer's own threshold: above it, a decoding is not plausible text
TIE = 0.05  # candidates this close to the best mess ratio count as equally plausible (its noise on a paragraph: ~0.03)
_WIDE = ["utf_16", "utf_16_be", "utf_16_le", "utf_32", "utf_32_be", "utf_32_le"]
_UTF8_SHAPED = re.compile(rb"[\xc0-\xdf][\x80-\xbf]|[\xe0-\xef][\x80-\xbf]{2}|[\xf0-\xf7][\x80-\xbf]{3}")
# U+00A0-U+00FF in UTF-8 (ü is C3 BC): read by a Western code page, "Ã¼", which legacy text hardly has.
_UTF8_LATIN1 = re.compile(rb"[\xc2\xc3][\x80-\xbf]")
_HIGH = re.compile(rb"[\x80-\xff]")


@dataclass(frozen=True)
class Decoded:
    text: str
    encoding: str  # Python codec name, e.g. "utf-8", "utf-16-le", "cp1252"
    confidence: float  # 1.0 for a BOM, a declaration or valid UTF-8; 1 - mess ratio when detected
    source: str  # "bom" | "declared" | "utf-8" | "detected"


def decode_text(data: bytes, filename: str, *, html: bool = False, declared_by: str | None = None) -> Decoded:
    """The text of ``data``; raises ParseError(``bad_encoding``) naming the file and the reason.

    ``declared_by`` ("html", "xml", "python"; ``html=True`` means "html") says where a declared charset may be."""
    declared_by = "html" if html else declared_by
    for bom, codec in _BOMS:
        if data.startswith(bom):
            try:
                return Decoded(data[len(bom):].decode(codec), codec, 1.0, "bom")
            except UnicodeDecodeError as exc:
                raise ParseError(filename, "bad_encoding", f"starts with a {codec} byte-order mark but is not "
                                 f"valid {codec} at byte {exc.start + len(bom)}") from exc
    if declared_by is not None:
        declared = _declared_charset(data, filename, _DECLARATIONS[declared_by], html=declared_by == "html")
        if declared is not None:
            return declared
    wide = _bomless_utf16(data)
    if wide is not None:
        return wide
    try:
        return Decoded(data.decode("utf-8"), "utf-8", 1.0, "utf-8")
    except UnicodeDecodeError as exc:
        first_bad = exc.start
    return _detect(data, filename, first_bad)


def _bomless_utf16(data: bytes) -> Decoded | None:
    """UTF-16 without a mark: Latin-script text has a NUL in every other byte (and NULs are valid UTF-8).

    Taken when at least 40% of one parity's bytes are NUL and under 1% of the other's; the
    confidence is that NUL share.
    """
    if b"\x00" not in data or len(data) < 4 or len(data) % 2:
        return None
    half = len(data) // 2
    even, odd = data[0::2].count(0) / half, data[1::2].count(0) / half
    for codec, zeros, others in (("utf-16-le", odd, even), ("utf-16-be", even, odd)):
        if zeros >= 0.4 and others < 0.01:
            try:
                return Decoded(data.decode(codec), codec, round(zeros, 3), "detected")
            except UnicodeDecodeError:
                return None
    return None


def _declared_charset(data: bytes, filename: str, pattern: re.Pattern, html: bool) -> Decoded | None:
    found = pattern.search(data[:4096])
    if found is None:
        return None
    name = found.group(1).decode("ascii")
    try:
        codec = codecs.lookup(name).name
    except LookupError as exc:
        raise ParseError(filename, "bad_encoding", f"declares an unknown charset {name!r}") from exc
    if html and codec.startswith(("utf-16", "utf-32")):  # HTML: such a declaration in ASCII bytes means UTF-8
        codec = "utf-8"
    try:
        return Decoded(data.decode(codec), codec, 1.0, "declared")
    except UnicodeDecodeError as exc:
        raise ParseError(filename, "bad_encoding",
                         f"declares charset {name} but is not valid {name} at byte {exc.start}") from exc


def _detect(data: bytes, filename: str, first_bad: int) -> Decoded:
    where = f"not valid UTF-8 at byte {first_bad} (0x{data[first_bad]:02x})"
    if sum(len(m) for m in _UTF8_SHAPED.findall(data)) == len(_HIGH.findall(data)):
        raise ParseError(filename, "bad_encoding", f"{where}: malformed UTF-8 (an overlong form or an encoded "
                         "surrogate), not another encoding; save it as valid UTF-8")
    # Without NUL bytes a file is not UTF-16/32 text (ASCII letters would give NULs): do not guess it.
    exclude = None if b"\x00" in data else _WIDE
    matches = list(from_bytes(data, threshold=MAX_MESS, cp_exclusion=exclude))
    if not matches:
        raise ParseError(filename, "bad_encoding", f"{where} and its encoding could not be detected with "
                         "confidence: no encoding reads it as plausible text; save it as UTF-8")
    best = min(m.chaos for m in matches)
    tied = [m for m in matches if m.chaos <= best + TIE]
    western = next((m for m in tied if "cp1252" in m.could_be_from_charset), None)
    chosen = western or tied[0]
    decoded = Decoded(str(chosen), codecs.lookup(chosen.encoding).name, round(1.0 - chosen.chaos, 3), "detected")
    if western is not None:
        try:  # detection samples large files; a byte cp1252 leaves undefined may sit elsewhere
            decoded = Decoded(data.decode("cp1252"), "cp1252", decoded.confidence, "detected")
        except UnicodeDecodeError:
            pass
    mojibake = len(_UTF8_LATIN1.findall(data))
    if mojibake >= 2 and _single_byte(decoded.encoding):
        raise ParseError(filename, "bad_encoding", f"{where}, yet it holds {mojibake} UTF-8-encoded accented "
                         f"letters beside bytes of another encoding ({decoded.encoding}?): it mixes encodings, so no "
                         "single one reads it right; save it in one encoding")
    return decoded


def _single_byte(codec: str) -> bool:
    return len(bytes(range(0x80, 0x100)).decode(codec, errors="replace")) == 0x80
