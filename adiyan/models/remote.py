"""Models behind HTTP: their clients' failures as named errors, and their replies checked.

A call to a model server fails in one of three ways (see :mod:`adiyan.models.base`), each a
:class:`ModelError` naming the model and the URL, so a caller can count it and never cache it as
a success: :class:`ModelTimeoutError` (no reply within ``timeout_s``),
:class:`ModelConnectionError` (nothing answered at the URL) and :class:`ModelResponseError` (an
HTTP error status, a body that is not JSON, JSON of the wrong shape). The official clients
(``openai``, ``ollama``) raise their own exception types; ``openai_error`` / ``ollama_error``
translate them. Replies are checked here too: the ``openai`` client does not validate what a
server sends (a body that is not JSON comes back as a string, a missing field as ``None``).
"""

from __future__ import annotations

import math
from typing import Any

from .base import ModelConnectionError, ModelError, ModelResponseError, ModelTimeoutError

EXCERPT_CHARS = 200


def excerpt(text: Any, n: int = EXCERPT_CHARS) -> str:
    text = " ".join(str(text if text is not None else "").split())
    return text if len(text) <= n else text[: n - 1] + "…"


def openai_error(exc: BaseException, who: str, url: str, timeout_s: float) -> ModelError:
    """The named error for an exception raised by the ``openai`` client."""
    import openai  # optional: loaded already by the OpenAI-compatible model that failed

    if isinstance(exc, ModelError):
        return exc
    if isinstance(exc, openai.APITimeoutError):
        return ModelTimeoutError(f"{who}: no reply from {url} within {timeout_s:g} s")
    if isinstance(exc, openai.APIConnectionError):
        return ModelConnectionError(f"{who}: cannot reach the server at {url} ({_cause(exc)}); is it running?")
    if isinstance(exc, openai.APIStatusError):
        return ModelResponseError(f"{who}: server at {url} answered HTTP {exc.status_code}: "
                                  f"{excerpt(_body(exc.response))}")
    if isinstance(exc, (openai.APIResponseValidationError, ValueError)):  # ValueError: a body that is not JSON
        return ModelResponseError(f"{who}: server at {url} sent a reply that is not valid JSON "
                                  f"({type(exc).__name__}: {excerpt(exc)})")
    return ModelError(f"{who}: server at {url} failed: {type(exc).__name__}: {exc}")


def ollama_error(exc: BaseException, who: str, url: str, timeout_s: float) -> ModelError:
    """The named error for an exception raised by the ``ollama`` client."""
    import httpx  # optional: the ollama client's transport, loaded already by the model that failed
    import ollama  # optional: loaded already by the Ollama model that failed

    if isinstance(exc, ModelError):
        return exc
    if isinstance(exc, (httpx.TimeoutException, TimeoutError)):
        return ModelTimeoutError(f"{who}: no reply from Ollama at {url} within {timeout_s:g} s")
    if isinstance(exc, (ConnectionError, httpx.TransportError)):
        return ModelConnectionError(f"{who}: cannot reach Ollama at {url} ({type(exc).__name__}); is it running?")
    if isinstance(exc, ollama.ResponseError):
        return ModelResponseError(f"{who}: Ollama at {url} answered HTTP {exc.status_code}: {excerpt(exc.error)}")
    if isinstance(exc, ValueError):  # json.JSONDecodeError, pydantic.ValidationError
        return ModelResponseError(f"{who}: Ollama at {url} sent an unusable reply ({type(exc).__name__}: "
                                  f"{excerpt(exc)})")
    return ModelError(f"{who}: Ollama at {url} failed: {type(exc).__name__}: {exc}")


def _cause(exc: BaseException) -> str:
    inner = exc.__cause__ or exc.__context__
    return f"{type(inner).__name__}: {inner}" if inner is not None else str(exc)


def _body(response) -> str:
    try:
        return response.text
    except Exception:  # noqa: BLE001 - a body that cannot be read is reported as such
        return "<unreadable body>"


def _get(obj: Any, name: str) -> Any:
    """A field of a reply object, whether the client built a model or left a dict."""
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def chat_text(resp: Any, who: str, url: str) -> tuple[str, int | None, int | None]:
    """(text, prompt tokens, completion tokens) of a chat completion, or ModelResponseError."""
    if isinstance(resp, (str, bytes)):
        raise ModelResponseError(f"{who}: server at {url} answered with a body that is not JSON: {excerpt(resp)}")
    choices = _get(resp, "choices")
    if not isinstance(choices, list) or not choices:
        raise ModelResponseError(f"{who}: server at {url} sent a chat reply without choices")
    message = _get(choices[0], "message")
    content = _get(message, "content") if message is not None else None
    if message is None or not (content is None or isinstance(content, str)):
        raise ModelResponseError(f"{who}: server at {url} sent a chat reply without a message text")
    usage = _get(resp, "usage")
    tokens = [_get(usage, k) if usage is not None else None for k in ("prompt_tokens", "completion_tokens")]
    tokens = [t if isinstance(t, int) else None for t in tokens]
    return content or "", tokens[0], tokens[1]


def embedding_rows(resp: Any, n: int, who: str, url: str) -> list[list[float]]:
    """The ``n`` vectors of an embeddings reply in input order, or ModelResponseError."""
    if isinstance(resp, (str, bytes)):
        raise ModelResponseError(f"{who}: server at {url} answered with a body that is not JSON: {excerpt(resp)}")
    data = _get(resp, "data")
    if not isinstance(data, list) or len(data) != n:
        got = len(data) if isinstance(data, list) else "no"
        raise ModelResponseError(f"{who}: server at {url} sent {got} embeddings for {n} texts")
    rows: list[tuple[int, list[float]]] = []
    for pos, item in enumerate(data):
        vec, index = _get(item, "embedding"), _get(item, "index")
        if not isinstance(vec, list) or not vec or not all(isinstance(x, (int, float)) and math.isfinite(x)
                                                          for x in vec):
            raise ModelResponseError(f"{who}: server at {url} sent embedding {pos} that is not a list of numbers")
        rows.append((index if isinstance(index, int) else pos, vec))
    rows.sort(key=lambda r: r[0])
    if [i for i, _ in rows] != list(range(n)) or len({len(v) for _, v in rows}) != 1:
        raise ModelResponseError(f"{who}: server at {url} sent embeddings with mixed indexes or widths")
    return [v for _, v in rows]
