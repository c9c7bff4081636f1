"""LlamaIndex node parsers as chunking strategies (``chunking.strategy: llamaindex:<name>``).

So the chunking sweep measures LlamaIndex's splitters beside ours instead of arguing about them
(issue 15). llama-index-core 0.14's parsers, each fed one document at a time:

``llamaindex:sentence``  ``SentenceSplitter`` (paragraphs, then NLTK punkt sentences, packed)
``llamaindex:token``     ``TokenTextSplitter`` (token windows cut at spaces / line breaks)
``llamaindex:markdown``  ``MarkdownNodeParser`` (one node per heading section, the heading line
                         kept in the node), then each section capped by ``SentenceSplitter`` as a
                         LlamaIndex ingestion pipeline would; for Markdown that was not authored
                         (converter output) it falls back to ``llamaindex:sentence``, as our
                         ``markdown`` falls back to ``recursive``
``llamaindex:semantic``  ``SemanticSplitterNodeParser`` over *our* embedder (wrapped as a
                         LlamaIndex ``BaseEmbedding``, document side), its defaults: buffer 1,
                         a cut at the 95th percentile of sentence-to-sentence distance. It has no
                         size cap (LlamaIndex's design): a long coherent passage stays one chunk,
                         and an embedder truncates what it cannot read (MiniLM: 256 word pieces).

**Sizes.** Ours are in characters, LlamaIndex's in tokens of its global tokenizer (tiktoken
``cl100k_base``, shipped in the package). ``chunking.size`` and ``chunking.overlap`` are turned
into tokens at :data:`CHARS_PER_TOKEN` = 4 characters a token (``size // 4``, ``overlap // 4``:
800 / 100 characters become 200 / 25 tokens), the rule :func:`adiyan.generation.approx_tokens`
uses; on adiyan_full's parsed text (52,747 characters) cl100k averages 4.13 characters a token
(measured), so a LlamaIndex chunk of the same setting runs ~3 % longer than ours.

**Offline.** The tokenizer (``_static/tiktoken_cache``) and NLTK's punkt / stopwords
(``_static/nltk_cache``) ship inside llama-index-core, so nothing is fetched (tests/test_chunking_llamaindex.py
runs every strategy with sockets refused). Setting ``TIKTOKEN_CACHE_DIR`` or ``NLTK_DATA`` to an
empty folder would make it try to download.

Chunks come back as ``(start, end, text)``: the node text as LlamaIndex made it, and its offsets
in the source when LlamaIndex found them (``-1`` otherwise: TokenTextSplitter may rejoin
whitespace). This module imports nothing of adiyan (chunking.py wraps the spans), and
llama-index itself only when one of these strategies is used (~2.7 s to import).
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import numpy as np

PREFIX = "llamaindex:"
STRATEGIES = ("llamaindex:sentence", "llamaindex:token", "llamaindex:markdown", "llamaindex:semantic")
CHARS_PER_TOKEN = 4


def tokens(chars: int) -> int:
    """Characters -> LlamaIndex tokens at :data:`CHARS_PER_TOKEN` (at least 1 for a size)."""
    return chars // CHARS_PER_TOKEN


@functools.cache
def _li() -> SimpleNamespace:
    """llama-index classes and our embedder adapter, imported on first use."""
    from llama_index.core import Document  # heavy: llama-index-core (~2.7 s), only for these strategies
    from llama_index.core.embeddings import BaseEmbedding  # heavy: llama-index-core, on first use
    from llama_index.core.node_parser import (  # heavy: llama-index-core, on first use
        MarkdownNodeParser,
        SemanticSplitterNodeParser,
        SentenceSplitter,
        TokenTextSplitter,
    )
    from pydantic import PrivateAttr  # with the adapter: a pydantic private field

    class AdiyanEmbedding(BaseEmbedding):
        """An adiyan embedder (``embed(texts, kind)``, L2-normalised rows) as a LlamaIndex
        ``BaseEmbedding``: queries on the ``query`` side, texts on the ``document`` side, so a
        prefixed model (nomic) and the embedding cache behave as in our own pipeline."""

        _embedder: object = PrivateAttr()

        def __init__(self, embedder, **kwargs):
            super().__init__(model_name=getattr(embedder, "id", "adiyan"), embed_batch_size=64, **kwargs)
            self._embedder = embedder

        @classmethod
        def class_name(cls) -> str:
            return "AdiyanEmbedding"

        def _rows(self, texts, kind) -> list[list[float]]:
            if not texts:
                return []
            return np.asarray(self._embedder.embed(list(texts), kind), dtype=np.float64).tolist()

        def _get_query_embedding(self, query: str) -> list[float]:
            return self._rows([query], "query")[0]

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return self._get_query_embedding(query)

        def _get_text_embedding(self, text: str) -> list[float]:
            return self._rows([text], "document")[0]

        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            return self._rows(texts, "document")

    AdiyanEmbedding.__module__, AdiyanEmbedding.__qualname__ = __name__, "AdiyanEmbedding"
    globals()["AdiyanEmbedding"] = AdiyanEmbedding
    return SimpleNamespace(Document=Document, SentenceSplitter=SentenceSplitter, TokenTextSplitter=TokenTextSplitter,
                           MarkdownNodeParser=MarkdownNodeParser, SemanticSplitterNodeParser=SemanticSplitterNodeParser,
                           AdiyanEmbedding=AdiyanEmbedding)


def wrap_embedder(embedder):
    """Our embedder as a LlamaIndex ``BaseEmbedding`` (also used by adiyan.integrations.llamaindex)."""
    return _li().AdiyanEmbedding(embedder)


def effective(strategy: str, authored_markdown: bool) -> str:
    """``llamaindex:markdown`` on converter output falls back to ``llamaindex:sentence``."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown chunking strategy {strategy!r}; LlamaIndex strategies: {', '.join(STRATEGIES)}")
    return "llamaindex:sentence" if strategy == "llamaindex:markdown" and not authored_markdown else strategy


