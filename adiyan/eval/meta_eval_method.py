"""The meta-evaluation's method, as the RAGChecker paper computes it (Ru et al., NeurIPS 2024,
Section 4; the authors' ``data/meta_evaluation/meta_eval.py``): deltas between the two responses,
NaN -> median, min-max scaling to [-2, 2], repetition per annotator, Pearson / Spearman x 100, and
95% percentile bootstrap intervals over instances. Pure numpy / scipy: tests check it by hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
from scipy import stats

ASPECTS = ("correctness", "completeness", "overall")


@dataclass(frozen=True)
class MetaInstance:
    id: int
    dataset: str
    query: str
    gt_answer: str
    responses: tuple[str, str]  # model1's, model2's
    models: tuple[str, str]
    labels: Mapping[str, tuple[int, int]]  # aspect -> (annotator 1, annotator 2)


def scaled_deltas(s1: Sequence[float | None], s2: Sequence[float | None]) -> tuple[np.ndarray, dict]:
    """delta = s2 - s1 per instance, NaN -> the median delta, min-max scaled to [-2, 2]. Returns the
    deltas and ``{"n_nan", "constant"}``; a constant delta is returned unscaled (no correlation)."""
    a = np.array([np.nan if v is None else v for v in s1], dtype=float)
    b = np.array([np.nan if v is None else v for v in s2], dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"score lists differ in length: {a.shape} vs {b.shape}")
    d = b - a
    nan = np.isnan(d)
    if nan.all():
        return d, {"n_nan": int(nan.sum()), "constant": True}
    d[nan] = np.median(d[~nan])
    lo, hi = d.min(), d.max()
    if hi == lo:
        return d, {"n_nan": int(nan.sum()), "constant": True}
    return ((d - lo) / (hi - lo) - 0.5) * 4, {"n_nan": int(nan.sum()), "constant": False}


def correlation(x: Sequence[float], y: Sequence[float]) -> tuple[float | None, float | None]:
    """(Pearson, Spearman) x 100, rounded to 2 places as in the paper; None when either side is constant."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if np.ptp(x) == 0 or np.ptp(y) == 0 or np.isnan(x).any() or np.isnan(y).any():
        return None, None
    return round(float(stats.pearsonr(x, y)[0]) * 100, 2), round(float(stats.spearmanr(x, y)[0]) * 100, 2)


def against_humans(scaled: np.ndarray, labels: np.ndarray) -> tuple[float | None, float | None]:
    """The instance deltas, each repeated for its two annotators, against the ``(n, 2)`` labels."""
    return correlation(np.repeat(scaled, 2), labels.reshape(-1))


def bootstrap_indices(n: int, n_boot: int, seed: int) -> np.ndarray:
    """``(n_boot, n)`` instance indices drawn with replacement; the same for a given (n, n_boot, seed)."""
    return np.random.default_rng(seed).integers(0, n, size=(n_boot, n))


def _pearson_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    xc, yc = x - x.mean(axis=1, keepdims=True), y - y.mean(axis=1, keepdims=True)
    den = np.sqrt((xc * xc).sum(axis=1) * (yc * yc).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (xc * yc).sum(axis=1) / den, np.nan)


def _rows_ci(x: np.ndarray, y: np.ndarray) -> dict:
    """Percentile 95% intervals of Pearson and Spearman over the rows of (x, y) (one row a resample)."""
    pear = _pearson_rows(x, y) * 100
    spear = _pearson_rows(stats.rankdata(x, axis=1), stats.rankdata(y, axis=1)) * 100

    def ci(v):
        ok = v[~np.isnan(v)]
        return [round(float(q), 2) for q in np.percentile(ok, [2.5, 97.5])] if len(ok) else [None, None]

    return {"pearson_ci": ci(pear), "spearman_ci": ci(spear), "n_degenerate": int(np.isnan(pear).sum())}


def interval(scaled: np.ndarray, labels: np.ndarray, idx: np.ndarray) -> dict:
    """95% bootstrap intervals of :func:`against_humans` over the resampled instances ``idx``."""
    return _rows_ci(np.repeat(scaled[idx], 2, axis=1), labels[idx].reshape(len(idx), -1))


def human_agreement(labels: np.ndarray, idx: np.ndarray) -> dict:
    """Annotator 1 against annotator 2 (Pearson / Spearman x 100) with bootstrap intervals."""
    p, s = correlation(labels[:, 0], labels[:, 1])
    return {"pearson": p, "spearman": s, **_rows_ci(labels[idx, 0], labels[idx, 1])}


def metric_row(name: str, scores: Mapping[str, tuple], labels: Mapping[str, np.ndarray], *, n_boot: int, seed: int,
               kind: str, note: str = "") -> dict:
    """One row of the table. ``scores`` maps each aspect to (model1 scores, model2 scores) (the same
    pair for every aspect, except RAGChecker's per-aspect scores); ``labels`` maps aspects to (n, 2)."""
    row = {"metric": name, "kind": kind, "note": note, "aspects": {}}
    for aspect in ASPECTS:
        s1, s2 = scores[aspect]
        scaled, info = scaled_deltas(s1, s2)
        lab = labels[aspect]
        cell = {"n_instances": len(lab), "n_nan_deltas": info["n_nan"]}
        if info["constant"]:
            cell.update(pearson=None, spearman=None, pearson_ci=[None, None], spearman_ci=[None, None],
                        why="the delta is the same for every instance (both responses always score alike)")
        else:
            p, s = against_humans(scaled, lab)
            cell.update(pearson=p, spearman=s, **interval(scaled, lab, bootstrap_indices(len(lab), n_boot, seed)))
        row["aspects"][aspect] = cell
    row["n_instances"] = len(labels[ASPECTS[0]])
    row["status"] = "undefined" if all(c["pearson"] is None for c in row["aspects"].values()) else "measured"
    return row


def same_scores(s1, s2) -> dict[str, tuple]:
    return {a: (s1, s2) for a in ASPECTS}


