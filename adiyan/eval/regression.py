"""Regression cases: per embedder, a measured score and the floor it must stay above.

Cases live in ``evalsets/regression.yaml``. A case names a metric as ``group.name`` in a run's
``metrics``; an entry for the run's embedder (or ``"*"``) gives ``floor`` (value must be ≥) or
``max`` (value must be ≤). A case whose metric the run did not produce, or with no entry for
the embedder, is reported as not checked, never as passed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

CASES_FILE = Path(__file__).resolve().parents[2] / "evalsets" / "regression.yaml"


@dataclass
class RegressionResult:
    id: str
    metric: str
    value: float | None
    floor: float | None
    max: float | None
    measured: float | None
    status: str  # pass | fail | not_checked
    reason: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def load_cases(path: Path | None = None) -> list[dict]:
    data = yaml.safe_load(Path(path or CASES_FILE).read_text(encoding="utf-8")) or {}
    return list(data.get("cases") or [])


def check(metrics: dict, embedder_id: str, evalset: str, cases: list[dict] | None = None) -> list[RegressionResult]:
    out = []
    for case in load_cases() if cases is None else cases:
        group, _, name = case["metric"].partition(".")
        entry = case.get("per_embedder", {}).get(embedder_id) or case.get("per_embedder", {}).get("*")
        value = (metrics.get(group) or {}).get(name)
        base = dict(id=case["id"], metric=case["metric"], value=value,
                    floor=(entry or {}).get("floor"), max=(entry or {}).get("max"),
                    measured=(entry or {}).get("measured"))
        if case.get("evalset") and case["evalset"] != evalset:
            out.append(RegressionResult(**base, status="not_checked", reason=f"case is for evalset {case['evalset']}"))
        elif entry is None:
            out.append(RegressionResult(**base, status="not_checked", reason=f"no entry for embedder {embedder_id}"))
        elif value is None:
            out.append(RegressionResult(**base, status="not_checked", reason="the run did not produce this metric"))
        else:
            ok = (entry.get("floor") is None or value >= entry["floor"]) and (entry.get("max") is None or value <= entry["max"])
            reason = "" if ok else (f"{value:.4g} below floor {entry['floor']}" if entry.get("floor") is not None
                                    and value < entry["floor"] else f"{value:.4g} above max {entry.get('max')}")
            out.append(RegressionResult(**base, status="pass" if ok else "fail", reason=reason))
    return out


def regression_group(results: list[RegressionResult]) -> dict[str, float | None]:
    """The ``regression`` metric group: per case 1.0 pass, 0.0 fail, None not checked."""
    return {r.id: (None if r.status == "not_checked" else float(r.status == "pass")) for r in results}


def mark_not_replayed(results: list[RegressionResult], why: str) -> list[RegressionResult]:
    """Cases on an incident metric that were not checked because the job replays no incidents
    say so (``why``) instead of "the run did not produce this metric"."""
    for res in results:
        if res.status == "not_checked" and res.metric.startswith("incidents."):
            res.reason = why
    return results
