"""RAGAS 0.4 metrics for the workbench: the non-LLM ones always, the LLM-judged ones through a
:class:`~adiyan.eval.judge.Judge` that caches every call and counts every failure.

Wiring (verified against the installed ragas 0.4.3 source):

- ID-based context precision / recall: ``ragas.metrics._context_precision.IDBasedContextPrecision``
  and ``ragas.metrics._context_recall.IDBasedContextRecall``, scored with
  ``single_turn_ascore(SingleTurnSample(retrieved_context_ids=..., reference_context_ids=...))``.
  They are not in ``ragas.metrics.collections`` (although the deprecation warning of
  ``ragas.metrics.IDBasedContextPrecision`` says so); the private modules are imported
  directly so no warning fires. Both work on *sets* of ids (duplicates collapse, rank is
  ignored): precision = |set(retrieved) ∩ set(reference)| / |set(retrieved)|, recall =
  |set(retrieved) ∩ set(reference)| / |set(reference)|. When the ids are source keys, a
  source retrieved as three chunks counts once. Precision with nothing retrieved and recall
  with no reference ids are NaN in ragas; here they are ``None`` (undefined). Precision of an
  unanswerable question (no reference ids) is 0.0 by ragas' definition.
- String metrics from ``ragas.metrics.collections``: ``NonLLMStringSimilarity`` (1 - normalised
  Levenshtein distance, via rapidfuzz), ``RougeScore`` (rougeL F-measure with stemming, via
  rouge_score) and ``ExactMatch`` (``reference == response``, byte for byte: no case or
  whitespace normalisation), each ``await metric.ascore(reference=..., response=...)``.
- BLEU (``bleu_score``): :func:`bleu_score`, sacreBLEU's ``corpus_bleu([response], [[reference]])
  / 100`` (13a tokenisation, exponential smoothing), i.e. what ragas 0.4's
  ``ragas.metrics.collections.BleuScore`` computes *without* its sentence split. ragas 0.4.3
  splits both texts on ". " and passes the reference sentences as separate reference streams;
  sacreBLEU zips hypotheses with streams, so only the response's *first* sentence is scored
  (against every reference sentence as alternatives) and the rest is ignored
  (tests/test_meta_eval.py shows it). The one-segment form scores the whole answer.
- chrF (``chrf_score``): :func:`chrf_score`, sacreBLEU's ``sentence_chrf(response, [reference])
  / 100`` (character 6-grams, beta 2: chrF2, no word n-grams).
- LLM-judged, from ``ragas.metrics.collections``: ``Faithfulness``, ``AnswerRelevancy`` (the
  0.4 name of response relevancy), ``ContextPrecisionWithReference``, ``ContextRecall`` and
  ``NoiseSensitivity``. Collections metrics accept only an ``InstructorBaseRagasLLM``
  (``ragas.llms.base``), whose whole contract is ``generate(prompt, response_model)`` /
  ``agenerate(prompt, response_model)`` returning a validated pydantic object; the smallest
  adapter is :class:`JudgeRagasLLM`, which sends the prompt and the response model to
  ``Judge.ask`` (so every call is cached and validated) and raises ``JudgeCallFailed`` when the
  judgement failed. ``AnswerRelevancy`` also needs a ``BaseRagasEmbedding``
  (``ragas.embeddings.base``: ``embed_text`` / ``aembed_text``, batch methods optional);
  :class:`AdiyanRagasEmbeddings` adapts any adiyan embedder.

Accounting. For each LLM-judged metric and row the status is one of ``ok``, ``judge_failed``
(a judge call failed: the row's value is ``None`` and the judge counted the failure),
``metric_error`` (ragas raised after valid judgements, e.g. verdict lists of the wrong
length), ``out_of_range`` (a value outside the metric's range, e.g. a verdict of 7 summed by
ragas), ``undefined`` (ragas returned NaN, e.g. no statements extracted), ``skipped`` (an
input the metric needs is missing) or ``not_sampled``. Only ``ok`` rows carry a number;
nothing is ever a silent NaN.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import math
import os
import random
from collections import Counter
from dataclasses import dataclass
from statistics import fmean
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence, Type

os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")  # before ragas is imported (on first use: _ragas)

import numpy as np  # noqa: E402
import sacrebleu  # noqa: E402
from pydantic import BaseModel  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

from .arrow import in_memory_dataset  # noqa: E402
from .judge import Calibration, Judge, JudgeCallFailed, JudgeStats, judged_metric_flags  # noqa: E402

if TYPE_CHECKING:  # annotations only: ragas itself is imported on first use (_ragas)
    from ragas.dataset_schema import EvaluationDataset
    from ragas.metrics.collections import DistanceMeasure

LLM_METRICS = ("faithfulness", "answer_relevancy", "llm_context_precision", "llm_context_recall",
               "noise_sensitivity")
ALIASES = {"response_relevancy": "answer_relevancy", "context_precision": "llm_context_precision",
           "context_recall": "llm_context_recall", "llm_context_precision_with_reference": "llm_context_precision"}
# row fields each LLM-judged metric needs
REQUIRES = {
    "faithfulness": ("question", "answer", "contexts"),
    "answer_relevancy": ("question", "answer"),
    "llm_context_precision": ("question", "reference", "contexts"),
    "llm_context_recall": ("question", "reference", "contexts"),
    "noise_sensitivity": ("question", "answer", "reference", "contexts"),
}
ROW_STATUSES = ("ok", "judge_failed", "metric_error", "out_of_range", "undefined", "skipped")
FAILED_ROW_STATUSES = ("judge_failed", "metric_error", "out_of_range")


# ---------------------------------------------------------------- ragas, imported on first use

@functools.cache
def _ragas() -> SimpleNamespace:
    """ragas' classes and the adapters over them (:class:`JudgeRagasLLM`,
    :class:`AdiyanRagasEmbeddings`), imported once, when something is first scored.

    Importing ragas takes ~2 s (pydantic models, langchain, instructor): ``import adiyan.cli``
    and every command that scores nothing do not pay for it.
    """
    from ragas.dataset_schema import EvaluationDataset, SingleTurnSample  # heavy: ragas (~2 s), on first use
    from ragas.embeddings.base import BaseRagasEmbedding  # heavy: ragas, on first use
    from ragas.llms.base import InstructorBaseRagasLLM  # heavy: ragas, on first use
    from ragas.metrics._context_precision import IDBasedContextPrecision  # heavy: ragas, on first use
    from ragas.metrics._context_recall import IDBasedContextRecall  # heavy: ragas, on first use
    from ragas.metrics.collections import (  # heavy: ragas, on first use
        AnswerRelevancy,
        ContextPrecisionWithReference,
        ContextRecall,
        DistanceMeasure,
        ExactMatch,
        Faithfulness,
        NoiseSensitivity,
        NonLLMStringSimilarity,
        RougeScore,
    )

    class JudgeRagasLLM(InstructorBaseRagasLLM):
        """The smallest LLM ragas 0.4 collections metrics accept: every prompt goes through
        ``Judge.ask(prompt, response_model)``; a failed judgement raises ``JudgeCallFailed``."""

        def __init__(self, judge: Judge):
            self.judge = judge
            self.model = judge.id  # informative only; ragas does not read it for custom LLMs

        def generate(self, prompt: str, response_model: Type[BaseModel]) -> BaseModel:
            result = self.judge.ask(prompt, response_model)
            if result.value is None:
                raise JudgeCallFailed(result)
            return result.value

        async def agenerate(self, prompt: str, response_model: Type[BaseModel]) -> BaseModel:
            # Synchronous on purpose: rows are scored one at a time, the judge enforces its own
            # deadline, and the judge's metric / sample scope (a contextvar) stays in this task.
            return self.generate(prompt, response_model)

        def __repr__(self) -> str:
            return f"JudgeRagasLLM(judge={self.judge.id!r})"

    class AdiyanRagasEmbeddings(BaseRagasEmbedding):
        """An adiyan embedder (``embed(texts, kind) -> float32 rows``) as a ragas 0.4 embedding."""

        def __init__(self, embedder, kind: str = "query"):
            super().__init__(cache=None)
            self.embedder = embedder
            self.kind = kind  # answer relevancy compares questions with questions: query side

        def embed_texts(self, texts: list[str], **kwargs) -> list[list[float]]:
            if not texts:
                return []
            return np.asarray(self.embedder.embed(list(texts), self.kind), dtype=np.float64).tolist()

        def embed_text(self, text: str, **kwargs) -> list[float]:
            return self.embed_texts([text])[0]

        async def aembed_text(self, text: str, **kwargs) -> list[float]:
            return self.embed_text(text)

        async def aembed_texts(self, texts: list[str], **kwargs) -> list[list[float]]:
            return self.embed_texts(texts)

    # module attributes from now on (adiyan.eval.ragas_metrics.JudgeRagasLLM), picklable by name
    for adapter in (JudgeRagasLLM, AdiyanRagasEmbeddings):
        adapter.__module__, adapter.__qualname__ = __name__, adapter.__name__
        globals()[adapter.__name__] = adapter
    return SimpleNamespace(
        EvaluationDataset=EvaluationDataset, SingleTurnSample=SingleTurnSample,
        IDBasedContextPrecision=IDBasedContextPrecision, IDBasedContextRecall=IDBasedContextRecall,
        AnswerRelevancy=AnswerRelevancy, ContextPrecisionWithReference=ContextPrecisionWithReference,
        ContextRecall=ContextRecall, DistanceMeasure=DistanceMeasure, ExactMatch=ExactMatch,
        Faithfulness=Faithfulness, NoiseSensitivity=NoiseSensitivity,
        NonLLMStringSimilarity=NonLLMStringSimilarity, RougeScore=RougeScore,
        JudgeRagasLLM=JudgeRagasLLM, AdiyanRagasEmbeddings=AdiyanRagasEmbeddings)


_LAZY = ("JudgeRagasLLM", "AdiyanRagasEmbeddings", "DistanceMeasure")


def __getattr__(name: str):
    """``JudgeRagasLLM``, ``AdiyanRagasEmbeddings`` and ``DistanceMeasure`` import ragas on first access."""
    if name in _LAZY:
        return getattr(_ragas(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---------------------------------------------------------------- rows

@dataclass
class EvalRow:
    id: str
    question: str
    answer: str | None
    contexts: list[str]
    retrieved_ids: list[str]
    reference: str | None
    reference_ids: list[str]


def _first(row: Mapping, *keys, default=None):
    for k in keys:
        if k in row and row[k] is not None:
            return row[k]
    return default


def normalize_row(row: Mapping | EvalRow, index: int = 0, *, id_field: str = "source") -> EvalRow:
    """One row in our shape. Accepted keys: ``id``; ``question`` | ``user_input``; ``answer`` |
    ``response``; ``contexts`` | ``retrieved_contexts``; ``retrieved_ids`` |
    ``retrieved_context_ids``; ``reference`` | ``gold_answer``; ``reference_ids`` |
    ``reference_context_ids`` | ``gold_sources``. A runner row (``retrieved`` = list of chunk
    dicts with ``text``, ``source``, ``chunk_index``) gives contexts from the chunk texts and
    ids from the chunk sources (``id_field="source"``) or ``source#chunk_index``
    (``id_field="chunk"``)."""
    if isinstance(row, EvalRow):
        return row
    contexts = _first(row, "contexts", "retrieved_contexts")
    retrieved_ids = _first(row, "retrieved_ids", "retrieved_context_ids")
    chunks = row.get("retrieved")
    if chunks is not None and (contexts is None or retrieved_ids is None):
        if contexts is None:
            contexts = [c.get("text", "") for c in chunks]
        if retrieved_ids is None:
            retrieved_ids = [c.get("source") if id_field == "source" else f"{c.get('source')}#{c.get('chunk_index')}"
                             for c in chunks]
    return EvalRow(
        id=str(_first(row, "id", default=index)),
        question=_first(row, "question", "user_input", default="") or "",
        answer=_first(row, "answer", "response"),
        contexts=[str(c) for c in (contexts or [])],
        retrieved_ids=[str(i) for i in (retrieved_ids or [])],
        reference=_first(row, "reference", "gold_answer"),
        reference_ids=[str(i) for i in (_first(row, "reference_ids", "reference_context_ids", "gold_sources") or [])],
    )


def to_ragas_dataset(rows: Sequence[Mapping | EvalRow], *, id_field: str = "source") -> EvaluationDataset:
    """Our rows as a ragas ``EvaluationDataset`` of ``SingleTurnSample`` (user_input,
    response, retrieved_contexts, retrieved_context_ids, reference, reference_context_ids),
    built from a ``datasets.Dataset`` of those columns (ragas 0.4 ``from_hf_dataset``)."""
    ragas = _ragas()
    cols = {"user_input": "string", "response": "string", "retrieved_contexts": "list<string>",
            "retrieved_context_ids": "list<string>", "reference": "string", "reference_context_ids": "list<string>"}
    norm = [normalize_row(r, i, id_field=id_field) for i, r in enumerate(rows)]
    ds = in_memory_dataset([{"user_input": r.question, "response": r.answer, "retrieved_contexts": r.contexts,
                             "retrieved_context_ids": r.retrieved_ids, "reference": r.reference,
                             "reference_context_ids": r.reference_ids} for r in norm], cols)
    return ragas.EvaluationDataset.from_hf_dataset(ds)


def _finite(v: Any) -> float | None:
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _run(coro):
    """Run a coroutine to completion, also from inside a running event loop (Jupyter)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="adiyan-ragas") as pool:
        return pool.submit(asyncio.run, coro).result()


