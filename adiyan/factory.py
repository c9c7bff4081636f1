"""Factories: the one place components are assembled from the settings, so nothing is built by hand.

``open_kb`` (store engine, embedder behind its cache, raw-file store, parse cache),
``open_retriever`` (the retrieval pipeline over a KB), ``open_memory`` (mem0 conversation and
coaching memory), ``open_llm`` / ``open_embedder`` (models by name), ``score_floor`` (the
floor the pipeline applies for an embedder). Each component receives only the config sections
it uses.
"""

from __future__ import annotations

import os
from pathlib import Path

from .cache import CallCache
from .config import Settings
from .ingest.rawstore import RawStore
from .kb import KnowledgeBase
from .memory import Memory
from .models import embedder_from_settings, llm_from_settings
from .retrieval.floor import resolve_floor
from .retrieval.pipeline import Retriever
from .store import open_store


def open_embedder(settings: Settings, *, cached: bool = True, progress: bool = True):
    """The configured embedder, behind the on-disk embedding cache unless ``cached=False``."""
    return embedder_from_settings(settings, cached=cached, progress=progress)


def open_llm(settings: Settings):
    return llm_from_settings(settings)


def score_floor(settings: Settings, embedder_id: str) -> float:
    """The floor the pipeline applies to dense scores of ``embedder_id`` under these settings."""
    return resolve_floor(settings.retrieval, embedder_id)


def parse_cache(settings: Settings) -> CallCache | None:
    if not settings.ingest.parse_cache:
        return None
    return CallCache(Path(settings.paths.cache_dir) / "parsed.sqlite", "parse")


def open_kb(settings: Settings, *, embedder=None, store=None, raw: RawStore | None = None,
            data_dir: str | os.PathLike | None = None, progress: bool = True) -> KnowledgeBase:
    """The configured knowledge base: store engine, embedder (behind its cache), data directory.

    ``data_dir`` overrides ``paths.data_dir`` (the evaluation harness keeps one per index key);
    ``store`` / ``raw`` share an engine or a raw-file store that is already open.
    """
    if data_dir is not None:
        settings = settings.with_overrides({"paths.data_dir": str(data_dir)})
    embedder = embedder if embedder is not None else open_embedder(settings, progress=progress)
    owned = store is None  # a store the caller passed stays the caller's to close
    store = open_store(settings) if owned else store
    raw = raw if raw is not None else RawStore(Path(settings.paths.data_dir) / "raw")
    try:
        return KnowledgeBase(store, embedder, raw, chunking=settings.chunking, ingest=settings.ingest,
                             collection=settings.store.collection_prefix + "knowledge_base",
                             parse_cache=parse_cache(settings))
    except BaseException:
        if owned:
            store.close()
        raise


def open_retriever(settings: Settings, kb: KnowledgeBase, llm=None, **kwargs) -> Retriever:
    """The retrieval pipeline of ``settings`` over ``kb`` (see adiyan.retrieval.pipeline)."""
    return Retriever.from_settings(settings, kb, llm, **kwargs)


def open_memory(settings: Settings, embedder=None, llm=None, *, infer: bool | None = None) -> Memory:
    """Conversation and coaching memory as the settings describe it."""
    return Memory.from_settings(settings, embedder, llm, infer=infer)
