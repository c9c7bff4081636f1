"""ranx is a dependency: without it the IR metrics raise an error naming it, never fall back."""

from __future__ import annotations

import math
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


def test_ranx_sees_every_document_id_at_one_width_and_the_metrics_do_not_change():
    # ranx compiles its numba kernels once per document-id width; the ids it is given are renamed
    # to one width, one number per distinct id, so a short and a long id are told apart as before
    short, long_ = ir_metrics._doc_id("d1"), ir_metrics._doc_id("PMID-12345678901234567890")
    assert len(short) == len(long_) == ir_metrics._ID_WIDTH and short != long_
    assert ir_metrics._doc_id("d1") == short
    qrels = {"q1": {"d1": 2, "PMID-12345678901234567890": 1}, "q2": {"x": 1}}
    run = {"q1": {"PMID-12345678901234567890": 3.0, "d9": 2.0, "d1": 1.0}, "q2": {"x": 1.0}}
    # q1: DCG = 1/log2(2) + 2/log2(4) = 2.0, IDCG = 2 + 1/log2(3); q2: 1.0
    ndcg_q1 = 2.0 / (2.0 + 1.0 / math.log2(3))
    assert ir_metrics.per_query(qrels, run, "ndcg@10") == pytest.approx({"q1": ndcg_q1, "q2": 1.0})
    assert ir_metrics.evaluate_run(qrels, run, ["ndcg@10"])["ndcg@10"] == pytest.approx((ndcg_q1 + 1.0) / 2)
