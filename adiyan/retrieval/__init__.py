"""Retrieval: the pipeline every entry point retrieves through (:class:`Retriever`, built by
``Retriever.from_settings``; see :mod:`adiyan.retrieval.pipeline`) and its stages, one method
per module: exact dense search, BM25, RRF fusion, re-ranking, and the HNSW-vs-exact recall
measurement. A run is ``{query id: {doc id: score}}`` throughout. Every stage takes ids and
texts; the BEIR-corpus conveniences (``index_corpus``, ``embed_corpus``, ``dense_run``) are in
:mod:`adiyan.eval.beir_runs`.

Heavy dependencies (bm25s, sentence-transformers, qdrant-edge) load only when a stage runs.
"""

from .bm25 import BM25Retriever
from .dense import ExactDenseIndex, embed_queries, embed_texts, top_k_positions
from .fusion import rank_order, rrf
from .hnsw_recall import measure_hnsw_recall, visibility
from .pipeline import Retriever, UnsupportedSetting
from .rerank import BiEncoderReranker, Reranker, rerank

__all__ = ["Retriever", "UnsupportedSetting", "BM25Retriever", "ExactDenseIndex", "embed_queries", "embed_texts",
           "top_k_positions", "rank_order", "rrf", "measure_hnsw_recall", "visibility", "BiEncoderReranker", "Reranker",
           "rerank"]