# ---------------------------------------------------------------- non-LLM metrics

def non_llm_metrics(*, rouge_type: str = "rougeL", distance: DistanceMeasure | None = None) -> dict:
    """The non-LLM ragas metric objects; ``distance`` defaults to ``DistanceMeasure.LEVENSHTEIN``."""
    ragas = _ragas()
    return {
        "id_based_context_precision": ragas.IDBasedContextPrecision(),
        "id_based_context_recall": ragas.IDBasedContextRecall(),
        "non_llm_string_similarity": ragas.NonLLMStringSimilarity(
            distance_measure=ragas.DistanceMeasure.LEVENSHTEIN if distance is None else distance),
        "rouge_score": ragas.RougeScore(rouge_type=rouge_type, mode="fmeasure"),
        "exact_match": ragas.ExactMatch(),
    }


def bleu_score(reference: str, response: str) -> float:
    """BLEU of the whole response against the whole reference, in [0, 1] (sacreBLEU / 100; see
    the module docstring for why not ragas' ``BleuScore``). Clipped to 1.0: sacreBLEU gives
    identical texts 100.00000000000004. A response under four tokens has no 4-grams and scores
    0, as in any unsmoothed corpus BLEU."""
    return min(1.0, float(sacrebleu.corpus_bleu([response], [[reference]]).score) / 100.0)


