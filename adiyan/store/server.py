"""A Qdrant server or cluster through the official qdrant-client.

``QdrantClient(path=...)`` / ``(":memory:")`` (local mode) speaks the same API and stands in for
the server in tests; it ignores HNSW settings (brute force). Collection metadata (embedder id,
dimension, normalisation) is kept in Qdrant's own collection ``metadata``.
"""

from __future__ import annotations

import os
import warnings
from typing import Iterable, Sequence

import numpy as np

from .base import (INDEXED_FIELDS, SPARSE_NAME, TITLE_NAME, CollectionMeta, Empty, Filter, Hit, Point, Sparse,
                   StoreError, VectorNames, VectorSpec, check_quantization, check_vector_names, fused_limit,
                   named_vectors_of, settle_ties)
from .edge import EdgeStore


def _models():
    from qdrant_client import models  # heavy, optional: only for store.engine=server / local

    return models


def _to_filter(flt: Filter | None):
    if flt is None:
        return None
    m = _models()

    def one(c):
        if isinstance(c, Empty):
            return m.IsEmptyCondition(is_empty=m.PayloadField(key=c.key))
        return m.FieldCondition(key=c.key, match=m.MatchValue(value=c.value))

    def conds(cs):
        return [one(c) for c in cs] or None

    return m.Filter(must=conds(flt.must), should=conds(flt.should), must_not=conds(flt.must_not))


