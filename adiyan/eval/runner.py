"""The evaluation job behind ``invoke eval``: ingest an evalset, answer every question, score, report.

A run is a config plus a dataset; ``reports/<run-id>/`` records both (config hash, model ids,
dataset hash) beside the metrics, the per-question table and the HTML report. Scoring:

- retrieval: hit rate and MRR at the configured k (computed here), nDCG / Recall / MAP at 10
  over source keys (ranx), per question kind;
- privacy: private chunks of another owner in any retrieved context (must be 0), and the
  private-leak probes of the evalset;
- OCR: questions whose answer only an image holds;
- answers: keyword recall and abstention (the tiny embedded model is weak: these prove the
  wiring), RAGAS's non-LLM metrics (ID-based context precision / recall, string similarity,
  ROUGE, exact match) always, and the LLM-judged ones on a sample when ``eval.judge`` names a
  judge, beside the judge's calibrated agreement;
- the five incidents and the regression cases; a regression case below its floor makes the
  job fail (``RegressionFailed`` after everything is written), so CI can gate on it.
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
from ..kb import IngestError, IngestItem, KnowledgeBase
from ..models import embedder_from_settings, llm_from_settings
from ..retrieval import transform
from ..store import open_store
from . import metrics as M
from .evalset import load_evalset

EVAL_REQUESTER = "eval-user"
IR_DEPTH = 10


class RegressionFailed(RuntimeError):
    """A regression case fell below its floor; the run's files are written all the same."""

    def __init__(self, run_dir: Path, failures: list):
        self.run_dir = run_dir
        self.failures = failures
        super().__init__("regression case(s) below their floor: " +
                         "; ".join(f"{f.id}: {f.reason}" for f in failures))


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
    ingested = kb.ingest_many([IngestItem(doc.path, doc.filename, doc.owner, doc.visibility) for doc in es.documents],
                              progress=progress)
    failed = [r for r in ingested if isinstance(r, IngestError)]
    if failed:  # an evalset document that does not ingest makes every number meaningless
        raise failed[0]
    kb.finish_ingest()
    return kb, ingested


def _source_run(chunks) -> dict[str, float]:
    """Chunk ranking → source ranking: each source scored by its best chunk (1/rank keeps order)."""
    run: dict[str, float] = {}
    for rank, c in enumerate(chunks, 1):
        run.setdefault(c.source, 1.0 / rank)
    return run


def _leaked(chunks, requester: str) -> list[str]:
    return [f"{c.source}#{c.chunk_index}" for c in chunks
            if c.payload.get("visibility") != "global" and c.payload.get("owner_identity") != requester]


def _answer_rows(settings, es, kb, llm, progress):
    k = settings.retrieval.kb_top_k
    answer_cache = CallCache(Path(settings.paths.cache_dir) / "calls.sqlite", "answer")
    rows, run, qrels, timings = [], {}, {}, {"retrieve_s": 0.0, "generate_s": 0.0}
    hyde_llm = (llm or llm_from_settings(settings)) if settings.retrieval.query_transform == "hyde" else None
    for q in tqdm(es.questions, desc="questions", unit="q", disable=not progress):
        requester = q.requester or EVAL_REQUESTER
        t1 = time.perf_counter()
        deep = transform.retrieve(kb, q.question, requester, top_k=max(k, IR_DEPTH), llm=hyde_llm,
                                  cache=answer_cache)
        result_chunks = deep.chunks[:k]
        t2 = time.perf_counter()
        timings["retrieve_s"] += t2 - t1
        sources = [c.source for c in result_chunks]
        answer = answer_question(llm, q.question, result_chunks, settings, cache=answer_cache) if llm else None
        timings["generate_s"] += time.perf_counter() - t2
        if q.answerable:
            qrels[q.id] = {s: 1 for s in q.gold_sources}
            run[q.id] = _source_run(deep.chunks)
        probe = q.extra.get("probe_private")
        probe_key = next((d.source_key for d in es.documents if d.filename == probe), None) if probe else None
        rows.append({
            "id": q.id, "question": q.question, "kind": q.kind, "requester": requester,
            "gold_answer": q.gold_answer, "gold_sources": q.gold_sources, "answer_keywords": q.answer_keywords,
            "needs_ocr": bool(q.extra.get("needs_ocr")), "probe_private": probe_key,
            "retrieved": [c.as_dict() for c in result_chunks],
            "empty_reason": deep.empty_reason if not result_chunks else None,
            "hit": M.hit(sources, q.gold_sources) if q.answerable else None,
            "reciprocal_rank": M.reciprocal_rank(sources, q.gold_sources) if q.answerable else None,
            "leaked_private": _leaked(deep.chunks, requester),
            "probe_leaked": (probe_key in {c.source for c in deep.chunks}) if probe_key else None,
            "answer": answer.text if answer else None,
            "answer_used": answer.used if answer else None,
            "keyword_hit": M.keyword_hit(answer.text, q.answer_keywords) if answer and q.answerable else None,
            "abstained": M.abstained(answer.text) if answer else None,
            "latency_s": round(time.perf_counter() - t1, 4),
        })
    return rows, run, qrels, timings, answer_cache


