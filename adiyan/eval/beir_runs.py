"""BEIR conveniences over the retrieval core: index, embed and search a BEIR corpus.

The retrieval core (:mod:`adiyan.retrieval`) takes ids and texts; the helpers here take a BEIR
corpus (``{doc id: {"title", "text"}}``, as :func:`adiyan.eval.beir.load_beir` returns it) and
turn each document into ``title + " " + text`` (:func:`adiyan.eval.beir.doc_text`, the text
BEIR's baselines index), the way bm25s keeps its BEIR helpers outside its core.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from ..retrieval.bm25 import BM25Retriever
from ..retrieval.dense import ExactDenseIndex, embed_queries, embed_texts
from .beir import doc_text

Corpus = Mapping[str, Mapping[str, str]]
Run = dict[str, dict[str, float]]

__all__ = ["dense_run", "embed_corpus", "index_corpus"]


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
