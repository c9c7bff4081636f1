"""Bytes and a file name in, Markdown and an extraction report out; never an empty success.

The file name is a key, not a path on disk: a relative '/'-separated name (``names.py`` says
what is refused) whose extension picks the format, which the content's magic bytes must then
agree with. Every refusal is a ParseError whose message starts with the file name and says why;
a document that yields no text at all (or only one or two characters) is one of them, and a
unit (page, slide, sheet, image, chapter) that yields none is a named warning. Every unit
records the quality figures of its text (``quality.py``).

=========================  ================  ==================================================
extensions                 units             tiers (first that works; each unit records its own)
=========================  ================  ==================================================
.md .markdown .txt         document          as written, after decoding (``textcodec``)
.py .js .ts .go .java      document          as written, after decoding (an XML declaration or a
.json .yaml .yml .toml                       PEP 263 line names the encoding); format "code",
.xml .ini .log                               ``language`` recorded (``LANGUAGES``)
.html .htm                 document          docling, after decoding
.csv .tsv                  sheet             docling, else csv; after decoding
.docx                      document          docling, else python-docx (``docling_failed``)
.xlsx                      sheet (each)      docling, else openpyxl (``docling_failed``)
.pptx                      slide (each)      python-pptx, else OCR of the slide's pictures
.pdf                       page (each)       docling text layer, else pdfium's text, else OCR of
                                             the rendered page; each judged by ``quality``
                                             (``pdf_tiers``)
.epub                      chapter (each)    docling, per spine document (``epub``)
.png .jpg .jpeg .tif       image (frame)     ocr:rapidocr or ocr:tesseract
.tiff .bmp .webp .heic
.heif (pillow-heif)
.eml                       document          email (headers + text/plain body) or docling
                                             (text/html body); attachments: ``containers``
.doc .rtf / .ppt / .xls    as .docx / .pptx  libreoffice+<tier of the modern format>, when
                           / .xlsx           soffice is on PATH; else refused, naming it
.zip                       -                 refused with code ``container``: ``containers.expand``
=========================  ================  ==================================================

Decoded formats record ``encoding``, ``encoding_confidence`` and ``encoding_source`` in the
report. Encrypted PDFs are read when the empty user password opens them (an owner password
only: printing or copying restricted), with a ``copy_protected`` warning; a PDF that needs a
password is refused.
"""

from __future__ import annotations

import hashlib
import io
import time
import zipfile
from dataclasses import replace
from pathlib import Path, PurePosixPath

from PIL import Image, ImageSequence

from . import legacy, pdf_security
from .containers import is_ooxml
from .docling_convert import flow_document_to_markdown
from .docx_text import docx_to_markdown
from .epub import epub_to_markdown
from .mail import email_to_markdown
from .names import check_name
from .ocr import ENGINES, OcrUnavailable, recognize
from .pdf_tiers import pdf_to_markdown
from .pdfium_text import VERSION as PDFIUM_VERSION
from .pptx_text import deck_to_markdown
from .quality import measure, wordlist_sha256
from .report import ExtractionReport, ParsedDocument, ParseError
from .sheets import csv_to_markdown, workbook_to_markdown
from .textcodec import decode_text

OLE2 = "OLE2 (a legacy .doc/.ppt/.xls)"
# extension -> (format, what the content must look like: a kind, a tuple of kinds, or None = text)
EXTENSIONS = {
    ".md": ("markdown", None), ".markdown": ("markdown", None), ".txt": ("text", None),
    ".html": ("html", None), ".htm": ("html", None), ".csv": ("csv", None), ".tsv": ("csv", None),
    ".docx": ("docx", "zip"), ".pptx": ("pptx", "zip"), ".xlsx": ("xlsx", "zip"), ".pdf": ("pdf", "PDF"),
    ".png": ("image", "PNG"), ".jpg": ("image", "JPEG"), ".jpeg": ("image", "JPEG"),
    ".tif": ("image", "TIFF"), ".tiff": ("image", "TIFF"), ".bmp": ("image", "BMP"), ".webp": ("image", "WEBP"),
    ".eml": ("email", None), ".zip": ("archive", "zip"), ".epub": ("epub", "zip"),
    ".heic": ("image", "HEIF"), ".heif": ("image", "HEIF"),
    # Legacy Office; "zip": a modern file under the old extension, read as what it is.
    ".doc": ("doc", (OLE2, "RTF", "zip")), ".rtf": ("rtf", "RTF"), ".ppt": ("ppt", (OLE2, "zip")),
    ".xls": ("xls", (OLE2, "zip")),
}
# Source and config files: read as text, as written, with their language recorded (``report.language``).
LANGUAGES = {".py": "python", ".js": "javascript", ".ts": "typescript", ".go": "go", ".java": "java",
             ".json": "json", ".yaml": "yaml", ".yml": "yaml", ".toml": "toml", ".xml": "xml", ".ini": "ini",
             ".log": "log"}
