"""Slide decks: text from the shape tree, OCR for picture-only slides, named warnings for the rest.

Decks are built with python-pptx; the picture holds text rendered with PIL, so OCR has a known answer.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from PIL import Image, ImageDraw, ImageFont
from pptx import Presentation
from pptx.util import Inches

from adiyan.ingest import ParseError, parse_document

BLANK_LAYOUT, TITLE_AND_CONTENT_LAYOUT = 6, 1


def rendered_text_png(tmp_path: Path, text: str) -> Path:
    """Black text on white, in DejaVu Sans Bold when the system has it (Pillow's own font otherwise)."""
    fonts = sorted(Path("/usr/share/fonts").rglob("DejaVuSans-Bold.ttf"))
    font = ImageFont.truetype(str(fonts[0]), 72) if fonts else ImageFont.load_default(size=72)
    image = Image.new("RGB", (1400, 260), "white")
    ImageDraw.Draw(image).text((40, 80), text, fill="black", font=font)
    path = tmp_path / "rendered.png"
    image.save(path)
    return path


def blank_png(tmp_path: Path) -> Path:
    path = tmp_path / "blank.png"
    Image.new("RGB", (800, 600), "white").save(path)
    return path


def slide_sections(markdown: str) -> dict[int, str]:
    """Slide number -> the Markdown under its ``## Slide N`` heading."""
    parts = re.split(r"^## Slide (\d+)\n", markdown, flags=re.M)
    return {int(number): body for number, body in zip(parts[1::2], parts[2::2])}


def nested_groups(shapes, depth: int):
    """The innermost of ``depth`` group shapes nested in one another."""
    for _ in range(depth):
        shapes = shapes.add_group_shape().shapes
    return shapes


@pytest.fixture(scope="module")
def three_slide_deck(tmp_path_factory):
    """Text slide, picture-of-text slide, blank-picture slide (whose speaker notes hold text)."""
    tmp_path = tmp_path_factory.mktemp("deck")
    deck = Presentation()
    text_slide = deck.slides.add_slide(deck.slide_layouts[TITLE_AND_CONTENT_LAYOUT])
    text_slide.shapes.title.text = "Quarterly report"
    text_slide.placeholders[1].text = "Revenue grew in every region"
    deck.slides.add_slide(deck.slide_layouts[BLANK_LAYOUT]).shapes.add_picture(
        str(rendered_text_png(tmp_path, "INVOICE TOTAL 4711 EUROS")), Inches(0.5), Inches(2), width=Inches(9))
    blank_slide = deck.slides.add_slide(deck.slide_layouts[BLANK_LAYOUT])
    blank_slide.shapes.add_picture(str(blank_png(tmp_path)), Inches(1), Inches(1), width=Inches(6))
    blank_slide.notes_slide.notes_text_frame.text = "Speaker notes are not slide content"
    path = tmp_path / "deck.pptx"
    deck.save(path)
    parsed = parse_document(path.read_bytes(), path.name)
    print(f"deck.pptx: OCR {parsed.report.ocr_seconds:.2f}s, total {parsed.report.seconds:.2f}s")
    return parsed


def test_text_slide_comes_from_the_shape_tree(three_slide_deck):
    unit = three_slide_deck.report.units[0]
    assert (unit.unit, unit.kind, unit.tier) == (1, "slide", "python-pptx")
    slide = slide_sections(three_slide_deck.text)[1]
    assert "### Quarterly report" in slide and "Revenue grew in every region" in slide
    assert unit.chars == len(slide.strip())


def test_picture_only_slide_is_read_by_ocr(three_slide_deck):
    unit = three_slide_deck.report.units[1]
    assert (unit.unit, unit.tier) == (2, "ocr:rapidocr")
    slide = slide_sections(three_slide_deck.text)[2]
    assert "INVOICE" in slide and "4711" in slide
    assert three_slide_deck.report.ocr_seconds > 0


def test_slide_without_text_even_after_ocr_is_a_named_warning(three_slide_deck):
    report = three_slide_deck.report
    assert [(w.code, w.unit) for w in report.warnings] == [("empty_slide", 3)]
    assert report.warnings[0].message == "slide 3 of deck.pptx yielded no text, even after OCR"
    assert (report.units[2].tier, report.units[2].chars) == ("", 0)
    assert 3 not in slide_sections(three_slide_deck.text)
    assert "Speaker notes" not in three_slide_deck.text  # notes are not content
    assert report.to_dict()["warnings"][0] == {"code": "empty_slide", "unit": 3,
                                               "message": "slide 3 of deck.pptx yielded no text, even after OCR"}


def test_group_shapes_nested_three_deep_are_walked(tmp_path):
    deck = Presentation()
    inner = nested_groups(deck.slides.add_slide(deck.slide_layouts[BLANK_LAYOUT]).shapes, 3)
    inner.add_textbox(Inches(1), Inches(1), Inches(6), Inches(1)).text_frame.text = "Words three groups down"
    inner = nested_groups(deck.slides.add_slide(deck.slide_layouts[BLANK_LAYOUT]).shapes, 3)
    inner.add_picture(str(rendered_text_png(tmp_path, "INVOICE TOTAL 4711 EUROS")), Inches(0.5), Inches(2),
                      width=Inches(9))
    path = tmp_path / "grouped.pptx"
    deck.save(path)
    parsed = parse_document(path.read_bytes(), path.name)
    sections = slide_sections(parsed.text)
    assert "Words three groups down" in sections[1]
    assert "4711" in sections[2]  # a picture inside nested groups still reaches OCR
    assert [u.tier for u in parsed.report.units] == ["python-pptx", "ocr:rapidocr"]
    assert parsed.report.warnings == []


def test_table_cells_are_content(tmp_path):
    deck = Presentation()
    table = deck.slides.add_slide(deck.slide_layouts[BLANK_LAYOUT]).shapes.add_table(
        2, 2, Inches(1), Inches(1), Inches(6), Inches(2)).table
    for (row, col), text in {(0, 0): "Region", (0, 1): "Revenue", (1, 0): "APAC", (1, 1): "4.2M"}.items():
        table.cell(row, col).text = text
    path = tmp_path / "table.pptx"
    deck.save(path)
    parsed = parse_document(path.read_bytes(), path.name)
    assert "| Region | Revenue |\n| --- | --- |\n| APAC | 4.2M |" in parsed.text


def test_deck_with_no_text_at_all_is_an_error_naming_each_slide(tmp_path):
    deck = Presentation()
    deck.slides.add_slide(deck.slide_layouts[BLANK_LAYOUT])
    deck.slides.add_slide(deck.slide_layouts[BLANK_LAYOUT]).shapes.add_picture(
        str(blank_png(tmp_path)), Inches(1), Inches(1))
    path = tmp_path / "empty.pptx"
    deck.save(path)
    with pytest.raises(ParseError) as info:
        parse_document(path.read_bytes(), path.name)
    assert info.value.code == "no_text"
    assert str(info.value).startswith("empty.pptx: no text could be extracted")
    assert "slide 1 of empty.pptx yielded no text and has no pictures to OCR" in str(info.value)
    assert "slide 2 of empty.pptx yielded no text, even after OCR" in str(info.value)
