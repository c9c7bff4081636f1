"""Second-stage re-ranking of a first-stage run's top candidates.

A re-ranker implements one small protocol, ``score(query, texts) -> list[float]``. The one
shipped is ``BiEncoderReranker``: it re-scores candidates by cosine with a stronger bi-encoder
than the first stage (all-mpnet-base-v2 by default). Behind a ``CachedEmbedder`` every document
is embedded once per model and content hash, so re-running a benchmark, or re-ranking a deeper
list, only pays for documents never seen before. There is no cross-encoder: none ships in an
offline package (/work/shared/docs/offline.md), and the one that was here could be reached by
no setting.

``rerank`` re-orders each query's ``top_n`` first-stage candidates by the re-ranker's scores
and keeps the rest of the list below them in first-stage order, so Recall@100 of a re-ranked
run counts the same documents as the run it came from.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Mapping, Protocol, Sequence, runtime_checkable

import numpy as np
from tqdm.auto import tqdm

from ..cache import CachedEmbedder, EmbeddingCache
from ..models import load_embedder
from .dense import embed_texts
from .fusion import rank_order

Run = dict[str, dict[str, float]]


@runtime_checkable
class Reranker(Protocol):
    id: str

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        """One relevance score per text; higher is more relevant."""
        ...


class BiEncoderReranker:
    """Cosine between the query and each candidate under a (stronger) bi-encoder."""

    def __init__(self, embedder=None, *, model: str = "mpnet", models_dir: str | os.PathLike = ".cache/adiyan/models",
                 batch_size: int = 16):
        if embedder is None:
            embedder = load_embedder(model, models_dir=models_dir)
        self.embedder = embedder
        self.id = f"bi-encoder:{embedder.id}"
        self.batch_size = batch_size

    @classmethod
    def from_settings(cls, settings, model: str | None = None) -> "BiEncoderReranker":
        """``model`` (default ``retrieval.rerank_model``) behind the project's embedding cache."""
        name = model or settings.retrieval.rerank_model
        inner = load_embedder(name, models_dir=settings.paths.models_dir)
        cache = EmbeddingCache(Path(settings.paths.cache_dir) / "embeddings.sqlite")
        return cls(CachedEmbedder(inner, cache))

    def warm(self, texts: Sequence[str], *, progress: bool = True) -> None:
        """Embed documents ahead of scoring, in batches with a progress bar (fills the cache)."""
        embed_texts(self.embedder, list(dict.fromkeys(texts)), "document", batch_size=self.batch_size,
                    progress=progress, desc=f"re-rank: embed candidates ({self.embedder.id})")

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        if not texts:
            return []
        q = np.asarray(self.embedder.embed([query], "query"), dtype=np.float32)[0]
        d = np.asarray(self.embedder.embed(list(texts), "document"), dtype=np.float32)
        return [float(x) for x in d @ q]


def candidates(run: Mapping[str, Mapping[str, float]], top_n: int) -> dict[str, list[str]]:
    """Each query's ``top_n`` best documents in first-stage order (score desc, ties by id)."""
    return {q: rank_order(docs)[:top_n] for q, docs in run.items()}


def rerank(run: Mapping[str, Mapping[str, float]], queries: Mapping[str, str], doc_texts: Mapping[str, str],
           reranker: Reranker, top_n: int = 20, *, keep_tail: bool = True, progress: bool = True,
           stats: dict | None = None) -> Run:
    """Re-order each query's ``top_n`` candidates by ``reranker.score``.

    The re-ranked block keeps the re-ranker's scores; with ``keep_tail`` the remaining
    documents follow in first-stage order with placeholder scores below the block
    (``min(block) - 1 - i``), otherwise they are dropped. ``stats``, if given, receives the
    number of queries, candidate pairs, unique documents, and the seconds spent.
    """
    if top_n < 1:
        raise ValueError("rerank: top_n must be >= 1")
    t0 = time.perf_counter()
    cands = candidates(run, top_n)
    # rank-major order (every query's 1st candidate, then every 2nd, ...): an interrupted warm-up
    # leaves the cache complete for a smaller top_n, which a rerun then gets for free
    unique_docs = list(dict.fromkeys(docs[r] for r in range(top_n) for docs in cands.values() if r < len(docs)))
    missing = [d for d in unique_docs if d not in doc_texts]
    if missing:
        raise KeyError(f"rerank: no text for {len(missing)} candidate documents, e.g. {missing[:3]}")
    warm = getattr(reranker, "warm", None)
    if warm is not None:
        warm([doc_texts[d] for d in unique_docs], progress=progress)
    t_warm = time.perf_counter() - t0
    out: Run = {}
    for qid in tqdm(list(run), desc=f"re-rank ({getattr(reranker, 'id', 'reranker')})", disable=not progress,
                    leave=False):
        block = cands[qid]
        if qid not in queries:
            raise KeyError(f"rerank: no text for query {qid!r}")
        scores = reranker.score(queries[qid], [doc_texts[d] for d in block]) if block else []
        if len(scores) != len(block):
            raise ValueError(f"rerank: {reranker!r} returned {len(scores)} scores for {len(block)} texts")
        # stable sort on (-score, id): equal re-ranker scores are ordered by doc id
        order = sorted(range(len(block)), key=lambda i: (-scores[i], block[i]))
        ranked = {block[i]: float(scores[i]) for i in order}
        if keep_tail:
            floor = min(ranked.values()) if ranked else 0.0
            for j, d in enumerate(rank_order(run[qid])[top_n:]):
                ranked[d] = floor - 1.0 - j
        out[qid] = ranked
    if stats is not None:
        stats.update({"reranker": getattr(reranker, "id", type(reranker).__name__), "top_n": top_n,
                      "queries": len(run), "pairs": sum(len(v) for v in cands.values()),
                      "unique_docs": len(unique_docs), "embed_seconds": round(t_warm, 2),
                      "seconds": round(time.perf_counter() - t0, 2)})
    return out
