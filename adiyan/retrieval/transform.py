"""Query transformation before retrieval (``retrieval.query_transform``).

- ``none``: the question as asked.
- ``split``: a question that asks several things ("What does X cost and which hotel is on day
  2?") is cut at question marks, semicolons and at "and" / "also" before a question word; the
  whole question and each part are retrieved and the rankings fused by reciprocal rank
  (``retrieval.rrf_k``), so splitting can add what one part finds without losing the whole
  question's ranking. A question with one part is retrieved as is.
- ``hyde``: Hypothetical Document Embeddings (Gao et al., "Precise Zero-Shot Dense Retrieval
  without Relevance Labels", ACL 2023, https://arxiv.org/abs/2212.10496): the LLM writes a
  short passage that would answer the question and that passage is what is searched. The
  passage is cached by prompt hash. With the embedded 135M model the passages are poor: a
  stronger ``llm`` shows what the method can do.

The pipeline (:mod:`adiyan.retrieval.pipeline`) searches every transformed query under the
requester's access filter, so the access policy holds whatever the transformation produces.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..models.base import ChatMessage

QUESTION_WORDS = r"(?:what|which|who|whom|whose|when|where|why|how|is|are|does|do|did|can|could|should|will|would)"
_SPLIT = re.compile(r"\?\s+|;\s+|,?\s+(?:and|also|and also)\s+(?=" + QUESTION_WORDS + r"\b)", re.IGNORECASE)
HYDE_PROMPT = ("Write a short factual passage, two or three sentences, from a company's documents that answers "
               "the question. Do not say you are unsure.\n\nQuestion: {question}\n\nPassage:")


def split_question(question: str) -> list[str]:
    """The parts of a multi-part question (each at least three words), or ``[question]``."""
    parts = [p.strip(" ?;,.") for p in _SPLIT.split(question.strip())]
    parts = [p + "?" for p in parts if len(p.split()) >= 3]
    return parts if len(parts) > 1 else [question]


@dataclass(frozen=True)
class TransformOutcome:
    queries: list[str]  # what is searched, in order (the question itself first when kept)
    failed: str | None = None  # why the transformation fell back to the question, if it did


def hyde_passage(question: str, llm, cache=None, *, max_tokens: int = 96) -> str:
    """The LLM's hypothetical answer passage for ``question`` ("" when the model wrote nothing).

    Cached by prompt hash when ``cache`` is given; an empty generation is not cached, so the
    next run asks again instead of replaying a failure.
    """
    prompt = HYDE_PROMPT.format(question=question)
    key = None
    if cache is not None:
        key = cache.key({"llm": llm.id, "hyde": prompt, "max_tokens": max_tokens})
        hit = cache.get(key)
        if hit is not None and hit.get("text"):
            return hit["text"]
    text = llm.chat([ChatMessage("user", prompt)], max_tokens=max_tokens, temperature=0.0).text.strip()
    if cache is not None and text:
        cache.put(key, {"text": text})
    return text


def transform_query(question: str, mode: str, *, llm=None, cache=None) -> TransformOutcome:
    """The queries to search for ``question`` under ``mode`` (none | split | hyde)."""
    if mode == "none":
        return TransformOutcome([question])
    if mode == "split":
        parts = split_question(question)
        return TransformOutcome(parts if parts == [question] else [question, *parts])
    if mode == "hyde":
        if llm is None:
            raise ValueError("retrieval.query_transform=hyde needs an LLM (llm.name)")
        passage = hyde_passage(question, llm, cache)
        if not passage:  # counted by the pipeline and reported, never relabelled as a HyDE search
            return TransformOutcome([question], failed="hyde: the LLM wrote an empty passage; searched the question")
        return TransformOutcome([passage])
    raise ValueError(f"retrieval.query_transform: unknown mode {mode!r} (none | split | hyde)")


def transformed_queries(question: str, mode: str, *, llm=None, cache=None) -> list[str]:
    return transform_query(question, mode, llm=llm, cache=cache).queries
