"""Every sweep point scored like a run: RAGAS (non-LLM and LLM-judged) and the regression cases.

A point's retrieval rows come from the evaluation harness (:func:`adiyan.eval.harness.question_rows`),
so the scorers ``invoke eval`` runs apply to them unchanged; this module composes them and never
re-implements one:

- answers: ``invoke eval``'s answering (:func:`adiyan.eval.harness.answer_rows`: the configured LLM,
  the prompt-keyed answer cache in ``paths.cache_dir``, so a re-run pays nothing), honouring
  ``eval.generate`` (off: no answers, so the string metrics are not produced). ``answer_questions``
  answers a seeded sample of that many questions (the same at every point; None = all) to keep
  a point's cost down; ``answered_questions`` says how many;
- the answer scorers of :mod:`adiyan.eval.scorers` (``answer``: keyword recall and abstention;
  ``ragas``: ID-based context precision / recall over the point's top-k sources, string
  similarity, ROUGE-L, exact match, BLEU over its answers);
- the claim checker's metrics (``claims``: faithfulness, hallucination, claim precision / recall /
  F1 against the gold answer), through the same answer scorers;
- RAGAS LLM-judged (:func:`adiyan.eval.scorers.judged`): the configured judge calibrated on
  labelled pairs first (cached), the sample ``eval.judge_sample`` when reliable; an unreliable
  judge computes nothing (``ragas_llm.judge_reliable`` 0 and its calibration only); nothing
  judged when ``eval.judge`` is None;
- regression cases (:func:`adiyan.eval.regression.check`, ``evalsets/regression.yaml`` or
  ``regression_cases``): pass / fail / not checked with the reason. A case on hit rate or MRR at a
  depth N other than the point's k is checked on the first N chunks the point delivers (all of
  them when k < N): a top-4 case at k = 1 sees the one chunk the point hands generation.

Column names are ``group.name`` of the run metric groups (``ragas.rouge_score``,
``ragas_llm.faithfulness``, ``regression.no-private-leak``), per question too
(``ragas.rouge_score``), so the registry entry, direction and "unreliable" handling are exactly
those of ``invoke eval``'s metrics.json.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..cache import call_cache
from ..eval.harness import answer_rows
from ..eval.ragas_metrics import sample_indices, score_non_llm, summarize
from ..eval.incidents import as_dict as incident_dict
from ..eval.incidents import IncidentResult, incident_metrics, stale_fact
from ..eval.regression import load_cases, run_cases
from ..eval.reliability import judged_group
from ..eval.scorers import ANSWER_SCORERS, RETRIEVAL_SCORERS, STRINGS, Rows, annotate_answer, hit_rates_at, judged, score
from ..factory import open_llm
from ..types import OWNER

POINT_GROUPS = ("ragas", "ragas_llm", "answer", "claims", "regression")  # the run groups a scored point records as columns
_DEPTH_CASE = re.compile(r"^retrieval\.(hit_rate|mrr)@(\d+)$")
NOT_REPLAYED = "incidents are not replayed at sweep points (invoke eval replays them)"
ONLY_STALE = ("only incident 3 (stale fact) is replayed at a memory sweep point, where memory.half_life_days and "
              "memory.recency decide it; invoke eval replays all five")


def replay_stale_fact(settings, embedder) -> tuple[dict, dict]:
    """Incident 3 replayed with the point's memory settings (the real memory, ~0.5 s): its ``incidents``
    group (holds, variants held, margin, break-even gap; no ``principles_holding_share``: one incident is
    not all of them) and its record."""
    try:
        res = stale_fact(settings, embedder)
    except Exception as exc:  # noqa: BLE001 - a replay that crashes is a principle not shown, as in replay_all
        res = IncidentResult(3, "stale fact", "", f"ERROR {type(exc).__name__}: {exc}", getattr(embedder, "id", "?"),
                             False, "stale")
    group = {k: v for k, v in incident_metrics([res]).items() if k != "principles_holding_share"}
    return group, incident_dict(res)


def score_groups(groups: dict, evalset_name: str, embedder_id: str, *, regression_cases=None,
                 incidents_why: str = NOT_REPLAYED, incident: dict | None = None) -> dict:
    """A point's own metric groups (``conversation``, ``locomo``, ``sweep`` ... plus ``incidents`` when one
    was replayed) checked against the regression cases like a run: every case passes, fails or does not
    apply with why. Returns :func:`score_rows`' shape (``incidents.*`` and ``regression.*`` columns)."""
    groups = dict(groups)
    cases = load_cases(regression_cases) if regression_cases else load_cases()
    results = run_cases(groups, embedder_id, evalset_name, incidents_why=incidents_why, cases=cases)
    metrics = {f"{g}.{name}": v for g in ("incidents", "regression") for name, v in (groups.get(g) or {}).items()}
    info = {"regression": [r.as_dict() for r in results], "answered_questions": 0, "judge": None}
    if incident is not None:
        info["incident"] = incident
    return {"metrics": metrics, "per_question": {}, "info": info}


def _case_depth_metrics(rows, cases, k: int) -> dict:
    """Hit rate / MRR at each depth a case names, over the first N delivered chunks."""
    out = {}
    for case in cases:
        m = _DEPTH_CASE.match(case.get("metric", ""))
        if m and int(m.group(2)) != k:
            name = f"{m.group(1)}@{m.group(2)}"
            out[name] = hit_rates_at(rows, int(m.group(2)))[name]
    return out


