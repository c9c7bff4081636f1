"""The retrieval experiment (notebooks/retrieval.ipynb; sweeps topk, retrieval, chunking, dims).

One configuration's retrieval, measured exactly as ``invoke eval`` measures it: the evalset's
index from the evaluation harness (:func:`adiyan.eval.harness.open_index`), the retrieval
pipeline the settings describe (:func:`adiyan.factory.open_retriever`: query transformation,
mode, floor, re-rank, cut), and the harness's per-question rows and metrics, under the run's own
names (``retrieval.hit_rate@k``: at the point's k; ``retrieval.ndcg@10``, ``by_kind.hit_rate.lookup``,
``privacy.private_chunks_leaked``). The experiment adds latency, the cost of the context and what
building the index cost.
"""

from __future__ import annotations

import numpy as np

from ..eval.harness import open_index, per_question_ir, question_rows, refuse_conversation_settings, retrieval_metrics
from ..eval.scorers import point_columns
from ..factory import open_retriever
from .common import PointResult, mean
from .scoring import merge, score_rows


def evaluate_retrieval(settings, evalset=None, *, embedder=None, progress: bool = False, score: bool = False,
                       answer_questions: int | None = None, regression_cases=None) -> PointResult:
    """Retrieval-only evaluation of one configuration on an evalset (``eval.evalset`` by default).

    Per question: hit and reciprocal rank at ``retrieval.kb_top_k`` over gold sources,
    nDCG@10 / Recall@10 over the source ranking (ranx), retrieval latency, the tokens of the
    top-k context (what generation would be handed: the cost side of top-k) and the private
    chunks of other owners in the ranking (must be 0). Every ``retrieval.*`` setting applies,
    because retrieval goes through the pipeline; ``embedder`` replaces the configured one (the
    dims experiment passes a truncated one). ``score`` adds what ``invoke eval`` scores (answers,
    RAGAS, the judge, the regression cases: :func:`adiyan.experiments.scoring.score_rows`).
    """
    refuse_conversation_settings(settings, "the retrieval experiment")
    index = open_index(settings, evalset, embedder=embedder, progress=progress)
    retriever = open_retriever(settings, index.kb)
    qr = question_rows(index, retriever, progress=progress)
    k = settings.retrieval.kb_top_k
    groups = retrieval_metrics(qr, k)
    ir = per_question_ir(qr)
    rows = []
    for r in qr.rows:
        row = {"qid": r["id"], "kind": r["kind"], "retrieve_ms": r["retrieve_s"] * 1000,
               "context_tokens": r["context_tokens"], "privacy.private_chunks_leaked": len(r["leaked_private"])}
        if r["hit"] is not None:
            row["hit"] = float(r["hit"])
            row["reciprocal_rank"] = float(r["reciprocal_rank"])
            for metric, per_q in ir.items():
                row[f"retrieval.{metric}"] = per_q.get(r["id"])
        rows.append(row)
    lat_ms = np.asarray([r["retrieve_ms"] for r in rows], dtype=float)
    metrics = point_columns(groups, k)  # the run's names: retrieval.hit_rate@k, retrieval.ndcg@10, by_kind...
    metrics.update({
        "context_tokens": mean(r["context_tokens"] for r in rows),
        "retrieve_ms": float(lat_ms.mean()) if len(lat_ms) else None,
        "retrieve_p95_ms": float(np.percentile(lat_ms, 95)) if len(lat_ms) else None,
    })
    b = index.build
    metrics.update({"n_chunks": float(b["n_chunks"]), "index_build_s": b["build_s"],
                    "chunking_s": b.get("chunk_s", 0.0), "index_embedded_texts": float(b["embed_cache_misses"]),
                    "mean_chunk_chars": b["chunk_chars_total"] / max(1, b["n_chunks"])})
    es = index.evalset
    info = {"evalset": es.name, "questions": len(rows), "answerable": len(qr.qrels), "k": k,
            "depth": retriever.depth(k), "pool": retriever.pool(k), "retrieval": retriever.describe(),
            "mode": settings.retrieval.mode, "rerank": bool(settings.retrieval.rerank),
            "embedder": index.kb.embedder.id, "floor": retriever.describe()["floor"],
            "index_dir": str(index.data_dir), "index_reused": index.reused, "index_open_s": round(index.opened_s, 4),
            "ingest_failed": index.ingest_failures,
            "build": {k_: v for k_, v in b.items() if k_ != "key"}}
    res = PointResult(metrics, rows, info)
    if score:
        merge(res, score_rows(settings, index, qr, answer_questions=answer_questions,
                              regression_cases=regression_cases, progress=progress))
    return res
