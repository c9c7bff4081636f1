"""Regression cases: per embedder, a measured score and the floor it must stay above.

Cases live in ``evalsets/regression.yaml``. A case names a metric as ``group.name`` in a run's
``metrics``; an entry for the run's embedder (or ``"*"``) gives ``floor`` (value must be ≥) or
``max`` (value must be ≤); ``applies_if: group.name`` makes the case apply only when that metric is
non-zero (a probe check on a set with probes). A case that does not apply to the run (another evalset's, no entry for
the run's embedder, a metric group the run has none of, such as incidents not replayed) is
``n/a`` with the reason: listed once as "does not apply", never a metric and never passed. A case
whose group the run has but whose metric it did not produce is ``not_checked`` (a gap to look at).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

NA = "n/a"  # the case does not apply to this run (reason says why): not a metric, not a pass
CASES_FILE = Path(__file__).resolve().parents[2] / "evalsets" / "regression.yaml"


@dataclass
class RegressionResult:
    id: str
    metric: str
    value: float | None
    floor: float | None
    max: float | None
    measured: float | None
    status: str  # pass | fail | not_checked | n/a (see NA)
    reason: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def load_cases(path: Path | None = None) -> list[dict]:
    data = yaml.safe_load(Path(path or CASES_FILE).read_text(encoding="utf-8")) or {}
    return list(data.get("cases") or [])


def _lookup(metrics: dict, dotted: str):
    group, _, name = dotted.partition(".")
    return (metrics.get(group) or {}).get(name)


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
            out.append(RegressionResult(**base, status=NA, reason=f"a case for evalset {case['evalset']}"))
        elif entry is None:
            known = ", ".join(sorted(case.get("per_embedder") or {})) or "none"
            out.append(RegressionResult(**base, status=NA, reason=f"no floor for embedder {embedder_id} "
                                                                  f"(measured for {known})"))
        elif value is None and group not in metrics:
            out.append(RegressionResult(**base, status=NA, reason=f"the run has no {group} metrics"))
        elif case.get("applies_if") and not _lookup(metrics, case["applies_if"]):
            out.append(RegressionResult(**base, status=NA, reason=f"nothing to check: {case['applies_if']} = "
                                                                  f"{_lookup(metrics, case['applies_if'])}"))
        elif value is None:
            out.append(RegressionResult(**base, status="not_checked", reason="the run did not produce this metric"))
        else:
            ok = (entry.get("floor") is None or value >= entry["floor"]) and (entry.get("max") is None or value <= entry["max"])
            reason = "" if ok else (f"{value:.4g} below floor {entry['floor']}" if entry.get("floor") is not None
                                    and value < entry["floor"] else f"{value:.4g} above max {entry.get('max')}")
            out.append(RegressionResult(**base, status="pass" if ok else "fail", reason=reason))
    return out


def regression_group(results: list[RegressionResult]) -> dict[str, float | None]:
    """The ``regression`` metric group: per case 1.0 pass, 0.0 fail, None not checked; a case that
    does not apply is not a metric (:func:`not_applicable` lists it)."""
    return {r.id: (None if r.status == "not_checked" else float(r.status == "pass")) for r in results
            if r.status != NA}


def not_applicable(results: list[RegressionResult], incidents_why: str | None = None) -> list[dict]:
    """What the run did not check because it does not apply, each once with why:
    ``[{"what": ..., "why": ...}]`` (the incidents first when they were not replayed)."""
    out = [{"what": "the five incidents", "why": incidents_why}] if incidents_why else []
    return out + [{"what": f"regression case {r.id}", "why": r.reason} for r in results if r.status == NA]


def mark_not_replayed(results: list[RegressionResult], why: str) -> list[RegressionResult]:
    """Cases on an incident metric that were not checked because the job replays no incidents
    say so (``why``) instead of "the run did not produce this metric"."""
    for res in results:
        if res.metric.startswith("incidents.") and (res.status == "not_checked" or (
                res.status == NA and res.reason == "the run has no incidents metrics")):
            res.status, res.reason = NA, why
    return results


def run_cases(groups: dict, embedder_id: str, evalset: str, *, incidents_why: str | None = None,
              cases: list[dict] | None = None) -> list[RegressionResult]:
    """The regression step every job shares (``invoke eval`` on any kind of set, every sweep point):
    :func:`check` the cases, mark incident cases not replayed with ``incidents_why``, and add the
    ``regression`` metric group to ``groups`` (in place)."""
    results = check(groups, embedder_id, evalset, cases)
    if incidents_why:
        results = mark_not_replayed(results, incidents_why)
    groups["regression"] = regression_group(results)
    return results


def record_fields(results: list[RegressionResult], incidents_why: str | None = None) -> dict:
    """metrics.json's ``regression``, ``regression_failed`` and ``not_applicable`` for these results."""
    return {"regression": [r.as_dict() for r in results],
            "regression_failed": sum(r.status == "fail" for r in results),
            "not_applicable": not_applicable(results, incidents_why)}


def not_applicable_lines(m: dict) -> list[str]:
    """One line per kind of check that did not apply to the run (metrics.json ``not_applicable``)."""
    na = m.get("not_applicable") or []
    inc = [x for x in na if x["what"] == "the five incidents"]
    cases = [x for x in na if x["what"] != "the five incidents"]
    lines = [f"  does not apply: the five incidents ({x['why']})" for x in inc]
    if cases:
        lines.append(f"  does not apply: {len(cases)} regression case(s): " + "; ".join(
            f"{x['what'].removeprefix('regression case ')} ({x['why']})" for x in cases))
    return lines
