"""Every named warning a run can print has a section in docs/reference/warnings.md (what it means,
what to do), links to it, and says its message in one sentence; the figures go to ``detail``."""

from __future__ import annotations

import re
from pathlib import Path

from adiyan.eval.reliability import WARNINGS_DOC, warning, warnings_for
from adiyan.retrieval.floor import floor_decision
from adiyan.config import RetrievalConfig

ROOT = Path(__file__).resolve().parents[1]


def _emitted_names() -> set[str]:
    """Warning names in the package's code: ``warning("name", ...)`` and the floor decision's names."""
    names = set()
    for path in (ROOT / "adiyan").rglob("*.py"):
        if "trained" in path.parts:
            continue
        text = path.read_text(encoding="utf-8")
        names |= set(re.findall(r'\bwarning\(\s*"([a-z_]+)"', text))
        if path.name == "floor.py":
            names |= set(re.findall(r'"(floor_[a-z_]+)", cal\)', text))
    return names


def test_every_warning_has_its_section_and_the_code_links_it():
    doc = (ROOT / WARNINGS_DOC).read_text(encoding="utf-8")
    sections = set(re.findall(r"^## ([a-z_]+)$", doc, re.M))
    names = _emitted_names()
    assert {"judge_unreliable", "judge_not_run", "answers_are_wiring", "floor_cannot_separate", "floor_not_measured",
            "floor_calibrated_on_scored_set", "floor_not_measured_on_scored_set",
            "floor_cannot_separate_on_scored_set"} <= names  # the scan finds what it should
    assert names <= sections, f"warnings without a section in {WARNINGS_DOC}: {sorted(names - sections)}"
    w = warning("judge_unreliable", "m")
    assert w["doc"] == "docs/reference/warnings.md#judge_unreliable"


def test_a_floor_warning_says_what_to_do_in_one_sentence_and_keeps_its_figures():
    cal = {"minilm": {"floor": 0.3376, "youden_j": 0.186, "evalset": "xquad_en-test"}}
    d = floor_decision(RetrievalConfig(score_floors={}), "minilm", cal)
    [w] = warnings_for(None, d, None)
    assert w["name"] == "floor_cannot_separate" and ". " not in w["message"]
    assert "nothing to do unless you want a floor" in w["message"]
    assert "0.186 < retrieval.floor_min_j 0.2" in w["detail"]  # the figures stay, beside the sentence
