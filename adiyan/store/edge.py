"""Qdrant's embedded engine (qdrant-edge-py): the default store, persistent in the data directory.

Durability: updates go through the shard's write-ahead log (enabled by default), so an update
that returned survives a crash; segments are flushed on ``optimize()`` and ``close()`` rather
than after every update, which would cost an fsync per document.

One EdgeShard per collection under ``<data_dir>/qdrant/<name>/``; the collection's metadata
(embedder id, dimension, normalisation) sits beside it in ``<name>.meta.json`` because a shard
has no metadata of its own. Payload indexes are created when the collection is, i.e. before
``optimize()`` builds HNSW (offline.md: filtered HNSW search returns almost nothing otherwise).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from .base import (INDEXED_FIELDS, SPARSE_NAME, TITLE_NAME, CollectionMeta, Empty, Filter, Hit, Point, Sparse,
                   StoreError, VectorNames, VectorSpec, check_quantization, check_vector_names, fused_limit,
                   named_vectors_of, settle_ties)

_SCROLL_PAGE = 1000


def _edge():
    import qdrant_edge  # native engine, loaded on first store use (keeps `import adiyan` light)

    return qdrant_edge


def _to_edge_filter(flt: Filter | None):
    if flt is None:
        return None
    qe = _edge()

    def one(c):
        if isinstance(c, Empty):
            return qe.FieldCondition(key=c.key, is_empty=True)
        return qe.FieldCondition(key=c.key, match=qe.MatchValue(c.value))

    def conds(cs):
        return [one(c) for c in cs] or None

    return qe.Filter(must=conds(flt.must), should=conds(flt.should), must_not=conds(flt.must_not))


def _sparse_of(v) -> Sparse | None:
    return None if v is None else Sparse(tuple(int(i) for i in v.indices), tuple(float(x) for x in v.values))


def _point_of(r, with_vectors: bool) -> Point:
    """A scrolled record as a Point; with its vectors, every one (named and sparse too), so that
    re-upserting it (the BM25 re-encode) keeps what the point carried."""
    vectors = r.vector if isinstance(r.vector, dict) else {"": r.vector}
    if not with_vectors:
        return Point(str(r.id), None, dict(r.payload or {}))
    v = vectors.get("")
    named = {n: np.asarray(x, dtype=np.float32) for n, x in vectors.items()
             if n not in ("", SPARSE_NAME, TITLE_NAME) and x is not None}
    return Point(str(r.id), np.asarray(v, dtype=np.float32) if v is not None else None, dict(r.payload or {}),
                 sparse=_sparse_of(vectors.get(SPARSE_NAME)), named=named, title=_sparse_of(vectors.get(TITLE_NAME)))


class EdgeStore(VectorNames):
    engine = "edge"

    def __init__(self, data_dir: str | os.PathLike, *, hnsw_m: int = 16, hnsw_ef_construct: int = 100,
                 full_scan_threshold: int = 1000, quantization: str = "none", quantization_rescore: bool = True,
                 indexing_threshold_kb: int | None = None, quantization_oversampling: float | None = None):
        check_quantization(quantization, quantization_oversampling)
        self.root = Path(data_dir) / "qdrant"
        self.root.mkdir(parents=True, exist_ok=True)
        self.hnsw_m = hnsw_m
        self.hnsw_ef_construct = hnsw_ef_construct
        self.quantization = quantization  # applies to collections this store creates
        self.quantization_rescore = quantization_rescore
        self.quantization_oversampling = quantization_oversampling
        self.indexing_threshold_kb = indexing_threshold_kb
        self.full_scan_threshold = full_scan_threshold
        self._shards: dict[str, object] = {}
        self._lock = threading.RLock()

    # -- collections -------------------------------------------------------------------
    def _meta_path(self, name: str) -> Path:
        return self.root / f"{name}.meta.json"

    def collection_meta(self, name: str) -> CollectionMeta | None:
        p = self._meta_path(name)
        if not p.is_file():
            return None
        return CollectionMeta.from_dict(json.loads(p.read_text()))

    def list_collections(self) -> list[str]:
        return sorted(p.name[: -len(".meta.json")] for p in self.root.glob("*.meta.json"))

    def ensure_collection(self, name: str, *, dim: int, embedder_id: str, normalized: bool = True,
                          vectors: dict[str, VectorSpec] | None = None, title: bool = False) -> CollectionMeta:
        vectors = dict(vectors or {})
        check_vector_names(vectors)
        sparse_names = (SPARSE_NAME, TITLE_NAME) if title else (SPARSE_NAME,)
        with self._lock:
            meta = self.collection_meta(name)
            if meta is not None:
                meta.check(embedder_id, dim, normalized, vectors=vectors, sparse=sparse_names)
                meta.check_quantization(self.quantization, str(self.root))
                self._shard(name)
                return meta
            qe = _edge()
            hnsw = qe.HnswIndexConfig(m=self.hnsw_m, ef_construct=self.hnsw_ef_construct,
                                      full_scan_threshold=self.full_scan_threshold)
            quant = None
            if self.quantization == "int8":
                quant = qe.ScalarQuantizationConfig(type=qe.ScalarType.Int8, quantile=0.99, always_ram=True)
            elif self.quantization.startswith("binary"):  # one bit a component, kept in RAM; originals rescore
                query = (qe.BinaryQuantizationQueryEncoding.Binary if self.quantization == "binary_symmetric"
                         else qe.BinaryQuantizationQueryEncoding.Scalar8Bits)
                quant = qe.BinaryQuantizationConfig(always_ram=True, encoding=qe.BinaryQuantizationEncoding.OneBit,
                                                    query_encoding=query)

            def params(size: int):
                return qe.EdgeVectorParams(size=size, distance=qe.Distance.Cosine, quantization_config=quant)

            # the unnamed vector keeps its name "" (the layout of every collection without named vectors)
            dense = params(dim) if not vectors else {"": params(dim), **{n: params(v.dim) for n, v in vectors.items()}}
            config = qe.EdgeConfig(vectors=dense,
                                   sparse_vectors={n: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)
                                                   for n in sparse_names},
                                   hnsw_config=hnsw, optimizers=self._optimizers())
            shard = self._open_shard(lambda: qe.EdgeShard.create(str(self.root / name), config), name)
            for field in INDEXED_FIELDS:
                shard.update(qe.UpdateOperation.create_field_index(field, qe.PayloadSchemaType.Keyword))
            shard.flush()
            self._shards[name] = shard
            meta = self._new_meta(name, "edge", dim, embedder_id, normalized, vectors, sparse_names)
            tmp = self._meta_path(name).with_suffix(".tmp")
            tmp.write_text(json.dumps(meta.to_dict(), indent=2))
            tmp.replace(self._meta_path(name))  # meta appears only once the shard exists
            return meta

    def _shard(self, name: str):
        with self._lock:
            shard = self._shards.get(name)
            if shard is None:
                if self.collection_meta(name) is None:
                    raise StoreError(f"collection {name!r} does not exist in {self.root}")
                shard = self._open_shard(lambda: _edge().EdgeShard.load(str(self.root / name)), name)
                self._shards[name] = shard
            return shard

    def _open_shard(self, opener, name: str):
        """Qdrant's engine locks a shard's WAL; a second process gets a bare WouldBlock. Say so."""
        try:
            return opener()
        except Exception as exc:  # noqa: BLE001 - re-raised, named
            if "WouldBlock" in str(exc) or "Resource temporarily unavailable" in str(exc):
                raise StoreError(
                    f"{self.root}: collection {name!r} is in use by another process (the embedded engine "
                    f"allows one process per data directory; stop it, or point this one at a Qdrant "
                    f"server with store.engine=server / store.url)") from exc
            raise

    def drop_collection(self, name: str) -> None:
        with self._lock:
            shard = self._shards.pop(name, None)
            if shard is not None:
                shard.close()
            self._meta_path(name).unlink(missing_ok=True)
            shutil.rmtree(self.root / name, ignore_errors=True)

    # -- data ----------------------------------------------------------------------------
    def upsert(self, name: str, points: Sequence[Point]) -> None:
        if not points:
            return
        qe = _edge()
        meta = self.collection_meta(name)
        pts = []
        for p in points:
            vec = np.asarray(p.vector, dtype=np.float32)
            if meta and vec.shape != (meta.dim,):
                raise StoreError(f"collection {name!r}: vector of shape {vec.shape} for point {p.id}, expected ({meta.dim},)")
            vector = vec.tolist()
            named = named_vectors_of(p, meta, name)
            title = self._title_of(p, meta, name)
            if p.sparse is not None or named or title is not None:
                vector = {"": vector, **named}
                if p.sparse is not None:
                    vector[SPARSE_NAME] = qe.SparseVector(list(p.sparse.indices), list(p.sparse.values))
                if title is not None:
                    vector[TITLE_NAME] = qe.SparseVector(list(title.indices), list(title.values))
            pts.append(qe.Point(id=p.id, vector=vector, payload=p.payload))
        with self._lock:
            shard = self._shard(name)
            shard.update(qe.UpdateOperation.upsert_points(pts))

    @staticmethod
    def _title_of(p: Point, meta: CollectionMeta | None, name: str) -> Sparse | None:
        """The point's title vector when the collection has the field (refused on one without it)."""
        has = meta is not None and TITLE_NAME in meta.sparse_names
        if p.title is not None and not has:
            raise StoreError(f"collection {name!r} has no title field (point {p.id})")
        if has and p.title is None:
            raise StoreError(f"collection {name!r}: point {p.id} lacks its title vector (store.title_field)")
        return p.title

    def delete(self, name: str, flt: Filter) -> None:
        qe = _edge()
        with self._lock:
            shard = self._shard(name)
            shard.update(qe.UpdateOperation.delete_points_by_filter(_to_edge_filter(flt)))

    def set_payload(self, name: str, payload: dict, flt: Filter) -> None:
        qe = _edge()
        with self._lock:
            shard = self._shard(name)
            shard.update(qe.UpdateOperation.set_payload_by_filter(_to_edge_filter(flt), payload))

    def search(self, name: str, vector: np.ndarray, limit: int, *, flt: Filter | None = None,
               ef: int | None = None, exact: bool = False, score_threshold: float | None = None,
               using: str | None = None) -> list[Hit]:
        qe = _edge()
        req = qe.QueryRequest(
            limit=limit,
            query=qe.Query.Nearest(np.asarray(vector, dtype=np.float32).tolist(), using=self._using(name, using)),
            filter=_to_edge_filter(flt),
            with_payload=True,
            score_threshold=score_threshold,
            params=self._params(ef, exact),
        )
        with self._lock:
            res = self._shard(name).query(req)
        return [Hit(str(r.id), float(r.score), dict(r.payload or {})) for r in res]

    def _optimizers(self):
        if self.indexing_threshold_kb is None:
            return None
        return _edge().EdgeOptimizersConfig(indexing_threshold=self.indexing_threshold_kb)

    def _params(self, ef: int | None, exact: bool):
        qe = _edge()
        quant = None
        if self.quantization != "none":  # the collection was built with it (ensure_collection checks)
            quant = qe.QuantizationSearchParams(ignore=False, rescore=self.quantization_rescore,
                                                oversampling=self.quantization_oversampling)
        return qe.SearchParams(hnsw_ef=ef, exact=exact, quantization=quant)

    def disk_usage(self, name: str) -> dict[str, int]:
        """Bytes on disk of the collection's shard, by part.

        ``segments`` is everything under ``segments/`` (much of it preallocated pages for
        payloads, sparse vectors and deletion flags, so it says little at small sizes);
        ``dense_vectors`` the float32 matrix files, ``quantized`` the int8 or binary codes, ``hnsw`` the
        dense vectors' graph; ``wal`` the write-ahead log (preallocated in fixed-size files).
        """
        root = self.root / name
        out = {"segments": 0, "dense_vectors": 0, "quantized": 0, "hnsw": 0, "wal": 0}
        if not root.is_dir():
            return out
        for f in root.rglob("*"):
            if not f.is_file():
                continue
            parts = f.relative_to(root).parts
            size = f.stat().st_size
            if parts[0] == "wal":
                out["wal"] += size
                continue
            if parts[0] != "segments":
                continue
            out["segments"] += size
            sub = parts[2] if len(parts) > 2 else ""
            if sub == "vector_storage":
                if f.name.startswith("quantized"):
                    out["quantized"] += size
                elif "deleted" not in parts and not f.name.endswith((".json", "status.dat")):
                    out["dense_vectors"] += size
            elif sub == "vector_index":
                out["hnsw"] += size
        return out

    def sparse_search(self, name: str, query: Sparse, limit: int, *, flt: Filter | None = None,
                      using: str = SPARSE_NAME) -> list[Hit]:
        qe = _edge()
        req = qe.QueryRequest(limit=limit, with_payload=True, filter=_to_edge_filter(flt),
                              query=qe.Query.Nearest(qe.SparseVector(list(query.indices), list(query.values)),
                                                     using=self._sparse_using(name, using)))
        with self._lock:
            res = self._shard(name).query(req)
        return [Hit(str(r.id), float(r.score), dict(r.payload or {})) for r in res]

    def hybrid_search(self, name: str, vector: np.ndarray, query: Sparse, limit: int, *,
                      flt: Filter | None = None, prefetch: int = 50, rrf_k: int = 60,
                      ef: int | None = None, exact: bool = False, named: dict | None = None,
                      title: Sparse | None = None) -> list[Hit]:
        qe = _edge()
        ef_filter = _to_edge_filter(flt)
        prefetches = [qe.Prefetch(limit=prefetch, query=qe.Query.Nearest(np.asarray(vector, np.float32).tolist()),
                                  filter=ef_filter, params=self._params(ef, exact))]
        prefetches += [qe.Prefetch(limit=prefetch, filter=ef_filter, params=self._params(ef, exact),
                                   query=qe.Query.Nearest(np.asarray(v, np.float32).tolist(), using=self._using(name, n)))
                       for n, v in sorted((named or {}).items())]
        prefetches.append(qe.Prefetch(limit=prefetch, filter=ef_filter,
                                      query=qe.Query.Nearest(qe.SparseVector(list(query.indices), list(query.values)),
                                                             using=SPARSE_NAME)))
        if title is not None:
            prefetches.append(qe.Prefetch(limit=prefetch, filter=ef_filter, query=qe.Query.Nearest(
                qe.SparseVector(list(title.indices), list(title.values)), using=self._sparse_using(name, TITLE_NAME))))
        req = qe.QueryRequest(limit=fused_limit(limit, prefetch, len(prefetches)), prefetches=prefetches,
                              query=qe.Fusion.Rrf(k=rrf_k + 1), filter=ef_filter, with_payload=True)
        with self._lock:
            res = self._shard(name).query(req)
        return settle_ties([Hit(str(r.id), float(r.score), dict(r.payload or {})) for r in res], limit)

    def scroll(self, name: str, *, flt: Filter | None = None, with_vectors: bool = False) -> Iterable[Point]:
        qe = _edge()
        offset = None
        while True:
            with self._lock:
                records, offset = self._shard(name).scroll(qe.ScrollRequest(
                    offset=offset, limit=_SCROLL_PAGE, filter=_to_edge_filter(flt),
                    with_payload=True, with_vector=with_vectors))
            for r in records:
                yield _point_of(r, with_vectors)
            if offset is None:
                break

    def count(self, name: str, flt: Filter | None = None) -> int:
        qe = _edge()
        with self._lock:
            return int(self._shard(name).count(qe.CountRequest(filter=_to_edge_filter(flt), exact=True)))

    def optimize(self, name: str) -> None:
        with self._lock:
            shard = self._shard(name)
            shard.optimize()
            shard.flush()

    def close(self) -> None:
        with self._lock:
            for shard in self._shards.values():
                shard.close()
            self._shards.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
