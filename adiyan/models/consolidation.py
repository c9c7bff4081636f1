"""mem0's consolidation call (``memory.infer=true``) on the LLM side: its schema, the structured
call, its counters and its cache (issue 25, item 1). :mod:`adiyan.memory` plugs a
:class:`Consolidator` into the LLM adapter it registers with mem0.

mem0 2.2 makes one LLM call per ``add`` when it consolidates, its additive extraction (ADD only:
2.2 has no UPDATE / DELETE decision in ``add``; a new fact is deduplicated by hash against the
ten most similar existing memories), asking for ``response_format={"type": "json_object"}``.
:meth:`Consolidator.reply` sends that call through :func:`adiyan.models.structured.chat_json`
with :data:`MEM0_FACTS_SCHEMA` (mem0's own output format), so the reply is held by the backend's
mechanism (llama.cpp grammar; ``response_format`` json_schema, else json_object + schema, on an
OpenAI-compatible server; Ollama ``format``), validated and counted (:class:`ConsolidationStats`).
A reply that is not schema-valid stores nothing (mem0 would otherwise keep any object with a
"text" it finds in it) and is counted as a failure.

mem0 writes *today's* date as the observation date of every message; the consolidator writes the
statement's own date (``observation_date``, set per ``add`` from its ``created_at``) into both
date sections instead, so a replayed conversation's "yesterday" is resolved against its own
time and the prompt, hence the cached reply, does not change daily. Schema-valid replies are
cached by prompt hash (``cache``: ``<cache_dir>/calls.sqlite``, namespace ``mem0``).
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import re
import time
from dataclasses import dataclass, field

from ..cache import CallCache
from .structured import chat_json

log = logging.getLogger("adiyan.memory")

MIN_CONSOLIDATION_CONTEXT = 12_288  # tokens: mem0's extraction prompt (~8.6k) plus its JSON answer
CONSOLIDATION_MAX_TOKENS = 1024  # mem0's JSON of extracted facts; llm.max_tokens is sized for answers
# mem0 2.2's additive extraction reply ("# OUTPUT FORMAT" of mem0.configs.prompts.ADDITIVE_EXTRACTION_PROMPT):
# {"memory": [{"id": "0", "text": ..., "attributed_to": "user" | "assistant"}]}. Its optional
# "linked_memory_ids" is left out: mem0 2.2.1's add never reads it (entity links come from spaCy),
# and a tiny model fills it with invented UUIDs. The bounds keep a grammar-held reply inside
# CONSOLIDATION_MAX_TOKENS (8 facts of at most 300 characters).
MEM0_FACTS_SCHEMA = {
    "type": "object",
    "properties": {"memory": {"type": "array", "maxItems": 8, "items": {
        "type": "object",
        "properties": {"id": {"type": "string", "minLength": 1, "maxLength": 3},
                       "text": {"type": "string", "minLength": 1, "maxLength": 300},
                       "attributed_to": {"type": "string", "enum": ["user", "assistant"]}},
        "required": ["id", "text", "attributed_to"], "additionalProperties": False}}},
    "required": ["memory"], "additionalProperties": False,
}
_ANY_OBJECT = {"type": "object"}  # a JSON reply mem0 asks for that is not the extraction (none in 2.2.1)
_EXTRACTION_MARK = "## New Messages"  # the extraction's user prompt (generate_additive_extraction_prompt)
_DATE_SECTION = re.compile(r"(## (?:Observation|Current) Date\n)\S+")


@dataclass
class ConsolidationStats:
    """What mem0's consolidation cost and produced, over one Memory's life (all kinds)."""

    calls: int = 0  # LLM calls made (cache hits not included)
    cached: int = 0  # replies replayed from the call cache
    seconds: float = 0.0  # wall time of the calls made
    ok: int = 0  # replies valid under MEM0_FACTS_SCHEMA (made or cached)
    failures: int = 0  # replies not JSON or not schema-valid: mem0 stores nothing for them
    facts: int = 0  # facts in the valid replies (mem0 may drop duplicates of existing memories)
    empty: int = 0  # valid replies with no fact: nothing stored for that message
    by_mode: dict = field(default_factory=dict)  # structured mechanism -> replies

    def as_dict(self) -> dict:
        return {"calls": self.calls, "cached": self.cached, "seconds": round(self.seconds, 3), "ok": self.ok,
                "failures": self.failures, "facts": self.facts, "empty": self.empty, "by_mode": dict(self.by_mode)}


def resolve_infer(settings, llm=None, infer: bool | None = None) -> bool:
    """Whether a Memory built from ``settings`` consolidates: ``infer`` when given, else
    ``memory.infer`` when set, else whether the LLM (``llm`` or ``settings.llm``) is capable."""
    if infer is None:
        infer = getattr(settings.memory, "infer", None)
    if infer is None:
        if llm is not None:
            return consolidation_capable(getattr(llm, "id", None), getattr(llm, "context_size", None))
        return consolidation_capable(settings.llm.name, settings.llm.context_size)
    return bool(infer)


def consolidation_identity(settings) -> dict:
    """What a store built with consolidation depends on besides its data (for a build key):
    the LLM as configured and mem0's version."""
    lc = settings.llm
    return {"llm": lc.name, "url": lc.url, "model": lc.model, "structured": lc.structured,
            "temperature": lc.temperature, "seed": lc.seed, "context_size": lc.context_size,
            "mem0": importlib.metadata.version("mem0ai"), "schema": MEM0_FACTS_SCHEMA}

