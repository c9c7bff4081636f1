"""Chunking strategies, chosen by ``chunking.strategy`` (a :class:`~adiyan.config.ChunkingConfig`).

Four strategies, all deterministic (the same text and config give the same chunks, byte for
byte) and all measured in **characters**:

``fixed``
    Raw character windows of ``size`` every ``size - overlap`` characters. The baseline, and
    the only strategy that may cut mid-word. Windows stop as soon as one reaches the end of
    the text, so there is never a tail chunk lying wholly inside the previous one's overlap.

``recursive`` (the default, 800 / 100)
    Splits on the coarsest separator that yields small enough pieces (blank line, line break,
    sentence end, whitespace, and characters only for a single "word" longer than the size),
    then packs pieces greedily up to ``size``. Each new chunk re-opens the previous one's last
    ~``overlap`` characters, starting at the first word start inside that window. Pieces are
    cut to at most ``size - overlap`` so the overlap always fits: no chunk exceeds ``size``,
    consecutive chunks share between ``overlap`` minus one word and ``overlap`` characters,
    and no chunk starts mid-word (unless one word is longer than ``size - overlap``).

    Why hand-written rather than LlamaIndex's ``SentenceSplitter`` (llama-index-core 0.14):
    that splitter counts *tokens* (``tokenizer=list`` would make it count characters), but
    its overlap is made of whole sentence splits, so with a 100-character overlap and
    sentences longer than that it carries no overlap at all (measured on the shared
    ``wiki.md``: 1 of 6 chunk boundaries had any overlap); it also needs NLTK's punkt data
    and returns bare strings, so chunk offsets in the source are lost. The splitter here
    works on offsets, so every chunk knows exactly where it came from.

``markdown`` (markdown-structural, for authored ``.md`` / ``.markdown`` only)
    Splits on ATX headings (``#`` .. ``######``; a ``#`` line inside a fenced code block is
    not a heading), caps each section with the recursive splitter, and prefixes every chunk
    with its heading path (``Refund policy > Cancellation windows``) so a fact keeps its
    context. This is the fix for the seed's "chunk dilution" incident: a fact in a Markdown
    file of five unrelated sections scored 0.496, under the 0.55 floor, with heading-blind
    chunking and 0.665 with structural chunking. Sections never share a chunk.
    Markdown *produced by a converter* has no authored structure worth trusting: call
    ``chunk_text(..., authored_markdown=False)`` and the strategy falls back to ``recursive``;
    the fallback is recorded on every chunk (``Chunk.strategy == "recursive"`` and
    ``Chunk.note``), logged on the ``adiyan.chunking`` logger, and predictable beforehand
    with :func:`effective_strategy`.

``semantic``
    See :func:`semantic_spans`. Needs an embedder (``chunk_text(..., embedder=...)``). The
    seed measured semantic chunking ~14x slower than fixed chunking to index (every sentence
    is embedded once more, before the chunks themselves are embedded).

``llamaindex:sentence|token|markdown|semantic``
    LlamaIndex's node parsers, see :mod:`adiyan.chunking_llamaindex`; their sizes are tokens, so
    ``size`` / ``overlap`` are converted at 4 characters a token (800 / 100 -> 200 / 25 tokens).

Every chunk's ``text`` is ``source[start:end]`` (for markdown: heading path, a blank line,
then ``source[start:end]``), stripped of surrounding whitespace; fixed windows are the
exception and are kept raw.
"""

from __future__ import annotations

import logging
import math
import re
import statistics
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from . import chunking_llamaindex
from .config import ConfigError

log = logging.getLogger("adiyan.chunking")

STRATEGIES = ("fixed", "recursive", "markdown", "semantic")
MARKDOWN_SUFFIXES = (".md", ".markdown")
PATH_SEP = " > "
FALLBACK_NOTE = ("markdown chunking is for authored .md/.markdown files; "
                 "converter-produced Markdown was chunked with 'recursive'")

