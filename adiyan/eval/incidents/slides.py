"""Incident 4, image-only slide: a slide holding only a picture extracted to nothing, silently.

*Before*: the real parser (``adiyan.ingest.parse``, the ingest entry ``parse_cached`` with the
``ingest`` section) with the OCR tier disabled, ``ingest.ocr=none``. *After*: the configured OCR
tier. Every image-only slide of ``evalsets/incidents/image_only_slides.yaml`` is checked: the
before loses its text (what the seed lost) and, unlike the seed, names it (``empty_slide``); the
after recovers the words the picture shows, or names the slide when the picture has none.

A slide whose picture has no text (``words: []``) cannot discriminate: with or without OCR it
gives nothing and can only be named, so the before loses it whatever the before's setting does.
It is "not a test of the principle": checked (an after that leaves it silent violates the
principle) but never held, so the verdict rests on the slides whose words OCR can recover.

What the before measures, honestly: the seed's parser had no second tier *and* no warnings, so
its image-only slides came out empty and silent. The production parser always names an empty
slide, so with OCR off the before reproduces the loss (the seed's count of empty slides) but
not the silence; its silent count is the safeguard's figure and must be 0.
"""

from __future__ import annotations

import re

from ...ingest.parse import parse_cached
from .common import INCIDENTS_DIR, NA, IncidentResult, classify, counts, load_spec, verdict

SEED = "image-only slides extracted as empty, silently (the seed)"
PRINCIPLE = "an image-only slide yields its text or a named warning, never silent emptiness"


def slide_text(markdown: str, number: int) -> str:
    """The text the parser gave slide ``number`` (its ``## Slide N`` section), "" if none."""
    m = re.search(rf"^## Slide {number}\n(.*?)(?=^## Slide \d+\n|\Z)", markdown, re.S | re.M)
    return m.group(1).strip() if m else ""


def _slide_outcome(text: str, report: dict, number: int) -> dict:
    unit = next((u for u in report.get("units", []) if u["unit"] == number), None)
    codes = [w["code"] for w in report.get("warnings", []) if w.get("unit") == number]
    return {"chars": unit["chars"] if unit else 0, "tier": unit["tier"] if unit else "",
            "warnings": codes, "text": slide_text(text, number)}


def image_only_slide(settings, embedder) -> IncidentResult:
    spec = load_spec("image_only_slides.yaml")
    ocr = settings.ingest.ocr
    before_ingest = settings.ingest.model_copy(update={"ocr": "none"})
    rows = []
    for deck in spec["decks"]:
        path = (INCIDENTS_DIR / deck["file"]).resolve()
        data = path.read_bytes()
        before_text, before_report = parse_cached(data, path.name, before_ingest)
        after_text, after_report = parse_cached(data, path.name, settings.ingest)
        for number, words in deck["slides"].items():
            b = _slide_outcome(before_text, before_report, int(number))
            a = _slide_outcome(after_text, after_report, int(number))
            lost, named = b["chars"] == 0, "empty_slide" in b["warnings"]
            found = [w for w in words if w.lower() in a["text"].lower()]
            after_ok = (len(found) == len(words) and a["chars"] > 0) if words else "empty_slide" in a["warnings"]
            rows.append({"deck": deck["file"], "slide": int(number), "words": list(words), "before": b, "after": a,
                         "lost_before": lost, "named_before": named, "silent_before": lost and not named,
                         "words_found_after": found, "after_ok": after_ok,
                         # the parser's defence is two-sided: a name for every empty slide (a slide the before
                         # did not lose needs none), text where OCR finds it
                         "discriminating": bool(words),  # a picture without text: OCR cannot change it
                         "status": classify(before_failed=lost, after_prevented=(named or not lost) and after_ok,
                                            discriminating=bool(words))})
    n = len(rows)
    if ocr == "none":
        return IncidentResult(4, "image-only slide", SEED, "n/a: ingest.ocr=none in this configuration, so the after "
                              "has no OCR tier to show", f"ocr:{ocr}", None, PRINCIPLE, **counts([NA] * n),
                              details={"slides": rows, "na_reason": "ingest.ocr=none"})
    statuses = [r["status"] for r in rows]
    lost = sum(r["lost_before"] for r in rows)
    silent = sum(r["silent_before"] for r in rows)
    with_words = [r for r in rows if r["words"]]
    blank = [r for r in rows if not r["words"]]
    measured = (f"before (ingest.ocr=none) {lost}/{n} image-only slides gave 0 chars, the loss the "
                f"seed had silently; the parser named {lost - silent} of them (empty_slide), {silent} silent; after "
                f"(ocr:{ocr}) {sum(r['after_ok'] for r in with_words)}/{len(with_words)} pictures with text gave "
                f"their words, {sum(r['after_ok'] for r in blank)}/{len(blank)} without text named empty_slide")
    return IncidentResult(4, "image-only slide", SEED, measured, f"ocr:{ocr}", verdict(statuses), PRINCIPLE,
                          **counts(statuses),
                          before="the real parser with ingest.ocr=none (no OCR tier)",
                          after=f"the real parser with ingest.ocr={ocr}",
                          details={"slides": rows, "lost_before": lost, "silent_before": silent,
                                   "before_note": "the seed's figure is the count of empty slides; the production "
                                                  "parser names every one, so 'silent_before' is the safeguard's figure"})