def chrf_score(reference: str, response: str) -> float:
    """chrF of the response against the reference, in [0, 1] (sacreBLEU's ``sentence_chrf`` / 100:
    character 1- to 6-grams with whitespace removed, recall weighted twice as much as precision,
    beta 2; orders that neither text reaches are left out). Unlike BLEU, a short answer still
    scores by the character n-grams it shares with the reference."""
    return min(1.0, float(sacrebleu.sentence_chrf(response, [reference]).score) / 100.0)


# answer-against-reference scores computed by sacreBLEU, not ragas: name -> f(reference, response)
SACREBLEU_METRICS = {"bleu_score": bleu_score, "chrf_score": chrf_score}


def score_non_llm(rows: Sequence[Mapping | EvalRow], *, id_field: str = "source", rouge_type: str = "rougeL",
                  distance: DistanceMeasure | None = None) -> dict[str, list[float | None]]:
    """Per-row values of the non-LLM metrics, computed by ragas (BLEU and chrF by sacreBLEU). ``None`` = undefined for that
    row: no answer or no reference (string metrics), nothing retrieved (precision), no
    reference ids (recall)."""
    norm = [normalize_row(r, i, id_field=id_field) for i, r in enumerate(rows)]
    metrics = non_llm_metrics(rouge_type=rouge_type, distance=distance)
    sample = _ragas().SingleTurnSample

    async def go():
        out: dict[str, list[float | None]] = {name: [] for name in (*metrics, *SACREBLEU_METRICS)}
        for r in norm:
            ids = sample(retrieved_context_ids=r.retrieved_ids, reference_context_ids=r.reference_ids)
            out["id_based_context_precision"].append(
                _finite(await metrics["id_based_context_precision"].single_turn_ascore(ids))
                if r.retrieved_ids else None)
            out["id_based_context_recall"].append(
                _finite(await metrics["id_based_context_recall"].single_turn_ascore(ids))
                if r.reference_ids else None)
            for name in ("non_llm_string_similarity", "rouge_score", "exact_match"):
                if r.answer is None or r.reference is None:
                    out[name].append(None)
                else:
                    res = await metrics[name].ascore(reference=r.reference, response=r.answer)
                    out[name].append(_finite(res.value))
            for name, fn in SACREBLEU_METRICS.items():
                out[name].append(None if r.answer is None or r.reference is None else _finite(fn(r.reference, r.answer)))
        return out

    return _run(go())


