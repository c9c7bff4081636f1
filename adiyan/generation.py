"""Grounded generation: context assembly under a token budget, the grounding instruction.

Order (the seed's, fixed): the grounding instruction with the retrieved passages, then the
memory context, then the recent history, then the new message.

The budget fits the model (:func:`effective_budget`): the model's window (``llm.context_size``)
minus the prompt reserve (the grounding instruction and the chat template) and the answer reserve
(``llm.max_tokens``). The shipped default (2,500) is cut to that room; a budget set to any other
value that the room cannot hold is refused by name (:class:`BudgetTooLarge`).

Truncation policy, when everything does not fit ``context_budget_tokens`` (2,500 by default):
the new message is always kept whole; retrieved passages are added in rank order; then memory
items in score order; then history turns from the newest back. The first passage that does
not fit is cut at a word boundary if at least a quarter of it fits; anything after it in the
same tier is dropped. What was used (source keys, chunk indexes, whether cut) is returned with
the answer, so every answer can be traced to its sources.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from .config import ConfigError, GenerationConfig
from .models.base import ChatMessage
from .types import RetrievedChunk

GROUNDING = (
    "You answer questions using only the numbered context passages below. "
    "Answer in one or two sentences and quote exact figures, codes and names from the context."
)
STRICT = " If the context does not contain the answer, reply exactly: I don't know based on the documents."
LOOSE = " If the context does not contain the answer, say so, then answer from general knowledge."
NO_CONTEXT_ANSWER = "I don't know based on the documents."


def approx_tokens(text: str) -> int:
    """~4 characters a token for English; used when the model offers no tokenizer."""
    return max(1, (len(text) + 3) // 4)


DEFAULT_BUDGET = GenerationConfig.model_fields["context_budget_tokens"].default  # 2,500
TEMPLATE_TOKENS_PER_MESSAGE = 8  # chat-template markers around each message (SmolLM2's ChatML: 5)


class BudgetTooLarge(ConfigError):
    """``generation.context_budget_tokens`` set above what the model's window can hold."""


def effective_budget(settings, llm) -> dict:
    """The context budget this model can hold, and how it was reached.

    room = window (the model's ``context_size``) − prompt reserve (the instruction, counted by the
    model's tokenizer when it has one, + the template markers of system, history and user messages)
    − answer reserve (``llm.max_tokens``). The shipped default budget is cut to the room; any other
    configured value above it raises :class:`BudgetTooLarge` naming the setting.
    """
    configured = int(settings.generation.context_budget_tokens)
    window = int(getattr(llm, "context_size", None) or settings.llm.context_size)
    count = getattr(llm, "count_tokens", None) or approx_tokens
    instruction = GROUNDING + (STRICT if settings.generation.strict_grounding else LOOSE) + "\n\nContext:\n" + \
        "\n\nWhat you remember about the user:\n"
    history_msgs = 2 * settings.conversation.history_window
    prompt_reserve = count(instruction) + TEMPLATE_TOKENS_PER_MESSAGE * (2 + history_msgs)
    # the extractive answerer writes nothing: no answer reserve
    answer_reserve = int(getattr(llm, "max_tokens", None) or settings.llm.max_tokens) \
        if getattr(llm, "generative", True) else 0
    room = window - prompt_reserve - answer_reserve
    info = {"configured": configured, "window": window, "prompt_reserve": prompt_reserve,
            "answer_reserve": answer_reserve, "room": room, "explicit": configured != DEFAULT_BUDGET}
    if room < 64:
        raise BudgetTooLarge(f"llm.context_size={window}: the model's window leaves {room} tokens for the context "
                             f"after the prompt ({prompt_reserve}) and answer ({answer_reserve}) reserves; "
                             "at least 64 are needed")
    if configured > room and info["explicit"]:
        raise BudgetTooLarge(f"generation.context_budget_tokens={configured}: the model {getattr(llm, 'id', '?')} "
                             f"holds {window} tokens, of which {prompt_reserve} go to the prompt and {answer_reserve} "
                             f"to the answer; at most {room} are left for the context. Set it to {room} or less, "
                             "or raise llm.context_size for a model with a larger window")
    info["effective"] = min(configured, room)
    info["fitted"] = info["effective"] < configured
    return info


@dataclass
class Answer:
    text: str
    used: list[dict] = field(default_factory=list)  # [{"source": ..., "chunk_index": ..., "partial"?: True}]
    context_tokens: int = 0
    truncated: bool = False
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached: bool = False
    dropped: dict = field(default_factory=dict)  # what the budget left out, per tier


@dataclass
class Context:
    messages: list[ChatMessage]
    used: list[dict]
    tokens: int
    truncated: bool
    dropped: dict
    passages: list[str] = field(default_factory=list)  # the passages' texts as they went in, numbered from 1


