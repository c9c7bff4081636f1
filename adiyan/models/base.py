"""Small interfaces every model provider implements, so stages never care where a model runs."""

from __future__ import annotations

import atexit
import contextlib
import os
import weakref
from dataclasses import dataclass, field
from typing import Literal, Protocol, Sequence, runtime_checkable

import numpy as np

from ..types import Kind  # noqa: E402,F401 - re-exported


class ModelError(RuntimeError):
    """A model could not be loaded or called; the message says which and why."""


class ModelAssetError(ModelError):
    """A model file is missing or fails its checks (size, CRC, sha256)."""


# A model behind HTTP fails in one of three named ways (adiyan/models/remote.py maps the client
# libraries' exceptions onto them); each message names the model and the server's URL.
class ModelTimeoutError(ModelError):
    """The server did not answer within the configured timeout."""


class ModelConnectionError(ModelError):
    """Nothing answered at the server's URL (connection refused, reset, unresolvable host)."""


class ModelResponseError(ModelError):
    """The server answered, but not with a usable reply: an HTTP error status, a body that is
    not JSON, or JSON of the wrong shape."""


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised float32 rows.

    ``id`` names the model (and truncation), not where it runs: nomic-embed-text served by
    Ollama and the same GGUF in-process share an id, because their vectors are comparable.
    """

    id: str
    dim: int
    normalized: bool

    def prefix(self, kind: Kind) -> str: ...

    def embed(self, texts: Sequence[str], kind: Kind = "document") -> np.ndarray: ...


@dataclass
class ChatMessage:
    role: Literal["system", "user", "assistant"]
    content: str


@dataclass
class Completion:
    text: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    model: str = ""
    raw: dict = field(default_factory=dict, repr=False)


@runtime_checkable
class LLM(Protocol):
    id: str
    context_size: int

    def chat(
        self,
        messages: Sequence[ChatMessage | dict],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> Completion: ...


def as_messages(messages: Sequence[ChatMessage | dict]) -> list[dict]:
    return [m if isinstance(m, dict) else {"role": m.role, "content": m.content} for m in messages]


def l2_normalize(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float32)
    if matrix.ndim == 1:
        matrix = matrix[None, :]
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (matrix / norms).astype(np.float32)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = l2_normalize(a)[0]
    b = l2_normalize(b)[0]
    return float(np.dot(a, b))


def passive_openmp() -> None:
    """Let OpenMP threads sleep, not spin, between parallel regions (``OMP_WAIT_POLICY=PASSIVE``) unless
    the environment says otherwise; called before llama.cpp (an OpenMP build) is loaded, since the
    runtime reads it once. Measured on this 2-core machine under load (5 December 2026, nomic-embed-text
    f16, one thread): a 3-token text cost 1.33 CPU-seconds with the default spin against 0.034 passive, a
    202-token one 2.26 against 0.88; the vectors do not change (the wait policy only decides what an
    idle thread does), so cached embeddings stay valid."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def free_llama_at_exit(llama) -> None:
    """Close a llama.cpp model while the interpreter is still whole.

    llama-cpp-python frees its model in ``__del__``; at interpreter shutdown that runs after its
    C bindings are torn down and prints a ``TypeError`` traceback. A weak reference, so models
    dropped earlier are still freed as usual.
    """
    ref = weakref.ref(llama)

    def close() -> None:
        obj = ref()
        if obj is not None:
            with contextlib.suppress(Exception):
                obj.close()

    atexit.register(close)
