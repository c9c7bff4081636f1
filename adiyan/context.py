"""The three-part context of a conversation turn, in the design's fixed order: long-term facts
from memory, a rolling window of recent history filtered by relevance to the new message, then
the message (generation puts the retrieved passages with the grounding instruction before all three).

- **Facts** come from mem0 (:mod:`adiyan.memory`): conversation and coaching memory of the user,
  each searched with the message and ranked as :meth:`adiyan.memory.Memory.search` ranks
  (``memory.search``; recency by ``memory.recency_scope``: by default only a fact a newer one
  supersedes is decayed, by ``memory.half_life_days``). A conversation fact is kept when its cosine with the message reaches
  ``conversation.facts_min_similarity``. Coaching preferences say how to answer, not what, so they
  are not searched by topic: every preference of the user (the newest ``memory.top_k``) competes by
  its recency weight alone. Within a kind, a fact is kept only when its score is at least
  ``conversation.facts_min_relative`` of the best one's: this is what keeps a corrected fact's
  stale version out (once superseded it is decayed by the gap to its correction), and why recency
  matters (with ``memory.recency`` off every weight is 1 and both versions stay).
  Facts dated after the turn (a replay's later turns) are never used.
- **History**: the last ``conversation.history_window`` turns, each kept when its cosine with
  the new message (or with its standalone rewrite, when the retrieval made one: "and how much
  does it cost?" shares few words with the turn that named the tour) reaches
  ``conversation.history_min_relevance`` (the embedder's space).
- **Message**: always kept whole.

:class:`Conversation` is the persistent form for a person (``adiyan ask --conversation ID``): turns
are appended to ``<data_dir>/conversations/<user>/<id>.jsonl``; the user's turns also go to their
conversation memory; ``context_for(message)`` assembles the three parts and ``answer(...)``
retrieves (with the history, so ``retrieval.query_transform=history_*`` can rewrite a follow-up)
and generates.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

import numpy as np

from .cache import forget_texts
from .factory import open_embedder, open_memory, open_retriever
from .generation import Answer, answer_question
from .memory import KINDS, MemoryHit
from .retrieval.memory_rank import check_signal_weights
from .retrieval.recency import age_days, parse_timestamp, recency_weight, to_utc_iso

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$")
ROLES = ("user", "assistant")


@dataclass
class TurnContext:
    """What one turn's answer is built from, and what was left out and why."""

    message: str
    facts: list[MemoryHit]  # kept, best first
    history: list[dict]  # kept turns, oldest first: {"role", "content"[, "at"]}
    history_scores: list[dict] = field(default_factory=list)  # every windowed turn: role, content, relevance, kept
    dropped_facts: list[dict] = field(default_factory=list)  # candidates left out: text, kind, score, why
    now: str | None = None
    rewritten: str | None = None  # the retrieval's standalone form of the message, when it made one

    def fact_lines(self) -> list[str]:
        """The facts as generation shows them: preferences marked, each with the date it was said."""
        return [f"{'(preference) ' if h.kind == 'coaching' else ''}{h.text} (said {h.created_at[:10]})"
                for h in self.facts]

    def fact_ids(self, key: str = "fact_id") -> list:
        return [h.metadata.get(key, h.id) for h in self.facts]

    def history_messages(self) -> list[dict]:
        return [{"role": t["role"], "content": t["content"]} for t in self.history]

    def as_dict(self) -> dict:
        return {"message": self.message, "now": self.now, "facts": [h.as_dict() for h in self.facts],
                "history": self.history, "history_scores": self.history_scores, "dropped_facts": self.dropped_facts}


def _unit(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float32)
    n = np.linalg.norm(m, axis=-1, keepdims=True)
    return m / np.where(n == 0, 1.0, n)


