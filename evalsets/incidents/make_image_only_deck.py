"""Writes image_only_slides.pptx, the authored deck of incident 4 (run once; the deck is data).

    .venv/bin/python evalsets/incidents/make_image_only_deck.py

Six slides: a title slide with text, three slides that hold only a picture of rendered text
(DejaVu Sans, as a scan or screenshot would), one slide that holds only a picture with no text
at all (a gradient: OCR finds nothing, so only a named warning can account for it), and a
closing slide with text. The words each picture shows are in image_only_slides.yaml.
"""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont
from pptx import Presentation
from pptx.util import Inches, Pt

HERE = Path(__file__).resolve().parent
FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf")
PICTURES = {2: ["SPRING SALE", "15 PERCENT OFF"], 3: ["TOUR DEPARTS 08:30", "FROM BLED"],
            4: ["HOTLINE 0800 4711"]}


def _text_picture(lines: list[str]) -> bytes:
    img = Image.new("RGB", (1600, 900), "white")
    draw = ImageDraw.Draw(img)
    font = ImageFont.truetype(str(FONT), 110)
    for i, line in enumerate(lines):
        draw.text((120, 250 + i * 200), line, fill="black", font=font)
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def _blank_picture() -> bytes:
    img = Image.linear_gradient("L").resize((1600, 900)).convert("RGB")
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def _text_slide(prs, title: str, body: str) -> None:
    slide = prs.slides.add_slide(prs.slide_layouts[5])  # title only
    slide.shapes.title.text = title
    box = slide.shapes.add_textbox(Inches(1), Inches(2), Inches(8), Inches(3)).text_frame
    box.text = body
    box.paragraphs[0].runs[0].font.size = Pt(24)


def build(out: Path) -> Path:
    prs = Presentation()
    _text_slide(prs, "Spring catalogue", "Tours and offers for the spring season.")
    for number in (2, 3, 4, 5):
        slide = prs.slides.add_slide(prs.slide_layouts[6])  # blank: the picture is all there is
        data = _text_picture(PICTURES[number]) if number in PICTURES else _blank_picture()
        slide.shapes.add_picture(io.BytesIO(data), Inches(0.5), Inches(0.5), width=Inches(9))
    _text_slide(prs, "Contact", "Questions? Write to the Ljubljana office.")
    prs.save(str(out))
    return out


if __name__ == "__main__":
    print(build(HERE / "image_only_slides.pptx"))