def _metric_groups(settings, rows, run, qrels) -> dict:
    from .ir_metrics import evaluate_run

    k = settings.retrieval.kb_top_k
    answerable = [r for r in rows if r["hit"] is not None]
    unanswerable = [r for r in rows if r["hit"] is None]
    groups = {"retrieval": {
        f"hit_rate@{k}": M.mean_or_none([r["hit"] for r in answerable]),
        f"mrr@{k}": M.mean_or_none([r["reciprocal_rank"] for r in answerable]),
    }}
    if qrels:
        ir = evaluate_run(qrels, run, [f"ndcg@{IR_DEPTH}", f"recall@{IR_DEPTH}", f"mrr@{IR_DEPTH}", f"map@{IR_DEPTH}"])
        groups["retrieval"].update({m: round(v, 6) for m, v in ir.items()})
    groups["by_kind"] = {f"hit_rate.{kind}": M.mean_or_none([r["hit"] for r in answerable if r["kind"] == kind])
                         for kind in sorted({r["kind"] for r in answerable})}
    probes = [r for r in rows if r["probe_private"]]
    groups["privacy"] = {"private_chunks_leaked": sum(len(r["leaked_private"]) for r in rows),
                         "probe_questions": len(probes),
                         "probes_leaked": sum(bool(r["probe_leaked"]) for r in probes)}
    ocr = [r for r in answerable if r["needs_ocr"]]
    if ocr:
        groups["ocr"] = {"hit_rate": M.mean_or_none([r["hit"] for r in ocr]), "questions": len(ocr)}
    if any(r["answer"] is not None for r in rows):
        groups["answer"] = {
            "keyword_recall": M.mean_or_none([r["keyword_hit"] for r in answerable]),
            "abstain_rate_unanswerable": M.mean_or_none([r["abstained"] for r in unanswerable]),
            "abstain_rate_answerable": M.mean_or_none([r["abstained"] for r in answerable]),
        }
    return groups


def _ragas_non_llm(rows) -> tuple[dict, dict]:
    from .ragas_metrics import score_non_llm, summarize

    ragas_rows = [{"id": r["id"], "question": r["question"], "answer": r["answer"], "retrieved": r["retrieved"],
                   "gold_answer": r["gold_answer"] if r["hit"] is not None else None,
                   "gold_sources": r["gold_sources"]} for r in rows]
    per_row = score_non_llm(ragas_rows, id_field="source")
    summary = summarize(per_row)
    return {name: s["mean"] for name, s in summary.items()}, per_row


