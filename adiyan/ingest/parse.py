"""Bytes and a file name in, Markdown and an extraction report out; never an empty success.

The file name is a key, not a path: it is validated and only its extension is used, to pick
the format, which the content's magic bytes must then agree with. Every refusal is a
ParseError whose message starts with the file name and says why; a document that yields no
text at all is one of them, and a page or slide that yields none is a named warning.
"""

from __future__ import annotations

import codecs
import hashlib
import io
import re
import time
import zipfile
from pathlib import Path, PurePosixPath

from PIL import Image, ImageSequence

from .docling_convert import flow_document_to_markdown, pdf_to_markdown
from .ocr import ENGINES, OcrUnavailable, recognize
from .pptx_text import deck_to_markdown
from .report import ExtractionReport, ParsedDocument, ParseError, UnitReport

# extension -> (format, what the content must look like; None = text, i.e. no known binary signature)
EXTENSIONS = {
    ".md": ("markdown", None), ".markdown": ("markdown", None), ".txt": ("text", None),
    ".html": ("html", None), ".htm": ("html", None),
    ".docx": ("docx", "zip"), ".pptx": ("pptx", "zip"), ".pdf": ("pdf", "PDF"),
    ".png": ("image", "PNG"), ".jpg": ("image", "JPEG"), ".jpeg": ("image", "JPEG"),
    ".tif": ("image", "TIFF"), ".tiff": ("image", "TIFF"),
}
METHODS = {"markdown": "as-is", "text": "as-is", "html": "docling", "docx": "docling", "pdf": "docling",
           "pptx": "python-pptx", "image": "ocr"}
_SIGNATURES = [
    (b"%PDF-", "PDF"), (b"PK\x03\x04", "zip"), (b"PK\x05\x06", "zip"), (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"\xff\xd8\xff", "JPEG"), (b"II*\x00", "TIFF"), (b"MM\x00*", "TIFF"), (b"GIF8", "GIF"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "OLE2 (a legacy .doc/.ppt/.xls)"),
]
_MAIN_PARTS = {"docx": "word/document.xml", "pptx": "ppt/presentation.xml"}
# Both a reference ("/Encrypt 12 0 R") and an inline dictionary occur in trailers and xref streams.
_ENCRYPT = re.compile(rb"/Encrypt\s*(?:\d+\s+\d+\s+R|<<)")
# A <meta charset=...> or <meta http-equiv=... content="...; charset=..."> in the document head.
_META_CHARSET = re.compile(rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.IGNORECASE)
_DRIVE = re.compile(r"^[A-Za-z]:")


def parse_document(data: bytes, filename: str, *, max_bytes: int = 50_000_000,
                   ocr: str = "rapidocr") -> ParsedDocument:
    """Markdown text of a document and how it was obtained; raises ParseError with the reason.

    ``ocr`` picks the engine for images, picture-only slides and pages without a text layer:
    "rapidocr" (falls back to tesseract if RapidOCR cannot load), "tesseract", or "none".
    """
    started = time.perf_counter()
    _check_name(filename)
    if ocr not in ENGINES:
        raise ValueError(f"ocr must be one of {ENGINES}, not {ocr!r}")
    extension = PurePosixPath(filename).suffix.lower()
    if extension not in EXTENSIONS:
        raise ParseError(filename, "unsupported_extension",
                         f"unsupported file type {extension or '(no extension)'}; "
                         f"supported: {' '.join(sorted(EXTENSIONS))}")
    if not data:
        raise ParseError(filename, "empty_file", "empty file (0 bytes)")
    if len(data) > max_bytes:
        raise ParseError(filename, "too_large", f"file is {len(data)} bytes, over the limit of {max_bytes}")
    fmt, expected = EXTENSIONS[extension]
    _check_signature(data, filename, extension, expected)

    report = ExtractionReport(filename, fmt, METHODS[fmt], authored_markdown=fmt == "markdown")
    if fmt in ("markdown", "text"):
        text = _decode_utf8(data, filename)
        report.units.append(UnitReport(1, "document", fmt, len(text.strip())))
    elif fmt == "html":
        # Re-encoded as UTF-8 behind a BOM, which outranks any <meta charset> in Docling's HTML parser.
        html = "\ufeff" + _decode_html(data, filename)
        text = flow_document_to_markdown(html.encode("utf-8"), extension, filename, report)
    elif fmt == "docx":
        _check_ooxml(data, filename, fmt)
        text = flow_document_to_markdown(data, extension, filename, report)
    elif fmt == "pptx":
        _check_ooxml(data, filename, fmt)
        text = deck_to_markdown(data, filename, report, ocr)
    elif fmt == "pdf":
        _check_pdf(data, filename)
        text = pdf_to_markdown(data, filename, report, ocr)
    else:
        text = _ocr_image_file(data, filename, report, ocr)

    if not text.strip():
        err = ParseError(filename, "no_text", "no text could be extracted" + _summarise(report.warnings))
        err.report = report  # every warning stays reachable; the message stays readable
        raise err
    report.total_chars = len(text)
    report.seconds = time.perf_counter() - started
    return ParsedDocument(text, report)


