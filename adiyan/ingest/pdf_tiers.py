"""A PDF page's text: Docling's text layer, else PDFium's, else OCR of the page, each judged before it is kept.

Per page, the first tier whose text passes ``quality`` is stored and recorded (``UnitReport.tier``),
the tiers before it listed with their figures and reasons (``UnitReport.rejected``):

1. ``docling``: the text layer through Docling's native pipeline (the Markdown the rest of the
   knowledge base is built for). Kept unless it is empty (two characters or fewer count as empty),
   fails the hard checks (replacement / control characters; marks where letters should be), or
   has few English words *and* other evidence against it: PDFium's text of the same page passes
   and holds at least ``WORD_MARGIN`` more of its letters in English words, or more than
   ``UNMAPPED_MAX`` of the page's characters have no Unicode mapping in PDFium. A page of Finnish
   or Latin has few English words too, and keeps its text layer.
2. ``pdfium``: PDFium's own text extraction (it reads embedded CFF / Type 1 encodings and
   ``uXXXX`` glyph names that docling-parse does not). Kept if it passes the hard checks and has
   English words or mapped characters.
3. ``ocr:<engine>``: the page rendered by PDFium at ``OCR_RENDER_SCALE`` and read by OCR (what a
   page without a text layer always needed). Kept if it passes the hard checks.

A later tier replacing a text layer that had text is the named warning ``garbled_text_layer``;
a page no tier reads is ``empty_page`` (nothing anywhere) or ``garbled_page`` (text, but none
passed: nothing of it is stored); a document whose every page is one of these is refused,
``garbled_text`` when any page was garbled.
"""

from __future__ import annotations

from dataclasses import dataclass

from .docling_convert import TIER as DOCLING, pdf_page_texts
from .ocr import OcrUnavailable, recognize
from .pdfium_text import TIER as PDFIUM, PdfiumDocument, PdfiumUnavailable
from .quality import TextQuality, measure
from .report import ExtractionReport

# 2 px per PDF point (144 dpi): body text comes out ~25 px high, which PP-OCR reads reliably.
OCR_RENDER_SCALE = 2.0
UNMAPPED_MAX = 0.05  # share of a page's characters PDFium cannot map before its few English words count against it
WORD_MARGIN = 0.3  # how much more of PDFium's letters must be English words for it to replace a doubtful layer


@dataclass
class _Try:
    tier: str
    text: str
    quality: TextQuality
    problem: str | None = None  # why it was not kept
    unmapped: float = 0.0  # PDFium only: share of the page's characters it has no Unicode mapping for

    def rejected(self) -> dict:
        return {"tier": self.tier, "problem": self.problem, "quality": self.quality.to_dict()}


class _Pdfium:
    """PDFium opened on first need (most pages never need it), or the reason it cannot be."""

    def __init__(self, data: bytes):
        self._data, self._doc, self.error, self.page_error = data, None, None, None

    def get(self, page_no: int) -> PdfiumDocument | None:
        """The open document when it has page ``page_no``; else None, and ``error`` says why."""
        if self._doc is None and self.error is None:
            try:
                self._doc = PdfiumDocument(self._data)
            except PdfiumUnavailable as exc:
                self.error = f"PDFium could not open it: {exc}"
        if self._doc is not None and page_no > len(self._doc):  # the two parsers disagree on a broken page tree
            self.page_error = f"PDFium finds {len(self._doc)} pages, not {page_no}"
            return None
        return self._doc

    def close(self) -> None:
        if self._doc is not None:
            self._doc.__exit__(None, None, None)


def pdf_to_markdown(data: bytes, filename: str, report: ExtractionReport, ocr: str) -> str:
    """Every page through the tiers; pages joined by a blank line (``kb.pages.pdf_pages`` splits them again)."""
    page_count, layer, unreadable = pdf_page_texts(data, filename, report)
    pdfium = _Pdfium(data)
    texts = []
    try:
        for page_no in range(1, page_count + 1):
            text = _page(page_no, layer.get(page_no), unreadable.get(page_no), pdfium, filename, report, ocr)
            if text:
                texts.append(text)
    finally:
        pdfium.close()
    return "\n\n".join(texts)


