"""Embedding providers: sentence-transformers in-process, GGUF through llama.cpp, Ollama by URL."""

from __future__ import annotations

import os
import threading
from typing import Sequence

import numpy as np

from .base import Kind, ModelError, free_llama_at_exit, l2_normalize

# nomic-embed-text is trained with task prefixes; without them its scores drop (offline.md).
NOMIC_PREFIXES = {"query": "search_query: ", "document": "search_document: "}
NOMIC_ID = "nomic-embed-text"


class _BaseEmbedder:
    id: str
    dim: int
    normalized: bool = True
    prefixes: dict[str, str] = {}
    truncate_dim: int | None = None

    def prefix(self, kind: Kind | None) -> str:
        """The model's task prefix; ``kind=None`` embeds the text exactly as given."""
        return self.prefixes.get(kind, "") if kind else ""

    def embed(self, texts: Sequence[str], kind: Kind | None = "document") -> np.ndarray:
        """Embed texts with this model's prefix for ``kind``; rows are L2-normalised float32."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not one string")
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        pre = self.prefix(kind)
        raw = self._embed_raw([pre + t for t in texts])
        if self.truncate_dim:
            raw = raw[:, : self.truncate_dim]  # Matryoshka: keep the head, then re-normalise
        return l2_normalize(raw)

    def _embed_raw(self, texts: list[str]) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

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
        self.model_name = model_name
        self.prefixes = dict(prefixes or {})
        self.batch_size = batch_size
        self.url = url
        try:
            probe = self._client.embed(model=model_name, input=["dimension probe"])
        except Exception as exc:  # noqa: BLE001
            raise ModelError(f"{model_id}: Ollama at {url} did not embed with model {model_name!r}: {exc}") from exc
        full = len(probe["embeddings"][0])
        self.truncate_dim = truncate_dim if truncate_dim and truncate_dim < full else None
        self.dim = self.truncate_dim or full
        self.id = model_id + (f"@{self.truncate_dim}" if self.truncate_dim else "")

    def _embed_raw(self, texts: list[str]) -> np.ndarray:
        rows = []
        for i in range(0, len(texts), self.batch_size):
            resp = self._client.embed(model=self.model_name, input=texts[i : i + self.batch_size])
            rows.extend(resp["embeddings"])
        return np.asarray(rows, dtype=np.float32)
