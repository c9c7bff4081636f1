"""Every sweep point scored like a run: RAGAS (non-LLM and LLM-judged) and the regression cases.

A point's retrieval rows come from the evaluation harness (:func:`adiyan.eval.harness.question_rows`),
so the scorers ``invoke eval`` runs apply to them unchanged; this module composes them and never
re-implements one:

- answers: ``invoke eval``'s answering (:func:`adiyan.eval.runner._answer`: the configured LLM,
  the prompt-keyed answer cache in ``paths.cache_dir``, so a re-run pays nothing), honouring
  ``eval.generate`` (off: no answers, so the string metrics are not produced). ``answer_questions``
  answers a seeded sample of that many questions (the same at every point; None = all) to keep
  a point's cost down; ``answered_questions`` says how many;
- RAGAS non-LLM (:func:`adiyan.eval.runner._ragas_non_llm`): ID-based context precision / recall
  over the point's top-k sources, string similarity, ROUGE-L, exact match over its answers;
- RAGAS LLM-judged (:func:`adiyan.eval.runner._ragas_llm`): the configured judge calibrated on
  labelled pairs first (cached), the sample ``eval.judge_sample`` when reliable, otherwise
  ``eval.judge_sample_unreliable`` and ``ragas_llm.judge_reliable`` 0, which the sweep pages
  read to strike the values; nothing judged when ``eval.judge`` is None;
- regression cases (:func:`adiyan.eval.regression.check`, ``evalsets/regression.yaml`` or
  ``regression_cases``): pass / fail / not checked with the reason. A case on hit rate or MRR at a
  depth N other than the point's k is checked on the first N chunks the point delivers (all of
  them when k < N): a top-4 case at k = 1 sees the one chunk the point hands generation.

Column names are ``group.name`` of the run metric groups (``ragas.rouge_score``,
``ragas_llm.faithfulness``, ``regression.no-private-leak``), so the registry entry, direction
and "unreliable" handling are exactly those of ``invoke eval``'s metrics.json.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..cache import call_cache
from .. import metrics as M
from ..eval.harness import retrieval_metrics
from ..eval.ragas_metrics import sample_indices, score_non_llm, summarize
from ..eval.regression import check, load_cases
from ..eval.reliability import judged_group
from ..eval.runner import _answer, _answer_group, _ragas_llm, _ragas_non_llm
from ..factory import open_llm

SCORED_GROUPS = ("ragas", "ragas_llm", "regression", "answer", "retrieval", "privacy", "ocr")
_DEPTH_CASE = re.compile(r"^retrieval\.(hit_rate|mrr)@(\d+)$")
NOT_REPLAYED = "incidents are not replayed at sweep points (invoke eval replays them)"


def _case_depth_metrics(rows, cases, k: int) -> dict:
    """Hit rate / MRR at each depth a case names, over the first N delivered chunks."""
    out = {}
    for case in cases:
        m = _DEPTH_CASE.match(case.get("metric", ""))
        if not m or int(m.group(2)) == k:
            continue
        kind, n = m.group(1), int(m.group(2))
        vals = []
        for r in rows:
            if r["hit"] is None:
                continue
            sources = [c["source"] for c in r["retrieved"]][:n]
            vals.append(M.hit(sources, r["gold_sources"]) if kind == "hit_rate"
                        else M.reciprocal_rank(sources, r["gold_sources"]))
        out[f"{kind}@{n}"] = M.mean_or_none(vals)
    return out


def score_rows(settings, index, qr, *, answers: dict | None = None, llm=None, answer_questions: int | None = None,
               regression_cases: str | Path | None = None, progress: bool = False) -> dict:
    """Score a point's question rows like ``invoke eval``; returns ``metrics`` (``group.name``
    columns), ``per_question`` ({qid: {ragas metric: value}}) and ``info`` (regression results
    with reasons, answered n, the judge's calibration).

    ``answers`` ({qid: text}) are answers the experiment already produced (the context
    experiment); otherwise the rows are answered here when ``eval.generate`` is on.
    """
    rows = [dict(r) for r in qr.rows]  # the harness's rows stay untouched
    es, kb = index.evalset, index.kb
    chosen = {rows[i]["id"] for i in sample_indices(len(rows), answer_questions, settings.seed)}
    for r in rows:
        r.update({"answer": None, "answer_used": None, "keyword_hit": None, "abstained": None})
    if answers is not None:
        for r in rows:
            if r["id"] in chosen and answers.get(r["id"]) is not None:
                text = answers[r["id"]]
                r.update({"answer": text, "abstained": M.abstained(text),
                          "keyword_hit": M.keyword_hit(text, r["answer_keywords"]) if r["hit"] is not None else None})
    elif settings.eval.generate:
        llm = llm or open_llm(settings)
        cache = call_cache(settings, "answer")
        _answer([r for r in rows if r["id"] in chosen], qr.results, settings, llm, cache, progress)
    answered = [r for r in rows if r["answer"] is not None]
    groups = retrieval_metrics(qr, settings.retrieval.kb_top_k)
    cases = load_cases(regression_cases) if regression_cases else load_cases()
    groups["retrieval"].update({k: v for k, v in _case_depth_metrics(rows, cases, settings.retrieval.kb_top_k).items()
                                if k not in groups["retrieval"]})
    ans = _answer_group(rows)
    if ans is not None:
        groups["answer"] = ans
    groups["ragas"], per_row = _ragas_non_llm(rows)
    judged = None
    if settings.eval.judge:
        failed = {f["file"] for f in index.ingest_failures}
        doc_texts = {d.source_key: kb.get_document_text(d.source_key, None, is_owner=True) for d in es.documents
                     if d.filename not in failed}
        judged = _ragas_llm(settings, es, [r for r in rows if r["id"] in chosen], kb.embedder, progress, doc_texts)
        groups["ragas_llm"] = judged_group(judged)
    results = check(groups, kb.embedder.id, es.name, cases)
    for res in results:
        if res.status == "not_checked" and res.metric.startswith("incidents."):
            res.reason = NOT_REPLAYED
    groups["regression"] = {r.id: (None if r.status == "not_checked" else float(r.status == "pass")) for r in results}
    metrics = {f"{g}.{name}": v for g in ("ragas", "ragas_llm", "answer", "regression")
               for name, v in (groups.get(g) or {}).items()}
    metrics["answered_questions"] = float(len(answered))
    per_question = {r["id"]: {name: vals[i] for name, vals in per_row.items()} for i, r in enumerate(rows)}
    info = {"regression": [r.as_dict() for r in results], "answered_questions": len(answered),
            "questions": len(rows), "answer_questions": answer_questions, "generate": settings.eval.generate,
            "judge": settings.eval.judge,
            "judge_calibration": judged["calibration"] if judged else None,
            "judge_sample": (judged["summary"].get("sample") or {}).get("n_scored") if judged else None,
            "answers": {r["id"]: r["answer"] for r in answered}}
    return {"metrics": metrics, "per_question": per_question, "info": info}


def score_memory(ranked: dict[str, list[str]], questions: list[dict], evalset_name: str, embedder_id: str, *,
                 regression_cases: str | Path | None = None) -> dict:
    """The memory evalset scored like a run where it can be: RAGAS ID-based context precision /
    recall of the top k memory ids against the expected one, and the regression cases. The
    memory evalset holds no reference answers and the experiment generates none, so the string
    and LLM-judged metrics do not apply (``info["not_applicable"]`` says so)."""
    rows = [{"id": q["qid"], "question": q["question"], "answer": None, "retrieved_ids": ranked[q["qid"]],
             "contexts": [], "reference_ids": [q["expected"]]} for q in questions]
    per_row = score_non_llm(rows)
    groups = {"ragas": {name: s["mean"] for name, s in summarize(per_row).items()
                        if name.startswith("id_based")}}
    cases = load_cases(regression_cases) if regression_cases else load_cases()
    results = check(groups, embedder_id, evalset_name, cases)
    for res in results:
        if res.status == "not_checked" and res.metric.startswith("incidents."):
            res.reason = NOT_REPLAYED
    groups["regression"] = {r.id: (None if r.status == "not_checked" else float(r.status == "pass")) for r in results}
    metrics = {f"{g}.{name}": v for g in ("ragas", "regression") for name, v in groups[g].items()}
    per_question = {r["id"]: {name: per_row[name][i] for name in per_row if name.startswith("id_based")}
                    for i, r in enumerate(rows)}
    info = {"regression": [r.as_dict() for r in results], "questions": len(rows), "answered_questions": 0,
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