class _Budget:
    def __init__(self, total: int, count: Callable[[str], int]):
        self.left, self.count, self.truncated = total, count, False

    def take(self, text: str, *, allow_cut: bool) -> str | None:
        n = self.count(text)
        if n <= self.left:
            self.left -= n
            return text
        self.truncated = True
        if allow_cut and self.left >= n // 4:
            words = text.split(" ")
            lo, hi = 0, len(words)  # longest word prefix that fits, by the same token counter
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if self.count(" ".join(words[:mid]) + " …") <= self.left:
                    lo = mid
                else:
                    hi = mid - 1
            if lo:
                cut = " ".join(words[:lo]) + " …"
                self.left -= self.count(cut)
                return cut
        return None


def assemble_context(question: str, chunks: Sequence[RetrievedChunk], *, memory: Sequence[str] = (),
                     history: Sequence[dict] = (), budget_tokens: int = 2500, strict: bool = True,
                     count: Callable[[str], int] = approx_tokens) -> Context:
    budget = _Budget(budget_tokens, count)
    budget.left -= count(question)  # the new message is always kept
    used, passages, texts, dropped = [], [], [], {"passages": 0, "memory": 0, "history": 0}
    for i, ch in enumerate(chunks, 1):
        block = budget.take(f"[{i}] ({ch.source})\n{ch.text}", allow_cut=True) if budget.left > 0 else None
        if block is None:
            dropped["passages"] += 1
            continue
        passages.append(block)
        texts.append(block.split("\n", 1)[1] if "\n" in block else "")
        entry = {"source": ch.source, "chunk_index": ch.chunk_index}
        if block.endswith(" …"):
            entry["partial"] = True
        used.append(entry)
        if budget.left <= 0:
            dropped["passages"] += len(chunks) - i
            break
    mem_lines = []
    for m in memory:
        line = budget.take(f"- {m}", allow_cut=False) if budget.left > 0 else None
        if line is None:
            dropped["memory"] += 1
        else:
            mem_lines.append(line)
    kept_history: list[dict] = []
    for turn in reversed(list(history)):  # newest first
        if budget.left > 0 and budget.take(turn["content"], allow_cut=False) is not None:
            kept_history.insert(0, turn)
        else:
            dropped["history"] += 1
    system = GROUNDING + (STRICT if strict else LOOSE)
    if passages:
        system += "\n\nContext:\n" + "\n\n".join(passages)
    if mem_lines:
        system += "\n\nWhat you remember about the user:\n" + "\n".join(mem_lines)
    messages = [ChatMessage("system", system)]
    messages += [ChatMessage(t["role"], t["content"]) for t in kept_history]
    messages.append(ChatMessage("user", question))
    tokens = budget_tokens - budget.left
    return Context(messages, used, tokens, budget.truncated, dropped, texts)


def answer_question(llm, question: str, chunks: Sequence[RetrievedChunk], settings, cache=None, *,
                    memory: Sequence[str] = (), history: Sequence[dict] = ()) -> Answer:
    """Answer from the retrieved chunks. No chunk under strict grounding: say so, no LLM call."""
    gc = settings.generation
    if not chunks and gc.strict_grounding:
        return Answer(NO_CONTEXT_ANSWER)
    count = getattr(llm, "count_tokens", None) or approx_tokens
    budget = effective_budget(settings, llm)["effective"]
    ctx = assemble_context(question, chunks, memory=memory, history=history,
                           budget_tokens=budget, strict=gc.strict_grounding, count=count)
    if getattr(llm, "generative", True) is False:  # the extractive answerer: quotes, no LLM call, no cache
        return _extractive_answer(llm, question, ctx)
    key = None
    if cache is not None:
        key = cache.key({"llm": llm.id, "messages": [m.__dict__ for m in ctx.messages],
                         "max_tokens": settings.llm.max_tokens, "temperature": settings.llm.temperature,
                         "seed": settings.llm.seed})
        hit = cache.get(key)
        if hit is not None:
            return Answer(hit["text"], ctx.used, ctx.tokens, ctx.truncated, hit.get("prompt_tokens"),
                          hit.get("completion_tokens"), cached=True, dropped=ctx.dropped)
    out = llm.chat(ctx.messages)
    text = out.text.strip()
    # kept at any temperature: the key holds the temperature and the seed every call is sampled
    # with (llama.cpp re-seeds per call; a server gets the seed), so a sampled answer is the one
    # that seed drew and eval.repeats' seed+i answers replay on a re-run instead of being drawn again
    if cache is not None:
        cache.put(key, {"text": text, "prompt_tokens": out.prompt_tokens,
                        "completion_tokens": out.completion_tokens})
    return Answer(text, ctx.used, ctx.tokens, ctx.truncated, out.prompt_tokens, out.completion_tokens,
                  dropped=ctx.dropped)


def _extractive_answer(llm, question: str, ctx: Context) -> Answer:
    """The extractive answerer (adiyan/models/extractive.py) on the passages the budget let in:
    the quoted sentence(s), each followed by ``[n]``, the number of its passage in the context;
    ``used`` is the context's passages in that numbering, as for a generated answer (``used[n-1]``
    is the passage a ``[n]`` quote comes from)."""
    ex = llm.extract(question, ctx.passages)
    return Answer(ex.text, list(ctx.used), ctx.tokens, ctx.truncated, dropped=ctx.dropped)
