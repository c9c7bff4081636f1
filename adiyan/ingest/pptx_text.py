"""Slide decks: text from the shape tree (tier 1), OCR of the pictures when a slide has none (tier 2).

Converters that render pictures as placeholders lose image-only slides without a trace; walking
the shape tree ourselves accounts for every slide: text, OCR'd text, or a named ``empty_slide``
warning. Group shapes are walked recursively; tables and chart data become Markdown tables.
Speaker notes and review comments are not slide content and are not read.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field

from lxml import etree
from PIL import Image
from pptx import Presentation
from pptx.enum.shapes import PP_PLACEHOLDER
from pptx.shapes.graphfrm import GraphicFrame
from pptx.shapes.group import GroupShape
from pptx.shapes.picture import Picture

from .ocr import OcrUnavailable, recognize
from .report import ExtractionReport, ParseError

TIER = "python-pptx"
_TITLES = (PP_PLACEHOLDER.TITLE, PP_PLACEHOLDER.CENTER_TITLE)
_C = "{http://schemas.openxmlformats.org/drawingml/2006/chart}"
_A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"


@dataclass
class _Slide:
    number: int
    blocks: list[str] = field(default_factory=list)
    pictures: list[Picture] = field(default_factory=list)


def deck_to_markdown(data: bytes, filename: str, report: ExtractionReport, ocr: str) -> str:
    """Markdown with a ``## Slide N`` section per slide that yielded text; fills ``report``."""
    try:
        slides = list(Presentation(io.BytesIO(data)).slides)
    except Exception as exc:  # noqa: BLE001 - python-pptx raises many types for a broken package
        raise ParseError(filename, "unreadable_document", f"python-pptx could not open the deck: {exc}") from exc
    sections = []
    for number, slide in enumerate(slides, start=1):
        content = _Slide(number)
        _walk(slide.shapes, content, filename, report)
        text, tier = "\n\n".join(b for b in content.blocks if b), TIER
        if not text:
            text, tier = _ocr_pictures(content, filename, report, ocr)
        report.add_unit(number, "slide", tier, text)
        if text:
            sections.append(f"## Slide {number}\n\n{text}")
    return "\n\n".join(sections)


def _walk(shapes, content: _Slide, filename: str, report: ExtractionReport) -> None:
    for shape in shapes:
        try:
            if isinstance(shape, GroupShape):
                _walk(shape.shapes, content, filename, report)
            elif isinstance(shape, Picture):
                content.pictures.append(shape)
            elif isinstance(shape, GraphicFrame):
                if shape.has_table:
                    content.blocks.append(_table_markdown(_table_rows(shape.table)))
                elif shape.has_chart:
                    content.blocks.append(_chart_markdown(shape.chart_part.blob))
            elif shape.has_text_frame:  # also shapes python-pptx cannot classify (their shape_type raises)
                content.blocks.append(_text_frame_markdown(shape))
        except Exception as exc:  # noqa: BLE001 - one odd shape must not cost the deck, but is reported
            report.warn("shape_unreadable", content.number,
                        f"slide {content.number} of {filename}: shape {shape.name!r} could not be read: {exc}")


def _text_frame_markdown(shape) -> str:
    lines = [p.text.replace("\v", "\n").strip() for p in shape.text_frame.paragraphs]
    text = "\n".join(line for line in lines if line)
    if text and shape.is_placeholder and shape.placeholder_format.type in _TITLES:
        return "### " + text.replace("\n", " ")
    return text


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _table_rows(table) -> list[list[str]]:
    """Cell texts with a merged cell's text repeated over its span, so each row reads on its own."""
    rows = [[cell.text for cell in row.cells] for row in table.rows]
    for r, row in enumerate(table.rows):
        for c, cell in enumerate(row.cells):
            if cell.is_merge_origin:
                for dr in range(cell.span_height):
                    for dc in range(cell.span_width):
                        rows[r + dr][c + dc] = cell.text
    return rows


def _table_markdown(rows: list[list[str]]) -> str:
    rows = [[_cell(c) for c in row] for row in rows if row]
    if not any(any(row) for row in rows):
        return ""
    width = max(len(row) for row in rows)
    rows = [row + [""] * (width - len(row)) for row in rows]
    lines = ["| " + " | ".join(row) + " |" for row in rows]
    lines.insert(1, "|" + " --- |" * width)
    return "\n".join(lines)


def _chart_markdown(chart_xml: bytes) -> str:
    """Title and cached series data of a chart, read from its XML.

    python-pptx's chart API raises on plot types it does not model (3-D bars, for one); the cached
    values in ``c:ser`` look the same for every chart type.
    """
    root = etree.fromstring(chart_xml)
    title = " ".join(t.text or "" for t in root.iterfind(f"{_C}chart/{_C}title//{_A}t")).strip()
    columns: list[tuple[str, dict[int, str]]] = []
    categories: dict[int, str] = {}
    for ser in root.iter(f"{_C}ser"):
        name = " ".join(v.text or "" for v in ser.iterfind(f"{_C}tx//{_C}v")).strip()
        categories.update(_points(ser.find(f"{_C}cat")) or _points(ser.find(f"{_C}xVal")))
        columns.append((name or f"series {len(columns) + 1}",
                        _points(ser.find(f"{_C}val")) or _points(ser.find(f"{_C}yVal"))))
    indexes = sorted(set(categories).union(*(values for _, values in columns)))
    table = _table_markdown([["", *(name for name, _ in columns)],
                             *([categories.get(i, ""), *(values.get(i, "") for _, values in columns)]
                               for i in indexes)]) if indexes else ""
    return "\n\n".join(part for part in (title, table) if part)


def _points(element) -> dict[int, str]:
    if element is None:
        return {}
    return {int(pt.get("idx")): (pt.findtext(f"{_C}v") or "") for pt in element.iter(f"{_C}pt")}


def _ocr_pictures(content: _Slide, filename: str, report: ExtractionReport, ocr: str) -> tuple[str, str]:
    """Tier 2 for a slide without text; warns ``empty_slide`` (with the reason) when it finds none."""
    where = f"slide {content.number} of {filename}"
    if not content.pictures:
        report.warn("empty_slide", content.number, f"{where} yielded no text and has no pictures to OCR")
        return "", ""
    texts, tier = [], ""
    for picture in content.pictures:
        try:
            image = Image.open(io.BytesIO(picture.image.blob))
            image.load()
        except Exception as exc:  # noqa: BLE001 - dangling relationship, missing blip, unknown format...
            report.warn("picture_unreadable", content.number, f"{where}: picture {picture.name!r} unreadable: {exc}")
            continue
        try:
            result = recognize(image, ocr)
        except OcrUnavailable as exc:
            report.warn("empty_slide", content.number, f"{where} yielded no text and OCR is unavailable ({exc})")
            return "", ""
        report.ocr_seconds += result.seconds
        tier = result.tier
        if result.text:
            texts.append(result.text)
    if not texts:
        report.warn("empty_slide", content.number, f"{where} yielded no text, even after OCR")
    return "\n\n".join(texts), tier
