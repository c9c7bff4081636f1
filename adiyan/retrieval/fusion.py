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
