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

from .cache import PARSED_FILE, CallCache, call_cache
from .config import Settings
from .ingest.rawstore import RawStore
from .kb import KnowledgeBase
from .kb.pages import BookPages
from .memory import Memory
from .models import embedder_from_settings, extra_embedders_from_settings, llm_from_settings
from .retrieval.floor import resolve_floor
from .retrieval import Retriever
from .store import open_store


def open_embedder(settings: Settings, *, cached: bool = True, progress: bool = True):
    """The configured embedder, behind the on-disk embedding cache unless ``cached=False``."""
    return embedder_from_settings(settings, cached=cached, progress=progress)


def open_extra_embedders(settings: Settings, *, progress: bool = True) -> dict:
    """The embedders of ``embedder.extra`` by name, each behind the embedding cache: the named dense
    vectors of the knowledge base. Loaded like the main one (models folder, batch size, threads);
    a server URL or a Matryoshka width applies to the main embedder only."""
    names = list(settings.embedder.extra)
    if len(set(names)) != len(names):
        raise ValueError(f"embedder.extra={names}: a name appears twice")
    if settings.embedder.name in names:
        raise ValueError(f"embedder.extra={names}: {settings.embedder.name!r} is already the main embedder "
                         f"(embedder.name); its vector would be stored twice")
    return extra_embedders_from_settings(settings, names, progress=progress)


def open_llm(settings: Settings):
    return llm_from_settings(settings)


def score_floor(settings: Settings, embedder_id: str) -> float:
    """The floor the pipeline applies to dense scores of ``embedder_id`` under these settings."""
    return resolve_floor(settings.retrieval, embedder_id)


def parse_cache(settings: Settings) -> CallCache | None:
    if not settings.ingest.parse_cache:
        return None
    return call_cache(settings, "parse", PARSED_FILE)


def open_kb(settings: Settings, *, embedder=None, store=None, raw: RawStore | None = None,
            data_dir: str | os.PathLike | None = None, progress: bool = True) -> KnowledgeBase:
    """The configured knowledge base: store engine, embedder (behind its cache), data directory.

    ``data_dir`` overrides ``paths.data_dir`` (the evaluation harness keeps one per index key);
    ``store`` / ``raw`` share an engine or a raw-file store that is already open.
    """
    if data_dir is not None:
        settings = settings.with_overrides({"paths.data_dir": str(data_dir)})
    embedder = embedder if embedder is not None else open_embedder(settings, progress=progress)
    extra = open_extra_embedders(settings, progress=progress)
    owned = store is None  # a store the caller passed stays the caller's to close
    store = open_store(settings) if owned else store
    raw = raw if raw is not None else RawStore(Path(settings.paths.data_dir) / "raw")
    try:
        kb = KnowledgeBase(store, embedder, raw, chunking=settings.chunking, ingest=settings.ingest,
                           collection=settings.store.collection_prefix + "knowledge_base",
                           parse_cache=parse_cache(settings), extra_embedders=extra,
                           title_field=settings.store.title_field)
        kb.book_pages = BookPages(kb, collection=settings.store.collection_prefix + "book_pages",
                                  min_pdf_pages=settings.ingest.book_min_pages)
        kb.book_pages.sync()  # an index built before the collection existed, or a crash after a commit
        return kb
    except BaseException:
        if owned:
            store.close()
        raise


def open_retriever(settings: Settings, kb: KnowledgeBase, llm=None, **kwargs) -> Retriever:
    """The retrieval pipeline of ``settings`` over ``kb`` (see adiyan.retrieval.pipeline)."""
    return Retriever.from_settings(settings, kb, llm, **kwargs)


def describe_engines(settings: Settings, kb: KnowledgeBase | None = None, memory: Memory | None = None) -> dict:
    """Which Qdrant engine the knowledge base and the memory (mem0) each used, and whether it was one.

    mem0 has no provider for Qdrant's embedded edge engine, so under ``store.engine`` edge or local
    the memory runs Qdrant's local mode in ``<data_dir>/memory/qdrant``, apart from the KB's engine;
    only ``store.engine=server`` gives both one engine (the server at ``store.url``). ``kb`` /
    ``memory``: the opened objects (what they actually used); without ``memory``, what
    :func:`open_memory` would use under these settings, with ``used: False``.
    """
    sc, data = settings.store, Path(settings.paths.data_dir)
    if kb is not None:
        store = kb.store
        kb_engine = {"engine": getattr(store, "engine", "edge"),
                     "where": str(getattr(store, "where", None) or getattr(store, "root", ""))}
    else:
        kb_engine = {"engine": sc.engine, "where": sc.url if sc.engine == "server"
                     else str(data / ("qdrant" if sc.engine == "edge" else "qdrant-local"))}
    kb_engine["collections"] = [sc.collection_prefix + "knowledge_base", sc.collection_prefix + "book_pages"]
    if memory is not None:
        mem = {"engine": memory.engine, "where": str(memory.where), "used": True}
    else:
        mem = {"engine": "server" if sc.engine == "server" else "local",
               "where": sc.url if sc.engine == "server" else str(data / "memory" / "qdrant"), "used": False}
    shared = kb_engine["engine"] == mem["engine"] == "server" and kb_engine["where"] == mem["where"]
    return {"knowledge_base": kb_engine, "memory": mem, "shared": shared}


def open_memory(settings: Settings, embedder=None, llm=None, *, infer: bool | None = None) -> Memory:
    """Conversation and coaching memory as the settings describe it."""
    return Memory.from_settings(settings, embedder, llm, infer=infer)
