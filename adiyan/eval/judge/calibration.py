"""Calibrating the judge: labelled pairs, the support question, and the agreement it reaches.

:func:`calibrate` asks the judge "is this answer supported by the context?" for every pair
(four labels: ``correct`` is supported; ``corrupted_fact``, ``unsupported_addition`` and
``wrong_source`` are not) and reports the agreement with the labels, per label and per question
kind. A failed judgement counts as a disagreement in ``agreement`` (the headline figure;
``agreement_valid`` leaves failures out) and is listed.

Agreement on a few dozen pairs is an estimate, so it comes with its 95% Wilson score interval
(:func:`wilson_interval`), and ``Calibration.reliable`` holds only when the interval's *lower
bound* clears ``reliable_threshold`` (``eval.judge_reliable_agreement``, 0.8): a coin never
gets there (40 pairs: 0.5 agreement → lower bound ≈ 0.35), a judge right on all 40 pairs does
(lower bound 0.912), 36 / 40 does not (0.769). With 6 pairs even a perfect judge stays under
0.8 (0.610): too few pairs cannot make a judge reliable. Metrics of a judge that is not
reliable are to be shown as unreliable (:func:`judged_metric_flags`). The pairs are made in
``pairs``.

Early stop (``stop_when_unreachable``, ``eval.judge_calibration_early_stop``): after each pair the
best case is computed, every remaining pair agreeing; once even that best case's Wilson lower
bound is under the line, the verdict "not reliable" is certain and the remaining pairs are not
asked. The calibration then says so (``stopped_early``, ``n`` used of ``n_planned``, and the best
case's bound), and its agreement and interval are over the ``n`` pairs used. A judge that can
still reach the line is asked every pair: the rule never stops a judge that might pass.

Reuse (:func:`calibrate_reusing`): a calibration is stored under the content of everything
that decides it (the judge's model identity and settings, every prompt and label, the rule) and
reused when all of it is unchanged; a calibration with a transient failure (timeout, error) is
never stored, so an outage is not replayed.

A second, human-labelled set: :func:`calibrate_preferences` asks the judge which of two answers
is better and scores its agreement with human preferences (``adiyan meta-eval`` makes the pairs
from RAGChecker's annotations, adiyan/eval/meta_eval.py). It is reported beside the authored
pairs' agreement; the reliability rule is still applied to the authored pairs.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Literal, Sequence

from pydantic import BaseModel, ConfigDict, StrictBool
from tqdm.auto import tqdm

from .client import Judge, JudgeFailure, JudgeResult, _excerpt
import os

DEFAULT_RELIABLE_THRESHOLD = 0.8
Z95 = 1.959963984540054  # two-sided 95% normal quantile

Label = Literal["correct", "corrupted_fact", "unsupported_addition", "wrong_source"]
LABELS = ("correct", "corrupted_fact", "unsupported_addition", "wrong_source")  # only "correct" is supported


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float | None, float | None]:
    """The Wilson score interval of a binomial proportion (95% by default); (None, None) for n = 0.

    Unlike the normal approximation it stays inside [0, 1] and keeps its coverage near 0 and 1,
    which is where a good judge sits."""
    if n <= 0:
        return None, None
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be within 0..n, got {successes} of {n}")
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class CalibrationPair:
    id: str
    question: str
    context: str
    answer: str
    label: Label
    corruption: str = ""  # how the pair was made: "number: 450 -> 900", "addition: from f07", "wrong source: ..."
    kind: str = ""  # the question's kind (lookup, paraphrase, ...)


@dataclass
class Calibration:
    agreement: float | None  # matches / n; a failed judgement counts as a disagreement
    n: int
    per_label: dict[str, dict[str, int]]  # label -> {n, agree, disagree, failed}
    failures: list[JudgeFailure]
    reliable_threshold: float = DEFAULT_RELIABLE_THRESHOLD
    judge: str = ""
    per_corruption: dict[str, dict[str, int]] = field(default_factory=dict)
    verdicts: list[dict] = field(default_factory=list)  # per pair: id, label, kind, supported|None, status
    per_kind: dict[str, dict[str, int]] = field(default_factory=dict)  # question kind -> {n, agree, ...}
    n_planned: int | None = None  # pairs made; n < n_planned only after an early stop
    stopped_early: bool = False
    best_case_ci_low: float | None = None  # at the stop: the lower bound had every remaining pair agreed
    reused: bool = False  # read back from the calibration store (calibrate_reusing), no judge call

    @property
    def n_agree(self) -> int:
        return sum(v["agree"] for v in self.per_label.values())

    @property
    def n_failed(self) -> int:
        return sum(v["failed"] for v in self.per_label.values())

    @property
    def agreement_valid(self) -> float | None:
        """Agreement over the pairs the judge answered validly (failures left out)."""
        valid = self.n - self.n_failed
        return round(self.n_agree / valid, 6) if valid else None

    @property
    def ci95(self) -> tuple[float | None, float | None]:
        """95% Wilson interval of ``agreement`` (failures count as disagreements)."""
        lo, hi = wilson_interval(self.n_agree, self.n)
        return (None if lo is None else round(lo, 6), None if hi is None else round(hi, 6))

    @property
    def reliable(self) -> bool:
        """The interval's lower bound clears the line: the point estimate alone is not enough."""
        lo = self.ci95[0]
        return lo is not None and lo >= self.reliable_threshold

    def why(self) -> str:
        lo, hi = self.ci95
        if lo is None:
            return "judge not calibrated (no labelled pairs)"
        rel = "clears" if self.reliable else "is under"
        out = (f"judge agreement {self.agreement:.3f} on {self.n} labelled pairs, 95% CI {lo:.3f}–{hi:.3f}: "
               f"the lower bound {rel} the {self.reliable_threshold} line")
        if self.stopped_early:
            out += (f"; stopped early after {self.n} of {self.n_planned} pairs: even if all "
                    f"{self.n_planned - self.n} remaining pairs agreed, the lower bound would be "
                    f"{self.best_case_ci_low:.3f}, under the line")
        return out

    def as_dict(self) -> dict:
        lo, hi = self.ci95
        return {"judge": self.judge, "agreement": self.agreement, "agreement_valid": self.agreement_valid,
                "ci95_low": lo, "ci95_high": hi, "interval": "wilson",
                "n": self.n, "n_agree": self.n_agree, "n_failed": self.n_failed, "reliable": self.reliable,
                "reliable_threshold": self.reliable_threshold, "why": self.why(), "per_label": self.per_label,
                "per_kind": self.per_kind, "per_corruption": self.per_corruption,
                "failures": [f._asdict() for f in self.failures], "verdicts": self.verdicts,
                "n_planned": self.n if self.n_planned is None else self.n_planned,
                "stopped_early": self.stopped_early, "best_case_ci_low": self.best_case_ci_low,
                "reused": self.reused}


