"""How close Qdrant's HNSW comes to exact search, per ``ef``, with and without an access filter.

Builds a collection in Qdrant's embedded engine (``adiyan.store.EdgeStore``; its payload
indexes exist before ``optimize()`` builds HNSW), then for each ``ef`` compares the engine's
top-k with ``ExactDenseIndex``'s (brute force, the ground truth):

    recall@k = mean over queries of |HNSW top-k ∩ exact top-k| / k

The filtered case gives each document a ``visibility`` of ``global`` or ``private`` from a
seeded hash of its id (about half each) and searches with ``visibility == global``, the shape
of the knowledge base's access policy; its ground truth is the exact top-k among global
documents. Latency is wall time per ``EdgeStore.search`` call (Python wrapper included), one
query at a time after a warm-up, reported as p50 / p95 in milliseconds.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from pathlib import Path
from typing import Sequence

import numpy as np
from tqdm.auto import tqdm

from ..store import Cond, EdgeStore, Filter, Point
from .dense import ExactDenseIndex

EFS = (8, 16, 32, 64, 128, 256)
COLLECTION = "hnsw_recall"
INDEXING_THRESHOLD_KB = 1  # index every segment with HNSW, however small


def visibility(doc_id: str, seed: int = 0) -> str:
    """``global`` or ``private`` by the low bit of sha256(seed, id): stable, about half each."""
    digest = hashlib.sha256(f"{seed}\x00{doc_id}".encode("utf-8")).digest()
    return "global" if digest[0] & 1 == 0 else "private"


def _shard_path(store, name: str) -> str:
    return str(store.root / name)


def _shard_info(store, name: str) -> dict:
    """Segments and HNSW-indexed vectors, read from the shard on disk (the store reopens it lazily)."""
    import qdrant_edge as qe  # native engine, loaded on first use, as in adiyan.store.edge

    store.close()
    shard = qe.EdgeShard.load(_shard_path(store, name))
    try:
        info = shard.info()
        return {"segments": int(info.segments_count), "points": int(info.points_count),
                "indexed_vectors": int(info.indexed_vectors_count)}
    finally:
        shard.close()


def _lower_indexing_threshold(store, name: str, dim: int, hnsw_m: int, ef_construct: int) -> None:
    """Rewrite the shard's optimizer config so the next ``optimize()`` builds HNSW at any size.

    ``EdgeShard.load(path, config)`` checks the config against the shard and persists it; the
    vector and HNSW parameters repeat what ``EdgeStore.ensure_collection`` created.
    """
    import qdrant_edge as qe  # native engine, loaded on first use, as in adiyan.store.edge

    store.close()
    config = qe.EdgeConfig(
        vectors=qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine),
        hnsw_config=qe.HnswIndexConfig(m=hnsw_m, ef_construct=ef_construct,
                                       full_scan_threshold=store.full_scan_threshold),
        optimizers=qe.EdgeOptimizersConfig(indexing_threshold=INDEXING_THRESHOLD_KB))
    shard = qe.EdgeShard.load(_shard_path(store, name), config)
    shard.flush()
    shard.close()


def _percentile_ms(seconds: list[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(seconds) * 1000.0, q)), 4)


def measure_hnsw_recall(ids: Sequence[str], vectors: np.ndarray, query_vectors: np.ndarray, *, k: int = 10,
                        efs: Sequence[int] = EFS, seed: int = 0, hnsw_m: int = 16, ef_construct: int = 100,
                        data_dir: str | None = None, embedder_id: str = "vectors", warmup: int = 20,
                        force_index: bool = True, progress: bool = True) -> dict:
    """Recall@k of HNSW vs exact search and p50/p95 latency for each ef, unfiltered and filtered.

    Returns ``{"config", "build", "rows": [{"ef", "filter", "recall@k", "p50_ms", "p95_ms",
    "mean_ms"}...], "exact_engine": {...}, "min_ef_reaching_0.99": {"none": ef, "global_only": ef}}``.
    The collection lives in ``data_dir`` (a temporary folder by default, removed afterwards;
    in a given ``data_dir`` a collection named ``hnsw_recall`` is replaced).

    With ``force_index`` (default) the shard's indexing threshold is lowered so HNSW is really
    built: with the engine's default threshold a collection the size of SciFact (5,183 x 384
    float32, 8 MB) stays a plain segment, ``indexed_vectors`` is 0 and every search is exact,
    so a recall table would measure brute force. ``build`` reports both counts.
    """
    ids = [str(i) for i in ids]
    vectors = np.asarray(vectors, dtype=np.float32)
    queries = np.asarray(query_vectors, dtype=np.float32)
    exact = ExactDenseIndex(ids, vectors)
    vis = [visibility(i, seed) for i in ids]
    vis_by_id = dict(zip(ids, vis))
    mask = np.array([v == "global" for v in vis])
    truth = {
        "none": [[d for d, _ in hits] for hits in exact.search(queries, k)],
        "global_only": [[d for d, _ in hits] for hits in exact.search(queries, k, mask=mask)],
    }
    filters = {"none": None, "global_only": Filter(must=(Cond("visibility", "global"),))}

    tmp = None
    if data_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="adiyan_hnsw_")
        data_dir = tmp.name
    store = EdgeStore(Path(data_dir), hnsw_m=hnsw_m, hnsw_ef_construct=ef_construct)
    try:
        store.drop_collection(COLLECTION)
        store.ensure_collection(COLLECTION, dim=exact.dim, embedder_id=embedder_id)  # payload indexes first
        t0 = time.perf_counter()
        for start in range(0, len(ids), 1000):
            store.upsert(COLLECTION, [Point(i, exact.vectors[i], {"doc_id": ids[i], "visibility": vis[i]})
                                      for i in range(start, min(start + 1000, len(ids)))])
        t_upsert = time.perf_counter() - t0
        store.optimize(COLLECTION)
        default_info = _shard_info(store, COLLECTION)
        if force_index:
            _lower_indexing_threshold(store, COLLECTION, exact.dim, hnsw_m, ef_construct)
        t0 = time.perf_counter()
        store.optimize(COLLECTION)
        t_optimize = time.perf_counter() - t0
        info = _shard_info(store, COLLECTION)

        def run(flt, ef, exact_search=False):
            found, lat = [], []
            for q in queries:
                t = time.perf_counter()
                hits = store.search(COLLECTION, q, k, flt=flt, ef=ef, exact=exact_search)
                lat.append(time.perf_counter() - t)
                found.append([h.payload["doc_id"] for h in hits])
            return found, lat

        def recall(found, name):
            return round(float(np.mean([len(set(f) & set(t)) / k for f, t in zip(found, truth[name])])), 4)

        for q in queries[:warmup]:
            store.search(COLLECTION, q, k, ef=max(efs))
        rows = []
        jobs = [(ef, name) for ef in efs for name in filters]
        for ef, name in tqdm(jobs, desc="HNSW recall per ef", disable=not progress, leave=False):
            found, lat = run(filters[name], ef)
            # the access filter must hold at every ef: any private hit is a leak, counted here
            leaked = sum(1 for f in found for d in f if vis_by_id[d] != "global") if name == "global_only" else None
            rows.append({"ef": ef, "filter": name, f"recall@{k}": recall(found, name),
                         "returned_per_query": round(float(np.mean([len(f) for f in found])), 3),
                         "private_returned": leaked,
                         "p50_ms": _percentile_ms(lat, 50), "p95_ms": _percentile_ms(lat, 95),
                         "mean_ms": round(float(np.mean(lat)) * 1000, 4)})
        exact_rows = {}
        for name, flt in filters.items():  # the engine's own brute force: must equal NumPy's
            found, lat = run(flt, None, exact_search=True)
            exact_rows[name] = {f"recall@{k}": recall(found, name), "p50_ms": _percentile_ms(lat, 50),
                                "p95_ms": _percentile_ms(lat, 95)}
    finally:
        store.close()
        if tmp is not None:
            tmp.cleanup()

    def first_ef(name):
        ok = [r["ef"] for r in rows if r["filter"] == name and r[f"recall@{k}"] >= 0.99]
        return min(ok) if ok else None

    return {
        "config": {"k": k, "efs": list(efs), "seed": seed, "hnsw_m": hnsw_m, "ef_construct": ef_construct,
                   "points": len(ids), "dim": exact.dim, "queries": int(queries.shape[0]),
                   "engine": "qdrant-edge (EdgeStore)", "filter": "visibility == global",
                   "global_points": int(mask.sum())},
        "build": {"upsert_s": round(t_upsert, 3), "optimize_s": round(t_optimize, 3), "force_index": force_index,
                  "indexing_threshold_kb": INDEXING_THRESHOLD_KB if force_index else "engine default",
                  "indexed_vectors": info["indexed_vectors"], "segments": info["segments"],
                  "indexed_vectors_with_engine_defaults": default_info["indexed_vectors"]},
        "rows": rows,
        "exact_engine": exact_rows,
        "min_ef_reaching_0.99": {name: first_ef(name) for name in filters},
    }
