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
import time
from pathlib import Path

from ..cache import call_cache
from ..factory import describe_engines, open_llm, open_retriever, score_floor
from ..models.structured import describe_structured
from ..retrieval.floor import floor_decision
from ..generation import effective_budget
from ..types import OWNER
from .agent_eval import run_agent_eval
from .conversations import run_conversations
from .evalset import EvalsetError, check_evalset_path, incidents_apply, is_conversation_set
from .locomo.data import is_locomo_file
from .memory_safety import is_memory_safety_set, run_memory_safety
from .memory_safety_report import summary_lines as memory_safety_summary_lines
from .locomo.run import run_locomo
from .locomo.run import summary_lines as locomo_summary_lines
from .beir_protocol import beir_report, refuse_beir_protocol
from .harness import answer_rows, close_index, open_index, question_rows, refuse_conversation_settings
from .incidents import as_dict as incident_dict
from .incidents import incident_metrics, replay_all
from .ir_metrics import backend as ir_backend
from .floors import floor_effect
from .reliability import group_line, judged_group, warning_lines, warnings_for
from .record import RunRecord
from .regression import RegressionResult, not_applicable, not_applicable_lines, run_cases
from .scorers import ANSWER, CLAIMS, RETRIEVAL_SCORERS, STRINGS, score
from .scorers import judged as judged_scores
from . import repeats as repeats_mod


class RegressionFailed(RuntimeError):
    """A regression case fell below its floor; the run's files are written all the same."""

    def __init__(self, run_dir: Path, failures: list):
        self.run_dir = run_dir
        self.failures = failures
        super().__init__("regression case(s) below their floor: " +
                         "; ".join(f"{f.id}: {f.reason}" for f in failures))


def _incident_groups(settings, embedder, run_dir: Path) -> dict:
    results = replay_all(settings, embedder=embedder, progress=False)
    (run_dir / "incidents.json").write_text(json.dumps([incident_dict(r) for r in results], indent=2), encoding="utf-8")
    return incident_metrics(results)  # per incident: holds, share of variants held


def _gate(run_dir: Path) -> Path:
    """Every kind of run gates alike: a regression case below its floor raises after the files are written."""
    m = json.loads((Path(run_dir) / "metrics.json").read_text(encoding="utf-8"))
    failures = [RegressionResult(**r) for r in m.get("regression") or [] if r.get("status") == "fail"]
    if failures:
        raise RegressionFailed(run_dir, failures)
    return run_dir


