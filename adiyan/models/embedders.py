"""Embedding providers: sentence-transformers in-process, GGUF through llama.cpp, Ollama or any
OpenAI-compatible server by URL."""

from __future__ import annotations

import os
import threading
from typing import Sequence

import numpy as np

from .base import Kind, ModelError, free_llama_at_exit, l2_normalize
from .remote import embedding_rows, ollama_error, openai_error

# nomic-embed-text is trained with task prefixes; without them its scores drop (offline.md).
NOMIC_PREFIXES = {"query": "search_query: ", "document": "search_document: "}
NOMIC_ID = "nomic-embed-text"


class _BaseEmbedder:
    id: str
    dim: int
    normalized: bool = True
    prefixes: dict[str, str] = {}
    truncate_dim: int | None = None

    def _server_model(self, model_id: str, model_name: str, url: str, prefixes, batch_size: int,
                      timeout_s: float, truncate_dim: int | None) -> None:
        """A server's model (client already set): where it is, its width from one probe call,
        then the Matryoshka cut and the id."""
        self.model_name = model_name
        self.prefixes = dict(prefixes or {})
        self.batch_size = batch_size
        self.url = url
        self.timeout_s = timeout_s
        self.id = model_id
        full = self._call(["dimension probe"]).shape[1]
        self.truncate_dim = truncate_dim if truncate_dim and truncate_dim < full else None
        self.dim = self.truncate_dim or full
        self.id = model_id + (f"@{self.truncate_dim}" if self.truncate_dim else "")

    def prefix(self, kind: Kind | None) -> str:
        """The model's task prefix; ``kind=None`` embeds the text exactly as given."""
        return self.prefixes.get(kind, "") if kind else ""

    def embed(self, texts: Sequence[str], kind: Kind | None = "document") -> np.ndarray:
        """Embed texts with this model's prefix for ``kind``; rows are L2-normalised float32."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not one string")
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self.cut(self.embed_full(texts, kind))

    @property
    def full_id(self) -> str:
        """The full-width model's id: the embedding cache stores full rows under it, so every
        Matryoshka width of one model shares one encode."""
        return self.id[: -len(f"@{self.truncate_dim}")] if self.truncate_dim else self.id

    def embed_full(self, texts: Sequence[str], kind: Kind | None = "document") -> np.ndarray:
        """Full-width rows (before any Matryoshka cut), L2-normalised float32."""
        pre = self.prefix(kind)
        return l2_normalize(self._embed_raw([pre + t for t in texts]))

    def cut(self, full: np.ndarray) -> np.ndarray:
        """The Matryoshka cut of full-width rows: keep the head, then re-normalise."""
        return l2_normalize(full[:, : self.truncate_dim]) if self.truncate_dim else full

    def _embed_raw(self, texts: list[str]) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def input_window(self) -> int | None:
        """Tokens the model reads per text (the rest is cut off); None when it cannot be known here."""
        return None

    def count_tokens(self, text: str) -> int | None:
        """Tokens of ``text`` (prefix included by the caller) with the model's own tokenizer,
        special tokens included; None when the model's tokenizer is not available here."""
        return None

    def describe(self) -> dict:
        return {"id": self.id, "dim": self.dim, "normalized": self.normalized,
                "query_prefix": self.prefix("query"), "document_prefix": self.prefix("document")}