# Recursive split levels, coarsest first; a split happens right after each match, so the
# separator stays at the end of the preceding piece and pieces tile the text exactly.
_SPLIT_LEVELS = [
    re.compile(r"\n[ \t]*\n\s*"),  # blank line (paragraph)
    re.compile(r"\n\s*"),  # line break
    re.compile(r"[.!?…][\"'”’)\]]*\s+"),  # sentence end
    re.compile(r"\s+"),  # word
]
# Sentences for the semantic strategy: sentence ends and blank lines.
_SENTENCE_END = re.compile(r"[.!?…][\"'”’)\]]*\s+|\n[ \t]*\n\s*")

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")


@dataclass(frozen=True)
class Chunk:
    index: int
    text: str
    start: int  # offset in the source of the chunk's first character (markdown: of its body)
    end: int = -1  # offset just past its last character
    heading_path: str = ""  # markdown: "A > B", also the first line of ``text``; else ""
    strategy: str = ""  # the strategy actually applied (recursive when markdown fell back)
    note: str = ""  # why the applied strategy differs from the configured one, if it does

    @property
    def body(self) -> str:
        """The text without its heading-path prefix (markdown); ``text`` otherwise."""
        return self.text[len(self.heading_path) + 2:] if self.heading_path else self.text


# ---------------------------------------------------------------------------- helpers

def _check(size: int, overlap: int) -> None:
    if size < 1:
        raise ValueError(f"chunk size must be positive, got {size}")
    if overlap < 0:
        raise ValueError(f"chunk overlap must not be negative, got {overlap}")
    if overlap >= size:
        raise ValueError(f"chunk overlap ({overlap}) must be smaller than chunk size ({size})")


def _strip_span(text: str, s: int, e: int) -> tuple[int, int]:
    while s < e and text[s].isspace():
        s += 1
    while e > s and text[e - 1].isspace():
        e -= 1
    return s, e


def _is_word_start(text: str, p: int) -> bool:
    return not text[p].isspace() and (p == 0 or text[p - 1].isspace())


def _split_spans(text: str, lo: int, hi: int, limit: int, level: int = 0) -> list[tuple[int, int]]:
    """Contiguous spans tiling ``[lo, hi)``, each at most ``limit`` long, cut at the coarsest
    separator possible (characters only as a last resort)."""
    if hi - lo <= limit:
        return [(lo, hi)]
    if level >= len(_SPLIT_LEVELS):
        return [(i, min(i + limit, hi)) for i in range(lo, hi, limit)]
    cuts = [m.end() for m in _SPLIT_LEVELS[level].finditer(text, lo, hi) if lo < m.end() < hi]
    out: list[tuple[int, int]] = []
    s = lo
    for c in cuts + [hi]:
        if c <= s:
            continue
        out.extend(_split_spans(text, s, c, limit, level + 1) if c - s > limit else [(s, c)])
        s = c
    return out


def _overlap_start(text: str, cs: int, ce: int, next_end: int, size: int, overlap: int) -> int:
    """Where the chunk after ``[cs, ce)`` starts: the first word start in the last ``overlap``
    characters of the previous chunk such that the new chunk (up to ``next_end``) fits."""
    if overlap:
        for p in range(max(ce - overlap, cs + 1), ce):
            if _is_word_start(text, p) and next_end - p <= size:
                return p
    return ce


def recursive_spans(text: str, size: int = 800, overlap: int = 100, lo: int = 0,
                    hi: int | None = None) -> list[tuple[int, int]]:
    """Stripped ``(start, end)`` spans of the recursive strategy over ``text[lo:hi]``."""
    _check(size, overlap)
    hi = len(text) if hi is None else hi
    pieces = _split_spans(text, lo, hi, size - overlap)
    raw: list[tuple[int, int]] = []
    cs = ce = None
    for s, e in pieces:
        if cs is None:
            cs, ce = s, e
        elif e - cs <= size:
            ce = e
        else:
            raw.append((cs, ce))
            cs, ce = _overlap_start(text, cs, ce, e, size, overlap), e
    if cs is not None:
        raw.append((cs, ce))
    out = []
    for s, e in raw:
        s, e = _strip_span(text, s, e)
        if e > s:
            out.append((s, e))
    return out


def fixed_spans(text: str, size: int = 800, overlap: int = 100) -> list[tuple[int, int]]:
    """Raw windows ``[i, i + size)`` every ``size - overlap``; stops once a window reaches the
    end; whitespace-only windows are dropped."""
    _check(size, overlap)
    out, step, i = [], size - overlap, 0
    while i < len(text):
        e = min(i + size, len(text))
        if text[i:e].strip():
            out.append((i, e))
        if e == len(text):
            break
        i += step
    return out


