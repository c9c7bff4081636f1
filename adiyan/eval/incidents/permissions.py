"""Incident 5, permission gap: the seed's default tier lacked the general fallback, and its router
dropped every message it could not route, silently.

Both halves run the real router (``adiyan.agent.route_request``) over every message × tier of
``evalsets/incidents/permission_gap.yaml``. *Before*: the tier table of
``agent.default_tier_fallback=false`` (the seed's default tier, without general reasoning; a
test-only setting the agent refuses). *After*: the configured tier table. Each call is classed
by what the caller sees: the route ran, an ``AuthorizationError`` was raised *and* logged at
WARNING (visible), or anything else (silent: nothing returned, or refused without a trace).

What the before can show, honestly: the production router no longer has a code path that
swallows a refusal, so the seed's silence is not reproduced; what the configuration reproduces
is the gap itself: default-tier messages with nowhere to go. The after must close the gap, run
or refuse every case exactly as specified, and leave nothing silent.
"""

from __future__ import annotations

import logging

from ...agent import ROUTES, AuthorizationError, Requester, route_request, tier_table
from .common import VIOLATED, IncidentResult, classify, counts, load_spec, verdict

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
    statuses = [r["status"] for r in gap_cases] + [VIOLATED] * len(off_spec)
    ran = sum(r["outcome"] == "ran" for r in after)
    refused = sum(r["outcome"] == "refused" for r in after)
    n = len(after)
    measured = (f"before (tier table without the default tier's general fallback): {gap_before}/{len(gap_cases)} "
                f"{default} messages for the general route had nowhere to go (refused, {silent_before} silent: the "
                f"router no longer drops anything); after: {gap_after} without a route, "
                f"{sum(r['as_specified'] for r in after)}/{n} route × tier cases as specified ({ran} ran, {refused} "
                f"raised a logged AuthorizationError, {silent_after} silent)")
    return IncidentResult(5, "permission gap", SEED, measured, "agent router + tiers", verdict(statuses), PRINCIPLE,
                          **counts(statuses),
                          before="route_request with the tier table of agent.default_tier_fallback=false",
                          after="route_request with the configured tier table",
                          details={"default_tier": default, "gap_before": gap_before, "gap_after": gap_after,
                                   "silent_before": silent_before, "silent_after": silent_after,
                                   "ran_after": ran, "refused_after": refused,
                                   "not_as_specified": [r for r in after if not r["as_specified"]],
                                   "gap_cases": gap_cases, "before": before})