def filter_history(message: str, history: Sequence[dict], embedder, *, window: int, min_relevance: float,
                   rewritten: str | None = None) -> tuple[list[dict], list[dict]]:
    """(kept turns oldest first, every windowed turn with its relevance and whether it was kept);
    the relevance is the best cosine with the message or its ``rewritten`` standalone form."""
    turns = [dict(t) for t in list(history)[-window:]] if window > 0 else []
    turns = [t for t in turns if t.get("content")]
    if not turns:
        return [], []
    queries = [message] + ([rewritten] if rewritten and rewritten != message else [])
    q = _unit(embedder.embed(queries, "query"))
    docs = _unit(embedder.embed([t["content"] for t in turns], "document"))
    rel = (docs @ q.T).max(axis=1)
    scored = [{"role": t["role"], "content": t["content"], "relevance": round(float(r), 6),
               "kept": bool(r >= min_relevance)} for t, r in zip(turns, rel)]
    return [t for t, s in zip(turns, scored) if s["kept"]], scored


def recall_facts(memory, message: str, user_id: str, *, now, min_similarity: float, min_relative: float,
                 k: int | None = None, recency: bool | None = None) -> tuple[list[MemoryHit], list[dict]]:
    """(facts kept, best first; candidates dropped with the reason) for ``message`` at time ``now``."""
    now_dt = parse_timestamp(now)
    kept, dropped = [], []
    for kind in KINDS:
        if kind == "coaching":
            hits = _preferences(memory, user_id, now_dt, k, recency)
        else:
            hits = memory.search(message, user_id=user_id, k=k, kind=kind, now=now_dt, recency=recency)
        cands = []
        for h in hits:
            if parse_timestamp(h.created_at) > now_dt:
                continue  # said after this turn (a replayed conversation's later turn): not known yet
            if kind == "conversation" and h.similarity < min_similarity:
                dropped.append({"text": h.text, "kind": kind, "score": h.score, "why": "similarity", **_fid(h)})
                continue
            cands.append(h)
        best = max((h.score for h in cands), default=0.0)
        for h in cands:
            if best > 0 and h.score < min_relative * best:
                dropped.append({"text": h.text, "kind": kind, "score": h.score, "why": "relative", **_fid(h)})
            else:
                kept.append(h)
    kept.sort(key=lambda h: h.score, reverse=True)
    return kept, dropped


def _preferences(memory, user_id: str, now_dt, k: int | None, recency: bool | None) -> list[MemoryHit]:
    """The user's coaching preferences said by ``now``, newest first (at most k), scored by recency weight."""
    use_recency = memory.recency if recency is None else bool(recency)
    recs = [r for r in memory.all(user_id, "coaching") if parse_timestamp(r.created_at) <= now_dt]
    recs = recs[::-1][: (k or memory.default_k)]
    out = []
    for r in recs:
        age = age_days(r.created_at, now_dt)
        w = recency_weight(age, memory.half_life_days) if use_recency else 1.0
        out.append(MemoryHit(text=r.text, similarity=0.0, weight=w, score=w, created_at=r.created_at, id=r.id,
                             age_days=age, kind="coaching", metadata=dict(r.metadata)))
    return out


def _fid(h: MemoryHit) -> dict:
    return {"fact_id": h.metadata["fact_id"]} if "fact_id" in h.metadata else {}


def assemble(settings, message: str, *, memory=None, user_id: str | None = None, history: Sequence[dict] = (),
             embedder=None, now=None, rewritten: str | None = None) -> TurnContext:
    """The three parts for ``message``: the user's facts (none without a memory or user), the
    relevant recent history, the message. ``now`` dates the turn (default: the current time);
    ``rewritten`` is the retrieval's standalone form of the message, if it made one."""
    cc = settings.conversation
    now_iso = to_utc_iso(now if now is not None else datetime.now(timezone.utc))
    embedder = embedder if embedder is not None else open_embedder(settings, progress=False)
    facts, dropped = [], []
    if memory is not None and user_id is not None:
        mc = settings.memory
        opened = {"half_life_days": memory.half_life_days, "search": getattr(memory, "search_mode", mc.search),
                  "recency_scope": getattr(memory, "recency_scope", mc.recency_scope),
                  "extra_embedders": list(getattr(memory, "extra_embedders", mc.extra_embedders)),
                  **{n: getattr(memory, n, getattr(mc, n)) for n in (
                      "lexical_weight", "supersede_min_similarity", "supersede_cue_min_similarity", "question_dates",
                      "past_tense_history")}}
        wanted = {n: list(getattr(mc, n)) if n == "extra_embedders" else getattr(mc, n) for n in opened}
        if hasattr(memory, "signal_weights"):  # as checked and kept by the memory (zero weights dropped)
            opened["signal_weights"] = memory.signal_weights
            wanted["signal_weights"] = check_signal_weights(mc.signal_weights, mc.extra_embedders, mc.search)
        for name, value in opened.items():
            if value != wanted[name]:
                raise ValueError(f"the memory was opened with memory.{name}={value} but the settings say "
                                 f"memory.{name}={wanted[name]}: open it with these settings")
        facts, dropped = recall_facts(memory, message, user_id, now=now_iso, min_similarity=cc.facts_min_similarity,
                                      min_relative=cc.facts_min_relative, k=settings.memory.top_k,
                                      recency=settings.memory.recency)
    hist, scored = filter_history(message, history, embedder, window=cc.history_window,
                                  min_relevance=cc.history_min_relevance, rewritten=rewritten)
    return TurnContext(message, facts, hist, scored, dropped, now_iso,
                       rewritten if rewritten and rewritten != message else None)


