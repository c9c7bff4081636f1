"""Conversation and coaching memory on mem0, configured from the adiyan settings.

Two kinds of memory, each its own collection: ``<prefix>conversation_memory`` and
``<prefix>coaching_memory``. Memories are scoped by ``user_id``: mem0 stores it in the payload
and every read filters on it inside the vector-store query, so a user never sees another
user's memories.

How mem0 (mem0ai 2.2.x) is wired, all offline:

* **Embedder** - the knowledge base's own embedder object (minilm, nomic-embed-text, ...),
  through a small ``EmbeddingBase`` adapter registered with mem0's ``EmbedderFactory`` as
  provider ``"adiyan"``. mem0's "add"/"update" embed as documents, "search" as queries, so
  models with task prefixes (nomic-embed-text) get the right one.
* **Vector store** - mem0's ``qdrant`` provider on a ``QdrantClient`` we open: local mode in
  ``<data_dir>/memory/qdrant`` (store.engine edge/local) or the Qdrant server at ``store.url``
  (store.engine server). One client serves both kinds (local mode locks its folder). The
  collection records the embedder that built it (Qdrant collection metadata), and opening it
  with another embedder raises :class:`adiyan.store.EmbedderMismatchError`.
* **LLM** - mem0 builds an LLM at construction even when it never calls it (its default
  provider, OpenAI, fails without a key). An ``LLMBase`` adapter over an adiyan LLM is
  registered as provider ``"adiyan"``; the LLM itself is loaded only when consolidation
  (``infer=True``) is on. With ``infer=False`` (the default unless the LLM is capable, see
  :func:`resolve_infer`) mem0 stores each message verbatim and nothing calls an LLM.
* **Consolidation** (``infer=True``, ``memory.infer``): mem0's extraction call goes through
  :class:`adiyan.models.consolidation.Consolidator`: held to mem0's output schema by the backend's
  own mechanism, validated, counted (``Memory.consolidation_stats()``), cached, and dated by the
  statement's ``created_at`` instead of today (that module's docstring says why).
* **Timestamps** - mem0 keeps ``created_at`` from the metadata when given, so replayed
  conversations carry their original times (stored as UTC ISO-8601).
* **Scores** - mem0 2.x ranks by a hybrid of semantic, BM25 (needs fastembed) and entity
  boosts (needs spaCy); neither is installed, so its score is the cosine similarity. The
  similarity reported here is mem0's ``semantic_score`` (``explain=True``) either way.
* **Telemetry** off (``MEM0_TELEMETRY=False`` before mem0 is imported); mem0's home
  (``MEM0_DIR``, where it writes an anonymous id) is ``<cache_dir>/mem0`` unless already set.

Search over-fetches ``max(factor * k, min)`` candidates from mem0 (joined in hybrid search,
``memory.search``, by as many from BM25 over the user's own memories) and ranks them with
:func:`adiyan.retrieval.memory_rank.rank_memories`: the signals fused, then the recency weight
0.5 ** (days / half_life) applied to every memory by its age (``memory.recency_scope=all``, the seed)
or only to a memory a newer candidate supersedes, by the gap (``superseded``, the default); with
recency off and dense search it returns the top k by similarity.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from .cache import CallCache, embedder_identity, forget_texts
from .cache import call_cache as make_call_cache
from .models import embedder_from_settings, extra_embedders_from_settings, llm_from_settings
from .models.base import ModelError
from .models.consolidation import (  # noqa: F401 - re-exported: the memory's consolidation names
    CONSOLIDATION_MAX_TOKENS, MEM0_FACTS_SCHEMA, MIN_CONSOLIDATION_CONTEXT, ConsolidationStats, Consolidator,
    consolidation_capable, consolidation_identity, resolve_infer,
)
from .retrieval.bm25 import BM25Retriever
from .retrieval.memory_rank import Candidate, check_signal_weights, rank_memories, with_lexical
from .retrieval.question_dates import asks_about_past, inside, question_window
from .retrieval.recency import overfetch_size, parse_timestamp, to_utc_iso
from .memory_mem0 import PROVIDER, import_mem0, mem0_session_scope  # noqa: F401 - mem0_session_scope re-exported
from .store.base import CollectionMeta, EmbedderMismatchError, StoreError

KINDS = ("conversation", "coaching")
ROLES = ("user", "assistant")
DEFAULT_TOP_K = 5
_LIST_LIMIT = 100_000
_DENSE_KEPT = 256  # similarity searches kept (local mode, until the next write)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MemoryHit:
    text: str
    similarity: float  # cosine similarity of query and memory (mem0's semantic score)
    weight: float  # recency weight 0.5 ** (days / half_life) (age, or gap to a superseder); 1.0 when not decayed
    score: float  # fused score (cosine, or hybrid with BM25) * weight: what the hits are ordered by
    created_at: str  # UTC ISO-8601
    id: str
    age_days: float = 0.0
    kind: str = "conversation"
    metadata: dict = field(default_factory=dict, compare=False)
    lexical: float = 0.0  # hybrid search: BM25 / the best BM25 among the user's memories (0 in dense search)
    superseded_by: str | None = None  # recency_scope=superseded: the newer memory that decayed this one
    date_match: bool = False  # memory.question_dates: said inside the query's date window (ranked above the rest)

    def as_dict(self) -> dict:
        return {"id": self.id, "text": self.text, "similarity": round(self.similarity, 6),
                "weight": round(self.weight, 6), "score": round(self.score, 6), "created_at": self.created_at,
                "age_days": round(self.age_days, 3), "kind": self.kind, "metadata": self.metadata,
                **({"lexical": round(self.lexical, 6)} if self.lexical else {}),
                **({"superseded_by": self.superseded_by} if self.superseded_by else {})}


@dataclass(frozen=True)
class MemoryRecord:
    id: str
    text: str
    created_at: str
    kind: str
    role: str | None = None
    metadata: dict = field(default_factory=dict, compare=False)


def check_user_id(user_id) -> str:
    """A memory user id as given: a non-empty string without whitespace. mem0 trims ids, so "alice " and
    "alice" would be one user (refused instead of merged), and refuses whitespace inside one."""
    if not isinstance(user_id, str) or not user_id.strip():
        raise ValueError(f"memory user id must be a non-empty string, got {user_id!r}")
    if any(c.isspace() for c in user_id):
        raise ValueError(f"memory user id {user_id!r} contains whitespace: mem0 refuses it inside an id and trims it "
                         f"around one (\"alice \" would share \"alice\"'s memories)")
    return user_id


def _unit(rows) -> np.ndarray:
    v = np.asarray(rows, dtype=np.float32)
    n = np.linalg.norm(v, axis=1, keepdims=True)
    return v / np.where(n == 0, 1.0, n)


# -- the memory ------------------------------------------------------------------------------

class Memory:
    """Conversation and coaching memory for many users, on mem0.

    Build it with :meth:`from_settings`; ``close()`` (or a ``with`` block) releases the store.
    """

    def __init__(self, embedder, *, path: str | os.PathLike | None = None, url: str | None = None,
                 api_key: str | None = None, history_dir: str | os.PathLike, collection_prefix: str = "adiyan_",
                 llm: Any = None, infer: bool = False, half_life_days: float = 14.0, overfetch_factor: int = 3, default_k: int = DEFAULT_TOP_K,
                 overfetch_min: int = 10, recency: bool = True, mem0_home: str | os.PathLike = ".cache/adiyan/mem0",
                 call_cache: CallCache | None = None, search: str = "hybrid", lexical_weight: float = 0.5,
                 recency_scope: str = "superseded", supersede_min_similarity: float = 0.8,
                 supersede_cue_min_similarity: float | None = 0.7, extra_embedders: dict | None = None,
                 signal_weights: dict[str, float] | None = None, question_dates: bool = False,
                 past_tense_history: bool = False):
        """``path`` (local Qdrant folder) or ``url`` (Qdrant server); ``llm`` an adiyan LLM or a
        zero-argument loader, used only when ``infer`` is on; ``call_cache`` keeps its schema-valid
        consolidation replies by prompt hash; ``extra_embedders`` ({name: embedder}) add their cosines to
        hybrid search, fused by ``signal_weights`` (:func:`adiyan.retrieval.memory_rank.fuse`)."""
        if (path is None) == (url is None):
            raise ValueError("Memory needs exactly one of path= (local Qdrant) or url= (Qdrant server)")
        if infer and llm is None:
            raise ValueError("infer=True (mem0 consolidation) needs an LLM")
        self.embedder = embedder
        self.half_life_days = float(half_life_days)
        self.default_k = int(default_k)
        self.overfetch_factor = int(overfetch_factor)
        self.overfetch_min = int(overfetch_min)
        self.recency = bool(recency)
        self.search_mode = str(search)
        self.lexical_weight = float(lexical_weight)
        self.recency_scope = str(recency_scope)
        self.supersede_min_similarity = float(supersede_min_similarity)
        self.supersede_cue_min_similarity = (None if supersede_cue_min_similarity is None
                                             else float(supersede_cue_min_similarity))
        self.extra_embedders = dict(extra_embedders or {})
        self.question_dates = bool(question_dates)  # dates in a query rank memories of that time first
        self.past_tense_history = bool(past_tense_history)  # a past-tense query: no supersession
        self.signal_weights = check_signal_weights(signal_weights, list(self.extra_embedders), self.search_mode)
        self._lexical_index: dict[tuple[str, str], tuple[int, Any, dict]] = {}  # (user, kind) -> (writes, BM25, records)
        self._writes = 0  # adds and deletes through this object: a lexical index older than the last is rebuilt
        self._dense_kept: OrderedDict[tuple, tuple[int, list[Candidate]]] = OrderedDict()  # local mode
        self.infer = bool(infer)
        self.has_llm = llm is not None
        self.collection_prefix = collection_prefix
        self.where = url or str(path)
        self._consolidator = Consolidator(call_cache)
        mem0 = import_mem0(Path(mem0_home))
        from mem0.configs.base import MemoryConfig as Mem0Config  # heavy: mem0, after import_mem0
        from mem0.embeddings.configs import EmbedderConfig as Mem0EmbedderConfig  # heavy: mem0
        from mem0.llms.configs import LlmConfig as Mem0LlmConfig  # heavy: mem0
        from mem0.vector_stores.configs import VectorStoreConfig  # heavy: mem0
        from qdrant_client import QdrantClient  # heavy: the Qdrant client loads only with a Memory

        history_dir = Path(history_dir)
        history_dir.mkdir(parents=True, exist_ok=True)
        if url:
            self.client = QdrantClient(url=url, api_key=api_key, timeout=60)
            self.engine = "server"
        else:
            Path(path).mkdir(parents=True, exist_ok=True)
            try:
                self.client = QdrantClient(path=str(path))
            except RuntimeError as exc:  # local mode allows one client per folder
                raise StoreError(f"memory store {path} is in use by another Memory or process: {exc}") from exc
            self.engine = "local"
        self._mems: dict[str, Any] = {}
        try:
            for kind in KINDS:
                name = self.collection(kind)
                self._check_model(name)
                cfg = Mem0Config(
                    vector_store=VectorStoreConfig(provider="qdrant", config={
                        "collection_name": name, "embedding_model_dims": embedder.dim, "client": self.client}),
                    # mem0's config classes accept only their built-in provider names: the adiyan
                    # providers are registered with the factories and passed unvalidated.
                    embedder=Mem0EmbedderConfig.model_construct(
                        provider=PROVIDER, config={"model": embedder, "embedding_dims": embedder.dim}),
                    llm=Mem0LlmConfig.model_construct(provider=PROVIDER, config={"model": llm}),
                    history_db_path=str(history_dir / f"{name}.history.db"),
                )
                with warnings.catch_warnings():
                    # mem0 treats a passed client as a server and creates payload indexes,
                    # which local mode ignores with a warning.
                    warnings.filterwarnings("ignore", message="Payload indexes have no effect in the local Qdrant")
                    self._mems[kind] = mem0.Memory(cfg)
                adapter = self._mems[kind].llm
                if hasattr(adapter, "consolidator"):  # our AdiyanLLM: one consolidator for every kind
                    adapter.consolidator = self._consolidator
                self._stamp_model(name)
        except BaseException:
            self.close()
            raise

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def from_settings(cls, settings, embedder=None, llm=None, *, infer: bool | None = None) -> "Memory":
        """Memory as the settings describe it: the KB's embedder, the data dir or Qdrant server,
        consolidation with the configured LLM when it is capable (or when ``infer`` says so)."""
        if embedder is None:
            embedder = embedder_from_settings(settings)
        mc = settings.memory
        explicit = getattr(mc, "infer", None) is True
        infer = resolve_infer(settings, llm, infer)
        window = getattr(llm, "context_size", None) if llm is not None else settings.llm.context_size
        # a model that cannot write at all first, then one whose window cannot hold mem0's prompt
        if infer and (getattr(llm, "generative", True) is False or (llm is None and settings.llm.name == "extractive"
                                                                     and not settings.llm.url)):
            raise ValueError("memory.infer=true (mem0 consolidation) needs a generative LLM and llm.name=extractive "
                             "only quotes passages; set llm.name to a server model (llm.url) or memory.infer=false")
        if infer and explicit and window is not None and window < MIN_CONSOLIDATION_CONTEXT:
            raise ValueError(f"memory.infer=true: mem0's extraction prompt is ~8.6k tokens, so consolidation needs "
                             f"llm.context_size >= {MIN_CONSOLIDATION_CONTEXT}; the LLM's window is {window} "
                             f"(serve the model with a larger context and set llm.context_size, or memory.infer=false)")
        llm_source = llm if llm is not None else (lambda: llm_from_settings(settings))
        data_dir = Path(settings.paths.data_dir)
        sc = settings.store
        if sc.engine == "server":
            if not sc.url:
                raise StoreError("store.engine=server needs store.url (e.g. ADIYAN_STORE__URL=http://localhost:6333)")
            where = {"url": sc.url, "api_key": os.environ.get(sc.api_key_env)}
        else:  # edge and local: mem0 has no qdrant-edge provider; Qdrant's local mode in the data dir
            where = {"path": data_dir / "memory" / "qdrant"}
        # A given LLM stays available for add(..., infer=True); the configured one is loaded
        # only when consolidation is on.
        llm_arg = llm_source if (infer or llm is not None) else None
        return cls(embedder, **where, history_dir=data_dir / "memory", collection_prefix=sc.collection_prefix,
                   llm=llm_arg, infer=bool(infer), half_life_days=mc.half_life_days, default_k=mc.top_k,
                   overfetch_factor=mc.overfetch_factor, overfetch_min=mc.overfetch_min, recency=mc.recency,
                   search=mc.search, lexical_weight=mc.lexical_weight, recency_scope=mc.recency_scope,
                   supersede_min_similarity=mc.supersede_min_similarity,
                   supersede_cue_min_similarity=mc.supersede_cue_min_similarity,
                   extra_embedders=extra_embedders_from_settings(settings, mc.extra_embedders, progress=False),
                   signal_weights=mc.signal_weights, question_dates=mc.question_dates,
                   past_tense_history=mc.past_tense_history, mem0_home=Path(settings.paths.cache_dir) / "mem0",
                   call_cache=make_call_cache(settings, "mem0") if infer else None)

    def collection(self, kind: str) -> str:
        if kind not in KINDS:
            raise ValueError(f"unknown memory kind {kind!r}; choose one of: {', '.join(KINDS)}")
        return f"{self.collection_prefix}{kind}_memory"

    def _mem(self, kind: str):
        self.collection(kind)
        return self._mems[kind]

    # -- the same-model rule -----------------------------------------------------------------
    def _check_model(self, name: str) -> None:
        if not self.client.collection_exists(name):
            return
        info = self.client.get_collection(name)
        md = (info.config.metadata or {}).get("adiyan")
        if md is None:
            if self.client.count(name, exact=True).count == 0:
                return  # created but never stamped (e.g. interrupted): adopted below
            raise StoreError(f"memory collection {name!r} at {self.where} was not created by adiyan "
                             f"(no embedder recorded); use another data directory or collection prefix")
        # Compared here rather than with CollectionMeta.check: mem0 owns this collection's layout,
        # so the KB store's layout version does not apply.
        meta = CollectionMeta.from_dict(md)
        emb = self.embedder
        if (meta.embedder_id, meta.dim, meta.normalized) != (embedder_identity(emb), emb.dim, emb.normalized):
            raise EmbedderMismatchError(
                f"memory collection {name!r} at {self.where} was built with embedder {meta.embedder_id!r} "
                f"(dim {meta.dim}, normalized={meta.normalized}) but is being used with {embedder_identity(emb)!r} "
                f"(dim {emb.dim}, normalized={emb.normalized}). Vectors from different models are not "
                f"comparable: use another data directory or collection prefix, or switch the embedder back.")

    def _stamp_model(self, name: str) -> None:
        info = self.client.get_collection(name)
        if (info.config.metadata or {}).get("adiyan"):
            return
        meta = CollectionMeta(name, self.embedder.dim, embedder_identity(self.embedder), self.embedder.normalized,
                              extra={"engine": self.engine, "backend": "mem0"})
        self.client.update_collection(name, metadata={"adiyan": meta.to_dict()})

    # -- write -----------------------------------------------------------------------------
    def add(self, text: str, *, user_id: str, kind: str = "conversation", created_at: str | datetime | None = None,
            metadata: dict | None = None, role: str = "user", infer: bool | None = None) -> str | None:
        """Remember ``text`` for ``user_id``; returns the memory id.

        ``created_at`` (timezone-aware; default now) dates the statement, e.g. when replaying an
        old conversation. With consolidation on, mem0 stores the facts an LLM extracts instead
        of the text: the id is the first stored fact's, or None when nothing was extracted.
        """
        check_user_id(user_id)
        if not isinstance(text, str) or not text.strip():
            raise ValueError("memory text must be a non-empty string")
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {role!r}")
        meta = dict(metadata or {})
        if "created_at" in meta:
            raise ValueError("pass the time as created_at=, not in metadata")
        meta["created_at"] = to_utc_iso(created_at if created_at is not None else datetime.now(timezone.utc))
        use_infer = self.infer if infer is None else bool(infer)
        if use_infer and not self.has_llm:
            raise ValueError("infer=True (mem0 consolidation) needs an LLM; this Memory has none")
        from mem0.exceptions import LLMError  # heavy: mem0 (already loaded by the constructor)

        self._consolidator.observation_date = meta["created_at"][:10]
        try:
            out = self._mem(kind).add([{"role": role, "content": text}], user_id=user_id, metadata=meta,
                                      infer=use_infer)
        except LLMError as exc:
            raise ModelError(f"memory consolidation (infer=True) failed: {exc}") from exc
        finally:
            self._consolidator.observation_date = None
            self._writes += 1  # after the write, even a failed one: the next search re-reads the user's memories
        results = out.get("results", []) if isinstance(out, dict) else out
        for emb in self.extra_embedders.values():  # each extra signal's vector of what was stored, cached now
            stored = [r.get("memory") for r in results if r.get("memory")] if use_infer else [text]
            if stored:
                emb.embed(stored, "document")
        return results[0]["id"] if results else None

    # -- read ------------------------------------------------------------------------------
    def search(self, query: str, *, user_id: str, k: int | None = None, kind: str = "conversation",
               recency: bool | None = None, now: str | datetime | None = None) -> list[MemoryHit]:
        """The ``k`` memories of ``user_id`` best matching ``query``, best first.

        Candidates: max(factor*k, min) by similarity from mem0 (``memory.search=dense``), joined in
        hybrid search by as many by BM25 over the user's memories; with recency off and dense search,
        the top k by similarity. They are scored and ordered by
        :func:`adiyan.retrieval.memory_rank.rank_memories` (the signals fused, then the recency weight
        of ``memory.recency_scope``: every memory by its age, or only a superseded one by its gap).
        """
        check_user_id(user_id)
        k = self.default_k if k is None else int(k)
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        use_recency = self.recency if recency is None else bool(recency)
        now_dt = parse_timestamp(now) if now is not None else datetime.now(timezone.utc)
        wide = use_recency or self.search_mode == "hybrid"
        fetch = overfetch_size(k, self.overfetch_factor, self.overfetch_min) if wide else k
        dense = self.dense_candidates(query, user_id=user_id, kind=kind, depth=fetch)
        return self.rank(query, dense, user_id=user_id, kind=kind, k=k, recency=use_recency, now=now_dt, depth=fetch)

    def dense_candidates(self, query: str, *, user_id: str, kind: str, depth: int) -> list[Candidate]:
        """The ``depth`` memories of ``user_id`` most similar to ``query`` (mem0's cosine), best first.

        In local mode (one process holds the folder) the last searches are kept, per (kind, user, query),
        until this memory next writes: Qdrant's local mode checks the user filter against every payload in
        Python (~0.1 s at 5,000 memories), and one turn searches the same message from the context, the
        agent's tool and the conversation. (Per depth: mem0 cuts its own top before the order here.)"""
        check_user_id(user_id)
        key = (kind, user_id, query, int(depth))
        held = None if self.engine == "server" else self._dense_kept.get(key)
        if held is not None and held[0] == self._writes:
            self._dense_kept.move_to_end(key)
            return [replace(c, metadata=dict(c.metadata), signals=dict(c.signals)) for c in held[1]]
        cands = self._dense_search(query, user_id=user_id, kind=kind, depth=depth)
        if self.engine != "server":
            self._dense_kept[key] = (self._writes, cands)
            while len(self._dense_kept) > _DENSE_KEPT:
                self._dense_kept.popitem(last=False)
        return [replace(c, metadata=dict(c.metadata), signals=dict(c.signals)) for c in cands]

    def _dense_search(self, query: str, *, user_id: str, kind: str, depth: int) -> list[Candidate]:
        out = self._mem(kind).search(query, top_k=depth, filters={"user_id": user_id}, threshold=0.0,
                                     explain=True)
        cands = []
        for r in out.get("results", []):
            details = r.get("score_details") or {}
            sim = float(details.get("semantic_score", r.get("score") or 0.0))
            created = r.get("created_at")
            if not created:
                raise StoreError(f"memory {r.get('id')} in {self.collection(kind)!r} has no created_at")
            cands.append(Candidate(str(r["id"]), r.get("memory", ""), sim, to_utc_iso(created),
                                   dict(r.get("metadata") or {})))
        # mem0 orders by its hybrid score; the plain order here is by similarity alone (stable).
        cands.sort(key=lambda c: c.similarity, reverse=True)
        return cands

    def lexical_scores(self, query: str, user_id: str, kind: str = "conversation") -> tuple[dict[str, float], dict]:
        """({memory id: BM25 score > 0} over every memory of ``user_id`` of this kind, {id: MemoryRecord}).
        In local mode (one process holds the folder) the BM25 index is built once per (user, kind) and rebuilt
        after this memory writes; on a Qdrant server, which other processes may write to (a delete and an add,
        or an edit, keep the count), it is built from the user's memories at every search."""
        check_user_id(user_id)
        n = self._writes
        held = None if self.engine == "server" else self._lexical_index.get((user_id, kind))
        if held is None or held[0] != n:
            recs = self.all(user_id, kind)
            bm = BM25Retriever().index([r.id for r in recs], [r.text for r in recs]) if recs else None
            held = (n, bm, {r.id: r for r in recs})
            self._lexical_index[(user_id, kind)] = held
        _, bm, recs = held
        if bm is None:
            return {}, recs
        s = bm.scores(query)
        return {bm.ids[i]: float(s[i]) for i in np.flatnonzero(s > 0)}, recs

    def _unit_vectors(self, texts: list[str], task: str) -> np.ndarray:
        return _unit(self.embedder.embed(list(texts), task))

    def _with_signals(self, query: str, cands: list[Candidate]) -> list[Candidate]:
        """``cands`` with each extra embedder's cosine of query and memory text in ``signals``."""
        if not self.extra_embedders or not cands:
            return cands
        sims = {}
        for name, emb in self.extra_embedders.items():
            q = _unit(emb.embed([query], "query"))[0]
            sims[name] = _unit(emb.embed([c.text for c in cands], "document")) @ q
        return [replace(c, signals={**c.signals, **{n: float(v[i]) for n, v in sims.items()}})
                for i, c in enumerate(cands)]

    def rank(self, query: str, dense: list[Candidate], *, user_id: str, kind: str, k: int, recency: bool,
             now: datetime, depth: int) -> list[MemoryHit]:
        """The top ``k`` hits from ``dense`` (the similarity candidates, best first): joined in hybrid search
        by the ``depth`` best BM25 matches, then ranked by :func:`rank_memories` with this memory's settings."""
        cands = list(dense[:depth])
        have = {c.id for c in cands}
        scores, recs = self.lexical_scores(query, user_id, kind) if self.search_mode == "hybrid" else ({}, None)
        extra = [recs[i] for i in sorted(scores, key=lambda i: (-scores[i], i))[:depth] if i not in have]
        window, dated = question_window(query) if self.question_dates else None, []
        if window is not None:  # the memories of the asked-about time compete too: the depth closest to the query
            pool = recs.values() if recs is not None else self.all(user_id, kind)
            have |= {r.id for r in extra}
            dated = [r for r in pool if r.id not in have and inside(window, parse_timestamp(r.created_at))]
        if extra or dated:
            q = self._unit_vectors([query], "query")[0]
            sims = self._unit_vectors([r.text for r in extra + dated], "document") @ q
            found = [Candidate(r.id, r.text, float(v), r.created_at, dict(r.metadata))
                     for r, v in zip(extra + dated, sims)]
            cands += found[:len(extra)] + sorted(found[len(extra):], key=lambda c: (-c.similarity, c.id))[:depth]
        if self.search_mode == "hybrid":
            cands = with_lexical(cands, scores)
            cands = self._with_signals(query, cands)
        if recency and self.past_tense_history and self.recency_scope != "all" and asks_about_past(query):
            recency = False  # the question asks about then: a later correction does not supersede
        vectors = None
        if recency and self.recency_scope in ("superseded", "below_superseder") and len(cands) > 1:
            vectors = self._unit_vectors([c.text for c in cands], "document")
        ranked = rank_memories(cands, now=now, k=k, search=self.search_mode, lexical_weight=self.lexical_weight,
                               recency=recency, scope=self.recency_scope, half_life_days=self.half_life_days,
                               vectors=vectors, supersede_min_similarity=self.supersede_min_similarity,
                               supersede_cue_min_similarity=self.supersede_cue_min_similarity,
                               signal_weights=self.signal_weights, date_window=window)
        return [MemoryHit(text=r.candidate.text, similarity=r.candidate.similarity, weight=r.weight, score=r.score,
                          created_at=r.candidate.created_at, id=r.candidate.id, age_days=r.age_days, kind=kind,
                          metadata=dict(r.candidate.metadata), lexical=r.candidate.lexical,
                          superseded_by=r.superseded_by, date_match=r.date_match)
                for r in ranked]

    def all(self, user_id: str, kind: str = "conversation") -> list[MemoryRecord]:
        """Every memory of ``user_id`` of this kind, oldest first."""
        check_user_id(user_id)
        out = self._mem(kind).get_all(filters={"user_id": user_id}, top_k=_LIST_LIMIT, show_expired=True)
        recs = [MemoryRecord(id=str(r["id"]), text=r.get("memory", ""), created_at=to_utc_iso(r["created_at"]),
                             kind=kind, role=r.get("role"), metadata=dict(r.get("metadata") or {}))
                for r in out.get("results", [])]
        recs.sort(key=lambda m: (parse_timestamp(m.created_at), m.id))
        return recs

    # -- forget ----------------------------------------------------------------------------
    def delete(self, memory_id: str, *, user_id: str, kind: str = "conversation") -> bool:
        """Forget one memory of ``user_id``. False when this user has no memory of that id: another
        user's memory is neither deleted nor revealed to exist."""
        return self._forget(kind, user_id, [r for r in self.all(user_id, kind) if r.id == str(memory_id)]) == 1

    def delete_conversation(self, user_id: str, conversation_id: str, kind: str = "conversation") -> int:
        """Forget every memory ``user_id`` stated in conversation ``conversation_id`` (their ``conversation``
        metadata, as :class:`adiyan.context.Conversation` writes it); returns how many there were."""
        return self._forget(kind, user_id, [r for r in self.all(user_id, kind)
                                            if r.metadata.get("conversation") == conversation_id])

    def delete_all(self, user_id: str, kind: str = "conversation") -> int:
        """Forget every memory of ``user_id`` of this kind; returns how many there were."""
        n = 0
        while True:  # a listing is capped (_LIST_LIMIT): until none is left
            recs = self.all(user_id, kind)
            if not recs:
                return n
            n += self._forget(kind, user_id, recs, whole_user=True)

    def _forget(self, kind: str, user_id: str, recs: list[MemoryRecord], whole_user: bool = False) -> int:
        """Delete ``recs`` (memories of ``user_id``) from the store and from every copy of their text this
        memory keeps: mem0's history database (the ADD row's new value and the DELETE row's old value), the
        user's recent messages mem0 keeps for consolidation (all of them when the whole user goes; with
        ``memory.infer`` a single memory's source message is not known, see docs/memory_safety.md), the
        embedding cache's rows and keys under every embedder of this memory and every task prefix (the
        vector of a text can be inverted, its key confirms a guessed text) and the BM25 index (rebuilt).
        Only what was deleted is purged: a failure part way purges the memories deleted before it."""
        if not recs:
            return 0
        mem = self._mem(kind)
        done: list[MemoryRecord] = []
        try:
            for r in recs:
                mem.delete(r.id)
                done.append(r)
        finally:
            self._writes += 1
            if done:
                self._purge_copies(kind, user_id, done, whole_user=whole_user and len(done) == len(recs))
        return len(done)

    def _purge_copies(self, kind: str, user_id: str, recs: list[MemoryRecord], whole_user: bool = False) -> None:
        ids, texts = [r.id for r in recs], list(dict.fromkeys(r.text for r in recs))
        db = self._mem(kind).db  # mem0's SQLiteManager: its connection and lock
        scope = mem0_session_scope(user_id)
        with db._lock, db.connection:
            for i in range(0, len(ids), 500):
                part = ids[i : i + 500]
                db.connection.execute(f"DELETE FROM history WHERE memory_id IN ({','.join('?' * len(part))})", part)
            if whole_user:
                db.connection.execute("DELETE FROM messages WHERE session_scope = ?", [scope])
            for i in range(0, len(texts), 500):
                part = texts[i : i + 500]
                db.connection.execute(f"DELETE FROM messages WHERE session_scope = ? AND content IN "
                                      f"({','.join('?' * len(part))})", [scope, *part])
        forget_texts(self.embedders(), texts)

    @property
    def writes(self) -> int:
        """Adds and deletes made through this object: anything kept from a search is current only while this is unchanged."""
        return self._writes

    def drop_lexical_index(self) -> None:
        """Forget every BM25 index held: the next lexical search rebuilds it from the store."""
        self._lexical_index.clear()

    def embedders(self) -> list:
        """Every embedder this memory computes vectors with: its own, then ``memory.extra_embedders``."""
        return [self.embedder, *self.extra_embedders.values()]

    def count(self, user_id: str, kind: str = "conversation") -> int:
        return len(self.all(user_id, kind))

    def consolidation_stats(self) -> dict:
        """The consolidation calls so far (:class:`ConsolidationStats`), with the LLM's structured
        mechanism; all zero when nothing consolidated."""
        return self._consolidator.stats.as_dict()

    # -- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        for m in getattr(self, "_mems", {}).values():
            try:
                m.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
        self._mems = {}
        client = getattr(self, "client", None)
        if client is not None:
            client.close()
            self.client = None

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
