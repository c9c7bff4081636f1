"""DOCX, HTML, PDF, XLSX and CSV to Markdown with Docling, using only its model-free pipelines.

Docling's default PDF pipeline needs layout weights from a model hub, which this machine cannot
reach; the native pipeline reads the PDF's own text layer instead (no headings or tables). That
text layer is the first of the PDF tiers (``pdf_tiers``: PDFium's text, then OCR of the page
PDFium renders). Building a converter takes seconds, so it is built once per process.
"""

from __future__ import annotations

import io
import os
import threading

from .report import ExtractionReport, ParseError

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here needs a model; make sure none is fetched

TIER = "docling"

_converter_instance = None
_lock = threading.Lock()


def _converter():
    """The shared converter: DOCX, HTML, XLSX, CSV, and PDF through the native (model-free) pipeline."""
    global _converter_instance
    with _lock:
        if _converter_instance is None:
            from docling.datamodel.base_models import InputFormat  # heavy: docling loads on first use
            from docling.datamodel.pipeline_options import NativePdfPipelineOptions  # heavy: docling
            from docling.document_converter import DocumentConverter, NativePdfFormatOption  # heavy: docling

            pdf = NativePdfFormatOption(pipeline_options=NativePdfPipelineOptions(
                generate_page_images=False, generate_picture_images=False))
            formats = [InputFormat.PDF, InputFormat.DOCX, InputFormat.HTML, InputFormat.XLSX, InputFormat.CSV]
            _converter_instance = DocumentConverter(allowed_formats=formats, format_options={InputFormat.PDF: pdf})
        return _converter_instance


def _convert(data: bytes, extension: str, filename: str, failure_code: str):
    """Docling's ConversionResult; any failure becomes a ParseError carrying Docling's reason."""
    from docling.datamodel.base_models import ConversionStatus, DocumentStream  # heavy: docling, on first use

    # A fixed stream name: Docling picks the backend from it, and the caller's name is not trusted.
    stream = DocumentStream(name=f"document{extension}", stream=io.BytesIO(data))
    try:
        result = _converter().convert(stream, raises_on_error=False)
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
    text = flow_markdown(data, extension, filename, report)
    report.add_unit(1, "document", TIER, text)
    return text


def flow_markdown(data: bytes, extension: str, filename: str, report: ExtractionReport) -> str:
    """A DOCX or HTML document's Markdown, adding no unit (an EPUB chapter is one of several)."""
    result = _convert(data, extension, filename, "unreadable_document")
    for error in result.errors:
        report.warn("converter_error", None, f"{filename}: {error.error_message}")
    return _markdown(result.document)


def pdf_page_texts(data: bytes, filename: str, report: ExtractionReport) -> tuple[int, dict[int, str], dict[int, str]]:
    """Docling's text layer: (page count, {page: Markdown}, {page: why Docling could not parse it}).

    The first PDF tier; ``pdf_tiers`` judges each page's text and falls back where it fails."""
    result = _convert(data, ".pdf", filename, "unreadable_pdf")
    unreadable = {e.page_no: e.error_message for e in result.errors if e.page_no is not None}
    for error in result.errors:
        if error.page_no is None:
            report.warn("converter_error", None, f"{filename}: {error.error_message}")
    pages = {n: _markdown(result.document, n) for n in range(1, result.input.page_count + 1) if n not in unreadable}
    return result.input.page_count, pages, unreadable
