"""Structured calls (issue 25): the schema through the backend's own mechanism, every reply counted.

- A backend that cannot constrain (a test double with only ``chat``, for control flow) is
  reported ``structured: none`` and each reply that is not schema-valid is counted, in the
  structured-call counters and in the judge's statuses.
- The real embedded SmolLM2 under its GBNF grammar returns schema-valid JSON for the agent's
  action schema and the judge's verdict schema; forced to ``structured=none`` the same model is
  reported ``none`` and its failures are counted (checked against an independent validation).
- The agent's trace keeps the model's action beside the default action and says which was run.
"""

from __future__ import annotations

import jsonschema
import pytest

from adiyan.agent import Agent, ToolSpec
from adiyan.agent.parsing import action_schema
from adiyan.eval.agent_eval import agent_metrics
from adiyan.eval.judge import Judge, SupportVerdict
from adiyan.eval.judge.client import verdict_schema
from adiyan.models import load_llm
from adiyan.models.base import Completion
from adiyan.models.structured import chat_json, describe_structured, structured_mode, structured_stats
from tests.test_agent import QUESTION, ScriptedLLM, kb  # noqa: F401 - kb: a fixture

TOOLS = [ToolSpec("search_kb", ("query",), None, "search every document you may read", None),
         ToolSpec("search_document", ("source", "query"), None, "search inside one document", None),
         ToolSpec("finish", ("answer",), None, "give the final answer", None)]


class FreeTextLLM:
    """A test double for control flow only: a backend with no structured mechanism (no
    ``chat_structured``), replying from a fixed list."""

    id = "free-text"
    context_size = 2048

    def __init__(self, replies):
        self.replies = list(replies)
        self.calls = 0

    def chat(self, messages, *, max_tokens=None, temperature=None) -> Completion:
        self.calls += 1
        return Completion(self.replies[(self.calls - 1) % len(self.replies)], 10, 5, self.id)


def test_an_unconstrained_backend_says_none_and_counts_every_parse_failure(tmp_path):
    replies = ['{"supported": true}', "Sure! The answer is supported.", '{"supported": "yes"}',
               'Here: ```json\n{"supported": false}\n```']
    llm = FreeTextLLM(replies)
    schema = verdict_schema(SupportVerdict)
    got = [chat_json(llm, [{"role": "user", "content": "q"}], schema) for _ in replies]
    assert [r.status for r in got] == ["ok", "invalid_json", "schema_mismatch", "ok"]
    assert {r.mode for r in got} == {"none"} and structured_mode(llm) == "none"
    d = describe_structured(llm)
    assert d["structured"] == "none"
    assert d["structured_calls"] == {"calls": 4, "ok": 2, "invalid_json": 1, "schema_mismatch": 1,
                                     "by_mode": {"none": 4}, "parse_failures": 2}
    # the judge over the same backend: it says none, and its statuses count the same failures
    from adiyan.cache import CallCache

    judge = Judge(FreeTextLLM(replies), CallCache(tmp_path / "c.sqlite", "judge"), max_retries=0, timeout_s=None)
    assert judge.describe()["structured"] == "none"
    for i in range(4):
        judge.ask(f"prompt {i}", SupportVerdict)
    assert (judge.stats.ok, judge.stats.invalid_json, judge.stats.schema_mismatch) == (2, 1, 1)


def test_the_action_schema_holds_the_tier_and_the_tool_arguments():
    schema = action_schema(TOOLS[:1] + TOOLS[2:])  # a tier without search_document
    ok = {"action": {"tool": "search_kb", "args": {"query": "refunds"}}}
    jsonschema.validate(ok, schema)
    bad = [{"action": {"tool": "search_document", "args": {"source": "a.md", "query": "x"}}},  # beyond the tier
           {"action": {"tool": "search_kb", "args": {"query": "x", "requester_id": "alice"}}},  # an identity
           {"action": {"tool": "finish", "args": {"query": "x"}}},  # another tool's arguments
           {"action": {"tool": "search_kb", "args": {"query": ""}}},  # empty
           {"tool": "search_kb", "args": {"query": "x"}}]  # not wrapped
    for value in bad:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(value, schema)


def _messages(question: str) -> list[dict]:
    return [{"role": "system", "content": "Tools: search_kb {query}, search_document {source, query}, finish "
                                          "{answer}. Reply with one JSON object "
                                          '{"action": {"tool": ..., "args": {...}}}'},
            {"role": "user", "content": question}]