def consolidation_capable(llm_name: str | None, context_size: int | None = None) -> bool:
    """Whether an LLM can run mem0's fact consolidation (``infer=True``).

    mem0 2.2's extraction prompt alone is ~8.6k tokens, so the model needs a context of at
    least :data:`MIN_CONSOLIDATION_CONTEXT`; and the embedded models (smollm2, a local GGUF)
    are too small to return its JSON reliably. Models behind an Ollama or OpenAI-compatible
    server with a large enough ``llm.context_size`` are taken to be capable.
    """
    if not llm_name or not llm_name.startswith(("ollama:", "openai-compatible")):
        return False
    return context_size is None or context_size >= MIN_CONSOLIDATION_CONTEXT


class Consolidator:
    """Answers mem0's LLM calls for one Memory: the JSON ones through :func:`chat_json` (see the
    module docstring), anything else as plain chat."""

    def __init__(self, cache: CallCache | None = None):
        self.stats = ConsolidationStats()
        self.cache = cache
        self.observation_date: str | None = None  # the date of the statement being added (YYYY-MM-DD)

    def reply(self, llm, messages, response_format=None) -> str:
        msgs = [{"role": m["role"], "content": m["content"]} for m in messages]
        if self.observation_date:
            msgs = [{**m, "content": _DATE_SECTION.sub(lambda mm: mm.group(1) + self.observation_date,
                                                       m["content"])} for m in msgs]
        if not (isinstance(response_format, dict) and response_format.get("type") in ("json_object", "json_schema")):
            return llm.chat(msgs, max_tokens=CONSOLIDATION_MAX_TOKENS).text
        extraction = any(_EXTRACTION_MARK in m["content"] for m in msgs)
        return self._structured(llm, msgs, MEM0_FACTS_SCHEMA if extraction else _ANY_OBJECT)

    def _structured(self, llm, msgs, schema) -> str:
        st, key = self.stats, None
        if self.cache is not None:
            key = self.cache.key({"llm": llm.id, "structured": getattr(llm, "structured", "auto"), "messages": msgs,
                                  "schema": schema, "max_tokens": CONSOLIDATION_MAX_TOKENS})
            hit = self.cache.get(key)
            if hit is not None:
                st.cached += 1
                self._count(hit["value"], hit["mode"])
                return json.dumps(hit["value"])
        t0 = time.perf_counter()
        reply = chat_json(llm, msgs, schema, name="mem0_facts", max_tokens=CONSOLIDATION_MAX_TOKENS)
        st.calls += 1
        st.seconds += time.perf_counter() - t0
        if not reply.ok:
            st.failures += 1
            st.by_mode[reply.mode] = st.by_mode.get(reply.mode, 0) + 1
            log.warning("mem0 consolidation: reply not valid (%s: %s); nothing stored for this message",
                        reply.status, reply.error)
            return json.dumps({"memory": []})  # never half-read (module docstring)
        self._count(reply.value, reply.mode)
        if key is not None:
            self.cache.put(key, {"value": reply.value, "mode": reply.mode})
        return json.dumps(reply.value)

    def _count(self, value: dict, mode: str) -> None:
        st = self.stats
        st.ok += 1
        st.by_mode[mode] = st.by_mode.get(mode, 0) + 1
        n = len(value.get("memory") or []) if isinstance(value, dict) else 0
        st.facts += n
        st.empty += int(n == 0)
