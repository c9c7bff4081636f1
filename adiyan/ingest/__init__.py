"""Turning uploaded files into text for the knowledge base, loudly: see ``parse_document``.

Docling and the OCR engines load on first use, so importing this package stays cheap.
"""

from .parse import parse_cached, parse_document
from .report import ExtractionReport, ExtractionWarning, ParsedDocument, ParseError, UnitReport

__all__ = ["ExtractionReport", "ExtractionWarning", "ParseError", "ParsedDocument", "UnitReport",
           "parse_cached", "parse_document"]
