"""The evaluation job behind ``invoke eval``: ingest an evalset, answer every question, score, report.

A run is a config plus a dataset; ``reports/<run-id>/`` records both (config hash, model ids,
dataset hash) beside the metrics, the per-question table and the HTML report.
"""

from __future__ import annotations

import json
import platform
import re
import time
from datetime import datetime, timezone
from pathlib import Path

from tqdm.auto import tqdm

from .. import __version__
from ..cache import CallCache
from ..generation import answer_question
from ..kb import KnowledgeBase
from ..models import embedder_from_settings, llm_from_settings
from ..store import open_store
from . import metrics as M
from .evalset import load_evalset

EVAL_REQUESTER = "eval-user"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)


def new_run_id(settings) -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-") + settings.config_hash()[:6]


def open_eval_kb(settings, es, *, progress: bool = True, embedder=None):
    """The evalset's knowledge base, ingested: one index per (evalset version, embedder), so
    reruns reuse it and a chunking change re-ingests only what changed."""
    ds_hash = es.content_hash()
    embedder = embedder or embedder_from_settings(settings, progress=progress)
    kb_settings = settings.with_overrides({
        "paths.data_dir": str(Path(settings.paths.data_dir) / "eval" / f"{_slug(es.name)}-{ds_hash[:8]}" / _slug(embedder.id))})
    kb = KnowledgeBase(kb_settings, open_store(kb_settings), embedder)
    ingested = []
    for doc in tqdm(es.documents, desc="ingest", unit="doc", disable=not progress):
        ingested.append(kb.ingest_document(doc.path, doc.filename, doc.owner, doc.visibility))
    kb.finish_ingest()
    return kb, ingested


def run_eval(settings, *, progress: bool = True, run_id: str | None = None, log=print) -> Path:
    t_start = time.perf_counter()
    es = load_evalset(settings.eval.evalset)
    ds_hash = es.content_hash()
    t0 = time.perf_counter()
    kb, ingested = open_eval_kb(settings, es, progress=progress)
    embedder, store = kb.embedder, kb.store
    try:
        ingest_s = time.perf_counter() - t0

        llm = llm_from_settings(settings) if settings.eval.generate else None
        answer_cache = CallCache(Path(settings.paths.cache_dir) / "calls.sqlite", "answer")
        rows, retrieve_s, generate_s = [], 0.0, 0.0
        k = settings.retrieval.kb_top_k
        for q in tqdm(es.questions, desc="questions", unit="q", disable=not progress):
            t1 = time.perf_counter()
            result = kb.retrieve_knowledge_base(q.question, q.requester or EVAL_REQUESTER, is_owner=False, top_k=k)
            t2 = time.perf_counter()
            retrieve_s += t2 - t1
            sources = [c.source for c in result.chunks]
            answer = None
            if llm is not None:
                answer = answer_question(llm, q.question, result.chunks, settings, cache=answer_cache)
            generate_s += time.perf_counter() - t2
            rows.append({
                "id": q.id, "question": q.question, "kind": q.kind, "gold_answer": q.gold_answer,
                "gold_sources": q.gold_sources, "answer_keywords": q.answer_keywords,
                "retrieved": [c.as_dict() for c in result.chunks],
                "empty_reason": result.empty_reason,
                "hit": M.hit(sources, q.gold_sources) if q.answerable else None,
                "reciprocal_rank": M.reciprocal_rank(sources, q.gold_sources) if q.answerable else None,
                "answer": answer.text if answer else None,
                "answer_used": answer.used if answer else None,
                "keyword_hit": (M.keyword_hit(answer.text, q.answer_keywords)
                                if answer and q.answerable else None),
                "abstained": M.abstained(answer.text) if answer else None,
                "latency_s": round(time.perf_counter() - t1, 4),
            })
        answerable = [r for r in rows if r["hit"] is not None]
        unanswerable = [r for r in rows if r["hit"] is None]
        metric_groups = {
            "retrieval": {
                f"hit_rate@{k}": M.mean_or_none([r["hit"] for r in answerable]),
                f"mrr@{k}": M.mean_or_none([r["reciprocal_rank"] for r in answerable]),
            },
        }
        if llm is not None:
            metric_groups["answer"] = {
                "keyword_recall": M.mean_or_none([r["keyword_hit"] for r in answerable]),
                "abstain_rate_unanswerable": M.mean_or_none([r["abstained"] for r in unanswerable]),
                "abstain_rate_answerable": M.mean_or_none([r["abstained"] for r in answerable]),
            }
        run_id = run_id or new_run_id(settings)
        run_dir = Path(settings.paths.reports_dir) / run_id
        run_dir.mkdir(parents=True, exist_ok=True)
        out = {
            "run_id": run_id,
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "adiyan_version": __version__,
            "python": platform.python_version(),
            "config_hash": settings.config_hash(),
            "config": settings.to_dict(),
            "models": {"embedder": {**embedder.describe(), "score_floor": settings.score_floor(embedder.id)},
                       "llm": ({"id": llm.id, "context_size": llm.context_size} if llm else None)},
            "dataset": {"name": es.name, "path": str(es.root), "hash": ds_hash,
                        "n_documents": len(es.documents), "n_questions": len(es.questions),
                        "n_answerable": len(answerable), "n_chunks": kb.count_chunks(),
                        "documents_reingested": sum(r.changed for r in ingested)},
            "metrics": metric_groups,
            "timings": {"ingest_s": round(ingest_s, 3), "retrieve_s": round(retrieve_s, 3),
                        "generate_s": round(generate_s, 3),
                        "total_s": round(time.perf_counter() - t_start, 3)},
            "cache": {"embeddings": embedder.stats.as_dict(), "answers": answer_cache.stats.as_dict(),
                      "hits": embedder.stats.hits, "misses": embedder.stats.misses},
        }
        (run_dir / "config.yaml").write_text(settings.to_yaml(), encoding="utf-8")
        with open(run_dir / "questions.jsonl", "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        (run_dir / "metrics.json").write_text(json.dumps(out, indent=2, ensure_ascii=False), encoding="utf-8")
    finally:
        store.close()
    from ..report import write_index, write_run_report

    write_run_report(run_dir)
    write_index(Path(settings.paths.reports_dir))
    return run_dir


def summary_lines(run_dir: Path) -> list[str]:
    m = json.loads((Path(run_dir) / "metrics.json").read_text())
    lines = [f"run {m['run_id']}  config {m['config_hash'][:12]}  dataset {m['dataset']['name']} "
             f"({m['dataset']['n_questions']} questions, {m['dataset']['n_chunks']} chunks)",
             f"embedder {m['models']['embedder']['id']}  llm {(m['models']['llm'] or {}).get('id')}"]
    for group, vals in m["metrics"].items():
        lines.append(f"  {group:<10} " + "  ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                                               for k, v in vals.items()))
    t = m["timings"]
    c = m["cache"]
    lines.append(f"  time total {t['total_s']:.1f}s (ingest {t['ingest_s']:.1f}s, generate {t['generate_s']:.1f}s); "
                 f"embedding cache {c['embeddings']['hits']} hits / {c['embeddings']['misses']} misses; "
                 f"answer cache {c['answers']['hits']} hits / {c['answers']['misses']} misses")
    lines.append(f"  report: {Path(run_dir) / 'report.html'}")
    return lines