def _summarise(warnings, show: int = 3) -> str:
    """`` (w1; w2; w3; and 1,997 more: empty_slide ×2000)``: the first few warnings in full, then counts."""
    if not warnings:
        return ""
    shown = "; ".join(w.message for w in warnings[:show])
    if len(warnings) <= show:
        return f" ({shown})"
    counts: dict[str, int] = {}
    for w in warnings:
        counts[w.code] = counts.get(w.code, 0) + 1
    by_code = ", ".join(f"{code} ×{n:,}" for code, n in counts.items())
    return f" ({shown}; and {len(warnings) - show:,} more; in all {by_code})"


def _check_name(filename: str) -> None:
    """A name is a storage key: nothing in it may read as a path or end a C string early."""
    if not isinstance(filename, str) or not filename.strip():
        raise ParseError(str(filename), "unsafe_name", "file name is empty")
    for bad, why in (("\x00", "a NUL byte"), ("/", "a '/'"), ("\\", "a '\\'"), ("..", "'..'")):
        if bad in filename:
            raise ParseError(filename, "unsafe_name", f"file name contains {why}; give a bare name such as report.pdf")
    if _DRIVE.match(filename):
        raise ParseError(filename, "unsafe_name", "file name is an absolute (drive) path; give a bare name")


def _sniff(data: bytes) -> str | None:
    for signature, kind in _SIGNATURES:
        if data.startswith(signature):
            return kind
    if data.find(b"%PDF-", 0, 1024) != -1:  # the PDF header may follow up to 1 KiB of junk
        return "PDF"
    return None


def _check_signature(data: bytes, filename: str, extension: str, expected: str | None) -> None:
    actual = _sniff(data)
    if actual == expected:
        return
    if expected == "zip":
        raise ParseError(filename, "not_a_zip", f"not a valid {extension} (not a zip package"
                         + (f"; the content looks like {actual})" if actual else ")"))
    found = f"looks like {actual}" if actual else f"has no {expected} signature"
    raise ParseError(filename, "content_mismatch", f"named {extension} but the content {found}")


def _check_ooxml(data: bytes, filename: str, fmt: str) -> None:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as package:
            names = set(package.namelist())
    except zipfile.BadZipFile as exc:
        raise ParseError(filename, "not_a_zip", f"not a valid .{fmt} (corrupt zip: {exc})") from exc
    if _MAIN_PARTS[fmt] not in names:
        raise ParseError(filename, "missing_main_part", f"not a valid .{fmt}: the package has no {_MAIN_PARTS[fmt]}")


def _check_pdf(data: bytes, filename: str) -> None:
    if b"%%EOF" not in data[-1024:]:
        raise ParseError(filename, "truncated_pdf", "truncated PDF: no %%EOF marker at the end of the file")
    if _ENCRYPT.search(data):
        raise ParseError(filename, "encrypted_pdf",
                         "encrypted PDF (its trailer has an /Encrypt dictionary); save a decrypted copy")


