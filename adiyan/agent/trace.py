"""Traces and results: what one agent step did (``StepTrace``) and what a run returns (``AgentResult``).

Plain dataclasses with ``to_dict`` for reports; a trace records sizes and latencies, never raw
tool output.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .scratchpad import Scratchpad


@dataclass
class StepTrace:
    step: int
    tool: str
    args: dict
    action_source: str  # "model" | "fallback" (unparseable reply) | "override" (policy) | "route"
    parse_ok: bool
    parse_error: str | None = None
    note: str | None = None
    ignored_args: list[str] = field(default_factory=list)
    authorized: bool = True
    error: str | None = None
    latency_s: float = 0.0  # the whole step
    decision_latency_s: float = 0.0
    tool_latency_s: float = 0.0
    compaction_latency_s: float = 0.0
    prompt_tokens: int | None = None  # of the decision call
    completion_tokens: int | None = None
    decision_text: str = ""  # the model's reply (its own words; never tool output)
    observation_chars: int = 0  # size of the raw tool output (its content is not kept)
    scratchpad_tokens: int = 0  # size of the full scratchpad after compaction
    n_findings: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class AgentResult:
    answer: str
    steps: list[StepTrace]
    scratchpad: Scratchpad
    stopped_reason: str  # "finished" | "max_steps"
    route: str = ""
    # "model" | "scratchpad" (grounded generation) | "extract" (generation came back empty: the best
    # finding verbatim) | "general_reasoning" | "no_evidence"
    answer_source: str = ""
    synthesis: dict = field(default_factory=dict)
    requester_id: str | None = None
    tier: str = ""

    def to_dict(self) -> dict:
        return {"answer": self.answer, "stopped_reason": self.stopped_reason, "route": self.route,
                "answer_source": self.answer_source, "requester_id": self.requester_id, "tier": self.tier,
                "synthesis": self.synthesis, "steps": [s.to_dict() for s in self.steps],
                "scratchpad": self.scratchpad.to_dict()}
