"""The retrieval pipeline: the one way anything in the workbench retrieves.

``Retriever.from_settings(settings, kb, llm=None)`` builds it from the ``retrieval`` section
(and the per-query engine knobs of ``store``), and every entry point calls it: ``invoke eval``
and the evaluation harness, every experiment and notebook, the agent's tools, ``adiyan search``
and ``adiyan ask``, and the SciFact benchmark's product path. The steps, in order:

1. **query transformation** (``retrieval.query_transform``: none | split | hyde, or
   history_rules | history_llm for entry points that pass a conversation's history and say so
   with ``supports_history=True``; every other entry point refuses them by name), see
   :mod:`adiyan.retrieval.transform`;
2. **engine search** of each transformed query (``retrieval.mode``: dense | bm25 | hybrid),
   always under the requester's access filter (``KnowledgeBase.search``). Hybrid asks the
   engine for each signal's list (dense, BM25, any extra) and fuses them client-side
   (fusion.py): by reciprocal rank (``retrieval.rrf_k``, the default) or by score
   (``retrieval.fusion``: dbsf | convex | weighted), ties settled by chunk key, never by the
   engine's point ids (which hash the chunking configuration: a new chunking option once moved
   SciFact's hybrid nDCG@10 0.7121 -> 0.7184 through tie order alone). Several queries of one
   question are fused by reciprocal rank too, and dense may use pseudo-relevance feedback
   (``retrieval.prf_docs``);
3. **score floor** on dense cosine scores (the embedder's floor; bm25 and hybrid scores are
   not similarities, so no floor applies to them and the result says so);
4. **re-rank** (``retrieval.rerank``) the candidate pool by the ``retrieval.rerank_model``
   bi-encoder;
5. **cut**: the ranking is kept ``retrieval.rank_depth`` deep (at least k) for measurement and
   its first k chunks are the result (``kb_top_k``, or ``doc_top_k`` within one document).

The candidate pool is ``max(k, rank_depth)``, times ``rerank_overfetch`` when re-ranking, for
every caller alike: what a person sees from ``adiyan search`` is what ``invoke eval`` measured.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable

from ..cache import CallCache, call_cache
from ..config import RetrievalConfig
from ..kb.policy import visible_to
from ..models import llm_from_settings
from ..types import OWNER, Requester, RetrievalResult, RetrievedChunk
from .floor import resolve_floor
from .fusion import convex, dbsf, rocchio, rrf, weighted
from .rm3 import expand as rm3_expand
from .rerank import BiEncoderReranker
from .transform import HISTORY_MODES, transform_query


class UnsupportedSetting(ValueError):
    """An entry point was asked for a setting it cannot honour; the message names both."""

    def __init__(self, setting: str, entry_point: str, why: str = ""):
        self.setting, self.entry_point = setting, entry_point
        super().__init__(f"{setting} is not honoured by {entry_point}" + (f": {why}" if why else "")
                         + "; remove the setting or use an entry point that honours it")


class InertSetting(UnsupportedSetting):
    """A setting changed from its default that has nothing to act on in this configuration; the
    message names it, the configuration it met and what would make it act."""

    def __init__(self, setting: str, entry_point: str, needs: str, here: str):
        self.setting, self.entry_point, self.needs = setting, entry_point, needs
        ValueError.__init__(self, f"{setting} has nothing to act on in {entry_point}: it acts only with {needs} "
                                  f"(here {here}); set that, or remove the setting")


@dataclass(frozen=True)
class ActsWhen:
    """When a retrieval setting has something to act on: ``test(config)``, stated as ``needs``
    (what would make it act) over the fields ``deps`` (shown in the refusal)."""

    test: Callable[[RetrievalConfig], bool]
    needs: str
    deps: tuple[str, ...]


_HYBRID = ActsWhen(lambda rc: rc.mode == "hybrid", "retrieval.mode=hybrid", ("mode",))
_CONVEX = ActsWhen(lambda rc: rc.mode == "hybrid" and rc.fusion == "convex",
                   "retrieval.mode=hybrid and retrieval.fusion=convex", ("mode", "fusion"))
_WEIGHTED = ActsWhen(lambda rc: rc.mode == "hybrid" and rc.fusion == "weighted",
                     "retrieval.mode=hybrid and retrieval.fusion=weighted", ("mode", "fusion"))
_NORMED = ActsWhen(lambda rc: rc.mode == "hybrid" and rc.fusion in ("convex", "weighted"),
                   "retrieval.mode=hybrid and retrieval.fusion=convex or weighted", ("mode", "fusion"))
_RM3 = ActsWhen(lambda rc: rc.mode != "dense" and rc.rm3_docs > 0,
                "retrieval.rm3_docs > 0 and retrieval.mode=bm25 or hybrid", ("mode", "rm3_docs"))
_RERANK = ActsWhen(lambda rc: rc.rerank, "retrieval.rerank=true", ("rerank",))

# THE declaration of which retrieval settings act under which configuration: every RetrievalConfig
# field, either with the condition under which it has something to act on (ActsWhen), or with the
# place it always acts (a string). A field changed from its default whose condition is false is
# refused by name (refuse_inert): Retriever refuses it when it is built, so every entry point does,
# and the question-set entry points before anything runs. describe() reports an inert setting as
# None. tests/test_entry_points.py checks this table against RetrievalConfig.model_fields.
ACTS_WHEN: dict[str, ActsWhen | str] = {
    "kb_top_k": "every knowledge-base search (retrieve_knowledge_base)",
    "rank_depth": "every search: the kept ranking and the candidate pool",
    "doc_top_k": "every search within one document (search_within_document)",
    # the floor acts on dense chunk scores, and on book-page search, which is dense in every mode
    "score_floors": "dense chunk search and book-page search (dense in every mode)",
    "default_floor": "dense chunk search and book-page search (dense in every mode)",
    "use_calibrated_floors": "dense chunk search and book-page search (dense in every mode)",
    "floor_min_j": "dense chunk search and book-page search (dense in every mode)",
    "mode": "every search",
    # RRF fuses hybrid's lists (client-side), and the several queries of a split question
    "rrf_k": ActsWhen(lambda rc: (rc.mode == "hybrid" and rc.fusion == "rrf") or rc.query_transform == "split",
                      "retrieval.mode=hybrid and retrieval.fusion=rrf, or retrieval.query_transform=split",
                      ("mode", "fusion", "query_transform")),
    "hybrid_prefetch": _HYBRID,
    "fusion": _HYBRID,
    "fusion_weight": _CONVEX,
    "fusion_norm": _NORMED,
    "fusion_weights": _WEIGHTED,
    "prf_docs": ActsWhen(lambda rc: rc.mode != "bm25", "retrieval.mode=dense or hybrid (a query vector to move)",
                         ("mode",)),
    "prf_weight": ActsWhen(lambda rc: rc.mode != "bm25" and rc.prf_docs > 0,
                           "retrieval.prf_docs > 0 and retrieval.mode=dense or hybrid", ("mode", "prf_docs")),
    "rm3_docs": ActsWhen(lambda rc: rc.mode != "dense", "retrieval.mode=bm25 or hybrid (a BM25 query to expand)",
                         ("mode",)),
    "rm3_terms": _RM3,
    "rm3_weight": _RM3,
    "rerank": "every search",
    "rerank_model": _RERANK,
    "rerank_overfetch": _RERANK,
    "query_transform": "every search (the history transforms only where the entry point passes history)",
    "unsafe_unscoped_search": "the unscoped-search incident replay only (every other entry point refuses it)",
}


def inert_settings(rc: RetrievalConfig) -> dict[str, ActsWhen]:
    """The settings of ``rc`` whose condition is false here (whatever their value)."""
    missing = set(RetrievalConfig.model_fields) - set(ACTS_WHEN)
    if missing:  # a new field must say where it acts (tests/test_entry_points.py checks this too)
        raise KeyError(f"retrieval.{sorted(missing)[0]} is not declared in ACTS_WHEN (adiyan/retrieval/pipeline.py)")
    return {name: when for name, when in ACTS_WHEN.items() if isinstance(when, ActsWhen) and not when.test(rc)}


SPARSE_SIGNALS = ("bm25", "title")


def signals_of(settings) -> list[str]:
    """The ranked lists a knowledge base built with ``settings`` offers (KnowledgeBase.signals)."""
    return (["dense", *settings.embedder.extra, "bm25"] + (["title"] if settings.store.title_field else []))


def check_signals(rc: RetrievalConfig, signals: list[str], entry_point: str) -> None:
    """Refuse, by name, a fusion the knowledge base's signals cannot take: more than two signals
    (embedder.extra, store.title_field) outside hybrid mode or under convex fusion (two lists), and
    fusion weights that do not name every signal exactly once, with weights >= 0 summing to 1."""
    named = [s for s in signals if s not in ("dense", *SPARSE_SIGNALS)]
    parts = ([f"embedder.extra={named}"] if named else []) + (["store.title_field=true"] if "title" in signals else [])
    if parts:
        what = " and ".join(parts)
        if rc.mode != "hybrid":
            raise InertSetting(what, entry_point, "retrieval.mode=hybrid (the signals are fused there)",
                               f"retrieval.mode={rc.mode}")
        if rc.fusion == "convex":
            raise UnsupportedSetting("retrieval.fusion=convex", entry_point,
                                     f"convex fusion weighs two lists and this knowledge base ranks {len(signals)} "
                                     f"({', '.join(signals)}); use retrieval.fusion=weighted with "
                                     f"retrieval.fusion_weights, or rrf / dbsf")
    if rc.mode == "hybrid" and rc.fusion == "weighted":
        w = rc.fusion_weights
        unknown = sorted(set(w) - set(signals))
        missing = [s for s in signals if s not in w]
        if unknown or missing:
            raise UnsupportedSetting(f"retrieval.fusion_weights={dict(w)}", entry_point,
                                     f"it must give a weight to each signal of the knowledge base, {signals}"
                                     + (f"; unknown: {unknown}" if unknown else "")
                                     + (f"; missing: {missing}" if missing else ""))
        if any(v < 0 for v in w.values()) or abs(sum(w.values()) - 1.0) > 1e-6:
            raise UnsupportedSetting(f"retrieval.fusion_weights={dict(w)}", entry_point,
                                     "weights must be >= 0 and sum to 1")


def refuse_inert(rc: RetrievalConfig, entry_point: str) -> None:
    """Refuse, by name, a setting changed from its default that has nothing to act on under ``rc``."""
    defaults = RetrievalConfig()
    for name, when in inert_settings(rc).items():
        value = getattr(rc, name)
        if value != getattr(defaults, name):
            here = ", ".join(f"retrieval.{d}={getattr(rc, d)}" for d in when.deps)
            raise InertSetting(f"retrieval.{name}={value}", entry_point, when.needs, here)


class Retriever:
    """transform → engine search under the access filter → floor → re-rank → cut to k."""

    def __init__(self, kb, config: RetrievalConfig, *, floor: float, ef: int | None = None, exact: bool = False,
                 llm=None, reranker=None, cache: CallCache | None = None, allow_unscoped: bool = False,
                 entry_point: str = "this entry point", supports_history: bool = False):
        """``supports_history``: the entry point passes each query's conversation history
        (``retrieve(..., history=...)``); without it the history transforms are refused by name."""
        refuse_inert(config, entry_point)
        if hasattr(kb, "signals"):
            check_signals(config, kb.signals(), entry_point)
        if config.query_transform in HISTORY_MODES and not supports_history:
            raise UnsupportedSetting(f"retrieval.query_transform={config.query_transform}", entry_point,
                                     "it rewrites a conversation's follow-up and this entry point has no history")
        if config.query_transform in ("hyde", "history_llm") and llm is None:
            raise UnsupportedSetting("retrieval.query_transform=hyde", entry_point,
                                     "query_transform=hyde needs an LLM (llm.name) and none was given")
        if config.query_transform in ("hyde", "history_llm") and getattr(llm, "generative", True) is False:
            raise UnsupportedSetting(f"retrieval.query_transform={config.query_transform}", entry_point,
                                     f"it needs a generative LLM to write text and llm.name={llm.id} only quotes "
                                     "passages; set llm.name=smollm2 or a server (llm.url)")
        if config.rerank and reranker is None:
            raise UnsupportedSetting("retrieval.rerank=true", entry_point, "no re-ranker was given")
        if config.unsafe_unscoped_search and not allow_unscoped:
            raise UnsupportedSetting("retrieval.unsafe_unscoped_search=true", entry_point,
                                     "it disables the access policy and exists only for the incident replay")
        self.kb = kb
        self.config = config
        self.floor = float(floor)
        self.ef = ef
        self.exact = exact
        self.llm = llm
        self.reranker = reranker if config.rerank else None
        self.cache = cache
        self.transform_failures = 0  # HyDE generations that came back empty (counted, never hidden)
        self.entry_point = entry_point
        self.supports_history = supports_history
        # every retrieve() also counts what the access policy hid (adiyan ask sets it: its answer
        # may come through a conversation turn, which calls retrieve() itself)
        self.counts_hidden = False

    @classmethod
    def from_settings(cls, settings, kb, llm=None, *, reranker=None, cache: CallCache | None = None,
                      allow_unscoped: bool = False, entry_point: str = "this entry point",
                      supports_history: bool = False) -> "Retriever":
        """The pipeline the settings describe over ``kb``.

        ``llm`` is needed only for HyDE (loaded from ``llm.*`` when not given); the re-ranker is
        loaded from ``retrieval.rerank_model`` behind the embedding cache when re-ranking is on.
        """
        rc = settings.retrieval
        refuse_inert(rc, entry_point)  # refuse before loading anything
        check_signals(rc, signals_of(settings), entry_point)
        if rc.unsafe_unscoped_search and not allow_unscoped:  # refuse before loading anything
            raise UnsupportedSetting("retrieval.unsafe_unscoped_search=true", entry_point,
                                     "it disables the access policy and exists only for the incident replay")
        if rc.query_transform in HISTORY_MODES and not supports_history:  # refuse before loading anything
            raise UnsupportedSetting(f"retrieval.query_transform={rc.query_transform}", entry_point,
                                     "it rewrites a conversation's follow-up and this entry point has no history")
        if rc.query_transform in ("hyde", "history_llm") and llm is None:
            llm = llm_from_settings(settings)
        if rc.rerank and reranker is None:
            reranker = BiEncoderReranker.from_settings(settings)
        if cache is None and rc.query_transform in ("hyde", "history_llm"):
            cache = call_cache(settings, rc.query_transform)
        floor = resolve_floor(rc, kb.embedder.id)
        return cls(kb, rc, floor=floor, ef=settings.store.hnsw_ef, exact=settings.store.exact, llm=llm,
                   reranker=reranker, cache=cache, allow_unscoped=allow_unscoped, entry_point=entry_point,
                   supports_history=supports_history)

    # -- the pipeline -----------------------------------------------------------------------
    def depth(self, k: int) -> int:
        """How deep the ranking is kept: at least k, at least ``rank_depth``."""
        return max(k, self.config.rank_depth)

    def pool(self, k: int) -> int:
        """Candidates fetched from the engine per query."""
        d = self.depth(k)
        return d * self.config.rerank_overfetch if self.reranker is not None else d

    def retrieve(self, query: str, requester: Requester | str | None, *, top_k: int | None = None,
                 within: str | None = None, floor: float | None = None, history=None,
                 count_hidden: bool = False) -> RetrievalResult:
        """The top k chunks for ``query`` that ``requester`` may see (``within`` one source).

        ``floor`` overrides the embedder's floor for this call (calibration measures below it);
        ``history`` (earlier turns, ``[{"role", "content"}]``, ``[]`` for a first message) is what the
        history transforms rewrite a follow-up from. ``count_hidden`` (or ``self.counts_hidden``): the
        result's ``hidden`` is how many of the top k the access policy removed (see :meth:`_hidden`).
        """
        rc = self.config
        k = top_k or (rc.doc_top_k if within else rc.kb_top_k)
        floor = self.floor if floor is None else float(floor)
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        if rc.query_transform in HISTORY_MODES and history is None:
            raise UnsupportedSetting(f"retrieval.query_transform={rc.query_transform}", self.entry_point,
                                     "retrieve() was called without history= (pass [] for a first message)")
        outcome = transform_query(query, rc.query_transform, llm=self.llm, cache=self.cache, history=history)
        if outcome.failed:
            self.transform_failures += 1
        timings["transform_s"] = time.perf_counter() - t0
        requester = Requester.of(requester)
        scope = dict(requester=requester, within=within)
        ranked, dropped = self._ranked(query, outcome.queries, k, floor, scope, timings)
        chunks = ranked[:k]
        hidden = (self._hidden(query, outcome.queries, k, floor, requester, within)
                  if count_hidden or self.counts_hidden else None)
        floored = rc.mode == "dense"
        return RetrievalResult(query, chunks, floor, dropped if not chunks or floored else 0, rc.mode, ranked=ranked,
                               queries=list(outcome.queries), transform=rc.query_transform,
                               transform_failed=outcome.failed,
                               reranker=getattr(self.reranker, "id", None) if self.reranker is not None else None,
                               floor_applied=floored, timings=timings, hidden=hidden)

    def hidden_count(self, query: str, requester: Requester | str | None, *,
                     top_k: int | None = None, history=None) -> int:
        """How many of the top k chunks for ``query`` the access policy hides from the requester
        (:meth:`_hidden`), for a caller whose own searches are not one ``retrieve`` of ``query``
        (the agent); ``retrieve(..., count_hidden=True)`` counts it from the call's own queries."""
        rc = self.config
        if rc.query_transform in HISTORY_MODES and history is None:
            raise UnsupportedSetting(f"retrieval.query_transform={rc.query_transform}", self.entry_point,
                                     "hidden_count() was called without history= (pass [] for a first message)")
        outcome = transform_query(query, rc.query_transform, llm=self.llm, cache=self.cache, history=history)
        return self._hidden(query, outcome.queries, top_k or rc.kb_top_k, self.floor, Requester.of(requester), None)

    def _ranked(self, query: str, queries: list[str], k: int, floor: float, scope: dict,
                timings: dict) -> tuple[list[RetrievedChunk], int]:
        """Stages 2-5 for the transformed ``queries`` under ``scope`` (requester, owner role, within):
        engine search (fusion, PRF), floor, fusion of several queries, re-rank, cut to the depth."""
        rc = self.config
        t0 = time.perf_counter()
        floored = rc.mode == "dense"
        runs, dropped = [], 0
        for q in queries:
            hits = self._engine(q, self.pool(k), dict(scope, ef=self.ef, exact=self.exact,
                                                      unscoped=rc.unsafe_unscoped_search))
            if floored:
                kept = [c for c in hits if c.score >= floor]
                dropped += len(hits) - len(kept)
                hits = kept
            runs.append(hits)
        ranked = runs[0] if len(runs) == 1 else _fuse(runs, rc.rrf_k)
        timings["search_s"] = time.perf_counter() - t0
        if self.reranker is not None and ranked:
            t0 = time.perf_counter()
            ranked = _rerank(self.reranker, query, ranked)
            timings["rerank_s"] = time.perf_counter() - t0
        return ranked[: self.depth(k)], dropped

    def _hidden(self, query: str, queries: list[str], k: int, floor: float, requester: Requester,
                within: str | None) -> int:
        """The owner view of the same pipeline run: the same transformed queries through the same
        stages (fusion, PRF, floor, re-ranking, cut) without the access filter; how many of its top k
        the requester may not see. Only the count leaves here, never a chunk, a name or a text."""
        if requester.is_owner or self.config.unsafe_unscoped_search:
            return 0
        owner, _ = self._ranked(query, queries, k, floor, dict(requester=OWNER, within=within), {})
        return sum(1 for c in owner[:k] if not visible_to(c.payload, requester))

    def _engine(self, q: str, limit: int, scope: dict) -> list[RetrievedChunk]:
        """Engine search of one query (``scope``: requester, filter and engine knobs), with pseudo-relevance
        feedback from the first ranking's top chunks when asked: ``prf_docs`` > 0 moves each dense
        signal's query vector (fusion.rocchio), ``rm3_docs`` > 0 expands the BM25 query (rm3.expand);
        then the search runs again with them."""
        rc = self.config
        prf = rc.prf_docs if rc.mode != "bm25" else 0
        rm3 = rc.rm3_docs if rc.mode != "dense" else 0
        if not prf and not rm3:
            return self._first_stage(q, limit, scope)
        first = self._first_stage(q, max(limit, prf, rm3), scope)[: max(prf, rm3)]
        vectors, sparse = None, None
        if prf:
            vectors = {}
            for signal in self._dense_signals():
                emb = self.kb.signal_embedder(signal) if hasattr(self.kb, "signal_embedder") else self.kb.embedder
                qv = emb.embed([q], "query")[0]
                if first:  # chunk vectors come from the embedding cache (ingest embedded the same texts)
                    qv = rocchio(qv, emb.embed([c.text for c in first[:prf]], "document"), rc.prf_weight)
                vectors[signal] = qv
        if rm3:
            sparse = rm3_expand(self.kb.lexical.query(q), [c.text for c in first[:rm3]], self.kb.term_counts,
                                terms=rc.rm3_terms, weight=rc.rm3_weight)
        return self._first_stage(q, limit, scope, vectors, sparse)

    def _dense_signals(self) -> list[str]:
        signals = self.kb.signals() if hasattr(self.kb, "signals") else ["dense", "bm25"]
        return [s for s in signals if s not in SPARSE_SIGNALS]

    def _first_stage(self, q: str, limit: int, scope: dict, vectors: dict | None = None,
                     sparse=None) -> list[RetrievedChunk]:
        """One query's first ranking. Hybrid fetches every signal's prefetch list from the engine and
        fuses them here (``_fuse_signals``), so that equal fused scores (frequent under RRF: rank r in
        one list ties with rank r in the other) are ordered by chunk key in both engines, not by point
        ids that change whenever the chunking configuration's hash does."""
        rc = self.config
        if rc.mode == "hybrid":
            n = max(rc.hybrid_prefetch, limit)
            signals = self.kb.signals() if hasattr(self.kb, "signals") else ["dense", "bm25"]
            lists = {}
            for signal in signals:
                mode = "bm25" if signal in SPARSE_SIGNALS else "dense"
                lists[signal] = self.kb.search(q, n, mode=mode, signal=signal, query_vectors=vectors,
                                               sparse_query=sparse, **scope)
            return _fuse_signals(lists, rc, limit)
        return self.kb.search(q, limit, mode=rc.mode, query_vectors=vectors, sparse_query=sparse, **scope)

    # -- the read paths that search (the other three are on the KnowledgeBase) ----------------
    def retrieve_knowledge_base(self, query: str, requester: Requester | str | None, *, top_k: int | None = None,
                                floor: float | None = None) -> RetrievalResult:
        return self.retrieve(query, requester, top_k=top_k, floor=floor)

    def search_within_document(self, source: str, query: str, requester: Requester | str | None, *,
                               top_k: int | None = None, floor: float | None = None) -> RetrievalResult:
        self.kb.record(source, requester)  # DocumentNotFound: hidden == missing
        return self.retrieve(query, requester, top_k=top_k or self.config.doc_top_k, within=source, floor=floor)

    def find_source_document(self, query: str, requester: Requester | str | None, *,
                             floor: float | None = None) -> dict | None:
        """The permitted document whose chunk best matches the query, or None."""
        res = self.retrieve(query, requester, floor=floor)
        if not res.chunks:
            return None
        best = res.chunks[0]
        return {"source": best.source, "score": best.score, "chunk_index": best.chunk_index}

    # the three read paths that return whole documents, so one object answers all six
    def get_document_text(self, source: str, requester: Requester | str | None) -> str:
        return self.kb.get_document_text(source, requester)

    def get_document(self, source: str, requester: Requester | str | None) -> bytes:
        return self.kb.get_document(source, requester)

    def list_documents(self, requester: Requester | str | None) -> list[dict]:
        return self.kb.list_documents(requester)

    def extraction_report(self, source: str, requester: Requester | str | None) -> dict:
        return self.kb.extraction_report(source, requester)

    # the seventh read path: books page by page (adiyan.kb.pages), under the same access policy
    def search_book_pages(self, query: str, requester: Requester | str | None, *,
                          top_k: int | None = None, within: str | None = None,
                          floor: float | None = None) -> list[RetrievedChunk]:
        """The best pages of the permitted books (``page`` in each result's payload)."""
        if self.kb.book_pages is None:
            raise UnsupportedSetting("search_book_pages", self.entry_point, "this knowledge base has no book pages "
                                     "(open it with adiyan.factory.open_kb)")
        return self.kb.book_pages.search(query, requester, top_k or self.config.kb_top_k, within=within,
                                         floor=self.floor if floor is None else floor, ef=self.ef, exact=self.exact)

    def describe(self) -> dict:
        """What this pipeline does; a setting with nothing to act on here (ACTS_WHEN) is None."""
        rc = self.config
        out = {"mode": rc.mode, "query_transform": rc.query_transform, "floor": self.floor if rc.mode == "dense" else None,
               "rerank": getattr(self.reranker, "id", None), "kb_top_k": rc.kb_top_k, "doc_top_k": rc.doc_top_k,
               "rank_depth": rc.rank_depth, "rrf_k": rc.rrf_k, "hybrid_prefetch": rc.hybrid_prefetch,
               "hnsw_ef": self.ef, "exact": self.exact, "fusion": rc.fusion, "fusion_weight": rc.fusion_weight,
               "fusion_norm": rc.fusion_norm, "fusion_weights": dict(rc.fusion_weights) or None,
               "prf_docs": rc.prf_docs, "prf_weight": rc.prf_weight, "rm3_docs": rc.rm3_docs,
               "rm3_terms": rc.rm3_terms, "rm3_weight": rc.rm3_weight,
               "signals": self.kb.signals() if hasattr(self.kb, "signals") else None,
               "rerank_overfetch": rc.rerank_overfetch}
        for name in inert_settings(rc):
            if name in out:
                out[name] = None
        return out


