"""Chat model providers: a GGUF in-process (the embedded default), Ollama, OpenAI-compatible servers."""

from __future__ import annotations

import json
import os
import threading
from typing import Sequence

from .base import (ChatMessage, Completion, ModelError, ModelResponseError, as_messages, free_llama_at_exit,
                   passive_openmp)
from .remote import chat_text, ollama_error, openai_error
from .structured import schema_name

# llm.structured: "auto" constrains structured calls with the backend's mechanism; "none" forces
# free text parsed afterwards (adiyan/models/structured.py)
STRUCTURED_SETTINGS = ("auto", "none")


def _check_structured(model_id: str, structured: str) -> str:
    if structured not in STRUCTURED_SETTINGS:
        raise ModelError(f"{model_id}: llm.structured must be one of {', '.join(STRUCTURED_SETTINGS)}, "
                         f"got {structured!r}")
    return structured


class LlamaCppLLM:
    """A chat GGUF run by llama.cpp in-process; greedy and seeded, so answers repeat."""

    def __init__(self, model_id: str, gguf_path: str, *, context_size: int = 2048, seed: int = 0,
                 temperature: float = 0.0, max_tokens: int = 128, threads: int | None = None,
                 structured: str = "auto"):
        try:
            passive_openmp()  # before the OpenMP runtime loads with llama.cpp
            from llama_cpp import Llama  # heavy, optional: llama.cpp loads only with a GGUF model
        except ImportError as exc:
            raise ModelError(f"{model_id}: llama-cpp-python is not installed (scripts/install.sh builds it)") from exc
        self._llama = Llama(model_path=str(gguf_path), n_ctx=context_size, seed=seed,
                            n_threads=threads or os.cpu_count(), verbose=False)
        self.id = model_id
        self.context_size = context_size
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.seed = seed
        self.path = str(gguf_path)
        self._lock = threading.Lock()
        self.structured = _check_structured(model_id, structured)
        self.structured_mechanism = "grammar"
        self._grammars: dict[str, object] = {}
        free_llama_at_exit(self._llama)

    def count_tokens(self, text: str) -> int:
        return len(self._llama.tokenize(text.encode("utf-8"), add_bos=False))

    def chat(self, messages: Sequence[ChatMessage | dict], *, max_tokens: int | None = None,
             temperature: float | None = None) -> Completion:
        return self._complete(messages, max_tokens, temperature, None)

    def grammar(self, schema: dict):
        """The GBNF grammar of a JSON schema (llama_cpp.LlamaGrammar.from_json_schema), memoised.
        A schema the converter cannot compile raises ModelError: never a silent fall-back to free JSON."""
        key = json.dumps(schema, sort_keys=True)
        if key not in self._grammars:
            from llama_cpp import LlamaGrammar  # heavy optional dependency: loaded with the model only

            try:
                # the schema's own key order: properties are written in the order they are declared
                self._grammars[key] = LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False)
            except Exception as exc:  # noqa: BLE001 - the converter raises assorted errors
                raise ModelError(f"{self.id}: cannot compile the JSON schema to a grammar: "
                                 f"{type(exc).__name__}: {exc}") from exc
        return self._grammars[key]

    def chat_structured(self, messages, schema: dict, *, name: str = "reply", max_tokens: int | None = None,
                        temperature: float | None = None) -> Completion:
        """One reply whose decoding is held to ``schema`` by a GBNF grammar."""
        return self._complete(messages, max_tokens, temperature, self.grammar(schema))

    def _complete(self, messages, max_tokens, temperature, grammar) -> Completion:
        with self._lock:
            self._llama.reset()
            resp = self._llama.create_chat_completion(
                messages=as_messages(messages),
                max_tokens=max_tokens or self.max_tokens,
                temperature=self.temperature if temperature is None else temperature,
                seed=self.seed, grammar=grammar,
            )
        usage = resp.get("usage") or {}
        return Completion(text=resp["choices"][0]["message"]["content"] or "",
                          prompt_tokens=usage.get("prompt_tokens"),
                          completion_tokens=usage.get("completion_tokens"), model=self.id, raw=resp)


class OllamaLLM:
    """A chat model on an Ollama server, through the official client."""

    def __init__(self, model_id: str, model_name: str, url: str, *, context_size: int = 2048,
                 temperature: float = 0.0, max_tokens: int = 128, seed: int = 0, timeout_s: float = 120.0,
                 structured: str = "auto"):
        import ollama  # optional: only for a model served by Ollama

        self.structured = _check_structured(model_id, structured)
        self.structured_mechanism = "format"
        self._client = ollama.Client(host=url, timeout=timeout_s)
        self.id = model_id
        self.model_name = model_name
        self.context_size = context_size
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.seed = seed
        self.url = url
        self.timeout_s = timeout_s

    def chat(self, messages, *, max_tokens=None, temperature=None) -> Completion:
        """One reply; a failure is a named ModelError (timeout / connection / response, see remote.py)."""
        return self._chat(messages, max_tokens, temperature, None)

    def chat_structured(self, messages, schema: dict, *, name: str = "reply", max_tokens=None,
                        temperature=None) -> Completion:
        """One reply held to ``schema`` by Ollama's ``format`` (the schema, as the official client takes it)."""
        return self._chat(messages, max_tokens, temperature, schema)

    def _chat(self, messages, max_tokens, temperature, schema) -> Completion:
        try:
            resp = self._client.chat(
                model=self.model_name, messages=as_messages(messages), format=schema,
                options={"temperature": self.temperature if temperature is None else temperature,
                         "num_predict": max_tokens or self.max_tokens, "seed": self.seed,
                         "num_ctx": self.context_size},
            )
            text = resp["message"]["content"]
        except Exception as exc:  # noqa: BLE001 - every client failure becomes a named ModelError
            raise ollama_error(exc, self.id, self.url, self.timeout_s) from exc
        return Completion(text=text or "", prompt_tokens=resp.get("prompt_eval_count"),
                          completion_tokens=resp.get("eval_count"), model=self.id)


