"""benchmarks/answerer.py's paired comparison of the two offline answerers (issue 25 item 2): the
discordant pairs and the exact McNemar p, checked by hand on a scripted set of answers."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import answerer  # noqa: E402

ABSTAIN = "I don't know based on the documents."


def _item(i: int, unanswerable: bool = False) -> dict:
    return {"id": f"q{i}", "unanswerable": unanswerable, "answers": [] if unanswerable else [f"k{i}"]}


def test_paired_counts_each_question_once_and_tests_the_discordant_pairs():
    its = [_item(i) for i in range(10)] + [_item(i, True) for i in range(10, 14)]
    first = {f"q{i}": (f"it is k{i}" if i < 6 else "no idea") for i in range(10)}   # extractive: q0-q5 hit
    second = {f"q{i}": (f"it is k{i}" if i in (0, 7) else "wrong") for i in range(10)}  # smollm2: q0, q7 hit
    first.update({f"q{i}": ABSTAIN for i in range(10, 14)})                          # abstains on all 4
    second.update({f"q{i}": "an invented answer" for i in range(10, 14)})            # never abstains
    p = answerer.paired("adiyan_full", its, first, second)
    kw = p["keyword_hit"]
    assert (kw["questions"], kw["both"], kw["extractive_only"], kw["smollm2_only"], kw["neither"]) == (10, 1, 5, 1, 3)
    # 5 vs 1 discordant: two-sided binomial, 2 * (C(6,0) + C(6,1)) / 2**6 = 14 / 64
    assert kw["mcnemar_p"] == round(14 / 64, 4)
    ab = p["abstains_unanswerable"]
    assert (ab["questions"], ab["extractive_only"], ab["smollm2_only"]) == (4, 4, 0)
    assert ab["mcnemar_p"] == round(2 / 16, 4)  # 4 vs 0: 2 * 1 / 2**4


def test_paired_has_no_keyword_block_where_the_set_has_no_keywords():
    its = [_item(0), _item(1, True)]
    p = answerer.paired("clapnq", its, {"q0": "a", "q1": ABSTAIN}, {"q0": "b", "q1": ABSTAIN})
    assert p["keyword_hit"] is None
    assert p["abstains_unanswerable"]["both"] == 1 and p["abstains_unanswerable"]["mcnemar_p"] is None


def test_a_tiny_mcnemar_p_keeps_its_significant_figures():
    from adiyan.eval.ir_metrics import mcnemar_p

    assert mcnemar_p(27, 0) == float(f"{2 / 2 ** 27:.4g}") > 0  # 1.49e-08, not 0.0
