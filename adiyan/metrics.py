"""Retrieval and answer metrics computed by hand (so tests can check them exactly), and the
registry that declares every metric the workbench writes (name, group, direction, range).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean
from typing import Sequence

import yaml


def reciprocal_rank(retrieved_sources: Sequence[str], gold: Sequence[str]) -> float:
    """1/rank of the first retrieved chunk whose source is a gold source; 0 if none."""
    gold = set(gold)
    for rank, src in enumerate(retrieved_sources, 1):
        if src in gold:
            return 1.0 / rank
    return 0.0


def hit(retrieved_sources: Sequence[str], gold: Sequence[str]) -> bool:
    return bool(set(retrieved_sources) & set(gold))


def keyword_hit(answer: str, keywords: Sequence[str]) -> bool:
    """Every answer keyword occurs in the answer (case-insensitive)."""
    a = answer.lower()
    return all(k.lower() in a for k in keywords)


_ABSTAIN = re.compile(r"\b(i don'?t know|do(es)? not (contain|mention|say|state|include|provide)|"
                      r"not (mentioned|stated|provided|specified|available|found)|no information|cannot answer)\b", re.I)


def abstained(answer: str) -> bool:
    return bool(_ABSTAIN.search(answer))


def mean_or_none(values: Sequence[float | bool | None]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return round(fmean(vals), 6) if vals else None


def auroc(labels: Sequence[int], scores: Sequence[float]) -> float | None:
    """Area under the ROC curve of ``scores`` for ``labels`` (1 = positive) by the rank-sum, tied
    scores sharing their mean rank; None when one class is absent."""
    pos = sum(1 for y in labels if y)
    neg = len(labels) - pos
    if not pos or not neg:
        return None
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    ranks = [0.0] * len(scores)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return (sum(r for r, y in zip(ranks, labels) if y) - pos * (pos + 1) / 2) / (pos * neg)


# ================================================================== the metric registry
#
# Every metric the workbench writes is declared once, here: its name (a pattern where a part
# varies: ``hit_rate@{k}``), group, direction, range and whether an LLM judged it. Reports, the
# run index, sweep pages, significance tests and "best" all read it; a metric that is not
# registered is an error (``UnregisteredMetric``), never a guess from its name.

HIGHER, LOWER, NEUTRAL = "higher", "lower", "neutral"  # neutral: a count or size, no "best"


class UnregisteredMetric(KeyError):
    """A metric name that the registry does not declare."""


@dataclass(frozen=True)
class Metric:
    name: str  # may hold {placeholders}: hit_rate@{k}, hit_rate.{kind}
    group: str  # the metrics.json group; "sweep" for per-point experiment metrics, "bench" for benchmarks
    direction: str  # higher | lower | neutral
    lo: float | None = None  # range, when bounded
    hi: float | None = None
    judged: bool = False  # an LLM judged it: only as reliable as the judge's calibration
    description: str = ""

    @property
    def higher_is_better(self) -> bool | None:
        return None if self.direction == NEUTRAL else self.direction == HIGHER

    def pattern(self) -> re.Pattern:
        parts = re.split(r"(\{[a-z_]+\})", self.name)
        return re.compile("^" + "".join("[^/]+?" if p.startswith("{") else re.escape(p) for p in parts) + "$")


def _m(group, name, direction, lo=None, hi=None, judged=False, description=""):
    return Metric(name, group, direction, lo, hi, judged, description)


_UNIT = dict(lo=0.0, hi=1.0)

# -- What each scorer of adiyan/eval/scorers.py produces, by scorer: the scorer's declaration. A
#    scorer writes the metrics.json group of its name and only names its block declares
#    (tests/test_scorers.py), so adding a metric is one line here beside its computation there.
#    ``{k}`` is the configured ``retrieval.kb_top_k`` (a sweep column writes it ``@k``, the same
#    column at every point), ``{depth}`` a fixed ranking depth.
SCORED: dict[str, tuple[Metric, ...]] = {
    "retrieval": (  # over source keys, at the configured k and (ranx) at depth 10
        _m("retrieval", "hit_rate@{k}", HIGHER, **_UNIT, description="share of answerable questions with a gold source in the top k"),
        _m("retrieval", "mrr@{k}", HIGHER, **_UNIT, description="mean reciprocal rank of the first gold source in the top k"),
        _m("retrieval", "ndcg@{depth}", HIGHER, **_UNIT, description="nDCG over the source ranking (ranx)"),
        _m("retrieval", "recall@{depth}", HIGHER, **_UNIT, description="share of gold sources in the source ranking (ranx)"),
        _m("retrieval", "mrr@{depth}", HIGHER, **_UNIT, description="mean reciprocal rank over the source ranking (ranx)"),
        _m("retrieval", "map@{depth}", HIGHER, **_UNIT, description="mean average precision over the source ranking (ranx)"),
        _m("retrieval", "transform_failures", LOWER, lo=0.0, description="questions whose query transformation fell back (empty HyDE passage)"),
    ),
    "by_kind": (
        _m("by_kind", "hit_rate.{kind}", HIGHER, **_UNIT, description="hit rate at k per question kind"),
    ),
    "privacy": (
        _m("privacy", "private_chunks_leaked", LOWER, lo=0.0, description="another owner's private chunks in any ranking (must be 0)"),
        _m("privacy", "probe_questions", NEUTRAL, lo=0.0),
        _m("privacy", "probes_leaked", LOWER, lo=0.0, description="private-leak probes whose private document reached the asker"),
        _m("privacy", "probes_owner_retrieved", HIGHER, **_UNIT, description="share of probes whose document its owner retrieves with the same question (the probe can fail)"),
    ),
    "ocr": (
        _m("ocr", "hit_rate", HIGHER, **_UNIT, description="hit rate of questions only an image holds the answer to"),
        _m("ocr", "questions", NEUTRAL, lo=0.0),
    ),
    "answer": (
        _m("answer", "keyword_recall", HIGHER, **_UNIT, description="answers holding every answer keyword"),
        _m("answer", "abstain_rate_unanswerable", HIGHER, **_UNIT, description="unanswerable questions the model declined"),
        _m("answer", "abstain_rate_answerable", LOWER, **_UNIT, description="answerable questions the model declined"),
    ),
    "ragas": (  # per question too (questions.jsonl "ragas", per_question.parquet ragas.NAME)
        _m("ragas", "id_based_context_precision", HIGHER, **_UNIT, description="RAGAS ID-based context precision over the top-k sources"),
        _m("ragas", "id_based_context_recall", HIGHER, **_UNIT, description="RAGAS ID-based context recall over the top-k sources"),
        _m("ragas", "non_llm_string_similarity", HIGHER, **_UNIT, description="RAGAS string similarity to the gold answer"),
        _m("ragas", "rouge_score", HIGHER, **_UNIT, description="RAGAS ROUGE-L F against the gold answer"),
        _m("ragas", "exact_match", HIGHER, **_UNIT, description="RAGAS exact match with the gold answer"),
        _m("ragas", "bleu_score", HIGHER, **_UNIT, description="sacreBLEU of the answer against the gold answer (one segment, /100)"),
        _m("ragas", "chrf_score", HIGHER, **_UNIT, description="sacreBLEU chrF (character 6-grams, beta 2) of the answer against the gold answer, /100"),
    ),
    "claims": (  # the trained claim checker (adiyan/eval/claims.py), per question too (questions.jsonl "claims")
        _m("claims", "claim_faithfulness", HIGHER, **_UNIT, description="share of the answer's claims the retrieved context supports (the trained claim checker; abstentions have none)"),
        _m("claims", "claim_hallucination", LOWER, **_UNIT, description="answers with at least one claim the retrieved context does not support"),
        _m("claims", "claim_precision", HIGHER, **_UNIT, description="share of the answer's claims the gold answer entails (RAGChecker's precision, the claim checker as entailment)"),
        _m("claims", "claim_recall", HIGHER, **_UNIT, description="share of the gold answer's claims the answer entails (RAGChecker's recall)"),
        _m("claims", "claim_f1", HIGHER, **_UNIT, description="harmonic mean of claim precision and claim recall"),
        _m("claims", "claim_context_utilisation", HIGHER, **_UNIT, description="of the gold claims the context supports, the share the answer states (RAGChecker)"),
        _m("claims", "claim_noise_sensitivity", LOWER, **_UNIT, description="share of the answer's claims the gold answer does not entail but the context supports (RAGChecker)"),
        _m("claims", "claims_checked", NEUTRAL, lo=0.0, description="answer claims the checker scored"),
    ),
    "conversation": (  # a conversation replay (adiyan/eval/conversations.py), per turn at the turns' times
        _m("conversation", "hit_rate_raw@{k}", HIGHER, **_UNIT, description="turns with a gold source in the top k, the message searched as written"),
        _m("conversation", "hit_rate_rewrite@{k}", HIGHER, **_UNIT, description="the same with the history rewrite (standalone question)"),
        _m("conversation", "mrr_raw@{k}", HIGHER, **_UNIT),
        _m("conversation", "mrr_rewrite@{k}", HIGHER, **_UNIT),
        _m("conversation", "followup_hit_rate_raw@{k}", HIGHER, **_UNIT, description="pronoun and ellipsis follow-ups only, as written"),
        _m("conversation", "followup_hit_rate_rewrite@{k}", HIGHER, **_UNIT, description="pronoun and ellipsis follow-ups only, rewritten"),
        _m("conversation", "memory_precision", HIGHER, **_UNIT, description="of the facts in a turn's context, the share it should recall"),
        _m("conversation", "memory_recall", HIGHER, **_UNIT, description="of the facts a turn should recall, the share in its context"),
        _m("conversation", "stale_fact_rate", LOWER, **_UNIT, description="turns whose context holds a fact a later one corrected"),
        _m("conversation", "keyword_recall", HIGHER, **_UNIT, description="answers holding every answer keyword"),
        _m("conversation", "history_kept_share", NEUTRAL, **_UNIT, description="history turns in the window relevant enough to keep"),
        _m("conversation", "transform_failures", LOWER, lo=0.0, description="turns whose LLM rewrite came back empty"),
        _m("conversation", "turns", NEUTRAL, lo=0.0),
        _m("conversation", "conversations", NEUTRAL, lo=0.0),
    ),
}
# The agent's answers go through the answer and string scorers (adiyan/eval/agent_eval.py): the
# same entries under ``agent_<group>``.
AGENT_SCORED = ("answer", "ragas", "claims")
AGENT_PREFIX = "agent_"


def _agent(m: Metric) -> Metric:
    return Metric(m.name, AGENT_PREFIX + m.group, m.direction, m.lo, m.hi, m.judged, m.description)


REGISTRY: tuple[Metric, ...] = (
    *(m for block in SCORED.values() for m in block),
    *(_agent(m) for group in AGENT_SCORED for m in SCORED[group]),
    _m("ragas_llm", "judge_agreement", HIGHER, **_UNIT, description="the judge's agreement with labelled pairs"),
    _m("ragas_llm", "judge_agreement_ci_low", HIGHER, **_UNIT, description="lower bound of its 95% confidence interval"),
    _m("ragas_llm", "judge_agreement_ci_high", NEUTRAL, **_UNIT, description="upper bound of its 95% Wilson interval"),
    _m("ragas_llm", "judge_calibration_pairs", NEUTRAL, lo=0.0, description="labelled pairs the agreement is over"),
    _m("ragas_llm", "judge_reliable", HIGHER, **_UNIT, description="1 when the lower bound of the agreement's 95% interval clears the line"),
    _m("ragas_llm", "faithfulness", HIGHER, **_UNIT, judged=True),
    _m("ragas_llm", "answer_relevancy", HIGHER, **_UNIT, judged=True),
    _m("ragas_llm", "llm_context_precision", HIGHER, **_UNIT, judged=True),
    _m("ragas_llm", "llm_context_recall", HIGHER, **_UNIT, judged=True),
    _m("ragas_llm", "noise_sensitivity", LOWER, **_UNIT, judged=True, description="share of claims not supported (RAGAS: lower is better)"),
    _m("ragas_llm", "{metric}.failed", LOWER, lo=0.0, description="judge calls that failed for this metric"),
    _m("ragas_llm", "{metric}.n", NEUTRAL, lo=0.0, description="questions the judged mean is over"),
    _m("incidents", "principles_holding_share", HIGHER, **_UNIT),
    _m("incidents", "{n}_{name}_holds", HIGHER, **_UNIT),
    _m("incidents", "{n}_{name}_floor_variants_held", HIGHER, **_UNIT,
       description="share of variants held in the seed's form (under the floor before, kept after)"),
    _m("incidents", "{n}_{name}_variants_held", HIGHER, **_UNIT, description="share of authored variants that hold"),
    # incident 1 (dilution.py): the fact's cosine margins and ranks; listed before the shorter patterns
    _m("incidents", "{n}_{name}_after_margin_min", HIGHER, lo=-2.0, hi=2.0,
       description="smallest cosine margin of the fact's chunk over the best unrelated chunk, structural chunks"),
    _m("incidents", "{n}_{name}_margin_gain_min", HIGHER, lo=-2.0, hi=2.0,
       description="smallest gain in that margin from heading-blind to structural chunks"),
    _m("incidents", "{n}_{name}_after_rank_max", LOWER, lo=1.0, description="worst rank of the fact's chunk after"),
    # incident 3 (stale.py): how far the stale statement is from winning, in similarity and in days
    _m("incidents", "{n}_{name}_margin_days_min", HIGHER,
       description="days the correction is newer than it needs to be to come first, worst variant (< 0: the stale wins)"),
    _m("incidents", "{n}_{name}_break_even_gap_max_days", LOWER, lo=0.0,
       description="days newer the correction must be to come first, worst variant"),
    _m("incidents", "{n}_{name}_detection_margin_min", HIGHER, lo=-2.0, hi=2.0,
       description="memory.recency_scope=superseded: the pair's cosine minus the supersession threshold, worst "
                   "variant (< 0: the correction is not found to supersede, so the stale statement is not decayed)"),
    _m("incidents", "chunk_dilution_before", NEUTRAL, lo=-1.0, hi=1.0, description="the fact's cosine with heading-blind chunks"),
    _m("incidents", "chunk_dilution_after", HIGHER, lo=-1.0, hi=1.0, description="the fact's cosine with structural chunks"),
    _m("regression", "{id}", HIGHER, **_UNIT, description="1 when the regression case passes, 0 when it fails"),
    _m("dataset", "ingest_failed", LOWER, lo=0.0, description="documents of the evalset that could not be ingested"),
    # -- the score floor on the scored set (adiyan/eval/floors.py floor_effect): the top k of every
    #    question without a floor, relevant (gold source) or not, and how many score under the floor
    _m("floor", "floor", NEUTRAL, lo=-1.0, hi=1.0, description="the configured or calibrated floor considered"),
    _m("floor", "floor_applied", NEUTRAL, **_UNIT, description="1 when the pipeline applies it (J >= floor_min_j or configured)"),
    _m("floor", "floor_j_calibration", HIGHER, lo=-1.0, hi=1.0, description="Youden J of the floor on its calibration set"),
    _m("floor", "floor_j_scored", HIGHER, lo=-1.0, hi=1.0, description="J of the floor on this run's set (best gold vs best other score per answerable question)"),
    _m("floor", "relevant_top_k", NEUTRAL, lo=0.0, description="top-k chunks from a gold source, without a floor"),
    _m("floor", "relevant_below_floor", LOWER, lo=0.0, description="of those, scoring under the floor (removed when applied)"),
    _m("floor", "relevant_below_floor_share", LOWER, **_UNIT),
    _m("floor", "irrelevant_top_k", NEUTRAL, lo=0.0, description="top-k chunks from any other source, without a floor"),
    _m("floor", "irrelevant_below_floor", HIGHER, lo=0.0, description="of those, scoring under the floor (removed when applied)"),
    _m("floor", "irrelevant_below_floor_share", HIGHER, **_UNIT),
    # -- an experiment's own per-point metrics and per-question scores (group "sweep"). A run metric
    #    a point records keeps the run's name, ``group.name`` (retrieval.hit_rate@k, ragas.rouge_score,
    #    incidents.principles_holding_share, adiyan/experiments/common.py): never a renamed copy here.
    _m("sweep", "mrr", HIGHER, **_UNIT, description="memory: MRR of the expected memory"),
    _m("sweep", "recall@{k}", HIGHER, **_UNIT, description="hnsw: recall against exact search; LoCoMo: per question"),
    _m("sweep", "context_tokens", LOWER, lo=0.0, description="tokens of the top-k context (the cost side of k)"),
    _m("sweep", "retrieve_ms", LOWER, lo=0.0),
    _m("sweep", "retrieve_p95_ms", LOWER, lo=0.0),
    _m("sweep", "n_chunks", NEUTRAL, lo=0.0),
    _m("sweep", "index_build_s", LOWER, lo=0.0),
    _m("sweep", "chunking_s", LOWER, lo=0.0),
    _m("sweep", "index_embedded_texts", NEUTRAL, lo=0.0),
    _m("sweep", "mean_chunk_chars", NEUTRAL, lo=0.0),
    _m("sweep", "cold_chunking_s", LOWER, lo=0.0),
    _m("sweep", "cold_embed_s", LOWER, lo=0.0),
    _m("sweep", "cold_index_s", LOWER, lo=0.0),
    _m("sweep", "cost_documents", NEUTRAL, lo=0.0),
    _m("sweep", "cost_chunks", NEUTRAL, lo=0.0),
    # -- per-point metrics of the other experiments (adiyan.experiments; sweep pages read these)
    _m("sweep", "hit@{k}", HIGHER, **_UNIT, description="memory: the expected memory is in the top k (hit@1: first)"),
    _m("sweep", "correction_hit@{k}", HIGHER, **_UNIT, description="memory: hit@k of questions whose fact was corrected"),
    _m("sweep", "stable_hit@{k}", HIGHER, **_UNIT, description="memory: hit@k of questions whose old fact never changed"),
    _m("sweep", "stale_rate", LOWER, **_UNIT, description="memory: corrections outranked by what they superseded"),
    _m("sweep", "search_ms", LOWER, lo=0.0, description="memory: search latency"),
    _m("sweep", "p50_ms", LOWER, lo=0.0, description="hnsw: median search latency"),
    _m("sweep", "p95_ms", LOWER, lo=0.0),
    _m("sweep", "mean_ms", LOWER, lo=0.0),
    _m("sweep", "exact_p50_ms", LOWER, lo=0.0, description="hnsw: the engine's brute force on the same filter, for scale"),
    _m("sweep", "private_returned", LOWER, lo=0.0, description="hnsw: private points returned under the access filter (must be 0)"),
    _m("sweep", "access_filter", NEUTRAL, **_UNIT, description="hnsw: 1 when the point searched under visibility == global"),
    _m("sweep", "build_s", LOWER, lo=0.0, description="hnsw: upsert and optimize time of the index"),
    _m("sweep", "indexed_share", NEUTRAL, **_UNIT, description="hnsw: share of vectors the HNSW graph holds"),
    _m("sweep", "engine_recall@{k}", HIGHER, **_UNIT, description="dims: the engine's top k against the exact float32 top k"),
    _m("sweep", "dim", NEUTRAL, lo=0.0),
    _m("sweep", "vectors", NEUTRAL, lo=0.0),
    _m("sweep", "bytes_per_vector", LOWER, lo=0.0, description="dims: what the search reads per vector"),
    _m("sweep", "float32_bytes_per_vector", NEUTRAL, lo=0.0, description="dims: reference arithmetic"),
    _m("sweep", "int8_bytes_per_vector", NEUTRAL, lo=0.0, description="dims: reference arithmetic"),
    _m("sweep", "projected_1M_chunks_gb", LOWER, lo=0.0),
    _m("sweep", "projected_1M_chunks_float32_gb", NEUTRAL, lo=0.0, description="dims: reference arithmetic"),
    _m("sweep", "disk_segments_kb", LOWER, lo=0.0),
    _m("sweep", "disk_dense_vectors_kb", LOWER, lo=0.0),
    _m("sweep", "disk_quantized_kb", LOWER, lo=0.0),
    _m("sweep", "disk_hnsw_kb", LOWER, lo=0.0),
    _m("sweep", "quantized_built", NEUTRAL, **_UNIT, description="dims: 1 when the shard holds int8 codes"),
    _m("sweep", "gold_in_context", HIGHER, **_UNIT, description="context: a gold source survived into the context"),
    _m("sweep", "truncated_share", NEUTRAL, **_UNIT, description="context: answers whose context the budget cut"),
    _m("sweep", "generate_s", LOWER, lo=0.0),
    _m("sweep", "answer_cache_hits", NEUTRAL, lo=0.0),
    _m("sweep", "answer_cache_misses", NEUTRAL, lo=0.0),
    _m("sweep", "variants_held", HIGHER, **_UNIT, description="per incident: share of its authored variants that hold"),
    # -- per-question scores the experiments record (paired tests against a sweep's baseline)
    _m("sweep", "hit", HIGHER, **_UNIT, description="per question: a gold source in the top k"),
    _m("sweep", "rr", HIGHER, **_UNIT, description="per question: reciprocal rank of the first gold source / expected memory"),
    _m("sweep", "reciprocal_rank", HIGHER, **_UNIT, description="per question of invoke eval's questions.jsonl"),
    _m("sweep", "keyword_hit", HIGHER, **_UNIT),
    _m("sweep", "stale", LOWER, **_UNIT),
    _m("sweep", "top1_weight", NEUTRAL, **_UNIT, description="memory: recency weight of the top hit"),
    _m("sweep", "latency_ms", LOWER, lo=0.0),
    _m("sweep", "truncated", NEUTRAL, **_UNIT),
    _m("sweep", "passages_used", NEUTRAL, lo=0.0),
    _m("sweep", "abstained", NEUTRAL, **_UNIT, description="right on unanswerable questions, wrong on answerable ones"),
    _m("sweep", "holds", HIGHER, **_UNIT),
    _m("sweep", "seconds", LOWER, lo=0.0),
    # -- a sweep point scored like a run (adiyan/experiments/scoring.py): the run groups' metrics as
    #    ragas.NAME / ragas_llm.NAME / regression.ID / answer.NAME columns (per question ragas.NAME), plus
    _m("sweep", "answered_questions", NEUTRAL, lo=0.0, description="questions answered at the point (RAGAS string metrics are over these)"),
    # -- invoke eval's timings (metrics.json "timings"), read by the eval sweep as timings.NAME
    _m("timings", "ingest_s", LOWER, lo=0.0),
    _m("timings", "retrieve_s", LOWER, lo=0.0),
    _m("timings", "generate_s", LOWER, lo=0.0),
    _m("timings", "score_s", LOWER, lo=0.0),
    _m("timings", "incidents_s", LOWER, lo=0.0),
    _m("timings", "claims_s", LOWER, lo=0.0, description="the claim checker over the answers"),
    _m("timings", "beir_s", LOWER, lo=0.0, description="the BEIR whole-document protocol run (eval.beir_protocol=beir)"),
    _m("timings", "repeats_answer_s", LOWER, lo=0.0, description="eval.repeats: answering the extra repeats"),
    _m("timings", "repeats_score_s", LOWER, lo=0.0, description="eval.repeats: scoring the extra repeats"),
    _m("timings", "judge_calibration_s", LOWER, lo=0.0, description="the judge on its labelled pairs"),
    _m("timings", "judge_metrics_s", LOWER, lo=0.0, description="the judged metrics on their sample"),
    _m("timings", "total_s", LOWER, lo=0.0),
    # -- agent mode (eval.mode=agent, adiyan/eval/agent_eval.py): the agent's answers through the
    #    single-shot scorers, and what only an agent has (counts from each question's first run,
    #    latency over eval.agent_repeats runs)
    _m("agent", "questions", NEUTRAL, lo=0.0),
    _m("agent", "repeats", NEUTRAL, lo=0.0, description="runs per question (the latency spread is over these)"),
    _m("agent", "max_steps", NEUTRAL, lo=0.0),
    _m("agent", "steps_mean", LOWER, lo=0.0, description="loop steps (decisions) per question"),
    _m("agent", "steps_max", NEUTRAL, lo=0.0),
    _m("agent", "cap_hits", LOWER, lo=0.0, description="questions stopped at agent.max_steps without finishing"),
    _m("agent", "cap_hit_rate", LOWER, **_UNIT),
    _m("agent", "compactions_mean", NEUTRAL, lo=0.0, description="tool outputs folded into the scratchpad per question"),
    _m("agent", "scratchpad_trims", NEUTRAL, lo=0.0, description="steps whose scratchpad exceeded its budget and was cut in the prompt"),
    _m("agent", "refusals", NEUTRAL, lo=0.0, description="questions the agent declined (no evidence under strict grounding, or not authorized)"),
    _m("agent", "authorization_refusals", LOWER, lo=0.0, description="questions refused by the tier's permissions"),
    _m("agent", "grounded_answer_rate", HIGHER, **_UNIT, description="answers passing the loop's grounding check (figures in the findings)"),
    _m("agent", "strict_grounding", NEUTRAL, **_UNIT, description="1 when generation.strict_grounding was on"),
    _m("agent", "decision_parse_rate", HIGHER, **_UNIT, description="decisions whose model reply parsed as an action"),
    _m("agent", "decision_schema_valid_rate", HIGHER, **_UNIT,
       description="decisions whose reply was valid under the action schema (issue 25)"),
    _m("agent", "model_action_rate", NEUTRAL, **_UNIT, description="decisions that ran the model's own action"),
    _m("agent", "model_differs_rate", NEUTRAL, **_UNIT,
       description="decisions whose parsed model action (run or not) differs from the default action"),
    _m("agent", "model_differs_tool_rate", NEUTRAL, **_UNIT,
       description="decisions whose parsed model action names another tool than the default action"),
    _m("agent", "private_observed", LOWER, lo=0.0, description="another owner's private chunks or documents in any tool observation (must be 0)"),
    _m("agent", "latency_p50_s", LOWER, lo=0.0, description="median over questions of each question's median latency"),
    _m("agent", "latency_p95_s", LOWER, lo=0.0),
    _m("agent", "latency_mean_s", LOWER, lo=0.0),
    _m("agent", "latency_std_s_mean", LOWER, lo=0.0, description="mean over questions of the latency's std across repeats"),
    _m("agent", "latency_range_s_max", LOWER, lo=0.0, description="largest max-min of one question's latency across repeats"),
    _m("agent", "latency_cv_mean", LOWER, lo=0.0, description="mean coefficient of variation of latency across repeats"),
    _m("agent", "repeat_agreement", HIGHER, **_UNIT, description="questions whose repeats gave the same answer and tool sequence"),
    _m("agent", "tool_calls.{tool}", NEUTRAL, lo=0.0, description="calls of this tool per question"),
    _m("timings", "agent_s", LOWER, lo=0.0, description="the agent over every question and repeat"),
    # -- the agent experiment's point (adiyan/experiments/agent.py; sweep agent): agent mode's
    #    metrics.json as group.name columns; per question single-shot keyword_hit beside the agent's
    _m("sweep", "agent_keyword_hit", HIGHER, **_UNIT, description="per question: the agent's answer holds every keyword"),
    _m("sweep", "agent_steps", NEUTRAL, lo=0.0, description="per question: the agent's steps (first run)"),
    _m("sweep", "agent_latency_s", LOWER, lo=0.0, description="per question: median latency over the repeats"),
    _m("timings", "replay_s", LOWER, lo=0.0, description="conversations: replaying every turn"),
    _m("sweep", "hit_raw", HIGHER, **_UNIT, description="per turn: a gold source in the top k, message as written"),
    _m("sweep", "rr_raw", HIGHER, **_UNIT),
    _m("sweep", "stale_in_context", LOWER, **_UNIT, description="per turn: a corrected fact's old version reached the context"),
    _m("sweep", "history_kept", NEUTRAL, lo=0.0),
    _m("sweep", "history_dropped", NEUTRAL, lo=0.0),
    _m("sweep", "turn", NEUTRAL, lo=0.0),
    # -- LoCoMo (adiyan/eval/locomo): evidence recall of each path, answers on a sample; its sweep
    _m("locomo", "{path}.recall@{depth}", HIGHER, **_UNIT, description="LoCoMo evidence recall: share of a question's evidence turns retrieved"),
    _m("locomo", "{path}.ndcg@{depth}", HIGHER, **_UNIT, description="nDCG over the evidence turns (binary gains)"),
    _m("locomo", "context.recall", HIGHER, **_UNIT, description="evidence recall of the three-part context at the configured memory.top_k"),
    _m("locomo", "questions", NEUTRAL, lo=0.0),
    _m("locomo", "turns", NEUTRAL, lo=0.0),
    _m("locomo", "conversations", NEUTRAL, lo=0.0),
    _m("locomo", "mem0_search_ms", LOWER, lo=0.0, description="mean mem0 similarity search (to the candidate depth) per question"),
    _m("locomo_answer", "f1", HIGHER, **_UNIT, description="LoCoMo answer score over the answered sample (F1; adversarial: abstention)"),
    _m("locomo_answer", "f1.{category}", HIGHER, **_UNIT, description="LoCoMo answer score per category"),
    _m("locomo_answer", "abstain_rate.{category}", NEUTRAL, **_UNIT, description="answers the workbench's abstention check flags"),
    _m("locomo_answer", "answered", NEUTRAL, lo=0.0, description="questions answered (the sample)"),
    _m("locomo_answer", "wiring", NEUTRAL, **_UNIT, description="1: the embedded model answered; the scores prove the wiring only"),
    _m("sweep", "context_recall", HIGHER, **_UNIT, description="LoCoMo, per question: evidence recall of the three-part context"),
    _m("sweep", "context_size", NEUTRAL, lo=0.0, description="LoCoMo: turns in the three-part context"),
)


def _index(registry):
    by_group: dict[str, list[Metric]] = {}
    for m in registry:
        by_group.setdefault(m.group, []).append(m)
    return by_group


_BY_GROUP = _index(REGISTRY)


def register(*metrics: Metric) -> None:
    """Add metrics declared by a module of their own (an experiment); a name declared twice
    with another direction is an error."""
    global REGISTRY, _BY_GROUP
    for m in metrics:
        for old in _BY_GROUP.get(m.group, []):
            if old.name == m.name:
                if (old.direction, old.judged) != (m.direction, m.judged):
                    raise ValueError(f"metric {m.group}/{m.name} registered twice with different directions")
                break
        else:
            REGISTRY = REGISTRY + (m,)
    _BY_GROUP = _index(REGISTRY)


def lookup(group: str, name: str) -> Metric:
    """The registered metric ``name`` of ``group``; exact names win over patterns."""
    candidates = _BY_GROUP.get(group, [])
    for m in candidates:
        if m.name == name:
            return m
    for m in candidates:
        if "{" in m.name and m.pattern().match(name):
            return m
    raise UnregisteredMetric(f"metric {group}/{name} is not registered in adiyan.metrics.REGISTRY")


def groups_declaring(name: str) -> list[str]:
    """The groups with an entry of exactly this name (``rouge_score``: ragas, agent_ragas)."""
    return [m.group for m in REGISTRY if m.name == name]


def direction(group: str, name: str) -> str:
    return lookup(group, name).direction


def is_judged(group: str, name: str) -> bool:
    return lookup(group, name).judged


def best_of(group: str, name: str, values: Sequence[float]) -> float | None:
    """The best of ``values`` by the metric's direction (None for neutral metrics)."""
    d = direction(group, name)
    vals = [v for v in values if v is not None]
    if not vals or d == NEUTRAL:
        return None
    return max(vals) if d == HIGHER else min(vals)


