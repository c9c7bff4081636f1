"""The LoCoMo experiment (notebooks/locomo.ipynb; sweep locomo): the memory engine's recency
half-life, its top k and the history window, scored on LoCoMo's evidence recall.

Each point runs the product paths of ``invoke eval`` on LoCoMo (:func:`adiyan.eval.locomo.run.evaluate`:
the same mem0 store, built once per (file, embedder) and reused; the same candidate cache; the
same three-part context), so a point and a run never disagree. The reference paths do not depend
on the swept settings and are left to ``invoke eval``. ``eval.evalset`` must name a LoCoMo file
(the sweep sets it); ``eval.locomo_conversations`` narrows it.
"""

from __future__ import annotations

from ..eval.locomo.data import LocomoError, is_locomo_file, load_locomo
from ..eval.locomo.run import evaluate, locomo_tables, overall_metrics
from ..factory import open_embedder
from .common import PointResult
from .scoring import ONLY_STALE, merge, replay_stale_fact, score_groups

SWEPT_PATHS = ("memory_similarity", "memory_recency", "context")


def evaluate_locomo(settings, *, progress: bool = False) -> PointResult:
    """Memory search (similarity, recency) and the three-part context on LoCoMo under ``settings``."""
    if not is_locomo_file(settings.eval.evalset):
        raise LocomoError(f"eval.evalset={settings.eval.evalset}: the LoCoMo experiment needs a LoCoMo .json file "
                          "(e.g. ../shared/datasets/locomo/locomo8.json)")
    ls = load_locomo(settings.eval.evalset).select(settings.eval.locomo_conversations)
    embedder = open_embedder(settings, progress=progress)
    rows, info = evaluate(settings, ls, embedder, paths=SWEPT_PATHS, progress=progress)
    t = locomo_tables(rows, SWEPT_PATHS)
    # the run's locomo group as columns (locomo.memory_recency.recall@10, locomo.context.recall...)
    metrics = {f"locomo.{name}": v for name, v in overall_metrics(t, SWEPT_PATHS).items()}
    metrics["context_size"] = sum(len(r["context_ids"]) for r in rows) / len(rows)
    per_q = [{"qid": r["id"], "category": r["category_name"], "recall@10": r["recall"]["memory_recency"]["10"],
              "context_recall": r["context_recall"]} for r in rows]
    # scored like a run: incident 3 at the point's half-life, and the regression cases (n/a ones with why)
    group, incident = replay_stale_fact(settings, embedder)
    groups = {"locomo": {c.split(".", 1)[1]: v for c, v in metrics.items() if c.startswith("locomo.")},
              "incidents": group}
    scored = score_groups(groups, ls.name, embedder.id, incidents_why=ONLY_STALE, incident=incident)
    return merge(PointResult(metrics, per_q, {
        "conversations": len(ls.conversations), "questions": len(rows), "locomo": str(ls.path),
        "locomo_hash": ls.content_hash(), "embedder": embedder.id, "half_life_days": settings.memory.half_life_days,
        "memory_top_k": settings.memory.top_k, "history_window": settings.conversation.history_window,
        "per_category": {p: t[p] for p in SWEPT_PATHS}, "context_configured": t["context_configured"],
        "mem0_searches": info.get("mem0_searches"), "timings": info.get("timings")}), scored)
