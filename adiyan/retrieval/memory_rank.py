"""How memory candidates are scored and ordered: the signals fused, then time applied where it is meant.

One function, :func:`rank_memories`, serves :meth:`adiyan.memory.Memory.search` and the LoCoMo
candidate replay (:class:`adiyan.eval.locomo.paths.CandidateMemory`), so both rank alike.

**Signals** (``memory.search``):

* ``dense``: the cosine of query and memory (mem0's semantic score), as the seed did;
* ``hybrid``: ``memory.lexical_weight`` x BM25 + (1 - that) x cosine, BM25 over the user's own
  memories of that kind (Lucene BM25, :class:`adiyan.retrieval.bm25.BM25Retriever`) divided by the
  best BM25 score among them for this query (so 1.0 for the best lexical match, 0 for a memory
  sharing no term). The fused score stays in [0, 1] like a cosine, but it is not one: the three-part
  context's ``conversation.facts_min_relative`` applies to it, so in hybrid search a fact sharing no
  word with the message needs a cosine of at least 2 x that share of the best fact's score
  (``facts_min_similarity`` still reads the cosine).

**Time** (``memory.recency`` and ``memory.recency_scope``), weight w in (0, 1], score = fused x w
(``below_superseder``: a cap instead, below):

* recency off: w = 1 for every memory;
* ``all`` (the seed's rule): w = 0.5 ** (age / half-life) for every memory, age measured to ``now``.
  It puts a correction above what it corrects, and it also buries every old memory nothing replaced;
* ``superseded``: w = 1 unless a newer candidate of the same user, said by ``now``, *supersedes* the memory: their
  texts' cosine reaches ``memory.supersede_min_similarity`` (the same subject, said again), or the
  newer text states a change (:data:`CHANGE_CUES`: "now", "instead", "moved", "no longer", "not", ...)
  and their cosine reaches the lower ``memory.supersede_cue_min_similarity`` (a correction rarely
  repeats what it corrects: "Change of plan: I now fly out on the 14th"). A superseded memory
  gets w = 0.5 ** (gap / half-life), gap = days from it to its newest superseder: the seed's decay,
  measured from the correction rather than from today, and applied only where a newer statement exists.

* ``below_superseder``: no decay; a superseded memory (as above) keeps its score unless that puts it
  at or above one of its superseders, and is then placed just under the lowest of them (its reported
  weight is that ratio). The correction outranks what it corrects; nothing else moves.

**Dates in the question** (``memory.question_dates``): a memory said inside the window of session time the
question's date names ranks above every memory said outside it (:mod:`adiyan.retrieval.question_dates`).

With ``memory.signal_weights`` (hybrid) the fused score is the weighted mean of the named signals:
``bm25``, ``dense`` and the cosine of each of ``memory.extra_embedders`` (:func:`fuse`).

Superseders are looked for among the candidates of this query only (both must be relevant to it), so
the cost is one embedding lookup per candidate (the embedding cache holds them) and a small matrix.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Sequence

import numpy as np

from .question_dates import DATE_TIER, inside
from .recency import SECONDS_PER_DAY, age_days, parse_timestamp, recency_weight

SEARCH_MODES = ("dense", "hybrid")
# Words and phrases by which a statement says that something changed or was wrong (English).
CHANGE_CUES = ("now", "new", "instead", "moved", "move", "changed", "change", "changes", "switched", "switch",
               "update", "updated", "rebooked", "rescheduled", "shifting", "shifted", "no longer", "any more",
               "anymore", "not", "actually", "correction", "from now on", "from next", "starting", "replaced")
_CUE_RE = re.compile(r"\b(?:" + "|".join(re.escape(c).replace(r"\ ", r"\s+") for c in CHANGE_CUES) + r")\b",
                     re.IGNORECASE)


def states_change(text: str) -> bool:
    """Whether ``text`` carries a change cue (:data:`CHANGE_CUES`, whole words, any case)."""
    return bool(_CUE_RE.search(text or ""))
RECENCY_SCOPES = ("all", "superseded", "below_superseder")
BELOW = 1e-6  # below_superseder: how far under its superseder a superseded memory is put


@dataclass(frozen=True)
class Candidate:
    """One memory before ranking: its cosine with the query and, in hybrid search, its BM25 score."""

    id: str
    text: str
    similarity: float
    created_at: str  # UTC ISO-8601
    metadata: dict = field(default_factory=dict, compare=False)
    lexical: float = 0.0  # BM25 / the best BM25 of the user's memories for this query (0..1)
    signals: dict = field(default_factory=dict, compare=False)  # more cosines by embedder name (memory.extra_embedders)


@dataclass(frozen=True)
class Ranked:
    candidate: Candidate
    score: float  # fused x weight: the order
    weight: float
    age_days: float
    fused: float  # the score before time
    superseded_by: str | None = None  # id of the newest candidate that supersedes this one
    date_match: bool = False  # said inside the question's date window (memory.question_dates): DATE_TIER added


def fuse(c: Candidate, search: str, lexical_weight: float, weights: dict[str, float] | None = None) -> float:
    """The candidate's score before time: its cosine (dense) or the convex mix with BM25 (hybrid); with
    ``weights`` (hybrid, ``memory.signal_weights``) the convex mix of every named signal: ``bm25``, ``dense``
    and each extra embedder's cosine in ``c.signals``."""
    if search == "dense":
        return float(c.similarity)
    if search != "hybrid":
        raise ValueError(f"memory.search must be one of {SEARCH_MODES}, got {search!r}")
    if not weights:
        return float(lexical_weight) * float(c.lexical) + (1.0 - float(lexical_weight)) * float(c.similarity)
    total = sum(weights.values())
    value = {"bm25": float(c.lexical), "dense": float(c.similarity)}
    return sum(w * (value[n] if n in value else float(c.signals[n])) for n, w in weights.items()) / total