class SentenceTransformerEmbedder(_BaseEmbedder):
    """A sentence-transformers folder on disk (minilm and mpnet ship theirs in PyPI packages)."""

    def __init__(self, model_id: str, path: str, *, batch_size: int = 32,
                 truncate_dim: int | None = None, max_seq_length: int | None = None):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer  # heavy: torch loads only with this model

        try:
            self._model = SentenceTransformer(str(path), device="cpu")
        except Exception as exc:  # noqa: BLE001 - re-raised with the path named
            raise ModelError(f"{model_id}: cannot load sentence-transformers model from {path}: {exc}") from exc
        if max_seq_length:
            self._model.max_seq_length = max_seq_length
        get_dim = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        full = get_dim()
        self.truncate_dim = truncate_dim if truncate_dim and truncate_dim < full else None
        self.dim = self.truncate_dim or full
        self.id = model_id + (f"@{self.truncate_dim}" if self.truncate_dim else "")
        self.batch_size = batch_size
        self.path = str(path)
        self._lock = threading.Lock()

    def input_window(self) -> int:
        return int(self._model.max_seq_length)  # minilm 256 word pieces, mpnet 384

    def count_tokens(self, text: str) -> int:
        return len(self._model.tokenizer(text, add_special_tokens=True, verbose=False)["input_ids"])

    def _embed_raw(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            return self._model.encode(texts, batch_size=self.batch_size, convert_to_numpy=True,
                                      normalize_embeddings=False, show_progress_bar=False)


class LlamaCppEmbedder(_BaseEmbedder):
    """A GGUF embedding model run in-process by llama.cpp (nomic-embed-text needs no server)."""

    def __init__(self, model_id: str, gguf_path: str, *, prefixes: dict[str, str] | None = None,
                 n_ctx: int = 2048, threads: int | None = None, truncate_dim: int | None = None,
                 batch_size: int = 32):
        try:
            from llama_cpp import Llama  # heavy, optional: llama.cpp loads only with a GGUF model
        except ImportError as exc:
            raise ModelError(f"{model_id}: llama-cpp-python is not installed (scripts/install.sh builds it)") from exc
        self._llama = Llama(model_path=str(gguf_path), embedding=True, n_ctx=n_ctx, n_batch=n_ctx,
                            n_ubatch=n_ctx, n_threads=threads or os.cpu_count(), seed=0, verbose=False)
        self.prefixes = dict(prefixes or {})
        self.batch_size = batch_size
        self.n_ctx = n_ctx
        full = self._llama.n_embd()
        self.truncate_dim = truncate_dim if truncate_dim and truncate_dim < full else None
        self.dim = self.truncate_dim or full
        self.id = model_id + (f"@{self.truncate_dim}" if self.truncate_dim else "")
        self.path = str(gguf_path)
        self._lock = threading.Lock()
        free_llama_at_exit(self._llama)

    def input_window(self) -> int:
        return int(self.n_ctx)  # the llama.cpp context (nomic-embed-text is trained to 8192; runs 2048 here)

    def count_tokens(self, text: str) -> int:
        with self._lock:
            return len(self._llama.tokenize(text.encode("utf-8"), add_bos=True))

    def _embed_raw(self, texts: list[str]) -> np.ndarray:
        out = []
        with self._lock:
            for text in texts:
                tokens = self._llama.tokenize(text.encode("utf-8"), add_bos=True)
                if len(tokens) > self.n_ctx:  # keep the head rather than failing the batch
                    text = self._llama.detokenize(tokens[: self.n_ctx - 2]).decode("utf-8", "ignore")
                out.append(self._llama.embed(text, normalize=False))
        return np.asarray(out, dtype=np.float32)


class OllamaEmbedder(_BaseEmbedder):
    """An embedding model served by Ollama, through its official client."""

    def __init__(self, model_id: str, model_name: str, url: str, *, prefixes: dict[str, str] | None = None,
                 truncate_dim: int | None = None, batch_size: int = 32, timeout_s: float = 120.0):
        import ollama  # optional: only for a model served by Ollama

        self._client = ollama.Client(host=url, timeout=timeout_s)
        self._server_model(model_id, model_name, url, prefixes, batch_size, timeout_s, truncate_dim)

    def _call(self, texts: list[str]) -> np.ndarray:
        """One /api/embed request; a failure is a named ModelError (see remote.py)."""
        try:
            resp = self._client.embed(model=self.model_name, input=texts)
            rows = np.asarray(resp["embeddings"], dtype=np.float32)
        except Exception as exc:  # noqa: BLE001 - every client failure becomes a named ModelError
            raise ollama_error(exc, f"{self.id} (model {self.model_name!r})", self.url, self.timeout_s) from exc
        if rows.ndim != 2 or rows.shape[0] != len(texts) or not np.isfinite(rows).all():
            raise ollama_error(ValueError(f"{rows.shape[0] if rows.ndim else 0} embeddings for {len(texts)} texts"),
                               self.id, self.url, self.timeout_s)
        return rows

    def _embed_raw(self, texts: list[str]) -> np.ndarray:
        parts = [self._call(texts[i : i + self.batch_size]) for i in range(0, len(texts), self.batch_size)]
        return np.concatenate(parts).astype(np.float32)


class OpenAICompatibleEmbedder(_BaseEmbedder):
    """An embedding model on any server speaking the OpenAI embeddings API (llama.cpp server,
    vLLM, LM Studio, OpenAI...), through the official ``openai`` client.

    The id is ``openai-compatible:MODEL``, not the in-process model's id: whether the server's
    vectors are comparable with another runtime's is for a test to show (tests/test_servers.py
    measures nomic-embed-text over HTTP against the in-process GGUF), not for the name to claim.
    ``timeout_s`` bounds each attempt; the client retries once, as for the LLM.
    """

    def __init__(self, model_id: str, url: str, model_name: str, *, prefixes: dict[str, str] | None = None,
                 truncate_dim: int | None = None, batch_size: int = 32, timeout_s: float = 120.0,
                 api_key_env: str = "OPENAI_API_KEY", max_retries: int = 1):
        import openai  # optional: only for an OpenAI-compatible server

        self._client = openai.OpenAI(base_url=url, api_key=os.environ.get(api_key_env) or "not-needed",
                                     timeout=timeout_s, max_retries=max_retries)
        self._server_model(model_id, model_name, url, prefixes, batch_size, timeout_s, truncate_dim)

    def _call(self, texts: list[str]) -> np.ndarray:
        """One /embeddings request; a failure is a named ModelError (see remote.py)."""
        try:
            resp = self._client.embeddings.create(model=self.model_name, input=texts, encoding_format="float")
        except Exception as exc:  # noqa: BLE001 - every client failure becomes a named ModelError
            raise openai_error(exc, f"{self.id} (model {self.model_name!r})", self.url, self.timeout_s) from exc
        return np.asarray(embedding_rows(resp, len(texts), self.id, self.url), dtype=np.float32)

    def _embed_raw(self, texts: list[str]) -> np.ndarray:
        parts = [self._call(texts[i : i + self.batch_size]) for i in range(0, len(texts), self.batch_size)]
        return np.concatenate(parts)
