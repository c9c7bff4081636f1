"""The agent: a capped ReAct loop, compaction between tool output and decisions, permission tiers.

Control flow is tested with a scripted model (a test double, see ``ScriptedLLM``) over a real
knowledge base (minilm, Qdrant's embedded engine); the last test runs the real embedded LLM
(SmolLM2-135M) end to end.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass

import pytest

from adiyan.agent import (
    DEFAULT_TIER, GENERAL_REASONING, KB_READ, ROUTES, TIERS, Agent, AgentResult, AuthorizationError, Finding,
    Requester, Scratchpad, Tier, build_tools, check_tiers, classify_request, compact, get_tier, parse_action,
    route_request, tier_for, tier_table,
)
from adiyan.generation import NO_CONTEXT_ANSWER, approx_tokens
from adiyan.factory import open_kb, open_retriever

from adiyan.models.base import Completion, as_messages
from adiyan.retrieval import UnsupportedSetting
from adiyan.store import open_store

QUESTION = "How much does the Julian Alps Weekend cost per person?"
SENTINEL = "ZQX-5521"  # in the Julian chunk, in a sentence compaction does not extract
JULIAN = ("# Julian Alps Weekend\n\nThe Julian Alps Weekend (TR-JUL-03) is a guided two-day hiking trip from "
          "Ljubljana. It costs 450 euros per person, including lodging and breakfast. Archive marker "
          f"{SENTINEL} is kept for bookkeeping.\n")
OFFICE = "# Office hours\n\nThe Ljubljana office opens at 9 am and closes at 5 pm on weekdays.\n"
BLED = "# Lake Bled Day Trip\n\nThe Lake Bled Day Trip departs at 8 am and costs 95 euros.\n"
SAFE = "# Safe\n\nThe safe code of the Ljubljana office is 7319.\n"
# What a leak of SAFE would carry. Not the bare "7319": a raw search result's repr holds float scores and
# timings (e.g. 'search_s': 0.0137319...), which contain any 4-digit string now and then (the CI flake of
# 4 Dec 2026); "is 7319" cannot occur inside a number.
SECRET = "is 7319"


class ScriptedLLM:
    """A test double for control flow only: it replies from a script and never reasons.

    Decision prompts (recognised by the agent's tool-format instruction) get ``decide(n, prompt)``
    for the n-th decision; any other prompt (grounded generation, general reasoning) gets
    ``answer``. Every prompt is recorded, so tests can inspect exactly what the model saw.
    """

    id = "scripted"
    context_size = 2048

    def __init__(self, decide, answer: str = "scripted answer"):
        self.decide = decide
        self.answer = answer
        self.decision_prompts: list[str] = []
        self.other_prompts: list[str] = []

    def chat(self, messages, *, max_tokens=None, temperature=None) -> Completion:
        msgs = as_messages(messages)
        prompt = "\n".join(m["content"] for m in msgs)
        if "Tools:\n" in msgs[0]["content"]:  # the decision prompt
            self.decision_prompts.append(prompt)
            text = self.decide(len(self.decision_prompts), prompt)
        else:
            self.other_prompts.append(prompt)
            text = self.answer
        return Completion(text, approx_tokens(prompt), approx_tokens(text), self.id)


@dataclass
class MemoryHit:
    text: str
    score: float


class RecordingMemory:
    """A test double for the memory interface (``search(query, *, user_id, k)``; the real memory is
    ``adiyan/memory.py``): one fixed hit for bob, nothing for anyone else; records every call."""

    def __init__(self):
        self.calls: list[tuple] = []

    def search(self, query, *, user_id, k):
        self.calls.append((query, user_id, k))
        return [MemoryHit("You told me your travel dates are 3 to 5 May.", 0.8)] if user_id == "bob" else []


@pytest.fixture
def kb(make_settings, minilm):
    s = make_settings()
    store = open_store(s)
    kb = open_kb(s, embedder=minilm, store=store)
    kb.rp = open_retriever(s, kb)  # the six read paths over this KB
    kb.settings = s  # test convenience: the settings the agent runs with unless a test passes others
    kb.ingest_text(JULIAN, "julian.md", "office", "global")
    kb.ingest_text(OFFICE, "office.md", "office", "global")
    kb.ingest_text(BLED, "bled.md", "office", "global")
    kb.ingest_text(SAFE, "safe.md", "alice", "private")
    yield kb
    store.close()


def counting_compactor(calls: list):
    def run(pad, tool, args, raw, **kw):
        calls.append((tool, raw))
        return compact(pad, tool, args, raw, **kw)
    return run


def _chunk_texts(raw) -> list[str]:
    return [c.text for c in getattr(raw, "chunks", [])]


# -- the loop -----------------------------------------------------------------------------------


@pytest.mark.parametrize("max_steps", [10, 3])
def test_a_model_that_never_finishes_stops_at_max_steps_and_never_sees_raw_output(kb, max_steps):
    settings = kb.settings.with_overrides({"agent.max_steps": max_steps})
    llm = ScriptedLLM(lambda n, _: f'Action: search_kb\nAction Input: {{"query": "Julian Alps Weekend {n}"}}')
    calls: list = []
    agent = Agent(llm, kb, settings=settings, tier="member", requester_id="bob", compactor=counting_compactor(calls))
    res = agent.run(QUESTION)

    assert res.stopped_reason == "max_steps"
    assert len(res.steps) == max_steps == len(llm.decision_prompts)
    assert [s.tool for s in res.steps] == ["search_kb"] * max_steps
    assert all(s.action_source == "model" and s.parse_ok for s in res.steps)
    assert len(calls) == max_steps  # compaction ran after every tool call
    # the raw output held the whole chunk, sentinel included ...
    raw_texts = [t for _, raw in calls for t in _chunk_texts(raw)]
    assert any(SENTINEL in t for t in raw_texts)
    julian_chunk = next(t for t in raw_texts if SENTINEL in t)
    # ... the decisions saw only the scratchpad: compacted findings, never the raw chunk
    for prompt in llm.decision_prompts:
        assert SENTINEL not in prompt
        assert julian_chunk not in prompt
    assert all("450 euros per person" in p for p in llm.decision_prompts[1:])  # findings do reach it
    assert any("450" in f.text and f.source == "office/julian.md" and f.chunk_index == 0
               for f in res.scratchpad.findings)
    # the answer comes from the scratchpad by grounded generation
    assert res.answer == "scripted answer" and res.answer_source == "scratchpad"
    assert "450 euros per person" in llm.other_prompts[-1] and SENTINEL not in llm.other_prompts[-1]
    for s in res.steps:
        assert s.latency_s > 0 and s.prompt_tokens and s.completion_tokens and s.n_findings >= 1


def test_unparseable_replies_fall_back_to_search_then_finish(kb):
    llm = ScriptedLLM(lambda n, _: "Sure! The next action is to think about the Alps.")
    res = Agent(llm, kb, settings=kb.settings, tier="guest", requester_id="bob").run(QUESTION)
    assert [s.tool for s in res.steps] == ["search_kb", "finish"]
    assert res.steps[0].args == {"query": QUESTION}
    assert all(not s.parse_ok and s.action_source == "default" and "unparseable" in s.note for s in res.steps)
    assert res.stopped_reason == "finished" and res.answer == "scripted answer"


def test_finish_before_evidence_is_overridden_and_ungrounded_answers_are_replaced(kb):
    script = {1: 'Action: finish\nAction Input: {"answer": "It costs 2200 euros."}',
              2: 'Action: finish\nAction Input: {"answer": "It costs 2200 euros."}'}
    llm = ScriptedLLM(lambda n, _: script[n], answer="It costs 450 euros per person.")
    res = Agent(llm, kb, settings=kb.settings, tier="guest", requester_id="bob").run(QUESTION)
    assert res.steps[0].tool == "search_kb" and res.steps[0].action_source == "default"
    assert res.steps[1].tool == "finish"
    assert res.answer == "It costs 450 euros per person." and res.answer_source == "scratchpad"
    assert res.synthesis["rejected_model_answer"] == "It costs 2200 euros."
    # a grounded model answer is kept
    script[2] = 'Action: finish\nAction Input: {"answer": "450 euros per person (TR-JUL-03)."}'
    llm2 = ScriptedLLM(lambda n, _: script[n])
    res2 = Agent(llm2, kb, settings=kb.settings, tier="guest", requester_id="bob").run(QUESTION)
    assert res2.answer == "450 euros per person (TR-JUL-03)." and res2.answer_source == "model"


def test_repeating_a_call_is_replaced_by_the_default_action(kb):
    llm = ScriptedLLM(lambda n, _: 'Action: search_kb\nAction Input: {"query": "Julian Alps"}')
    res = Agent(llm, kb, settings=kb.settings, tier="guest", requester_id="bob").run(QUESTION)
    assert [s.tool for s in res.steps] == ["search_kb", "search_kb", "finish"]
    assert res.steps[1].args == {"query": QUESTION} and res.steps[1].note.startswith("repeated")
    assert res.stopped_reason == "finished"


# -- identity and permissions -------------------------------------------------------------------


def test_a_tool_beyond_the_tier_raises_to_the_caller_is_logged_and_traced(kb, caplog):
    script = {1: 'Action: search_kb\nAction Input: {"query": "Julian Alps"}',
              2: 'Action: read_document\nAction Input: {"source": "office/julian.md"}'}
    llm = ScriptedLLM(lambda n, _: script[n])
    calls: list = []
    agent = Agent(llm, kb, settings=kb.settings, tier="guest", requester_id="bob", compactor=counting_compactor(calls))
    with caplog.at_level(logging.WARNING, logger="adiyan.agent"):
        with pytest.raises(AuthorizationError) as ei:
            agent.run(QUESTION)
    err = ei.value
    assert isinstance(err, PermissionError)
    assert (err.requester_id, err.tier, err.route, err.tool, err.capability) == \
        ("bob", "guest", "kb_question", "read_document", "kb.read_full_text")
    for part in ("'bob'", "'guest'", "'kb_question'", "'read_document'", "'kb.read_full_text'"):
        assert part in str(err)
    recs = [r for r in caplog.records if r.name == "adiyan.agent" and r.levelno == logging.WARNING]
    assert len(recs) == 1 and "read_document" in recs[0].getMessage() and recs[0].capability == "kb.read_full_text"
    assert [s.tool for s in err.steps] == ["search_kb", "read_document"]
    assert err.steps[-1].authorized is False and "kb.read_full_text" in err.steps[-1].error
    assert agent.last_steps == err.steps
    assert len(calls) == 1  # the refused tool never ran
    assert "read_document" not in llm.decision_prompts[0]  # the tier's tool list does not offer it


def test_the_model_cannot_name_another_identity(kb):
    for spec in build_tools(kb, RecordingMemory(), "bob", retriever=kb.rp).values():
        assert not {"requester_id", "is_owner", "user_id", "owner", "owner_identity"} & set(spec.params)
    script = {1: 'Action: search_kb\nAction Input: {"query": "safe code of the Ljubljana office", '
                 '"requester_id": "alice", "is_owner": true}',
              2: 'Action: read_document\nAction Input: {"source": "alice/safe.md", "requester_id": "alice"}',
              3: 'Action: search_document\nAction Input: {"source": "safe.md", "query": "safe code"}',
              4: 'Action: finish\nAction Input: {"answer": "I could not find it."}'}
    calls: list = []
    llm = ScriptedLLM(lambda n, _: script[n])
    res = Agent(llm, kb, settings=kb.settings, tier="member", requester_id="bob", compactor=counting_compactor(calls)).run(
        "What is the safe code of the Ljubljana office?")
    assert res.steps[0].ignored_args == ["requester_id", "is_owner"]
    assert "DocumentNotFound" in res.steps[1].error and "DocumentNotFound" in res.steps[2].error
    assert not any(SECRET in repr(raw) for _, raw in calls)
    assert not any(SECRET in p for p in llm.decision_prompts + llm.other_prompts) and SECRET not in res.answer
    # alice, its owner, reads it through the same tools
    llm_a = ScriptedLLM(lambda n, _: script[n] if n < 3 else script[4])
    calls_a: list = []
    res_a = Agent(llm_a, kb, settings=kb.settings, tier="member", requester_id="alice",
                  compactor=counting_compactor(calls_a)).run("What is the safe code of the Ljubljana office?")
    assert any(SECRET in f.text for f in res_a.scratchpad.findings)
    assert any(SECRET in repr(raw) for _, raw in calls_a)  # the check on bob's raw outputs can fail


ROUTE_MESSAGES = {
    "kb_question": QUESTION,
    "document_request": "Send me the full text of the Julian Alps document",
    "memory_question": "What did I tell you last time about my travel dates?",
    "general": "Hello! Who are you?",
}


def test_every_route_has_a_message_and_a_capability():
    assert set(ROUTE_MESSAGES) == set(ROUTES)
    for name, msg in ROUTE_MESSAGES.items():
        assert classify_request(msg) == name
    assert {r.capability for r in ROUTES.values()} <= set().union(*(t.capabilities for t in TIERS.values()))


@pytest.mark.parametrize("route,tier", list(itertools.product(sorted(ROUTES), sorted(TIERS))))
def test_route_by_tier_runs_or_raises_never_silent(kb, caplog, route, tier):
    memory = RecordingMemory()
    llm = ScriptedLLM(lambda n, _: "(no idea what to do)")  # every decision takes the default action
    agent = Agent(llm, kb, settings=kb.settings, memory=memory, tier=tier, requester_id="bob")
    message = ROUTE_MESSAGES[route]
    if TIERS[tier].allows(ROUTES[route].capability):
        res = agent.run(message)
        assert isinstance(res, AgentResult) and res.route == route
        assert isinstance(res.answer, str) and res.answer.strip()
        assert res.stopped_reason in ("finished", "max_steps") and res.steps
        assert all(user == "bob" for _, user, _ in memory.calls)
        if route == "memory_question":
            assert res.steps[0].tool == "search_memory"
            assert any("3 to 5 May" in f.text for f in res.scratchpad.findings)
        if route == "document_request":
            assert [s.tool for s in res.steps[:2]] == ["find_document", "read_document"]
            assert "office/julian.md" in res.scratchpad.documents_checked
    else:
        with caplog.at_level(logging.WARNING, logger="adiyan.agent"):
            with pytest.raises(AuthorizationError) as ei:
                agent.run(message)
        assert ei.value.route == route and ei.value.capability == ROUTES[route].capability
        assert any(r.levelno == logging.WARNING and route in r.getMessage() for r in caplog.records)
        assert ei.value.steps and ei.value.steps[0].authorized is False
        assert llm.decision_prompts == [] and memory.calls == []


def test_router_rules():
    cases = {
        "Do you remember what hotel I picked?": "memory_question",
        "we discussed a budget earlier, what was it?": "memory_question",
        "Please send me the file about Lake Bled": "document_request",
        "Show me the whole document on office hours": "document_request",
        "thanks!": "general",
        "Write a poem about mountains": "general",
        "2 + 2": "general",
        "": "general",
        "lorem ipsum dolor": "general",
        "When does the Ljubljana office open?": "kb_question",
        "price of the bled trip": "kb_question",
    }
    assert {m: classify_request(m) for m in cases} == cases


def test_default_tier_includes_the_general_fallback_and_tables_are_checked():
    assert GENERAL_REASONING in TIERS[DEFAULT_TIER].capabilities
    assert tier_for("someone-new").name == DEFAULT_TIER
    assert tier_for("alice", {"alice": "owner"}).is_owner
    with pytest.raises(ValueError, match="lacks 'general_reasoning'"):
        check_tiers({"reader": Tier("reader", {KB_READ})}, "reader")
    with pytest.raises(ValueError, match="unknown permission tier"):
        get_tier("admin")
    with pytest.raises(ValueError, match="unknown capabilities"):
        Tier("x", {"kb.write"})
    # a tier without the fallback is refused loudly on the general route
    reader = Requester("carol", Tier("reader", {KB_READ}))
    with pytest.raises(AuthorizationError, match="general_reasoning"):
        route_request("Hello there", reader)
    assert route_request(QUESTION, reader) == "kb_question"


def test_the_seed_tier_table_exists_only_for_the_replay_and_the_agent_refuses_it(kb):
    """agent.default_tier_fallback=false rebuilds the seed's table (incident 5's before); the
    agent refuses the setting by name rather than run a default tier with nowhere to go."""
    seed = tier_table(default_tier_fallback=False)
    assert GENERAL_REASONING not in seed[DEFAULT_TIER].capabilities
    assert {n: t for n, t in seed.items() if n != DEFAULT_TIER} == {n: t for n, t in TIERS.items() if n != DEFAULT_TIER}
    with pytest.raises(ValueError, match="lacks 'general_reasoning'"):
        check_tiers(seed, DEFAULT_TIER)
    assert tier_table() == TIERS
    with pytest.raises(UnsupportedSetting, match="agent.default_tier_fallback=false is not honoured by the agent"):
        Agent(ScriptedLLM(lambda n, _: ""), kb, settings=kb.settings.with_overrides({"agent.default_tier_fallback": False}))


def test_an_empty_generation_is_labelled_an_extract_not_grounded_generation(kb, caplog):
    llm = ScriptedLLM(lambda n, _: "(no idea)", answer="")  # search, finish; then the generation comes back empty
    with caplog.at_level(logging.WARNING, logger="adiyan.agent"):
        res = Agent(llm, kb, settings=kb.settings, tier="guest", requester_id="bob").run(QUESTION)
    assert [s.tool for s in res.steps] == ["search_kb", "finish"] and len(llm.other_prompts) == 1
    assert res.answer_source == "extract" and res.synthesis["kind"] == "extractive_fallback"
    assert res.synthesis["empty_generation"] is True
    best = res.scratchpad.best_findings()[0]
    assert res.answer == best.text and best.source == "office/julian.md"  # the evidence, quoted as it is
    assert any("came back empty" in r.getMessage() for r in caplog.records if r.name == "adiyan.agent")


def test_no_evidence_is_said_not_silent(kb):
    floored = kb.settings.with_overrides({f"retrieval.score_floors.{kb.embedder.id}": 0.99})  # nothing passes
    res = Agent(ScriptedLLM(lambda n, _: "???"), kb, settings=floored, tier="guest", requester_id="bob").run(QUESTION)
    assert [s.tool for s in res.steps] == ["search_kb", "finish"]
    assert res.answer == NO_CONTEXT_ANSWER and res.answer_source == "no_evidence"
    assert any("below the floor" in q for q in res.scratchpad.open_questions)
    # without strict grounding the general-reasoning fallback answers, if the tier has it ...
    loose = floored.with_overrides({"generation.strict_grounding": False})
    res2 = Agent(ScriptedLLM(lambda n, _: "???"), kb, settings=loose, tier="guest",
                 requester_id="bob").run(QUESTION)
    assert res2.answer == "scripted answer" and res2.answer_source == "general_reasoning"
    # ... and a tier without it is refused loudly, with the trace
    reader = Tier("reader", {KB_READ})
    with pytest.raises(AuthorizationError, match="general_reasoning") as ei:
        Agent(ScriptedLLM(lambda n, _: "???"), kb, settings=loose, tier=reader,
              requester_id="bob").run(QUESTION)
    assert [s.tool for s in ei.value.steps] == ["search_kb", "finish", "general_reasoning"]
    assert ei.value.steps[-1].authorized is False


# -- scratchpad, parsing ------------------------------------------------------------------------


@pytest.mark.parametrize("budget", [1, 5, 20, 60, 200, 2500])
def test_scratchpad_render_fits_its_budget(budget):
    pad = Scratchpad(
        findings=[Finding(f"Finding number {i} says the price is {i * 10} euros per person.", f"o/d{i}.md", i, i / 10)
                  for i in range(30)],
        documents_checked=[f"o/d{i}.md" for i in range(30)], open_questions=["what about the Bled trip?"],
        leads=["o/x.md"], history=[f'search_kb {{"query": "q{i}"}} -> 4 chunk(s)' for i in range(10)])
    out = pad.render(budget)
    assert out and approx_tokens(out) <= budget
    if budget >= 60:
        assert "Finding number 29" in out  # the most relevant finding is kept first


@pytest.mark.parametrize("reply,tool,args", [
    ('Thought: search.\nAction: search_kb\nAction Input: {"query": "alps price"}', "search_kb",
     {"query": "alps price"}),
    ('**Action:** `Search KB`\n**Action Input:** {"query": "alps",}', "search_kb", {"query": "alps"}),
    ("Action: search_kb(query='alps')", "search_kb", {"query": "alps"}),
    ('{"action": "finish", "action_input": "450 euros"}', "finish", {"answer": "450 euros"}),
    ("Final Answer: 450 euros", "finish", {"answer": "450 euros"}),
    ("Action: read_document\nAction Input: julian.md", "read_document", {"source": "julian.md"}),
    ('Action: retrieve_knowledge_base\nAction Input: {"q": "alps"}', "search_kb", {"query": "alps"}),
    ('```\nAction: search_kb\nAction Input: {"query": "<search words>"}\n```', "search_kb", {"query": "Q?"}),
])
def test_parse_action_tolerates_noise(reply, tool, args):
    p = parse_action(reply, build_tools(None, None, "bob", retriever=None), question="Q?")
    assert p.ok and p.tool == tool and p.args == args


@pytest.mark.parametrize("reply", ["", "I think it is 450.", "Action: teleport\nAction Input: {}",
                                   'Action: read_document\nAction Input: {"query": "x"}'])
def test_parse_action_reports_failures(reply):
    p = parse_action(reply, build_tools(None, None, "bob", retriever=None), question="Q?")
    assert not p.ok and p.error


# -- the real embedded model --------------------------------------------------------------------


@pytest.mark.slow  # grammar-held SmolLM2 decisions: 16 s of the default suite on an idle fresh clone (CI runs it)
def test_lookup_with_the_embedded_llm(kb, smollm2):
    res = Agent(smollm2, kb, settings=kb.settings, tier="guest", requester_id="bob").run(QUESTION)
    assert "450" in res.answer
    assert res.stopped_reason in ("finished", "max_steps")
    assert res.steps and res.steps[0].tool in ("search_kb", "find_document", "search_document")
    first = res.steps[0]
    assert first.latency_s > 0 and first.prompt_tokens and first.completion_tokens is not None
    assert any(f.source == "office/julian.md" for f in res.scratchpad.findings)
    assert all(s.tool for s in res.steps)
