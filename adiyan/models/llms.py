"""Chat model providers: a GGUF in-process (the embedded default), Ollama, OpenAI-compatible servers."""

from __future__ import annotations

import os
import threading
from typing import Sequence

from .base import ChatMessage, Completion, ModelError, as_messages, free_llama_at_exit
from .remote import chat_text, ollama_error, openai_error


class LlamaCppLLM:
    """A chat GGUF run by llama.cpp in-process; greedy and seeded, so answers repeat."""

    def __init__(self, model_id: str, gguf_path: str, *, context_size: int = 2048, seed: int = 0,
                 temperature: float = 0.0, max_tokens: int = 128, threads: int | None = None):
        try:
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
        free_llama_at_exit(self._llama)

    def count_tokens(self, text: str) -> int:
        return len(self._llama.tokenize(text.encode("utf-8"), add_bos=False))

    def chat(self, messages: Sequence[ChatMessage | dict], *, max_tokens: int | None = None,
             temperature: float | None = None) -> Completion:
        with self._lock:
            self._llama.reset()
            resp = self._llama.create_chat_completion(
                messages=as_messages(messages),
                max_tokens=max_tokens or self.max_tokens,
                temperature=self.temperature if temperature is None else temperature,
                seed=self.seed,
            )
        usage = resp.get("usage") or {}
        return Completion(text=resp["choices"][0]["message"]["content"] or "",
                          prompt_tokens=usage.get("prompt_tokens"),
                          completion_tokens=usage.get("completion_tokens"), model=self.id, raw=resp)


class OllamaLLM:
    """A chat model on an Ollama server, through the official client."""

    def __init__(self, model_id: str, model_name: str, url: str, *, context_size: int = 2048,
                 temperature: float = 0.0, max_tokens: int = 128, seed: int = 0, timeout_s: float = 120.0):
        import ollama  # optional: only for a model served by Ollama

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
        try:
            resp = self._client.chat(
                model=self.model_name, messages=as_messages(messages),
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
                 timeout_s: float = 120.0, max_retries: int = 1):
        import openai  # optional: only for an OpenAI-compatible server

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

    def chat(self, messages, *, max_tokens=None, temperature=None) -> Completion:
        """One reply; a failure is a named ModelError (timeout / connection / response, see remote.py)."""
        try:
            resp = self._client.chat.completions.create(
                model=self.model_name, messages=as_messages(messages),
                max_tokens=max_tokens or self.max_tokens,
                temperature=self.temperature if temperature is None else temperature, seed=self.seed,
            )
        except Exception as exc:  # noqa: BLE001 - every client failure becomes a named ModelError
            raise openai_error(exc, self.id, self.url, self.timeout_s) from exc
        text, prompt_tokens, completion_tokens = chat_text(resp, self.id, self.url)
        return Completion(text=text, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, model=self.id)
