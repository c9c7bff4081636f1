"""Calibrating an embedder's score floor on an evalset (the rules live in adiyan.retrieval.floor)."""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np

from ..retrieval.floor import FloorCalibration, best_threshold, recall_threshold


def calibrate_floor(retriever, evalset, *, requester: str = "eval-user", rule: str = "recall",
                    min_recall: float = 0.95) -> FloorCalibration:
    """Scores of gold vs other chunks for every answerable question of ``evalset`` through ``retriever`` (floor off)."""
    if retriever.config.mode != "dense":
        raise ValueError(f"a score floor applies to dense cosine scores; retrieval.mode is {retriever.config.mode!r}")
    relevant, irrelevant = [], []
    for q in evalset.questions:
        if not q.answerable:
            continue
        res = retriever.retrieve(q.question, q.requester or requester, top_k=50, floor=-1.0)
        gold = [c.score for c in res.chunks if c.source in q.gold_sources]
        other = [c.score for c in res.chunks if c.source not in q.gold_sources]
        if gold:
            relevant.append(max(gold))
        if other:
            irrelevant.append(max(other))
    if rule == "youden":
        t, j, tpr, fpr = best_threshold(relevant, irrelevant)
    elif rule == "recall":
        t, j, tpr, fpr = recall_threshold(relevant, irrelevant, min_recall)
    else:
        raise ValueError(f"unknown floor rule {rule!r}: recall or youden")
    # round down so the stored floor never drops a score the rule kept
    return FloorCalibration(retriever.kb.embedder.id, float(np.floor(t * 1e4) / 1e4), f"{rule}" + (f"@{min_recall}" if rule == "recall" else ""), round(j, 4), round(tpr, 4), round(fpr, 4),
                            len(relevant), len(irrelevant), round(float(np.mean(relevant)), 4),
                            round(float(np.mean(irrelevant)), 4), evalset.name, evalset.content_hash()[:16],
                            datetime.now(timezone.utc).isoformat(timespec="seconds"))


