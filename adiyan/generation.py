"""Grounded generation: context assembly under a token budget, the grounding instruction.

Truncation policy: retrieved chunks are added in rank order while they fit the budget; the
chunk that would overflow it is cut at a word boundary if at least a quarter of it fits, and
the rest are dropped. What was used (source keys and chunk indexes) is returned with the answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .kb import RetrievedChunk
from .models.base import ChatMessage

GROUNDING = (
    "You answer questions using only the numbered context passages below. "
    "Answer in one or two sentences and quote exact figures, codes and names from the context."
)
STRICT = " If the context does not contain the answer, reply exactly: I don't know based on the documents."
NO_CONTEXT_ANSWER = "I don't know based on the documents."


def approx_tokens(text: str) -> int:
    """~4 characters a token for English; used when the model offers no tokenizer."""
    return max(1, (len(text) + 3) // 4)


@dataclass
class Answer:
    text: str
    used: list[dict] = field(default_factory=list)  # [{"source": ..., "chunk_index": ...}]
    context_tokens: int = 0
    truncated: bool = False
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached: bool = False


def assemble_context(chunks: list[RetrievedChunk], budget_tokens: int, count=approx_tokens):
    parts, used, total, truncated = [], [], 0, False
    for i, ch in enumerate(chunks, 1):
        block = f"[{i}] ({ch.source})\n{ch.text}"
        n = count(block)
        if total + n > budget_tokens:
            room = budget_tokens - total
            truncated = True
            if room >= n // 4:
                cut = block[: room * 4].rsplit(" ", 1)[0]
                parts.append(cut + " …")
                used.append({"source": ch.source, "chunk_index": ch.chunk_index, "partial": True})
                total += count(cut)
            break
        parts.append(block)
        used.append({"source": ch.source, "chunk_index": ch.chunk_index})
        total += n
    return "\n\n".join(parts), used, total, truncated


def build_messages(question: str, chunks: list[RetrievedChunk], *, budget_tokens: int = 2500,
                   strict: bool = True, count=approx_tokens):
    context, used, total, truncated = assemble_context(chunks, budget_tokens, count)
    system = GROUNDING + (STRICT if strict else "")
    user = f"Context:\n{context}\n\nQuestion: {question}"
    return [ChatMessage("system", system), ChatMessage("user", user)], used, total, truncated


def answer_question(llm, question: str, chunks: list[RetrievedChunk], settings, cache=None) -> Answer:
    """Answer from the retrieved chunks. No chunk under strict grounding: say so, no LLM call."""
    gc = settings.generation
    if not chunks and gc.strict_grounding:
        return Answer(NO_CONTEXT_ANSWER)
    messages, used, total, truncated = build_messages(question, chunks, budget_tokens=gc.context_budget_tokens,
                                                      strict=gc.strict_grounding)
    key = None
    if cache is not None:
        key = cache.key({"llm": llm.id, "messages": [m.__dict__ for m in messages],
                         "max_tokens": settings.llm.max_tokens, "temperature": settings.llm.temperature,
                         "seed": settings.llm.seed})
        hit = cache.get(key)
        if hit is not None:
            return Answer(hit["text"], used, total, truncated, hit.get("prompt_tokens"),
                          hit.get("completion_tokens"), cached=True)
    out = llm.chat(messages)
    if cache is not None and settings.llm.temperature == 0:
        cache.put(key, {"text": out.text, "prompt_tokens": out.prompt_tokens,
                        "completion_tokens": out.completion_tokens})
    return Answer(out.text.strip(), used, total, truncated, out.prompt_tokens, out.completion_tokens)
