"""The vector-store interface both Qdrant engines implement, and the same-model rule."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Protocol, Sequence

import numpy as np

# Payload fields the access policy and the read paths filter on; indexed before HNSW is built.
INDEXED_FIELDS = ("source_filename", "owner_identity", "visibility", "doc_version")


class StoreError(RuntimeError):
    """The store refused an operation; the message names the collection and the reason."""


class EmbedderMismatchError(StoreError):
    """A collection is read or written with an embedder other than the one that built it.

    Vectors from two models live in unrelated spaces: similarity between them is noise, so
    the store refuses instead of answering wrongly.
    """


@dataclass(frozen=True)
class Cond:
    """payload[key] == value (value may be str, int or bool)."""

    key: str
    value: Any


@dataclass(frozen=True)
class Empty:
    """payload[key] is missing, null or empty (legacy chunks without a visibility)."""

    key: str


def _holds(c: "Cond | Empty", payload: dict) -> bool:
    if isinstance(c, Empty):
        return payload.get(c.key) in (None, "", [])
    return payload.get(c.key) == c.value


@dataclass(frozen=True)
class Filter:
    """All of ``must``, at least one of ``should`` (when given), none of ``must_not``."""

    must: tuple[Cond | Empty, ...] = ()
    should: tuple[Cond | Empty, ...] = ()
    must_not: tuple[Cond | Empty, ...] = ()

    def matches(self, payload: dict) -> bool:
        """Reference semantics, used by tests and the exact NumPy baseline."""
        ok = all(_holds(c, payload) for c in self.must)
        if self.should:
            ok = ok and any(_holds(c, payload) for c in self.should)
        return ok and not any(_holds(c, payload) for c in self.must_not)

    def and_(self, other: "Filter | None") -> "Filter":
        if other is None:
            return self
        if self.should and other.should:
            raise ValueError("cannot combine two filters that both have should-clauses")
        return Filter(self.must + other.must, self.should or other.should, self.must_not + other.must_not)


@dataclass(frozen=True)
class CollectionMeta:
    name: str
    dim: int
    embedder_id: str
    normalized: bool
    distance: str = "cosine"
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"name": self.name, "dim": self.dim, "embedder_id": self.embedder_id,
                "normalized": self.normalized, "distance": self.distance, "extra": self.extra}

    @classmethod
    def from_dict(cls, d: dict) -> "CollectionMeta":
        return cls(d["name"], int(d["dim"]), d["embedder_id"], bool(d["normalized"]),
                   d.get("distance", "cosine"), d.get("extra") or {})

    def check_quantization(self, quantization: str, where: str) -> None:
        """A collection keeps the quantization it was built with: opening it with another is refused
        (the setting would otherwise be silently ignored, or searched with the wrong parameters)."""
        built = self.extra.get("quantization", "none")
        if built != quantization:
            raise StoreError(f"collection {self.name!r} at {where} was built with store.quantization={built} but is "
                             f"being opened with store.quantization={quantization}; set store.quantization={built}, "
                             f"or re-ingest into a new data directory (or drop the collection)")

    @property
    def vectors(self) -> dict[str, "VectorSpec"]:
        """The collection's named dense vectors beside the unnamed one (empty for most collections)."""
        return {n: VectorSpec.from_dict(d) for n, d in (self.extra.get("vectors") or {}).items()}

    @property
    def sparse_names(self) -> tuple[str, ...]:
        """The sparse vectors every point carries: ``bm25`` and, when built with it, ``title``."""
        return tuple(self.extra.get("sparse") or (SPARSE_NAME,))

    def check(self, embedder_id: str, dim: int, normalized: bool = True, *,
              vectors: "dict[str, VectorSpec] | None" = None, sparse: tuple[str, ...] | None = None) -> None:
        """Refuse a collection built with another model, other named vectors (``vectors``: the
        caller's named vectors, checked when given) or other sparse fields (``sparse``, when given)."""
        if int(self.extra.get("schema", 1)) < SCHEMA_VERSION:
            raise StoreError(f"collection {self.name!r} has layout version {self.extra.get('schema', 1)} "
                             f"(current {SCHEMA_VERSION}: adds sparse BM25 vectors); re-ingest into a new "
                             f"data directory or drop the collection")
        if (self.embedder_id, self.dim, self.normalized) != (embedder_id, dim, normalized):
            raise EmbedderMismatchError(
                f"collection {self.name!r} was built with embedder {self.embedder_id!r} "
                f"(dim {self.dim}, normalized={self.normalized}) but is being used with "
                f"{embedder_id!r} (dim {dim}, normalized={normalized}). Vectors from different "
                f"models are not comparable: re-ingest into a new collection or data directory, "
                f"or switch the embedder back."
            )
        if vectors is not None and self.vectors != dict(vectors):
            have = {n: v.embedder_id for n, v in self.vectors.items()}
            want = {n: v.embedder_id for n, v in vectors.items()}
            raise EmbedderMismatchError(
                f"collection {self.name!r} was built with the named vectors {have or 'none'} (embedder.extra) "
                f"but is being used with {want or 'none'}: a chunk without a vector is invisible to that "
                f"signal and a vector from another model is noise. Re-ingest into a new collection or "
                f"data directory, or set embedder.extra back.")
        if sparse is not None and self.sparse_names != tuple(sparse):
            raise EmbedderMismatchError(
                f"collection {self.name!r} was built with the sparse fields {list(self.sparse_names)} but is being "
                f"used with {list(sparse)} (store.title_field): re-ingest into a new collection or data directory, "
                f"or set store.title_field back.")


