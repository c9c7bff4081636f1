"""The context-budget experiment (notebooks/context.ipynb; sweep context).

Every question is retrieved through the retrieval pipeline (the evaluation harness's rows, as
``invoke eval``), the context assembled under ``generation.context_budget_tokens`` and answered
by the configured LLM. Answers are cached by prompt hash, so only budgets that change the
prompt cost generation time.
"""

from __future__ import annotations

import time

import numpy as np

from ..cache import call_cache
from .. import metrics as M
from ..eval.harness import open_index, question_rows, refuse_conversation_settings
from ..eval.scorers import ANSWER, Rows, annotate_answer, point_columns
from ..eval.scorers import score as compose  # evaluate_context's flag "score" would shadow the name
from ..factory import open_llm, open_retriever
from ..generation import answer_question
from .common import PointResult, mean
from .scoring import merge, score_rows


def evaluate_context(settings, evalset=None, *, progress: bool = False, score: bool = False,
                     answer_questions: int | None = None, regression_cases=None) -> PointResult:
    """Answers under ``generation.context_budget_tokens``: keyword recall and abstention (the answer
    scorer's ``answer.*`` columns), tokens used.

    Retrieves ``retrieval.kb_top_k`` chunks per question with every ``retrieval.*`` setting
    (index from :func:`adiyan.eval.harness.open_index`), assembles the context under the
    budget and answers with the configured LLM. ``score`` adds RAGAS over these answers, the
    judge and the regression cases (:func:`adiyan.experiments.scoring.score_rows`).
    """
    refuse_conversation_settings(settings, "the context experiment")
    index = open_index(settings, evalset, progress=progress)
    llm = open_llm(settings)
    retriever = open_retriever(settings, index.kb, llm)
    qr = question_rows(index, retriever, progress=progress)
    cache = call_cache(settings, "answer")
    questions = {q.id: q for q in index.evalset.questions}
    rows, gen = [], []
    for r in qr.rows:
        q = questions[r["id"]]
        t0 = time.perf_counter()
        ans = answer_question(llm, q.question, qr.results[q.id].chunks, settings, cache=cache)
        gen.append(time.perf_counter() - t0)
        row = {"qid": q.id, "kind": q.kind, "context_tokens": ans.context_tokens, "truncated": float(ans.truncated),
               "passages_used": len(ans.used), "abstained": float(M.abstained(ans.text)), "generate_s": gen[-1],
               "answer": ans.text}
        if q.answerable:
            row["keyword_hit"] = float(M.keyword_hit(ans.text, q.answer_keywords))
            row["gold_in_context"] = float(any(u["source"] in q.gold_sources for u in ans.used))
        rows.append(row)
    ans_rows = [r for r in rows if "keyword_hit" in r]
    answered = [annotate_answer(dict(r), a["answer"]) for r, a in zip(qr.rows, rows)]
    top_k = settings.retrieval.kb_top_k
    metrics = point_columns(compose([ANSWER], Rows(answered), top_k), top_k)  # answer.keyword_recall, answer.abstain_rate_*
    metrics.update({"gold_in_context": mean(r["gold_in_context"] for r in ans_rows),
                    "context_tokens": mean(r["context_tokens"] for r in rows),
                    "truncated_share": mean(r["truncated"] for r in rows),
                    "generate_s": float(np.mean(gen)), "answer_cache_hits": float(cache.stats.hits),
                    "answer_cache_misses": float(cache.stats.misses)})
    info = {"llm": llm.id, "budget": settings.generation.context_budget_tokens, "k": settings.retrieval.kb_top_k,
            "evalset": index.evalset.name, "retrieval": retriever.describe()}
    res = PointResult(metrics, [{k: v for k, v in r.items() if k != "answer"} for r in rows],
                      {**info, "answers": {r["qid"]: r["answer"] for r in rows}})
    if score:
        merge(res, score_rows(settings, index, qr, answers=res.info["answers"], answer_questions=answer_questions,
                              regression_cases=regression_cases, progress=progress))
    return res
