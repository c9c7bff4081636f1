"""Calibrating the judge: labelled pairs, the support question, and the agreement it reaches.

:func:`calibrate` asks the judge "is this answer supported by the context?" for every pair
and reports the agreement with the labels. A failed judgement counts as a disagreement in
``agreement`` (the headline figure; ``agreement_valid`` leaves failures out) and is listed.
``Calibration.reliable`` is ``agreement >= reliable_threshold`` (default 0.8): metrics from a
judge below it are to be shown as unreliable (:func:`judged_metric_flags` marks them for a
report). The pairs themselves are made in ``pairs``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Literal, Sequence

from pydantic import BaseModel, ConfigDict, StrictBool
from tqdm.auto import tqdm

from .client import Judge, JudgeFailure, JudgeResult, _excerpt

DEFAULT_RELIABLE_THRESHOLD = 0.8

Label = Literal["correct", "corrupted"]


@dataclass
class CalibrationPair:
    id: str
    question: str
    context: str
    answer: str
    label: Label
    corruption: str = ""  # for corrupted pairs: "number: 450 -> 900", "name: A -> B", "negation: ..."


@dataclass
class Calibration:
    agreement: float | None  # matches / n; a failed judgement counts as a disagreement
    n: int
    per_label: dict[str, dict[str, int]]  # label -> {n, agree, disagree, failed}
    failures: list[JudgeFailure]
    reliable_threshold: float = DEFAULT_RELIABLE_THRESHOLD
    judge: str = ""
    per_corruption: dict[str, dict[str, int]] = field(default_factory=dict)
    verdicts: list[dict] = field(default_factory=list)  # per pair: id, label, supported|None, status

    @property
    def n_failed(self) -> int:
        return sum(v["failed"] for v in self.per_label.values())

    @property
    def agreement_valid(self) -> float | None:
        """Agreement over the pairs the judge answered validly (failures left out)."""
        valid = self.n - self.n_failed
        agree = sum(v["agree"] for v in self.per_label.values())
        return round(agree / valid, 6) if valid else None

    @property
    def reliable(self) -> bool:
        return self.agreement is not None and self.agreement >= self.reliable_threshold

    def as_dict(self) -> dict:
        return {"judge": self.judge, "agreement": self.agreement, "agreement_valid": self.agreement_valid,
                "n": self.n, "n_failed": self.n_failed, "reliable": self.reliable,
                "reliable_threshold": self.reliable_threshold, "per_label": self.per_label,
                "per_corruption": self.per_corruption,
                "failures": [f._asdict() for f in self.failures], "verdicts": self.verdicts}


class SupportVerdict(BaseModel):
    """The calibration question's answer: strict true/false, no "yes" or 1."""

    model_config = ConfigDict(extra="ignore")
    supported: StrictBool


CALIBRATION_PROMPT = """Decide whether the answer is supported by the context: every fact the answer states must be stated in the context. An answer that changes a number, a name or a negation is NOT supported.

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
    the label (``supported`` for ``correct``, not supported for ``corrupted``); failed
    judgements count as disagreements and are listed."""
    per_label = {lab: {"n": 0, "agree": 0, "disagree": 0, "failed": 0} for lab in ("correct", "corrupted")}
    per_corruption: dict[str, dict[str, int]] = {}
    failures: list[JudgeFailure] = []
    verdicts = []
    agree_total = 0
    for pair in tqdm(pairs, desc="judge calibration", unit="pair", disable=not progress, leave=False):
        if pair.label not in per_label:
            raise ValueError(f"pair {pair.id}: label must be correct|corrupted, got {pair.label!r}")
        res = judge.ask(calibration_prompt(pair), SupportVerdict, metric=metric, sample_id=pair.id)
        bucket = per_label[pair.label]
        bucket["n"] += 1
        kind = pair.corruption.split(":", 1)[0] if pair.corruption else "none"
        cb = per_corruption.setdefault(kind, {"n": 0, "agree": 0, "disagree": 0, "failed": 0})
        cb["n"] += 1
        supported = None
        if res.value is None:
            bucket["failed"] += 1
            cb["failed"] += 1
            failures.append(JudgeFailure(metric, pair.id, res.status, _excerpt(res.raw or res.error)))
        else:
            supported = bool(res.value.supported)
            agrees = supported == (pair.label == "correct")
            agree_total += int(agrees)
            key = "agree" if agrees else "disagree"
            bucket[key] += 1
            cb[key] += 1
        verdicts.append({"id": pair.id, "label": pair.label, "supported": supported, "status": res.status,
                         "cached": res.cached})
    n = len(pairs)
    return Calibration(round(agree_total / n, 6) if n else None, n, per_label, failures,
                       reliable_threshold, judge.id, per_corruption, verdicts)


def judged_metric_flags(calibration: Calibration | None, metrics: Iterable[str]) -> dict[str, dict]:
    """For a report: the judge's agreement beside every LLM-judged metric, and whether the
    metric is to be marked unreliable (no calibration counts as unknown, never reliable)."""
    out = {}
    for m in metrics:
        if calibration is None:
            out[m] = {"judge_agreement": None, "reliable": None, "reliable_threshold": None,
                      "note": "judge not calibrated"}
        else:
            out[m] = {"judge_agreement": calibration.agreement, "reliable": calibration.reliable,
                      "reliable_threshold": calibration.reliable_threshold,
                      "note": "" if calibration.reliable else
                      f"UNRELIABLE: judge agreement {calibration.agreement} < {calibration.reliable_threshold}"}
    return out


def count_statuses(results: Iterable[JudgeResult]) -> Counter:
    return Counter(r.status for r in results)
