"""The chunking experiment (notebooks/chunking.ipynb; sweeps chunking, chunking_qa).

Retrieval quality per chunking configuration is :func:`adiyan.experiments.retrieval.evaluate_retrieval`
(each configuration has an index of its own in the evaluation harness); this module adds what a
configuration costs from cold, whatever the caches hold, and the chunks per document of its index.
"""

from __future__ import annotations

import time

from ..chunking import chunk_text
from ..eval.harness import open_index
from ..factory import parse_cache
from ..ingest.parse import parse_cached


def chunking_cost(settings, evalset=None, *, embedder=None, max_documents: int | None = 60) -> dict:
    """What indexing with this chunking costs from cold, independent of what the caches hold.

    The index of a sweep point may have been built from a warm embedding cache, so its build
    time says what that run paid, not what the configuration costs. Here the (cached) parsed
    text of up to ``max_documents`` documents is chunked and the chunks embedded with the model
    itself, bypassing the embedding cache: ``cold_chunking_s`` (the semantic chunker embeds
    every sentence), ``cold_embed_s`` and their sum ``cold_index_s``, with ``cost_documents``
    and ``cost_chunks`` (the index's chunks when every document is counted).
    """
    index = open_index(settings, evalset, embedder=embedder)
    emb = index.kb.embedder
    raw = getattr(emb, "inner", emb)  # the model behind the embedding cache
    docs = index.evalset.documents[:max_documents] if max_documents else index.evalset.documents
    cache = parse_cache(settings)
    texts = []
    for d in docs:
        text, report = parse_cached(d.path.read_bytes(), d.filename, settings.ingest, cache)
        texts.append((text, bool(report.get("authored_markdown"))))
    t0 = time.perf_counter()
    chunks = [c.text for text, md in texts
              for c in chunk_text(text, settings.chunking, embedder=raw, authored_markdown=md)]
    chunk_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    raw.embed(chunks, "document")
    embed_s = time.perf_counter() - t0
    return {"cold_chunking_s": chunk_s, "cold_embed_s": embed_s, "cold_index_s": chunk_s + embed_s,
            "cost_documents": float(len(docs)), "cost_chunks": float(len(chunks))}


def chunk_table(settings, evalset=None, *, embedder=None):
    """Chunks per document of the configuration's index (a DataFrame)."""
    import pandas as pd  # heavy: only notebooks ask for tables

    index = open_index(settings, evalset, embedder=embedder)
    return pd.DataFrame([{"document": s, "chunks": n} for s, n in index.build["chunks_per_doc"].items()])
