"""BEIR conveniences over the retrieval core: index, embed and search a BEIR corpus.

The retrieval core (:mod:`adiyan.retrieval`) takes ids and texts; the helpers here take a BEIR
corpus (``{doc id: {"title", "text"}}``, as :func:`adiyan.eval.beir.load_beir` returns it) and
turn each document into ``title + " " + text`` (:func:`adiyan.eval.beir.doc_text`, the text
BEIR's baselines index), the way bm25s keeps its BEIR helpers outside its core.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterable, Mapping

import numpy as np

from ..retrieval.bm25 import BM25Retriever
from ..retrieval.dense import ExactDenseIndex, embed_queries, embed_texts
from ..retrieval.fusion import rrf
from .beir import BeirData, doc_text

Corpus = Mapping[str, Mapping[str, str]]
Run = dict[str, dict[str, float]]

__all__ = ["REFERENCE_MODES", "ReferenceRuns", "dense_run", "embed_corpus", "index_corpus", "reference_runs"]


def index_corpus(retriever: BM25Retriever, corpus: Corpus) -> BM25Retriever:
    """Index a BEIR corpus in ``retriever`` (a :class:`BM25Retriever`) as ``title + " " + text``;
    returns the retriever, so ``index_corpus(BM25Retriever(), corpus).retrieve(queries)`` reads."""
    return retriever.index(list(corpus), [doc_text(corpus[i]) for i in corpus])


def embed_corpus(embedder, corpus: Corpus, *, batch_size: int = 256,
                 progress: bool = True) -> tuple[list[str], np.ndarray]:
    """(doc ids, matrix) for a BEIR corpus, each document embedded as ``title + " " + text``."""
    ids = list(corpus)
    return ids, embed_texts(embedder, [doc_text(corpus[i]) for i in ids], "document",
                            batch_size=batch_size, progress=progress, desc=f"embed corpus ({embedder.id})")


def dense_run(embedder, corpus: Corpus, queries: Mapping[str, str], k: int = 100, *,
              batch_size: int = 256, progress: bool = True) -> tuple[Run, ExactDenseIndex, np.ndarray]:
    """Embed corpus and queries, search exactly; returns (run, index, query matrix)."""
    doc_ids, doc_vecs = embed_corpus(embedder, corpus, batch_size=batch_size, progress=progress)
    index = ExactDenseIndex(doc_ids, doc_vecs, normalize=False)
    qids, qvecs = embed_queries(embedder, queries, batch_size=batch_size, progress=progress)
    return index.retrieve(qids, qvecs, k), index, qvecs


REFERENCE_MODES = ("bm25", "dense", "hybrid")


@dataclass
class ReferenceRuns:
    """BEIR's whole-document runs (:func:`reference_runs`) and what made them."""

    runs: dict[str, Run]  # "bm25" | "dense" | "hybrid" -> {query id: {doc id: score}}
    depth: int
    rrf_k: int
    bm25_config: dict | None = None
    embedder_id: str | None = None
    max_seq_length: int | None = None
    dense_index: ExactDenseIndex | None = None
    query_vectors: np.ndarray | None = None
    timings: dict[str, float] = field(default_factory=dict)

    def describe(self) -> dict:
        return {"unit": "whole document", "document_text": 'title + " " + text, stripped (BEIR)',
                "depth": self.depth, "bm25": self.bm25_config,
                "dense": None if self.embedder_id is None else {
                    "embedder": self.embedder_id, "max_seq_length": self.max_seq_length,
                    "truncation": "the model's own (sentence-transformers max_seq_length)" if self.max_seq_length
                    else "the model's own", "search": "exact (NumPy brute force, cosine)"},
                "hybrid": f"RRF k={self.rrf_k} of the bm25 and dense runs" if "hybrid" in self.runs else None,
                "ties": "score descending, then doc id ascending",
                "timings_s": {k: round(v, 3) for k, v in self.timings.items()}}


def reference_runs(data: BeirData, modes: Iterable[str] = REFERENCE_MODES, *, embedder=None, depth: int = 1000,
                   rrf_k: int = 60, progress: bool = True) -> ReferenceRuns:
    """BEIR's protocol over a BEIR data set: each document whole, as ``title + " " + text``.

    ``bm25``: bm25s (Lucene BM25, k1=0.9, b=0.4, Snowball English stemmer, English stopwords);
    ``dense``: ``embedder`` over each whole document, cut by the model's own input window, exact
    cosine search; ``hybrid``: reciprocal rank fusion (``rrf_k``) of the two. Every run ranks
    documents ``depth`` deep. The SciFact benchmark (benchmarks/scifact.py) and ``invoke eval``
    under ``eval.beir_protocol=beir`` both call this: one implementation of the protocol.
    """
    modes = tuple(modes)
    unknown = [m for m in modes if m not in REFERENCE_MODES]
    if unknown:
        raise ValueError(f"reference_runs: unknown mode(s) {unknown}; known: {', '.join(REFERENCE_MODES)}")
    need = set(modes) | ({"bm25", "dense"} if "hybrid" in modes else set())
    out = ReferenceRuns({}, depth, rrf_k)
    if "bm25" in need:
        t0 = time.perf_counter()
        bm25 = index_corpus(BM25Retriever(), data.corpus)
        out.timings["bm25_index_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        out.runs["bm25"] = bm25.retrieve(data.queries, k=depth)
        out.timings["bm25_retrieve_s"] = time.perf_counter() - t0
        out.bm25_config = bm25.config()
    if "dense" in need:
        if embedder is None:
            raise ValueError("reference_runs: the dense and hybrid runs need an embedder")
        t0 = time.perf_counter()
        out.runs["dense"], out.dense_index, out.query_vectors = dense_run(embedder, data.corpus, data.queries,
                                                                          k=depth, progress=progress)
        out.timings["dense_embed_and_search_s"] = time.perf_counter() - t0
        out.embedder_id = embedder.id
        out.max_seq_length = getattr(getattr(getattr(embedder, "inner", embedder), "_model", None),
                                     "max_seq_length", None)
    if "hybrid" in modes:
        t0 = time.perf_counter()
        out.runs["hybrid"] = rrf([out.runs["bm25"], out.runs["dense"]], k=rrf_k)
        out.timings["rrf_s"] = time.perf_counter() - t0
    out.runs = {m: out.runs[m] for m in REFERENCE_MODES if m in out.runs}
    return out