def check_signal_weights(weights: dict[str, float] | None, extra: Sequence[str], search: str) -> dict | None:
    """``memory.signal_weights`` checked against ``memory.extra_embedders``: a clear error naming the setting."""
    if not weights and not extra:
        return None
    if search != "hybrid":
        raise ValueError(f"memory.extra_embedders / memory.signal_weights fuse signals: they need "
                         f"memory.search=hybrid, not {search!r}")
    if len(set(extra)) != len(list(extra)):
        raise ValueError(f"memory.extra_embedders={list(extra)}: a name appears twice")
    if not weights:
        raise ValueError(f"memory.extra_embedders={list(extra)} needs memory.signal_weights (by name: bm25, dense, "
                         f"{', '.join(extra)})")
    known = {"bm25", "dense", *extra}
    unknown = sorted(set(weights) - known)
    if unknown:
        raise ValueError(f"memory.signal_weights names {unknown}: not a signal (bm25, dense, or a name in "
                         f"memory.extra_embedders={list(extra)})")
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0
           for v in weights.values()) or sum(weights.values()) <= 0:
        raise ValueError(f"memory.signal_weights={weights}: weights must be finite numbers >= 0, not all 0")
    unused = [n for n in extra if not weights.get(n)]
    if unused:
        raise ValueError(f"memory.extra_embedders {unused} have no weight in memory.signal_weights: "
                         f"they would be computed for nothing")
    return {n: float(v) for n, v in weights.items() if v}


def supersessions(cands: Sequence[Candidate], vectors: np.ndarray, min_similarity: float,
                  cue_min_similarity: float | None = None, now: str | datetime | None = None,
                  newest: bool = True) -> dict[int, int]:
    """{i: j}: candidate i is superseded by j, the newest candidate created strictly after i (and, given
    ``now``, not after it: a correction not yet said supersedes nothing) whose text's cosine with i's
    reaches ``min_similarity``, or ``cue_min_similarity`` when j's text states a change
    (:func:`states_change`). ``vectors`` are the candidates' L2-normalised text vectors. ``newest=False``:
    {i: [every such j]}."""
    if len(cands) < 2:
        return {}
    v = np.asarray(vectors, dtype=np.float32)
    if v.shape[0] != len(cands):
        raise ValueError(f"supersessions: {len(cands)} candidates but {v.shape[0]} vectors")
    sims = v @ v.T
    times = [parse_timestamp(c.created_at) for c in cands]
    said = [now is None or t <= parse_timestamp(now) for t in times]
    cue = cue_min_similarity if cue_min_similarity is not None else min_similarity
    need = [min(min_similarity, cue) if states_change(c.text) else min_similarity for c in cands]
    out: dict[int, int] = {}
    for i in range(len(cands)):
        newer = [j for j in range(len(cands)) if said[j] and times[j] > times[i] and sims[i, j] >= need[j]]
        if newer:
            out[i] = max(newer, key=lambda j: (times[j], -j)) if newest else newer
    return out


