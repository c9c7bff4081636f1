"""Turning uploaded files into text for the knowledge base, loudly: see ``parse_document``
(formats table in parse.py) and, for .zip archives and e-mail attachments, ``expand``.

Docling and the OCR engines load on first use, so importing this package stays cheap.
"""

from .containers import Member, expand, is_container
from .parse import parse_cached, parse_document
from .report import ExtractionReport, ExtractionWarning, ParsedDocument, ParseError, UnitReport

__all__ = ["ExtractionReport", "ExtractionWarning", "Member", "ParseError", "ParsedDocument", "UnitReport",
           "expand", "is_container", "parse_cached", "parse_document"]
