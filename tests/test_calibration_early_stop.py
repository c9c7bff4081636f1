"""The judge's calibration stops once the reliability rule cannot be met, and is reused when
nothing it depends on changed (issue 27.2).

The judge's model here is a scripted test double, for control flow only: its verdict on each
pair is fixed in advance, so when the rule becomes unreachable is known by hand. With 40 pairs and
the 0.8 line, 37 / 40 has a Wilson lower bound of 0.801 (reliable) and 36 / 40 of 0.769: the
fourth disagreement is the one after which no outcome of the remaining pairs can clear the line.
"""

from __future__ import annotations

import re

import pytest

from adiyan.cache import CallCache
from adiyan.eval.judge import (CalibrationPair, Judge, calibrate, calibrate_reusing, unreachable,
                               wilson_interval)
from adiyan.models.base import Completion, as_messages


class ScriptedModel:
    """Test double (control flow only): answers pair i 'agree' unless i is in ``wrong``; counts calls."""

    id = "scripted-judge"
    context_size = 4096

    def __init__(self, wrong, *, fail=()):
        self.wrong, self.fail, self.calls = set(wrong), set(fail), 0

    def chat(self, messages, *, max_tokens=None, temperature=None):
        self.calls += 1
        prompt = as_messages(messages)[-1]["content"]
        i = int(re.search(r"Answer: answer (\d+)", prompt).group(1))
        if i in self.fail:
            raise RuntimeError("server down")
        correct = i % 2 == 0  # even pairs are labelled correct
        supported = correct if i not in self.wrong else not correct
        return Completion('{"supported": %s}' % ("true" if supported else "false"))


def pairs(n=40):
    return [CalibrationPair(f"p{i}", f"Question {i}?", f"Context {i}.", f"answer {i}",
                            "correct" if i % 2 == 0 else "corrupted_fact", kind="lookup") for i in range(1, n + 1)]


def judge(model, tmp_path):
    return Judge(model, CallCache(tmp_path / "calls.sqlite", "judge"), timeout_s=None, max_retries=0)


def test_the_bounds_the_rule_rests_on():
    assert wilson_interval(37, 40)[0] == pytest.approx(0.8014, abs=1e-4)
    assert wilson_interval(36, 40)[0] == pytest.approx(0.7695, abs=1e-4)
    assert unreachable(0, 4, 40, 0.8)[0] and not unreachable(0, 3, 40, 0.8)[0]


def test_a_judge_wrong_from_the_start_stops_after_four_pairs(tmp_path):
    model = ScriptedModel(wrong=range(1, 41))
    cal = calibrate(judge(model, tmp_path), pairs(), reliable_threshold=0.8, stop_when_unreachable=True)
    assert model.calls == 4 and cal.n == 4 and cal.n_planned == 40 and cal.stopped_early
    assert cal.best_case_ci_low == pytest.approx(0.7695, abs=1e-4) and not cal.reliable
    d = cal.as_dict()
    assert d["stopped_early"] and d["n"] == 4 and d["n_planned"] == 40
    assert "stopped early after 4 of 40 pairs" in cal.why()


def test_disagreements_late_or_few_never_stop_a_judge_that_might_pass(tmp_path):
    three = ScriptedModel(wrong={1, 2, 3})  # 37 / 40: reliable, so every pair must be asked
    cal = calibrate(judge(three, tmp_path), pairs(), reliable_threshold=0.8, stop_when_unreachable=True)
    assert three.calls == 40 and cal.n == 40 and not cal.stopped_early and cal.reliable
    late = ScriptedModel(wrong={10, 20, 30, 40})  # the fourth miss is the last pair: nothing left to skip
    cal = calibrate(judge(late, tmp_path / "b"), pairs(), reliable_threshold=0.8, stop_when_unreachable=True)
    assert late.calls == 40 and not cal.stopped_early and not cal.reliable
    mid = ScriptedModel(wrong={5, 6, 7, 8})
    cal = calibrate(judge(mid, tmp_path / "c"), pairs(), reliable_threshold=0.8, stop_when_unreachable=True)
    assert mid.calls == 8 and cal.n == 8 and cal.n_agree == 4 and cal.stopped_early


def test_without_the_early_stop_every_pair_is_asked(tmp_path):
    model = ScriptedModel(wrong=range(1, 41))
    cal = calibrate(judge(model, tmp_path), pairs(), reliable_threshold=0.8)
    assert model.calls == 40 and cal.n == 40 and not cal.stopped_early and cal.agreement == 0.0


def test_an_unchanged_calibration_is_reused_and_a_changed_one_is_not(tmp_path):
    store = CallCache(tmp_path / "store.sqlite", "calibration")
    model = ScriptedModel(wrong={1, 2, 3, 4, 5})
    first = calibrate_reusing(judge(model, tmp_path / "a"), pairs(), store, stop_when_unreachable=True)
    assert model.calls == 4 and not first.reused
    again_model = ScriptedModel(wrong={1, 2, 3, 4, 5})
    again = calibrate_reusing(judge(again_model, tmp_path / "b"), pairs(), store, stop_when_unreachable=True)
    assert again_model.calls == 0 and again.reused
    assert {k: v for k, v in again.as_dict().items() if k != "reused"} == \
        {k: v for k, v in first.as_dict().items() if k != "reused"}
    changed = pairs()
    changed[0].answer = "answer 1 (reworded)"
    other = ScriptedModel(wrong={1, 2, 3, 4, 5})
    assert not calibrate_reusing(judge(other, tmp_path / "c"), changed, store, stop_when_unreachable=True).reused
    assert other.calls == 4
    no_stop = ScriptedModel(wrong={1, 2, 3, 4, 5})  # the rule is part of the key
    assert not calibrate_reusing(judge(no_stop, tmp_path / "d"), pairs(), store).reused and no_stop.calls == 40


def test_a_calibration_with_a_server_failure_is_not_stored(tmp_path):
    store = CallCache(tmp_path / "store.sqlite", "calibration")
    model = ScriptedModel(wrong=set(), fail={3})
    cal = calibrate_reusing(judge(model, tmp_path / "a"), pairs(), store, stop_when_unreachable=True)
    assert cal.n_failed == 1 and cal.failures[0].status == "error"
    again = ScriptedModel(wrong=set())
    assert not calibrate_reusing(judge(again, tmp_path / "b"), pairs(), store, stop_when_unreachable=True).reused
    assert again.calls == 40
