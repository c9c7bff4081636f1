"""Reciprocal Rank Fusion.

Reference: Gordon V. Cormack, Charles L. A. Clarke and Stefan Büttcher, "Reciprocal Rank Fusion
outperforms Condorcet and individual Rank Learning Methods", SIGIR 2009, pp. 758-759,
https://doi.org/10.1145/1571941.1572114

    RRF(d) = sum over runs r that contain d of 1 / (k + rank_r(d)),   rank from 1, k = 60

Only ranks matter, so runs with incomparable scores (BM25 and cosine) fuse without
normalisation. A run's ranking is its scores descending, ties broken by document id ascending,
so the same input always gives the same fused run (ranx's ``rrf`` does the same sum).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

Run = Mapping[str, Mapping[str, float]]


def rank_order(docs: Mapping[str, float]) -> list[str]:
    """Document ids by score descending, ties by id ascending."""
    return [d for d, _ in sorted(docs.items(), key=lambda kv: (-float(kv[1]), kv[0]))]


def rrf(runs: Sequence[Run], k: int = 60, *, top_k: int | None = None) -> dict[str, dict[str, float]]:
    """Fuse ``runs`` ({query id: {doc id: score}}) by reciprocal rank; keep ``top_k`` per query if given.

    A query present in only some runs is fused from those runs. The result's dicts are in
    fused order (score descending, ties by id).
    """
    if k < 0:
        raise ValueError("rrf: k must be >= 0")
    fused: dict[str, dict[str, float]] = {}
    qids = list(dict.fromkeys(q for run in runs for q in run))
    for qid in qids:
        acc: dict[str, float] = {}
        for run in runs:
            for rank, doc in enumerate(rank_order(run.get(qid, {})), start=1):
                acc[doc] = acc.get(doc, 0.0) + 1.0 / (k + rank)
        order = rank_order(acc)
        if top_k is not None:
            order = order[:top_k]
        fused[qid] = {d: acc[d] for d in order}
    return fused


# -- score-aware fusion ------------------------------------------------------------------------
# Bruch, Gai and Ingber, "An Analysis of Fusion Functions for Hybrid Retrieval", ACM TOIS 2023
# (https://doi.org/10.1145/3596512): a convex combination of normalised lexical and semantic
# scores beats RRF once its weight is tuned on a few queries, and is robust to the normalisation.
# DBSF (distribution-based score fusion) is Qdrant's ``Fusion.DBSF``: each list's scores are
# mapped to [0, 1] by mean ± 3 standard deviations (clipped), then summed. Both take the lists
# as the engine returned them (a document absent from a list contributes 0 from it), so they
# are computed client-side over the dense and BM25 prefetch lists, the same way for both engines.

NORMS = ("minmax", "z", "dbsf")


def normalise(docs: Mapping[str, float], how: str = "minmax") -> dict[str, float]:
    """One list's scores normalised: ``minmax`` to [0, 1]; ``z`` to (s − mean) / std; ``dbsf`` to
    (s − (mean − 3σ)) / 6σ clipped to [0, 1]. A constant list maps to 1.0 (minmax, dbsf) or 0.0 (z).
    σ is the population standard deviation (Qdrant's DBSF uses the same)."""
    if how not in NORMS:
        raise ValueError(f"fusion: unknown normalisation {how!r} ({' | '.join(NORMS)})")
    if not docs:
        return {}
    vals = [float(v) for v in docs.values()]
    n = len(vals)
    if how == "minmax":
        lo, hi = min(vals), max(vals)
        return {d: (float(s) - lo) / (hi - lo) if hi > lo else 1.0 for d, s in docs.items()}
    mean = sum(vals) / n
    std = (sum((v - mean) ** 2 for v in vals) / n) ** 0.5
    if how == "z":
        return {d: (float(s) - mean) / std if std > 0 else 0.0 for d, s in docs.items()}
    lo, hi = mean - 3 * std, mean + 3 * std
    return {d: min(1.0, max(0.0, (float(s) - lo) / (hi - lo))) if hi > lo else 1.0 for d, s in docs.items()}


def _floor_of(norm: Mapping[str, float], how: str) -> float:
    """What a document missing from a list scores in it: 0 for [0, 1] scales, the list's minimum for z."""
    if how == "z" and norm:
        return min(norm.values())
    return 0.0


def convex(dense: Mapping[str, float], sparse: Mapping[str, float], alpha: float, *, norm: str = "minmax",
           top_k: int | None = None) -> dict[str, float]:
    """α · norm(dense) + (1 − α) · norm(sparse) for one query, in fused order (ties by id).

    A document in only one list gets the other list's floor (0, or the list's minimum z-score):
    with α = 1 the order of the dense list is kept exactly, with α = 0 that of the sparse list,
    and documents only in the other list follow, in that list's order.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"fusion: convex weight must be in [0, 1], got {alpha}")
    acc = weighted([dense, sparse], [alpha, 1.0 - alpha], norm=norm)  # in fused order
    if alpha in (0.0, 1.0):  # one list alone: its own order, then the other list's remaining documents
        first, second = (dense, sparse) if alpha == 1.0 else (sparse, dense)
        order = rank_order(first) + [d for d in rank_order(second) if d not in first]
    else:
        order = list(acc)
    return {d: acc[d] for d in (order[:top_k] if top_k is not None else order)}


def weighted(lists: Sequence[Mapping[str, float]], weights: Sequence[float], *, norm: str = "z",
             top_k: int | None = None) -> dict[str, float]:
    """Σ wᵢ · norm(listᵢ) over any number of one query's lists (the convex combination generalised
    to more signals, e.g. two dense models and BM25); a document missing from a list gets that
    list's floor, as in ``convex``. Weights must be non-negative and sum to 1."""
    if len(lists) != len(weights):
        raise ValueError(f"fusion: {len(lists)} lists but {len(weights)} weights")
    if any(w < 0 for w in weights) or abs(sum(weights) - 1.0) > 1e-9:
        raise ValueError(f"fusion: weights must be >= 0 and sum to 1, got {list(weights)}")
    normed = [normalise(docs, norm) for docs in lists]
    floors = [_floor_of(n, norm) for n in normed]
    keys = dict.fromkeys(d for n in normed for d in n)
    acc = {d: sum(w * n.get(d, f) for w, n, f in zip(weights, normed, floors)) for d in keys}
    order = rank_order(acc)
    return {d: acc[d] for d in (order[:top_k] if top_k is not None else order)}


