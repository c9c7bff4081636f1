"""Non-inferiority with a stated margin (issue 23 item 6): "p 0.38, not worse" does not follow from a
two-sided test; a one-sided lower bound above -margin does. Figures checked by hand below."""

import math

import numpy as np
import pytest

from adiyan.eval.ir_metrics import fisher_randomization_p
from adiyan.eval.noninferiority import non_inferiority, runs_non_inferiority


def alternating(step, n=300, shift=0.0):
    """Per-query scores a (all 0.5) and b = a + shift ± step, alternating: mean difference = shift."""
    a = np.full(n, 0.5)
    return a, a + shift + step * np.where(np.arange(n) % 2 == 0, 1.0, -1.0)


def test_no_significant_difference_is_not_non_inferiority():
    # noisy: mean difference 0, sd 0.3 over 300 queries. The two-sided test finds nothing (p = 1),
    # the old reading "not worse"; the one-sided 95 % bound is ~ -1.645 * 0.3 / sqrt(300) = -0.0285,
    # below -0.01: non-inferiority at one point of nDCG@10 is NOT shown.
    a, b = alternating(0.3)
    assert fisher_randomization_p(a, b) > 0.9
    r = non_inferiority(a, b, 0.01)
    assert r["delta"] == pytest.approx(0.0, abs=1e-12)
    assert r["lower_bound"] == pytest.approx(-1.645 * 0.3 / math.sqrt(300), abs=0.003)
    assert r["non_inferior"] is False and r["p_value_t"] > 0.05
    assert r["sentence"].startswith("non-inferiority not shown at margin 0.01")


def test_a_precise_tie_is_non_inferior():
    # sd 0.05: bound ~ -1.645 * 0.05 / sqrt(300) = -0.0047 > -0.01; t = 0.01 / (0.05 / sqrt(299)) = 3.46, p ~ 3e-4
    a, b = alternating(0.05)
    r = non_inferiority(a, b, 0.01)
    assert r["lower_bound"] == pytest.approx(-0.00475, abs=0.001) and r["non_inferior"] is True
    assert r["p_value_t"] == pytest.approx(3.1e-4, rel=0.15)
    assert non_inferiority(a, b, 0.01) == r  # seeded: the same data gives the same bound


def test_a_real_loss_is_not_non_inferior_and_bad_input_is_refused():
    a, b = alternating(0.05, shift=-0.02)  # two points worse, precisely measured
    assert non_inferiority(a, b, 0.01)["non_inferior"] is False
    assert non_inferiority(a, b, 0.03)["non_inferior"] is True  # a wider margin admits it: state the margin
    with pytest.raises(ValueError, match="margin must be > 0"):
        non_inferiority(a, b, 0.0)
    with pytest.raises(ValueError, match="same length"):
        non_inferiority(a, b[:-1], 0.01)


def test_runs_non_inferiority_on_per_query_ndcg():
    qrels = {f"q{i}": {f"d{i}": 1} for i in range(4)}
    base = {f"q{i}": {f"d{i}": 2.0, "x": 1.0} for i in range(4)}  # relevant first everywhere: nDCG@10 = 1
    worse = {**base, "q0": {"x": 2.0, "d0": 1.0}}  # q0's relevant second: 1 / log2(3) = 0.6309
    r = runs_non_inferiority(qrels, {"rrf": base, "other": worse}, "rrf", "ndcg@10", 0.01)["other"]
    assert r["n"] == 4 and r["delta"] == pytest.approx((1 / math.log2(3) - 1) / 4, abs=1e-6)
    assert r["non_inferior"] is False
