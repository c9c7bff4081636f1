"""Permission policy: capabilities, tiers, requesters and the authorization check.

Every route and every tool needs one capability and a requester's tier grants a set of them;
``authorize`` is the single check, and a refusal is an ``AuthorizationError`` that is logged
(WARNING, logger ``adiyan.agent``) and raised, never swallowed. Kept apart from the loop so the
tier table and its invariant (the default tier can always fall back to general reasoning) can
be read, checked and used (``eval.incidents``) on their own.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Mapping

from .trace import StepTrace

log = logging.getLogger("adiyan.agent")

KB_READ = "kb.read"  # search the KB, find a document, list documents
KB_READ_FULL_TEXT = "kb.read_full_text"  # read a whole document's text
MEMORY_READ = "memory.read"  # search the requester's own conversation memory
GENERAL_REASONING = "general_reasoning"  # answer without documents (the fallback route)
CAPABILITIES = (KB_READ, KB_READ_FULL_TEXT, MEMORY_READ, GENERAL_REASONING)


@dataclass(frozen=True)
class Tier:
    """A permission tier: the capabilities it grants and whether it is the owner role."""

    name: str
    capabilities: frozenset
    is_owner: bool = False

    def __post_init__(self):
        object.__setattr__(self, "capabilities", frozenset(self.capabilities))
        unknown = self.capabilities - set(CAPABILITIES)
        if unknown:
            raise ValueError(f"tier {self.name!r}: unknown capabilities {sorted(unknown)}; known: {CAPABILITIES}")

    def allows(self, capability: str | None) -> bool:
        return capability is None or capability in self.capabilities


TIERS: dict[str, Tier] = {
    "guest": Tier("guest", frozenset({KB_READ, GENERAL_REASONING})),
    "member": Tier("member", frozenset({KB_READ, KB_READ_FULL_TEXT, MEMORY_READ, GENERAL_REASONING})),
    "owner": Tier("owner", frozenset(CAPABILITIES), is_owner=True),
}
DEFAULT_TIER = "guest"


def check_tiers(tiers: Mapping[str, Tier], default: str) -> None:
    """A tier table is usable only if its default tier exists and includes the general fallback."""
    if default not in tiers:
        raise ValueError(f"default tier {default!r} is not in the tier table {sorted(tiers)}")
    if GENERAL_REASONING not in tiers[default].capabilities:
        raise ValueError(f"default tier {default!r} lacks {GENERAL_REASONING!r}: requests it cannot route "
                         "would have nowhere to go (the seed's silently dropped messages)")


check_tiers(TIERS, DEFAULT_TIER)


def tier_table(default_tier_fallback: bool = True) -> dict[str, Tier]:
    """The tier table ``agent.default_tier_fallback`` describes: ``TIERS``, or (False, test-only)
    the seed's table, whose default tier lacks the general fallback. That table fails
    ``check_tiers`` and the agent refuses the setting; only the incident replay routes with it."""
    if default_tier_fallback:
        return dict(TIERS)
    seed = TIERS[DEFAULT_TIER]
    return {**TIERS, DEFAULT_TIER: Tier(seed.name, seed.capabilities - {GENERAL_REASONING}, seed.is_owner)}


def get_tier(tier: "str | Tier", tiers: Mapping[str, Tier] = TIERS) -> Tier:
    if isinstance(tier, Tier):
        return tier
    if tier not in tiers:
        raise ValueError(f"unknown permission tier {tier!r}; tiers: {', '.join(tiers)}")
    return tiers[tier]


def tier_for(requester_id: str | None, assignments: Mapping[str, str] | None = None, *,
             default: str = DEFAULT_TIER, tiers: Mapping[str, Tier] = TIERS) -> Tier:
    """Map a requester to its tier: an explicit assignment, else the default tier."""
    name = (assignments or {}).get(requester_id or "", default)
    return get_tier(name, tiers)


@dataclass(frozen=True)
class Requester:
    id: str | None
    tier: Tier

    @property
    def is_owner(self) -> bool:
        return self.tier.is_owner


class AuthorizationError(PermissionError):
    """A request or tool call needs a capability the requester's tier lacks.

    Raised to the caller and logged; never swallowed. ``steps`` holds the trace up to the
    refusal when the agent raised it.
    """

    def __init__(self, requester_id: str | None, tier: str, route: str, capability: str, tool: str | None = None):
        self.requester_id = requester_id
        self.tier = tier
        self.route = route
        self.capability = capability
        self.tool = tool
        self.steps: list[StepTrace] = []
        what = f"route {route!r}" + (f" (tool {tool!r})" if tool else "")
        super().__init__(f"requester {requester_id!r} with tier {tier!r} may not use {what}: "
                         f"missing capability {capability!r}")


def authorize(requester: Requester, capability: str | None, *, route: str, tool: str | None = None) -> None:
    """Raise (and log at WARNING) an AuthorizationError when the tier lacks ``capability``."""
    if requester.tier.allows(capability):
        return
    err = AuthorizationError(requester.id, requester.tier.name, route, capability, tool)
    log.warning("authorization refused: %s", err,
                extra={"requester_id": requester.id, "tier": requester.tier.name, "route": route,
                       "capability": capability, "tool": tool})
    raise err
