"""The embedding-size experiment (notebooks/dims.ipynb; sweep dims): Matryoshka widths and int8 storage.

Retrieval quality at one width is :func:`adiyan.experiments.retrieval.evaluate_retrieval` with a
:class:`TruncatedEmbedder` (the full vector embedded and cached once, every width read from it);
:func:`storage_report` measures what the engine stores and how int8 quantization changes its
ranking against exact float32.
"""

from __future__ import annotations

import numpy as np

from ..eval.harness import open_index
from ..factory import open_embedder
from .common import PointResult
from .retrieval import evaluate_retrieval


class TruncatedEmbedder:
    """Matryoshka truncation of a cached full-width embedder: the first ``dim`` components, re-normalised.

    The full vector is embedded (and cached) once; every width reads it from the cache, so a
    sweep over widths embeds each text once. Equal to the library's own ``truncate_dim`` (which
    truncates the raw vector, then normalises: normalising first only rescales the row).
    """

    def __init__(self, base, dim: int):
        if dim > base.dim:
            raise ValueError(f"cannot truncate {base.id} ({base.dim}-d) to {dim}")
        self.base, self.dim = base, int(dim)
        self.id = base.id if dim == base.dim else f"{base.id}@{dim}"
        identity = getattr(base, "identity", None) or base.id  # where it runs and its weights (caches, indexes)
        self.identity = identity if dim == base.dim else f"{identity}@{dim}"
        self.normalized = True
        self.stats = base.stats

    def prefix(self, kind):
        return self.base.prefix(kind)

    def input_window(self):  # the same model reads the same tokens at every width (chunking.keep_within_window)
        return getattr(self.base, "input_window", lambda: None)()

    def count_tokens(self, text):
        return getattr(self.base, "count_tokens", lambda t: None)(text)

    def describe(self) -> dict:
        return {**self.base.describe(), "id": self.id, "dim": self.dim, "truncated_from": self.base.dim}

    def embed(self, texts, kind="document"):
        v = np.asarray(self.base.embed(texts, kind), dtype=np.float32)[:, : self.dim]
        n = np.linalg.norm(v, axis=1, keepdims=True)
        return (v / np.where(n == 0, 1, n)).astype(np.float32)


def width_embedder(settings, *, dim: int | None = None, progress: bool = False):
    """The configured embedder at full width behind the embedding cache, truncated to ``dim``
    (default ``embedder.truncate_dim``) by :class:`TruncatedEmbedder` when that is narrower."""
    full = open_embedder(settings.with_overrides({"embedder.truncate_dim": None}), progress=progress)
    dim = dim or settings.embedder.truncate_dim
    return TruncatedEmbedder(full, dim) if dim and dim < full.dim else full


def storage_report(settings, evalset=None, *, embedder=None, k: int = 10) -> dict:
    """Storage of the index's chunk vectors and what the engine's int8 quantization does to the ranking.

    Measured, not computed: the index is the evaluation harness's knowledge base in Qdrant's
    embedded engine, built with ``store.quantization`` (none | int8, scalar int8 codes from the
    0.99 quantile | binary, one bit a component) and ``store.indexing_threshold_kb`` (set it to 1 so a small collection is
    indexed and quantized at all). ``engine_recall@10`` is the overlap of the engine's top 10
    (HNSW, with int8 codes and ``store.quantization_rescore``) with the exact float32 top 10
    computed in NumPy from the stored vectors; the disk figures are the shard's files by part
    (float32 matrix, int8 codes, HNSW graph, and all segment files, many of them preallocated).
    The seed's arithmetic, 4 bytes a component (768 x 4 = 3 KB a vector, 1M chunks ~ 3 GB), is
    given beside it per width, and the same for int8 (1 byte a component).
    """
    index = open_index(settings, evalset, embedder=embedder)
    kb = index.kb
    pts = list(kb.store.scroll(kb.collection, with_vectors=True))
    ids = [p.id for p in pts]
    X = np.stack([p.vector for p in pts]).astype(np.float32)
    Q = np.asarray(kb.embedder.embed([q.question for q in index.evalset.questions], "query"), dtype=np.float32)
    kk = min(k, len(ids))
    top_f = np.argsort(-(Q @ X.T), axis=1)[:, :kk]
    recall = []
    for q, truth in zip(Q, top_f):
        got = {hit.id for hit in kb.store.search(kb.collection, q, kk, ef=max(settings.store.hnsw_ef, kk))}
        recall.append(len(got & {ids[i] for i in truth}) / kk)
    dim = X.shape[1]
    quant = settings.store.quantization
    usage = kb.store.disk_usage(kb.collection) if hasattr(kb.store, "disk_usage") else {}
    # what the search reads per vector: float32, int8 codes, or one bit a component in 128-bit words
    per_vec = {"int8": dim, "binary": 16 * -(-dim // 128), "binary_symmetric": 16 * -(-dim // 128)}.get(quant, 4 * dim)
    return {"engine_recall@10": float(np.mean(recall)), "dim": dim, "vectors": len(ids),
            "bytes_per_vector": per_vec, "float32_bytes_per_vector": 4 * dim, "int8_bytes_per_vector": dim,
            "projected_1M_chunks_gb": per_vec * 1_000_000 / 1e9,
            "projected_1M_chunks_float32_gb": 4 * dim * 1_000_000 / 1e9,
            "disk_segments_kb": usage.get("segments", 0) / 1024,
            "disk_dense_vectors_kb": usage.get("dense_vectors", 0) / 1024,
            "disk_quantized_kb": usage.get("quantized", 0) / 1024, "disk_hnsw_kb": usage.get("hnsw", 0) / 1024,
            "quantized_built": float(usage.get("quantized", 0) > 0), "per_question_engine_recall": recall}


def evaluate_dims(settings, evalset=None, *, dim: int | None = None, progress: bool = False,
                  **scoring) -> PointResult:
    """Retrieval quality at one embedding width (Matryoshka truncation of ``embedder.name``, re-normalised)
    and storage (``store.quantization`` none | int8 | binary), with the engine's recall against exact float32.
    ``scoring`` (score, answer_questions, regression_cases) goes to :func:`evaluate_retrieval`."""
    emb = width_embedder(settings, dim=dim, progress=progress)
    res = evaluate_retrieval(settings, evalset, embedder=emb, progress=progress, **scoring)
    st = storage_report(settings, evalset, embedder=emb)
    per_q = st.pop("per_question_engine_recall")
    for row, r in zip(res.per_question, per_q):
        row["engine_recall@10"] = r
    res.metrics.update({k: float(v) for k, v in st.items()})
    res.info.update({"embedder": emb.id, "full_dim": getattr(getattr(emb, "base", emb), "dim", emb.dim),
                     "quantization": ({"int8": "Qdrant scalar int8 (quantile 0.99)", "binary": "Qdrant binary (one bit)",
                                       "binary_symmetric": "Qdrant binary (one bit, binarised queries)"}
                                      [settings.store.quantization] + ", rescore "
                                      f"{'on' if settings.store.quantization_rescore else 'off'}"
                                      if settings.store.quantization != "none" else "none (float32)")})
    return res
