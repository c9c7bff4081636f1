"""The knowledge base: the write path and the read paths, under one access policy.

Every chunk carries ``source_filename`` (``<owner>/<filename>``, the source key), ``chunk_index``,
``ingested_at``, ``owner_identity``, ``visibility`` (``private`` | ``global``), ``doc_version``
and its text. A chunk is visible to a requester when it is global or the requester owns it;
the owner role (``is_owner``) bypasses the filter. The filter is part of the engine query, so
k results are k permitted results.

Write path: chunks of a new version get new point ids (derived from the content), are stored,
and only then are the previous version's chunks deleted; a failure at any step before that
leaves the previous version searchable. Re-ingesting identical content changes nothing.
"""

from __future__ import annotations

import hashlib
import re
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone

from .chunking import Chunk, chunk_stats, chunk_text
from .store.base import Cond, Filter, Hit, Point

VISIBILITIES = ("private", "global")
_POINT_NS = uuid.UUID("6f1c0a52-3b8e-4c1e-9a57-5d2f1a7e0b11")


class IngestError(ValueError):
    """A document could not be ingested; the message names the file and the reason."""


class AccessDenied(PermissionError):
    pass


def validate_filename(filename: str) -> str:
    """File names are keys, never paths: reject anything that could address another place."""
    if not isinstance(filename, str) or not filename.strip():
        raise IngestError(f"{filename!r}: empty file name")
    if "\x00" in filename:
        raise IngestError(f"{filename!r}: file name contains a NUL byte")
    if "/" in filename or "\\" in filename:
        raise IngestError(f"{filename!r}: file name must not contain a path separator")
    if filename in (".", "..") or filename.startswith(".."):
        raise IngestError(f"{filename!r}: file name must not be '.' or start with '..'")
    if re.match(r"^[A-Za-z]:", filename):
        raise IngestError(f"{filename!r}: file name looks like an absolute path")
    return filename


def source_key(owner_identity: str, filename: str) -> str:
    if not owner_identity or "/" in owner_identity or "\x00" in owner_identity:
        raise IngestError(f"{filename!r}: invalid owner identity {owner_identity!r}")
    return f"{owner_identity}/{validate_filename(filename)}"


def access_filter(requester_id: str | None, is_owner: bool) -> Filter | None:
    """None (no restriction) for the owner role; otherwise global or the requester's own."""
    if is_owner:
        return None
    should = [Cond("visibility", "global")]
    if requester_id:
        should.append(Cond("owner_identity", requester_id))
    return Filter(should=tuple(should))


@dataclass
class RetrievedChunk:
    source: str
    chunk_index: int
    score: float
    text: str
    payload: dict = field(repr=False, default_factory=dict)

    @classmethod
    def from_hit(cls, hit: Hit) -> "RetrievedChunk":
        p = hit.payload
        return cls(p["source_filename"], int(p["chunk_index"]), hit.score, p.get("text", ""), p)

    def as_dict(self) -> dict:
        return {"source": self.source, "chunk_index": self.chunk_index, "score": round(self.score, 6),
                "text": self.text}


@dataclass
class RetrievalResult:
    query: str
    chunks: list[RetrievedChunk]
    floor: float
    dropped_below_floor: int = 0

    @property
    def empty_reason(self) -> str | None:
        if self.chunks:
            return None
        if self.dropped_below_floor:
            return f"{self.dropped_below_floor} result(s) scored below the floor {self.floor:.3f}"
        return "no permitted chunk matched"


@dataclass
class IngestResult:
    source: str
    doc_version: str
    n_chunks: int
    changed: bool
    seconds: float
    chunk_stats: dict