def recursive_chunks(text: str, size: int = 800, overlap: int = 100) -> list[str]:
    return [text[s:e] for s, e in recursive_spans(text, size, overlap)]


def fixed_chunks(text: str, size: int = 800, overlap: int = 100) -> list[str]:
    return [text[s:e] for s, e in fixed_spans(text, size, overlap)]


# ---------------------------------------------------------------------------- markdown

@dataclass(frozen=True)
class Section:
    heading_path: str  # "" for text before the first heading
    start: int  # body offsets in the source (the heading line itself is excluded)
    end: int


def markdown_sections(text: str) -> list[Section]:
    """Sections of ``text`` split on ATX headings outside fenced code blocks."""
    sections: list[Section] = []
    stack: list[tuple[int, str]] = []
    fence: str | None = None
    body_start, path, pos = 0, "", 0
    for line in text.splitlines(keepends=True):
        line_start, pos = pos, pos + len(line)
        content = line.rstrip("\r\n")
        m = _FENCE.match(content)
        if fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                    and not content.strip().strip(fence[0]):
                fence = None
            continue
        if m:
            fence = m.group(1)
            continue
        h = _ATX.match(content)
        if not h:
            continue
        sections.append(Section(path, body_start, line_start))
        level = len(h.group(1))
        title = re.sub(r"(?:^|[ \t]+)#+$", "", (h.group(2) or "").strip()).strip()
        while stack and stack[-1][0] >= level:
            stack.pop()
        if title:
            stack.append((level, title))
        path = PATH_SEP.join(t for _, t in stack)
        body_start = pos
    sections.append(Section(path, body_start, len(text)))
    return [s for s in sections if text[s.start:s.end].strip()]


def _whole(text: str, lo: int = 0, hi: int | None = None) -> list[tuple[int, int]]:
    """``text[lo:hi]`` as one stripped span (none when it is blank)."""
    hi = len(text) if hi is None else hi
    s, e = _strip_span(text, lo, hi)
    return [(s, e)] if e > s else []