class ServerStore(VectorNames):
    def __init__(self, url: str | None = None, *, path: str | None = None, api_key: str | None = None,
                 hnsw_m: int = 16, hnsw_ef_construct: int = 100, timeout: int = 60,
                 quantization: str = "none", quantization_rescore: bool = True,
                 quantization_oversampling: float | None = None, indexing_threshold_kb: int | None = None):
        from qdrant_client import QdrantClient  # heavy, optional: only for store.engine=server / local

        if url:
            self.client = QdrantClient(url=url, api_key=api_key, timeout=timeout)
            self.engine = "server"
        else:
            self.client = QdrantClient(path=path) if path and path != ":memory:" else QdrantClient(":memory:")
            self.engine = "local"
        self.where = url or path or ":memory:"
        self.hnsw_m = hnsw_m
        self.hnsw_ef_construct = hnsw_ef_construct
        check_quantization(quantization, quantization_oversampling)
        self.quantization = quantization
        self.quantization_rescore = quantization_rescore
        self.quantization_oversampling = quantization_oversampling
        self.indexing_threshold_kb = indexing_threshold_kb  # the server's optimizer; local mode has none
        if self.engine == "local":
            # Local mode is the server's stand-in: it says, once per call, that it ignores
            # payload indexes and HNSW params. Known and documented; keep test output readable.
            warnings.filterwarnings("ignore", message="Payload indexes have no effect in the local Qdrant")
            warnings.filterwarnings("ignore", message="Local mode performs exact")

    def collection_meta(self, name: str) -> CollectionMeta | None:
        if not self.client.collection_exists(name):
            return None
        info = self.client.get_collection(name)
        md = info.config.metadata or {}
        if "adiyan" not in md:
            raise StoreError(f"collection {name!r} at {self.where} was not created by adiyan (no metadata)")
        return CollectionMeta.from_dict(md["adiyan"])

    def list_collections(self) -> list[str]:
        names = [c.name for c in self.client.get_collections().collections]
        return sorted(n for n in names if self.collection_meta(n) is not None)

    def ensure_collection(self, name: str, *, dim: int, embedder_id: str, normalized: bool = True,
                          vectors: dict[str, VectorSpec] | None = None, title: bool = False) -> CollectionMeta:
        vectors = dict(vectors or {})
        check_vector_names(vectors)
        sparse_names = (SPARSE_NAME, TITLE_NAME) if title else (SPARSE_NAME,)
        meta = self.collection_meta(name)
        if meta is not None:
            meta.check(embedder_id, dim, normalized, vectors=vectors, sparse=sparse_names)
            meta.check_quantization(self.quantization, self.where)
            return meta
        m = _models()
        meta = self._new_meta(name, self.engine, dim, embedder_id, normalized, vectors, sparse_names)
        quant = None
        if self.quantization == "int8":
            quant = m.ScalarQuantization(scalar=m.ScalarQuantizationConfig(type=m.ScalarType.INT8, quantile=0.99,
                                                                           always_ram=True))
        elif self.quantization.startswith("binary"):  # one bit a component, kept in RAM; originals rescore
            query = (m.BinaryQuantizationQueryEncoding.BINARY if self.quantization == "binary_symmetric"
                     else m.BinaryQuantizationQueryEncoding.SCALAR8BITS)
            quant = m.BinaryQuantization(binary=m.BinaryQuantizationConfig(
                always_ram=True, encoding=m.BinaryQuantizationEncoding.ONE_BIT, query_encoding=query))
        dense = m.VectorParams(size=dim, distance=m.Distance.COSINE)
        if vectors:  # the unnamed vector keeps its name "" beside the named ones
            dense = {"": dense, **{n: m.VectorParams(size=v.dim, distance=m.Distance.COSINE) for n, v in vectors.items()}}
        self.client.create_collection(
            name,
            vectors_config=dense,
            sparse_vectors_config={n: m.SparseVectorParams(modifier=m.Modifier.IDF) for n in sparse_names},
            hnsw_config=m.HnswConfigDiff(m=self.hnsw_m, ef_construct=self.hnsw_ef_construct),
            quantization_config=quant,
            optimizers_config=(m.OptimizersConfigDiff(indexing_threshold=self.indexing_threshold_kb)
                               if self.indexing_threshold_kb is not None else None),
            metadata={"adiyan": meta.to_dict()},
        )
        for field in INDEXED_FIELDS:
            self.client.create_payload_index(name, field, m.PayloadSchemaType.KEYWORD)
        return meta

    def drop_collection(self, name: str) -> None:
        if self.client.collection_exists(name):
            self.client.delete_collection(name)

    def upsert(self, name: str, points: Sequence[Point]) -> None:
        if not points:
            return
        m = _models()
        meta = self.collection_meta(name)
        has_title = meta is not None and TITLE_NAME in meta.sparse_names

        def vector(p):
            dense = np.asarray(p.vector, dtype=np.float32)
            if meta is not None and dense.shape != (meta.dim,):
                raise StoreError(f"collection {name!r}: vector of shape {dense.shape} for point {p.id}, "
                                 f"expected ({meta.dim},)")
            named = named_vectors_of(p, meta, name)
            if p.title is not None and not has_title:
                raise StoreError(f"collection {name!r} has no title field (point {p.id})")
            if has_title and p.title is None:
                raise StoreError(f"collection {name!r}: point {p.id} lacks its title vector (store.title_field)")
            if p.sparse is None and not named and p.title is None:
                return dense.tolist()
            out = {"": dense.tolist(), **named}
            if p.sparse is not None:
                out[SPARSE_NAME] = m.SparseVector(indices=list(p.sparse.indices), values=list(p.sparse.values))
            if p.title is not None:
                out[TITLE_NAME] = m.SparseVector(indices=list(p.title.indices), values=list(p.title.values))
            return out

        self.client.upsert(name, points=[m.PointStruct(id=p.id, vector=vector(p), payload=p.payload)
                                         for p in points], wait=True)

    def delete(self, name: str, flt: Filter) -> None:
        m = _models()
        self.client.delete(name, points_selector=m.FilterSelector(filter=_to_filter(flt)), wait=True)

    def set_payload(self, name: str, payload: dict, flt: Filter) -> None:
        self.client.set_payload(name, payload=payload, points=_to_filter(flt), wait=True)

    def search(self, name: str, vector: np.ndarray, limit: int, *, flt: Filter | None = None,
               ef: int | None = None, exact: bool = False, score_threshold: float | None = None,
               using: str | None = None) -> list[Hit]:
        m = _models()
        res = self.client.query_points(
            name, query=np.asarray(vector, dtype=np.float32).tolist(), limit=limit, using=self._using(name, using),
            query_filter=_to_filter(flt), with_payload=True, score_threshold=score_threshold,
            search_params=self._params(ef, exact),
        )
        return [Hit(str(p.id), float(p.score), dict(p.payload or {})) for p in res.points]

    def sparse_search(self, name: str, query: Sparse, limit: int, *, flt: Filter | None = None,
                      using: str = SPARSE_NAME) -> list[Hit]:
        m = _models()
        res = self.client.query_points(
            name, query=m.SparseVector(indices=list(query.indices), values=list(query.values)),
            using=self._sparse_using(name, using),
            limit=limit, query_filter=_to_filter(flt), with_payload=True)
        return [Hit(str(p.id), float(p.score), dict(p.payload or {})) for p in res.points]

    def hybrid_search(self, name: str, vector: np.ndarray, query: Sparse, limit: int, *,
                      flt: Filter | None = None, prefetch: int = 50, rrf_k: int = 60,
                      ef: int | None = None, exact: bool = False, named: dict | None = None,
                      title: Sparse | None = None) -> list[Hit]:
        m = _models()
        f = _to_filter(flt)
        prefetches = [m.Prefetch(query=np.asarray(vector, np.float32).tolist(), limit=prefetch, filter=f,
                                 params=self._params(ef, exact))]
        prefetches += [m.Prefetch(query=np.asarray(v, np.float32).tolist(), using=self._using(name, n), limit=prefetch,
                                  filter=f, params=self._params(ef, exact)) for n, v in sorted((named or {}).items())]
        prefetches.append(m.Prefetch(query=m.SparseVector(indices=list(query.indices), values=list(query.values)),
                                     using=SPARSE_NAME, limit=prefetch, filter=f))
        if title is not None:
            prefetches.append(m.Prefetch(query=m.SparseVector(indices=list(title.indices), values=list(title.values)),
                                         using=self._sparse_using(name, TITLE_NAME), limit=prefetch, filter=f))
        res = self.client.query_points(
            name, prefetch=prefetches,
            query=m.RrfQuery(rrf=m.Rrf(k=rrf_k + 1)), limit=fused_limit(limit, prefetch, len(prefetches)),
            query_filter=f, with_payload=True)
        return settle_ties([Hit(str(p.id), float(p.score), dict(p.payload or {})) for p in res.points], limit)

    def scroll(self, name: str, *, flt: Filter | None = None, with_vectors: bool = False) -> Iterable[Point]:
        offset = None
        while True:
            records, offset = self.client.scroll(name, scroll_filter=_to_filter(flt), limit=1000, offset=offset,
                                                 with_payload=True, with_vectors=with_vectors)
            for r in records:
                if not with_vectors:
                    yield Point(str(r.id), None, dict(r.payload or {}))
                    continue
                vectors = r.vector if isinstance(r.vector, dict) else {"": r.vector}
                v = vectors.get("")

                def sp(x):
                    return None if x is None else Sparse(tuple(int(i) for i in x.indices),
                                                         tuple(float(y) for y in x.values))

                yield Point(str(r.id), np.asarray(v, dtype=np.float32) if v is not None else None,
                            dict(r.payload or {}), sparse=sp(vectors.get(SPARSE_NAME)),
                            named={n: np.asarray(x, dtype=np.float32) for n, x in vectors.items()
                                   if n not in ("", SPARSE_NAME, TITLE_NAME) and x is not None},
                            title=sp(vectors.get(TITLE_NAME)))
            if offset is None:
                break

    def _params(self, ef: int | None, exact: bool):
        m = _models()
        quant = (m.QuantizationSearchParams(ignore=False, rescore=self.quantization_rescore,
                                            oversampling=self.quantization_oversampling)
                 if self.quantization != "none" else None)
        return m.SearchParams(hnsw_ef=ef, exact=exact, quantization=quant)

    def count(self, name: str, flt: Filter | None = None) -> int:
        return int(self.client.count(name, count_filter=_to_filter(flt), exact=True).count)

    def optimize(self, name: str) -> None:
        """A server optimises on its own; nothing to do."""

    def close(self) -> None:
        self.client.close()