class KnowledgeBase:
    def __init__(self, settings, store, embedder):
        self.settings = settings
        self.store = store
        self.embedder = embedder
        self.collection = settings.store.collection_prefix + "knowledge_base"
        self.store.ensure_collection(self.collection, dim=embedder.dim, embedder_id=embedder.id,
                                     normalized=embedder.normalized)

    def _check_model(self) -> None:
        meta = self.store.collection_meta(self.collection)
        if meta is not None:
            meta.check(self.embedder.id, self.embedder.dim, self.embedder.normalized)

    # -- write path ------------------------------------------------------------------------
    def ingest_text(self, text: str, filename: str, owner_identity: str, visibility: str = "private",
                    *, ingested_at: str | None = None, extra_payload: dict | None = None) -> IngestResult:
        t0 = time.perf_counter()
        key = source_key(owner_identity, filename)
        if visibility not in VISIBILITIES:
            raise IngestError(f"{filename!r}: visibility must be one of {VISIBILITIES}, got {visibility!r}")
        if not text or not text.strip():
            raise IngestError(f"{filename!r}: no text to ingest (empty document)")
        self._check_model()
        cc = self.settings.chunking
        version_src = "\x00".join([text, cc.model_dump_json(), self.embedder.id, visibility, owner_identity])
        doc_version = hashlib.sha256(version_src.encode("utf-8")).hexdigest()[:16]
        mine = Filter(must=(Cond("source_filename", key),))
        current = self.store.count(self.collection, mine.and_(Filter(must=(Cond("doc_version", doc_version),))))
        chunks: list[Chunk] = chunk_text(text, cc)
        if not chunks:
            raise IngestError(f"{filename!r}: chunking produced no chunks")
        if current == len(chunks) and self.store.count(self.collection, mine) == current:
            return IngestResult(key, doc_version, current, False, time.perf_counter() - t0, chunk_stats(chunks))
        vectors = self.embedder.embed([c.text for c in chunks], "document")
        now = ingested_at or datetime.now(timezone.utc).isoformat(timespec="seconds")
        points = [
            Point(str(uuid.uuid5(_POINT_NS, f"{key}\x00{doc_version}\x00{c.index}")), vectors[i], {
                "source_filename": key, "chunk_index": c.index, "ingested_at": now,
                "owner_identity": owner_identity, "visibility": visibility, "doc_version": doc_version,
                "text": c.text, **(extra_payload or {}),
            }) for i, c in enumerate(chunks)
        ]
        self.store.upsert(self.collection, points)
        # Only now that the new version is stored does the old one go.
        self.store.delete(self.collection, mine.and_(Filter(must_not=(Cond("doc_version", doc_version),))))
        return IngestResult(key, doc_version, len(chunks), True, time.perf_counter() - t0, chunk_stats(chunks))

    def finish_ingest(self) -> None:
        """Build the index (HNSW) once a batch is stored."""
        self.store.optimize(self.collection)

    # -- read paths ------------------------------------------------------------------------
    def retrieve_knowledge_base(self, query: str, requester_id: str | None, is_owner: bool = False,
                                top_k: int | None = None, *, floor: float | None = None) -> RetrievalResult:
        self._check_model()
        k = top_k or self.settings.retrieval.kb_top_k
        floor = self.settings.score_floor(self.embedder.id) if floor is None else floor
        qv = self.embedder.embed([query], "query")[0]
        hits = self.store.search(self.collection, qv, k, flt=access_filter(requester_id, is_owner),
                                 ef=self.settings.store.hnsw_ef, exact=self.settings.store.exact)
        kept = [RetrievedChunk.from_hit(h) for h in hits if h.score >= floor]
        return RetrievalResult(query, kept, floor, dropped_below_floor=len(hits) - len(kept))

    def list_documents(self, requester_id: str | None, is_owner: bool = False) -> list[dict]:
        docs: dict[str, dict] = {}
        for p in self.store.scroll(self.collection, flt=access_filter(requester_id, is_owner)):
            pl = p.payload
            d = docs.setdefault(pl["source_filename"], {
                "source": pl["source_filename"], "owner_identity": pl["owner_identity"],
                "visibility": pl["visibility"], "ingested_at": pl["ingested_at"], "chunks": 0})
            d["chunks"] += 1
        return [docs[k] for k in sorted(docs)]

    def count_chunks(self) -> int:
        return self.store.count(self.collection)