class VectorNames:
    """The vector names a query may use, checked against the collection's description (both engines):
    a store with ``collection_meta(name)``."""

    def _new_meta(self, name: str, engine: str, dim: int, embedder_id: str, normalized: bool,
                  vectors: dict, sparse_names: tuple[str, ...]) -> CollectionMeta:
        """The description of a collection this store creates: its model, layout, HNSW and
        quantization settings, its named vectors and sparse fields (only when it has more than one)."""
        extra = {"engine": engine, "schema": SCHEMA_VERSION, "hnsw_m": self.hnsw_m,
                 "hnsw_ef_construct": self.hnsw_ef_construct, "quantization": self.quantization}
        if vectors:
            extra["vectors"] = {n: v.to_dict() for n, v in vectors.items()}
        if tuple(sparse_names) != (SPARSE_NAME,):
            extra["sparse"] = list(sparse_names)
        return CollectionMeta(name, dim, embedder_id, normalized, extra=extra)

    def _using(self, name: str, using: str | None) -> str | None:
        """A named dense vector the collection has (None: the unnamed one); else refused by name."""
        if using is None or using == "":
            return None
        meta = self.collection_meta(name)
        if meta is None or using not in meta.vectors:
            raise StoreError(f"collection {name!r} has no named vector {using!r} "
                             f"(it has {sorted(meta.vectors) if meta else 'none'})")
        return using

    def _sparse_using(self, name: str, using: str) -> str:
        if using != SPARSE_NAME:
            meta = self.collection_meta(name)
            if meta is None or using not in meta.sparse_names:
                raise StoreError(f"collection {name!r} has no sparse vector {using!r} "
                                 f"(it has {list(meta.sparse_names) if meta else 'none'})")
        return using


# store.quantization: float32, scalar int8, one bit a component (queries as 8-bit scalars / binarised)
QUANTIZATIONS = ("none", "int8", "binary", "binary_symmetric")


def check_quantization(quantization: str, oversampling: float | None = None) -> None:
    """Refuse, by setting name, a quantization the stores do not build."""
    if quantization not in QUANTIZATIONS:
        raise StoreError(f"store.quantization must be one of {', '.join(QUANTIZATIONS)}, got {quantization!r}")
    if oversampling is not None and not oversampling >= 1.0:
        raise StoreError(f"store.quantization_oversampling must be at least 1.0, got {oversampling!r}")
    if oversampling is not None and quantization == "none":
        raise StoreError(f"store.quantization_oversampling={oversampling} has nothing to act on: it acts only "
                         "with store.quantization=int8 or binary (here none); set that, or remove the setting")


# Version of the collection layout; 2 added the sparse BM25 vector. Older collections are refused
# with a clear error instead of failing on the first hybrid query.
SCHEMA_VERSION = 2
SPARSE_NAME = "bm25"  # the sparse (lexical) vector every collection carries beside the dense one
TITLE_NAME = "title"  # the optional second sparse vector: BM25 over the chunk's document title
RESERVED_NAMES = ("", SPARSE_NAME, TITLE_NAME, "dense")  # not available as names of named dense vectors


@dataclass(frozen=True)
class VectorSpec:
    """A named dense vector of a collection (Qdrant named vectors): its width and the identity of
    the embedder that writes and queries it (the same-model rule holds per vector)."""

    dim: int
    embedder_id: str
    normalized: bool = True

    def to_dict(self) -> dict:
        return {"dim": self.dim, "embedder_id": self.embedder_id, "normalized": self.normalized}

    @classmethod
    def from_dict(cls, d: dict) -> "VectorSpec":
        return cls(int(d["dim"]), d["embedder_id"], bool(d.get("normalized", True)))


def check_vector_names(names) -> None:
    """Named dense vectors need names of their own: not the unnamed vector's, not a sparse one's."""
    for n in names:
        if not n or n in RESERVED_NAMES:
            raise StoreError(f"named vector {n!r}: the names {list(RESERVED_NAMES)} are reserved")


def named_vectors_of(p: "Point", meta: "CollectionMeta | None", collection: str) -> dict:
    """A point's named dense vectors as float32 lists, checked against the collection: every named
    vector present with its width, none the collection does not have (both engines call this)."""
    want = meta.vectors if meta is not None else {}
    extra = set(p.named) - set(want)
    if extra:
        raise StoreError(f"collection {collection!r} has no named vector {sorted(extra)[0]!r} (point {p.id}); "
                         f"it has {sorted(want) or 'none'}")
    out = {}
    for n, spec in want.items():
        if n not in p.named:
            raise StoreError(f"collection {collection!r}: point {p.id} lacks the named vector {n!r} (every chunk "
                             f"carries every named vector, or a signal would not see it)")
        v = np.asarray(p.named[n], dtype=np.float32)
        if v.shape != (spec.dim,):
            raise StoreError(f"collection {collection!r}: named vector {n!r} of shape {v.shape} for point {p.id}, "
                             f"expected ({spec.dim},)")
        out[n] = v.tolist()
    return out