@pytest.mark.slow  # 8.5 s idle; the unconstrained-backend double above keeps the counting in the default suite
def test_smollm2_under_its_grammar_returns_schema_valid_json_and_forced_none_is_counted(smollm2):
    """The real SmolLM2-135M: two action calls and one verdict under the grammar are all valid;
    the same calls with structured=none are reported none and counted exactly."""
    schema = action_schema(TOOLS, max_tokens=96)  # arguments of at most 48 characters
    questions = ["How much does the Julian Alps Weekend cost?", "When is a refund paid?"]
    before = structured_stats(smollm2).as_dict()
    replies = [chat_json(smollm2, _messages(q), schema, max_tokens=96) for q in questions]
    verdict = chat_json(smollm2, [{"role": "user", "content": "Context: the weekend costs 450 euros. Answer: it "
                                   "costs 900 euros. Is the answer supported? JSON."}],
                        verdict_schema(SupportVerdict), max_tokens=16)
    assert structured_mode(smollm2) == "grammar"
    for r in replies + [verdict]:
        assert r.mode == "grammar" and r.status == "ok", (r.status, r.error, r.text)
    for r in replies:
        jsonschema.validate(r.value, schema)
        assert r.value["action"]["tool"] in {t.name for t in TOOLS}
    assert isinstance(verdict.value["supported"], bool)
    after = structured_stats(smollm2).as_dict()
    assert after["calls"] - before["calls"] == 3 and after["parse_failures"] == before["parse_failures"]

    forced = load_llm("smollm2", structured="none")
    assert structured_mode(forced) == "none" and describe_structured(forced)["structured"] == "none"
    free = [chat_json(forced, _messages(q), schema, max_tokens=96) for q in questions]
    independent_failures = 0
    for r in free:
        assert r.mode == "none"
        try:
            from adiyan.models.structured import first_json_object

            jsonschema.validate(first_json_object(r.text), schema)
        except (ValueError, jsonschema.ValidationError):
            independent_failures += 1
    st = structured_stats(forced)
    assert st.by_mode == {"none": 2} and st.calls == 2
    assert st.parse_failures == independent_failures == sum(not r.ok for r in free)


class StructuredScriptedLLM(ScriptedLLM):
    """A test double for control flow only: a backend that claims a grammar and replies to each
    structured decision from a script of JSON actions."""

    structured_mechanism = "grammar"

    def chat_structured(self, messages, schema, *, name="reply", max_tokens=None, temperature=None):
        return self.chat(messages, max_tokens=max_tokens, temperature=temperature)


def test_the_trace_keeps_the_models_action_beside_the_default(kb):  # noqa: F811 - kb: a fixture
    script = {1: '{"action": {"tool": "search_kb", "args": {"query": "Julian Alps Weekend price"}}}',
              2: '{"action": {"tool": "search_kb", "args": {"query": "Julian Alps Weekend price"}}}',
              3: '{"action": {"tool": "finish", "args": {"answer": "450 euros per person (TR-JUL-03)."}}}'}
    llm = StructuredScriptedLLM(lambda n, _: script[n])
    res = Agent(llm, kb, settings=kb.settings, tier="guest", requester_id="bob").run(QUESTION)
    s1, s2, s3 = res.steps
    # 1: the model's own query, not the default search for the question
    assert (s1.action_source, s1.structured, s1.schema_valid, s1.parse_via) == ("model", "grammar", True, "schema")
    assert s1.args == {"query": "Julian Alps Weekend price"} and s1.default_args == {"query": QUESTION}
    assert s1.model_differs is True
    # 2: the model repeats its call: the default action is run and the model's choice is kept
    assert s2.action_source == "default" and s2.note.startswith("repeated")
    assert s2.model_tool == "search_kb" and s2.args == {"query": QUESTION} and s2.model_differs is True
    # 3: a grounded finish, the model's own answer
    assert s3.action_source == "model" and s3.tool == "finish" and s3.default_tool == "finish"
    assert res.answer == "450 euros per person (TR-JUL-03)." and res.answer_source == "model"
    run = {"decisions": 3, "decisions_schema_valid": 3, "decisions_model": 2, "decisions_differ": 3,
           "decisions_differ_tool": 0}
    assert sum(s.schema_valid for s in res.steps) == run["decisions_schema_valid"]
    assert sum(s.action_source == "model" for s in res.steps) == run["decisions_model"]
    assert sum(bool(s.model_differs) for s in res.steps) == run["decisions_differ"]
    base = {"n_steps": 3, "stopped_reason": "finished", "compactions": 2, "scratchpad_trims": 0, "refused": None,
            "answer": res.answer, "grounded": True, "decisions_parsed": 3, "tool_calls": {}, "private_seen": []}
    m = agent_metrics([{"latency_s": [1.0], "runs": [{**base, **run, "steps": []}]}], max_steps=10, strict=True)
    assert (m["decision_schema_valid_rate"], m["model_action_rate"], m["model_differs_rate"]) == (1.0, 0.666667, 1.0)


