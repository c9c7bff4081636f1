"""An LLM judge held to account: cached, validated, timed out, every failure counted; and calibrated.

``client`` holds the judge itself (``Judge``, its statuses, results and counters, JSON
extraction from replies, ``judge_from_settings``); ``calibration`` scores a judge on labelled
pairs (agreement with its 95% Wilson interval; reliable only when the lower bound clears the
line) and flags the metrics of an unreliable one; ``pairs`` makes those labelled pairs from an
evalset (correct, corrupted fact, unsupported addition, wrong source, over every question kind). Everything is re-exported here, so ``from
adiyan.eval.judge import X`` is the way in (see ``client`` for the judge's full contract).
"""

from __future__ import annotations

from .calibration import (
    CALIBRATION_PROMPT, DEFAULT_RELIABLE_THRESHOLD, LABELS, PREFERENCE_PROMPT, Calibration, CalibrationPair, Label,
    PreferencePair, PreferenceVerdict, SupportVerdict, calibrate, calibrate_preferences, calibrate_reusing,
    calibration_key, calibration_prompt, unreachable,
    count_statuses, judged_metric_flags, preference_prompt, wilson_interval,
)
from .client import (
    DEFAULT_SYSTEM_PROMPT, EXCERPT_CHARS, FAILED_STATUSES, RETRY_SUFFIX, STATUSES, Judge, JudgeCallFailed,
    JudgeFailure, JudgeResult, JudgeStats, Status, json_candidates, judge_from_settings, parse_reply,
)
from .pairs import (
    NEGATIVE_LABELS, candidate_pairs, evalset_calibration_pairs, make_calibration_pairs, select_pairs, support_passage,
)

__all__ = [
    # the judge
    "DEFAULT_SYSTEM_PROMPT", "EXCERPT_CHARS", "FAILED_STATUSES", "RETRY_SUFFIX", "STATUSES", "Judge",
    "JudgeCallFailed", "JudgeFailure", "JudgeResult", "JudgeStats", "Status", "json_candidates",
    "judge_from_settings", "parse_reply",
    # calibration
    "CALIBRATION_PROMPT", "DEFAULT_RELIABLE_THRESHOLD", "LABELS", "Calibration", "CalibrationPair", "Label",
    "SupportVerdict", "calibrate", "calibrate_reusing", "calibration_key", "unreachable", "calibration_prompt", "count_statuses", "judged_metric_flags", "wilson_interval",
    "PREFERENCE_PROMPT", "PreferencePair", "PreferenceVerdict", "calibrate_preferences", "preference_prompt",
    # labelled pairs
    "NEGATIVE_LABELS", "candidate_pairs", "evalset_calibration_pairs", "make_calibration_pairs", "select_pairs",
    "support_passage",
]