def run_eval(settings, *, progress: bool = True, run_id: str | None = None, incidents: bool | None = None) -> Path:
    check_evalset_path(settings.eval.evalset)  # a user error is one line, before any run folder is made
    refuse_beir_protocol(settings, "invoke eval")  # eval.beir_protocol=beir needs a BEIR folder (beir_protocol.py)
    # the incidents replay Adiyan's own history: on its evalsets by default, listed as "does not apply" elsewhere
    replay_incidents, incidents_why = incidents_apply(settings.eval.evalset,
                                                      incidents if incidents is not None else settings.eval.incidents)
    replay = (lambda emb, run_dir: _incident_groups(settings, emb, run_dir)) if replay_incidents else None
    if is_locomo_file(settings.eval.evalset):  # LoCoMo, a .json file: the memory engine on public data (locomo/)
        return _gate(run_locomo(settings, progress=progress, run_id=run_id, incidents=replay,
                                incidents_why=incidents_why))
    if is_memory_safety_set(settings.eval.evalset):  # many users in one memory: isolation, updates, deletion
        return _gate(run_memory_safety(settings, progress=progress, run_id=run_id, incidents=replay,
                                       incidents_why=incidents_why))
    if is_conversation_set(settings.eval.evalset):  # a multi-turn set: replayed turn by turn (conversations.py)
        return _gate(run_conversations(settings, progress=progress, run_id=run_id, incidents=replay,
                                       incidents_why=incidents_why))
    refuse_conversation_settings(settings, "invoke eval", repeats=True)
    t_start = time.perf_counter()
    record = RunRecord.for_settings(settings, run_id)
    run_dir = record.dir
    t0 = time.perf_counter()
    try:
        index = open_index(settings, progress=progress)
    except EvalsetError:
        record.discard()  # a malformed evalset leaves no run folder behind
        raise
    es, ds_hash, kb, embedder = index.evalset, index.evalset_hash, index.kb, index.kb.embedder
    answer_cache = call_cache(settings, "answer")
    try:
        timings = {"ingest_s": time.perf_counter() - t0}
        agent_mode = settings.eval.mode == "agent"  # issue 14: the agent over the same questions (agent_eval.py)
        llm = open_llm(settings) if settings.eval.generate or agent_mode or \
            settings.retrieval.query_transform == "hyde" else None
        budget = effective_budget(settings, llm) if llm is not None else None  # refuses a budget it cannot hold
        repeat_notes = repeats_mod.refuse(settings, llm, "invoke eval")  # eval.repeats / judge_repeats
        retriever = open_retriever(settings, kb, llm, cache=answer_cache, entry_point="invoke eval")
        qr = question_rows(index, retriever, progress=progress, desc="retrieve")
        rows = qr.rows
        timings["retrieve_s"] = qr.retrieve_s
        timings["generate_s"] = answer_rows(rows, qr.results, settings, llm if settings.eval.generate else None,
                                            answer_cache, progress)
        # eval.repeats: repeats 1..N-1 retrieve and answer again under their own seeds (repeats.py)
        t0 = time.perf_counter()
        more = repeats_mod.answer_repeats(settings, index, retriever, llm, answer_cache, progress) \
            if settings.eval.repeats > 1 else []
        if more:
            timings["repeats_answer_s"] = time.perf_counter() - t0
        agent_run = run_agent_eval(settings, index, retriever, llm, qr, progress=progress) if agent_mode else None
        n_chunks = kb.count_chunks()
        floor = floor_decision(settings.retrieval, embedder.id)  # what the floor removes on this set
        floor_metrics, floor_details = floor_effect(retriever, es, floor, settings.retrieval.kb_top_k,
                                                    scored_hash=ds_hash)
        doc_texts = {d.source_key: kb.get_document_text(d.source_key, OWNER) for d in es.documents
                     if d.filename not in {f["file"] for f in index.ingest_failures}}
    finally:
        close_index(index)
    k = settings.retrieval.kb_top_k
    groups = score(RETRIEVAL_SCORERS, qr, k)
    beir_detail = None
    if es.beir:  # a BEIR folder: graded nDCG@10 / Recall@100 as BEIR reports them, beside the published figures
        t0 = time.perf_counter()
        groups["beir"], beir_detail = beir_report(settings, es, qr.qrels, qr.run, embedder=embedder, progress=progress)
        timings["beir_s"] = time.perf_counter() - t0
    groups.update(score([ANSWER], qr, k))
    if index.ingest_failures:
        groups["dataset"] = {"ingest_failed": len(index.ingest_failures)}
    t0 = time.perf_counter()
    groups.update(score([STRINGS], qr, k))
    t1 = time.perf_counter()
    groups.update(score([CLAIMS], qr, k))  # the trained claim checker: faithfulness, claim P/R/F1 (issue 39)
    timings["claims_s"] = time.perf_counter() - t1
    groups["floor"] = floor_metrics
    if agent_run is not None:  # the agent's answers through the same answer scorers, beside single-shot
        groups.update(agent_run.metric_groups(k))
        agent_run.annotate(rows)
        agent_run.write(run_dir)
        timings["agent_s"] = agent_run.seconds
    judged = judged_scores(settings, es, rows, embedder, progress, doc_texts)
    if judged is not None:
        groups["ragas_llm"] = judged_group(judged)
        timings.update(judged["timings"])
        (run_dir / "judge.json").write_text(json.dumps(judged, indent=2, default=str), encoding="utf-8")
    timings["score_s"] = time.perf_counter() - t0
    repeat_block = None
    if settings.eval.repeats > 1 or settings.eval.judge_repeats > 1:
        t0 = time.perf_counter()
        repeat_groups = [{g: groups[g] for g in ("answer", "ragas") if g in groups}]
        repeat_groups += [score([ANSWER, STRINGS], q_i, k) for q_i in more]  # the same scorers as repeat 0
        judge_stats: list = []
        judge = None
        if judged is not None and judged["calibration"]["reliable"]:  # an unreliable judge is not asked again
            judge = repeats_mod.judge_fn(settings, embedder, settings.eval.judge_sample, judge_stats, progress)
        rep = repeats_mod.score_repeats([rows] + [q_i.rows for q_i in more], k, m=settings.eval.judge_repeats,
                                        base_seed=settings.llm.seed, judge=judge, notes=repeat_notes)
        repeat_block = rep.record(seed=settings.seed, judge_temperature=settings.eval.judge_temperature
                                  if judge else None, llm_temperature=settings.llm.temperature,
                                  judge_stats=judge_stats,
                                  repeat_groups=repeat_groups)
        (run_dir / "repeats.json").write_text(json.dumps({"scores": rep.scores, "per_question":
                                                          repeat_block.pop("per_question")}, indent=1),
                                              encoding="utf-8")
        timings["repeats_score_s"] = time.perf_counter() - t0
    if replay is not None:
        t0 = time.perf_counter()
        groups["incidents"] = replay(embedder, run_dir)
        timings["incidents_s"] = time.perf_counter() - t0
    regression = run_cases(groups, embedder.id, es.name,
                           incidents_why="the incidents were not replayed" if incidents_why else None)
    timings["total_s"] = time.perf_counter() - t_start
    out = {
        **record.envelope(settings),
        "models": {"embedder": {**embedder.describe(), "score_floor": score_floor(settings, embedder.id)},
                   "llm": ({"id": llm.id, "context_size": llm.context_size,
                            "kind": "generative" if getattr(llm, "generative", True) else "extractive",
                            **describe_structured(llm)}
                           if llm else None),
                   "judge": settings.eval.judge},
        "dataset": {"name": es.name, "path": str(es.root), "hash": ds_hash,
                    "n_documents": len(es.documents), "n_questions": len(es.questions),
                    "n_answerable": len(qr.qrels), "n_chunks": n_chunks, "relevance": es.relevance,
                    "index_dir": str(index.data_dir), "index_reused": index.reused,
                    "documents_reingested": 0 if index.reused else index.build.get("n_changed", 0),
                    "ingest_failed": index.ingest_failures},
        "retrieval": {**retriever.describe(), "transform_failures": retriever.transform_failures},
        "generation": {"context_budget": budget},  # configured, model window, reserves, effective (issue 25.3)
        "engines": describe_engines(settings, kb=kb),  # which Qdrant engine the KB and mem0 each used (issue 14)
        "floor": {**{k: v for k, v in floor.as_dict().items() if k != "calibration"},
                  "calibration": floor.calibration, "effect": floor_details},
        "warnings": warnings_for(judged, floor, floor_details, ds_hash),
        "ir_backend": ir_backend(),
        **({"beir": beir_detail} if beir_detail else {}),
        "metrics": groups,
        **({"repeats": repeat_block} if repeat_block else {}),  # eval.repeats: the variance split
        "regression": [r.as_dict() for r in regression],
        "regression_failed": sum(r.status == "fail" for r in regression),
        "not_applicable": not_applicable(regression, incidents_why),  # listed once, cost nothing
        "timings": {k: round(v, 3) for k, v in timings.items()},
        "cache": {"embeddings": embedder.stats.as_dict(), "answers": answer_cache.stats.as_dict(),
                  "hits": embedder.stats.hits, "misses": embedder.stats.misses},
    }
    record.finish(out, rows, parquet=True)  # questions, per_question.parquet, metrics.json, report, index
    failures = [r for r in regression if r.status == "fail"]
    if failures:
        raise RegressionFailed(run_dir, failures)
    return run_dir