def summarize(per_row: Mapping[str, Sequence[float | None]]) -> dict[str, dict]:
    """Mean over defined rows, with how many rows were defined and undefined."""
    out = {}
    for name, vals in per_row.items():
        defined = [v for v in vals if v is not None]
        out[name] = {"mean": round(fmean(defined), 6) if defined else None, "n": len(defined),
                     "n_undefined": len(vals) - len(defined)}
    return out


# ---------------------------------------------------------------- LLM-judged metrics

def canonical_metric_names(metrics: Iterable[str] | None) -> list[str]:
    names = []
    for m in (LLM_METRICS if metrics is None else metrics):
        c = ALIASES.get(m, m)
        if c not in LLM_METRICS:
            raise ValueError(f"unknown LLM-judged metric {m!r}; choose from {', '.join(LLM_METRICS)}")
        if c not in names:
            names.append(c)
    return names


def build_llm_metrics(judge: Judge, embedder=None, metrics: Iterable[str] | None = None, *,
                      answer_relevancy_strictness: int = 1, noise_mode: str = "relevant") -> dict:
    """ragas collections metric objects wired to the judge (and embedder).

    ``answer_relevancy_strictness`` defaults to 1, not ragas' 3: ragas asks the *same* prompt
    ``strictness`` times and relies on sampling for variety; with a deterministic judge
    (temperature 0) and a prompt-hash cache the repeats are identical cache hits.
    """
    ragas = _ragas()
    llm = ragas.JudgeRagasLLM(judge)
    out = {}
    for name in canonical_metric_names(metrics):
        if name == "faithfulness":
            out[name] = ragas.Faithfulness(llm=llm)
        elif name == "answer_relevancy":
            if embedder is None:
                raise ValueError("answer_relevancy needs an embedder")
            out[name] = ragas.AnswerRelevancy(llm=llm, embeddings=ragas.AdiyanRagasEmbeddings(embedder),
                                              strictness=answer_relevancy_strictness)
        elif name == "llm_context_precision":
            out[name] = ragas.ContextPrecisionWithReference(llm=llm, name="llm_context_precision")
        elif name == "llm_context_recall":
            out[name] = ragas.ContextRecall(llm=llm, name="llm_context_recall")
        elif name == "noise_sensitivity":
            out[name] = ragas.NoiseSensitivity(llm=llm, mode=noise_mode)
    return out


