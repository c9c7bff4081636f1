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
        return (f"judge agreement {self.agreement:.3f} on {self.n} labelled pairs, 95% CI {lo:.3f}–{hi:.3f}: "
                f"the lower bound {rel} the {self.reliable_threshold} line")

    def as_dict(self) -> dict:
        lo, hi = self.ci95
        return {"judge": self.judge, "agreement": self.agreement, "agreement_valid": self.agreement_valid,
                "ci95_low": lo, "ci95_high": hi, "interval": "wilson",
                "n": self.n, "n_agree": self.n_agree, "n_failed": self.n_failed, "reliable": self.reliable,
                "reliable_threshold": self.reliable_threshold, "why": self.why(), "per_label": self.per_label,
                "per_kind": self.per_kind, "per_corruption": self.per_corruption,
                "failures": [f._asdict() for f in self.failures], "verdicts": self.verdicts}


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


def calibrate(judge: Judge, pairs: Sequence[CalibrationPair], *,
              reliable_threshold: float = DEFAULT_RELIABLE_THRESHOLD, metric: str = "calibration",
              progress: bool = False) -> Calibration:
    """Score the judge on labelled pairs: agreement = fraction of pairs whose verdict matches
    the label (``supported`` for ``correct``, not supported for the other three labels);
    failed judgements count as disagreements and are listed."""
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
    n = len(pairs)
    agree = sum(v["agree"] for v in per_label.values())
    return Calibration(round(agree / n, 6) if n else None, n, per_label, failures,
                       reliable_threshold, judge.id, per_corruption, verdicts, per_kind)


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