class OpenAICompatibleLLM:
    """Any server speaking the OpenAI chat API (vLLM, llama.cpp server, LM Studio, OpenAI...).

    ``timeout_s`` bounds each attempt; the client retries once (connection errors, timeouts,
    HTTP 408 / 409 / 429 / 5xx), so a call that keeps failing returns after about twice that.
    """

    def __init__(self, model_id: str, url: str, model_name: str | None, *, api_key_env: str = "OPENAI_API_KEY",
                 context_size: int = 8192, temperature: float = 0.0, max_tokens: int = 128, seed: int = 0,
                 timeout_s: float = 120.0, max_retries: int = 1, structured: str = "auto"):
        import openai  # optional: only for an OpenAI-compatible server

        self.structured = _check_structured(model_id, structured)
        # the response formats still to try, best first; one the server refuses is dropped (and said)
        self._formats = ["json_schema", "json_object"]
        self.format_refusals: list[str] = []
        self._client = openai.OpenAI(base_url=url, api_key=os.environ.get(api_key_env) or "not-needed",
                                     timeout=timeout_s, max_retries=max_retries)
        self.url = url
        self.timeout_s = timeout_s
        self.model_name = model_name or self._first_model()
        self.id = model_id if model_name is None else f"openai-compatible:{self.model_name}"
        self.context_size = context_size
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.seed = seed

    def _first_model(self) -> str:
        who = f"OpenAI-compatible server at {self.url}"
        try:
            models = self._client.models.list().data
        except Exception as exc:  # noqa: BLE001 - every client failure becomes a named ModelError
            raise openai_error(exc, who + " (listing models)", self.url, self.timeout_s) from exc
        if not models:
            raise ModelError(f"{who} serves no model; set llm.model")
        return models[0].id

    @property
    def structured_mechanism(self) -> str:
        return self._formats[0] if self._formats else "none"

    def chat(self, messages, *, max_tokens=None, temperature=None) -> Completion:
        """One reply; a failure is a named ModelError (timeout / connection / response, see remote.py)."""
        return self._create(messages, max_tokens, temperature, None)

    def chat_structured(self, messages, schema: dict, *, name: str = "reply", max_tokens=None,
                        temperature=None) -> Completion:
        """One reply held to ``schema`` by ``response_format``: ``json_schema`` (the OpenAI API), or,
        on a server that refuses it (HTTP 400 / 422, or a 500 naming ``response_format``, as
        llama-cpp-python's server does), llama-cpp-python's ``json_object`` with a
        ``schema``; a server that refuses both is asked in free text from then on (mode ``none``),
        and ``format_refusals`` keeps what it said. The reply's ``raw["_structured_mode"]`` names
        the format used."""
        while self._formats:
            kind = self._formats[0]
            fmt = ({"type": "json_schema", "json_schema": {"name": schema_name(name), "schema": schema,
                                                           "strict": True}}
                   if kind == "json_schema" else {"type": "json_object", "schema": schema})
            try:
                out = self._create(messages, max_tokens, temperature, fmt)
            except ModelResponseError as exc:
                msg = str(exc)  # llama-cpp-python's server answers HTTP 500 naming the field it refused
                if not (" HTTP 400" in msg or " HTTP 422" in msg or (" HTTP 500" in msg and "response_format" in msg)):
                    raise
                self.format_refusals.append(f"{kind}: {exc}"[:300])
                self._formats.pop(0)
                continue
            out.raw["_structured_mode"] = kind
            return out
        out = self._create(messages, max_tokens, temperature, None)
        out.raw["_structured_mode"] = "none"
        return out

    def _create(self, messages, max_tokens, temperature, response_format) -> Completion:
        extra = {"response_format": response_format} if response_format is not None else {}
        try:
            resp = self._client.chat.completions.create(
                model=self.model_name, messages=as_messages(messages),
                max_tokens=max_tokens or self.max_tokens,
                temperature=self.temperature if temperature is None else temperature, seed=self.seed, **extra,
            )
        except Exception as exc:  # noqa: BLE001 - every client failure becomes a named ModelError
            raise openai_error(exc, self.id, self.url, self.timeout_s) from exc
        text, prompt_tokens, completion_tokens = chat_text(resp, self.id, self.url)
        return Completion(text=text, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, model=self.id)
