"""The knowledge base: the write path and the six read paths, under one access policy.

Every chunk carries ``source_filename`` (``<owner>/<filename>``, the source key), ``chunk_index``,
``ingested_at``, ``owner_identity``, ``visibility`` (``private`` | ``global``), ``doc_version``
and its text. A chunk or file is visible to a requester when it is global or the requester
owns it; the owner role (``Requester.is_owner``) bypasses the filter. The filter is part of the engine
query (Qdrant filter, SQL WHERE), so k results are k permitted results, and a document the
requester may not see answers exactly like one that does not exist.

Write path (improving on the seed's delete-before-insert): the new version's chunks get new
point ids (derived from the content), are stored, the raw file and its index row are
committed, and only then are the previous version's chunks deleted. A failure before the
commit removes what was added and leaves the previous version intact; a crash in between is
repaired when the knowledge base is next opened (a pending marker names the source).

No visibility window: the commit (one SQLite transaction) is the only switch. Every read goes
through the committed record: the three whole-document paths read it directly, and the engine
search (:meth:`KnowledgeBase.search`, which the pipeline's three searching paths call) returns
a chunk only when its ``(doc_version, visibility, owner)`` is the committed record's
(:func:`adiyan.kb.policy.committed_only`), over-fetching to refill k. So before the commit no
read shows the new version, from the commit on none shows the old one (however long its
chunks wait for deletion, a crash included), one result never mixes two versions of a
document, and narrowing a document's visibility (global → private) takes effect at the commit.

Keys (:mod:`adiyan.kb.policy`) are ``<owner>/<name>``, the name a file name or a relative path;
batches expand containers into documents keyed under the container (:mod:`adiyan.kb.batch`).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from tqdm.auto import tqdm

from ..cache import embedder_identity
from ..chunking import chunk_stats, chunk_text, refuse_inert_window
from ..config import ChunkingConfig, IngestConfig
from ..ingest.parse import ParseError, parse_cached
from ..ingest.rawstore import DocumentRecord, RawStore
from .batch import (
    BatchError,
    ContainerDone,
    IngestItem,
    plan_batch,
    read_item,
)
from .bm25 import CorpusBm25Stats
from .signals import SignalSearch
from .policy import (
    VISIBILITIES,
    IngestError,
    access_filter,
    source_key,
    validate_filename,
)
from ..store.base import SPARSE_NAME, TITLE_NAME, Cond, Empty, Filter, LexicalEncoder, Point
from ..types import OWNER, Requester, RetrievalResult, RetrievedChunk  # noqa: F401 - re-exported for callers of the KB

__all__ = ["VISIBILITIES", "DocumentNotFound", "IngestError", "IngestItem", "IngestResult", "KnowledgeBase",
           "access_filter", "source_key", "validate_filename"]
_POINT_NS = uuid.UUID("6f1c0a52-3b8e-4c1e-9a57-5d2f1a7e0b11")


class DocumentNotFound(LookupError):
    """No such document *for this requester*: hidden and missing documents are indistinguishable."""



@dataclass
class IngestResult:
    source: str
    doc_version: str
    n_chunks: int
    changed: bool
    seconds: float
    chunk_stats: dict
    report: dict = field(default_factory=dict)
    # a container's result (ingest_many): its members' results and the members it no longer has
    members: list = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


@dataclass
class _Prepared:
    key: str
    filename: str
    owner: str
    visibility: str
    data: bytes
    data_sha: str
    text: str
    report: dict
    doc_version: str
    ingested_at: str | None
    chunks: list
    t0: float
    committed: object = None
    now: str = ""
    chunk_s: float = 0.0  # time spent chunking (the semantic chunker embeds sentences)


class KnowledgeBase(CorpusBm25Stats, SignalSearch):
    """Build it with :func:`adiyan.factory.open_kb`; it takes only the config sections it uses."""

    def __init__(self, store, embedder, raw: RawStore, *, chunking: ChunkingConfig, ingest: IngestConfig,
                 collection: str = "adiyan_knowledge_base", parse_cache=None, extra_embedders: dict | None = None,
                 title_field: bool = False):
        """``extra_embedders`` ({name: embedder}, embedder.extra): each writes a named dense vector of
        that name on every chunk; ``title_field`` (store.title_field): every chunk also carries a BM25
        vector of its document's title."""
        self.store = store
        self.embedder = embedder
        self.extra_embedders = dict(extra_embedders or {})
        self.title_field = bool(title_field)
        self.chunking = chunking
        refuse_inert_window(chunking, embedder)  # every entry point opens its knowledge base here
        self.ingest = ingest
        self.collection = collection
        self.parse_cache = parse_cache  # a CallCache: parsed documents by (bytes, parser settings, parser code)
        self.raw = raw
        self.pending_dir = self.raw.root / "pending"
        self.pending_dir.mkdir(parents=True, exist_ok=True)
        # Fault injection for tests: called with a stage name at each step of the write path.
        self.fault_hook: Callable[[str], None] | None = None
        self.book_pages = None  # adiyan.kb.pages.BookPages, attached by adiyan.factory.open_kb
        self._source_locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._bm25_stats = self.raw.root / "bm25.json"
        self.lexical = LexicalEncoder(avg_len=self.bm25_avg_len())
        self._lengths = LexicalEncoder(b=0.0)  # b = 0: a term's weight gives back its frequency
        # the same-model rule compares identities (id, runtime, weights), not names, per named vector too
        self.store.ensure_collection(self.collection, dim=embedder.dim, embedder_id=embedder_identity(embedder),
                                     normalized=embedder.normalized, vectors=self.vector_specs(),
                                     title=self.title_field)
        self.repair()

    def _check_model(self) -> None:
        meta = self.store.collection_meta(self.collection)
        if meta is not None:
            meta.check(embedder_identity(self.embedder), self.embedder.dim, self.embedder.normalized,
                       vectors=self.vector_specs(),
                       sparse=(SPARSE_NAME, TITLE_NAME) if self.title_field else (SPARSE_NAME,))

    def _fault(self, stage: str) -> None:
        if self.fault_hook is not None:
            self.fault_hook(stage)

    def close(self) -> None:
        """Close the store (the embedded engine locks its folder until then); or ``with open_kb(...) as kb:``."""
        self.store.close()

    def __enter__(self) -> "KnowledgeBase":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- write path ------------------------------------------------------------------------
    def ingest_document(self, data: bytes | str | os.PathLike, filename: str | None = None,
                        owner_identity: str = "", visibility: str = "private", *,
                        ingested_at: str | None = None) -> IngestResult:
        """Parse, chunk, embed and store one document, replacing its previous version safely.

        ``filename`` may be a relative path (the key is ``<owner>/<filename>``). Containers are
        not expanded here (an e-mail is its headers and body; a zip is refused): the batch path
        :meth:`ingest_many` expands them.
        """
        data, name = read_item(IngestItem(data, filename, owner_identity, visibility), self.ingest)
        prepared = self._parse_and_prepare(data, name, owner_identity, visibility, ingested_at)
        if isinstance(prepared, IngestResult):
            return prepared
        return self._write([prepared])[0]

    def ingest_text(self, text: str, filename: str, owner_identity: str, visibility: str = "private", *,
                    ingested_at: str | None = None, authored_markdown: bool | None = None) -> IngestResult:
        """Ingest text that needs no parsing (the bytes stored are its UTF-8 encoding)."""
        key = source_key(owner_identity, filename)
        self._check_visibility(filename, visibility)
        if authored_markdown is None:
            authored_markdown = filename.lower().endswith((".md", ".markdown"))
        report = {"format": "text", "units": [{"unit": 1, "chars": len(text), "tier": "text"}],
                  "warnings": [], "total_chars": len(text), "authored_markdown": authored_markdown}
        return self._ingest(key, filename, owner_identity, visibility, text.encode("utf-8"), text, report,
                            authored_markdown=authored_markdown, ingested_at=ingested_at)

    def ingest_many(self, items, *, progress: bool = False, batch_chunks: int = 256,
                    on_result: Callable[[IngestItem, IngestResult | IngestError], None] | None = None,
                    ) -> list[IngestResult | IngestError]:
        """Ingest a batch of documents with each document's guarantees, at batch cost.

        ``items`` are :class:`IngestItem` (or ``(data_or_path, filename, owner, visibility)``
        tuples); a filename may be a relative path. Containers are expanded and every member is
        a document of its own (:mod:`adiyan.kb.batch`); two documents with one key are refused
        by name. Each document is parsed and chunked on its own; a bad one gets its
        :class:`IngestError` and the rest go on. The chunks of up to ``batch_chunks`` are then
        embedded in one call, stored in one engine update and committed in one raw-store
        transaction, so per-document overheads (model call setup, fsyncs, transactions) are
        paid per batch. If a batch fails to store, its documents are retried one by one, so one
        failure costs only its own document; every previous version stays the one every read
        returns until its replacement is committed.

        Returns one result per item, in order; a container's result lists its members' results
        (``members``) and the members it no longer has, which are removed (``removed``).
        ``on_result(item, result)`` is called as each document finishes, members included.
        """
        items = [it if isinstance(it, IngestItem) else IngestItem(*it) for it in items]
        out: list[IngestResult | IngestError | None] = [None] * len(items)
        members: dict[int, list] = {}
        containers: list[ContainerDone] = []
        group: list[tuple[int, bool, _Prepared]] = []

        def done(i: int, member: bool, res) -> None:
            if member:
                members.setdefault(i, []).append(res)
            else:
                out[i] = res
            if on_result is not None:
                on_result(items[i], res)

        def flush() -> None:
            if not group:
                return
            for (i, member, p), res in zip(group, self._write_isolating([p for *_, p in group])):
                if isinstance(res, IngestError):
                    res.source = res.source or p.key
                done(i, member, res)
            group.clear()

        bar = tqdm(total=len(items), desc="ingest", unit="item", disable=not progress)
        for ev in plan_batch(items, self.ingest):
            if isinstance(ev, ContainerDone):
                containers.append(ev)
                continue
            if isinstance(ev, BatchError):
                done(ev.item, ev.container is not None, ev.error)
            else:
                bar.set_postfix_str(ev.name[-30:])
                try:
                    prepared = self._parse_and_prepare(ev.data, ev.name, ev.owner, ev.visibility, ev.ingested_at,
                                                       container=ev.container)
                except IngestError as exc:
                    exc.source = exc.source or ev.key
                    done(ev.item, ev.container is not None, exc)
                else:
                    if isinstance(prepared, IngestResult):
                        done(ev.item, ev.container is not None, prepared)
                    else:
                        group.append((ev.item, ev.container is not None, prepared))
                        if sum(len(p.chunks) for *_, p in group) >= batch_chunks:
                            flush()
            bar.n = ev.item  # items before this one are finished
            bar.refresh()
        flush()
        bar.n = len(items)
        bar.close()
        for c in containers:
            out[c.item] = self._finish_container(c, out[c.item], members.get(c.item, []))
        return out  # type: ignore[return-value]

    def _finish_container(self, c: ContainerDone, own, results: list) -> IngestResult | IngestError:
        """Remove the members a re-ingested container no longer has; the container's result."""
        t0 = time.perf_counter()
        previous = [r.source_key for r in self.raw.under(c.key + "/") if r.report.get("container") == c.key]
        gone = [k for k in previous if k not in c.members]
        if gone:
            try:
                self.remove_documents(gone)
            except Exception as exc:  # noqa: BLE001 - reported; the records stay until a re-ingest
                err = IngestError(f"{c.key!r}: could not remove {len(gone)} member(s) it no longer has: "
                                  f"{type(exc).__name__}: {exc}", source=c.key)
                results.append(err)
                gone = []
        if own is None:  # an archive is not a document itself: a summary of its members
            ok = [r for r in results if isinstance(r, IngestResult)]
            own = IngestResult(c.key, "", sum(r.n_chunks for r in ok), any(r.changed for r in ok) or bool(gone),
                               time.perf_counter() - t0, {}, {"format": "container", "members": len(c.members)})
        if isinstance(own, IngestResult):
            own.members, own.removed = results, gone
        return own

    def remove_documents(self, keys: list[str]) -> None:
        """Remove documents: their records in one transaction (from that instant no read shows
        them: their chunks are no longer committed), then their chunks; a crash in between is
        repaired on the next open."""
        keys = sorted(set(keys))
        locks = [self._source_lock(k) for k in keys]
        for lock in locks:
            lock.acquire()
        try:
            markers = [self._mark_pending(k, "") for k in keys]
            self.raw.commit_many([], remove=keys)
            self._fault("after_remove_commit")
            for k, marker in zip(keys, markers):
                self.store.delete(self.collection, Filter(must=(Cond("source_filename", k),)))
                marker.unlink(missing_ok=True)
            if self.book_pages is not None:
                self.book_pages.sync(keys)
        finally:
            for lock in reversed(locks):
                lock.release()

    def _parse_and_prepare(self, data: bytes, filename: str, owner_identity, visibility, ingested_at, *,
                           container: str | None = None):
        key = source_key(owner_identity, filename)
        self._check_visibility(filename, visibility)
        unchanged = self._unchanged(key, data, owner_identity, visibility)
        if unchanged is not None:  # same bytes, settings and model: nothing to parse or embed
            return unchanged
        try:
            text, report = parse_cached(data, filename, self.ingest, self.parse_cache)
        except ParseError as exc:
            raise IngestError(str(exc), source=key) from exc
        self._fault("after_parse")
        if container is not None:
            report = {**report, "container": container}
        return self._prepare(key, filename, owner_identity, visibility, data, text, report,
                             authored_markdown=bool(report.get("authored_markdown")), ingested_at=ingested_at)

    @staticmethod
    def _check_visibility(filename: str, visibility: str) -> None:
        if visibility not in VISIBILITIES:
            raise IngestError(f"{filename!r}: visibility must be one of {VISIBILITIES}, got {visibility!r}")

    def _doc_version(self, data_sha: str, owner: str, visibility: str, authored_markdown: bool) -> str:
        """What a stored version depends on: the bytes, the OCR engine, the chunking, the model, who may read it."""
        src = "\x00".join([data_sha, self.chunking.version_json(), self.embedder.id, visibility,
                           owner, str(authored_markdown), self.ingest.ocr])
        return hashlib.sha256(src.encode("utf-8")).hexdigest()[:16]

    def _unchanged(self, key: str, data: bytes, owner: str, visibility: str) -> IngestResult | None:
        """The committed version when re-ingesting ``data`` would store exactly it again, else None."""
        t0 = time.perf_counter()
        committed = self.raw.get(key, OWNER)
        if committed is None or committed.sha256 != hashlib.sha256(data).hexdigest():
            return None
        version = self._doc_version(committed.sha256, owner, visibility,
                                    bool(committed.report.get("authored_markdown")))
        if version != committed.doc_version:
            return None
        stored = self.store.count(self.collection, Filter(must=(Cond("source_filename", key),)))
        if stored != committed.n_chunks:
            return None  # chunks missing: ingest again
        return IngestResult(key, version, stored, False, time.perf_counter() - t0, {}, committed.report)

    def _source_lock(self, key: str) -> threading.Lock:
        with self._locks_guard:
            return self._source_locks.setdefault(key, threading.Lock())

    def _ingest(self, key, filename, owner, visibility, data: bytes, text: str, report: dict, *,
                authored_markdown: bool, ingested_at: str | None) -> IngestResult:
        """Store already-extracted text as the new version of ``key`` (used by ingest_text and sweeps)."""
        prepared = self._prepare(key, filename, owner, visibility, data, text, report,
                                 authored_markdown=authored_markdown, ingested_at=ingested_at)
        if isinstance(prepared, IngestResult):
            return prepared
        return self._write([prepared])[0]

    def _prepare(self, key, filename, owner, visibility, data: bytes, text: str, report: dict, *,
                 authored_markdown: bool, ingested_at: str | None) -> _Prepared | IngestResult:
        """Version and chunks of one document (no store access but the unchanged check)."""
        t0 = time.perf_counter()
        if not text or not text.strip():
            raise IngestError(f"{filename!r}: no text to ingest (empty document)")
        self._check_model()
        data_sha = hashlib.sha256(data).hexdigest()
        doc_version = self._doc_version(data_sha, owner, visibility, authored_markdown)
        committed = self.raw.get(key, OWNER)
        if committed is not None and committed.doc_version == doc_version:
            stored = self.store.count(self.collection, Filter(must=(Cond("source_filename", key),)))
            if stored == committed.n_chunks:
                return IngestResult(key, doc_version, stored, False, time.perf_counter() - t0, {}, committed.report)
        try:
            tc = time.perf_counter()
            chunks = chunk_text(text, self.chunking, embedder=self.embedder,
                                authored_markdown=authored_markdown)
            chunk_s = time.perf_counter() - tc
        except Exception as exc:  # noqa: BLE001 - nothing is stored yet: the previous version is untouched
            raise IngestError(f"{filename!r}: ingest failed, previous version kept: "
                              f"{type(exc).__name__}: {exc}") from exc
        if not chunks:
            raise IngestError(f"{filename!r}: chunking produced no chunks")
        return _Prepared(key, filename, owner, visibility, data, data_sha, text, report, doc_version,
                         ingested_at, chunks, t0, chunk_s=chunk_s)

    def _write_isolating(self, group: list[_Prepared]) -> list[IngestResult | IngestError]:
        """Write a batch; if it fails as a whole, write its documents one by one."""
        try:
            return self._write(group)
        except IngestError as exc:
            if len(group) == 1:
                return [exc]
        results: list[IngestResult | IngestError] = []
        for p in group:
            try:
                results.append(self._write([p])[0])
            except IngestError as exc:
                results.append(exc)
        return results

    def _write(self, group: list[_Prepared]) -> list[IngestResult]:
        """Embed, store and commit new versions; previous versions are deleted only after the commit.

        All or nothing for the group: on any failure before the commit every new version is
        removed again and every previous version stays the committed, searchable one (a crash
        leaves pending markers that repair() resolves the same way).
        """
        names = ", ".join(repr(p.filename) for p in group[:3]) + (f" and {len(group) - 3} more" if len(group) > 3 else "")
        try:
            texts = [c.text for p in group for c in p.chunks]
            vectors = self.embedder.embed(texts, "document")
            # each named vector through its own embedder, behind the same content-addressed cache
            named = {n: e.embed(texts, "document") for n, e in self.extra_embedders.items()}
            self._fault("after_embed")
        except Exception as exc:  # nothing is stored yet: the previous versions are untouched
            raise IngestError(f"{names}: ingest failed, previous version kept: "
                              f"{type(exc).__name__}: {exc}") from exc
        locks = [self._source_lock(k) for k in sorted({p.key for p in group})]  # one global order: no deadlock
        for lock in locks:
            lock.acquire()
        try:
            return self._write_locked(group, vectors, names, named)
        finally:
            for lock in reversed(locks):
                lock.release()

    def _write_locked(self, group: list[_Prepared], vectors, names: str, named: dict | None = None) -> list[IngestResult]:
        now_default = datetime.now(timezone.utc).isoformat(timespec="seconds")
        todo, results, points, offset = [], {}, [], 0
        named = named or {}
        for p in group:
            vecs = vectors[offset: offset + len(p.chunks)]
            nvecs = {n: v[offset: offset + len(p.chunks)] for n, v in named.items()}
            offset += len(p.chunks)
            mine = Filter(must=(Cond("source_filename", p.key),))
            committed = self.raw.get(p.key, OWNER)  # re-read under the lock
            if committed is not None and committed.doc_version == p.doc_version \
                    and self.store.count(self.collection, mine) == committed.n_chunks:
                results[id(p)] = IngestResult(p.key, p.doc_version, committed.n_chunks, False,
                                              time.perf_counter() - p.t0, {}, committed.report)
                continue
            p.committed = committed
            p.report = {**p.report, "chunking": {"strategy": p.chunks[0].strategy or self.chunking.strategy,
                                                 "note": p.chunks[0].note, **chunk_stats(p.chunks)}}
            p.now = p.ingested_at or now_default
            points += [
                Point(str(uuid.uuid5(_POINT_NS, f"{p.key}\x00{p.doc_version}\x00{c.index}")), vecs[i], {
                    "source_filename": p.key, "chunk_index": c.index, "ingested_at": p.now,
                    "owner_identity": p.owner, "visibility": p.visibility, "doc_version": p.doc_version,
                    "text": c.text, "bm25_len": self.bm25_length(c.text),
                }, sparse=self.lexical.document(c.text), named={n: v[i] for n, v in nvecs.items()},
                    title=self.title_vector(p.text) if self.title_field else None) for i, c in enumerate(p.chunks)
            ]
            todo.append(p)
        markers = [self._mark_pending(p.key, p.doc_version) for p in todo]
        try:
            if points:
                self.store.upsert(self.collection, points)
            self._fault("after_upsert")
            records = []
            shas = self.raw.put_blobs([blob for p in todo for blob in ((p.data, ""), (p.text.encode("utf-8"), ".md"))])
            for p, text_sha in zip(todo, shas[1::2]):
                records.append(DocumentRecord(p.key, p.filename, p.owner, p.visibility, p.data_sha, len(p.data),
                                              p.now, p.doc_version, len(p.chunks), text_sha, p.report))
            self.raw.commit_many(records)  # one transaction: the whole group is committed or none of it
        except BaseException as exc:
            # Roll back: the previous versions stay the committed, searchable ones. If the
            # rollback itself fails, the pending markers remain and repair() finishes it.
            for p, marker in zip(todo, markers):
                if p.committed is None or p.committed.doc_version != p.doc_version:
                    self.store.delete(self.collection, Filter(must=(Cond("source_filename", p.key),
                                                                    Cond("doc_version", p.doc_version))))
                marker.unlink(missing_ok=True)
            if isinstance(exc, Exception) and not isinstance(exc, IngestError):
                raise IngestError(f"{names}: ingest failed, previous version kept: "
                                  f"{type(exc).__name__}: {exc}") from exc
            raise
        self._fault("after_commit")  # from here on every read shows the new version only
        for p in todo:
            if p.committed is not None:  # a new document has no older chunks (a crashed write left a marker)
                self.store.delete(self.collection, Filter(must=(Cond("source_filename", p.key),),
                                                          must_not=(Cond("doc_version", p.doc_version),)))
        self._fault("after_cleanup")
        if self.book_pages is not None and todo:  # pages follow the committed records (adiyan.kb.pages)
            self.book_pages.sync([p.key for p in todo])
        for p, marker in zip(todo, markers):
            marker.unlink(missing_ok=True)
            results[id(p)] = IngestResult(p.key, p.doc_version, len(p.chunks), True, time.perf_counter() - p.t0,
                                          {**chunk_stats(p.chunks), "chunk_s": round(p.chunk_s, 4)}, p.report)
        return [results[id(p)] for p in group]

    def _mark_pending(self, key: str, doc_version: str) -> Path:
        name = hashlib.sha256(key.encode()).hexdigest()[:24] + ".json"
        p = self.pending_dir / name
        tmp = p.with_suffix(".tmp")
        tmp.write_text(json.dumps({"source": key, "doc_version": doc_version}))
        tmp.replace(p)
        return p

    def repair(self) -> list[str]:
        """Finish or undo writes interrupted by a crash: keep exactly the committed version."""
        repaired = []
        for p in sorted(self.pending_dir.glob("*.json")):
            info = json.loads(p.read_text())
            key = info["source"]
            committed = self.raw.get(key, OWNER)
            mine = Filter(must=(Cond("source_filename", key),))
            if committed is None:
                self.store.delete(self.collection, mine)
            else:
                self.store.delete(self.collection, mine.and_(Filter(must_not=(Cond("doc_version", committed.doc_version),))))
            p.unlink(missing_ok=True)
            repaired.append(key)
        return repaired

    def finish_ingest(self) -> None:
        """Once a batch is stored: refresh the BM25 statistics from the corpus, build the index (HNSW)."""
        self.refresh_bm25_stats()
        self.store.optimize(self.collection)

    def migrate_private(self, owner_identity: str) -> int:
        """The seed's migration: every chunk without a visibility becomes private to ``owner``."""
        legacy = Filter(must=(Empty("visibility"),))
        n = self.store.count(self.collection, legacy)
        if n:
            self.store.set_payload(self.collection, {"visibility": "private", "owner_identity": owner_identity}, legacy)
        return n

    # -- the read paths that return whole documents (engine search: adiyan.kb.signals) ----------
    def get_document_text(self, source: str, requester: Requester | str | None) -> str:
        rec = self.record(source, requester)
        return self.raw.read_blob(rec.text_sha256, ".md").decode("utf-8")

    def get_document(self, source: str, requester: Requester | str | None) -> bytes:
        """The original bytes, as ingested ("send me that file back")."""
        rec = self.record(source, requester)
        return self.raw.read_blob(rec.sha256)

    def list_documents(self, requester: Requester | str | None) -> list[dict]:
        return [r.public() for r in self.raw.list(requester)]

    def record(self, source: str, requester: Requester | str | None) -> DocumentRecord:
        """The committed record of ``source`` if the requester may see it, else DocumentNotFound."""
        rec = self.raw.get(source, requester)
        if rec is None:
            raise DocumentNotFound(f"no document {source!r}")
        return rec

    def extraction_report(self, source: str, requester: Requester | str | None) -> dict:
        return self.record(source, requester).report

    def count_chunks(self, source: str | None = None) -> int:
        flt = Filter(must=(Cond("source_filename", source),)) if source else None
        return self.store.count(self.collection, flt)
