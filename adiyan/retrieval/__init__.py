"""Retrieval stages, one method per module: exact dense search, BM25, RRF fusion, re-ranking,
and the HNSW-vs-exact recall measurement. A run is ``{query id: {doc id: score}}`` throughout.

Heavy dependencies (bm25s, sentence-transformers, qdrant-edge) load only when a stage runs.
"""

from .bm25 import BM25Retriever
from .dense import ExactDenseIndex, dense_run, embed_corpus, embed_queries, embed_texts, top_k_positions
from .fusion import rank_order, rrf
from .hnsw_recall import measure_hnsw_recall, visibility
from .rerank import BiEncoderReranker, CrossEncoderReranker, Reranker, rerank

__all__ = ["BM25Retriever", "ExactDenseIndex", "dense_run", "embed_corpus", "embed_queries", "embed_texts",
           "top_k_positions", "rank_order", "rrf", "measure_hnsw_recall", "visibility", "BiEncoderReranker",
           "CrossEncoderReranker", "Reranker", "rerank"]
