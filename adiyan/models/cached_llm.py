"""An LLM whose greedy replies are kept by content hash, so a measurement re-runs without the model.

``CachedLLM(llm, cache)`` forwards ``chat`` / ``chat_structured`` to ``llm`` and stores each reply
under a hash of everything that decides it: the model (its id, and the GGUF file's size and
modification time or the server and model name), the messages, the schema, the token limit, the
temperature and the seed. Only greedy calls (temperature 0) are stored: a sampled reply is not a
function of its prompt. A reply replayed from the cache is counted by
:func:`adiyan.models.structured.chat_json` like a fresh one (its status comes from validating the
same text), so parse rates measured through the cache are the model's.

It is for measurements that ask the embedded model the same questions again (the agent's and the
judge's structured decisions in ``scripts/measure_agent_structured.py``); the product paths keep
their own caches (answers, verdicts) or none (the agent's decisions, by design).
"""

from __future__ import annotations

import os
from typing import Sequence

from .base import Completion, as_messages


def model_identity(llm) -> dict:
    """What identifies the model behind ``llm`` beyond its id (a re-packaged GGUF changes it)."""
    ident = {"id": getattr(llm, "id", type(llm).__name__), "seed": getattr(llm, "seed", None)}
    path = getattr(llm, "path", None)
    if path and os.path.exists(path):
        st = os.stat(path)
        ident["file"] = {"size": st.st_size, "mtime": int(st.st_mtime)}
    for attr in ("url", "model_name", "context_size"):
        if getattr(llm, attr, None) is not None:
            ident[attr] = getattr(llm, attr)
    return ident


class CachedLLM:
    """``llm`` with its greedy replies kept in ``cache`` (a :class:`adiyan.cache.CallCache`)."""

    def __init__(self, llm, cache):
        self.llm = llm
        self.cache = cache
        self.hits = 0
        self.misses = 0
        self._structured_stats = None  # this wrapper's own counters (structured_stats), not the model's
        if hasattr(llm, "chat_structured"):  # structured_mode() looks for the method itself
            self.chat_structured = self._chat_structured

    def __getattr__(self, name):  # id, context_size, structured, structured_mechanism, count_tokens ...
        return getattr(self.llm, name)

    def _temperature(self, temperature):
        return getattr(self.llm, "temperature", 0.0) if temperature is None else temperature

    def _call(self, kind: str, messages: Sequence, schema, max_tokens, temperature, ask) -> Completion:
        t = self._temperature(temperature)
        if t != 0:
            return ask()
        key = self.cache.key({"model": model_identity(self.llm), "kind": kind, "messages": as_messages(messages),
                              "schema": schema, "max_tokens": max_tokens or getattr(self.llm, "max_tokens", None),
                              "temperature": t, "structured": getattr(self.llm, "structured", "auto")})
        hit = self.cache.get(key)
        if hit is not None:
            self.hits += 1
            return Completion(hit["text"], hit.get("prompt_tokens"), hit.get("completion_tokens"), self.llm.id,
                              raw=dict(hit.get("raw") or {}))
        self.misses += 1
        out = ask()
        raw = {k: v for k, v in (out.raw or {}).items() if k == "_structured_mode"}
        self.cache.put(key, {"text": out.text, "prompt_tokens": out.prompt_tokens,
                             "completion_tokens": out.completion_tokens, "raw": raw})
        return out

    def chat(self, messages, *, max_tokens=None, temperature=None) -> Completion:
        return self._call("chat", messages, None, max_tokens, temperature,
                          lambda: self.llm.chat(messages, max_tokens=max_tokens, temperature=temperature))

    def _chat_structured(self, messages, schema, *, name="reply", max_tokens=None, temperature=None) -> Completion:
        return self._call("structured", messages, schema, max_tokens, temperature,
                          lambda: self.llm.chat_structured(messages, schema, name=name, max_tokens=max_tokens,
                                                           temperature=temperature))
