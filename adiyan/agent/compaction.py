"""Compaction: folding raw tool output into scratchpad entries, extractively and deterministically.

``compact`` keeps, from the top chunks (or the document text, or the memory hits), the
sentences most similar to the question (embedding cosine with the KB's embedder, else word
overlap), with source and chunk index; raw tool output never reaches the decision prompt.
The sentence helpers are shared with the loop's grounding check.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping, Sequence

import numpy as np

from ..types import RetrievalResult
from .scratchpad import Finding, Scratchpad
from .tools import DocumentText, ToolFailure

_SENT_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")
_WORD = re.compile(r"[a-z0-9]+(?:[-'][a-z0-9]+)*")
_STOP = frozenset("a an the of to in on at for and or is are was were be been do does did how what which who whom "
                  "when where why much many per with by from this that these those it its i you we they me my "
                  "your our can could should would will shall may might about as into than then there their".split())
_FIGURE = re.compile(r"\b[\w-]*\d[\w.,-]*\b")


def _content_words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


def split_sentences(text: str) -> list[str]:
    """Sentences of a chunk; a heading is prefixed to the sentences under it.

    A heading is a ``#`` line, or (structural chunks carry their heading without the ``#``) a
    short line with no closing punctuation standing alone before a blank line."""
    out, heading = [], ""
    lines = (text or "").splitlines()
    for i, line in enumerate(lines):
        s = line.strip()
        if not s:
            continue
        if s.startswith("#"):
            heading = s.lstrip("#").strip()
            continue
        alone = i + 1 < len(lines) and not lines[i + 1].strip() and (i == 0 or not lines[i - 1].strip())
        if alone and len(s.split()) <= 10 and not re.search(r"[.!?:;,]$", s):
            heading = s
            continue
        s = re.sub(r"^([-*+]|\d+[.)])\s+", "", s)
        for sent in _SENT_SPLIT.split(s):
            sent = sent.strip()
            if len(sent) < 3:
                continue
            if heading and not (_content_words(heading) <= _content_words(sent)):
                sent = f"{heading}: {sent}"
            out.append(sent)
    return out


def sentence_scores(question: str, sentences: Sequence[str], embedder=None) -> list[float]:
    """Similarity of each sentence to the question: cosine with ``embedder``, else word overlap."""
    if not sentences:
        return []
    if embedder is not None and question:
        q = np.asarray(embedder.embed([question], "query"), dtype=np.float32)[0]
        m = np.asarray(embedder.embed(list(sentences), "document"), dtype=np.float32)
        return [float(x) for x in m @ q]
    qw = _content_words(question)
    return [len(qw & _content_words(s)) / (len(qw) or 1) for s in sentences]


def _add_finding(pad: Scratchpad, f: Finding) -> bool:
    key = re.sub(r"\W+", " ", f.text.lower()).strip()
    for old in pad.findings:
        if re.sub(r"\W+", " ", old.text.lower()).strip() == key:
            old.score = max(old.score, f.score)
            return False
    pad.findings.append(f)
    return True


def _extract(question: str, sentences: list[str], embedder, per_unit: int, min_score: float) -> list[tuple[str, float]]:
    scores = sentence_scores(question, sentences, embedder)
    ranked = sorted(zip(sentences, scores), key=lambda t: -t[1])
    return [(s, sc) for i, (s, sc) in enumerate(ranked[:per_unit]) if i == 0 or sc >= min_score]


def _short(args: Mapping) -> str:
    return json.dumps({k: (v if len(str(v)) <= 60 else str(v)[:57] + "...") for k, v in args.items()},
                      ensure_ascii=False)


def compact(scratchpad: Scratchpad, tool_name: str, args: Mapping, raw_output: Any, *, question: str = "",
            embedder=None, step: int = 0, top_chunks: int = 3, per_chunk: int = 2, min_score: float = 0.2,
            chunk_ratio: float = 0.8) -> Scratchpad:
    """Fold one tool's raw output into a new scratchpad (the input is not modified).

    Extractive and deterministic: from the top ``top_chunks`` chunks (the best one, and the
    others scoring at least ``chunk_ratio`` of its score), or the document text, or the memory
    hits, keep the ``per_chunk`` sentences most similar to the question (the best one
    always, the others if they score at least ``min_score``), with source and chunk index. Raw
    output is never copied whole; an empty or failed call becomes an open question.
    """
    pad = scratchpad.copy()
    q = question or str(args.get("query", ""))
    call = f"{tool_name} {_short(args)}"
    if isinstance(raw_output, ToolFailure):
        pad.open_questions.append(f"{tool_name} failed: {raw_output.error}")
        pad.history.append(f"{call} -> failed: {raw_output.error}")
        return pad
    if tool_name in ("search_kb", "search_document") and isinstance(raw_output, RetrievalResult):
        # the best chunk, and the next ones only if they score close to it
        chunks = [c for i, c in enumerate(raw_output.chunks[:top_chunks])
                  if i == 0 or c.score >= chunk_ratio * raw_output.chunks[0].score]
        added = 0
        for ch in chunks:
            for sent, sc in _extract(q, split_sentences(ch.text), embedder, per_chunk, min_score):
                added += _add_finding(pad, Finding(sent, ch.source, ch.chunk_index,
                                                   round(0.5 * sc + 0.5 * ch.score, 4), step))
            if ch.source not in pad.documents_checked:
                pad.documents_checked.append(ch.source)
        if not raw_output.chunks:
            pad.open_questions.append(f"nothing for {args.get('query', '')!r}: {raw_output.empty_reason}")
            pad.history.append(f"{call} -> no results ({raw_output.empty_reason})")
        else:
            srcs = ", ".join(dict.fromkeys(c.source for c in chunks))
            pad.history.append(f"{call} -> {len(raw_output.chunks)} chunk(s), {len(chunks)} relevant "
                               f"({srcs}); {added} new finding(s)")
        return pad
    if tool_name == "find_document":
        if not raw_output:
            pad.open_questions.append(f"no document matches {args.get('query', '')!r}")
            pad.history.append(f"{call} -> no document")
        else:
            src = raw_output["source"]
            if src not in pad.leads:
                pad.leads.append(src)
            pad.history.append(f"{call} -> {src} (score {raw_output.get('score', 0):.2f})")
        return pad
    if tool_name == "read_document" and isinstance(raw_output, DocumentText):
        added = 0
        for sent, sc in _extract(q, split_sentences(raw_output.text), embedder, per_chunk + 2, min_score):
            added += _add_finding(pad, Finding(sent, raw_output.source, None, round(sc, 4), step))
        if raw_output.source not in pad.documents_checked:
            pad.documents_checked.append(raw_output.source)
        note = f", first {len(raw_output.text)} of {raw_output.total_chars} chars" if raw_output.truncated else ""
        pad.history.append(f"{call} -> read {raw_output.source}{note}; {added} new finding(s)")
        return pad
    if tool_name == "list_documents":
        names = [d.get("source", "") for d in (raw_output or [])]
        for s in names:
            if s and s not in pad.leads:
                pad.leads.append(s)
        if not names:
            pad.open_questions.append("no document is visible to this requester")
        pad.history.append(f"{call} -> {len(names)} document(s)")
        return pad
    if tool_name == "search_memory":
        hits = list(raw_output or [])
        added = 0
        for h in hits[:top_chunks]:
            text = (h.get("text") if isinstance(h, dict) else getattr(h, "text", "")) or ""
            h_score = (h.get("score") if isinstance(h, dict) else getattr(h, "score", 0.0)) or 0.0
            for sent, sc in _extract(q, split_sentences(text), embedder, per_chunk, min_score):
                added += _add_finding(pad, Finding(sent, "memory", None,
                                                   round(0.5 * sc + 0.5 * float(h_score), 4), step))
        if not hits:
            pad.open_questions.append(f"memory has nothing for {args.get('query', '')!r}")
        pad.history.append(f"{call} -> {len(hits)} memory hit(s); {added} new finding(s)")
        return pad
    pad.history.append(f"{call} -> done")
    return pad
