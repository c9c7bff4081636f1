"""Dense retrieval: an exact (brute-force) NumPy index and helpers that embed texts and queries.

``ExactDenseIndex`` is the recall baseline HNSW is measured against: every query is scored
against every document, so its top-k is the true top-k. Rows are L2-normalised float32 and the
score is the dot product, i.e. cosine similarity. Top-k takes ``argpartition`` and then a stable
sort; documents with equal scores are ordered by id (ascending), so the result never depends on
insertion order or on the partition's pivot.

The core takes ids and texts; embedding and searching a BEIR corpus (``{id: {"title", "text"}}``)
is :mod:`adiyan.eval.beir_runs`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
from tqdm.auto import tqdm

from ..models.base import l2_normalize

Run = dict[str, dict[str, float]]


def id_ranks(ids: Sequence[str]) -> np.ndarray:
    """Each id's position in sorted id order: the tie-breaker of every top-k."""
    order = sorted(range(len(ids)), key=list(ids).__getitem__)
    ranks = np.empty(len(ids), dtype=np.int64)
    ranks[order] = np.arange(len(ids))
    return ranks


def top_k_positions(scores: np.ndarray, k: int, id_rank: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Positions of the ``k`` highest ``scores``, best first; equal scores ordered by ``id_rank``.

    ``argpartition`` finds the k-th score in O(n); every row tied with it joins the candidates,
    so the cut never depends on the partition's pivot; a stable lexsort then orders them.
    ``mask`` (bool per row) keeps only the rows where it is True.
    """
    scores = np.asarray(scores)
    if mask is not None:
        allowed = np.flatnonzero(mask)
        sub = scores[allowed]
    else:
        allowed, sub = None, scores
    n = sub.shape[0]
    k = min(int(k), n)
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    if k < n:
        part = np.argpartition(-sub, k - 1)[:k]
        cand = np.flatnonzero(sub >= sub[part].min())
    else:
        cand = np.arange(n)
    pos = cand if allowed is None else allowed[cand]
    order = np.lexsort((id_rank[pos], -sub[cand]))  # the last key sorts first: score, then id
    return pos[order[:k]]


class ExactDenseIndex:
    """Brute-force cosine search over L2-normalised float32 rows."""

    def __init__(self, ids: Sequence[str], vectors: np.ndarray, *, normalize: bool = True):
        ids = [str(i) for i in ids]
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(ids):
            raise ValueError(f"ExactDenseIndex: {len(ids)} ids but vectors of shape {vectors.shape}")
        if len(set(ids)) != len(ids):
            raise ValueError("ExactDenseIndex: document ids must be unique")
        self.ids = ids
        self.vectors = l2_normalize(vectors) if normalize else np.ascontiguousarray(vectors)
        self._id_rank = id_ranks(ids)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def top_k(self, scores: np.ndarray, k: int, mask: np.ndarray | None = None) -> np.ndarray:
        """Row positions of the ``k`` best ``scores`` (one query), best first, ties by id."""
        return top_k_positions(scores, k, self._id_rank, mask)

    def search(self, query_vectors: np.ndarray, k: int, *, mask: np.ndarray | None = None,
               normalize: bool = True, batch: int = 256) -> list[list[tuple[str, float]]]:
        """For each query row, ``k`` (id, cosine) pairs, best first. ``mask`` keeps rows where True."""
        q = np.asarray(query_vectors, dtype=np.float32)
        if q.ndim == 1:
            q = q[None, :]
        if q.shape[1] != self.dim:
            raise ValueError(f"query dim {q.shape[1]} != index dim {self.dim}")
        if normalize:
            q = l2_normalize(q)
        if mask is not None:
            mask = np.asarray(mask, dtype=bool)
            if mask.shape != (len(self),):
                raise ValueError(f"mask of shape {mask.shape}, expected ({len(self)},)")
        out: list[list[tuple[str, float]]] = []
        for start in range(0, q.shape[0], batch):
            sims = q[start : start + batch] @ self.vectors.T
            for row in sims:
                top = self.top_k(row, k, mask)
                out.append([(self.ids[i], float(row[i])) for i in top])
        return out

    def retrieve(self, query_ids: Sequence[str], query_vectors: np.ndarray, k: int, *,
                 mask: np.ndarray | None = None) -> Run:
        """A run: {query id: {doc id: cosine}} with ``k`` documents per query."""
        hits = self.search(query_vectors, k, mask=mask)
        return {str(qid): dict(h) for qid, h in zip(query_ids, hits)}

    def save(self, path: str | os.PathLike) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, ids=np.array(self.ids, dtype=object).astype(str), vectors=self.vectors)
        return path if path.suffix == ".npz" else path.with_name(path.name + ".npz")

    @classmethod
    def load(cls, path: str | os.PathLike) -> "ExactDenseIndex":
        with np.load(path, allow_pickle=False) as z:
            return cls(list(z["ids"]), z["vectors"], normalize=False)


# -- embedding texts and queries ------------------------------------------------------------
def embed_texts(embedder, texts: Sequence[str], kind: str = "document", *, batch_size: int = 256,
                progress: bool = True, desc: str | None = None) -> np.ndarray:
    """Embed ``texts`` in batches with a progress bar; rows are L2-normalised float32.

    ``embedder`` is any ``adiyan`` embedder; with a ``CachedEmbedder`` each finished batch is
    stored at once, so an interrupted run resumes where it stopped and a rerun only reads.
    """
    texts = list(texts)
    if not texts:
        return np.zeros((0, embedder.dim), dtype=np.float32)
    parts = []
    with tqdm(total=len(texts), desc=desc or f"embed {kind}s ({embedder.id})", unit="text",
              disable=not progress, leave=False) as bar:
        for start in range(0, len(texts), batch_size):
            chunk = texts[start : start + batch_size]
            parts.append(np.asarray(embedder.embed(chunk, kind), dtype=np.float32))
            bar.update(len(chunk))
    return l2_normalize(np.concatenate(parts, axis=0))


def embed_queries(embedder, queries: Mapping[str, str], *, batch_size: int = 256,
                  progress: bool = True) -> tuple[list[str], np.ndarray]:
    """(query ids, matrix), embedded with the model's query prefix (``kind="query"``)."""
    ids = list(queries)
    return ids, embed_texts(embedder, [queries[q] for q in ids], "query", batch_size=batch_size,
                            progress=progress, desc=f"embed queries ({embedder.id})")
