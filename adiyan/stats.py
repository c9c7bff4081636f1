"""Paired significance tests shared by every comparison: the run report's deltas, ``invoke compare``,
a sweep's points against its baseline and the benchmarks (layer 0: numbers in, numbers out)."""

from __future__ import annotations

import numpy as np


def fisher_randomization_p(a: np.ndarray, b: np.ndarray, n_permutations: int = 10_000, seed: int = 42) -> float:
    """Two-sided paired randomization test (Fisher; Smucker, Allan & Carterette, CIKM 2007).

    Under the null the two systems are exchangeable per query, so each query's difference
    keeps or flips its sign with probability 1/2; p = (1 + #{|mean permuted diff| >= |observed|})
    / (1 + n_permutations). One seeded generator, drawn in fixed-size blocks: same seed, same p.
    """
    a, b = np.asarray(a, float), np.asarray(b, float)
    diff = b - a
    observed = abs(diff.mean())
    rng = np.random.default_rng(seed)
    extreme, done = 0, 0
    while done < n_permutations:
        n = min(1000, n_permutations - done)
        signs = rng.choice(np.array([-1.0, 1.0]), size=(n, diff.size))
        extreme += int((np.abs((signs * diff).mean(axis=1)) >= observed - 1e-12).sum())
        done += n
    return float((extreme + 1) / (n_permutations + 1))


def holm(pvals: dict[str, float]) -> dict[str, float]:
    """Holm's step-down adjustment of a family of p-values (Holm 1979): the i-th smallest of m is
    multiplied by m - i, kept monotone and capped at 1. Used wherever one comparison runs several
    tests (invoke compare's paired tests, a sweep's points against its baseline)."""
    items = sorted((p, k) for k, p in pvals.items() if p is not None)
    m, out, running = len(items), {}, 0.0
    for i, (p, k) in enumerate(items):
        running = max(running, min(1.0, (m - i) * p))
        out[k] = running
    return out