def rank_memories(cands: Sequence[Candidate], *, now: str | datetime, k: int | None, search: str = "dense",
                  lexical_weight: float = 0.5, recency: bool = True, scope: str = "all",
                  half_life_days: float = 14.0, vectors: np.ndarray | None = None,
                  supersede_min_similarity: float = 0.8,
                  supersede_cue_min_similarity: float | None = None,
                  signal_weights: dict[str, float] | None = None,
                  date_window: tuple[datetime, datetime] | None = None) -> list[Ranked]:
    """The best ``k`` of ``cands`` (all when None), best first; ties keep the input order.

    ``vectors`` (the candidates' normalised text vectors) are needed for the ``superseded`` and
    ``below_superseder`` scopes. ``date_window`` (:func:`adiyan.retrieval.question_dates.question_window`):
    a candidate said inside it gets :data:`~adiyan.retrieval.question_dates.DATE_TIER` added, after time,
    when some but not all candidates are inside."""
    if scope not in RECENCY_SCOPES:
        raise ValueError(f"memory.recency_scope must be one of {RECENCY_SCOPES}, got {scope!r}")
    if k is not None and k < 0:
        raise ValueError(f"k must be >= 0 or None, got {k!r}")
    now_dt = parse_timestamp(now)
    sup: dict[int, int] = {}
    if recency and scope in ("superseded", "below_superseder") and len(cands) > 1:
        if vectors is None:
            raise ValueError(f"recency_scope={scope} needs the candidates' text vectors")
        sup = supersessions(cands, vectors, supersede_min_similarity, supersede_cue_min_similarity, now_dt)
    rows = []
    for i, c in enumerate(cands):
        age = age_days(c.created_at, now_dt)
        base = fuse(c, search, lexical_weight, signal_weights)
        by = None
        if not recency:
            w = 1.0
        elif scope == "all":
            w = recency_weight(age, half_life_days)
        elif scope == "below_superseder":
            w, by = 1.0, (cands[sup[i]] if i in sup else None)  # placed under its superseder below
        elif i in sup:
            by = cands[sup[i]]
            gap = (parse_timestamp(by.created_at) - parse_timestamp(c.created_at)).total_seconds() / SECONDS_PER_DAY
            w = recency_weight(gap, half_life_days)
        else:
            w = 1.0
        rows.append(Ranked(c, base * w, w, age, base, by.id if by is not None else None))
    if recency and scope == "below_superseder" and sup:
        rows = _below_superseders(rows, supersessions(cands, vectors, supersede_min_similarity,
                                                      supersede_cue_min_similarity, now_dt, newest=False))
    if date_window is not None:
        rows = _date_tier(rows, date_window)
    rows.sort(key=lambda r: r.score, reverse=True)  # stable: equal scores keep the input order
    return rows if k is None else rows[:k]


def _date_tier(rows: list[Ranked], window: tuple[datetime, datetime]) -> list[Ranked]:
    """Memories said inside the question's date window above every other (the tier), when the window splits them."""
    hit = [inside(window, parse_timestamp(r.candidate.created_at)) for r in rows]
    if not any(hit) or all(hit):
        return rows
    return [replace(r, score=r.score + DATE_TIER, date_match=True) if h else r for r, h in zip(rows, hit)]


def with_lexical(cands: Sequence[Candidate], bm25_scores: dict[str, float]) -> list[Candidate]:
    """``cands`` with ``lexical`` = BM25 / the best BM25 in ``bm25_scores`` (the user's memories, this query)."""
    best = max(bm25_scores.values(), default=0.0)
    return [replace(c, lexical=(float(bm25_scores.get(c.id, 0.0)) / best) if best > 0 else 0.0) for c in cands]


def _below_superseders(rows: list[Ranked], sup: dict[int, list[int]]) -> list[Ranked]:
    """``below_superseder``: a superseded memory keeps its score unless that puts it at or above one of its
    superseders, which then gets it just below the lowest of them (by :data:`BELOW`): a correction outranks
    what it corrects and nothing else moves. Newest first, so a chain (A corrected by B and C, B by C) ends
    C > B > A."""
    order = sorted(range(len(rows)), key=lambda i: parse_timestamp(rows[i].candidate.created_at), reverse=True)
    out = list(rows)
    for i in order:
        if i in sup:
            cap = min(out[j].score for j in sup[i]) - BELOW
            if out[i].score > cap:
                out[i] = replace(out[i], score=cap, weight=(cap / out[i].fused) if out[i].fused else 1.0)
    return out
