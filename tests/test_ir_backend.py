"""ranx is a dependency: without it the IR metrics raise an error naming it, never fall back."""

from __future__ import annotations

import sys

import pytest

from adiyan.eval import ir_metrics

QRELS = {"q1": {"d1": 1}, "q2": {"d3": 1}}
RUN = {"q1": {"d2": 2.0, "d1": 1.0}, "q2": {"d3": 1.0}}  # MRR@10 = (1/2 + 1) / 2 = 0.75


@pytest.fixture
def without_ranx(monkeypatch):
    monkeypatch.setitem(sys.modules, "ranx", None)  # `import ranx` now raises ImportError
    monkeypatch.setattr(ir_metrics, "_ranx_module", ir_metrics._UNLOADED)


def test_missing_ranx_is_an_error_naming_it(without_ranx):
    for call in (lambda: ir_metrics.evaluate_run(QRELS, RUN, ["mrr@10"]),
                 lambda: ir_metrics.per_query(QRELS, RUN, "mrr@10"),
                 lambda: ir_metrics.compare_runs(QRELS, {"a": RUN, "b": RUN}, ["mrr@10"]),
                 ir_metrics.backend):
        with pytest.raises(ir_metrics.RanxMissing, match="ranx is required"):
            call()


def test_the_numpy_cross_check_runs_only_when_asked_for(without_ranx):
    assert ir_metrics.evaluate_run(QRELS, RUN, ["mrr@10"], use_ranx=False) == {"mrr@10": 0.75}


def test_ranx_is_the_backend_and_agrees_with_the_hand_computed_value():
    assert ir_metrics.backend() == "ranx"
    assert ir_metrics.evaluate_run(QRELS, RUN, ["mrr@10"]) == pytest.approx({"mrr@10": 0.75})
