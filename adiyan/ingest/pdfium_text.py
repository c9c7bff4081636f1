"""PDFium (pypdfium2): the PDF tiers' second text extractor, its Unicode-map evidence, and the page renderer.

PDFium maps a font's codes to Unicode on its own (embedded CFF / Type 1 built-in encodings,
``uXXXX`` glyph names) where docling-parse may not, and it says which characters it could not
map at all (``FPDFText_HasUnicodeMapError``): the evidence the tiers use before they call a page
of foreign-language words garbled. PDFium is not thread-safe, so every call into it holds one
process-wide lock.
"""

from __future__ import annotations

import threading

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c
from PIL import Image

TIER = "pdfium"
VERSION = f"pypdfium2 {pdfium.PYPDFIUM_INFO} / pdfium {pdfium.PDFIUM_INFO}"  # in the parse cache key
_lock = threading.RLock()


class PdfiumUnavailable(RuntimeError):
    """PDFium could not open the document (the message says why)."""


class PdfiumDocument:
    """One open document; use as a context manager (``with PdfiumDocument(data) as doc``)."""

    def __init__(self, data: bytes):
        with _lock:
            try:
                self._doc = pdfium.PdfDocument(data)  # an empty user password is tried, as in Docling
            except pdfium.PdfiumError as exc:
                raise PdfiumUnavailable(str(exc)) from exc
        self._data = data  # PDFium reads the buffer lazily: it must outlive the document

    def __enter__(self) -> PdfiumDocument:
        return self

    def __exit__(self, *exc) -> None:
        with _lock:
            self._doc.close()

    def __len__(self) -> int:
        return len(self._doc)

    def text(self, page_no: int) -> tuple[str, float]:
        """Page ``page_no``'s (1-based) text and the share of its characters PDFium could not map to Unicode."""
        with _lock:
            page = self._doc[page_no - 1]
            textpage = page.get_textpage()
            try:
                n = textpage.count_chars()
                unmapped = sum(1 for i in range(n) if pdfium_c.FPDFText_HasUnicodeMapError(textpage, i) == 1)
                raw = textpage.get_text_bounded()
            finally:
                textpage.close()
                page.close()
        # \x02 marks a hyphen PDFium took out at a line break (the break is gone too); lines end in \r\n.
        text = raw.replace("\x02", "").replace("\ufffe", "").replace("\r\n", "\n").replace("\r", "\n")
        return "\n".join(line.rstrip() for line in text.split("\n")).strip(), (unmapped / n if n else 0.0)

    def render(self, page_no: int, scale: float) -> Image.Image:
        """Page ``page_no`` (1-based) as an RGB image, ``scale`` pixels per PDF point."""
        with _lock:
            page = self._doc[page_no - 1]
            try:
                bitmap = page.render(scale=scale)
                try:
                    return bitmap.to_pil().convert("RGB")
                finally:
                    bitmap.close()
            finally:
                page.close()