class SupportVerdict(BaseModel):
    """The calibration question's answer: strict true/false, no "yes" or 1."""

    model_config = ConfigDict(extra="ignore")
    supported: StrictBool


CALIBRATION_PROMPT = """Decide whether the answer is supported by the context: every fact the answer states must be stated in the context. An answer that changes a number, a name or a negation, or that adds a fact the context does not state, is NOT supported.

Context:
{context}

Question: {question}

Answer: {answer}

Is this answer supported by the context? Reply with JSON only: {{"supported": true}} or {{"supported": false}}"""


def calibration_prompt(pair: CalibrationPair) -> str:
    return CALIBRATION_PROMPT.format(context=pair.context.strip(), question=pair.question.strip(),
                                     answer=pair.answer.strip())


def unreachable(agree: int, done: int, n_planned: int, threshold: float) -> tuple[bool, float | None]:
    """(True, bound) when even all ``n_planned - done`` remaining pairs agreeing would leave the
    Wilson lower bound under ``threshold``; ``bound`` is that best case's lower bound."""
    best = wilson_interval(agree + (n_planned - done), n_planned)[0]
    return (best is not None and best < threshold), best


def calibrate(judge: Judge, pairs: Sequence[CalibrationPair], *,
              reliable_threshold: float = DEFAULT_RELIABLE_THRESHOLD, metric: str = "calibration",
              progress: bool = False, stop_when_unreachable: bool = False) -> Calibration:
    """Score the judge on labelled pairs: agreement = fraction of pairs whose verdict matches
    the label (``supported`` for ``correct``, not supported for the other three labels);
    failed judgements count as disagreements and are listed. ``stop_when_unreachable``: stop as
    soon as the reliability rule can no longer be met (module docstring)."""
    per_label = {lab: {"n": 0, "agree": 0, "disagree": 0, "failed": 0} for lab in LABELS}
    per_kind: dict[str, dict[str, int]] = {}
    per_corruption: dict[str, dict[str, int]] = {}
    failures: list[JudgeFailure] = []
    verdicts = []
    for pair in tqdm(pairs, desc="judge calibration", unit="pair", disable=not progress, leave=False):
        if pair.label not in per_label:
            raise ValueError(f"pair {pair.id}: label must be one of {', '.join(LABELS)}, got {pair.label!r}")
        res = judge.ask(calibration_prompt(pair), SupportVerdict, metric=metric, sample_id=pair.id)
        kind = pair.corruption.split(":", 1)[0] if pair.corruption else "none"
        buckets = [per_label[pair.label], per_kind.setdefault(pair.kind or "—", _bucket()),
                   per_corruption.setdefault(kind, _bucket())]
        supported = None
        if res.value is None:
            key = "failed"
            failures.append(JudgeFailure(metric, pair.id, res.status, _excerpt(res.raw or res.error)))
        else:
            supported = bool(res.value.supported)
            key = "agree" if supported == (pair.label == "correct") else "disagree"
        for b in buckets:
            b["n"] += 1
            b[key] += 1
        verdicts.append({"id": pair.id, "label": pair.label, "kind": pair.kind, "supported": supported,
                         "status": res.status, "cached": res.cached})
        if stop_when_unreachable and len(verdicts) < len(pairs):
            stop, best = unreachable(sum(v["agree"] for v in per_label.values()), len(verdicts), len(pairs),
                                     reliable_threshold)
            if stop:
                stopped_at = round(best, 6)
                break
    else:
        stopped_at = None
    n = len(verdicts)
    agree = sum(v["agree"] for v in per_label.values())
    return Calibration(round(agree / n, 6) if n else None, n, per_label, failures,
                       reliable_threshold, judge.id, per_corruption, verdicts, per_kind,
                       n_planned=len(pairs), stopped_early=stopped_at is not None, best_case_ci_low=stopped_at)


