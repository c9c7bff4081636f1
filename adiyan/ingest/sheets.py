"""Spreadsheets: XLSX one unit per sheet, CSV one unit; tables as Markdown.

Docling reads both offline (its XLSX backend needs openpyxl, installed through docling-slim's
``format-xlsx`` extra; its CSV backend only the standard library) and is the first tier. When
Docling fails, openpyxl (XLSX) or the ``csv`` module (CSV) reads the cells, with a named
``docling_failed`` warning and the tier recorded on every unit. Each sheet's section starts
with ``## Sheet: <name>``, since a sheet's name is often the only label its numbers have.
"""

from __future__ import annotations

import csv
import io

from .docling_convert import TIER as DOCLING, _convert
from .pptx_text import _table_markdown
from .report import ExtractionReport, ParseError


def workbook_to_markdown(data: bytes, filename: str, report: ExtractionReport) -> str:
    """A ``## Sheet: <name>`` section per sheet that holds text; an empty sheet is warned about."""
    try:
        sheets, tier = _docling_sheets(data, filename), DOCLING
    except ParseError as docling_error:
        try:
            sheets, tier = _openpyxl_sheets(data), "openpyxl"
        except Exception as exc:  # noqa: BLE001 - openpyxl raises many types for a broken workbook
            raise ParseError(filename, "unreadable_document",
                             f"{docling_error.reason}; openpyxl could not read it either: {exc}") from exc
        report.warn("docling_failed", None, f"{filename}: {docling_error.reason}; read with openpyxl instead")
    sections = []
    for number, (name, text) in enumerate(sheets, start=1):
        report.add_unit(number, "sheet", tier, text)
        if text:
            sections.append(f"## Sheet: {name}\n\n{text}")
        else:
            report.warn("empty_sheet", number, f"sheet {number} ({name!r}) of {filename} has no cells with text")
    return "\n\n".join(sections)


def _docling_sheets(data: bytes, filename: str) -> list[tuple[str, str]]:
    from docling_core.types.doc import GroupLabel  # heavy: docling-core loads with docling, on first use

    document = _convert(data, ".xlsx", filename, "unreadable_document").document
    names = [g.name for g in document.groups if g.label == GroupLabel.SHEET]
    # Docling numbers pages 1..N over the workbook's sheets in order, one page per sheet.
    return [(name, document.export_to_markdown(page_no=number, image_placeholder="").strip())
            for number, name in enumerate(names, start=1)]


def _openpyxl_sheets(data: bytes) -> list[tuple[str, str]]:
    from openpyxl import load_workbook  # only the fallback tier needs it; importing costs 0.2 s

    workbook = load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        return [(sheet.title, _table_markdown(_trimmed(sheet.iter_rows(values_only=True))))
                for sheet in workbook.worksheets]
    finally:
        workbook.close()


def _trimmed(rows) -> list[list[str]]:
    """Cell texts without empty rows and without the empty columns at the right."""
    rows = [["" if v is None else str(v) for v in row] for row in rows]
    rows = [row for row in rows if any(cell.strip() for cell in row)]
    width = max((max(i for i, c in enumerate(row) if c.strip()) + 1 for row in rows), default=0)
    return [row[:width] for row in rows]


def csv_to_markdown(text: str, filename: str, report: ExtractionReport, extension: str = ".csv") -> str:
    """One unit: the table. ``text`` is already decoded (the caller records the encoding)."""
    try:
        document = _convert(text.encode("utf-8"), extension, filename, "unreadable_document").document
        table, tier = document.export_to_markdown().strip(), DOCLING
    except ParseError as docling_error:
        table, tier = _csv_table(text), "csv"
        report.warn("docling_failed", None, f"{filename}: {docling_error.reason}; read with the csv module instead")
    report.add_unit(1, "sheet", tier, table)
    return table


def _csv_table(text: str) -> str:
    try:
        dialect = csv.Sniffer().sniff(text[:4096], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
    return _table_markdown(_trimmed(csv.reader(io.StringIO(text), dialect)))
