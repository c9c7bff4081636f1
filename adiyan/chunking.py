"""Chunking strategies, chosen by ``chunking.strategy``.

``recursive`` (the default, 800 characters with 100 overlap) splits on the coarsest separator
that fits (paragraph, line, sentence, word, character) and packs pieces up to the size cap,
carrying the tail of one chunk into the next as overlap. ``fixed`` cuts every ``size``
characters. Deterministic: the same text and config give the same chunks, byte for byte.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass

SEPARATORS = ["\n\n", "\n", r"(?<=[.!?])\s+", " ", ""]


@dataclass(frozen=True)
class Chunk:
    index: int
    text: str
    start: int  # character offset in the source text (best effort with overlap)


def _split_keep(text: str, sep: str) -> list[str]:
    if sep == "":
        return list(text)
    if sep.startswith("(?"):
        parts = re.split(sep, text)
        return [p + " " for p in parts[:-1]] + parts[-1:]
    parts = text.split(sep)
    return [p + sep for p in parts[:-1]] + parts[-1:]


def _pieces(text: str, size: int, seps: list[str]) -> list[str]:
    """Pieces no longer than ``size``, split at the coarsest separator possible."""
    if len(text) <= size:
        return [text]
    sep, rest = seps[0], seps[1:]
    out: list[str] = []
    for part in _split_keep(text, sep):
        if len(part) <= size:
            out.append(part)
        else:
            out.extend(_pieces(part, size, rest) if rest else [part[i:i + size] for i in range(0, len(part), size)])
    return out


def recursive_chunks(text: str, size: int = 800, overlap: int = 100) -> list[str]:
    if overlap >= size:
        raise ValueError(f"chunk overlap ({overlap}) must be smaller than chunk size ({size})")
    pieces = [p for p in _pieces(text, size, SEPARATORS) if p]
    chunks: list[str] = []
    cur = ""
    for piece in pieces:
        if cur and len(cur) + len(piece) > size:
            chunks.append(cur)
            tail = cur[-overlap:] if overlap else ""
            # start the overlap at a word boundary so no chunk begins mid-word
            if tail and " " in tail:
                tail = tail[tail.index(" ") + 1:]
            cur = tail if len(tail) + len(piece) <= size else ""
        cur += piece
    if cur.strip():
        chunks.append(cur)
    return [c.strip() for c in chunks if c.strip()]


def fixed_chunks(text: str, size: int = 800, overlap: int = 100) -> list[str]:
    if overlap >= size:
        raise ValueError(f"chunk overlap ({overlap}) must be smaller than chunk size ({size})")
    step = size - overlap
    return [text[i:i + size].strip() for i in range(0, max(len(text) - overlap, 1), step) if text[i:i + size].strip()]


def chunk_text(text: str, cfg) -> list[Chunk]:
    """Chunk ``text`` with the strategy of ``cfg`` (a ChunkingConfig)."""
    if cfg.strategy == "recursive":
        texts = recursive_chunks(text, cfg.size, cfg.overlap)
    elif cfg.strategy == "fixed":
        texts = fixed_chunks(text, cfg.size, cfg.overlap)
    else:
        raise NotImplementedError(f"chunking strategy {cfg.strategy!r} is not implemented yet")
    out, pos = [], 0
    for i, t in enumerate(texts):
        found = text.find(t[:50], max(0, pos - cfg.overlap - 50))
        start = found if found >= 0 else pos
        out.append(Chunk(i, t, start))
        pos = start + len(t)
    return out


def chunk_stats(chunks: list[Chunk]) -> dict:
    lengths = [len(c.text) for c in chunks]
    if not lengths:
        return {"count": 0}
    return {"count": len(lengths), "min": min(lengths), "max": max(lengths),
            "mean": round(statistics.fmean(lengths), 1), "median": statistics.median(lengths)}
