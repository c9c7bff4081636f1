"""``adiyan ask``: a person asks Adiyan a question, as a requester, and sees what the reports measure.

The same knowledge base as ``adiyan ingest`` / ``adiyan search`` (``open_kb``), the same retrieval
pipeline as ``invoke eval`` (``open_retriever``: every retrieval setting applies or is refused
by name), the same grounded generation (``generation.answer_question``, with the answer cache
``invoke eval`` uses), or with ``agent=True`` the research agent over the same pipeline.

What is shown: the answer; its sources (source key, chunk index, page when the chunk's payload
carries one, score); how many chunks the access policy hid (a count only: of the top k for the
question from the same pipeline run without the access filter, the owner view, with every
retrieval setting applied, how many the requester may not see; counted inside the
:class:`~adiyan.retrieval.pipeline.Retriever`, so no hidden name or text reaches this module); and
with the agent its trace (step, tool, arguments, observation summary).

``conversation=ID`` keeps the requester's conversation between calls through the three-part
context of :mod:`adiyan.context` (memory facts, relevant recent history, the message), the same
one the conversation evaluation measures; the retrieval then passes the history, so the
``history_*`` query transforms apply.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .agent import Agent
from .cache import call_cache
from .context import Conversation, open_conversation_retriever
from .factory import open_kb, open_llm, open_retriever
from .generation import answer_question
from .types import Requester

ENTRY_POINT = "adiyan ask"


class AskError(ValueError):
    """The question cannot be asked as given (empty question, conversation not available)."""


class EmptyKnowledgeBase(AskError):
    """No document the requester may see: there is nothing to answer from (not "I don't know")."""


@dataclass
class Source:
    source: str
    chunk_index: int
    score: float
    page: int | None = None


@dataclass
class TraceStep:
    step: int
    tool: str
    args: dict
    observation: str  # the compacted one-line summary, never raw tool output
    error: str | None = None


@dataclass
class AskResult:
    question: str
    requester: str | None
    answer: str
    sources: list[Source]
    hidden: int  # chunks of the unfiltered top k the access policy removed (a count, never names)
    k: int
    mode: str  # "grounded" | "agent"
    answer_source: str = "grounded_generation"
    retrieval: str = ""  # the pipeline's own description of what it did
    trace: list[TraceStep] = field(default_factory=list)
    conversation: str | None = None
    context: dict = field(default_factory=dict)  # a conversation turn: earlier turns, kept history, facts

    def to_dict(self) -> dict:
        return asdict(self)


def ask(settings, question: str, requester: Requester | str | None, *, agent: bool = False,
        conversation: str | None = None, llm=None, progress: bool = False) -> AskResult:
    """Answer ``question`` as ``requester`` (an identity, or a :class:`~adiyan.types.Requester` for the
    owner role); ``llm`` defaults to the configured one (``llm.*``)."""
    if not question or not question.strip():
        raise AskError("the question is empty")
    who = Requester.of(requester)
    requester = who.id  # the identity: conversations, the answer's record, the agent's tier
    if conversation is not None and (requester is None or who.is_owner):
        raise AskError(f"--conversation {conversation}: a conversation belongs to a named requester "
                       "(--as NAME) and is not kept for the owner role")
    kb = open_kb(settings, progress=progress)
    conv = None
    try:
        if conversation is None and not kb.list_documents(who):  # (a conversation's memory may still answer)
            as_who = "the owner role" if who.is_owner else (requester or "an anonymous requester")
            raise EmptyKnowledgeBase(
                f"the knowledge base ({settings.paths.data_dir}) holds no document {as_who} may see, so there is "
                "nothing to answer from. Fill it first: adiyan ingest PATH --owner NAME --visibility global "
                "(or --visibility private, seen by NAME only)")
        llm = llm if llm is not None else open_llm(settings)
        if conversation is not None:
            try:
                conv = Conversation.load(settings, conversation, requester)
            except ValueError as exc:  # a bad id or a damaged conversation file, named by the context module
                raise AskError(f"--conversation {conversation}: {exc}") from exc
            retriever = open_conversation_retriever(settings, kb, llm, entry_point=ENTRY_POINT)
        else:
            retriever = open_retriever(settings, kb, llm=llm, entry_point=ENTRY_POINT)
        k = settings.retrieval.kb_top_k
        if agent:  # the agent searches its own queries: the question's count is one owner-view run of it
            window = settings.conversation.history_window
            history = None if conv is None else [{"role": t["role"], "content": t["content"]}
                                                 for t in (conv.turns[-window:] if window > 0 else [])]
            hidden = retriever.hidden_count(question, who, top_k=k, history=history)
            return _ask_agent(settings, question, who, llm, kb, retriever, hidden, k, conv)
        retriever.counts_hidden = True  # the answer's own retrieve() counts it, also inside a conversation turn
        cache = call_cache(settings, "answer")
        context = {}
        if conv is not None:
            before = len(conv.turns)
            ans, ctx, res = conv.answer(llm, retriever, question, requester=requester, cache=cache)
            context = _context_summary(before, ctx)
        else:
            res = retriever.retrieve_knowledge_base(question, who)
            ans = answer_question(llm, question, res.chunks, settings, cache=cache)
        by_key = {(c.source, c.chunk_index): c for c in res.chunks}
        sources = [Source(u["source"], u["chunk_index"], by_key[(u["source"], u["chunk_index"])].score,
                          by_key[(u["source"], u["chunk_index"])].page) for u in ans.used]
        described = res.describe() + (f" (floor {res.floor:.3f})" if res.floor_applied else "")
        return AskResult(question, requester, ans.text, sources, res.hidden, k, "grounded",
                         "grounded_generation" if res.chunks else
                         ("no_evidence" if settings.generation.strict_grounding else "ungrounded"), described,
                         conversation=conversation, context=context)
    finally:
        if conv is not None:
            conv.close()
        kb.close()


def _context_summary(turns_before: int, ctx) -> dict:
    """What of the conversation reached the answer: counts, never the memory's texts."""
    return {"turns_before": turns_before, "history_kept": len(ctx.history), "facts": len(ctx.facts)}


