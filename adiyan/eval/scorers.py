"""Scorers: the scoring side of an evaluation, composed once (inspect_ai's ``Task(dataset, solver,
scorer)`` and ``@scorer(metrics=[...])`` are the model).

A :class:`Scorer` is a value: the metrics.json group it writes (its name), the metric-registry
entries it produces (its declaration, ``adiyan.metrics.SCORED[group]``: the registry sits at layer
0 so a report rendered on its own knows every direction) and the function from a job's
per-question rows to that group. An evaluation is a composition, :func:`score`; ``invoke eval``
(:mod:`.runner`), a sweep point (:func:`adiyan.experiments.scoring.score_rows`), the agent's
answers (:mod:`.agent_eval`, under ``agent_<group>``) and the conversation replay
(:mod:`.conversations`) compose these values and never re-implement one. Adding a metric is one
registry line in its scorer's block and its computation here; ``tests/test_scorers.py`` fails on
a name a scorer writes that its block does not declare.

The composed scorers:

- :data:`RETRIEVAL`: hit rate and MRR at the configured k, nDCG / Recall / MRR / MAP at
  :data:`IR_DEPTH` over source keys (ranx; the list is the block's ``@{depth}`` entries), query
  transformation fallbacks; :data:`BY_KIND`, :data:`PRIVACY`, :data:`OCR` beside it;
- :data:`ANSWER`: keyword recall and abstention; :data:`STRINGS` (group ``ragas``): RAGAS's
  non-LLM metrics and sacreBLEU, per question too (``row["ragas"]``);
- :data:`CONVERSATION`: a conversation replay's turns, with and without the history rewrite;
- :func:`judged`: the LLM-judged RAGAS metrics beside the judge's calibration (it needs the
  settings and the judge, so it is a function the compositions call, group ``ragas_llm``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from .. import metrics as M
from ..cache import call_cache
from ..models.checker import ClaimChecker
from .claims import answer_claim_scores
from .ir_metrics import evaluate_run, per_query
from .judge import calibrate_reusing, evalset_calibration_pairs, judge_from_settings
from .ragas_metrics import score_llm, score_non_llm, summarize

IR_DEPTH = 10  # the depth of the ranking metrics (``{depth}`` entries of the retrieval block)
FOLLOW_UP_KINDS = ("pronoun", "ellipsis", "fragment")


@dataclass
class Rows:
    """What scorers read: per-question rows (a job's questions.jsonl rows) and, for the ranking
    metrics, the graded qrels and source rankings of the answerable ones."""

    rows: list[dict]
    run: dict[str, dict[str, float]] = field(default_factory=dict)  # source rankings, rank_depth deep
    qrels: dict[str, dict[str, int]] = field(default_factory=dict)


@dataclass
class Scored:
    """A scorer's outcome: its group's values and, per question, values aligned with the rows."""

    values: dict
    per_row: dict[str, list] = field(default_factory=dict)


@dataclass(frozen=True)
class Scorer:
    """One scorer: ``group`` (the metrics.json group, the registry block it declares) and
    ``fn(data, k) -> Scored | None`` (None: nothing to score, the group is left out).
    ``per_question``: entries of the block with a per-question value for paired tests."""

    group: str
    fn: Callable[[Rows, int], Scored | None]
    per_question: tuple[str, ...] = ()

    @property
    def metrics(self) -> tuple[M.Metric, ...]:
        """The registry entries this scorer produces."""
        return M.SCORED[self.group]

    def __call__(self, data: Rows, k: int) -> Scored | None:
        return self.fn(data, k)


def score(scorers: Sequence[Scorer], data: Rows, k: int, *, prefix: str = "") -> dict[str, dict]:
    """Compose ``scorers`` over ``data``: ``{prefix + group: values}`` in the scorers' order; each
    per-question value lands in its row as ``row[group][name]`` (``row["ragas"]["rouge_score"]``)."""
    groups: dict[str, dict] = {}
    for scorer in scorers:
        out = scorer(data, k)
        if out is None:
            continue
        groups[prefix + scorer.group] = out.values
        for name, values in out.per_row.items():
            for r, v in zip(data.rows, values):
                r.setdefault(scorer.group, {})[name] = v
    return groups


def _answerable(rows) -> list[dict]:
    return [r for r in rows if r["hit"] is not None]


# ---------------------------------------------------------------- retrieval


def ranking_metrics(depth: int = IR_DEPTH) -> list[str]:
    """The ranx metrics of the retrieval block (its ``@{depth}`` entries), at ``depth``."""
    return [m.name.replace("{depth}", str(depth)) for m in RETRIEVAL.metrics if m.name.endswith("@{depth}")]


def _retrieval(data: Rows, k: int) -> Scored:
    answerable = _answerable(data.rows)
    values = {f"hit_rate@{k}": M.mean_or_none([r["hit"] for r in answerable]),
              f"mrr@{k}": M.mean_or_none([r["reciprocal_rank"] for r in answerable])}
    per_row: dict[str, list] = {}
    if data.qrels:
        values.update({m: round(v, 6) for m, v in evaluate_run(data.qrels, data.run, ranking_metrics()).items()})
        # Each answerable row keeps its own nDCG / Recall at IR_DEPTH, from the same qrels and run (a question
        # scoped to one document is judged on chunks, not sources): the report's summary and its interval are
        # the mean of exactly these values, never a recomputation from the row's sources.
        for name, per in per_question_ranking(data).items():
            per_row[name] = [per.get(r["id"]) for r in data.rows]
    failures = sum(1 for r in data.rows if r.get("transform_failed"))
    if failures or any(r.get("queries") for r in data.rows):
        values["transform_failures"] = failures
    return Scored(values, per_row)


def _by_kind(data: Rows, k: int) -> Scored:
    answerable = _answerable(data.rows)
    return Scored({f"hit_rate.{kind}": M.mean_or_none([r["hit"] for r in answerable if r["kind"] == kind])
                   for kind in sorted({r["kind"] for r in answerable})})


def _privacy(data: Rows, k: int) -> Scored:
    rows = data.rows
    probes = [r for r in rows if r["probe_private"]]
    values = {"private_chunks_leaked": sum(len(r["leaked_private"]) for r in rows),
              "probe_questions": len(probes),
              "probes_leaked": sum(bool(r["probe_leaked"]) for r in probes)}
    if probes:
        values["probes_owner_retrieved"] = M.mean_or_none([r["probe_owner_retrieved"] for r in probes])
    return Scored(values)


def _ocr(data: Rows, k: int) -> Scored | None:
    ocr = [r for r in _answerable(data.rows) if r["needs_ocr"]]
    if not ocr:
        return None
    return Scored({"hit_rate": M.mean_or_none([r["hit"] for r in ocr]), "questions": len(ocr)})


RETRIEVAL = Scorer("retrieval", _retrieval, per_question=("ndcg@{depth}", "recall@{depth}"))
BY_KIND = Scorer("by_kind", _by_kind)
PRIVACY = Scorer("privacy", _privacy)
OCR = Scorer("ocr", _ocr)
RETRIEVAL_SCORERS = (RETRIEVAL, BY_KIND, PRIVACY, OCR)


def per_question_ranking(data: Rows, depth: int = IR_DEPTH) -> dict[str, dict[str, float]]:
    """{metric: {question id: value}} of the retrieval scorer's per-question ranking metrics
    (nDCG@10 and Recall@10: the input of paired significance tests)."""
    if not data.qrels:
        return {}
    names = [n.replace("{depth}", str(depth)) for n in RETRIEVAL.per_question]
    return {n: per_query(data.qrels, data.run, n) for n in names}


def hit_rates_at(rows, n: int) -> dict[str, float | None]:
    """Hit rate and MRR over the first ``n`` delivered chunks of the answerable rows (a regression
    case at another depth than the run's k)."""
    hits, rrs = [], []
    for r in _answerable(rows):
        sources = [c["source"] for c in r["retrieved"]][:n]
        hits.append(M.hit(sources, r["gold_sources"]))
        rrs.append(M.reciprocal_rank(sources, r["gold_sources"]))
    return {f"hit_rate@{n}": M.mean_or_none(hits), f"mrr@{n}": M.mean_or_none(rrs)}


# ---------------------------------------------------------------- answers


def _answer(data: Rows, k: int) -> Scored | None:
    rows = data.rows  # a row not answered may lack the answer fields (None)
    if not any(r.get("answer") is not None for r in rows):
        return None
    answerable = _answerable(rows)
    unanswerable = [r for r in rows if r["hit"] is None]
    return Scored({"keyword_recall": M.mean_or_none([r.get("keyword_hit") for r in answerable]),
                   "abstain_rate_unanswerable": M.mean_or_none([r.get("abstained") for r in unanswerable]),
                   "abstain_rate_answerable": M.mean_or_none([r.get("abstained") for r in answerable])})


def _strings(data: Rows, k: int) -> Scored:
    ragas_rows = [{"id": r["id"], "question": r["question"], "answer": r.get("answer"), "retrieved": r["retrieved"],
                   "gold_answer": r["gold_answer"] if r["hit"] is not None else None,
                   "gold_sources": r["gold_sources"]} for r in data.rows]
    per_row = score_non_llm(ragas_rows, id_field="source")
    return Scored({name: s["mean"] for name, s in summarize(per_row).items()}, per_row)


CLAIM_METRICS = ("claim_faithfulness", "claim_hallucination", "claim_precision", "claim_recall", "claim_f1",
                 "claim_context_utilisation", "claim_noise_sensitivity")


def _claims(data: Rows, k: int) -> Scored | None:
    """The trained claim checker over every answer that says something (abstentions have no claims):
    per question the metrics of :func:`adiyan.eval.claims.answer_claim_scores`, and each claim's
    verdict and supporting span in ``row["claim_verdicts"]`` (the report shows them)."""
    rows = [r for r in data.rows if r.get("answer") is not None]
    if not rows:
        return None
    checker = ClaimChecker.load()
    per_row: dict[str, list] = {name: [] for name in CLAIM_METRICS}
    n_claims = 0
    for r in data.rows:
        out = {}
        if r.get("answer") is not None and not r.get("abstained"):
            contexts = [c.get("text") or "" for c in r.get("retrieved") or []]
            gold = r.get("gold_answer") if r.get("hit") is not None else None
            out = answer_claim_scores(checker, r["answer"], contexts, gold or None)
            r["claim_verdicts"] = out["claims"]
            n_claims += len(out["claims"])
        for name in CLAIM_METRICS:
            per_row[name].append(out.get(name))
    values = {name: M.mean_or_none([v for v in vals if v is not None]) for name, vals in per_row.items()}
    values["claims_checked"] = n_claims
    return Scored(values, per_row)


ANSWER = Scorer("answer", _answer)
STRINGS = Scorer("ragas", _strings)
CLAIMS = Scorer("claims", _claims, per_question=CLAIM_METRICS)
ANSWER_SCORERS = (ANSWER, STRINGS, CLAIMS)


def annotate_answer(row: dict, text: str | None, used: list | None = None) -> dict:
    """A row's answer fields from an answer text (None: not answered) and the passages it used:
    keyword hit (answerable rows) and abstention, what :data:`ANSWER` aggregates."""
    answered = text is not None
    row.update({"answer": text, "answer_used": used,
                "keyword_hit": M.keyword_hit(text, row["answer_keywords"]) if answered and row["hit"] is not None
                else None,
                "abstained": M.abstained(text) if answered else None})
    return row


# ---------------------------------------------------------------- conversations


def _conversation(data: Rows, k: int) -> Scored:
    rows = data.rows
    ret = _answerable(rows)
    fol = [r for r in ret if r["kind"] in FOLLOW_UP_KINDS]
    mean = M.mean_or_none
    return Scored({
        f"hit_rate_raw@{k}": mean([r["hit_raw"] for r in ret]), f"hit_rate_rewrite@{k}": mean([r["hit"] for r in ret]),
        f"mrr_raw@{k}": mean([r["rr_raw"] for r in ret]), f"mrr_rewrite@{k}": mean([r["reciprocal_rank"] for r in ret]),
        f"followup_hit_rate_raw@{k}": mean([r["hit_raw"] for r in fol]),
        f"followup_hit_rate_rewrite@{k}": mean([r["hit"] for r in fol]),
        "memory_precision": mean([r["memory_precision"] for r in rows]),
        "memory_recall": mean([r["memory_recall"] for r in rows]),
        "stale_fact_rate": mean([r["stale_in_context"] for r in rows]),
        "keyword_recall": M.mean_or_none([r.get("keyword_hit") for r in rows]),
        "history_kept_share": M.mean_or_none([s["kept"] for r in rows for s in r["history"]]),
        "transform_failures": sum(bool(r.get("transform_failed")) for r in rows),
        "turns": len(rows), "conversations": len({r["conversation"] for r in rows})})


CONVERSATION = Scorer("conversation", _conversation)
CONVERSATION_SCORERS = (CONVERSATION, BY_KIND)

SCORERS = (*RETRIEVAL_SCORERS, *ANSWER_SCORERS, CONVERSATION)


# ---------------------------------------------------------------- LLM-judged


def judged(settings, es, rows, embedder, progress, doc_texts) -> dict | None:
    """LLM-judged metrics on a sample, run only when the judge's calibration on labelled pairs
    (``eval.judge_calibration_pairs``, four labels over every question kind) clears the reliability
    line: a judge that does not clear it is not asked again (its metrics would be struck; a cached
    failed calibration costs a SQLite look-up), the run says so in one named warning and the claim
    checker's metrics stand in the headline. None without a judge;
    :func:`adiyan.eval.reliability.judged_group` makes the ``ragas_llm`` group of it."""
    judge = judge_from_settings(settings)
    if judge is None:
        return None
    answerable = [r for r in rows if r["hit"] is not None and r["retrieved"]]
    t0 = time.perf_counter()
    # contexts from the gold documents, so a "correct" pair is really supported
    pairs = evalset_calibration_pairs(es, seed=settings.seed, n_pairs=settings.eval.judge_calibration_pairs,
                                      doc_texts=doc_texts)
    store = call_cache(settings, "calibration") if settings.eval.judge_calibration_reuse else None
    cal = calibrate_reusing(judge, pairs, store, reliable_threshold=settings.eval.judge_reliable_agreement,
                            progress=progress, stop_when_unreachable=settings.eval.judge_calibration_early_stop)
    calibration_s = time.perf_counter() - t0
    out = {"calibration": cal.as_dict(), "judge": judge.describe(),  # issue 25: its "structured" mechanism
           "judge_stats": judge.stats.as_dict() if hasattr(judge.stats, "as_dict") else vars(judge.stats)}
    if not cal.reliable:
        out.update(skipped=True, summary={"metrics": {}, "sample": {"n_scored": 0}}, per_row=[],
                   failures=[f._asdict() for f in judge.failures],
                   timings={"judge_calibration_s": calibration_s, "judge_metrics_s": 0.0})
        return out
    ragas_rows = [{"id": r["id"], "question": r["question"], "answer": r["answer"], "retrieved": r["retrieved"],
                   "gold_answer": r["gold_answer"], "gold_sources": r["gold_sources"]} for r in answerable]
    t0 = time.perf_counter()
    per_row, summary = score_llm(ragas_rows, judge, embedder, settings.eval.judge_metrics or None,
                                 sample=settings.eval.judge_sample, seed=settings.seed, calibration=cal,
                                 progress=progress)
    out.update(summary=summary, per_row=per_row, failures=[f._asdict() for f in judge.failures],
               judge_stats=judge.stats.as_dict() if hasattr(judge.stats, "as_dict") else vars(judge.stats),
               timings={"judge_calibration_s": calibration_s, "judge_metrics_s": time.perf_counter() - t0})
    return out


# ---------------------------------------------------------------- sweep columns


def point_column(group: str, name: str, k: int) -> str:
    """A run metric as a sweep column: ``group.name``, with the configured k written ``@k`` (the
    same column at every point of a top-k sweep): ``retrieval.hit_rate@4`` at k 4 is
    ``retrieval.hit_rate@k``; ``retrieval.ndcg@10`` stays (a fixed depth)."""
    try:
        entry = M.lookup(group, name)
    except M.UnregisteredMetric:
        return f"{group}.{name}"
    if "{k}" in entry.name and entry.name.replace("{k}", str(k)) == name:
        return f"{group}.{entry.name.replace('{k}', 'k')}"
    return f"{group}.{name}"


def point_columns(groups: dict[str, dict], k: int, only: Sequence[str] | None = None) -> dict[str, float | None]:
    """The run groups (``only`` these) as sweep columns (:func:`point_column`)."""
    return {point_column(g, name, k): v for g, vals in groups.items() if only is None or g in only
            for name, v in (vals or {}).items()}