def answer(llm, ctx: TurnContext, chunks, settings, cache=None) -> Answer:
    """Grounded generation over ``chunks`` with the three parts (facts, history, message). The
    extractive answerer reads no history, so it answers the standalone form of a follow-up ("How
    much does the Triglav Lakes Trek cost for a group?" for "And for a group?") when the retrieval
    made one; a generative model gets the message as said, with the history in its prompt."""
    question = ctx.rewritten if ctx.rewritten and getattr(llm, "generative", True) is False else ctx.message
    return answer_question(llm, question, chunks, settings, cache, memory=ctx.fact_lines(),
                           history=ctx.history_messages())


def open_conversation_retriever(settings, kb, llm=None, *, entry_point: str = "a conversation", **kwargs):
    """The retrieval pipeline for conversation turns: it passes the history, so the history
    transforms (``retrieval.query_transform=history_rules|history_llm``) are honoured; with
    ``query_transform=none`` and ``conversation.rewrite_followups`` (the default) follow-ups are
    rewritten by rules."""
    if settings.retrieval.query_transform == "none" and settings.conversation.rewrite_followups:
        settings = settings.with_overrides({"retrieval.query_transform": "history_rules"})
    return open_retriever(settings, kb, llm, entry_point=entry_point, supports_history=True, **kwargs)