def _kwargs(name: str, r: EvalRow) -> dict:
    if name == "faithfulness":
        return {"user_input": r.question, "response": r.answer, "retrieved_contexts": r.contexts}
    if name == "answer_relevancy":
        return {"user_input": r.question, "response": r.answer}
    if name == "llm_context_precision":
        return {"user_input": r.question, "reference": r.reference, "retrieved_contexts": r.contexts}
    if name == "llm_context_recall":
        return {"user_input": r.question, "retrieved_contexts": r.contexts, "reference": r.reference}
    if name == "noise_sensitivity":
        return {"user_input": r.question, "response": r.answer, "reference": r.reference,
                "retrieved_contexts": r.contexts}
    raise ValueError(name)


def sample_indices(n: int, sample: int | None, seed: int = 0) -> list[int]:
    if sample is None or sample >= n:
        return list(range(n))
    if sample < 0:
        raise ValueError("sample must be >= 0")
    return sorted(random.Random(seed).sample(range(n), sample))


def score_llm(rows: Sequence[Mapping | EvalRow], judge: Judge, embedder=None, metrics: Iterable[str] | None = None,
              sample: int | None = None, seed: int = 0, *, calibration: Calibration | None = None,
              id_field: str = "source", answer_relevancy_strictness: int = 1,
              noise_mode: str = "relevant", progress: bool = False) -> tuple[list[dict], dict]:
    """LLM-judged ragas metrics per row, through ``judge``.

    Returns ``(per_row, summary)``. ``per_row`` is aligned with ``rows``: ``{"id", "sampled",
    "scores": {metric: float | None}, "status": {metric: status}, "judge_calls": {metric: n},
    "errors": {metric: message}}``. ``summary["metrics"][metric]`` counts rows by status
    (``ok + failed + undefined + skipped == rows``) and judge calls by outcome
    (``judge_calls_ok + judge_calls_failed == judge_calls``), gives the mean over ``ok`` rows
    and, with a ``calibration``, the judge's agreement and whether the metric is reliable.
    ``sample`` scores a seeded random subset of the rows (``eval.judge_sample``).
    """
    names = canonical_metric_names(metrics)
    norm = [normalize_row(r, i, id_field=id_field) for i, r in enumerate(rows)]
    chosen = sample_indices(len(norm), sample, seed)
    built = build_llm_metrics(judge, embedder, names, answer_relevancy_strictness=answer_relevancy_strictness,
                              noise_mode=noise_mode)
    per_row = [{"id": r.id, "sampled": i in set(chosen), "scores": {m: None for m in names},
                "status": {m: "not_sampled" for m in names}, "judge_calls": {m: 0 for m in names},
                "errors": {}} for i, r in enumerate(norm)]
    before = {m: _copy_stats(judge.by_metric.get(m)) for m in names}
    n_fail_before = len(judge.failures)

    bar = tqdm(total=len(chosen) * len(names), desc="judged metrics", unit="score", disable=not progress,
               leave=False)

    async def go():
        for i in chosen:
            r, out = norm[i], per_row[i]
            for name in names:
                bar.set_postfix_str(f"{name} on {r.id}")
                missing = [f for f in REQUIRES[name] if not getattr(r, f)]
                if missing:
                    out["status"][name] = "skipped"
                    out["errors"][name] = "missing " + ", ".join(missing)
                    bar.update(1)
                    continue
                calls0 = judge.stats.calls
                metric = built[name]
                with judge.scope(name, r.id):
                    try:
                        res = await metric.ascore(**_kwargs(name, r))
                    except JudgeCallFailed as exc:
                        status, value, err = "judge_failed", None, f"{exc.result.status}: {exc}"
                    except Exception as exc:  # noqa: BLE001 - ragas failed on valid judgements: counted
                        status, value, err = "metric_error", None, f"{type(exc).__name__}: {exc}"
                    else:
                        value, err = _finite(res.value), ""
                        if value is None:
                            status, err = "undefined", f"ragas returned {res.value!r}"
                        elif (checked := _in_range(metric, value)) is None:
                            status, value, err = "out_of_range", None, (
                                f"ragas returned {value!r}, outside {getattr(metric, 'allowed_values', None)}")
                        else:
                            status, value = "ok", checked
                out["status"][name] = status
                out["scores"][name] = value
                out["judge_calls"][name] = judge.stats.calls - calls0
                if err:
                    out["errors"][name] = err
                bar.update(1)

    try:
        _run(go())
    finally:
        bar.close()

    flags = judged_metric_flags(calibration, names)
    summary_metrics = {}
    for name in names:
        statuses = Counter(per_row[i]["status"][name] for i in chosen)
        vals = [per_row[i]["scores"][name] for i in chosen if per_row[i]["status"][name] == "ok"]
        delta = _stats_delta(judge.by_metric.get(name), before[name])
        summary_metrics[name] = {
            "rows": len(chosen), "ok": statuses["ok"],
            "failed": sum(statuses[s] for s in FAILED_ROW_STATUSES),
            "undefined": statuses["undefined"], "skipped": statuses["skipped"],
            "by_status": {s: statuses[s] for s in ROW_STATUSES if statuses[s]},
            "mean": round(fmean(vals), 6) if vals else None,
            "judge_calls": delta.calls, "judge_calls_ok": delta.ok, "judge_calls_failed": delta.failed,
            "judge_calls_cached": delta.cached,
            "judge_calls_by_status": {s: getattr(delta, s) for s in ("ok", "invalid_json", "schema_mismatch",
                                                                      "timeout", "error")},
            "judge": judge.id, **flags[name],
        }
    summary = {
        "metrics": summary_metrics,
        "judge": {**judge.describe(), "stats": judge.stats_dict()},
        "failures": [f._asdict() for f in judge.failures[n_fail_before:]],
        "sample": {"n_rows": len(norm), "n_scored": len(chosen), "sample": sample, "seed": seed,
                   "ids": [norm[i].id for i in chosen]},
        "calibration": calibration.as_dict() if calibration is not None else None,
    }
    return per_row, summary