def test_history_rewrites_go_through_the_schema_and_free_text_is_counted(smollm2):
    """history_llm: the real SmolLM2 under its grammar writes {"question": ...} (schema-valid,
    counted under grammar); a backend that cannot constrain (FreeTextLLM, a test double) is read
    as free text, its first line as before, and the reply counted as a parse failure."""
    from adiyan.retrieval.transform import REWRITE_SCHEMA, llm_rewrite

    history = [{"role": "user", "content": "Tell me about the Triglav Lakes Trek."},
               {"role": "assistant", "content": "The Triglav Lakes Trek (TR-TRG-04) is a five-day hut-to-hut trek."}]
    before = structured_stats(smollm2).as_dict()
    text = llm_rewrite("And how much does it cost?", history, smollm2)
    after = structured_stats(smollm2).as_dict()
    assert after["calls"] - before["calls"] == 1 and after["ok"] - before["ok"] == 1
    assert after["by_mode"].get("grammar", 0) - before["by_mode"].get("grammar", 0) == 1
    assert text and len(text) <= REWRITE_SCHEMA["properties"]["question"]["maxLength"]
    assert not text.lstrip().startswith("{")  # the question, not the JSON around it

    free = FreeTextLLM(["How much does the Triglav Lakes Trek cost?\nIt is a trek."])
    assert llm_rewrite("And how much does it cost?", history, free) == "How much does the Triglav Lakes Trek cost?"
    st = structured_stats(free)
    assert (st.calls, st.invalid_json, st.by_mode) == (1, 1, {"none": 1})
    json_reply = FreeTextLLM(['{"question": "What does the Triglav Lakes Trek cost?"}'])
    assert llm_rewrite("And how much does it cost?", history, json_reply) == "What does the Triglav Lakes Trek cost?"
    assert structured_stats(json_reply).ok == 1


def test_a_cached_llm_replays_greedy_replies_and_they_are_counted_like_fresh_ones(tmp_path):
    """CachedLLM (used by scripts/measure_agent_structured.py): a test double for control flow
    only stands for the model; an identical greedy call is replayed without reaching it, a
    sampled one always reaches it, and chat_json validates and counts a replay like a fresh reply."""
    from adiyan.cache import CallCache
    from adiyan.models.cached_llm import CachedLLM

    class Structured(FreeTextLLM):
        structured_mechanism = "grammar"
        temperature = 0.0

        def chat_structured(self, messages, schema, *, name="reply", max_tokens=None, temperature=None):
            return self.chat(messages, max_tokens=max_tokens, temperature=temperature)

    inner = Structured(['{"supported": true}', "not json"])
    llm = CachedLLM(inner, CallCache(tmp_path / "calls.sqlite", "t"))
    schema = verdict_schema(SupportVerdict)
    msgs = [{"role": "user", "content": "q"}]
    a, b = chat_json(llm, msgs, schema), chat_json(llm, msgs, schema)
    assert inner.calls == 1 and (llm.hits, llm.misses) == (1, 1)
    assert a.status == b.status == "ok" and a.mode == b.mode == "grammar"
    assert structured_stats(llm).as_dict()["calls"] == 2 and structured_stats(llm).ok == 2
    sampled = chat_json(llm, msgs, schema, temperature=0.7)  # not a function of the prompt: never stored
    assert inner.calls == 2 and sampled.status == "invalid_json"
    assert chat_json(llm, [{"role": "user", "content": "other"}], schema).status == "ok" and inner.calls == 3
    # a backend without a mechanism stays one behind the cache
    assert structured_mode(CachedLLM(FreeTextLLM(["x"]), CallCache(tmp_path / "c2.sqlite", "t"))) == "none"


def test_the_agent_measurement_compares_agent_and_single_shot_by_an_exact_mcnemar_test():
    """scripts/measure_agent_structured.py pairs the two answers of each question: with 3 questions
    only the agent answered and 9 only single-shot, p = 2 * P(Bin(12, 0.5) <= 3) = 2 * 299/4096."""
    import importlib.util

    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "measure_agent_structured.py"
    spec = importlib.util.spec_from_file_location("mas", script)
    mas = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mas)
    row = {"decisions": 2, **{k: 1 for k in mas.COUNTS}, "steps": [], "question": "q", "seconds": 1.0}
    rows = ([{**row, "agent_keyword_hit": True, "single_keyword_hit": False}] * 3
            + [{**row, "agent_keyword_hit": False, "single_keyword_hit": True}] * 9
            + [{**row, "agent_keyword_hit": True, "single_keyword_hit": True}] * 2)
    s = mas.summarize(rows)
    assert (s["agent_only_hit"], s["single_only_hit"], s["agent_and_single_both_hit"]) == (3, 9, 2)
    assert s["agent_vs_single_mcnemar_p"] == round(2 * 299 / 4096, 4)
    assert s["agent_keyword_recall"] == pytest.approx(5 / 14, abs=1e-6) and s["decisions_model_rate"] == 0.5
    assert mas.mcnemar_p(0, 0) is None