@dataclass(frozen=True)
class Sparse:
    indices: tuple[int, ...]
    values: tuple[float, ...]


@dataclass
class Point:
    id: str
    vector: np.ndarray
    payload: dict
    sparse: Sparse | None = None
    named: dict = field(default_factory=dict)  # name -> vector: the collection's named dense vectors
    title: Sparse | None = None  # the title field's sparse vector (collections built with store.title_field)


class LexicalEncoder:
    """BM25 sparse vectors (Qdrant's own tokenizer, stemmer and stop words; IDF is applied by the
    engine through the collection's IDF modifier), shared by both engines."""

    def __init__(self, k: float = 1.2, b: float = 0.75, avg_len: float = 256.0):
        import qdrant_edge as qe  # native engine, loaded on first use (keeps `import adiyan` light)

        self._model = qe.Bm25(qe.Bm25Config(k=k, b=b, avg_len=avg_len, language="english"))

    def document(self, text: str) -> Sparse:
        v = self._model.embed_document(text)
        return Sparse(tuple(v.indices), tuple(v.values))

    def query(self, text: str) -> Sparse:
        v = self._model.embed_query(text)
        return Sparse(tuple(v.indices), tuple(v.values))


@dataclass
class Hit:
    id: str
    score: float
    payload: dict


class VectorStore(Protocol):
    """What the knowledge base needs from a vector database; two Qdrant engines implement it."""

    engine: str

    def ensure_collection(self, name: str, *, dim: int, embedder_id: str, normalized: bool = True,
                          vectors: dict[str, VectorSpec] | None = None, title: bool = False) -> CollectionMeta:
        """Create the collection, or check the existing one (model, named vectors, title field).
        ``vectors``: named dense vectors beside the unnamed one; ``title``: a second sparse vector."""
        ...

    def collection_meta(self, name: str) -> CollectionMeta | None: ...

    def list_collections(self) -> list[str]: ...

    def drop_collection(self, name: str) -> None: ...

    def upsert(self, name: str, points: Sequence[Point]) -> None: ...

    def delete(self, name: str, flt: Filter) -> None: ...

    def set_payload(self, name: str, payload: dict, flt: Filter) -> None: ...

    def search(self, name: str, vector: np.ndarray, limit: int, *, flt: Filter | None = None,
               ef: int | None = None, exact: bool = False, score_threshold: float | None = None,
               using: str | None = None) -> list[Hit]:
        """Nearest neighbours of ``vector`` in the unnamed dense vector, or in the named one ``using``."""
        ...

    def sparse_search(self, name: str, query: Sparse, limit: int, *, flt: Filter | None = None,
                      using: str = SPARSE_NAME) -> list[Hit]:
        """BM25 over the ``bm25`` sparse vector (or ``title``)."""
        ...

    def hybrid_search(self, name: str, vector: np.ndarray, query: Sparse, limit: int, *,
                      flt: Filter | None = None, prefetch: int = 50, rrf_k: int = 60,
                      ef: int | None = None, exact: bool = False, named: dict | None = None,
                      title: Sparse | None = None) -> list[Hit]:
        """Dense and sparse candidates fused by RRF inside the engine; the filter applies to every list.
        ``named`` ({vector name: query vector}) and ``title`` add one prefetch list each.

        ``rrf_k`` follows Cormack et al. (2009): score = Σ 1/(k + rank), ranks from 1. Qdrant counts
        ranks from 0 and scores 1/(k + rank0), so the engines are given k + 1: the scores equal
        the paper's formula exactly (checked in the store contract tests). Equal fused scores are
        common (a document ranked r in one list ties with one ranked r in the other) and the
        engine orders them differently from one process to the next, so implementations fetch the
        whole fused list (at most 2 x prefetch) and cut it with :func:`settle_ties`.
        """
        ...

    def scroll(self, name: str, *, flt: Filter | None = None, with_vectors: bool = False) -> Iterable[Point]: ...

    def count(self, name: str, flt: Filter | None = None) -> int: ...

    def optimize(self, name: str) -> None: ...

    def close(self) -> None: ...


def fused_limit(limit: int, prefetch: int, lists: int = 2) -> int:
    """How many fused hits to ask the engine for so that no tie straddles the cut: all of them."""
    return max(int(limit), int(lists) * int(prefetch))


def settle_ties(hits: list, limit: int) -> list:
    """Hits by score descending, equal scores by point id, cut to ``limit``: the same order in every
    process (Qdrant's fusion returns tied points in an order that varies between runs)."""
    return sorted(hits, key=lambda h: (-h.score, h.id))[:limit]