def check_metrics(groups: dict) -> list[str]:
    """Names (group/name) in a metrics.json ``metrics`` mapping that are not registered."""
    out = []
    for g, vals in groups.items():
        for n in vals:
            try:
                lookup(g, n)
            except UnregisteredMetric:
                out.append(f"{g}/{n}")
    return out


# ================================================================== agreement with human labels
#
# A side table beside the registry: per answer metric, its correlation with human judgements as
# measured by ``adiyan meta-eval`` on RAGChecker's human-labelled set (docs/meta-eval.md), or why
# it was not measured. ``adiyan meta-eval --write-registry`` writes the file; a test checks its
# offline figures against a fresh computation. A metric absent from the table is not measured.

HUMAN_CORRELATION_FILE = Path(__file__).with_name("human_correlation.yaml")
NOT_MEASURED = {"status": "not_measured", "why": "no measurement against human labels"}


@functools.cache
def _human_table(path: Path = HUMAN_CORRELATION_FILE) -> dict:
    if not path.exists():
        return {}
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict) or not isinstance(data.get("metrics", {}), dict):
        raise ValueError(f"{path}: expected a mapping with a 'metrics' mapping")
    return data


def human_correlation(group: str, name: str) -> dict:
    """The measured correlation of metric ``group/name`` with human labels (``status: measured``,
    Pearson / Spearman x 100 per aspect with 95% intervals), or why it was not measured."""
    entry = (_human_table().get("metrics") or {}).get(name)
    if entry is None or group not in entry.get("groups", ()):
        return dict(NOT_MEASURED)
    return entry
