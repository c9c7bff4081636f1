"""What a parse produced and how: stored next to the text so a thin or empty extraction is visible.

Every unit (page, slide, image frame, chapter, or the whole document for flow formats) records
which tier produced its text, how many characters it gave and the quality figures of that text
(``quality.measure``: replacement-character, letter and dictionary-word shares); a unit that gave
nothing carries a named warning, and a PDF page whose first tiers were rejected lists them with
their figures (``rejected``). ``to_dict()`` is the JSON form the knowledge base stores with each document.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .quality import measure


class ParseError(ValueError):
    """A document could not be turned into text; the message starts with the file name.

    ``code`` names the reason for callers that branch on it: unsafe_name, unsupported_extension,
    empty_file, too_large, content_mismatch, bad_encoding, truncated_pdf, encrypted_pdf,
    unreadable_pdf, not_a_zip, missing_main_part, unreadable_document, unreadable_image,
    ocr_unavailable, no_text, garbled_text (every tier's text of every page with text failed the
    quality check: ``quality.py``), unreadable_epub, decoder_missing (HEIC without pillow-heif),
    archive_limit (also an EPUB that unpacks too large); container (a .zip: expand it), converter_missing (a legacy Office
    file and no LibreOffice), conversion_failed; and from ``containers.expand``: archive_limit,
    unsafe_member, nested_archive, unreadable_archive, empty_archive.
    """

    def __init__(self, filename: str, code: str, reason: str):
        super().__init__(f"{filename}: {reason}")
        self.filename = filename
        self.code = code
        self.reason = reason


@dataclass(frozen=True)
class ExtractionWarning:
    """A named, non-fatal problem, tied to a unit when it concerns one (``unit`` None otherwise)."""

    code: str
    unit: int | None
    message: str


@dataclass(frozen=True)
class UnitReport:
    """One page, slide, image frame or chapter; flow formats (DOCX, HTML, Markdown, text) are one unit."""

    unit: int  # 1-based
    kind: str  # "page" | "slide" | "image" | "sheet" | "chapter" | "document"
    # What produced the text, e.g. "docling", "pdfium", "python-docx", "python-pptx", "openpyxl",
    # "csv", "email", "ocr:rapidocr", "libreoffice+docling"; "" if nothing did.
    tier: str
    chars: int
    quality: dict | None = None  # quality.TextQuality.to_dict() of the text stored for this unit
    # PDF pages: the tiers tried before the one that produced the text, each {tier, problem, quality}
    rejected: tuple = ()
    title: str | None = None  # an EPUB chapter's title (its table-of-contents entry)


@dataclass
class ExtractionReport:
    filename: str
    format: str  # "pdf" | "docx" | "pptx" | "xlsx" | "csv" | "html" | "markdown" | "text" | "code" | "epub" | "image" | "email" | "doc" | ...
    method: str  # the primary converter; units say which tier actually produced their text
    authored_markdown: bool = False  # written as Markdown by a person: heading-aware chunking applies
    # Where bytes were decoded as text (text, Markdown, HTML, CSV, e-mail bodies): the codec, how
    # sure (1.0 for a byte-order mark, a declaration or valid UTF-8; 1 - mess ratio when detected)
    # and how it was found ("bom" | "declared" | "utf-8" | "detected" | "mime"); None elsewhere.
    encoding: str | None = None
    encoding_confidence: float | None = None
    encoding_source: str | None = None
    language: str | None = None  # format "code": the language or config syntax the extension names
    units: list[UnitReport] = field(default_factory=list)
    warnings: list[ExtractionWarning] = field(default_factory=list)
    total_chars: int = 0
    seconds: float = 0.0
    ocr_seconds: float = 0.0

    def add_unit(self, number: int, kind: str, tier: str, text: str, *, chars: int | None = None,
                 rejected: tuple = (), title: str | None = None) -> UnitReport:
        """Append a unit for ``text`` (``tier`` only if it gave any), with its quality figures."""
        unit = UnitReport(number, kind, tier if text.strip() else "", len(text) if chars is None else chars,
                          measure(text).to_dict(), tuple(rejected), title)
        self.units.append(unit)
        return unit

    def warn(self, code: str, unit: int | None, message: str) -> None:
        self.warnings.append(ExtractionWarning(code, unit, message))

    def decoded(self, encoding: str, confidence: float, source: str) -> None:
        self.encoding, self.encoding_confidence, self.encoding_source = encoding, confidence, source

    @property
    def tiers(self) -> set[str]:
        return {u.tier for u in self.units if u.tier}

    def to_dict(self) -> dict:
        d = asdict(self)
        d["tiers"] = sorted(self.tiers)
        d["seconds"] = round(self.seconds, 3)
        d["ocr_seconds"] = round(self.ocr_seconds, 3)
        return d


@dataclass(frozen=True)
class ParsedDocument:
    text: str  # Markdown
    report: ExtractionReport
