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
    # "model" (the model's parsed action was run) | "default" (the default action: the reply was
    # unusable, or a rule overrode it; ``note`` says which) | "route" (the routing check)
    action_source: str
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
    # issue 25: how the decision was asked and what the model chose beside the default action
    structured: str | None = None  # grammar | json_schema | json_object | format | none
    schema_valid: bool | None = None  # the reply was valid under the action schema
    schema_error: str | None = None
    parse_via: str | None = None  # "schema" | "text" (the tolerant parser) | None (unparseable)
    model_tool: str | None = None  # the model's parsed action, whether or not it was run
    model_args: dict | None = None
    default_tool: str | None = None  # the default action at that step
    default_args: dict | None = None

    @property
    def model_differs(self) -> bool | None:
        """Whether the model's parsed action differs from the default action (None: no parsed action)."""
        if self.model_tool is None:
            return None
        return (self.model_tool, self.model_args) != (self.default_tool, self.default_args)

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