def _page(page_no: int, layer: str | None, unreadable: str | None, pdfium: _Pdfium, filename: str,
          report: ExtractionReport, ocr: str) -> str:
    where = f"page {page_no} of {filename}"
    tries: list[_Try] = []
    first = _Try(DOCLING, layer or "", measure(layer or ""))
    first.problem = (f"Docling could not parse it: {unreadable}" if unreadable is not None
                     else _empty_or_problem(first.quality))
    tries.append(first)
    kept = None
    second = None
    if first.problem is None and first.quality.doubt() is None:
        kept = first
    else:
        second = _pdfium_try(page_no, pdfium)
        tries.append(second)
        if first.problem is None:  # text with few English words: kept unless PDFium says otherwise
            kept = _judge_doubtful_layer(first, second)
        if kept is None and second.problem is None:
            kept = second
    if kept is None:
        third = _ocr_try(page_no, pdfium, report, ocr)
        tries.append(third)
        if third.problem is None:
            kept = third
    rejected = tuple(t.rejected() for t in tries[:tries.index(kept)]) if kept else tuple(t.rejected() for t in tries)
    text = kept.text if kept else ""
    report.add_unit(page_no, "page", kept.tier if kept else "", text, rejected=rejected)
    if kept is not None and kept is not first:
        if unreadable is not None:
            report.warn("page_unreadable", page_no, f"{where}: Docling could not parse it ({unreadable}); "
                        f"read by {kept.tier}")
        elif not first.quality.no_text:
            report.warn("garbled_text_layer", page_no, f"{where}: the text layer was rejected ({first.problem}); "
                        f"read by {kept.tier} instead")
    elif kept is None:
        _warn_unread(page_no, where, tries, unreadable, report)
    return text


def _empty_or_problem(quality: TextQuality) -> str | None:
    return "no text" if quality.no_text else quality.problem()


def _judge_doubtful_layer(first: _Try, second: _Try) -> _Try | None:
    """The text layer has text but few English words: keep it, or give way to PDFium, on the evidence."""
    doubt = first.quality.doubt()
    if second.problem is None and second.quality.doubt() is None and \
            second.quality.word_share >= first.quality.word_share + WORD_MARGIN:
        first.problem = f"{doubt}; PDFium's text has {second.quality.word_share:.0%}"
        return None
    if second.unmapped > UNMAPPED_MAX:
        first.problem = f"{doubt}, and PDFium finds no Unicode mapping for {second.unmapped:.0%} of the page's characters"
        return None
    return first


def _pdfium_try(page_no: int, pdfium: _Pdfium) -> _Try:
    doc = pdfium.get(page_no)
    if doc is None:
        return _Try(PDFIUM, "", measure(""), pdfium.error or pdfium.page_error)
    text, unmapped = doc.text(page_no)
    attempt = _Try(PDFIUM, text, measure(text), unmapped=unmapped)
    attempt.problem = _empty_or_problem(attempt.quality)
    if attempt.problem is None and (doubt := attempt.quality.doubt()) and unmapped > UNMAPPED_MAX:
        attempt.problem = f"{doubt}, and no Unicode mapping for {unmapped:.0%} of its characters"
    return attempt


def _ocr_try(page_no: int, pdfium: _Pdfium, report: ExtractionReport, ocr: str) -> _Try:
    tier = "ocr"  # until an engine reads it: then "ocr:<engine>"
    doc = pdfium.get(page_no)
    if doc is None:
        reason = pdfium.error or pdfium.page_error
        return _Try(tier, "", measure(""), f"the page could not be rendered for OCR ({reason})")
    try:
        result = recognize(doc.render(page_no, OCR_RENDER_SCALE), ocr)
    except OcrUnavailable as exc:
        return _Try(tier, "", measure(""), f"OCR is unavailable ({exc})" if ocr != "none" else str(exc))
    report.ocr_seconds += result.seconds
    attempt = _Try(result.tier, result.text, measure(result.text))
    attempt.problem = _empty_or_problem(attempt.quality)
    return attempt


def _warn_unread(page_no: int, where: str, tries: list[_Try], unreadable: str | None, report: ExtractionReport) -> None:
    reasons = "; ".join(f"{t.tier}: {t.problem}" for t in tries)
    if any(not t.quality.no_text for t in tries):
        report.warn("garbled_page", page_no, f"{where}: no tier gave text that passes the quality check "
                    f"({reasons}); nothing of it is stored")
    elif unreadable is not None:
        report.warn("page_unreadable", page_no, f"{where} could not be parsed: {unreadable} ({reasons})")
    else:
        ocr_try = tries[-1]
        said = "yielded no text, even after OCR" if ocr_try.problem == "no text" else \
            f"has no text layer, and {ocr_try.problem}"
        report.warn("empty_page", page_no, f"{where} {said}")
