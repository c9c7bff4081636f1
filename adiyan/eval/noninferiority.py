"""Non-inferiority of one run against another, with a stated margin.

"p 0.38, not worse" does not follow: a two-sided test that fails to find a difference shows no
difference was found, not that none exists (a small or noisy sample finds none either). The claim
"B is not worse than A" needs a non-inferiority test: choose a margin ``δ`` before looking (the
loss one is willing to call "not worse"), then test

    H0: mean(B − A) ≤ −δ   against   H1: mean(B − A) > −δ

over the paired per-query scores. B is **non-inferior** when the one-sided ``1 − α`` lower
confidence bound of the mean difference lies above ``−δ``. The bound is a paired bootstrap
percentile (queries resampled with replacement, one seeded generator: same data, same bound); a
one-sided paired t-test of the same hypothesis is reported beside it (``p_value_t``). With
``α = 0.05`` this is the two one-sided tests' (TOST) lower half, i.e. a 90 % two-sided interval's
lower end.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from .ir_metrics import per_query

MARGIN = 0.01  # one point of nDCG@10: the benchmarks' stated non-inferiority margin
ALPHA = 0.05
N_BOOT = 10_000
SEED = 42


def non_inferiority(a, b, margin: float = MARGIN, *, alpha: float = ALPHA, n_boot: int = N_BOOT,
                    seed: int = SEED) -> dict:
    """Is ``b`` non-inferior to ``a`` (paired scores, one per query) by ``margin``? See the module."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.shape != b.shape or a.ndim != 1 or a.size < 2:
        raise ValueError(f"non_inferiority needs two paired score vectors of the same length >= 2, "
                         f"got {a.shape} and {b.shape}")
    if margin <= 0:
        raise ValueError(f"the non-inferiority margin must be > 0, got {margin}")
    d = b - a
    rng = np.random.default_rng(seed)
    means = np.empty(n_boot)
    for start in range(0, n_boot, 1000):  # fixed-size blocks: the same draws whatever the memory
        n = min(1000, n_boot - start)
        means[start:start + n] = d[rng.integers(0, d.size, size=(n, d.size))].mean(axis=1)
    lower = float(np.quantile(means, alpha))
    sd = float(d.std(ddof=1))
    if sd == 0.0:
        p_t = 0.0 if d.mean() > -margin else 1.0
    else:
        from scipy import stats  # heavy: only when asked

        p_t = float(stats.t.sf((d.mean() + margin) / (sd / np.sqrt(d.size)), d.size - 1))
    ok = lower > -margin
    return {"delta": float(d.mean()), "margin": margin, "alpha": alpha, "n": int(d.size), "n_boot": n_boot,
            "seed": seed, "lower_bound": round(lower, 6), "p_value_t": p_t, "non_inferior": bool(ok),
            "sentence": (f"{'non-inferior' if ok else 'non-inferiority not shown'} at margin {margin:g}: "
                         f"difference {d.mean():+.4f}, one-sided {100 * (1 - alpha):.0f}% lower bound "
                         f"{lower:+.4f} {'>' if ok else '<='} -{margin:g} (paired bootstrap, {d.size} queries; "
                         f"one-sided t-test p {p_t:.3g})")}


def runs_non_inferiority(qrels, runs: Mapping[str, dict], baseline: str, metric: str = "ndcg@10",
                         margin: float = MARGIN, **kw) -> dict[str, dict]:
    """Every run of ``runs`` but ``baseline``, tested for non-inferiority to it on ``metric``,
    over the judged queries (a query a run left out scores 0, as in :func:`per_query`)."""
    base = per_query(qrels, runs[baseline], metric)
    out = {}
    for name, run in runs.items():
        if name == baseline:
            continue
        other = per_query(qrels, run, metric)
        qids = sorted(base)
        out[name] = non_inferiority([base[q] for q in qids], [other.get(q, 0.0) for q in qids], margin, **kw)
    return out
