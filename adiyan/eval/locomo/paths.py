"""The retrieval paths LoCoMo is scored on, each giving a question the dialog ids it retrieved.

Reference (no memory engine, over the raw turns of the question's conversation):
- ``reference_bm25``: :class:`adiyan.retrieval.bm25.BM25Retriever` (Lucene BM25, k1 0.9, b 0.4);
- ``reference_dense``: :class:`adiyan.retrieval.dense.ExactDenseIndex`, exact cosine.

Product:
- ``memory_similarity``: the conversation memory (mem0, :class:`adiyan.memory.Memory`, turns
  stored verbatim with ``infer=False`` at their session times), top k by the configured search
  (``memory.search``: cosine, or hybrid with BM25) without time;
- ``memory_recency``: the same with the configured recency (``memory.recency_scope``,
  ``memory.half_life_days``, over-fetch ``memory.overfetch_factor`` / ``overfetch_min``), asked at the
  conversation's end: the memory as ``adiyan ask`` searches it;
- ``context``: the three-part context of :func:`adiyan.context.assemble` (the facts, with
  ``memory.top_k`` = k, ``conversation.facts_min_*``; the history window over the conversation's
  last turns, ``conversation.history_*``), i.e. what ``adiyan ask --conversation`` would put
  before the model; its ids are the facts' and the kept history turns';
- ``kb``: the knowledge base with each turn a private document of the conversation's user,
  searched through the retrieval pipeline (:class:`adiyan.retrieval.pipeline.Retriever`, every
  ``retrieval.*`` setting it honours) as that user.

The mem0 store and the knowledge base are built once per (LoCoMo file, embedder) under
``<data_dir>/locomo/`` and reused. Every memory search of a question is served by
:class:`CandidateMemory` from one similarity search to :data:`CANDIDATE_DEPTH`, re-ranked with
the same code as :meth:`Memory.search` (a test checks it returns what ``Memory.search`` returns);
the candidates are kept beside the store, so a rerun or a sweep point with another half-life or
k asks mem0 nothing it asked before.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from datetime import datetime, timezone
from pathlib import Path

from tqdm.auto import tqdm

from ...cache import embedder_identity
from ...factory import open_kb, open_memory, open_retriever
from ...kb import IngestError, IngestItem
from ...memory import MemoryHit, consolidation_identity, resolve_infer
from ...retrieval.bm25 import BM25Retriever
from ...retrieval.dense import ExactDenseIndex, embed_queries, embed_texts
from ...retrieval.memory_rank import Candidate
from ...retrieval.recency import overfetch_size, parse_timestamp
from ..harness import build_once
from .data import Conversation, LocomoSet

KS = (5, 10, 25)
REFERENCE_PATHS = ("reference_bm25", "reference_dense")
PRODUCT_PATHS = ("memory_similarity", "memory_recency", "context", "kb")
PATHS = REFERENCE_PATHS + PRODUCT_PATHS
RANKED_PATHS = ("reference_bm25", "reference_dense", "memory_similarity", "memory_recency", "kb")  # nDCG applies
CANDIDATE_DEPTH = 100  # similarity candidates per question: max over-fetch at k=25 is 3*25 = 75
LAYOUT = 1  # bump when what is stored (texts, metadata, times) changes


def _sha(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def store_key(ls: LocomoSet, embedder, what: str) -> str:
    return _sha({"locomo": ls.content_hash(), "embedder": embedder_identity(embedder), "what": what, "layout": LAYOUT})


def _store_dir(settings, ls: LocomoSet, embedder, what: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", embedder.id)
    return Path(settings.paths.data_dir) / "locomo" / f"{what}-{slug}-{store_key(ls, embedder, what)[:12]}"


# ------------------------------------------------------------------------------- reference


def reference_rankings(ls: LocomoSet, embedder, depth: int = max(KS), progress: bool = False) -> dict[str, dict]:
    """{path: {qid: [dia_id, ...] best first, up to ``depth``}} for BM25 and exact dense search,
    each over the raw turns of the question's own conversation."""
    out = {"reference_bm25": {}, "reference_dense": {}}
    for conv in ls.conversations:
        ids, texts = [t.dia_id for t in conv.turns], [t.text for t in conv.turns]
        queries = {q.qid: q.question for q in conv.questions}
        bm = BM25Retriever().index(ids, texts).retrieve(queries, k=depth)
        out["reference_bm25"].update({qid: list(run) for qid, run in bm.items()})
        dense = ExactDenseIndex(ids, embed_texts(embedder, texts, progress=progress))
        qids, qv = embed_queries(embedder, queries, progress=progress)
        for qid, hits in zip(qids, dense.search(qv, depth, normalize=False)):
            out["reference_dense"][qid] = [d for d, _ in hits]
    return out