def _ask_agent(settings, question, who: Requester, llm, kb, retriever, hidden: int, k: int,
               conv=None) -> AskResult:
    """The research agent under the requester's identity: member tier for a named requester,
    guest for an anonymous one, owner for the owner role (the agent's own tier table)."""
    requester = who.id
    tier = "owner" if who.is_owner else ("member" if requester else "guest")
    agent = Agent(llm, kb, conv.memory if conv is not None else None, settings=settings, tier=tier,
                  requester_id=requester, retriever=retriever)
    ctx = conv.context_for(question) if conv is not None else None
    before = len(conv.turns) if conv is not None else 0
    res = agent.run(question, context=ctx)
    if conv is not None:
        conv.add_turn("user", question)
        conv.add_turn("assistant", res.answer)
    # one compacted line per tool call, in order ("tool {args} -> what came back"); finish has none
    lines = iter(res.scratchpad.history)
    trace = [TraceStep(s.step, s.tool, dict(s.args),
                       "final answer" if s.tool == "finish" else next(lines, "").split(" -> ", 1)[-1], s.error)
             for s in res.steps]
    best: dict[tuple, float] = {}
    for f in res.scratchpad.findings:
        if f.chunk_index is not None:
            key = (f.source, f.chunk_index)
            best[key] = max(best.get(key, f.score), f.score)
    used = [(u["source"], u["chunk_index"]) for u in res.synthesis.get("used") or []]
    keys = [key for key in used if key in best] or sorted(best, key=lambda x: -best[x])[:k]
    sources = [Source(s, -1 if i is None else i, best[(s, i)]) for s, i in keys]
    return AskResult(question, requester, res.answer, sources, hidden, k, "agent", res.answer_source,
                     f"agent, tier {res.tier}, {len(res.steps)} step(s), stopped: {res.stopped_reason}", trace,
                     conversation=conv.id if conv is not None else None,
                     context=_context_summary(before, ctx) if ctx is not None else {})


def format_result(r: AskResult) -> str:
    """What ``adiyan ask`` prints: answer, sources, the hidden count, the agent's trace."""
    lines = [r.answer, "", f"sources ({r.retrieval}):" if r.retrieval else "sources:"]
    if not r.sources:
        lines.append("  none: no permitted chunk answered this question")
    for i, s in enumerate(r.sources, 1):
        page = f"page {s.page}" if s.page is not None else "page n/a"
        lines.append(f"  {i}. {s.source}  chunk {s.chunk_index}  {page}  score {s.score:.3f}")
    who = r.requester or "anonymous"
    if r.conversation is not None:
        c = r.context
        lines.append(f"conversation {r.conversation}: {c.get('turns_before', 0)} earlier turn(s), "
                     f"{c.get('history_kept', 0)} kept in the context, {c.get('facts', 0)} fact(s) from memory")
    lines.append(f"hidden by the access policy: {r.hidden} of the top {r.k} chunk(s) for this question "
                 f"are not visible to {who}")
    if r.mode == "agent":
        lines += ["", f"agent trace ({r.answer_source}):"]
        for t in r.trace:
            args = ", ".join(f"{k}={v!r}" for k, v in t.args.items())
            lines.append(f"  {t.step}. {t.tool}({args}) -> {t.observation}" + (f"  [error: {t.error}]" if t.error else ""))
    return "\n".join(lines)