class Conversation:
    """One person's conversation, persisted under the data directory.

    ``Conversation.load(settings, conversation_id, user)`` opens (or starts) it; ``add_turn`` appends
    a turn (a user turn is also remembered in the user's conversation memory); ``remember`` stores a
    fact or a coaching preference; ``context_for(message)`` assembles the three parts;
    ``answer(llm, retriever, message)`` does the whole turn and records both sides.
    """

    def __init__(self, settings, conversation_id: str, user: str, *, memory=None, embedder=None,
                 owns_memory: bool = False):
        for what, v in (("conversation id", conversation_id), ("user", user)):
            if not isinstance(v, str) or not _ID.match(v) or ".." in v:
                raise ValueError(f"{what} {v!r}: use letters, digits, '.', '_', '@' or '-' (at most 128, no '..')")
        self.settings, self.id, self.user = settings, conversation_id, user
        self.memory, self.embedder, self._owns_memory = memory, embedder, owns_memory
        self.path = Path(settings.paths.data_dir) / "conversations" / user / f"{conversation_id}.jsonl"
        self.turns: list[dict] = []
        if self.path.is_file():
            for n, line in enumerate(self.path.read_text(encoding="utf-8").splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    t = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{self.path}:{n}: not valid JSON ({exc}); the conversation file is damaged")
                if t.get("role") not in ROLES or not isinstance(t.get("content"), str):
                    raise ValueError(f"{self.path}:{n}: a turn needs role user|assistant and a content string")
                self.turns.append(t)

    @classmethod
    def load(cls, settings, conversation_id: str, user: str, *, memory=None, embedder=None) -> "Conversation":
        """The conversation ``conversation_id`` of ``user`` (empty when new). Without ``memory`` the
        configured mem0 memory is opened and closed with :meth:`close`."""
        embedder = embedder if embedder is not None else open_embedder(settings, progress=False)
        owns = memory is None
        memory = memory if memory is not None else open_memory(settings, embedder)
        return cls(settings, conversation_id, user, memory=memory, embedder=embedder, owns_memory=owns)

    @property
    def history(self) -> list[dict]:
        """Every turn so far, oldest first: {"role", "content", "at"}."""
        return [dict(t) for t in self.turns]

    def add_turn(self, role: str, content: str, *, at=None, remember: bool | None = None) -> dict:
        """Append a turn (persisted at once). User turns are remembered in conversation memory unless
        ``remember=False``; assistant turns only with ``remember=True``."""
        if role not in ROLES or not isinstance(content, str) or not content.strip():
            raise ValueError(f"a turn needs role user|assistant and non-empty content, got role={role!r}")
        turn = {"role": role, "content": content,
                "at": to_utc_iso(at if at is not None else datetime.now(timezone.utc))}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(turn, ensure_ascii=False) + "\n")
        self.turns.append(turn)
        if (role == "user" if remember is None else remember) and self.memory is not None:
            self.memory.add(content, user_id=self.user, kind="conversation", created_at=turn["at"], role=role,
                            metadata={"conversation": self.id})
        return turn

    def remember(self, text: str, *, kind: str = "coaching", at=None, metadata: dict | None = None) -> str | None:
        """Store a fact (``kind="conversation"``) or a coaching preference for this user."""
        if self.memory is None:
            raise ValueError("this conversation has no memory to remember in")
        return self.memory.add(text, user_id=self.user, kind=kind, created_at=at or datetime.now(timezone.utc),
                               metadata={"conversation": self.id, **(metadata or {})})

    def context_for(self, message: str, *, now=None, rewritten: str | None = None) -> TurnContext:
        """The three parts for ``message`` from this conversation's history and the user's memory."""
        return assemble(self.settings, message, memory=self.memory, user_id=self.user, history=self.history,
                        embedder=self.embedder, now=now, rewritten=rewritten)

    def answer(self, llm, retriever, message: str, *, requester: str | None = None, cache=None, now=None):
        """One whole turn: retrieve as ``requester`` (default the user) with the history, assemble
        the context, generate, record both turns. Returns (Answer, TurnContext, RetrievalResult)."""
        window = self.settings.conversation.history_window
        history = [{"role": t["role"], "content": t["content"]} for t in (self.turns[-window:] if window > 0 else [])]
        res = retriever.retrieve(message, requester if requester is not None else self.user, history=history)
        ctx = self.context_for(message, now=now, rewritten=res.queries[0] if res.queries else None)
        out = answer(llm, ctx, res.chunks, self.settings, cache)
        self.add_turn("user", message, at=now)
        self.add_turn("assistant", out.text, at=now)
        return out, ctx, res

    def delete(self) -> int:
        """Forget this conversation: its transcript, every memory (facts and preferences) stated in it, and the
        embedding cache's rows of its turns (user and assistant: the history filter embedded both). Returns how
        many memories went."""
        if self.memory is None:
            raise ValueError(f"conversation {self.id!r} has no memory open: its memories cannot be deleted with it")
        n = sum(self.memory.delete_conversation(self.user, self.id, kind) for kind in KINDS)
        # the history filter embedded every turn, the assistant's too: their cached vectors go as well
        forget_texts([self.embedder, *self.memory.embedders()], (t["content"] for t in self.turns))
        self.path.unlink(missing_ok=True)
        self.turns = []
        return n

    def close(self) -> None:
        if self._owns_memory and self.memory is not None:
            self.memory.close()
        self.memory = None

    def __enter__(self) -> "Conversation":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def forget_user(settings, user: str, memory) -> int:
    """Forget a user: every memory of every kind and every conversation transcript under
    ``paths.data_dir/conversations/<user>/``. Returns how many memories went."""
    if not isinstance(user, str) or not _ID.match(user) or ".." in user:
        raise ValueError(f"user {user!r}: use letters, digits, '.', '_', '@' or '-' (at most 128, no '..')")
    if memory is None:
        raise ValueError(f"forget_user({user!r}) needs the memory: its memories go with its transcripts")
    n = sum(memory.delete_all(user, kind) for kind in KINDS)
    folder = Path(settings.paths.data_dir) / "conversations" / user
    if folder.is_dir():
        shutil.rmtree(folder)
    return n
