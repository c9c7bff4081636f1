"""mem0 consolidation (``memory.infer=true``) through the structured layer (issue 25, item 1).

mem0 2.2 asks its LLM for ``{"memory": [{"id", "text", "attributed_to"}]}`` with
``response_format={"type": "json_object"}``; adiyan's adapter sends that call through
``chat_json`` with :data:`MEM0_FACTS_SCHEMA`, so it is held by the backend's mechanism, validated,
counted and cached. What is stored is then the extracted facts, not the message, and each fact
keeps the message's metadata (the memory evalset's ``eval_id``, LoCoMo's ``dia_id``), which is how
recall is still scored. The scripted LLM below is a test double for control flow only (which
prompt reached the model, what mem0 stored from a given reply); the real model runs in
``benchmarks/mem0_infer.py`` (figures in docs/structured-outputs.md).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import jsonschema
import pytest

from adiyan.memory import MEM0_FACTS_SCHEMA, MIN_CONSOLIDATION_CONTEXT, Memory
from adiyan.models.base import Completion
from adiyan.models.structured import structured_stats

ALLERGY = "I'm allergic to peanuts, so please keep them out of my packed lunches."
FACTS = {"memory": [{"id": "0", "text": "User is allergic to peanuts", "attributed_to": "user"},
                    {"id": "1", "text": "User wants no peanuts in packed lunches", "attributed_to": "user"}]}


class FactsLLM:
    """Test double for control flow only: a backend with a structured mechanism that answers every
    structured call with a fixed reply and records the prompts and schemas it was given."""

    id = "scripted-facts"
    context_size = MIN_CONSOLIDATION_CONTEXT
    structured_mechanism = "grammar"

    def __init__(self, reply):
        self.reply, self.calls = reply, []

    def chat(self, messages, *, max_tokens=None, temperature=None):
        raise AssertionError("mem0's extraction must come as a structured call")

    def chat_structured(self, messages, schema, *, name="reply", max_tokens=None, temperature=None):
        self.calls.append({"messages": messages, "schema": schema, "name": name})
        return Completion(self.reply if isinstance(self.reply, str) else json.dumps(self.reply), 10, 5, self.id)


def _memory(make_settings, minilm, llm, **over):
    s = make_settings(**{"memory.infer": True, **over})
    return Memory.from_settings(s, embedder=minilm, llm=llm)


def test_consolidation_stores_the_schema_held_facts_with_the_messages_metadata(make_settings, minilm):
    llm = FactsLLM(FACTS)
    mem = _memory(make_settings, minilm, llm)
    try:
        first = mem.add(ALLERGY, user_id="mira", created_at=datetime(2024, 12, 12, 12, tzinfo=timezone.utc),
                        metadata={"eval_id": "m-allergy"})
        stored = mem.all("mira")
        # the facts, not the message: consolidation ran
        assert sorted(r.text for r in stored) == sorted(f["text"] for f in FACTS["memory"])
        assert ALLERGY not in {r.text for r in stored} and first in {r.id for r in stored}
        assert {r.metadata.get("eval_id") for r in stored} == {"m-allergy"}  # scored through the source's id
        assert {r.created_at for r in stored} == {"2024-12-12T12:00:00+00:00"}
        # one structured call, under mem0's own output schema, the message in its prompt
        (call,) = llm.calls
        assert call["schema"] == MEM0_FACTS_SCHEMA and call["name"] == "mem0_facts"
        user = call["messages"][-1]["content"]
        assert ALLERGY in user
        # the statement's date, not today's, is the observation date mem0 resolves "yesterday" against
        today = datetime.now(timezone.utc).date().isoformat()
        assert "## Observation Date\n2024-12-12" in user and "## Current Date\n2024-12-12" in user
        assert today not in user
        st = mem.consolidation_stats()
        assert (st["calls"], st["ok"], st["facts"], st["failures"], st["cached"]) == (1, 1, 2, 0, 0)
        assert st["by_mode"] == {"grammar": 1} and structured_stats(llm).ok == 1
    finally:
        mem.close()


def test_a_consolidation_reply_is_replayed_from_the_call_cache(make_settings, minilm, tmp_path):
    over = {"paths.data_dir": str(tmp_path / "d1")}
    when = datetime(2025, 1, 31, 12, tzinfo=timezone.utc)
    a = FactsLLM(FACTS)
    mem = _memory(make_settings, minilm, a, **over)
    try:
        mem.add(ALLERGY, user_id="mira", created_at=when)
    finally:
        mem.close()
    b = FactsLLM({"memory": []})  # would store nothing if it were asked
    again = _memory(make_settings, minilm, b, **{"paths.data_dir": str(tmp_path / "d2")})
    try:
        # same message, same date, same (empty) existing memories: same prompt; but another model id
        # would be another key, so the double keeps the id of the first
        again.add(ALLERGY, user_id="mira", created_at=when)
        assert b.calls == [] and again.consolidation_stats()["cached"] == 1
        assert len(again.all("mira")) == 2
    finally:
        again.close()


def test_an_invalid_consolidation_reply_is_counted_and_stores_nothing(make_settings, minilm):
    llm = FactsLLM('{"memory": [{"text": "User is allergic to peanuts"}]}')  # no id, no attributed_to
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(json.loads(llm.reply), MEM0_FACTS_SCHEMA)
    mem = _memory(make_settings, minilm, llm)
    try:
        assert mem.add(ALLERGY, user_id="mira") is None
        assert mem.all("mira") == []
        st = mem.consolidation_stats()
        assert (st["calls"], st["ok"], st["failures"]) == (1, 0, 1)
        assert structured_stats(llm).schema_mismatch == 1
    finally:
        mem.close()


def test_memory_infer_is_refused_by_name_when_the_window_cannot_hold_mem0s_prompt(make_settings, minilm):
    s = make_settings(**{"memory.infer": True, "llm.name": "smollm2"})  # 2,048 tokens; mem0's prompt is ~8.6k
    with pytest.raises(ValueError, match=r"memory.infer=true.*llm.context_size >= 12288.*window is 2048"):
        Memory.from_settings(s, embedder=minilm)


class EchoFactsLLM(FactsLLM):
    """Test double for control flow only: extracts one "fact" per message, the message itself
    prefixed, so what was stored can be traced to the message it came from."""

    def chat_structured(self, messages, schema, *, name="reply", max_tokens=None, temperature=None):
        user = messages[-1]["content"]
        new = user.split("## New Messages\n", 1)[1].split("\n\n## ", 1)[0].strip()
        text = "Fact: " + new.split(": ", 1)[-1]
        self.calls.append(new)
        return Completion(json.dumps({"memory": [{"id": "0", "text": text[:300], "attributed_to": "user"}]}))


@pytest.mark.slow  # 124 mem0 adds: ~2 min on an idle machine, 17 min at a load average of 25
def test_the_memory_experiment_honours_memory_infer(make_settings, monkeypatch):
    """memory.infer=true reaches the memory experiment's store (it used to be built verbatim
    whatever the setting): a store of its own, built through the consolidation, each fact
    keeping its source memory's id, the cost in the run's info."""
    import adiyan.memory as memory_module
    from adiyan.experiments import memory as X

    double = EchoFactsLLM(None)
    monkeypatch.setattr(memory_module, "llm_from_settings", lambda settings: double)
    es = X.memory_evalset()
    server = {"llm.name": "openai-compatible:http://127.0.0.1:9/v1", "llm.model": "m", "llm.context_size": 12288,
              "retrieval.use_calibrated_floors": True}  # the default: the memory experiment refuses retrieval.*
    verbatim = X.evaluate_memory(make_settings(**server, **{"memory.infer": False}), evalset=es)
    assert verbatim.info["infer"] is False and "consolidation" not in verbatim.info and double.calls == []
    infer = X.evaluate_memory(make_settings(**server, **{"memory.infer": True}), evalset=es)
    assert infer.info["infer"] is True and len(double.calls) == len(es.memories)
    c = infer.info["consolidation"]
    assert (c["calls"], c["ok"], c["failures"], c["facts"]) == (len(es.memories), len(es.memories), 0, len(es.memories))
    assert infer.info["stored"] == len(es.memories) == verbatim.info["stored"]
    mem = X.memory_store(make_settings(**server, **{"memory.infer": True}), es, X.open_embedder(make_settings()))
    texts = {r.metadata["eval_id"]: r.text for u in ("mira", "tomas", "office") for r in mem.all(u)}
    src = {m["id"]: m["text"] for m in es.memories}
    assert texts == {k: ("Fact: " + v)[:300] for k, v in src.items()}  # stored facts, each under its source's id
    # the experiment's ranking is over source ids: the consolidated facts rank their sources
    assert 0 <= infer.metrics["hit@1"] <= 1 and [r["qid"] for r in infer.per_question] == [q["qid"] for q in es.questions]