CALIBRATION_STORE_VERSION = "calibration-store-v1"
TRANSIENT_STATUSES = frozenset({"timeout", "error"})


def calibration_key(judge: Judge, pairs: Sequence[CalibrationPair], *, reliable_threshold: float,
                    stop_when_unreachable: bool) -> dict:
    """Everything that decides a calibration: the judge (model identity: id, weights file or
    server, its settings and system prompt), every pair's prompt and label, the rule."""
    llm = judge.llm
    path = getattr(llm, "path", None)
    st = os.stat(path) if path and os.path.isfile(path) else None
    model = {"id": judge.id, "file": [st.st_size, st.st_mtime_ns] if st else None, "path": getattr(llm, "path", None), "url": getattr(llm, "url", None),
             "model_name": getattr(llm, "model_name", None), "seed": getattr(llm, "seed", None),
             "context_size": getattr(llm, "context_size", None)}
    return {"version": CALIBRATION_STORE_VERSION, "model": model, "judge": judge.describe(),
            "system": judge.system_prompt, "schema": SupportVerdict.model_json_schema(),
            "pairs": [[p.id, p.label, p.kind, p.corruption, calibration_prompt(p)] for p in pairs],
            "threshold": reliable_threshold, "early_stop": bool(stop_when_unreachable)}


def calibrate_reusing(judge: Judge, pairs: Sequence[CalibrationPair], store, *,
                      reliable_threshold: float = DEFAULT_RELIABLE_THRESHOLD, metric: str = "calibration",
                      progress: bool = False, stop_when_unreachable: bool = False) -> Calibration:
    """:func:`calibrate`, reusing a stored calibration whose every input is unchanged
    (``store``: a :class:`~adiyan.cache.CallCache`; None calibrates afresh). A judge at a
    temperature above 0 is never reused (its verdicts are samples)."""
    reusable = store is not None and float(getattr(judge, "temperature", 0.0) or 0.0) == 0.0
    key = store.key(calibration_key(judge, pairs, reliable_threshold=reliable_threshold,
                                    stop_when_unreachable=stop_when_unreachable)) if reusable else None
    hit = store.get(key) if reusable else None
    if hit is not None:
        cal = Calibration(hit["agreement"], hit["n"], hit["per_label"],
                          [JudgeFailure(**f) for f in hit["failures"]], hit["reliable_threshold"], hit["judge"],
                          hit["per_corruption"], hit["verdicts"], hit["per_kind"], n_planned=hit["n_planned"],
                          stopped_early=hit["stopped_early"], best_case_ci_low=hit["best_case_ci_low"], reused=True)
        return cal
    cal = calibrate(judge, pairs, reliable_threshold=reliable_threshold, metric=metric, progress=progress,
                    stop_when_unreachable=stop_when_unreachable)
    if reusable and not any(f.status in TRANSIENT_STATUSES for f in cal.failures):
        store.put(key, cal.as_dict())
    return cal


