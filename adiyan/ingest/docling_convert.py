"""DOCX, HTML, PDF, XLSX and CSV to Markdown with Docling, using only its model-free pipelines.

Docling's default PDF pipeline needs layout weights from a model hub, which this machine cannot
reach; the native pipeline reads the PDF's own text layer instead (no headings or tables). Pages
that have no text layer are rendered (by docling-parse, which the native pipeline already uses)
and OCR'd. Building a converter takes seconds, so each is built once per process.
"""

from __future__ import annotations

import io
import os
import threading

from .ocr import OcrUnavailable, recognize
from .report import ExtractionReport, ParseError, UnitReport

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here needs a model; make sure none is fetched

TIER = "docling"
# 2 px per PDF point (144 dpi): body text comes out ~25 px high, which PP-OCR reads reliably.
OCR_RENDER_SCALE = 2.0

_converters: dict[bool, object] = {}
_lock = threading.Lock()


def _converter(render_pages: bool):
    """The shared converter; ``render_pages`` gives the PDF-only one that also rasterizes pages."""
    with _lock:
        if render_pages not in _converters:
            from docling.datamodel.base_models import InputFormat  # heavy: docling loads on first use
            from docling.datamodel.pipeline_options import NativePdfPipelineOptions  # heavy: docling
            from docling.document_converter import DocumentConverter, NativePdfFormatOption  # heavy: docling

            pdf = NativePdfFormatOption(pipeline_options=NativePdfPipelineOptions(
                generate_page_images=render_pages, images_scale=OCR_RENDER_SCALE,
                generate_picture_images=False))
            formats = [InputFormat.PDF] if render_pages else [InputFormat.PDF, InputFormat.DOCX, InputFormat.HTML,
                                                              InputFormat.XLSX, InputFormat.CSV]
            _converters[render_pages] = DocumentConverter(allowed_formats=formats,
                                                          format_options={InputFormat.PDF: pdf})
        return _converters[render_pages]


def _convert(data: bytes, extension: str, filename: str, failure_code: str, *, render_pages: bool = False,
             page_range: tuple[int, int] | None = None):
    """Docling's ConversionResult; any failure becomes a ParseError carrying Docling's reason."""
    from docling.datamodel.base_models import ConversionStatus, DocumentStream  # heavy: docling, on first use

    # A fixed stream name: Docling picks the backend from it, and the caller's name is not trusted.
    stream = DocumentStream(name=f"document{extension}", stream=io.BytesIO(data))
    kwargs = {"page_range": page_range} if page_range else {}
    try:
        result = _converter(render_pages).convert(stream, raises_on_error=False, **kwargs)
    except Exception as exc:  # noqa: BLE001 - Docling raises many types; all mean "could not convert"
        raise ParseError(filename, failure_code, f"Docling could not convert it: {exc}") from exc
    if result.status not in (ConversionStatus.SUCCESS, ConversionStatus.PARTIAL_SUCCESS):
        reasons = "; ".join(e.error_message for e in result.errors) or f"status {result.status.value}"
        raise ParseError(filename, failure_code, f"Docling could not convert it: {reasons}")
    return result


def _markdown(document, page_no: int | None = None) -> str:
    # Picture placeholders are not text: they would count as content and pad the chunks.
    return document.export_to_markdown(page_no=page_no, image_placeholder="").strip()


def flow_document_to_markdown(data: bytes, extension: str, filename: str, report: ExtractionReport) -> str:
    """DOCX and HTML: one unit, the whole document."""
    result = _convert(data, extension, filename, "unreadable_document")
    for error in result.errors:
        report.warn("converter_error", None, f"{filename}: {error.error_message}")
    text = _markdown(result.document)
    report.units.append(UnitReport(1, "document", TIER if text else "", len(text)))
    return text


def pdf_to_markdown(data: bytes, filename: str, report: ExtractionReport, ocr: str) -> str:
    """Text layer per page; pages without one are rendered and OCR'd; a page still empty is warned about."""
    result = _convert(data, ".pdf", filename, "unreadable_pdf")
    unreadable = {e.page_no: e.error_message for e in result.errors if e.page_no is not None}
    for error in result.errors:
        if error.page_no is None:
            report.warn("converter_error", None, f"{filename}: {error.error_message}")
    pages = []
    for page_no in range(1, result.input.page_count + 1):
        if page_no in unreadable:
            report.units.append(UnitReport(page_no, "page", "", 0))
            report.warn("page_unreadable", page_no,
                        f"page {page_no} of {filename} could not be parsed: {unreadable[page_no]}")
            continue
        text, tier = _markdown(result.document, page_no), TIER
        if not text:
            text, tier = _ocr_page(data, page_no, filename, report, ocr)
        report.units.append(UnitReport(page_no, "page", tier if text else "", len(text)))
        pages.append(text)
    return "\n\n".join(p for p in pages if p)


def _ocr_page(data: bytes, page_no: int, filename: str, report: ExtractionReport, ocr: str) -> tuple[str, str]:
    where = f"page {page_no} of {filename}"
    try:
        rendered = _convert(data, ".pdf", filename, "unreadable_pdf", render_pages=True, page_range=(page_no, page_no))
        image = rendered.document.pages[page_no].image.pil_image
    except ParseError as exc:
        report.warn("empty_page", page_no, f"{where} has no text layer and could not be rendered for OCR: {exc.reason}")
        return "", ""
    except (KeyError, AttributeError):
        report.warn("empty_page", page_no, f"{where} has no text layer and Docling returned no page image for OCR")
        return "", ""
    try:
        result = recognize(image, ocr)
    except OcrUnavailable as exc:
        report.warn("empty_page", page_no, f"{where} has no text layer and OCR is unavailable ({exc})")
        return "", ""
    report.ocr_seconds += result.seconds
    if not result.text:
        report.warn("empty_page", page_no, f"{where} yielded no text, even after OCR")
    return result.text, result.tier