def _sentence(size: int, overlap: int):
    chunk, over = max(tokens(size), 1), tokens(overlap)
    if over >= chunk:
        raise ValueError(f"chunk overlap ({overlap} chars = {over} tokens) must be smaller than the size "
                         f"({size} chars = {chunk} tokens) at {CHARS_PER_TOKEN} characters a token")
    return chunk, over


def parser(strategy: str, size: int, overlap: int, embedder=None):
    """The LlamaIndex node parser(s) for ``strategy`` (a list, applied in order)."""
    li = _li()
    chunk, over = _sentence(size, overlap)
    if strategy == "llamaindex:sentence":
        return [li.SentenceSplitter(chunk_size=chunk, chunk_overlap=over)]
    if strategy == "llamaindex:token":
        return [li.TokenTextSplitter(chunk_size=chunk, chunk_overlap=over)]
    if strategy == "llamaindex:markdown":
        return [li.MarkdownNodeParser(), li.SentenceSplitter(chunk_size=chunk, chunk_overlap=over)]
    if strategy == "llamaindex:semantic":
        if embedder is None:
            raise ValueError("the llamaindex:semantic chunking strategy needs an embedder: "
                             "call chunk_text(text, cfg, embedder=...)")
        return [li.SemanticSplitterNodeParser.from_defaults(embed_model=wrap_embedder(embedder))]
    raise ValueError(f"unknown chunking strategy {strategy!r}; LlamaIndex strategies: {', '.join(STRATEGIES)}")


def llamaindex_spans(text: str, strategy: str, size: int, overlap: int, *, embedder=None) -> list[tuple[int, int, str]]:
    """``(start, end, text)`` per LlamaIndex node of ``text`` (offsets -1 when LlamaIndex has none);
    empty nodes are dropped."""
    nodes = [_li().Document(text=text)]
    for p in parser(strategy, size, overlap, embedder):
        nodes = p.get_nodes_from_documents(nodes)
    out, cursor = [], 0
    for n in nodes:
        body = n.get_content().strip()
        if not body:
            continue
        s = n.start_char_idx if n.start_char_idx is not None else -1
        if s < 0 or text[s:s + len(body)] != body:  # markdown's second parser counts inside the section
            s = text.find(body, cursor)
            s = text.find(body) if s < 0 else s
        out.append((s, s + len(body) if s >= 0 else -1, body))
        cursor = max(cursor, s + 1)
    return out
