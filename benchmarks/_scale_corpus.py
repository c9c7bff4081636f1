"""The million chunks of benchmarks/scale.py: what they are made of, built the same way every time.

Two kinds of knowledge-base documents, both real text from ``../shared/datasets`` only:

- **source documents**: every shared corpus as documents, chunked by the knowledge base's
  default chunking (``chunking`` defaults: ``auto``, 800 / 100 characters; Markdown by headings).
  ``scifact`` (5,183 abstracts, title + text), ``clapnq_dev`` and ``xquad_en`` (their BEIR
  passages), ``documents`` (Docling's reference Markdown of the 97 real files, ``groundtruth/*.md``),
  ``locomo`` (one document per conversation session, a line per turn: ``speaker: text``) and
  ``ragchecker_meta`` (the reference answers and the two RAG systems' responses, distinct texts).
- **windows** (only as many as are needed to reach the size asked for): runs of consecutive
  sentences of those same texts (sentence windows, LlamaIndex's sentence-window idea), then, when
  they run out, runs of consecutive clauses (sentences cut at ``, ; :``). Each window is one
  document whose default chunking gives exactly one chunk (it is at most ``chunking.size``
  characters), so a window is a knowledge-base document of one chunk. Windows are distinct texts,
  never equal to a source document's chunk, and generated shortest first (one sentence, then two,
  ...) so the pool is as cheap to embed as it can be.

Held-out queries: questions from SciFact (test + train claims), ClapNQ, XQuAD, LoCoMo and RAGChecker,
none of which is the text of any chunk (checked), picked with a seeded generator.

Every chunk text is what ``adiyan.chunking.chunk_text`` gives for the document under the default
settings (computed here, and checked against the knowledge base's own result at ingest), so the
embedding cache filled from this list is the one the write path reads.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from adiyan.chunking import chunk_text
from adiyan.config import ChunkingConfig
from adiyan.types import OWNER, Requester

SOURCES = ("scifact", "clapnq_dev", "xquad_en", "documents", "locomo", "ragchecker_meta")
MIN_WORDS = 4  # a window has at least this many words
# sentence ends (as the chunker's sentence level), line breaks; clause marks inside sentences
_SENTENCE = re.compile(r"[.!?…][\"'”’)\]]*\s+|\n\s*")
_CLAUSE = re.compile(r"[,;:]\s+")
_WORD = re.compile(r"[A-Za-z]{2,}")


class MissingCorpus(RuntimeError):
    """A shared corpus is not readable: the benchmark stops rather than measure something else."""


@dataclass(frozen=True)
class Doc:
    """One knowledge-base document: its file name (key under its owner), text, origin and chunks."""

    name: str
    text: str
    source: str  # one of SOURCES
    kind: str  # "document" (default chunking of a source text) | "sentence_window" | "clause_window"
    chunks: tuple[str, ...]

    @property
    def authored_markdown(self) -> bool:
        return self.name.lower().endswith((".md", ".markdown"))


# -- the shared corpora as documents ----------------------------------------------------------------
def _jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def source_texts(shared: Path) -> dict[str, list[tuple[str, str]]]:
    """{source: [(file name, text)]} for every shared corpus, in a fixed order."""
    out: dict[str, list[tuple[str, str]]] = {}
    try:
        out["scifact"] = [(f"scifact/{d['_id']}.txt", f"{d.get('title', '')}\n\n{d.get('text', '')}".strip())
                          for d in _jsonl(shared / "scifact" / "corpus.jsonl")]
        for name in ("clapnq_dev", "xquad_en"):
            rows = _jsonl(shared / name / "beir" / "corpus.jsonl")
            out[name] = [(f"{name}/{_safe(d['_id'])}.txt",
                          (f"{d.get('title', '')}\n\n" if d.get("title") else "") + d.get("text", "")) for d in rows]
        md = sorted((shared / "documents").glob("*/groundtruth/*.md"))
        if not md:
            raise MissingCorpus(f"no groundtruth Markdown under {shared / 'documents'}")
        out["documents"] = [(f"documents/{p.parent.parent.name}/{_safe(p.name)}", p.read_text(encoding="utf-8"))
                            for p in md]
        loc = json.loads((shared / "locomo" / "locomo8.json").read_text(encoding="utf-8"))
        sessions = []
        for sample in loc:
            conv = sample["conversation"]
            nums = sorted(int(k.split("_")[1]) for k in conv if re.fullmatch(r"session_\d+", k))
            for n in nums:
                lines = [f"{t['speaker']}: {t['text']}" for t in conv[f"session_{n}"] if t.get("text")]
                if lines:
                    sessions.append((f"locomo/{sample['sample_id']}/session_{n}.txt", "\n".join(lines)))
        out["locomo"] = sessions
        rc = json.loads((shared / "ragchecker_meta" / "human_labeled_data.json").read_text(encoding="utf-8"))
        texts: dict[str, str] = {}
        for row in rc:
            base = f"ragchecker_meta/{row['dataset']}-{_safe(str(row['query_id']))}"
            texts.setdefault(row["gt_answer"], f"{base}/reference.txt")
            for m in ("model1", "model2"):
                texts.setdefault(row[m]["response"], f"{base}/{_safe(row[m]['model_name'])}.txt")
        out["ragchecker_meta"] = [(name, text) for text, name in texts.items() if text.strip()]
    except (OSError, KeyError, ValueError) as exc:
        raise MissingCorpus(f"the shared corpora under {shared} are not readable: {exc}") from exc
    return out


def held_out_questions(shared: Path) -> list[tuple[str, str]]:
    """(origin, question) from every shared question set, distinct, in a fixed order."""
    qs: list[tuple[str, str]] = [("scifact", d["text"]) for d in _jsonl(shared / "scifact" / "queries.jsonl")]
    for name in ("clapnq_dev", "xquad_en"):
        qs += [(name, r["question"]) for r in _jsonl(shared / name / "qa.jsonl")]
    for sample in json.loads((shared / "locomo" / "locomo8.json").read_text(encoding="utf-8")):
        qs += [("locomo", q["question"]) for q in sample["qa"] if q.get("question")]
    rc = json.loads((shared / "ragchecker_meta" / "human_labeled_data.json").read_text(encoding="utf-8"))
    qs += [("ragchecker_meta", r["query"]) for r in rc]
    seen, out = set(), []
    for origin, q in qs:
        q = q.strip()
        if q and q not in seen:
            seen.add(q)
            out.append((origin, q))
    return out


def _safe(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", s)[:120]


# -- sentence and clause windows ----------------------------------------------------------------------
def _segments(text: str, pattern: re.Pattern, lo: int = 0, hi: int | None = None) -> list[tuple[int, int]]:
    """Stripped, non-empty ``(start, end)`` spans tiling ``text[lo:hi]`` cut after each match."""
    hi = len(text) if hi is None else hi
    out, s = [], lo
    for m in pattern.finditer(text, lo, hi):
        if m.end() < hi:
            out.append((s, m.end()))
            s = m.end()
    out.append((s, hi))
    spans = []
    for a, b in out:
        while a < b and text[a].isspace():
            a += 1
        while b > a and text[b - 1].isspace():
            b -= 1
        if b > a:
            spans.append((a, b))
    return spans


def _prose(text: str, span: tuple[int, int]) -> bool:
    """A sentence worth a window: three words of letters, not a table row, image or markup line."""
    s = text[span[0]:span[1]]
    return not s.lstrip().startswith(("|", "<!--", "```", "![", "<")) and len(_WORD.findall(s)) >= 3


def _runs(text: str, spans: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """Maximal runs of consecutive prose spans (a window never reaches over a table row)."""
    runs, cur = [], []
    for sp in spans:
        if _prose(text, sp):
            cur.append(sp)
        elif cur:
            runs.append(cur)
            cur = []
    if cur:
        runs.append(cur)
    return runs


def windows_of(text: str, w: int, max_chars: int, unit: str) -> list[str]:
    """Every run of ``w`` consecutive sentences (``unit`` sentence) or clauses (clause) of ``text``,
    as the source's own characters, at most ``max_chars`` long and of at least MIN_WORDS words."""
    sentences = _segments(text, _SENTENCE)
    if unit == "sentence":
        runs = _runs(text, sentences)
    else:
        runs = [[c for s in run for c in _segments(text, _CLAUSE, s[0], s[1])] for run in _runs(text, sentences)]
    out = []
    for run in runs:
        for i in range(len(run) - w + 1):
            a, b = run[i][0], run[i + w - 1][1]
            if b - a <= max_chars:
                t = text[a:b]
                if len(t.split()) >= MIN_WORDS:
                    out.append(t)
    return out