def _bucket() -> dict[str, int]:
    return {"n": 0, "agree": 0, "disagree": 0, "failed": 0}


def judged_metric_flags(calibration: Calibration | None, metrics: Iterable[str]) -> dict[str, dict]:
    """For a report: the judge's agreement (and its interval) beside every LLM-judged metric,
    and whether the metric is to be marked unreliable (no calibration counts as unknown, never
    reliable)."""
    out = {}
    for m in metrics:
        if calibration is None:
            out[m] = {"judge_agreement": None, "judge_agreement_ci95": None, "reliable": None,
                      "reliable_threshold": None, "note": "judge not calibrated"}
        else:
            out[m] = {"judge_agreement": calibration.agreement, "judge_agreement_ci95": list(calibration.ci95),
                      "reliable": calibration.reliable, "reliable_threshold": calibration.reliable_threshold,
                      "note": "" if calibration.reliable else f"UNRELIABLE: {calibration.why()}"}
    return out


def count_statuses(results: Iterable[JudgeResult]) -> Counter:
    return Counter(r.status for r in results)


# ---------------------------------------------------------------- human preferences (second set)

@dataclass
class PreferencePair:
    """Two answers to one question and which of them people judged better (``A`` or ``B``)."""

    id: str
    question: str
    reference: str
    answer_a: str
    answer_b: str
    better: Literal["A", "B"]
    source: str = ""  # where the human label comes from


class PreferenceVerdict(BaseModel):
    model_config = ConfigDict(extra="ignore")
    better: Literal["A", "B"]


PREFERENCE_PROMPT = """Two answers to the same question are compared with a reference answer. Decide which answer is better overall: more correct (fewer statements that contradict the reference) and more complete (covers more of the reference).

Question: {question}

Reference answer:
{reference}

Answer A:
{answer_a}

Answer B:
{answer_b}

Which answer is better? Reply with JSON only: {{"better": "A"}} or {{"better": "B"}}"""


def preference_prompt(pair: PreferencePair) -> str:
    return PREFERENCE_PROMPT.format(question=pair.question.strip(), reference=pair.reference.strip(),
                                    answer_a=pair.answer_a.strip(), answer_b=pair.answer_b.strip())


def calibrate_preferences(judge: Judge, pairs: Sequence[PreferencePair], *,
                          reliable_threshold: float = DEFAULT_RELIABLE_THRESHOLD,
                          metric: str = "calibration_human", progress: bool = False) -> Calibration:
    """The judge's agreement with human preferences: the share of pairs where it picks the answer
    people picked (a failed judgement counts as a disagreement), with its Wilson interval. Labels
    in ``per_label`` are the human choice, ``A`` or ``B``."""
    per_label = {lab: _bucket() for lab in ("A", "B")}
    failures: list[JudgeFailure] = []
    verdicts = []
    for pair in tqdm(pairs, desc="judge on human preferences", unit="pair", disable=not progress, leave=False):
        if pair.better not in per_label:
            raise ValueError(f"pair {pair.id}: better must be 'A' or 'B', got {pair.better!r}")
        res = judge.ask(preference_prompt(pair), PreferenceVerdict, metric=metric, sample_id=pair.id)
        choice = None
        if res.value is None:
            key = "failed"
            failures.append(JudgeFailure(metric, pair.id, res.status, _excerpt(res.raw or res.error)))
        else:
            choice = res.value.better
            key = "agree" if choice == pair.better else "disagree"
        per_label[pair.better]["n"] += 1
        per_label[pair.better][key] += 1
        verdicts.append({"id": pair.id, "label": pair.better, "choice": choice, "status": res.status,
                         "cached": res.cached, "source": pair.source})
    n = len(pairs)
    agree = sum(v["agree"] for v in per_label.values())
    return Calibration(round(agree / n, 6) if n else None, n, per_label, failures, reliable_threshold, judge.id,
                       verdicts=verdicts)
