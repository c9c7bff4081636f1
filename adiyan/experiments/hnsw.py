"""The HNSW experiment (notebooks/hnsw.ipynb; sweep hnsw): recall against exact search, and latency.

It measures the vector engine itself on raw vector sets (seeded synthetic clusters, or SciFact's
MiniLM vectors from the embedding cache), not the knowledge base: no query transformation, no
floor, no re-rank, no top-k cut. So it honours ``store.hnsw_*`` only and refuses, by name, any
``retrieval.*`` setting that differs from its default (``refuse_settings``).

Indexes are built once per (vectors, m, ef_construct) in ``data_dir/sweep/hnsw`` under a lock
and, within a process (the sweep's persistent kernel), vector sets, opened indexes and exact
truths are kept for the next point.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import qdrant_edge as qe
from tqdm.auto import tqdm

from ..cache import EmbeddingCache, embedding_key
from ..eval.beir import load_beir, resolve_beir
from ..eval.harness import dir_lock, held_by_another, refuse_repeats, replica
from ..eval.ir_metrics import per_query
from ..factory import open_embedder
from ..models.base import l2_normalize
from ..retrieval.dense import ExactDenseIndex, embed_texts
from ..retrieval.hnsw_recall import visibility
from ..retrieval.pipeline import refuse_settings
from ..store import Cond, EdgeStore, Filter, Point
from .common import PointResult
from .scoring import merge, score_groups

HNSW_COLLECTION = "hnsw_sweep"
VECTOR_SETS = ("synthetic-20k", "scifact-minilm")
ENTRY_POINT = "the hnsw experiment"

_LOCK = threading.RLock()
_VECTORS: dict[tuple, "VectorSet"] = {}
_INDEXES: dict[str, "HnswIndex"] = {}
_TRUTH: dict[tuple, list[list[str]]] = {}
_EXACT: dict[str, ExactDenseIndex] = {}


def _sha(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


@dataclass
class VectorSet:
    name: str
    ids: list[str]
    vectors: Any  # float32, L2-normalised
    queries: Any
    query_ids: list[str]
    info: dict
    qrels: dict | None = None  # {query id: {doc id: relevance}} when the vectors come from a judged set

    @property
    def key(self) -> str:
        return _sha({"name": self.name, **{k: v for k, v in self.info.items()
                                           if k in ("seed", "n", "dim", "source_hash")}})[:12]


def synthetic_vectors(n: int = 20_000, dim: int = 384, *, n_queries: int = 200, clusters: int = 100,
                      spread: float = 1.0, seed: int = 0) -> VectorSet:
    """A seeded mixture of ``clusters`` Gaussian blobs on the unit sphere (queries from the same law).

    Unstructured Gaussian noise in 384-d is an unrealistically hard case for any graph index;
    clustered data with noise as large as the centres' spread is closer to text embeddings.
    """
    rng = np.random.default_rng(seed)
    centres = l2_normalize(rng.standard_normal((clusters, dim)).astype(np.float32))

    def draw(m):
        c = centres[rng.integers(0, clusters, m)]
        return l2_normalize((c + spread * rng.standard_normal((m, dim)).astype(np.float32) / math.sqrt(dim)))

    vecs, qs = draw(n), draw(n_queries)
    return VectorSet(f"synthetic-{n // 1000}k" if n % 1000 == 0 else f"synthetic-{n}", [str(i) for i in range(n)],
                     vecs, qs, [f"q{i}" for i in range(n_queries)],
                     {"seed": seed, "n": n, "dim": dim, "clusters": clusters, "spread": spread,
                      "queries": n_queries, "source": "synthetic"})


def scifact_vectors(settings, *, n_queries: int | None = 200, embed_missing: bool = False,
                    progress: bool = False) -> VectorSet:
    """SciFact (test) documents and queries as all-MiniLM-L6-v2 vectors, read from the embedding cache.

    Raises ``LookupError`` when they are not cached and ``embed_missing`` is off (embedding the
    5,183 documents takes minutes: ``benchmarks/scifact.py`` fills the cache).
    """
    path = resolve_beir("scifact", settings.paths.datasets_dir, settings.paths.cache_dir)
    ds = load_beir(path, "test")
    ids, texts = ds.doc_ids(), ds.doc_texts()
    qids = list(ds.queries)[: n_queries or None]
    qtexts = [ds.queries[q] for q in qids]
    cache = EmbeddingCache(Path(settings.paths.cache_dir) / "embeddings.sqlite")
    dkeys = [embedding_key("minilm", "", t) for t in texts]
    qkeys = [embedding_key("minilm", "", t) for t in qtexts]
    found = cache.get_many(dkeys + qkeys)
    missing = len(set(dkeys + qkeys) - set(found))
    if missing:
        if not embed_missing:
            raise LookupError(f"{missing} SciFact minilm vectors are not in {cache.path}; run benchmarks/scifact.py "
                              "or pass embed_missing=True")
        emb = open_embedder(settings.with_overrides({"embedder.name": "minilm", "embedder.truncate_dim": None}),
                            progress=progress)
        embed_texts(emb, texts, "document", progress=progress)
        embed_texts(emb, qtexts, "query", progress=progress)
        found = cache.get_many(dkeys + qkeys)
    vecs = l2_normalize(np.stack([found[k] for k in dkeys]).astype(np.float32))
    qv = l2_normalize(np.stack([found[k] for k in qkeys]).astype(np.float32))
    src_hash = _sha({"docs": dkeys[:50] + dkeys[-50:], "n": len(dkeys), "q": qkeys})
    return VectorSet("scifact-minilm", ids, vecs, qv, qids,
                     {"n": len(ids), "dim": int(vecs.shape[1]), "queries": len(qids), "source": str(path),
                      "source_hash": src_hash, "embedder": "minilm", "seed": 0},
                     qrels={q: dict(ds.qrels[q]) for q in qids})


def vector_set(name: str, settings, **kw) -> VectorSet:
    """``synthetic-20k`` (or ``synthetic-N``) or ``scifact-minilm``, kept per process."""
    refuse_settings(settings, ENTRY_POINT, honoured=set())
    refuse_repeats(settings, ENTRY_POINT)  # eval.repeats: invoke eval on a question set only
    key = (name, json.dumps(kw, sort_keys=True, default=str))
    with _LOCK:
        if key not in _VECTORS:
            if name.startswith("synthetic"):
                n = name.split("-", 1)[1] if "-" in name else "20k"
                n = int(n[:-1]) * 1000 if n.endswith("k") else int(n)
                _VECTORS[key] = synthetic_vectors(n, **{k: v for k, v in kw.items()
                                                        if k in ("dim", "n_queries", "clusters", "spread", "seed")})
            elif name == "scifact-minilm":
                _VECTORS[key] = scifact_vectors(settings, **{k: v for k, v in kw.items()
                                                             if k in ("n_queries", "embed_missing")})
            else:
                raise ValueError(f"unknown vector set {name!r}; choose one of {VECTOR_SETS}")
        return _VECTORS[key]


@dataclass
class HnswIndex:
    store: Any
    data_dir: Path
    build: dict
    visibility: list[str]


def _build_index(vs: VectorSet, kdir: Path, key: dict, vis: list[str], *, m: int, ef_construct: int,
                 progress: bool) -> None:
    """Upsert the vectors, then force HNSW: the shard's indexing threshold lowered before ``optimize()``."""
    if kdir.exists():
        shutil.rmtree(kdir)
    store = EdgeStore(kdir, hnsw_m=m, hnsw_ef_construct=ef_construct)
    dim = int(vs.vectors.shape[1])
    store.ensure_collection(HNSW_COLLECTION, dim=dim, embedder_id=vs.name)
    t0 = time.perf_counter()
    for s in tqdm(range(0, len(vs.ids), 1000), desc=f"upsert {vs.name}", disable=not progress, leave=False):
        store.upsert(HNSW_COLLECTION, [Point(i, vs.vectors[i], {"doc_id": vs.ids[i], "visibility": vis[i]})
                                       for i in range(s, min(s + 1000, len(vs.ids)))])
    upsert_s = time.perf_counter() - t0
    store.close()
    cfg = qe.EdgeConfig(vectors=qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine),
                        hnsw_config=qe.HnswIndexConfig(m=m, ef_construct=ef_construct,
                                                       full_scan_threshold=store.full_scan_threshold),
                        optimizers=qe.EdgeOptimizersConfig(indexing_threshold=1))
    shard = qe.EdgeShard.load(str(store.root / HNSW_COLLECTION), cfg)
    t0 = time.perf_counter()
    shard.optimize()
    shard.flush()
    optimize_s = time.perf_counter() - t0
    info = shard.info()
    shard.close()
    build = {"key": key, "points": len(vs.ids), "dim": dim, "m": m, "ef_construct": ef_construct,
             "upsert_s": round(upsert_s, 3), "optimize_s": round(optimize_s, 3),
             "indexed_vectors": int(info.indexed_vectors_count), "segments": int(info.segments_count),
             "built_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    (kdir / "build.json.tmp").write_text(json.dumps(build, indent=2), encoding="utf-8")
    (kdir / "build.json.tmp").replace(kdir / "build.json")


def hnsw_index(vs: VectorSet, settings, *, m: int = 16, ef_construct: int = 100, seed: int = 0,
               progress: bool = False) -> HnswIndex:
    """An HNSW index of the vector set in Qdrant's embedded engine, built once per (vectors, m, ef_construct).

    The shard's indexing threshold is lowered before ``optimize()`` so HNSW is really built
    whatever the size (with the engine's default a collection of SciFact's size stays a plain
    segment and every search is exact); ``build.json`` records the indexed vector count.
    """
    refuse_settings(settings, ENTRY_POINT, honoured=set())
    refuse_repeats(settings, ENTRY_POINT)  # eval.repeats: invoke eval on a question set only
    key = {"vectors": vs.key, "name": vs.name, "m": m, "ef_construct": ef_construct, "seed": seed}
    kdir = Path(settings.paths.data_dir) / "sweep" / "hnsw" / f"{vs.name}-{_sha(key)[:12]}"
    memo_key = str(kdir.resolve())
    with _LOCK:
        if memo_key in _INDEXES:
            return _INDEXES[memo_key]
        vis = [visibility(i, seed) for i in vs.ids]
        if not (kdir / "build.json").is_file():
            with dir_lock(kdir):
                if not (kdir / "build.json").is_file():
                    _build_index(vs, kdir, key, vis, m=m, ef_construct=ef_construct, progress=progress)
        build = json.loads((kdir / "build.json").read_text(encoding="utf-8"))
        data_dir = kdir
        store = EdgeStore(data_dir, hnsw_m=m, hnsw_ef_construct=ef_construct)
        try:
            store.count(HNSW_COLLECTION)
        except Exception as exc:  # noqa: BLE001 - only "held by another process" is handled
            if not held_by_another(exc):
                raise
            data_dir = replica(kdir)  # a parallel worker holds the shard: work on a private copy
            store = EdgeStore(data_dir, hnsw_m=m, hnsw_ef_construct=ef_construct)
            store.count(HNSW_COLLECTION)
        idx = HnswIndex(store, data_dir, build, vis)
        _INDEXES[memo_key] = idx
        return idx


def _exact_truth(vs: VectorSet, k: int, global_only: bool, vis: list[str]) -> list[list[str]]:
    key = (vs.key, k, global_only)
    with _LOCK:
        if key not in _TRUTH:
            exact = _EXACT.get(vs.key) or _EXACT.setdefault(vs.key, ExactDenseIndex(vs.ids, vs.vectors, normalize=False))
            mask = np.array([v == "global" for v in vis]) if global_only else None
            _TRUTH[key] = [[d for d, _ in hits] for hits in exact.search(vs.queries, k, mask=mask)]
        return _TRUTH[key]


def hnsw_point(vs: VectorSet, settings, *, ef: int, access_filter: bool, k: int = 10, m: int = 16,
               ef_construct: int = 100, warmup: int = 20, progress: bool = False) -> PointResult:
    """Recall@k of HNSW against exact search, and latency, at one ``ef``, with or without the access filter.

    The filtered case searches ``visibility == global`` (about half the points, by a seeded hash
    of the id, as :mod:`adiyan.retrieval.hnsw_recall`); its truth is the exact top-k among those.
    Latency is wall time per ``EdgeStore.search`` call, one query at a time after a warm-up.
    Private points returned under the filter are counted (must be 0 at every ef). Scored like a run
    (issue 44.8): on a judged set (SciFact) nDCG@10 and recall@10 of the HNSW top k against the qrels
    (``retrieval.*``; under the filter only the global half of the corpus can be found), and the
    regression cases (``hnsw-filter-no-private`` applies under the filter; the rest do not apply, with why).
    """
    refuse_settings(settings, ENTRY_POINT, honoured=set())
    refuse_repeats(settings, ENTRY_POINT)  # eval.repeats: invoke eval on a question set only
    idx = hnsw_index(vs, settings, m=m, ef_construct=ef_construct, progress=progress)
    flt = Filter(must=(Cond("visibility", "global"),)) if access_filter else None
    truth = _exact_truth(vs, k, access_filter, idx.visibility)
    vis_of = dict(zip(vs.ids, idx.visibility))
    for q in vs.queries[:warmup]:
        idx.store.search(HNSW_COLLECTION, q, k, flt=flt, ef=ef)
    rows, lat, exact_lat, leaked, run = [], [], [], 0, {}
    for qid, q, t in zip(vs.query_ids, vs.queries, truth):
        t0 = time.perf_counter()
        hits = idx.store.search(HNSW_COLLECTION, q, k, flt=flt, ef=ef)
        dt = time.perf_counter() - t0
        found = [h.payload["doc_id"] for h in hits]
        run[qid] = {h.payload["doc_id"]: float(h.score) for h in hits}
        leaked += sum(1 for d in found if vis_of[d] != "global") if access_filter else 0
        lat.append(dt)
        rows.append({"qid": qid, f"recall@{k}": len(set(found) & set(t)) / k, "latency_ms": dt * 1000})
    for q in vs.queries[:50]:  # the engine's brute force on the same filter, for scale
        t0 = time.perf_counter()
        idx.store.search(HNSW_COLLECTION, q, k, flt=flt, exact=True)
        exact_lat.append(time.perf_counter() - t0)
    lat_ms = np.asarray(lat) * 1000
    metrics = {f"recall@{k}": float(np.mean([r[f"recall@{k}"] for r in rows])),
               "p50_ms": float(np.percentile(lat_ms, 50)), "p95_ms": float(np.percentile(lat_ms, 95)),
               "mean_ms": float(lat_ms.mean()), "exact_p50_ms": float(np.percentile(np.asarray(exact_lat) * 1000, 50)),
               "private_returned": float(leaked), "build_s": idx.build["upsert_s"] + idx.build["optimize_s"],
               "indexed_share": idx.build["indexed_vectors"] / max(1, idx.build["points"])}
    info = {"vectors": vs.name, "points": len(vs.ids), "dim": int(vs.vectors.shape[1]), "queries": len(rows),
            "ef": ef, "filter": "visibility == global" if access_filter else None, "k": k,
            "build": {k_: v for k_, v in idx.build.items() if k_ != "key"}, "vector_info": vs.info}
    groups = {"sweep": {**metrics, "access_filter": float(access_filter)}}
    if vs.qrels:  # a judged set: the HNSW ranking scored against people's relevance labels, like a run
        judged = {q: vs.qrels[q] for q in run if vs.qrels.get(q)}
        groups["retrieval"] = {}
        for name in ("ndcg@10", "recall@10"):
            pq = per_query(judged, {q: run[q] for q in judged}, name)
            groups["retrieval"][name] = float(np.mean(list(pq.values())))
            for r in rows:
                if r["qid"] in pq:
                    r[f"retrieval.{name}"] = pq[r["qid"]]
        metrics.update({f"retrieval.{n}": v for n, v in groups["retrieval"].items()})
    else:
        info["not_applicable"] = "retrieval.ndcg@10 / recall@10: synthetic vectors have no relevance labels"
    return merge(PointResult(metrics, rows, info),
                 score_groups(groups, vs.name, vs.info.get("embedder", "synthetic"),
                              incidents_why="no incident concerns the HNSW index (the access filter's incident, 2, "
                                            "is replayed by invoke eval through the read paths)"))
