"""Score floors measured on evalsets (the rules and the decision live in adiyan.retrieval.floor).

- :func:`calibrate_floor`: the floor of an embedder on a *calibration* set, which must be
  disjoint from the questions ``invoke eval`` scores (the authored ``adiyan_full``). The
  default, :data:`DEFAULT_CALIBRATION_SET`, is XQuAD English (1,190 SQuAD questions over 240
  Wikipedia paragraphs, five per article): a question's best irrelevant chunk is usually another
  paragraph of the same article, the hard negatives a knowledge base of a few documents with
  many sections has. ClapNQ dev's distractors are passages on other topics: easy negatives that
  flatter J and push the floor up (minilm: floor 0.504 at J 0.86 on ClapNQ, which on adiyan_full
  would remove 66% of the relevant top-4 chunks). Relevant / irrelevant scores are the best
  gold / best other chunk per answerable question, retrieved through the pipeline with the
  floor off.
- :func:`floor_effect`: what a floor removes on the *scored* set: of the top-k chunks each
  question gets without a floor, how many are relevant (from a gold source) or irrelevant and
  how many of each score under the floor; and J on the scored set (same definition as the
  calibration), an out-of-sample check of the calibrated floor.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from ..retrieval.floor import FloorCalibration, FloorDecision, best_threshold, rates_at, recall_threshold

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CALIBRATION_SET = ROOT.parent / "shared" / "datasets" / "xquad_en" / "beir"


def _portable(path) -> str:
    """A path as the floors file records it: relative to the repository when it can be (../shared/...)."""
    try:
        return os.path.relpath(Path(path).resolve(), ROOT)
    except ValueError:  # another drive
        return str(path)


def _best_scores(retriever, evalset, requester: str, progress: bool = False):
    """(relevant, irrelevant): per answerable question, the best gold and the best other score."""
    relevant, irrelevant = [], []
    qs = [q for q in evalset.questions if q.answerable]
    for q in tqdm(qs, desc="floor scores", unit="q", disable=not progress, leave=False):
        res = retriever.retrieve(q.question, q.requester or requester, top_k=50, floor=-1.0)
        gold = [c.score for c in res.chunks if c.source in q.gold_sources]
        other = [c.score for c in res.chunks if c.source not in q.gold_sources]
        if gold:
            relevant.append(max(gold))
        if other:
            irrelevant.append(max(other))
    return relevant, irrelevant


def calibrate_floor(retriever, evalset, *, requester: str = "eval-user", rule: str = "recall",
                    min_recall: float = 0.95, configured: float | None = None, split: str = "",
                    source: str = "", progress: bool = False) -> FloorCalibration:
    """Scores of gold vs other chunks for every answerable question of ``evalset`` through
    ``retriever`` (floor off); the floor by ``rule``, its J / TPR / FPR, the best J any threshold
    reaches, and the J of a ``configured`` floor on the same scores."""
    if retriever.config.mode != "dense":
        raise ValueError(f"a score floor applies to dense cosine scores; retrieval.mode is {retriever.config.mode!r}")
    relevant, irrelevant = _best_scores(retriever, evalset, requester, progress)
    if rule == "youden":
        t, j, tpr, fpr = best_threshold(relevant, irrelevant)
    elif rule == "recall":
        t, j, tpr, fpr = recall_threshold(relevant, irrelevant, min_recall)
    else:
        raise ValueError(f"unknown floor rule {rule!r}: recall or youden")
    # round down so the stored floor never drops a score the rule kept
    floor = float(np.floor(t * 1e4) / 1e4)
    j, tpr, fpr = rates_at(relevant, irrelevant, floor)
    bt, bj, _, _ = best_threshold(relevant, irrelevant)
    conf = None
    if configured is not None:
        cj, ctpr, cfpr = rates_at(relevant, irrelevant, configured)
        conf = {"floor": float(configured), "youden_j": round(cj, 4), "tpr": round(ctpr, 4), "fpr": round(cfpr, 4)}
    n_answerable = sum(q.answerable for q in evalset.questions)
    return FloorCalibration(retriever.kb.embedder.id, floor, f"{rule}" + (f"@{min_recall}" if rule == "recall" else ""),
                            round(j, 4), round(tpr, 4), round(fpr, 4),
                            len(relevant), len(irrelevant), round(float(np.mean(relevant)), 4),
                            round(float(np.mean(irrelevant)), 4), evalset.name, evalset.content_hash()[:16],
                            datetime.now(timezone.utc).isoformat(timespec="seconds"),
                            split or f"all {n_answerable} answerable questions", _portable(source or evalset.root),
                            round(bj, 4), float(np.floor(bt * 1e4) / 1e4), conf)


def floor_effect(retriever, evalset, decision: FloorDecision, k: int, *, requester: str = "eval-user",
                 scored_hash: str = "") -> tuple[dict, dict]:
    """What ``decision``'s floor removes on the scored set: (metric group, details).

    Every question's top ``k`` without a floor (its requester's view): chunks from a gold source
    are relevant, the rest irrelevant (all of an unanswerable question's); counted with those
    scoring under the floor. ``floor_j_scored`` is J of the floor on the scored set's best
    relevant / best irrelevant score per answerable question, the calibration's definition."""
    floor = decision.candidate
    if retriever.config.mode != "dense" or retriever.reranker is not None or retriever.config.query_transform != "none":
        why = (f"retrieval.mode={retriever.config.mode}: no floor applies to fused or BM25 scores"
               if retriever.config.mode != "dense" else
               "the ranking is re-ranked or transformed, so its scores are not the cosines the floor applies to")
        return {"floor": floor, "floor_applied": float(decision.applied and retriever.config.mode == "dense")}, \
            {"measured": False, "why": why}
    rel_top = rel_below = irr_top = irr_below = 0
    relevant, irrelevant = [], []
    for q in evalset.questions:
        res = retriever.retrieve(q.question, q.requester or requester, top_k=max(k, 50), floor=-1.0)
        gold = set(q.gold_sources)
        for c in res.chunks[:k]:
            if c.source in gold:
                rel_top += 1
                rel_below += c.score < floor
            else:
                irr_top += 1
                irr_below += c.score < floor
        if q.answerable:
            g = [c.score for c in res.chunks if c.source in gold]
            o = [c.score for c in res.chunks if c.source not in gold]
            if g:
                relevant.append(max(g))
            if o:
                irrelevant.append(max(o))
    j_scored = round(rates_at(relevant, irrelevant, floor)[0], 4) if relevant and irrelevant else None
    cal = decision.calibration or {}
    group = {
        "floor": floor, "floor_applied": float(decision.applied),
        "floor_j_calibration": decision.youden_j, "floor_j_scored": j_scored,
        "relevant_top_k": rel_top, "relevant_below_floor": rel_below,
        "relevant_below_floor_share": round(rel_below / rel_top, 6) if rel_top else None,
        "irrelevant_top_k": irr_top, "irrelevant_below_floor": irr_below,
        "irrelevant_below_floor_share": round(irr_below / irr_top, 6) if irr_top else None,
    }
    details = {"measured": True, "k": k, "source": decision.source, "applied": decision.applied,
               "reason": decision.reason, "j_scored": j_scored, "relevant_below": [rel_below, rel_top],
               "irrelevant_below": [irr_below, irr_top], "calibration_evalset": cal.get("evalset"),
               "calibration_hash": cal.get("evalset_hash"), "calibration_split": cal.get("split"),
               "calibration_rule": cal.get("rule"), "calibration_n": (cal.get("n_relevant"), cal.get("n_irrelevant")),
               "disjoint": (not scored_hash or not cal.get("evalset_hash")
                            or not scored_hash.startswith(str(cal.get("evalset_hash"))))}
    return group, details