def score_rows(settings, index, qr, *, answers: dict | None = None, llm=None, answer_questions: int | None = None,
               regression_cases: str | Path | None = None, progress: bool = False) -> dict:
    """Score a point's question rows like ``invoke eval``; returns ``metrics`` (``group.name``
    columns), ``per_question`` ({qid: {``ragas.NAME``: value}}) and ``info`` (regression results
    with reasons, answered n, the judge's calibration).

    ``answers`` ({qid: text}) are answers the experiment already produced (the context
    experiment); otherwise the rows are answered here when ``eval.generate`` is on.
    """
    rows = [dict(r) for r in qr.rows]  # the harness's rows stay untouched
    data = Rows(rows, qr.run, qr.qrels)
    es, kb, k = index.evalset, index.kb, settings.retrieval.kb_top_k
    chosen = {rows[i]["id"] for i in sample_indices(len(rows), answer_questions, settings.seed)}
    for r in rows:
        annotate_answer(r, answers.get(r["id"]) if answers is not None and r["id"] in chosen else None)
    if answers is None and settings.eval.generate:
        llm = llm or open_llm(settings)
        answer_rows([r for r in rows if r["id"] in chosen], qr.results, settings, llm, call_cache(settings, "answer"),
                    progress)
    answered = [r for r in rows if r["answer"] is not None]
    groups = score(RETRIEVAL_SCORERS, data, k)
    cases = load_cases(regression_cases) if regression_cases else load_cases()
    groups["retrieval"].update({n: v for n, v in _case_depth_metrics(rows, cases, k).items()
                                if n not in groups["retrieval"]})
    groups.update(score(ANSWER_SCORERS, data, k))
    judged_out = None
    if settings.eval.judge:
        failed = {f["file"] for f in index.ingest_failures}
        doc_texts = {d.source_key: kb.get_document_text(d.source_key, OWNER) for d in es.documents
                     if d.filename not in failed}
        judged_out = judged(settings, es, [r for r in rows if r["id"] in chosen], kb.embedder, progress, doc_texts)
        groups["ragas_llm"] = judged_group(judged_out)
    results = run_cases(groups, kb.embedder.id, es.name, incidents_why=NOT_REPLAYED, cases=cases)
    metrics = {f"{g}.{name}": v for g in POINT_GROUPS for name, v in (groups.get(g) or {}).items()}
    metrics["answered_questions"] = float(len(answered))
    per_question = {r["id"]: {f"{group}.{name}": v for group in (STRINGS.group, "claims")
                              for name, v in (r.get(group) or {}).items()} for r in rows}
    info = {"regression": [r.as_dict() for r in results], "answered_questions": len(answered),
            "questions": len(rows), "answer_questions": answer_questions, "generate": settings.eval.generate,
            "judge": settings.eval.judge,
            "judge_calibration": judged_out["calibration"] if judged_out else None,
            "judge_sample": (judged_out["summary"].get("sample") or {}).get("n_scored") if judged_out else None,
            "answers": {r["id"]: r["answer"] for r in answered}}
    return {"metrics": metrics, "per_question": per_question, "info": info}


def score_memory(ranked: dict[str, list[str]], questions: list[dict], evalset_name: str, embedder_id: str, *,
                 regression_cases: str | Path | None = None, incidents: dict | None = None,
                 incident: dict | None = None) -> dict:
    """The memory evalset scored like a run where it can be: RAGAS ID-based context precision /
    recall of the top k memory ids against the expected one, and the regression cases. The
    memory evalset holds no reference answers and the experiment generates none, so the string
    and LLM-judged metrics do not apply (``info["not_applicable"]`` says so)."""
    rows = [{"id": q["qid"], "question": q["question"], "answer": None, "retrieved_ids": ranked[q["qid"]],
             "contexts": [], "reference_ids": [q["expected"]]} for q in questions]
    per_row = score_non_llm(rows)
    groups = {"ragas": {name: s["mean"] for name, s in summarize(per_row).items()
                        if name.startswith("id_based")}}
    if incidents:
        groups["incidents"] = dict(incidents)  # incident 3 at this point's half-life (replay_stale_fact)
    cases = load_cases(regression_cases) if regression_cases else load_cases()
    results = run_cases(groups, embedder_id, evalset_name, incidents_why=ONLY_STALE if incidents else NOT_REPLAYED,
                        cases=cases)
    metrics = {f"{g}.{name}": v for g in ("ragas", "incidents", "regression") for name, v in (groups.get(g) or {}).items()}
    per_question = {r["id"]: {f"ragas.{name}": per_row[name][i] for name in per_row if name.startswith("id_based")}
                    for i, r in enumerate(rows)}
    info = {"regression": [r.as_dict() for r in results], "questions": len(rows), "answered_questions": 0,
            **({"incident": incident} if incident else {}),
            "judge": None, "not_applicable": "string and LLM-judged RAGAS metrics: the memory evalset has no "
                                              "reference answers and the memory experiment generates none"}
    return {"metrics": metrics, "per_question": per_question, "info": info}


def merge(result, scored: dict):
    """Add a :func:`score_rows` outcome to an experiment's :class:`PointResult` (in place)."""
    result.metrics.update(scored["metrics"])
    for row in result.per_question:
        row.update({k: v for k, v in scored["per_question"].get(row["qid"], {}).items() if v is not None})
    result.info["scored"] = scored["info"]
    return result
