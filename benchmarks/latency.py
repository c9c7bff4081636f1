"""Query latency p50 / p95 of the embedded engine (EdgeStore): HNSW against exact search, in the same run.

Two collection sizes: the SciFact size (5,183 x 384; the real all-MiniLM-L6-v2 SciFact vectors
when the embedding cache holds all of them, else random unit vectors of that size, and the
JSON says which) and 100,000 synthetic unit vectors. The synthetic set is ``clustered`` by
default: each vector is a SciFact vector (or, without them, one of 2,000 random centres) plus
Gaussian noise of norm ~0.5 (cosine ~0.89 to its centre), searched with the SciFact queries; so
it has the neighbourhood structure of real embeddings. ``--synthetic uniform`` draws uniform
random unit vectors instead: a worst case with no structure, where HNSW (m=16, ef=128) finds
under a fifth of the true top 10 and takes ~10x longer to build; its speed ratio is not
comparable. Each is searched unfiltered and with the
knowledge base's access filter (``visibility == global OR owner_identity == requester``, the
filter every read path sends), once with HNSW (``ef`` = ``store.hnsw_ef``) and once with the
engine's exact search, query by query in alternating order so load on the machine hits both
alike. Reported: p50 / p95 per mode and the ratios exact / HNSW (the reference is exact search,
measured on the same collection, queries and filter), plus HNSW's recall@k against exact.

Making HNSW really run: ``EdgeStore`` creates the payload indexes when it creates the
collection (before ``optimize()`` builds HNSW); the collection is created here with a small
``full_scan_threshold`` (in KB: below it a filtered search falls back to a full scan), and the
shard's optimizer ``indexing_threshold`` is lowered so a SciFact-sized segment (8 MB) is indexed
at all (with the engine's default it stays a plain segment). ``build.indexed_vectors`` shows it.

    python benchmarks/latency.py [--sizes scifact,100000] [--synthetic clustered|uniform] [--queries 200]
                                 [--k 10] [--ef 128] [--out reports/benchmarks/latency.json]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

from _common import SHARED, machine, percentile, write_json

from adiyan.retrieval.hnsw_recall import _shard_info  # segments, points, indexed vectors of a shard

FULL_SCAN_KB = 10  # ~6 vectors of 384 float32: every filtered search goes through HNSW
INDEXING_THRESHOLD_KB = 1  # build HNSW for any segment, however small
OWNERS = 20  # owner_identity = owner-0 .. owner-19
GLOBAL_SHARE = 0.5
REQUESTER = "owner-7"  # the access filter lets ~52.5% of the points through
COLLECTION = "latency"


def scifact_vectors(n_queries: int, seed: int) -> tuple[np.ndarray, np.ndarray, str]:
    """(documents, queries, source): real minilm SciFact vectors from the embedding cache when all
    5,183 documents are there, else random unit vectors of the same shape."""
    from adiyan.cache import EmbeddingCache, embedding_key
    from adiyan.config import load_settings
    from adiyan.eval.beir import doc_text, load_beir

    n, dim = 5183, 384
    settings = load_settings(environ={})
    cache_path = Path(settings.paths.cache_dir) / "embeddings.sqlite"
    if not cache_path.is_absolute():
        cache_path = Path(__file__).resolve().parents[1] / cache_path
    try:
        ds = load_beir(SHARED / "scifact", "test")
    except Exception as exc:  # noqa: BLE001 - no data set: synthetic it is, and the JSON says why
        return (*_random_unit(n, dim, n_queries, seed), f"random unit vectors (SciFact not loadable: {exc})")
    if cache_path.is_file():
        from adiyan.models import load_embedder

        emb = load_embedder("minilm", models_dir=settings.paths.models_dir)  # only for its id and prefixes
        cache = EmbeddingCache(cache_path)
        dkeys = [embedding_key(emb.id, emb.prefix("document"), doc_text(ds.corpus[i])) for i in ds.doc_ids()]
        qkeys = [embedding_key(emb.id, emb.prefix("query"), q) for q in ds.queries.values()]
        got = cache.get_many(dkeys + qkeys)
        if all(k in got for k in dkeys):
            docs = _unit(np.stack([got[k] for k in dkeys]))
            have_q = [k for k in qkeys if k in got]
            if len(have_q) >= n_queries:
                queries = _unit(np.stack([got[k] for k in have_q[:n_queries]]))
                qsrc = "SciFact test queries"
            else:
                rng = np.random.default_rng(seed)
                queries = _unit(docs[rng.choice(len(docs), n_queries, replace=False)]
                                + 0.05 * rng.standard_normal((n_queries, dim)).astype(np.float32))
                qsrc = "perturbed SciFact document vectors (query vectors not cached)"
            return docs, queries, f"real all-MiniLM-L6-v2 SciFact vectors from {cache_path} ({qsrc})"
        missing = sum(k not in got for k in dkeys)
        why = f"{missing} of {n} SciFact documents not in {cache_path}"
    else:
        why = f"no embedding cache at {cache_path}"
    return (*_random_unit(n, dim, n_queries, seed), f"random unit vectors ({why})")


def _unit(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def _random_unit(n: int, dim: int, n_queries: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (_unit(rng.standard_normal((n, dim), dtype=np.float32)),
            _unit(rng.standard_normal((n_queries, dim), dtype=np.float32)))


def clustered_vectors(n: int, n_queries: int, seed: int, sigma: float = 0.5) -> tuple[np.ndarray, np.ndarray, str]:
    """n unit vectors scattered around real SciFact vectors (else random centres), and queries."""
    centres, queries, source = scifact_vectors(n_queries, seed)
    real = source.startswith("real")
    if not real:  # no real vectors: random centres, queries near random centres
        rng = np.random.default_rng(seed + 2)
        centres = _random_unit(2000, 384, 0, seed + 3)[0]
        queries = _unit(centres[rng.integers(0, len(centres), n_queries)]
                        + sigma * rng.standard_normal((n_queries, 384), dtype=np.float32) / np.sqrt(384))
    rng = np.random.default_rng(seed + 4)
    dim = centres.shape[1]
    out = np.empty((n, dim), dtype=np.float32)
    for start in range(0, n, 10_000):
        m = min(10_000, n - start)
        idx = rng.integers(0, len(centres), m)
        out[start:start + m] = centres[idx] + sigma * rng.standard_normal((m, dim), dtype=np.float32) / np.sqrt(dim)
    what = ("SciFact all-MiniLM-L6-v2 vectors, queried with the SciFact test queries" if real
            else "2,000 random unit centres (SciFact vectors not available), queried near random centres")
    return _unit(out), queries, (f"synthetic clustered: {n} unit vectors = centre + Gaussian noise of norm ~{sigma} "
                                 f"(numpy seed {seed}); centres: {what}")


def _force_hnsw(store, name: str, dim: int, m: int, ef_construct: int) -> None:
    """Rewrite the shard's config (same vectors and HNSW parameters as EdgeStore creates) with a
    1 KB indexing threshold, so the next optimize() indexes every segment."""
    import qdrant_edge as qe

    from adiyan.store.base import SPARSE_NAME

    store.close()
    config = qe.EdgeConfig(
        vectors=qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine),
        sparse_vectors={SPARSE_NAME: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        hnsw_config=qe.HnswIndexConfig(m=m, ef_construct=ef_construct, full_scan_threshold=FULL_SCAN_KB),
        optimizers=qe.EdgeOptimizersConfig(indexing_threshold=INDEXING_THRESHOLD_KB))
    shard = qe.EdgeShard.load(str(store.root / name), config)
    shard.flush()
    shard.close()


def measure(vectors: np.ndarray, queries: np.ndarray, *, source: str, k: int = 10, ef: int = 128,
            hnsw_m: int = 16, ef_construct: int = 100, seed: int = 0, warmup: int = 20,
            progress: bool = True) -> dict:
    from adiyan.kb import access_filter
    from adiyan.store import EdgeStore, Point

    n, dim = vectors.shape
    rng = np.random.default_rng(seed + 1)
    owners = rng.integers(0, OWNERS, n)
    is_global = rng.random(n) < GLOBAL_SHARE
    filters = {"none": None, "access_filter": access_filter(REQUESTER, False)}
    passing = int(np.sum(is_global | (owners == int(REQUESTER.split("-")[1]))))
    with tempfile.TemporaryDirectory(prefix="adiyan_latency_") as tmp:
        store = EdgeStore(tmp, hnsw_m=hnsw_m, hnsw_ef_construct=ef_construct, full_scan_threshold=FULL_SCAN_KB)
        try:
            store.ensure_collection(COLLECTION, dim=dim, embedder_id="latency-bench")  # payload indexes first
            t0 = time.perf_counter()
            for start in range(0, n, 1000):
                store.upsert(COLLECTION, [
                    Point(str(uuid.UUID(int=i + 1)), vectors[i],
                          {"source_filename": f"owner-{owners[i]}/doc{i}.md", "chunk_index": 0,
                           "owner_identity": f"owner-{owners[i]}",
                           "visibility": "global" if is_global[i] else "private"})
                    for i in range(start, min(start + 1000, n))])
            upsert_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            store.optimize(COLLECTION)
            default_optimize_s = time.perf_counter() - t0
            default_info = _shard_info(store, COLLECTION)
            _force_hnsw(store, COLLECTION, dim, hnsw_m, ef_construct)
            t0 = time.perf_counter()
            store.optimize(COLLECTION)
            optimize_s = time.perf_counter() - t0
            info = _shard_info(store, COLLECTION)
            if progress:
                print(f"  {n} vectors: upsert {upsert_s:.1f}s, optimize {default_optimize_s:.1f}s + "
                      f"{optimize_s:.1f}s, indexed {info['indexed_vectors']}", flush=True)
            for q in queries[:warmup]:
                store.search(COLLECTION, q, k, ef=ef)
                store.search(COLLECTION, q, k, exact=True)
            rows = []
            for fname, flt in filters.items():
                lat = {"hnsw": [], "exact": []}
                recall = []
                for i, q in enumerate(queries):
                    order = ("hnsw", "exact") if i % 2 == 0 else ("exact", "hnsw")
                    found = {}
                    for mode in order:
                        t = time.perf_counter()
                        hits = store.search(COLLECTION, q, k, flt=flt, ef=ef, exact=(mode == "exact"))
                        lat[mode].append(time.perf_counter() - t)
                        found[mode] = [h.id for h in hits]
                    truth = set(found["exact"])
                    recall.append(len(truth & set(found["hnsw"])) / max(1, len(truth)))
                row = {"filter": fname, "queries": len(queries)}
                for mode in ("hnsw", "exact"):
                    ms = np.asarray(lat[mode]) * 1000.0
                    row[f"{mode}_p50_ms"] = round(percentile(ms, 50), 3)
                    row[f"{mode}_p95_ms"] = round(percentile(ms, 95), 3)
                    row[f"{mode}_mean_ms"] = round(float(ms.mean()), 3)
                row["ratio_exact_to_hnsw_p50"] = round(row["exact_p50_ms"] / row["hnsw_p50_ms"], 2)
                row["ratio_exact_to_hnsw_p95"] = round(row["exact_p95_ms"] / row["hnsw_p95_ms"], 2)
                row[f"hnsw_recall@{k}_vs_exact"] = round(float(np.mean(recall)), 4)
                rows.append(row)
                if progress:
                    print(f"  {fname:<14} HNSW p50 {row['hnsw_p50_ms']:.2f} ms p95 {row['hnsw_p95_ms']:.2f} | "
                          f"exact p50 {row['exact_p50_ms']:.2f} p95 {row['exact_p95_ms']:.2f} | "
                          f"ratio p50 {row['ratio_exact_to_hnsw_p50']}x p95 {row['ratio_exact_to_hnsw_p95']}x | "
                          f"recall {row[f'hnsw_recall@{k}_vs_exact']}", flush=True)
        finally:
            store.close()
    return {
        "vectors": n, "dim": dim, "source": source,
        "payload": {"owners": OWNERS, "global_share": GLOBAL_SHARE, "requester": REQUESTER,
                    "points_passing_access_filter": passing},
        "build": {"upsert_s": round(upsert_s, 2), "optimize_default_s": round(default_optimize_s, 2),
                  "optimize_forced_s": round(optimize_s, 2),
                  "indexed_vectors_engine_default_threshold": default_info["indexed_vectors"],
                  "indexed_vectors": info["indexed_vectors"], "segments": info["segments"]},
        "rows": rows,
    }


def run(sizes: tuple = ("scifact", 100_000), n_queries: int = 200, k: int = 10, ef: int | None = None,
        seed: int = 0, synthetic: str = "clustered", progress: bool = True) -> dict:
    from adiyan.config import load_settings

    sc = load_settings(environ={}).store
    ef = ef or sc.hnsw_ef
    results = []
    for size in sizes:
        if size == "scifact":
            docs, queries, source = scifact_vectors(n_queries, seed)
        elif synthetic == "clustered":
            docs, queries, source = clustered_vectors(int(size), n_queries, seed)
        else:
            docs, queries = _random_unit(int(size), 384, n_queries, seed)
            source = (f"synthetic uniform: random unit vectors ({int(size)} x 384, numpy seed {seed}); no neighbourhood "
                      "structure, a worst case for HNSW recall and build time")
        if progress:
            print(f"[latency] {len(docs)} vectors: {source}", flush=True)
        results.append(measure(docs, queries, source=source, k=k, ef=ef, hnsw_m=sc.hnsw_m,
                               ef_construct=sc.hnsw_ef_construct, seed=seed, progress=progress))
    return {
        "benchmark": "query_latency", "engine": "qdrant-edge (EdgeStore), in-process",
        "reference": "exact search (SearchParams.exact) on the same collection, queries and filter, "
                     "interleaved query by query with the HNSW searches",
        "k": k, "hnsw_ef": ef, "hnsw_m": sc.hnsw_m, "hnsw_ef_construct": sc.hnsw_ef_construct,
        "full_scan_threshold_kb": FULL_SCAN_KB, "indexing_threshold_kb": INDEXING_THRESHOLD_KB,
        "timing": "wall time per EdgeStore.search call (Python wrapper, payload included), one query at a time",
        "sizes": results, "machine": machine(),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="scifact,100000", help="comma-separated: scifact and/or a vector count")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--ef", type=int, default=None, help="HNSW ef (default: store.hnsw_ef)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--synthetic", choices=["clustered", "uniform"], default="clustered",
                   help="how the non-SciFact sizes are generated")
    p.add_argument("--out", default="reports/benchmarks/latency.json")
    a = p.parse_args()
    sizes = tuple(s if s == "scifact" else int(s) for s in a.sizes.split(","))
    write_json(run(sizes, a.queries, a.k, a.ef, a.seed, a.synthetic), a.out)


if __name__ == "__main__":
    main()
