"""The conversations experiment (notebooks/conversations.ipynb; sweep conversations): history
window size and memory half-life on the conversation evalset.

Each point replays every conversation of ``evalsets/conversations`` (or ``eval.evalset`` when it
names a conversation set) exactly as ``invoke eval`` does (:func:`adiyan.eval.conversations.replay`:
the documents' shared index, a fresh scratch mem0 memory opened with the point's ``memory.*``
settings, the point's ``conversation.*`` and ``retrieval.*`` settings), so the two never disagree.
The window bounds both the history the rewrite sees (0: no rewrite is possible) and the history
that reaches the context; the half-life decides which facts survive recency re-ranking.
Answers only with ``eval.generate`` (the sweep turns it off: the measured quantities are
retrieval, memory and history, none of which needs the LLM).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ..eval.conversations import open_scratch_memory, replay, rewrite_mode
from ..eval.beir_protocol import refuse_beir_protocol
from ..eval.evalset import is_conversation_set, load_conversation_set
from ..eval.harness import open_index
from ..eval.scorers import CONVERSATION, Rows, point_columns, score
from ..factory import open_llm
from .common import PointResult
from .scoring import ONLY_STALE, merge, replay_stale_fact, score_groups

CONVERSATIONS = Path(__file__).resolve().parents[2] / "evalsets" / "conversations"
# per turn, under the questions.jsonl names; memory precision / recall as the run's conversation.* metrics
PER_TURN = {"hit": "hit", "hit_raw": "hit_raw", "reciprocal_rank": "reciprocal_rank", "rr_raw": "rr_raw",
            "memory_precision": "conversation.memory_precision", "memory_recall": "conversation.memory_recall",
            "stale_in_context": "stale_in_context", "history_kept": "history_kept", "history_dropped": "history_dropped",
            "keyword_hit": "keyword_hit"}


def conversation_set(settings):
    """``eval.evalset`` when it is a conversation set, else the authored ``evalsets/conversations``."""
    path = settings.eval.evalset if is_conversation_set(settings.eval.evalset) else CONVERSATIONS
    return load_conversation_set(path)


def evaluate_conversations(settings, *, progress: bool = False) -> PointResult:
    """Per-turn replay of the conversation set under ``settings``; metrics under the run's names
    (``conversation.hit_rate_rewrite@k``: the conversation scorer of ``invoke eval``)."""
    refuse_beir_protocol(settings, "the conversations experiment")
    cs = conversation_set(settings)
    index = open_index(settings, str(cs.documents.root), progress=progress)  # shared; closed with the process
    embedder = index.kb.embedder
    llm = open_llm(settings) if settings.eval.generate or settings.retrieval.query_transform == "history_llm" else None
    memory, scratch = open_scratch_memory(settings, embedder)
    try:
        rows = replay(settings, cs, index.kb, embedder, llm=llm if settings.eval.generate else None, rewrite_llm=llm,
                      memory=memory, progress=progress)
    finally:
        memory.close()
        shutil.rmtree(scratch, ignore_errors=True)
    k = settings.retrieval.kb_top_k
    # the run's conversation group as columns (conversation.hit_rate_rewrite@k, conversation.memory_recall...)
    metrics = {c: v for c, v in point_columns(score([CONVERSATION], Rows(rows), k), k).items() if v is not None}
    per_turn = [{"qid": r["id"], "kind": r["kind"],
                 **{col: (float(r[name]) if isinstance(r.get(name), bool) else r.get(name)) for name, col in PER_TURN.items()}}
                for r in rows]
    info = {"conversations": len(cs.conversations), "turns": len(rows), "rewrite": rewrite_mode(settings),
            "history_window": settings.conversation.history_window,
            "half_life_days": settings.memory.half_life_days, "recency": settings.memory.recency,
            "memory_search": settings.memory.search, "recency_scope": settings.memory.recency_scope,
            "evalset": str(cs.root), "evalset_hash": cs.content_hash(), "embedder": embedder.id}
    # scored like a run: incident 3 at the point's half-life, and the regression cases (n/a ones with why)
    group, incident = replay_stale_fact(settings, embedder)
    groups = {"conversation": {c.split(".", 1)[1]: v for c, v in metrics.items() if c.startswith("conversation.")},
              "incidents": group}
    return merge(PointResult(metrics, per_turn, info),
                 score_groups(groups, cs.name, embedder.id, incidents_why=ONLY_STALE, incident=incident))
