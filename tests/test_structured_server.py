"""Structured calls over the OpenAI-compatible path, against the local llama.cpp server (issue 25).

llama-cpp-python's server (tests/servers.py) takes ``response_format={"type": "json_object",
"schema": ...}`` and refuses the OpenAI API's ``{"type": "json_schema", ...}`` (its request model
allows only ``text`` / ``json_object``; it answers HTTP 500 naming ``response_format``). The client asks with ``json_schema`` first, records the
refusal, and goes on with ``json_object`` + schema: the replies are schema-valid and the mode says
which format was used.
"""

from __future__ import annotations

import jsonschema
import pytest

from adiyan.agent import ToolSpec
from adiyan.agent.parsing import action_schema
from adiyan.eval.judge import SupportVerdict
from adiyan.eval.judge.client import verdict_schema
from adiyan.models.llms import OpenAICompatibleLLM
from adiyan.models.structured import chat_json, structured_mode
from servers import CHAT_ALIAS, llama_server  # noqa: F401 - llama_server: a fixture

pytestmark = pytest.mark.slow  # a server start and four generations on one thread


def test_openai_compatible_structured_calls_fall_back_to_the_servers_format(llama_server):
    llm = OpenAICompatibleLLM("openai-compatible", llama_server.url, CHAT_ALIAS, max_tokens=96)
    assert structured_mode(llm) == "json_schema"  # what is asked first
    tools = [ToolSpec("search_kb", ("query",), None, "search", None),
             ToolSpec("finish", ("answer",), None, "answer", None)]
    schema = action_schema(tools)
    msgs = [{"role": "system", "content": 'Tools: search_kb {query}, finish {answer}. Reply with JSON '
                                          '{"action": {"tool": ..., "args": {...}}}'},
            {"role": "user", "content": "When is a refund paid?"}]
    first = chat_json(llm, msgs, schema, name="agent_action")
    assert first.mode == "json_object", llm.format_refusals
    assert len(llm.format_refusals) == 1 and llm.format_refusals[0].startswith("json_schema:")
    assert "response_format" in llm.format_refusals[0]  # it answers HTTP 500 naming the refused field
    assert first.ok, (first.error, first.text)
    jsonschema.validate(first.value, schema)
    verdict = chat_json(llm, [{"role": "user", "content": "Context: it costs 450 euros. Answer: 900 euros. "
                                                          "Supported? JSON."}],
                        verdict_schema(SupportVerdict), name="SupportVerdict", max_tokens=16)
    assert verdict.mode == "json_object" and verdict.ok and isinstance(verdict.value["supported"], bool)
    assert structured_mode(llm) == "json_object" and len(llm.format_refusals) == 1  # asked once, remembered
