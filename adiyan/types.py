"""Result types shared by the knowledge base, the retrieval pipeline, generation and evaluation,
and :class:`Requester`, who a read is for.

They sit at the bottom of the package (they import nothing of adiyan), so every layer can use
them without reaching into the layer that produces them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Kind = Literal["query", "document"]  # what an embedder is given: a query or a document


@dataclass(frozen=True)
class Requester:
    """Who a read is for, under the access policy: an identity (None: anonymous, global documents
    only) and the owner role (every document). Every read path takes one value instead of the pair
    ``(requester_id, is_owner)``; a bare identity string stands for ``Requester(identity)``, never
    for the owner role, which only :data:`OWNER` or an explicit ``is_owner=True`` grants."""

    id: str | None = None
    is_owner: bool = False

    @staticmethod
    def of(who: "Requester | str | None") -> "Requester":
        """``who`` as a Requester: itself, an identity string, None (anonymous), or any value with an
        ``id`` and an ``is_owner`` (the agent's requester: identity and tier). Anything else is refused."""
        if isinstance(who, Requester):
            return who
        if who is None or isinstance(who, str):
            return Requester(who)
        if hasattr(who, "id") and isinstance(getattr(who, "is_owner", None), bool):
            return Requester(who.id, who.is_owner)
        raise TypeError(f"a requester is a Requester, an identity string or None, not {type(who).__name__} {who!r}")


OWNER = Requester(None, is_owner=True)  # the owner role: every document (gold texts, the write path's re-reads)


@dataclass
class RetrievedChunk:
    """One chunk as a read path returns it: its source key, position, score and text."""

    source: str
    chunk_index: int
    score: float
    text: str
    payload: dict = field(repr=False, default_factory=dict)

    @classmethod
    def from_hit(cls, hit: Any) -> "RetrievedChunk":
        p = hit.payload
        return cls(p.get("source_filename", ""), int(p.get("chunk_index", -1)), float(hit.score), p.get("text", ""), p)

    @property
    def key(self) -> str:
        """``source#chunk_index``: identifies a chunk across rankings (fusion, re-ranking)."""
        return f"{self.source}#{self.chunk_index}"

    @property
    def page(self) -> int | None:
        p = self.payload.get("page")
        return int(p) if p is not None else None

    def as_dict(self) -> dict:
        out = {"source": self.source, "chunk_index": self.chunk_index, "score": round(self.score, 6),
               "text": self.text}
        if self.page is not None:
            out["page"] = self.page
        return out


@dataclass
class RetrievalResult:
    """What the retrieval pipeline returns for one question.

    ``chunks`` are the top k, what generation is handed; ``ranked`` is the whole ranking the
    pipeline kept (``retrieval.rank_depth`` deep, at least k), of which ``chunks`` is the
    prefix, so IR metrics at depth 10 measure the very ranking whose top k was answered from.
    """

    query: str
    chunks: list[RetrievedChunk]
    floor: float  # applies to dense cosine scores only; bm25 / hybrid scores are not similarities
    dropped_below_floor: int = 0
    mode: str = "dense"
    ranked: list[RetrievedChunk] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)  # what was searched after the transformation
    transform: str = "none"
    transform_failed: str | None = None  # why the transformation fell back to the question, if it did
    reranker: str | None = None
    floor_applied: bool = True
    timings: dict = field(default_factory=dict)
    # of the top k for the query searched without the access filter (the owner view of the same
    # pipeline run), how many the requester may not see; None when not counted (a count, never names)
    hidden: int | None = None

    def __post_init__(self) -> None:
        if not self.ranked:
            self.ranked = list(self.chunks)
        if not self.queries:
            self.queries = [self.query]

    @property
    def empty_reason(self) -> str | None:
        """Why nothing came back: an empty answer is explicit, never a silent nothing."""
        if self.chunks:
            return None
        if self.dropped_below_floor:
            return f"{self.dropped_below_floor} result(s) scored below the floor {self.floor:.3f}"
        return "no permitted chunk matched"

    def describe(self) -> str:
        """The pipeline that produced this result, e.g. ``hybrid+split+rerank(bi-encoder:mpnet)``."""
        out = self.mode
        if self.transform != "none":
            out += f"+{self.transform}" + ("(failed)" if self.transform_failed else "")
        if self.reranker:
            out += f"+rerank({self.reranker})"
        return out