def summary_lines(run_dir: Path) -> list[str]:
    m = json.loads((Path(run_dir) / "metrics.json").read_text())
    if (m.get("dataset") or {}).get("kind") == "locomo":  # its own table: recall per path and category
        return locomo_summary_lines(run_dir)
    if (m.get("dataset") or {}).get("kind") == "memory-safety":  # counts per read path and copy
        return memory_safety_summary_lines(run_dir)
    lines = [f"run {m['run_id']}  config {m['config_hash'][:12]}  dataset {m['dataset']['name']} "
             f"({m['dataset']['n_questions']} questions, {m['dataset']['n_chunks']} chunks)",
             f"embedder {m['models']['embedder']['id']}  llm {(m['models']['llm'] or {}).get('id')}  "
             f"judge {m['models'].get('judge')}"]
    llm_m = m["models"].get("llm") or {}
    if "structured" in llm_m:  # issue 25: how structured calls were constrained, and what failed to parse
        sc = llm_m.get("structured_calls") or {}
        lines.append(f"  structured: {llm_m['structured']}  ({sc.get('calls', 0)} structured calls, "
                     f"{sc.get('parse_failures', 0)} parse failures)")
    lines += warning_lines(m)
    lines += repeats_mod.summary_lines(m.get("repeats"))
    for group, vals in m["metrics"].items():
        lines.append(group_line(m, group, vals))
    failed = m["dataset"].get("ingest_failed") or []
    for f in failed[:5]:  # named, so a run on a set with bad documents says which and why
        lines.append(f"  INGEST FAILED {f['file']}: {f['reason'][:200]}")
    if len(failed) > 5:
        lines.append(f"  ... and {len(failed) - 5} more ingest failures (metrics.json dataset.ingest_failed)")
    for r in m.get("regression", []):
        if r["status"] == "fail":
            lines.append(f"  REGRESSION {r['id']}: {r['reason']}")
    lines += not_applicable_lines(m)
    t = m["timings"]
    c = m["cache"]
    lines.append(f"  time total {t['total_s']:.1f}s (ingest {t['ingest_s']:.1f}s, generate {t['generate_s']:.1f}s, "
                 f"score {t.get('score_s', 0):.1f}s"
                 + (f" of which claim checker {t['claims_s']:.1f}s" if "claims_s" in t else "")
                 + (f"{',' if 'claims_s' in t else ' of which'} judge calibration {t['judge_calibration_s']:.1f}s and "
                    f"judged metrics {t.get('judge_metrics_s', 0):.1f}s" if "judge_calibration_s" in t else "")
                 + (f", incidents {t['incidents_s']:.1f}s" if "incidents_s" in t else "") + "); "
                 f"embedding cache {c['embeddings']['hits']} hits / {c['embeddings']['misses']} misses; "
                 f"answer cache {c['answers']['hits']} hits / {c['answers']['misses']} misses")
    lines.append(f"  report: {Path(run_dir) / 'report.html'}")
    return lines