def dbsf(lists: Sequence[Mapping[str, float]], *, top_k: int | None = None) -> dict[str, float]:
    """Distribution-based score fusion of one query's lists (Qdrant's ``Fusion.DBSF``): the sum of
    each list's mean ± 3σ-normalised scores, a missing document contributing 0."""
    acc: dict[str, float] = {}
    for docs in lists:
        for d, s in normalise(docs, "dbsf").items():
            acc[d] = acc.get(d, 0.0) + s
    order = rank_order(acc)
    return {d: acc[d] for d in (order[:top_k] if top_k is not None else order)}


def rocchio(query_vec, doc_vecs, weight: float):
    """Dense pseudo-relevance feedback (Rocchio, 1971, without negatives): q' = q + β · mean(top-m
    document vectors), re-normalised to unit length (cosine only sees the direction, so α = 1)."""
    q = np.asarray(query_vec, dtype=np.float64)
    docs = np.asarray(doc_vecs, dtype=np.float64).reshape(-1, q.shape[0])
    if weight < 0:
        raise ValueError(f"retrieval.prf_weight must be >= 0, got {weight}")
    out = q + weight * docs.mean(axis=0) if len(docs) and weight else q.copy()
    norm = np.linalg.norm(out)
    return (out / norm if norm > 0 else out).astype(np.float32)