EXTENSIONS.update({extension: ("code", None) for extension in LANGUAGES})
_DECLARED_BY = {".xml": "xml", ".py": "python"}  # where a source file may declare its encoding
METHODS = {"markdown": "as-is", "text": "as-is", "html": "docling", "csv": "docling", "docx": "docling",
           "xlsx": "docling", "pdf": "docling", "pptx": "python-pptx", "image": "ocr", "email": "email",
           "archive": "container", "epub": "docling", "code": "as-is", "doc": "libreoffice+docling", "rtf": "libreoffice+docling",
           "ppt": "libreoffice+python-pptx", "xls": "libreoffice+docling"}
_SIGNATURES = [
    (b"%PDF-", "PDF"), (b"PK\x03\x04", "zip"), (b"PK\x05\x06", "zip"), (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"\xff\xd8\xff", "JPEG"), (b"II*\x00", "TIFF"), (b"MM\x00*", "TIFF"), (b"GIF8", "GIF"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", OLE2), (b"{\\rtf", "RTF"),
]
_HEIF_BRANDS = {b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"hevm", b"hevs", b"mif1", b"msf1"}
_MAIN_PARTS = {"docx": "word/document.xml", "pptx": "ppt/presentation.xml", "xlsx": "xl/workbook.xml"}
_LEGACY = {"doc", "rtf", "ppt", "xls"}


def parse_document(data: bytes, filename: str, *, max_bytes: int = 50_000_000,
                   ocr: str = "rapidocr") -> ParsedDocument:
    """Markdown text of a document and how it was obtained; raises ParseError with the reason.

    ``ocr`` picks the engine for images, picture-only slides and pages without a text layer:
    "rapidocr" (falls back to tesseract if RapidOCR cannot load), "tesseract", or "none".
    """
    started = time.perf_counter()
    check_name(filename)
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
        text = _decode(data, filename, report).text
        report.add_unit(1, "document", fmt, text, chars=len(text.strip()))
    elif fmt == "code":
        report.language = LANGUAGES[extension]
        text = _decode(data, filename, report, declared_by=_DECLARED_BY.get(extension)).text
        report.add_unit(1, "document", fmt, text, chars=len(text.strip()))
    elif fmt == "epub":
        text = epub_to_markdown(data, filename, report, max_bytes)
    elif fmt == "html":
        # Re-encoded as UTF-8 behind a BOM, which outranks any <meta charset> in Docling's HTML parser.
        html = "\ufeff" + _decode(data, filename, report, html=True).text
        text = flow_document_to_markdown(html.encode("utf-8"), extension, filename, report)
    elif fmt == "csv":
        text = csv_to_markdown(_decode(data, filename, report).text, filename, report)
    elif fmt in ("docx", "pptx", "xlsx"):
        _check_ooxml(data, filename, fmt)
        text = _office(data, filename, fmt, report, ocr)
    elif fmt == "pdf":
        text = _pdf(data, filename, report, ocr)
    elif fmt == "email":
        text = email_to_markdown(data, filename, report)
    elif fmt == "archive":
        raise _archive_refusal(data, filename)
    elif fmt in _LEGACY:
        text = _legacy(data, filename, extension, report, ocr)
    else:
        text = _ocr_image_file(data, filename, report, ocr)

    if measure(text).no_text:  # one or two characters are no text either
        garbled = any(w.code == "garbled_page" for w in report.warnings)
        err = ParseError(filename, "garbled_text" if garbled else "no_text",
                         ("no tier's text passed the quality check" if garbled else "no text could be extracted")
                         + _summarise(report.warnings))
        err.report = report  # every warning stays reachable; the message stays readable
        raise err
    report.total_chars = len(text)
    report.seconds = time.perf_counter() - started
    return ParsedDocument(text, report)


def _decode(data: bytes, filename: str, report: ExtractionReport, *, html: bool = False,
            declared_by: str | None = None):
    decoded = decode_text(data, filename, html=html, declared_by=declared_by)
    report.decoded(decoded.encoding, decoded.confidence, decoded.source)
    return decoded


def _office(data: bytes, filename: str, fmt: str, report: ExtractionReport, ocr: str) -> str:
    if fmt == "docx":
        return docx_to_markdown(data, filename, report)
    if fmt == "xlsx":
        return workbook_to_markdown(data, filename, report)
    return deck_to_markdown(data, filename, report, ocr)


def _legacy(data: bytes, filename: str, extension: str, report: ExtractionReport, ocr: str) -> str:
    """Converted by LibreOffice, then parsed as the modern format; each unit's tier says both."""
    target = legacy.TARGETS[extension]
    if _sniff(data) == "zip":  # e.g. a .pptx saved as .ppt: no conversion needed
        _check_ooxml(data, filename, target)
        report.warn("extension_mismatch", None, f"{filename} is a .{target} file named {extension}; read as .{target}")
        return _office(data, filename, target, report, ocr)
    converted = legacy.convert(data, filename, extension)
    text = _office(converted, filename, target, report, ocr)
    report.units[:] = [replace(u, tier=f"libreoffice+{u.tier}") if u.tier else u for u in report.units]
    return text


def _archive_refusal(data: bytes, filename: str) -> ParseError:
    if is_ooxml(data):
        return ParseError(filename, "content_mismatch", "named .zip but it is an Office document "
                          "(DOCX, PPTX or XLSX); give it its real extension")
    return ParseError(filename, "container", "a .zip archive holds documents, not text: expand it "
                      "(adiyan.ingest.containers.expand) and ingest its members one by one")


def _pdf(data: bytes, filename: str, report: ExtractionReport, ocr: str) -> str:
    """The text layer, OCR where it is missing; an encrypted PDF only if no password is needed."""
    if b"%%EOF" not in data[-1024:]:
        raise ParseError(filename, "truncated_pdf", "truncated PDF: no %%EOF marker at the end of the file")
    if not pdf_security.is_encrypted(data):
        return pdf_to_markdown(data, filename, report, ocr)
    security = pdf_security.read_security(data)
    opens = pdf_security.opens_without_password(security) if security else None
    if opens is False:
        raise ParseError(filename, "encrypted_pdf", "encrypted PDF that needs a password to open (its user "
                         "password is not empty); save a copy without a password")
    try:
        text = pdf_to_markdown(data, filename, report, ocr)
    except ParseError as exc:
        handler = f"revision {security.revision} of the {security.filter} handler" if security else "an unknown handler"
        raise ParseError(filename, "encrypted_pdf", f"encrypted PDF ({handler}) that could not be opened without "
                         f"a password ({exc.reason}): it needs one, or it is damaged; save a copy without a "
                         "password") from exc
    restricted = ", ".join(security.restrictions()) if security else ""
    report.warn("copy_protected", None, f"{filename} is encrypted but opens without a password (an owner "
                "password only" + (f"; it restricts {restricted}" if restricted else "") + "); its text was read")
    return text


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


# A BMP file header: "BM", the file size, two reserved 16-bit zeros, the pixel offset, then the DIB
# header's own size (one of these). Two letters alone would make any text starting "BM" a bitmap
# ("BMI was associated with...").
_BMP_DIB_SIZES = {12, 16, 40, 52, 56, 64, 108, 124}


def _sniff(data: bytes) -> str | None:
    for signature, kind in _SIGNATURES:
        if data.startswith(signature):
            return kind
    if data[:2] == b"BM" and len(data) >= 18 and data[6:10] == b"\x00" * 4 \
            and int.from_bytes(data[14:18], "little") in _BMP_DIB_SIZES:
        return "BMP"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    if data[4:8] == b"ftyp":  # ISO base media: HEIF stills, or MP4 / QuickTime video
        return "HEIF" if data[8:12] in _HEIF_BRANDS else "ISO media (MP4 or QuickTime video)"
    if len(data) >= 564 and data[0] == data[188] == data[376] == 0x47 and b"\x00" in data[:564]:
        return "MPEG transport stream (video)"  # what .ts means to a camera or a TV recorder
    if data.find(b"%PDF-", 0, 1024) != -1:  # the PDF header may follow up to 1 KiB of junk
        return "PDF"
    return None


def _check_signature(data: bytes, filename: str, extension: str, expected) -> None:
    actual = _sniff(data)
    allowed = expected if isinstance(expected, tuple) else (expected,)
    if actual in allowed:
        return
    if expected == "zip":
        raise ParseError(filename, "not_a_zip", f"not a valid {extension} (not a zip package"
                         + (f"; the content looks like {actual})" if actual else ")"))
    found = f"looks like {actual}" if actual else f"has no {' or '.join(allowed)} signature"
    raise ParseError(filename, "content_mismatch", f"named {extension} but the content {found}")


def _check_ooxml(data: bytes, filename: str, fmt: str) -> None:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as package:
            names = set(package.namelist())
    except zipfile.BadZipFile as exc:
        raise ParseError(filename, "not_a_zip", f"not a valid .{fmt} (corrupt zip: {exc})") from exc
    if _MAIN_PARTS[fmt] not in names:
        raise ParseError(filename, "missing_main_part", f"not a valid .{fmt}: the package has no {_MAIN_PARTS[fmt]}")


def _ocr_image_file(data: bytes, filename: str, report: ExtractionReport, ocr: str) -> str:
    """Every frame of the image (multi-page TIFFs have several), each a unit."""
    if PurePosixPath(filename).suffix.lower() in (".heic", ".heif"):
        _register_heif(filename)
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
        text = "" if measure(result.text).no_text else result.text  # a stray mark or two is not text
        report.add_unit(number, "image", result.tier, text)
        if not text:
            report.warn("empty_image", number, f"image {number} of {filename} yielded no text after OCR")
        texts.append(text)
    return "\n\n".join(t for t in texts if t)


def parser_files() -> list[Path]:
    """The parser's own source: every module of this package (a change to any re-parses)."""
    return sorted(Path(__file__).resolve().parent.glob("*.py"))


def _register_heif(filename: str) -> None:
    """Pillow reads HEIC/HEIF through pillow-heif's libheif decoder, registered on first use."""
    try:
        from pillow_heif import register_heif_opener  # optional decoder: only HEIC/HEIF uploads need libheif
    except ImportError as exc:
        raise ParseError(filename, "decoder_missing", "HEIC/HEIF images need the pillow-heif package "
                         "(pip install pillow-heif; pinned in constraints.txt)") from exc
    register_heif_opener()


def _parser_code_hash() -> str:
    """sha256 of the parser's own source: a change to the parser invalidates cached parses."""
    global _PARSER_CODE
    if _PARSER_CODE is None:
        h = hashlib.sha256()
        for f in parser_files():
            h.update(f.name.encode())
            h.update(f.read_bytes())
        _PARSER_CODE = h.hexdigest()
    return _PARSER_CODE


_PARSER_CODE: str | None = None


def parse_cache_fields(data: bytes, filename: str, ingest) -> dict:
    """What a cached parse is keyed by: the bytes, the extension, the OCR engine, the size limit, the
    parser's code, the word list the quality check reads and PDFium's build (both can change a page's tier)."""
    return {"sha256": hashlib.sha256(data).hexdigest(), "ext": PurePosixPath(filename).suffix.lower(),
            "ocr": ingest.ocr, "max_bytes": ingest.max_bytes, "code": _parser_code_hash(),
            "wordlist": wordlist_sha256(), "pdfium": PDFIUM_VERSION}


def parse_cached(data: bytes, filename: str, ingest, cache=None) -> tuple[str, dict]:
    """``parse_document`` (text, report dict) through ``cache`` (a CallCache), when one is given.

    Keyed by ``parse_cache_fields``, so a sweep that re-chunks or re-embeds never parses a
    document twice, and a parser change parses afresh.
    """
    if cache is None:
        parsed = parse_document(data, filename, max_bytes=ingest.max_bytes, ocr=ingest.ocr)
        return parsed.text, parsed.report.to_dict()
    key = cache.key(parse_cache_fields(data, filename, ingest))
    hit = cache.get(key)
    if hit is not None:  # the same bytes may come under another name: the report names this one
        return hit["text"], {**hit["report"], "filename": filename, "cached": True}
    parsed = parse_document(data, filename, max_bytes=ingest.max_bytes, ocr=ingest.ocr)
    report = parsed.report.to_dict()
    cache.put(key, {"text": parsed.text, "report": report})
    return parsed.text, report