def _fuse(runs: list[list[RetrievedChunk]], rrf_k: int) -> list[RetrievedChunk]:
    """Several rankings of one question (split parts) fused by reciprocal rank."""
    by_key: dict[str, RetrievedChunk] = {}
    as_runs = []
    for hits in runs:
        run = {}
        for c in hits:
            by_key.setdefault(c.key, c)
            run[c.key] = c.score
        as_runs.append({"q": run})
    fused = rrf(as_runs, rrf_k).get("q", {})
    return [replace(by_key[key], score=score) for key, score in fused.items()]


def _fuse_signals(lists: dict[str, list[RetrievedChunk]], rc: RetrievalConfig, limit: int) -> list[RetrievedChunk]:
    """One query's lists by signal ({"dense": [...], "bm25": [...], ...}) fused by ``rc.fusion``
    (rrf | dbsf | convex | weighted), cut to ``limit``. Every fusion orders equal scores by chunk key
    (fusion.rank_order), and RRF ranks each list the same way, so the fused ranking depends on the
    lists' scores alone."""
    by_key: dict[str, RetrievedChunk] = {}
    for hits in reversed(list(lists.values())):  # the first list's chunk object wins (dense first)
        by_key.update({c.key: c for c in hits})
    scores = {name: {c.key: c.score for c in hits} for name, hits in lists.items()}
    if rc.fusion == "rrf":
        fused = rrf([{"q": s} for s in scores.values()], rc.rrf_k, top_k=limit).get("q", {})
    elif rc.fusion == "dbsf":
        fused = dbsf(list(scores.values()), top_k=limit)
    elif rc.fusion == "convex":
        fused = convex(scores["dense"], scores["bm25"], rc.fusion_weight, norm=rc.fusion_norm, top_k=limit)
    else:
        names = list(scores)
        fused = weighted([scores[n] for n in names], [rc.fusion_weights[n] for n in names], norm=rc.fusion_norm,
                         top_k=limit)
    return [replace(by_key[key], score=score) for key, score in fused.items()]


def _rerank(reranker, query: str, ranked: list[RetrievedChunk]) -> list[RetrievedChunk]:
    """Re-order the pool by the re-ranker's scores; ties keep the first-stage order."""
    scores = reranker.score(query, [c.text for c in ranked])
    if len(scores) != len(ranked):
        raise ValueError(f"re-ranker {getattr(reranker, 'id', reranker)!r} returned {len(scores)} scores "
                         f"for {len(ranked)} texts")
    order = sorted(range(len(ranked)), key=lambda i: (-scores[i], i))
    return [replace(ranked[i], score=float(scores[i])) for i in order]


def refuse_settings(settings, entry_point: str, honoured: set[str] | frozenset[str]) -> None:
    """Refuse, by name, every retrieval setting that differs from its default and that
    ``entry_point`` does not honour (``honoured`` holds dotted names, e.g. ``retrieval.mode``)."""
    defaults = RetrievalConfig()
    for name in RetrievalConfig.model_fields:
        dotted = f"retrieval.{name}"
        if dotted in honoured:
            continue
        value = getattr(settings.retrieval, name)
        if value != getattr(defaults, name):
            raise UnsupportedSetting(f"{dotted}={value}", entry_point)