def open_store(settings) -> "object":
    """The store named by ``settings.store``: edge (default), server (by URL) or local."""
    sc = settings.store
    if sc.engine == "edge":
        return EdgeStore(settings.paths.data_dir, hnsw_m=sc.hnsw_m, hnsw_ef_construct=sc.hnsw_ef_construct,
                         quantization=sc.quantization, quantization_rescore=sc.quantization_rescore,
                         quantization_oversampling=sc.quantization_oversampling,
                         indexing_threshold_kb=sc.indexing_threshold_kb)
    if sc.engine == "server":
        if not sc.url:
            raise StoreError("store.engine=server needs store.url (e.g. ADIYAN_STORE__URL=http://localhost:6333)")
        return ServerStore(sc.url, api_key=os.environ.get(sc.api_key_env), hnsw_m=sc.hnsw_m,
                           hnsw_ef_construct=sc.hnsw_ef_construct, quantization=sc.quantization,
                           quantization_rescore=sc.quantization_rescore,
                           quantization_oversampling=sc.quantization_oversampling,
                           indexing_threshold_kb=sc.indexing_threshold_kb)
    return ServerStore(path=str(settings.paths.data_dir / "qdrant-local"), hnsw_m=sc.hnsw_m,
                       hnsw_ef_construct=sc.hnsw_ef_construct, quantization=sc.quantization,
                       quantization_rescore=sc.quantization_rescore,
                       quantization_oversampling=sc.quantization_oversampling)
