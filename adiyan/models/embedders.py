"""Embedding providers: sentence-transformers in-process, GGUF through llama.cpp, Ollama or any
OpenAI-compatible server by URL.

Every embedder has a user-facing ``id`` (``nomic-embed-text``, ``minilm@128``: what floors, regression
cases and reports name) and an ``identity``: the id, where the model runs (``runtime``) and its exact
weights (``weights``: a sha256 of the weight files, Ollama's model digest, or the model id an
OpenAI-compatible server reports). Caches, evaluation indexes and collections are keyed by the
identity, so nomic-embed-text on Ollama and in-process never serve each other's vectors.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Sequence

import numpy as np

from .base import Kind, ModelError, free_llama_at_exit, l2_normalize, passive_openmp
from .remote import embedding_rows, ollama_error, openai_error

# nomic-embed-text is trained with task prefixes; without them its scores drop (offline.md).
NOMIC_PREFIXES = {"query": "search_query: ", "document": "search_document: "}
NOMIC_ID = "nomic-embed-text"
DIGEST_CHARS = 16  # hex characters of a sha256 kept in an identity
_DIGESTS: dict[tuple, str] = {}
_DIGESTS_LOCK = threading.Lock()


def weights_digest(path: str | os.PathLike, memo_dir: str | os.PathLike | None = None) -> str:
    """``sha256:<hex>`` of a weight file, or of a model folder (every file's relative name and
    content; hidden marker files left out). Memoised by (path, size, mtime) in the process and, when
    ``memo_dir`` is given, in ``<memo_dir>/weights-digests.json``, so a model is hashed once."""
    root = Path(path).resolve()
    files = [root] if root.is_file() else sorted(f for f in root.rglob("*") if f.is_file()
                                                 and not any(part.startswith(".") for part in f.relative_to(root).parts))
    if not files:
        raise ModelError(f"{root}: no model files to identify")
    stamp = tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files)
    memo_key = (str(root), stamp)
    memo_file = Path(memo_dir) / "weights-digests.json" if memo_dir else None
    with _DIGESTS_LOCK:
        if memo_key in _DIGESTS:
            return _DIGESTS[memo_key]
        stored = {}
        if memo_file is not None and memo_file.is_file():
            try:
                stored = json.loads(memo_file.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                stored = {}  # a damaged memo is only a memo: hash again
        entry = stored.get(str(root))
        if isinstance(entry, dict) and entry.get("stamp") == [list(x) for x in stamp]:
            _DIGESTS[memo_key] = entry["digest"]
            return entry["digest"]
        h = hashlib.sha256()
        for f in files:
            fh = hashlib.sha256()
            with open(f, "rb") as fp:
                for block in iter(lambda: fp.read(1 << 20), b""):
                    fh.update(block)
            h.update((str(f.relative_to(root)) if f != root else f.name).encode() + b"\x00" + fh.digest())
        digest = "sha256:" + h.hexdigest()[:DIGEST_CHARS]
        _DIGESTS[memo_key] = digest
        if memo_file is not None:
            stored[str(root)] = {"stamp": [list(x) for x in stamp], "digest": digest}
            try:
                memo_file.parent.mkdir(parents=True, exist_ok=True)
                tmp = memo_file.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(json.dumps(stored, indent=1), encoding="utf-8")
                tmp.replace(memo_file)
            except OSError:
                pass  # a read-only models folder: the digest is memoised in the process only
        return digest


class _BaseEmbedder:
    id: str
    dim: int
    normalized: bool = True
    prefixes: dict[str, str] = {}
    truncate_dim: int | None = None
    runtime: str = "unknown"  # where the model runs, e.g. "llama.cpp n_ctx=2048" or "ollama"
    weights: str = "unknown"  # its exact weights, e.g. "sha256:f7af6f66802f4df8" or "ollama digest:0a109f422b47"

    def _widths(self, model_id: str, full: int, truncate_dim: int | None) -> None:
        """The Matryoshka cut and the id; a cut that is not narrower than the model is refused by name
        (it used to mean the full width, silently)."""
        if truncate_dim is not None and truncate_dim >= full:
            raise ModelError(f"{model_id}: embedder.truncate_dim={truncate_dim} is not narrower than the model's "
                             f"{full} dimensions; leave embedder.truncate_dim unset (null) for the full width")
        self.truncate_dim = truncate_dim or None
        self.dim = self.truncate_dim or full
        self.id = model_id + (f"@{self.truncate_dim}" if self.truncate_dim else "")

    def _server_model(self, model_id: str, model_name: str, url: str, prefixes, batch_size: int,
                      timeout_s: float, truncate_dim: int | None) -> None:
        """A server's model (client already set): where it is, its width from one probe call,
        then the Matryoshka cut, the id and what the server says its weights are."""
        self.model_name = model_name
        self.prefixes = dict(prefixes or {})
        self.batch_size = batch_size
        self.url = url
        self.timeout_s = timeout_s
        self.id = model_id
        full = self._call(["dimension probe"]).shape[1]
        self._widths(model_id, full, truncate_dim)
        self.runtime, self.weights = self._where()

    def _where(self) -> tuple[str, str]:  # pragma: no cover - every server embedder says
        raise NotImplementedError

    @property
    def full_identity(self) -> str:
        """The full-width model's identity: id, runtime, weights (the embedding cache's key)."""
        return f"{self.full_id}|{self.runtime}|{self.weights}"

    @property
    def identity(self) -> str:
        """Id, where it runs and its exact weights, and the Matryoshka width: what caches, evaluation
        indexes and collections are keyed by (``id`` stays the user-facing name floors are found by)."""
        return self.full_identity + (f"@{self.truncate_dim}" if self.truncate_dim else "")

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
        return {"id": self.id, "identity": self.identity, "runtime": self.runtime, "weights": self.weights,
                "dim": self.dim, "normalized": self.normalized,
                "query_prefix": self.prefix("query"), "document_prefix": self.prefix("document")}

    def take_truncated(self) -> list[bool] | None:
        """Which texts of this thread's last ``embed_full`` call were cut to the input window (None:
        this model does not say)."""
        return None


class SentenceTransformerEmbedder(_BaseEmbedder):
    """A sentence-transformers folder on disk (minilm and mpnet ship theirs in PyPI packages)."""

    def __init__(self, model_id: str, path: str, *, batch_size: int = 32,
                 truncate_dim: int | None = None, max_seq_length: int | None = None,
                 digest_memo: str | os.PathLike | None = None):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer  # heavy: torch loads only with this model

        try:
            self._model = SentenceTransformer(str(path), device="cpu")
        except Exception as exc:  # noqa: BLE001 - re-raised with the path named
            raise ModelError(f"{model_id}: cannot load sentence-transformers model from {path}: {exc}") from exc
        if max_seq_length:
            self._model.max_seq_length = max_seq_length
        get_dim = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        self._widths(model_id, get_dim(), truncate_dim)
        self.batch_size = batch_size
        self.path = str(path)
        self.runtime = f"sentence-transformers max_seq_length={self._model.max_seq_length}"
        self.weights = weights_digest(path, digest_memo)
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
                 batch_size: int = 32, weights_sha256: str | None = None,
                 digest_memo: str | os.PathLike | None = None):
        """``weights_sha256``: the file's sha256 when it is known already (the packaged nomic GGUF is
        verified against its own); otherwise the file is hashed once (:func:`weights_digest`)."""
        try:
            passive_openmp()  # before the OpenMP runtime loads with llama.cpp
            from llama_cpp import Llama  # heavy, optional: llama.cpp loads only with a GGUF model
        except ImportError as exc:
            raise ModelError(f"{model_id}: llama-cpp-python is not installed (scripts/install.sh builds it)") from exc
        self._llama = Llama(model_path=str(gguf_path), embedding=True, n_ctx=n_ctx, n_batch=n_ctx,
                            n_ubatch=n_ctx, n_threads=threads or os.cpu_count(), seed=0, verbose=False)
        self.prefixes = dict(prefixes or {})
        self.batch_size = batch_size
        self.n_ctx = n_ctx
        self.threads = threads
        self._widths(model_id, self._llama.n_embd(), truncate_dim)
        self.path = str(gguf_path)
        self.runtime = f"llama.cpp n_ctx={n_ctx}"
        self.weights = (f"sha256:{weights_sha256[:DIGEST_CHARS]}" if weights_sha256
                        else weights_digest(gguf_path, digest_memo))
        self._lock = threading.Lock()
        self._cut = threading.local()  # per thread: which texts of the last call were cut to n_ctx
        self.truncated_inputs = 0  # texts cut to n_ctx since the model was loaded (stats count per run)
        free_llama_at_exit(self._llama)

    def input_window(self) -> int:
        return int(self.n_ctx)  # the llama.cpp context (nomic-embed-text is trained to 8192; runs 2048 here)

    def count_tokens(self, text: str) -> int:
        with self._lock:
            return len(self._llama.tokenize(text.encode("utf-8"), add_bos=True))

    def _embed_raw(self, texts: list[str]) -> np.ndarray:
        out, cut = [], []
        with self._lock:
            for text in texts:
                tokens = self._llama.tokenize(text.encode("utf-8"), add_bos=True)
                cut.append(len(tokens) > self.n_ctx)
                if cut[-1]:  # keep the head rather than failing the batch; counted, never silent
                    text = self._llama.detokenize(tokens[: self.n_ctx - 2]).decode("utf-8", "ignore")
                out.append(self._llama.embed(text, normalize=False))
            self.truncated_inputs += sum(cut)
        self._cut.flags = cut
        return np.asarray(out, dtype=np.float32)

    def take_truncated(self) -> list[bool] | None:
        flags, self._cut.flags = getattr(self._cut, "flags", None), None
        return flags


class OllamaEmbedder(_BaseEmbedder):
    """An embedding model served by Ollama, through its official client."""

    def __init__(self, model_id: str, model_name: str, url: str, *, prefixes: dict[str, str] | None = None,
                 truncate_dim: int | None = None, batch_size: int = 32, timeout_s: float = 120.0):
        import ollama  # optional: only for a model served by Ollama

        self._client = ollama.Client(host=url, timeout=timeout_s)
        self._server_model(model_id, model_name, url, prefixes, batch_size, timeout_s, truncate_dim)

    def _where(self) -> tuple[str, str]:
        """Ollama's digest of the model (``/api/tags``): the same digest is the same weights on any
        Ollama. A server that does not list it is named by its URL, so its vectors share nothing."""
        try:
            listed = self._client.list()
            models = listed["models"] if isinstance(listed, dict) else listed.models
            names = {self.model_name, f"{self.model_name}:latest"}
            for m in models:
                get = m.get if isinstance(m, dict) else (lambda k, m=m: getattr(m, k, None))
                if (get("model") or get("name")) in names and get("digest"):
                    return "ollama", f"ollama digest:{str(get('digest')).split(':')[-1][:DIGEST_CHARS]}"
        except Exception:  # noqa: BLE001 - no digest: the identity falls back to the server's URL
            pass
        return f"ollama {self.url}", f"model {self.model_name}, digest not reported"

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
        self.reported_model: str | None = None
        self._server_model(model_id, model_name, url, prefixes, batch_size, timeout_s, truncate_dim)

    def _where(self) -> tuple[str, str]:
        """The server (its URL) and the model id it reported for the probe call."""
        return f"openai-compatible {self.url}", f"model {self.reported_model or self.model_name}"

    def _call(self, texts: list[str]) -> np.ndarray:
        """One /embeddings request; a failure is a named ModelError (see remote.py)."""
        try:
            resp = self._client.embeddings.create(model=self.model_name, input=texts, encoding_format="float")
        except Exception as exc:  # noqa: BLE001 - every client failure becomes a named ModelError
            raise openai_error(exc, f"{self.id} (model {self.model_name!r})", self.url, self.timeout_s) from exc
        rows = np.asarray(embedding_rows(resp, len(texts), self.id, self.url), dtype=np.float32)
        model = resp.get("model") if isinstance(resp, dict) else getattr(resp, "model", None)
        if self.reported_model is None and isinstance(model, str) and model:
            self.reported_model = model
        return rows

    def _embed_raw(self, texts: list[str]) -> np.ndarray:
        parts = [self._call(texts[i : i + self.batch_size]) for i in range(0, len(texts), self.batch_size)]
        return np.concatenate(parts)
