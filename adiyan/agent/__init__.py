"""The research agent: a capped ReAct loop over the knowledge base's read paths and memory.

Shape of one run (``Agent.run``):

1. **Route and authorize.** ``route_request`` sends the message to a route (``kb_question``,
   ``document_request``, ``memory_question``, ``general``) with simple rules; each route needs
   one capability, and a requester whose permission tier lacks it gets an ``AuthorizationError``
   that is logged (WARNING, logger ``adiyan.agent``), recorded in the trace and raised to the
   caller. Nothing is dropped silently (the seed's fifth incident: a permission gap silently
   dropped every message). The default tier includes the general-reasoning fallback, and that
   is checked when the tier table is built.
2. **Decide.** The decision prompt is the question, the *rendered scratchpad* and the tools the
   tier may use. It never contains raw tool output. The model's reply is parsed tolerantly
   (``Action: name`` / ``Action Input: {json}``, JSON objects, ``name(arg=...)``, ``Final
   Answer:``); when it cannot be parsed, a deterministic default action is taken instead
   (e.g. ``search_kb(question)`` first, then ``finish``) and the trace says so.
3. **Authorize the tool, run it** under the caller's identity: tools are closures bound to the
   requester id and owner flag; no tool parameter names an identity, and argument keys the tool
   does not declare are dropped (and listed in the trace), so the model can never widen access.
4. **Compact.** ``compact`` turns the raw tool output into scratchpad entries: findings (the
   sentences of the top chunks most similar to the question, with source and chunk index),
   documents checked, leads, open questions and a one-line summary of the action. It is
   extractive and deterministic (embedding similarity with the KB's embedder, or word overlap).
5. **Trace** the step: tool, arguments, latencies, decision tokens, parse status, scratchpad size.

The loop stops on ``finish`` or after ``settings.agent.max_steps`` steps; then the answer is
generated from the scratchpad's findings with grounded generation (``generation.answer_question``).
Under strict grounding a knowledge answer needs evidence: a ``finish`` before any tool call is
replaced by the default action, and a model's final answer whose figures (numbers, codes) do not
appear in the findings is replaced by grounded generation from them. When that generation comes
back empty, the best finding is quoted as the answer and labelled ``extractive_fallback``
(``answer_source == "extract"``), never ``grounded_generation``.

The package is split by responsibility: ``policy`` (capabilities, tiers, authorization),
``routing``, ``tools``, ``parsing`` (the model's action), ``scratchpad``, ``compaction``,
``trace`` (step traces, results) and ``loop`` (the ``Agent``). Everything is re-exported here,
so ``from adiyan.agent import X`` is the way in.
"""

from __future__ import annotations

from .compaction import compact, sentence_scores, split_sentences
from .loop import DECISION_SYSTEM, GENERAL_SYSTEM, Agent
from .parsing import ParsedAction, parse_action
from .policy import (
    CAPABILITIES, DEFAULT_TIER, GENERAL_REASONING, KB_READ, KB_READ_FULL_TEXT, MEMORY_READ, TIERS, AuthorizationError,
    Requester, Tier, authorize, check_tiers, get_tier, tier_for, tier_table,
)
from .routing import ROUTES, Route, classify_request, route_request
from .scratchpad import Finding, Scratchpad
from .tools import TOOL_ALIASES, DocumentText, ToolError, ToolFailure, ToolSpec, build_tools
from .trace import AgentResult, StepTrace

__all__ = [
    # policy
    "CAPABILITIES", "DEFAULT_TIER", "GENERAL_REASONING", "KB_READ", "KB_READ_FULL_TEXT", "MEMORY_READ", "TIERS",
    "AuthorizationError", "Requester", "Tier", "authorize", "check_tiers", "get_tier", "tier_for", "tier_table",
    # routing
    "ROUTES", "Route", "classify_request", "route_request",
    # tools
    "TOOL_ALIASES", "DocumentText", "ToolError", "ToolFailure", "ToolSpec", "build_tools",
    # parsing
    "ParsedAction", "parse_action",
    # scratchpad and compaction
    "Finding", "Scratchpad", "compact", "sentence_scores", "split_sentences",
    # traces and results
    "AgentResult", "StepTrace",
    # the loop
    "DECISION_SYSTEM", "GENERAL_SYSTEM", "Agent",
]