# -- the pool ---------------------------------------------------------------------------------------
def build_pool(shared: Path, target: int, *, chunking: ChunkingConfig | None = None,
               max_window: int = 40, seed: int = 0) -> tuple[list[Doc], list[tuple[str, str]], dict]:
    """(documents holding ``target`` chunks, held-out questions, what they are made of).

    The documents come in a seeded random order (source documents and windows mixed), so any
    prefix of them is a sample of the whole with the same make-up; :func:`take` cuts a prefix of
    exactly n chunks. Below the source documents' own chunk count (18,268 with the defaults) the
    pool is the source documents alone, holding more than ``target``: cut it with :func:`take`.
    """
    chunking = chunking or ChunkingConfig()
    texts = source_texts(shared)
    questions = held_out_questions(shared)
    qset = {q for _, q in questions}
    docs: list[Doc] = []
    seen: set[str] = set()
    for source in SOURCES:
        for name, text in texts[source]:
            if not text.strip():
                continue
            chunks = tuple(c.text for c in chunk_text(text, chunking, authored_markdown=name.endswith(".md")))
            docs.append(Doc(name, text, source, "document", chunks))
            seen.update(chunks)
    n_doc_chunks = sum(len(d.chunks) for d in docs)
    windows: list[Doc] = []
    levels: list[dict] = []
    need = max(0, target - n_doc_chunks)
    for unit in ("sentence", "clause"):
        for w in range(1, max_window + 1):
            if len(windows) >= need:
                break
            level = []
            for source in SOURCES:
                for name, text in texts[source]:
                    for j, t in enumerate(windows_of(text, w, chunking.size, unit)):
                        if t in seen or t in qset:
                            continue
                        seen.add(t)
                        stem = name.rsplit(".", 1)[0]
                        level.append(Doc(f"windows/{stem}/{unit[0]}{w}-{j}.txt", t, source, f"{unit}_window", (t,)))
            if not level:
                continue
            take_n = min(len(level), need - len(windows))
            if take_n < len(level):  # the last level: a seeded sample of it
                pick = np.random.default_rng(seed + 17 + w).choice(len(level), take_n, replace=False)
                level = [level[i] for i in sorted(pick)]
            windows += level
            levels.append({"unit": unit, "w": w, "windows": len(level)})
        if len(windows) >= need:
            break
    if len(windows) < need:
        raise MissingCorpus(f"only {n_doc_chunks + len(windows)} distinct chunks can be made from {shared}; "
                            f"asked for {target}")
    pool = docs + windows
    order = np.random.default_rng(seed).permutation(len(pool))
    # a document that chunks to nothing (Markdown of headings only) is refused by the knowledge base:
    # dropped after the shuffle, so the order of the rest (and the embedding cache's fill order) stays
    pool = [pool[i] for i in order if pool[i].chunks]
    held = [(o, q) for o, q in questions if q not in seen]
    return pool, held, composition(pool, levels, len(questions) - len(held))