def _markdown_chunks(text: str, size: int, overlap: int, fits=None) -> list[tuple[int, int, str]]:
    """Heading sections, each split by size; with ``fits`` (chunking.keep_within_window), a section
    that fits the embedder's window with its heading path stays one chunk."""
    out = []
    max_path = max(size // 4, 1)
    for sec in markdown_sections(text):
        path = sec.heading_path
        if len(path) > max_path:  # keep the most specific end of a very long path
            path = "…" + path[-(max_path - 1):]
        if fits is not None and fits((f"{path}\n\n" if path else "") + text[sec.start:sec.end]):
            out += [(s, e, path) for s, e in _whole(text, sec.start, sec.end)]
            continue
        budget = size - (len(path) + 2 if path else 0)
        ov = min(overlap, budget // 2)
        for s, e in recursive_spans(text, budget, ov, sec.start, sec.end):
            out.append((s, e, path))
    return out


WINDOW_STRATEGIES = ("auto", "markdown", "recursive", "fixed")  # the ones keep_within_window acts on


def refuse_inert_window(cfg, embedder) -> None:
    """chunking.keep_within_window=true acts only with a strategy that splits by size and an embedder
    that can count its tokens; anything else is refused by name rather than ignored."""
    if not getattr(cfg, "keep_within_window", False):
        return
    if cfg.strategy not in WINDOW_STRATEGIES:
        raise ConfigError(f"chunking.keep_within_window=true does nothing with chunking.strategy={cfg.strategy} "
                          f"(it keeps whole what {', '.join(WINDOW_STRATEGIES)} would split by size)")
    if window_fit(embedder) is None:
        raise ConfigError(f"chunking.keep_within_window=true needs an embedder that counts its own tokens; "
                          f"{getattr(embedder, 'id', embedder)} cannot say how many it reads (a model server)")


def window_fit(embedder):
    """``fits(text) -> bool``: the text, with the embedder's document prefix, is within the model's
    input window counted by its own tokenizer; None when the embedder cannot say (then nothing is
    kept whole on its account)."""
    window = getattr(embedder, "input_window", lambda: None)() if embedder is not None else None
    if not window or embedder.count_tokens("x") is None:
        return None
    prefix = embedder.prefix("document") or ""
    return lambda t: len(t) <= window * 12 and embedder.count_tokens(prefix + t) <= window


# ---------------------------------------------------------------------------- semantic

def sentence_spans(text: str, limit: int) -> list[tuple[int, int]]:
    """Stripped sentence spans (sentence ends and blank lines), none longer than ``limit``:
    an over-long sentence is cut with the recursive splitter's finer levels."""
    spans, s = [], 0
    for c in [m.end() for m in _SENTENCE_END.finditer(text)] + [len(text)]:
        if c <= s:
            continue
        for a, b in _split_spans(text, s, c, limit, level=1):
            a, b = _strip_span(text, a, b)
            if b > a:
                spans.append((a, b))
        s = c
    return spans


def semantic_spans(text: str, embedder, *, size: int = 800, min_size: int = 200,
                   threshold: float = 0.5) -> list[tuple[int, int]]:
    """Topic-coherent spans: consecutive sentences grouped by embedding similarity.

    Rule (absolute threshold, not a percentile): sentences are embedded with
    ``embedder.embed(sentences, "document")`` (L2-normalised rows) and a cut is made between
    sentences *i* and *i+1* wherever their cosine similarity is below ``threshold``
    (``chunking.semantic_threshold``, 0.5 by default; the right value depends on the embedder).
    Then, in this order:

    1. size cap: a group longer than ``size`` is cut again at its weakest (lowest-similarity)
       boundary, recursively, until every group fits (sentences are pre-cut to ``size``);
    2. minimum size: the smallest group under ``min_size`` (leftmost on ties) is merged into
       the neighbour whose centroid is most similar to its own, as long as the merge fits in
       ``size``; repeated until every group is at least ``min_size`` or cannot grow.

    Semantic chunks carry no overlap: their boundaries are topic shifts. Seed measurement:
    indexing with semantic chunking was ~14x slower than with fixed chunking.
    """
    if embedder is None:
        raise ValueError("the semantic chunking strategy needs an embedder: "
                         "call chunk_text(text, cfg, embedder=...)")
    sents = sentence_spans(text, size)
    if len(sents) <= 1:
        return sents
    vecs = np.asarray(embedder.embed([text[a:b] for a, b in sents], "document"), dtype=np.float64)
    sims = [float(x) for x in np.einsum("ij,ij->i", vecs[:-1], vecs[1:])]

    def length(g: tuple[int, int]) -> int:
        return sents[g[1]][1] - sents[g[0]][0]

    def cap(g: tuple[int, int]) -> list[tuple[int, int]]:
        if length(g) <= size or g[0] == g[1]:
            return [g]
        k = min(range(g[0], g[1]), key=lambda i: (sims[i], i))  # cut after sentence k
        return cap((g[0], k)) + cap((k + 1, g[1]))

    groups: list[tuple[int, int]] = []
    first = 0
    for i, sim in enumerate(sims):
        if sim < threshold:
            groups.append((first, i))
            first = i + 1
    groups.append((first, len(sents) - 1))
    groups = [h for g in groups for h in cap(g)]

    def centroid(g: tuple[int, int]):
        v = vecs[g[0]:g[1] + 1].sum(axis=0)
        n = float(np.linalg.norm(v))
        return v / n if n else v

    stuck: set[tuple[int, int]] = set()
    while len(groups) > 1:
        small = [(length(g), j) for j, g in enumerate(groups) if length(g) < min_size and g not in stuck]
        if not small:
            break
        _, j = min(small)
        g = groups[j]
        best = None
        for n in (j - 1, j + 1):
            if 0 <= n < len(groups):
                merged = (min(g[0], groups[n][0]), max(g[1], groups[n][1]))
                if length(merged) <= size:
                    sim = float(centroid(g) @ centroid(groups[n]))
                    if best is None or sim > best[0]:
                        best = (sim, n, merged)
        if best is None:
            stuck.add(g)
            continue
        _, n, merged = best
        lo = min(j, n)
        groups[lo:lo + 2] = [merged]
    return [(sents[a][0], sents[b][1]) for a, b in groups]


# ---------------------------------------------------------------------------- public API

def is_authored_markdown(filename: str, converted: bool = False) -> bool:
    """True for ``.md`` / ``.markdown`` files that were written as Markdown (not converted)."""
    return not converted and filename.lower().endswith(MARKDOWN_SUFFIXES)


def effective_strategy(cfg, authored_markdown: bool = True) -> str:
    """The strategy ``chunk_text`` will actually apply: ``markdown`` falls back to
    ``recursive`` for Markdown that was not authored (converter output)."""
    strategy = cfg if isinstance(cfg, str) else cfg.strategy
    if strategy == "auto":  # the design's default: headings first for authored Markdown, by size otherwise
        return "markdown" if authored_markdown else "recursive"
    if strategy.startswith(chunking_llamaindex.PREFIX):  # LlamaIndex node parsers (chunking_llamaindex.py)
        return chunking_llamaindex.effective(strategy, authored_markdown)
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown chunking strategy {strategy!r}; choose one of: auto, {', '.join(STRATEGIES)}, "
                         f"{', '.join(chunking_llamaindex.STRATEGIES)}")
    if strategy == "markdown" and not authored_markdown:
        return "recursive"
    return strategy


def chunk_text(text: str, cfg, *, embedder=None, authored_markdown: bool = True) -> list[Chunk]:
    """Chunk ``text`` with the strategy of ``cfg`` (a ChunkingConfig).

    ``embedder`` is required by ``semantic`` (ValueError without it) and ignored otherwise.
    ``authored_markdown=False`` makes ``markdown`` fall back to ``recursive``; the chunks then
    say so in ``strategy`` and ``note``, and the fallback is logged.
    """
    strategy = effective_strategy(cfg, authored_markdown)
    note = ""
    if strategy != cfg.strategy and cfg.strategy != "auto":
        note = FALLBACK_NOTE.replace("'recursive'", repr(strategy))
        log.info("chunking: %s", note)
    size, overlap = cfg.size, cfg.overlap
    # chunking.keep_within_window: a document (or, for structural Markdown, a heading section) that fits
    # the embedder's input window is not split by size: the model reads all of it either way
    fits = window_fit(embedder) if getattr(cfg, "keep_within_window", False) and strategy in (
        "markdown", "recursive", "fixed") else None
    if strategy.startswith(chunking_llamaindex.PREFIX):  # node text as LlamaIndex made it; sizes in tokens = chars // 4
        return [Chunk(i, body, s, e, "", strategy, note) for i, (s, e, body) in
                enumerate(chunking_llamaindex.llamaindex_spans(text, strategy, size, overlap, embedder=embedder))]
    if strategy == "semantic":
        spans = [(s, e, "") for s, e in semantic_spans(text, embedder, size=size, min_size=cfg.min_size,
                                                       threshold=cfg.semantic_threshold)]
    elif strategy == "markdown":
        _check(size, overlap)
        spans = _markdown_chunks(text, size, overlap, fits)
    elif fits is not None and fits(text):
        spans = [(s, e, "") for s, e in _whole(text)]
    elif strategy == "fixed":
        spans = [(s, e, "") for s, e in fixed_spans(text, size, overlap)]
    else:
        spans = [(s, e, "") for s, e in recursive_spans(text, size, overlap)]
    return [Chunk(i, (f"{path}\n\n" if path else "") + text[s:e], s, e, path, strategy, note)
            for i, (s, e, path) in enumerate(spans)]


def chunk_stats(chunks: Sequence[Chunk]) -> dict:
    """count, min, max, mean, median and p90 (nearest rank) of chunk lengths in characters."""
    lengths = sorted(len(c.text) for c in chunks)
    if not lengths:
        return {"count": 0, "min": 0, "max": 0, "mean": 0.0, "median": 0, "p90": 0}
    return {"count": len(lengths), "min": lengths[0], "max": lengths[-1],
            "mean": round(statistics.fmean(lengths), 1), "median": statistics.median(lengths),
            "p90": lengths[math.ceil(0.9 * len(lengths)) - 1]}