# ------------------------------------------------------------------------------- memory


def _open_memory_at(settings, folder: Path, embedder, infer: bool = False):
    # Always a local store in its own folder, never the configured memory: LoCoMo's turns must not
    # land in a real user's memory.
    local = settings.with_overrides({"paths.data_dir": str(folder), "store.engine": "edge"})
    return open_memory(local, embedder, None, infer=infer)


def memory_store(settings, ls: LocomoSet, embedder, *, progress: bool = False):
    """(the mem0 Memory holding every turn of ``ls``, opened with these ``memory.*`` settings; its folder;
    seconds spent building it, 0 when reused).

    With consolidation (``memory.infer``, :func:`adiyan.memory.resolve_infer`) each turn is added
    with ``infer=True``: mem0 stores the facts the LLM extracts from it, each carrying the turn's
    ``dia_id``, in a store keyed by the LLM too; ``build.json`` records what was stored and the
    calls' cost (``consolidation``)."""
    infer = resolve_infer(settings)
    what = "mem0-infer-" + _sha(consolidation_identity(settings))[:8] if infer else "mem0"
    kdir = _store_dir(settings, ls, embedder, what)

    def build(kdir: Path) -> dict:
        mem = _open_memory_at(settings, kdir, embedder, infer)
        try:
            for t, conv in tqdm([(t, c) for c in ls.conversations for t in c.turns], desc="mem0 add",
                                unit="turn", disable=not progress, leave=False):
                mem.add(t.text, user_id=conv.user, created_at=t.at, role="user", infer=infer,
                        metadata={"dia_id": t.dia_id, "conversation": conv.id})
            stored = sum(mem.count(u) for u in sorted({c.user for c in ls.conversations}))
            stats = mem.consolidation_stats()
        finally:
            mem.close()
        return {"key": store_key(ls, embedder, what), "memories": len(ls.turns()), "infer": infer,
                "stored": stored, **({"consolidation": stats} if infer else {})}

    built_s = build_once(kdir, build)
    return _open_memory_at(settings, kdir, embedder), kdir, built_s


