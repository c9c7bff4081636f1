"""Incident 5, permission gap: the seed's default tier lacked the general fallback, and its router
dropped every message it could not route, silently.

Both halves run the real router (``adiyan.agent.route_request``) over every message × tier of
``evalsets/incidents/permission_gap.yaml``. *Before*: the tier table of
``agent.default_tier_fallback=false`` (the seed's default tier, without general reasoning). The
production agent refuses that configuration, so the before is a **replica** (its verdict reads
"demonstrated on a replica"); what production does with it is part of the after: a configuration
file setting it, loaded through ``load_settings`` as every entry point loads one, and the seed's
tier table handed to the ``Agent``, must each be refused with an error that names the cause (a
configuration production accepted would be a violation). *After*: the configured tier table. Each call is classed
by what the caller sees: the route ran, an ``AuthorizationError`` was raised *and* logged at
WARNING (visible), or anything else (silent: nothing returned, or refused without a trace).

What the before can show, honestly: the production router no longer has a code path that
swallows a refusal, so the seed's silence is not reproduced; what the configuration reproduces
is the gap itself: default-tier messages with nowhere to go. The after must close the gap, run
or refuse every case exactly as specified, and leave nothing silent.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import yaml

from ...agent import ROUTES, Agent, AuthorizationError, Requester, route_request, tier_table
from ...config import load_settings
from .common import REPLICA, VIOLATED, IncidentResult, classify, counts, load_spec, verdict

SEED = "every message needing a missing capability dropped silently; the default tier had no general fallback (the seed)"
PRINCIPLE = ("the default tier always has the general fallback, and every message either runs or raises a "
             "visible authorization error")


class _Warnings(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def route_outcome(message: str, requester: Requester) -> tuple[str, str | None]:
    """("ran", route) | ("refused", route) when raised and logged | ("silent", why)."""
    log = logging.getLogger("adiyan.agent")
    seen, propagate = _Warnings(), log.propagate
    log.addHandler(seen)
    log.propagate = False  # the refusals are expected here: recorded, not printed
    try:
        try:
            route = route_request(message, requester)
        except AuthorizationError as err:
            return ("refused", err.route) if seen.records else ("silent", f"refused {err.route} without a log record")
    finally:
        log.removeHandler(seen)
        log.propagate = propagate
    if route in ROUTES:
        return "ran", route
    return "silent", f"the router returned {route!r}"


def _outcomes(tiers: dict, spec: dict) -> list[dict]:
    rows = []
    for msg in spec["messages"]:
        for tier_name in spec["may_run"]:
            kind, what = route_outcome(msg["text"], Requester("incident5", tiers[tier_name]))
            expected = "ran" if msg["route"] in spec["may_run"][tier_name] else "refused"
            rows.append({"message": msg["text"], "route": msg["route"], "tier": tier_name, "outcome": kind,
                         "detail": what, "expected": expected,
                         "as_specified": kind == expected and what == msg["route"]})
    return rows


def production_refusals() -> list[dict]:
    """What production does with the seed's configuration, through its real paths: a configuration file
    with ``agent.default_tier_fallback: false`` loaded by ``load_settings`` and given to the ``Agent``,
    and the seed's tier table handed to the ``Agent`` directly. Each must raise before the agent runs,
    with a message naming the cause; ``refused`` False is a configuration production would run."""
    out = []
    with tempfile.TemporaryDirectory(prefix="adiyan-incident5-") as tmp:
        path = Path(tmp) / "seed_tiers.yaml"
        path.write_text(yaml.safe_dump({"agent": {"default_tier_fallback": False}}), encoding="utf-8")
        attempts = [("a configuration file with agent.default_tier_fallback: false, through load_settings",
                     lambda: Agent(None, None, settings=load_settings(path, environ={})), "default_tier_fallback"),
                    ("the seed's tier table (no general fallback on the default tier) handed to the Agent",
                     lambda: Agent(None, None, settings=load_settings(None, environ={}),
                                   tiers=tier_table(default_tier_fallback=False)), "general")]
        for what, build, names in attempts:
            try:
                build()
            except Exception as err:  # noqa: BLE001 - any refusal counts if it names the cause
                msg = f"{type(err).__name__}: {err}"
                out.append({"attempt": what, "refused": names in str(err), "error": msg})
            else:
                out.append({"attempt": what, "refused": False, "error": None})
    return out


def permission_gap(settings, embedder) -> IncidentResult:
    spec = load_spec("permission_gap.yaml")
    default = spec["default_tier"]
    before = _outcomes(tier_table(default_tier_fallback=False), spec)
    after = _outcomes(tier_table(settings.agent.default_tier_fallback), spec)
    gap_before = sum(r["tier"] == default and r["route"] == "general" and r["outcome"] != "ran" for r in before)
    gap_after = sum(r["tier"] == default and r["route"] == "general" and r["outcome"] != "ran" for r in after)
    silent_before = sum(r["outcome"] == "silent" for r in before)
    silent_after = sum(r["outcome"] == "silent" for r in after)
    # the variants: the default tier's messages that need the general fallback; the rest of the
    # table must run or refuse exactly as specified (each case that does not is a violation)
    by_case = {(r["message"], r["tier"]): r for r in after}
    gap_cases = [r for r in before if r["tier"] == default and r["route"] == "general"]
    for r in gap_cases:
        a = by_case[(r["message"], r["tier"])]
        r["status"] = classify(before_failed=r["outcome"] != "ran", after_prevented=a["as_specified"])
    off_spec = [r for r in after if not r["as_specified"] and (r["message"], r["tier"]) not in
                {(g["message"], g["tier"]) for g in gap_cases}]
    refusals = production_refusals()
    accepted = [r for r in refusals if not r["refused"]]
    statuses = [r["status"] for r in gap_cases] + [VIOLATED] * (len(off_spec) + len(accepted))
    ran = sum(r["outcome"] == "ran" for r in after)
    refused = sum(r["outcome"] == "refused" for r in after)
    n = len(after)
    measured = (f"before (tier table without the default tier's general fallback): {gap_before}/{len(gap_cases)} "
                f"{default} messages for the general route had nowhere to go (refused, {silent_before} silent: the "
                f"router no longer drops anything); after: {gap_after} without a route, "
                f"{sum(r['as_specified'] for r in after)}/{n} route × tier cases as specified ({ran} ran, {refused} "
                f"raised a logged AuthorizationError, {silent_after} silent); production refuses the seed's "
                f"configuration {sum(r['refused'] for r in refusals)}/{len(refusals)} ways, by name "
                f"(a configuration file through load_settings, the tier table handed to the agent)")
    return IncidentResult(5, "permission gap", SEED, measured, "agent router + tiers", verdict(statuses), PRINCIPLE,
                          **counts(statuses),
                          before="route_request with the tier table of agent.default_tier_fallback=false",
                          after="route_request with the configured tier table; the seed's configuration given to "
                                "the production Agent (a file through load_settings, the tier table) is refused",
                          basis=REPLICA,
                          basis_note="production cannot run the before: the Agent refuses "
                                     "agent.default_tier_fallback=false and a tier table whose default tier lacks the "
                                     "general fallback (check_tiers), so the seed's router is rebuilt for this replay",
                          details={"default_tier": default, "gap_before": gap_before, "gap_after": gap_after,
                                   "silent_before": silent_before, "silent_after": silent_after,
                                   "ran_after": ran, "refused_after": refused, "production_refusals": refusals,
                                   "not_as_specified": [r for r in after if not r["as_specified"]],
                                   "gap_cases": gap_cases, "before": before})
