"""The ReAct loop: the ``Agent`` class, its decision prompts, default actions and the final answer.

One run routes and authorizes the message, then per step decides (the model's reply parsed, or
a deterministic default action), authorizes and runs the tool, compacts its output and traces
the step; it stops on ``finish`` or after ``settings.agent.max_steps`` and answers from the
scratchpad's findings (see the package docstring for the whole shape).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Callable, Mapping

from ..generation import NO_CONTEXT_ANSWER, answer_question, approx_tokens
from ..kb import DocumentNotFound
from ..models.base import ChatMessage
from ..models.structured import chat_json
from ..retrieval import Retriever, UnsupportedSetting
from ..types import RetrievedChunk
from .compaction import _FIGURE, _content_words, _short, compact
from .parsing import ParsedAction, action_schema, parse_action, parse_structured_action
from .policy import (
    DEFAULT_TIER, GENERAL_REASONING, KB_READ, KB_READ_FULL_TEXT, MEMORY_READ, TIERS, AuthorizationError, Requester,
    Tier, authorize, check_tiers, get_tier,
)
from .routing import classify_request, route_request
from .scratchpad import Finding, Scratchpad
from .tools import ToolError, ToolFailure, ToolSpec, build_tools
from .trace import AgentResult, StepTrace

log = logging.getLogger("adiyan.agent")

DECISION_SYSTEM = (
    "You are a research agent. You answer the user's question by calling one tool per step. "
    "You only see your scratchpad of notes from earlier steps.\n\nTools:\n{tools}\n\n"
    "Reply with one JSON object: {{\"action\": {{\"tool\": <tool name>, \"args\": <the tool's arguments>}}}}, "
    "for example {{\"action\": {{\"tool\": \"search_kb\", \"args\": {{\"query\": \"<words to search for>\"}}}}}}\n"
    "Call finish with the answer once the scratchpad's findings answer the question."
)
GENERAL_SYSTEM = ("You are a helpful assistant. Answer briefly. You have no documents for this message, "
                  "so do not claim facts from any document.")
_KB_TOOLS = ("search_kb", "search_document", "find_document", "read_document", "list_documents", "search_memory")


def _call_key(tool: str, args: Mapping) -> str:
    return tool + json.dumps(dict(args), sort_keys=True)


@dataclass
class _Action:
    tool: str
    args: dict
    source: str
    parse: ParsedAction | None = None
    note: str | None = None


class Agent:
    """A ReAct agent answering as ``requester_id`` within the permissions of ``tier``."""

    def __init__(self, llm, kb, memory=None, settings=None, tier: "str | Tier" = DEFAULT_TIER,
                 requester_id: str | None = None, *, retriever=None, compactor: Callable[..., Scratchpad] = compact,
                 decision_max_tokens: int = 160, read_max_chars: int = 4000, synthesis_ratio: float = 0.75,
                 tiers: Mapping[str, Tier] = TIERS):
        """``retriever`` defaults to the pipeline ``settings`` describe over ``kb`` (the LLM is
        passed for HyDE)."""
        if settings is None:
            raise ValueError("Agent needs the settings (generation, agent, llm and retrieval sections)")
        if not settings.agent.default_tier_fallback:
            raise UnsupportedSetting("agent.default_tier_fallback=false", "the agent",
                                     "the default tier must keep the general fallback (check_tiers); the setting "
                                     "exists only for the permission-gap incident replay's router")
        check_tiers(tiers, DEFAULT_TIER)  # a tier table handed in is held to the same rule as the shipped one
        self.llm = llm
        self.kb = kb
        self.memory = memory
        self.settings = settings
        self.retriever = retriever if retriever is not None else Retriever.from_settings(settings, kb, llm)
        self.requester = Requester(requester_id, get_tier(tier, tiers))
        self.compactor = compactor
        self.decision_max_tokens = decision_max_tokens
        self.synthesis_ratio = synthesis_ratio
        self.tools = build_tools(kb, memory, self.requester, retriever=self.retriever,
                                 read_max_chars=read_max_chars)
        self.last_steps: list[StepTrace] = []

    # the tools shown to the model: those the tier may use (memory only when there is one)
    def visible_tools(self) -> list[ToolSpec]:
        return [t for t in self.tools.values() if self.requester.tier.allows(t.capability)
                and not (t.name == "search_memory" and self.memory is None)]

    def _scratchpad_budget(self, fixed_prompt: str) -> int:
        ctx = int(getattr(self.llm, "context_size", 2048) or 2048)
        room = int((ctx - self.decision_max_tokens) * 0.8) - approx_tokens(fixed_prompt)
        # agent.scratchpad_budget_tokens (None: the generation budget), within the model's window
        budget = self.settings.agent.scratchpad_budget_tokens or self.settings.generation.context_budget_tokens
        return max(64, min(budget, room))

    def decision_messages(self, question: str, pad: Scratchpad, step: int, max_steps: int) -> list[ChatMessage]:
        tools = "\n".join(f"- {t.signature()}: {t.description}" for t in self.visible_tools())
        system = DECISION_SYSTEM.format(tools=tools)
        head = f"Question: {question}\n\nScratchpad:\n"
        tail = f"\n\nStep {step} of {max_steps}. What is the next action?"
        budget = self._scratchpad_budget(system + head + tail)
        return [ChatMessage("system", system), ChatMessage("user", head + pad.render(budget) + tail)]

    def default_action(self, route: str, question: str, pad: Scratchpad, done_calls: set[str]) -> _Action:
        """The deterministic action taken when the model's reply is unusable: the route's plan
        (e.g. search_kb(question)), skipping calls already made; then finish."""
        allows = self.requester.tier.allows

        def fresh(tool: str, args: dict) -> bool:
            return _call_key(tool, args) not in done_calls

        if route == "memory_question" and allows(MEMORY_READ) and fresh("search_memory", {"query": question}):
            return _Action("search_memory", {"query": question}, "default")
        if route == "document_request" and allows(KB_READ_FULL_TEXT):
            if fresh("find_document", {"query": question}):
                return _Action("find_document", {"query": question}, "default")
            unread = [s for s in pad.leads if s not in pad.documents_checked and fresh("read_document", {"source": s})]
            if unread:
                return _Action("read_document", {"source": unread[0]}, "default")
        if route != "general" and allows(KB_READ) and fresh("search_kb", {"query": question}):
            return _Action("search_kb", {"query": question}, "default")
        return _Action("finish", {"answer": ""}, "default")

    def _decide(self, question, route, pad, step, max_steps, called, done_calls, tr: StepTrace) -> _Action:
        """The model's action, asked for through the tier's action schema (adiyan.models.structured:
        a grammar, response_format or Ollama format; free text when the backend cannot constrain),
        or the default action (source ``default``) when its reply is unusable or a rule overrides it.
        The trace keeps both the model's action and the default one, so how often they differ is
        measured."""
        messages = self.decision_messages(question, pad, step, max_steps)
        visible = {t.name: t for t in self.visible_tools()}
        default = self.default_action(route, question, pad, done_calls)
        t0 = time.perf_counter()
        schema = action_schema(visible.values(), max_tokens=self.decision_max_tokens)
        reply = chat_json(self.llm, messages, schema, name="agent_action",
                          max_tokens=self.decision_max_tokens, temperature=self.settings.llm.temperature)
        tr.decision_latency_s = time.perf_counter() - t0
        tr.prompt_tokens = reply.prompt_tokens if reply.prompt_tokens is not None else \
            sum(approx_tokens(m.content) for m in messages)
        tr.completion_tokens = reply.completion_tokens if reply.completion_tokens is not None else \
            approx_tokens(reply.text)
        tr.decision_text = (reply.text or "")[:600]
        tr.structured, tr.schema_valid, tr.schema_error = reply.mode, reply.ok, reply.error or None
        if reply.ok:
            parsed, tr.parse_via = parse_structured_action(reply.value, visible, question=question), "schema"
        else:  # the tolerant text parser, over every tool (a tool beyond the tier is refused when run)
            parsed, tr.parse_via = parse_action(reply.text, self.tools, question=question), "text"
        tr.parse_ok, tr.parse_error, tr.ignored_args = parsed.ok, parsed.error, parsed.ignored_args
        tr.default_tool, tr.default_args = default.tool, dict(default.args)
        if parsed.ok:
            tr.model_tool, tr.model_args = parsed.tool, dict(parsed.args)
        if not parsed.ok:
            tr.parse_via = None
            default.parse = parsed
            default.note = f"unparseable reply ({parsed.error}): default action"
            return default
        act = _Action(parsed.tool, parsed.args, "model", parsed)
        strict = self.settings.generation.strict_grounding
        if act.tool == "finish" and route != "general" and strict and not (called & set(_KB_TOOLS)):
            if default.tool != "finish":
                default.note = "finish before any evidence under strict grounding: default action"
                return default
        if act.tool != "finish" and _call_key(act.tool, act.args) in done_calls:
            default.note = "repeated an earlier call: default action"
            return default
        return act

    def _refuse(self, err: AuthorizationError, steps: list[StepTrace], tr: StepTrace) -> AuthorizationError:
        tr.authorized, tr.error = False, str(err)
        steps.append(tr)
        err.steps = list(steps)
        self.last_steps = list(steps)
        return err

    def run(self, question: str, *, context=None) -> AgentResult:
        """``context``: a conversation turn's three parts (adiyan.context.TurnContext); its facts and
        relevant history go into the final grounded generation, in that order before the message."""
        max_steps = self.settings.agent.max_steps
        steps: list[StepTrace] = []
        self.last_steps = steps
        self._turn_context = context
        try:
            route = route_request(question, self.requester)
        except AuthorizationError as err:
            route = classify_request(question)
            raise self._refuse(err, steps, StepTrace(0, f"route:{route}", {}, "route", True)) from None
        pad = Scratchpad()
        called: set[str] = set()
        done_calls: set[str] = set()
        stopped, final = "max_steps", None
        for step in range(1, max_steps + 1):
            t_step = time.perf_counter()
            tr = StepTrace(step, "", {}, "model", True)
            act = self._decide(question, route, pad, step, max_steps, called, done_calls, tr)
            tr.tool, tr.args, tr.action_source, tr.note = act.tool, dict(act.args), act.source, act.note
            spec = self.tools[act.tool]
            try:
                authorize(self.requester, spec.capability, route=route, tool=spec.name)
            except AuthorizationError as err:
                tr.latency_s = time.perf_counter() - t_step
                raise self._refuse(err, steps, tr) from None
            if act.tool == "finish":
                tr.latency_s = time.perf_counter() - t_step
                tr.scratchpad_tokens, tr.n_findings = approx_tokens(pad.render(10**9)), len(pad.findings)
                steps.append(tr)
                log.info("agent step %d: finish (%s)", step, act.source)
                final = self._final_answer_traced(question, route, pad, steps,
                                                  act.args.get("answer", "") if act.source == "model" else "")
                stopped = "finished"
                break
            t0 = time.perf_counter()
            try:
                raw = spec.fn(**{p: act.args[p] for p in spec.params})
            except (DocumentNotFound, ToolError) as exc:
                raw = ToolFailure(f"{type(exc).__name__}: {exc}")
                tr.error = raw.error
            tr.tool_latency_s = time.perf_counter() - t0
            tr.observation_chars = len(repr(raw))
            called.add(act.tool)
            done_calls.add(_call_key(act.tool, act.args))
            t0 = time.perf_counter()
            pad = self.compactor(pad, act.tool, dict(act.args), raw, question=question,
                                 embedder=getattr(self.kb, "embedder", None), step=step)
            tr.compaction_latency_s = time.perf_counter() - t0
            tr.scratchpad_tokens, tr.n_findings = approx_tokens(pad.render(10**9)), len(pad.findings)
            tr.latency_s = time.perf_counter() - t_step
            steps.append(tr)
            log.info("agent step %d: %s %s (%s) %.2fs, %d finding(s)", step, act.tool, _short(act.args),
                     act.source, tr.latency_s, tr.n_findings)
        if final is None:
            final = self._final_answer_traced(question, route, pad, steps, "")
        answer, source, synthesis = final
        return AgentResult(answer, steps, pad, stopped, route, source, synthesis, self.requester.id,
                           self.requester.tier.name)

    # -- the final answer ------------------------------------------------------------------------
    def _final_answer_traced(self, question, route, pad, steps, model_answer):
        try:
            return self._final_answer(question, route, pad, model_answer)
        except AuthorizationError as err:  # the general-reasoning fallback is itself a capability
            tr = StepTrace(len(steps) + 1, err.tool or "final_answer", {}, "default", True)
            raise self._refuse(err, steps, tr) from None

    def _grounded(self, answer: str, pad: Scratchpad) -> bool:
        if not pad.findings:
            return False
        evidence = " ".join(f.text for f in pad.findings).lower()
        figures = [f.strip(".,").lower() for f in _FIGURE.findall(answer)]
        if any(f and f not in evidence for f in figures):
            return False
        return bool(figures) or len(_content_words(answer) & _content_words(evidence)) >= 2

    def _final_answer(self, question: str, route: str, pad: Scratchpad, model_answer: str):
        strict = self.settings.generation.strict_grounding
        model_answer = (model_answer or "").strip()
        if model_answer and (route == "general" or not strict or self._grounded(model_answer, pad)):
            return model_answer, "model", {}
        t0 = time.perf_counter()
        if pad.findings:
            chunks = self._finding_chunks(pad)
            tc = getattr(self, "_turn_context", None)
            ans = answer_question(self.llm, question, chunks, self.settings,
                                  memory=tc.fact_lines() if tc is not None else (),
                                  history=tc.history_messages() if tc is not None else ())
            meta = {"latency_s": time.perf_counter() - t0, "prompt_tokens": ans.prompt_tokens,
                    "completion_tokens": ans.completion_tokens, "used": ans.used,
                    "rejected_model_answer": model_answer or None}
            if ans.text.strip():
                return ans.text.strip(), "scratchpad", {"kind": "grounded_generation", **meta}
            # the model wrote nothing: the best finding, quoted, answers, and the result says so
            log.warning("agent: grounded generation came back empty; answering with the best finding verbatim")
            return pad.best_findings()[0].text, "extract", {"kind": "extractive_fallback", "empty_generation": True,
                                                            **meta}
        if route == "general" or not strict:
            authorize(self.requester, GENERAL_REASONING, route=route, tool="general_reasoning")
            out = self.llm.chat([ChatMessage("system", GENERAL_SYSTEM), ChatMessage("user", question)],
                                temperature=self.settings.llm.temperature)
            text = (out.text or "").strip() or NO_CONTEXT_ANSWER
            return text, "general_reasoning", {"kind": "general_reasoning", "latency_s": time.perf_counter() - t0,
                                                "prompt_tokens": out.prompt_tokens,
                                                "completion_tokens": out.completion_tokens}
        return NO_CONTEXT_ANSWER, "no_evidence", {"kind": "no_evidence",
                                                  "rejected_model_answer": model_answer or None}

    def _finding_chunks(self, pad: Scratchpad) -> list[RetrievedChunk]:
        """Findings scoring at least ``synthesis_ratio`` of the best, grouped by (source, chunk) into
        RetrievedChunk blocks, best first, within the context budget."""
        ranked = pad.best_findings()
        top = ranked[0].score if ranked else 0.0
        groups: dict[tuple, list[Finding]] = {}
        for f in ranked:
            if top > 0 and f.score < self.synthesis_ratio * top:
                break  # small models answer best from a few strong findings
            groups.setdefault((f.source, f.chunk_index), []).append(f)
        ctx = int(getattr(self.llm, "context_size", 2048) or 2048)
        budget = min(self.settings.generation.context_budget_tokens, max(64, int(ctx * 0.6)))
        chunks, used = [], 0
        for (src, idx), fs in groups.items():
            text = " ".join(f.text for f in fs)
            n = approx_tokens(text) + 8
            if chunks and used + n > budget:
                break
            chunks.append(RetrievedChunk(src, -1 if idx is None else idx, max(f.score for f in fs), text))
            used += n
        return chunks