def composition(pool: list[Doc], levels: list[dict], dropped_questions: int = 0) -> dict:
    """Counts per source and kind (documents and chunks), mean characters, the window levels used."""
    per: dict[str, dict] = {}
    for d in pool:
        row = per.setdefault(d.source, {})
        k = row.setdefault(d.kind, {"documents": 0, "chunks": 0, "chars": 0})
        k["documents"] += 1
        k["chunks"] += len(d.chunks)
        k["chars"] += sum(len(c) for c in d.chunks)
    for row in per.values():
        for k in row.values():
            k["mean_chars"] = round(k.pop("chars") / max(1, k["chunks"]), 1)
    total_chunks = sum(len(d.chunks) for d in pool)
    by_kind: dict[str, int] = {}
    for d in pool:
        by_kind[d.kind] = by_kind.get(d.kind, 0) + len(d.chunks)
    return {"chunks": total_chunks, "documents": len(pool), "chunks_by_kind": by_kind, "per_source": per,
            "window_levels": levels, "questions_dropped_as_chunk_text": dropped_questions,
            "mean_chunk_chars": round(sum(len(c) for d in pool for c in d.chunks) / max(1, total_chunks), 1)}


def take_indices(pool: list[Doc], n: int) -> list[int]:
    """Positions of the first documents of ``pool`` holding exactly ``n`` chunks (a multi-chunk
    document that would overshoot is skipped; one-chunk windows fill the rest)."""
    out, total = [], 0
    for i, d in enumerate(pool):
        if total == n:
            break
        if total + len(d.chunks) <= n:
            out.append(i)
            total += len(d.chunks)
    if total != n:
        raise ValueError(f"cannot cut exactly {n} chunks from a pool of {sum(len(d.chunks) for d in pool)}")
    return out


def take(pool: list[Doc], n: int) -> list[Doc]:
    return [pool[i] for i in take_indices(pool, n)]


# -- owners and visibilities ------------------------------------------------------------------------
# A document is global (2%), alice's private (48%), bob's private (3%) or private to one of 20 other
# owners (47%): the access filter lets alice see 50% of the chunks and bob 5%; the owner role, all.
SHARES = (("global", None, 0.02), ("private", "alice", 0.48), ("private", "bob", 0.03))
OTHER_OWNERS = 20
REQUESTERS = {"all": OWNER, "access_50": Requester("alice"), "access_5": Requester("bob")}


def assign(name: str, seed: int = 0) -> tuple[str, str]:
    """(owner, visibility) of a document from a hash of its name and the seed: the same every run."""
    u = int.from_bytes(hashlib.sha256(f"{seed}\x00{name}".encode()).digest()[:8], "big") / 2.0 ** 64
    acc = 0.0
    for visibility, owner, share in SHARES:
        acc += share
        if u < acc:
            return owner or f"owner-{int(u * 1e6) % OTHER_OWNERS}", visibility
    return f"owner-{int((u - acc) / (1 - acc) * OTHER_OWNERS) % OTHER_OWNERS}", "private"


def fingerprint(docs: list[Doc]) -> str:
    h = hashlib.sha256()
    for d in docs:
        h.update(d.name.encode())
        h.update(b"\x00")
        h.update(hashlib.sha256(d.text.encode()).digest())
    return h.hexdigest()[:16]