def _ragas_llm(settings, es, rows, embedder, progress, doc_texts) -> dict | None:
    """LLM-judged metrics on a sample, beside the judge's calibration on labelled pairs."""
    from .judge import calibrate, evalset_calibration_pairs, judge_from_settings
    from .ragas_metrics import score_llm

    judge = judge_from_settings(settings)
    if judge is None:
        return None
    answerable = [r for r in rows if r["hit"] is not None and r["retrieved"]]
    # contexts from the gold documents, so a "correct" pair is really supported
    pairs = evalset_calibration_pairs(es, seed=settings.seed, doc_texts=doc_texts)[: 2 * (settings.eval.judge_calibration_pairs // 2)]
    cal = calibrate(judge, pairs, reliable_threshold=settings.eval.judge_reliable_agreement, progress=progress)
    ragas_rows = [{"id": r["id"], "question": r["question"], "answer": r["answer"], "retrieved": r["retrieved"],
                   "gold_answer": r["gold_answer"], "gold_sources": r["gold_sources"]} for r in answerable]
    per_row, summary = score_llm(ragas_rows, judge, embedder, settings.eval.judge_metrics or None,
                                 sample=settings.eval.judge_sample, seed=settings.seed, calibration=cal,
                                 progress=progress)
    return {"calibration": cal.as_dict(), "summary": summary, "per_row": per_row,
            "judge_stats": judge.stats.as_dict() if hasattr(judge.stats, "as_dict") else vars(judge.stats),
            "failures": [f._asdict() for f in judge.failures]}


def _incident_groups(settings, embedder, run_dir: Path) -> dict:
    from dataclasses import asdict

    from .incidents import replay_all

    results = replay_all(settings, embedder=embedder, progress=False)
    (run_dir / "incidents.json").write_text(json.dumps([asdict(r) for r in results], indent=2), encoding="utf-8")
    group = {"principles_holding_share": round(sum(r.holds for r in results) / len(results), 6)}
    for r in results:
        group[f"{r.number}_{r.name.replace(' ', '_')}_holds"] = float(r.holds)
    d1 = next(r for r in results if r.number == 1).details
    if "after" in d1:
        group["chunk_dilution_before"] = round(d1["before"], 6)
        group["chunk_dilution_after"] = round(d1["after"], 6)
    return group


def run_eval(settings, *, progress: bool = True, run_id: str | None = None, incidents: bool | None = None) -> Path:
    from .regression import check

    t_start = time.perf_counter()
    es = load_evalset(settings.eval.evalset)
    ds_hash = es.content_hash()
    run_id = run_id or new_run_id(settings)
    run_dir = Path(settings.paths.reports_dir) / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(settings.to_yaml(), encoding="utf-8")
    t0 = time.perf_counter()
    kb, ingested = open_eval_kb(settings, es, progress=progress)
    embedder = kb.embedder
    try:
        timings = {"ingest_s": time.perf_counter() - t0}
        llm = llm_from_settings(settings) if settings.eval.generate else None
        rows, run, qrels, t, answer_cache = _answer_rows(settings, es, kb, llm, progress)
        timings.update(t)
        n_chunks = kb.count_chunks()
        doc_texts = {d.source_key: kb.get_document_text(d.source_key, None, is_owner=True) for d in es.documents}
    finally:
        kb.store.close()
    groups = _metric_groups(settings, rows, run, qrels)
    t0 = time.perf_counter()
    groups["ragas"], ragas_rows = _ragas_non_llm(rows)
    for name, values in ragas_rows.items():
        for r, v in zip(rows, values):
            r.setdefault("ragas", {})[name] = v
    judged = _ragas_llm(settings, es, rows, embedder, progress, doc_texts)
    if judged is not None:
        cal = judged["calibration"]
        groups["ragas_llm"] = {"judge_agreement": cal["agreement"], "judge_reliable": float(cal["reliable"])}
        for name, s in judged["summary"].get("metrics", {}).items():
            groups["ragas_llm"][name] = s.get("mean")
            groups["ragas_llm"][f"{name}.failed"] = s.get("failed")
        (run_dir / "judge.json").write_text(json.dumps(judged, indent=2, default=str), encoding="utf-8")
    timings["score_s"] = time.perf_counter() - t0
    if incidents if incidents is not None else settings.eval.incidents:
        t0 = time.perf_counter()
        groups["incidents"] = _incident_groups(settings, embedder, run_dir)
        timings["incidents_s"] = time.perf_counter() - t0
    regression = check(groups, embedder.id, es.name)
    groups["regression"] = {r.id: (None if r.status == "not_checked" else float(r.status == "pass")) for r in regression}
    timings["total_s"] = time.perf_counter() - t_start
    out = {
        "run_id": run_id,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "adiyan_version": __version__,
        "python": platform.python_version(),
        "config_hash": settings.config_hash(),
        "config": settings.to_dict(),
        "models": {"embedder": {**embedder.describe(), "score_floor": settings.score_floor(embedder.id)},
                   "llm": ({"id": llm.id, "context_size": llm.context_size} if llm else None),
                   "judge": settings.eval.judge},
        "dataset": {"name": es.name, "path": str(es.root), "hash": ds_hash,
                    "n_documents": len(es.documents), "n_questions": len(es.questions),
                    "n_answerable": len(qrels), "n_chunks": n_chunks,
                    "documents_reingested": sum(r.changed for r in ingested)},
        "metrics": groups,
        "regression": [r.as_dict() for r in regression],
        "regression_failed": sum(r.status == "fail" for r in regression),
        "timings": {k: round(v, 3) for k, v in timings.items()},
        "cache": {"embeddings": embedder.stats.as_dict(), "answers": answer_cache.stats.as_dict(),
                  "hits": embedder.stats.hits, "misses": embedder.stats.misses},
    }
    with open(run_dir / "questions.jsonl", "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    (run_dir / "metrics.json").write_text(json.dumps(out, indent=2, ensure_ascii=False), encoding="utf-8")
    from ..report import write_index, write_run_report

    write_run_report(run_dir)
    write_index(Path(settings.paths.reports_dir))
    failures = [r for r in regression if r.status == "fail"]
    if failures:
        raise RegressionFailed(run_dir, failures)
    return run_dir


def summary_lines(run_dir: Path) -> list[str]:
    m = json.loads((Path(run_dir) / "metrics.json").read_text())
    lines = [f"run {m['run_id']}  config {m['config_hash'][:12]}  dataset {m['dataset']['name']} "
             f"({m['dataset']['n_questions']} questions, {m['dataset']['n_chunks']} chunks)",
             f"embedder {m['models']['embedder']['id']}  llm {(m['models']['llm'] or {}).get('id')}  "
             f"judge {m['models'].get('judge')}"]
    for group, vals in m["metrics"].items():
        shown = "  ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in vals.items())
        lines.append(f"  {group:<10} {shown}")
    for r in m.get("regression", []):
        if r["status"] == "fail":
            lines.append(f"  REGRESSION {r['id']}: {r['reason']}")
    t = m["timings"]
    c = m["cache"]
    lines.append(f"  time total {t['total_s']:.1f}s (ingest {t['ingest_s']:.1f}s, generate {t['generate_s']:.1f}s, "
                 f"score {t.get('score_s', 0):.1f}s, incidents {t.get('incidents_s', 0):.1f}s); "
                 f"embedding cache {c['embeddings']['hits']} hits / {c['embeddings']['misses']} misses; "
                 f"answer cache {c['answers']['hits']} hits / {c['answers']['misses']} misses")
    lines.append(f"  report: {Path(run_dir) / 'report.html'}")
    return lines