def _decode_utf8(data: bytes, filename: str) -> str:
    """UTF-8, with or without a BOM; anything else is refused, never guessed (latin-1 always 'works')."""
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise ParseError(filename, "bad_encoding", f"not valid UTF-8 at byte {exc.start} "
                         f"(0x{data[exc.start]:02x}); save it as UTF-8") from exc


def _decode_html(data: bytes, filename: str) -> str:
    """A BOM wins, then a declared <meta charset> (as browsers do), then UTF-8."""
    declared = _META_CHARSET.search(data[:4096])
    if data.startswith(codecs.BOM_UTF8) or declared is None:
        return _decode_utf8(data, filename)
    name = declared.group(1).decode("ascii")
    try:
        codec = codecs.lookup(name).name
    except LookupError as exc:
        raise ParseError(filename, "bad_encoding", f"declares an unknown charset {name!r}") from exc
    if codec.startswith(("utf-16", "utf-32")):  # HTML: such a declaration in ASCII bytes means UTF-8
        codec = "utf-8"
    if codec == "utf-8":
        return _decode_utf8(data, filename)
    try:
        return data.decode(codec)
    except UnicodeDecodeError as exc:
        raise ParseError(filename, "bad_encoding",
                         f"declares charset {name} but is not valid {name} at byte {exc.start}") from exc


def _ocr_image_file(data: bytes, filename: str, report: ExtractionReport, ocr: str) -> str:
    """Every frame of the image (multi-page TIFFs have several), each a unit."""
    try:
        image = Image.open(io.BytesIO(data))
        frames = [frame.copy() for frame in ImageSequence.Iterator(image)]
    except Exception as exc:  # noqa: BLE001 - Pillow raises OSError, DecompressionBombError, SyntaxError...
        raise ParseError(filename, "unreadable_image", f"not a readable image: {exc}") from exc
    texts = []
    for number, frame in enumerate(frames, start=1):
        try:
            result = recognize(frame, ocr)
        except OcrUnavailable as exc:
            raise ParseError(filename, "ocr_unavailable", f"an image needs OCR, and none is available: {exc}") from exc
        report.ocr_seconds += result.seconds
        report.units.append(UnitReport(number, "image", result.tier if result.text else "", len(result.text)))
        if not result.text:
            report.warn("empty_image", number, f"image {number} of {filename} yielded no text after OCR")
        texts.append(result.text)
    return "\n\n".join(t for t in texts if t)


def _parser_code_hash() -> str:
    """sha256 of the parser's own source: a change to the parser invalidates cached parses."""
    global _PARSER_CODE
    if _PARSER_CODE is None:
        h = hashlib.sha256()
        for f in sorted(Path(__file__).resolve().parent.glob("*.py")):
            h.update(f.name.encode())
            h.update(f.read_bytes())
        _PARSER_CODE = h.hexdigest()
    return _PARSER_CODE


_PARSER_CODE: str | None = None


def parse_cached(data: bytes, filename: str, ingest, cache=None) -> tuple[str, dict]:
    """``parse_document`` (text, report dict) through ``cache`` (a CallCache), when one is given.

    Keyed by (file bytes, extension, OCR engine, size limit, the parser's code), so a sweep that
    re-chunks or re-embeds never parses a document twice, and a parser change parses afresh.
    """
    if cache is None:
        parsed = parse_document(data, filename, max_bytes=ingest.max_bytes, ocr=ingest.ocr)
        return parsed.text, parsed.report.to_dict()
    key = cache.key({"sha256": hashlib.sha256(data).hexdigest(), "ext": PurePosixPath(filename).suffix.lower(),
                     "ocr": ingest.ocr, "max_bytes": ingest.max_bytes, "code": _parser_code_hash()})
    hit = cache.get(key)
    if hit is not None:  # the same bytes may come under another name: the report names this one
        return hit["text"], {**hit["report"], "filename": filename, "cached": True}
    parsed = parse_document(data, filename, max_bytes=ingest.max_bytes, ocr=ingest.ocr)
    report = parsed.report.to_dict()
    cache.put(key, {"text": parsed.text, "report": report})
    return parsed.text, report
