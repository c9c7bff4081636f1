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

Every search goes through :meth:`KnowledgeBase.retrieve_knowledge_base` with the requester, so
the access policy holds whatever the transformation produces.
"""

from __future__ import annotations

import re
from dataclasses import replace

from .fusion import rrf

QUESTION_WORDS = r"(?:what|which|who|whom|whose|when|where|why|how|is|are|does|do|did|can|could|should|will|would)"
_SPLIT = re.compile(r"\?\s+|;\s+|,?\s+(?:and|also|and also)\s+(?=" + QUESTION_WORDS + r"\b)", re.IGNORECASE)
HYDE_PROMPT = ("Write a short factual passage, two or three sentences, from a company's documents that answers "
               "the question. Do not say you are unsure.\n\nQuestion: {question}\n\nPassage:")


def split_question(question: str) -> list[str]:
    """The parts of a multi-part question (each at least three words), or ``[question]``."""
    parts = [p.strip(" ?;,.") for p in _SPLIT.split(question.strip())]
    parts = [p + "?" for p in parts if len(p.split()) >= 3]
    return parts if len(parts) > 1 else [question]


def hyde_passage(question: str, llm, cache=None, *, max_tokens: int = 96) -> str:
    """The LLM's hypothetical answer passage for ``question`` (cached by prompt hash when ``cache``)."""
    from ..models.base import ChatMessage

    prompt = HYDE_PROMPT.format(question=question)
    key = None
    if cache is not None:
        key = cache.key({"llm": llm.id, "hyde": prompt, "max_tokens": max_tokens})
        hit = cache.get(key)
        if hit is not None:
            return hit["text"]
    text = llm.chat([ChatMessage("user", prompt)], max_tokens=max_tokens, temperature=0.0).text.strip()
    text = text or question  # an empty generation falls back to the question itself
    if cache is not None:
        cache.put(key, {"text": text})
    return text


def transformed_queries(question: str, mode: str, *, llm=None, cache=None) -> list[str]:
    if mode == "none":
        return [question]
    if mode == "split":
        parts = split_question(question)
        return parts if parts == [question] else [question, *parts]
    if mode == "hyde":
        if llm is None:
            raise ValueError("retrieval.query_transform=hyde needs an LLM (llm.name)")
        return [hyde_passage(question, llm, cache)]
    raise ValueError(f"retrieval.query_transform: unknown mode {mode!r} (none | split | hyde)")


def retrieve(kb, question: str, requester_id: str | None, *, is_owner: bool = False, top_k: int | None = None,
             mode: str | None = None, llm=None, cache=None):
    """``kb.retrieve_knowledge_base`` after the configured transformation; the result's ``query``
    is the question as asked and ``mode`` names the transformation (``dense+split`` ...)."""
    mode = mode or kb.settings.retrieval.query_transform
    k = top_k or kb.settings.retrieval.kb_top_k
    queries = transformed_queries(question, mode, llm=llm, cache=cache)
    results = [kb.retrieve_knowledge_base(q, requester_id, is_owner, k) for q in queries]
    if len(results) == 1:
        res = results[0]
        return replace(res, query=question, mode=res.mode if mode == "none" else f"{res.mode}+{mode}")
    by_id, runs = {}, []
    for i, res in enumerate(results):
        run = {}
        for c in res.chunks:
            cid = f"{c.source}\x00{c.chunk_index}"
            by_id.setdefault(cid, c)
            run[cid] = c.score
        runs.append({"q": run})
    fused = rrf(runs, kb.settings.retrieval.rrf_k, top_k=k).get("q", {})
    chunks = [replace(by_id[cid], score=score) for cid, score in fused.items()]
    return replace(results[0], query=question, chunks=chunks, mode=f"{results[0].mode}+{mode}",
                   dropped_below_floor=sum(r.dropped_below_floor for r in results) if not chunks else 0)
