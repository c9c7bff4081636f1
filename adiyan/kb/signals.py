"""The knowledge base's signals and its one engine query (a mixin of ``KnowledgeBase``).

A chunk can be ranked by several lists, its *signals*: ``dense`` (the main embedder's vector), one
Qdrant named vector per extra embedder (``embedder.extra``), ``bm25`` (the chunk's BM25 vector) and,
with ``store.title_field``, ``title`` (a BM25 vector of its document's title). :meth:`SignalSearch.search`
queries one of them, or fuses them all by RRF in the engine, always under the requester's access
filter and through the committed version (``adiyan.kb.policy.committed_only``).
"""

from __future__ import annotations

from ..cache import embedder_identity
from ..store.base import SPARSE_NAME, TITLE_NAME, Cond, Filter, Sparse, VectorSpec
from ..types import Requester, RetrievedChunk
from .policy import access_filter, committed_only


def _and(a: Filter | None, b: Filter | None) -> Filter | None:
    if a is None:
        return b
    return a.and_(b)


class SignalSearch:
    """Needs ``store``, ``collection``, ``embedder``, ``extra_embedders``, ``title_field``, ``lexical``,
    ``_lengths``, ``raw`` and ``_check_model``."""

    def vector_specs(self) -> dict[str, VectorSpec]:
        """The named dense vectors this knowledge base writes (one per extra embedder)."""
        return {n: VectorSpec(e.dim, embedder_identity(e), e.normalized) for n, e in self.extra_embedders.items()}

    def signals(self) -> list[str]:
        """Every ranked list a query can have here, by name: ``dense`` (the embedder), each named
        vector, ``bm25``, and ``title`` when the title field is stored (retrieval.fusion_weights's keys)."""
        return ["dense", *self.extra_embedders, SPARSE_NAME] + ([TITLE_NAME] if self.title_field else [])

    def signal_embedder(self, signal: str):
        """The embedder of a dense signal (``dense``: the main one; else a named vector's)."""
        if signal in ("dense", ""):
            return self.embedder
        if signal not in self.extra_embedders:
            raise ValueError(f"no dense signal {signal!r} in {self.collection!r} (dense signals: "
                             f"{['dense', *self.extra_embedders]}; embedder.extra)")
        return self.extra_embedders[signal]

    @staticmethod
    def document_title(text: str) -> str:
        """A document's title: its first level-one Markdown heading (``# Title``, as BEIR passages are
        written and as Docling writes a title) among its first lines; "" when it has none."""
        for line in text.lstrip().splitlines()[:5]:
            if line.startswith("# "):
                return line[2:].strip()
        return ""

    def title_vector(self, text: str) -> Sparse:
        """The title field's BM25 vector: term frequencies saturated with k = 1.2 and no length
        normalisation (b = 0: titles are short); IDF from the title field, applied by the engine."""
        return self._lengths.document(self.document_title(text))

    # Searching is the retrieval pipeline's job (adiyan.retrieval.pipeline.Retriever owns
    # retrieve_knowledge_base, search_within_document and find_source_document: transformation,
    # floor, re-ranking, cut). The KB offers the one engine query they all go through, always
    # under the requester's access filter, and the three read paths that return whole documents.
    GATE_ROUNDS = 4  # engine queries at most per search when replaced / uncommitted chunks crowd the top

    def search(self, query: str, limit: int, *, requester: Requester | str | None,
               within: str | None = None, mode: str = "dense", rrf_k: int = 60, prefetch: int = 50,
               ef: int | None = None, exact: bool = False, query_vector=None,
               unscoped: bool = False, signal: str | None = None, query_vectors: dict | None = None,
               sparse_query: Sparse | None = None) -> list[RetrievedChunk]:
        """One engine query (dense, BM25 or hybrid fused in the engine) under the access filter,
        through the committed version.

        ``signal`` picks one list: a dense signal (``dense`` or a named vector, mode dense) or a
        sparse one (``bm25`` or ``title``, mode bm25); hybrid fuses every signal of :meth:`signals`
        by RRF in the engine. ``query_vector`` / ``query_vectors`` ({signal: vector}) replace the
        embedded query (a moved PRF vector), ``sparse_query`` the tokenized one (an RM3 expansion).
        Scores are the engine's: cosine for dense, BM25 for bm25, RRF for hybrid. ``within``
        restricts to one source (the caller checks that the requester may see it). ``unscoped``
        drops the access filter: only the replay of the unscoped-search incident asks for it.
        Only chunks of each source's committed version are returned (``committed_only``); when
        others (a version being written or just replaced) took places in the top ``limit``, the
        engine is asked again for more, so k results are k committed, permitted chunks. Dense and
        BM25 rankings are then exactly those of the committed chunks alone; a hybrid ranking
        fuses ranks that counted the dropped chunks too, only while a write is under way.
        """
        self._check_model()
        flt = None if unscoped else access_filter(requester)
        if within is not None:
            flt = _and(flt, Filter(must=(Cond("source_filename", within),)))
        if mode not in ("dense", "bm25", "hybrid"):
            raise ValueError(f"retrieval.mode: unknown mode {mode!r} (dense | bm25 | hybrid)")
        sparse_signals = (SPARSE_NAME, TITLE_NAME)
        signal = signal or ("dense" if mode == "dense" else SPARSE_NAME)
        if mode == "bm25" and signal not in sparse_signals or mode == "dense" and signal in sparse_signals:
            raise ValueError(f"signal {signal!r} is not a {mode} list here (signals: {self.signals()})")
        if signal not in self.signals():
            raise ValueError(f"no signal {signal!r} in {self.collection!r} (signals: {self.signals()}; "
                             f"embedder.extra, store.title_field)")
        sparse = (sparse_query if sparse_query is not None else self.lexical.query(query)) if mode != "dense" else None
        vectors = dict(query_vectors or {})
        if query_vector is not None:
            vectors["dense" if mode == "hybrid" else signal] = query_vector

        def qvec(name: str):
            if name not in vectors:
                vectors[name] = self.signal_embedder(name).embed([query], "query")[0]
            return vectors[name]

        fetch = limit
        for _ in range(self.GATE_ROUNDS):
            if mode == "bm25":
                hits = self.store.sparse_search(self.collection, sparse, fetch, flt=flt, using=signal)
            elif mode == "hybrid":
                hits = self.store.hybrid_search(self.collection, qvec("dense"), sparse, fetch, flt=flt,
                                                prefetch=max(prefetch, fetch), rrf_k=rrf_k, ef=ef, exact=exact,
                                                named={n: qvec(n) for n in self.extra_embedders} or None,
                                                title=sparse if self.title_field else None)
            else:
                hits = self.store.search(self.collection, qvec(signal), fetch, flt=flt, ef=ef, exact=exact,
                                         using=None if signal == "dense" else signal)
            kept, stale = committed_only(hits, self.raw.committed)
            if not stale or len(kept) >= limit or len(hits) < fetch:
                break
            fetch = 2 * fetch + stale
        return [RetrievedChunk.from_hit(h) for h in kept[:limit]]