def _in_range(metric, value: float, tol: float = 1e-6) -> float | None:
    """The value, clipped when it is outside the metric's range by float noise only (a cosine
    of 1.0000000002); None when it is really out of range."""
    lo, hi = getattr(metric, "allowed_values", (0.0, 1.0))
    if lo - tol <= value <= hi + tol:
        return min(max(value, lo), hi)
    return None


def _copy_stats(s: JudgeStats | None) -> JudgeStats:
    return JudgeStats(**vars(s)) if s is not None else JudgeStats()


def _stats_delta(now: JudgeStats | None, before: JudgeStats) -> JudgeStats:
    now = now or JudgeStats()
    return JudgeStats(**{k: getattr(now, k) - getattr(before, k) for k in vars(before)})


def summary_lines(summary: Mapping) -> list[str]:
    """A plain-text table of the LLM-judged metrics: value, counts and judge agreement, with
    unreliable metrics marked. For logs and reports."""
    lines = []
    for name, m in summary["metrics"].items():
        mean = "n/a" if m["mean"] is None else f"{m['mean']:.3f}"
        ci = m.get("judge_agreement_ci95") or [None, None]
        agree = "uncalibrated" if m.get("judge_agreement") is None else (
            f"judge agreement {m['judge_agreement']:.2f}" + (f" [95% CI {ci[0]:.2f}-{ci[1]:.2f}]" if ci[0] is not None else ""))
        mark = "" if m.get("reliable") else ("  [UNRELIABLE]" if m.get("reliable") is False else "  [UNCALIBRATED]")
        lines.append(f"{name}: {mean} (ok {m['ok']}/{m['rows']}, failed {m['failed']}, undefined {m['undefined']}, "
                     f"skipped {m['skipped']}; judge calls {m['judge_calls']}, failed {m['judge_calls_failed']}; "
                     f"{agree}){mark}")
    return lines