class CandidateMemory:
    """A :class:`Memory` whose conversation-memory searches are answered from one similarity
    search per (user, query) to ``depth``, ranked by the memory's own :meth:`Memory.rank` (so with its
    ``memory.search`` and recency settings, exactly as :meth:`Memory.search` ranks); a search needing
    more than ``depth`` candidates goes to mem0. Anything else is the memory's own. A write through the
    memory (an add or a delete) drops every kept candidate, and the cache file is no longer written: it
    holds the store as it was built."""

    def __init__(self, memory, depth: int = CANDIDATE_DEPTH, cache_file: Path | None = None):
        self.memory, self.depth, self.cache_file = memory, int(depth), cache_file
        self.searches = 0  # mem0 searches actually made
        self.search_s = 0.0
        self._cands: dict[str, list[Candidate]] = {}
        if getattr(memory, "writes", 0):  # the memory changed since it was opened: the file is of the store as built
            cache_file = None
        self.cache_file = cache_file
        if cache_file is not None and cache_file.is_file():
            raw = json.loads(cache_file.read_text(encoding="utf-8"))
            if raw.get("depth") == self.depth:
                self._cands = {k: [Candidate(**c) for c in v] for k, v in raw["candidates"].items()}
        self._loaded = len(self._cands)
        self._writes = getattr(memory, "writes", 0)

    def __getattr__(self, name):
        return getattr(self.memory, name)

    def candidates(self, query: str, user_id: str) -> list[Candidate]:
        writes = getattr(self.memory, "writes", 0)
        if writes != self._writes:  # the memory changed (an add, a delete): no candidate kept is current
            self._cands.clear()
            self._writes, self._loaded, self.cache_file = writes, 0, None  # nor is the file, of the store as built
        key = f"{user_id}\x00{query}"
        if key not in self._cands:
            t0 = time.perf_counter()
            self._cands[key] = self.memory.dense_candidates(query, user_id=user_id, kind="conversation",
                                                            depth=self.depth)
            self.search_s += time.perf_counter() - t0
            self.searches += 1
        return list(self._cands[key])

    def search(self, query: str, *, user_id: str, k: int | None = None, kind: str = "conversation",
               recency: bool | None = None, now=None) -> list[MemoryHit]:
        k = self.memory.default_k if k is None else int(k)
        use_recency = self.memory.recency if recency is None else bool(recency)
        wide = use_recency or self.memory.search_mode == "hybrid"
        fetch = overfetch_size(k, self.memory.overfetch_factor, self.memory.overfetch_min) if wide else k
        if kind != "conversation" or fetch > self.depth or k < 1:
            return self.memory.search(query, user_id=user_id, k=k, kind=kind, recency=recency, now=now)
        now_dt = parse_timestamp(now) if now is not None else datetime.now(timezone.utc)
        return self.memory.rank(query, self.candidates(query, user_id), user_id=user_id, kind=kind, k=k,
                                recency=use_recency, now=now_dt, depth=fetch)

    def save(self) -> None:
        if self.cache_file is None or len(self._cands) == self._loaded:
            return
        tmp = self.cache_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"depth": self.depth, "candidates": {
            k: [{"id": c.id, "text": c.text, "similarity": c.similarity, "created_at": c.created_at,
                 "metadata": c.metadata} for c in v] for k, v in self._cands.items()}}), encoding="utf-8")
        tmp.replace(self.cache_file)


def history_of(conv: Conversation) -> list[dict]:
    """The conversation as the history a question at its end sees: speaker A as "user", B as "assistant"."""
    a = conv.speakers[0]
    return [{"role": "user" if t.speaker == a else "assistant", "content": t.text, "at": t.at, "dia_id": t.dia_id}
            for t in conv.turns]


# ------------------------------------------------------------------------------- knowledge base


def turn_filename(conv: Conversation, dia_id: str) -> str:
    return f"{conv.id}/{dia_id.replace(':', '_')}.txt"


def knowledge_base(settings, ls: LocomoSet, embedder, *, progress: bool = False):
    """(the knowledge base holding every turn as a private document of its conversation's user,
    its folder, seconds spent building it, 0 when reused)."""
    kdir = _store_dir(settings, ls, embedder, "kb")
    kb_settings = settings.with_overrides({"store.engine": "edge"})

    def build(kdir: Path) -> dict:
        kb = open_kb(kb_settings, embedder=embedder, data_dir=kdir, progress=progress)
        try:
            items = [IngestItem(t.text.encode("utf-8"), turn_filename(c, t.dia_id), c.user, "private")
                     for c in ls.conversations for t in c.turns]
            res = kb.ingest_many(items, progress=progress)
            failed = [(it.filename, str(r)) for it, r in zip(items, res) if isinstance(r, IngestError)]
            if failed:
                raise IngestError(f"LoCoMo turns failed to ingest into {kdir}: {failed[:3]}")
            kb.finish_ingest()
        finally:
            kb.close()
        return {"key": store_key(ls, embedder, "kb"), "documents": len(items)}

    built_s = build_once(kdir, build)
    return open_kb(kb_settings, embedder=embedder, data_dir=kdir, progress=progress), kdir, built_s


def kb_retriever(settings, kb, entry_point: str, cache=None):
    return open_retriever(settings, kb, None, entry_point=entry_point, cache=cache)


def chunk_dia_id(chunk) -> str:
    """The dialog id of a KB chunk: its file name ``D<s>_<t>.txt`` back to ``D<s>:<t>``."""
    name = str(chunk.source).rsplit("/", 1)[-1]
    return name[: -len(".txt")].replace("_", ":", 1) if name.endswith(".txt") else name


def dedupe(ids) -> list[str]:
    """Ids in first-seen order (a long turn may be several chunks of one document)."""
    return list(dict.fromkeys(ids))
