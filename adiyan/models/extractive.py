"""The extractive grounded answerer (``llm.name=extractive``): it quotes, it never invents.

The answer is the retrieved sentence (or two) that best answers the question, quoted verbatim
with a ``[n]`` citation of the numbered passage it comes from (the numbering of the grounded
prompt, ``generation.assemble_context``; ``Answer.used[n-1]`` is that passage, ``used`` listing the
context's passages as for a generated answer). When
nothing clears the calibrated threshold it abstains with the project's phrasing,
``generation.NO_CONTEXT_ANSWER`` ("I don't know based on the documents."), which the keyword and
abstention metrics read.

A sentence's score is

    cos(question, sentence)  +  cue_weight · cue  +  lexical_weight · overlap

- ``cos``: the fixed embedder's cosine (all-MiniLM-L6-v2, whatever the retrieval embedder is,
  so the threshold calibrated for it stays valid), question as query, sentence as document; the
  higher of the sentence alone and the sentence with the one before it (so "It costs 320 euros."
  is read with the sentence that says what "it" is);
- ``cue`` (0 or 1): the sentence carries what the question type asks for: a number not in the
  question for "how much / how many / how long / price / cost...", a currency or a percentage for
  "how much / price / cost / fee", a date or a time for "when / what year / what time", a proper
  name not in the question for "who / whose"; untyped questions get 0 everywhere;
- ``overlap``: the share of the question's content words the sentence (with the one before it)
  contains.

A quoted sentence that opens with a pronoun ("It", "They", "This"...) is quoted with the
sentence before it, so the quote reads on its own.

The weights and the abstention threshold are calibrated on XQuAD and ClapNQ (never on a scored
set) by ``benchmarks/answerer.py --calibrate``, which writes ``extractive.yaml`` beside this file
with its provenance. Deterministic: the same question and passages give the same answer (ties
broken by passage rank, then position).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import yaml

from .base import ChatMessage, Completion, as_messages

PARAMS_FILE = Path(__file__).with_name("extractive.yaml")
ABSTAIN_TEXT = "I don't know based on the documents."  # = generation.NO_CONTEXT_ANSWER (no import cycle)
DEFAULT_PARAMS = {"threshold": 0.35, "cue_weight": 0.1, "lexical_weight": 0.2, "second_margin": 0.05,
                  "max_sentences": 2, "reader": False, "reader_top": 10, "reader_weight": 1.0,
                  "reader_threshold": 1.3, "reader_margin": 0.1}

_NUM_Q = re.compile(r"\b(how (much|many|long|far|old|often|tall|high|big|large|heavy|deep|wide|fast)|"
                    r"price|prices|cost|costs|fee|fees|percentage|percent|number of|amount|rate|"
                    r"what (size|altitude|height|distance)|minimum|maximum)\b", re.I)
_MONEY_Q = re.compile(r"\b(how much|price|prices|cost|costs|fee|fees|charge|charged|pay|paid|worth|supplement|"
                      r"discount|deposit|refund|salary|rate)\b", re.I)
_WHEN_Q = re.compile(r"\b(when|what (time|year|date|day|month|century|decade|season)|which (year|day|month|date|"
                     r"century|season)|in what year|how long ago)\b", re.I)
_WHO_Q = re.compile(r"\b(who|whom|whose|which (guide|person|people|company|team|player|author))\b", re.I)

_NUMBER = re.compile(r"\d+(?:[.,:]\d+)*")
_MONEY = re.compile(r"(€|\$|£|¥|\beuros?\b|\beur\b|\bdollars?\b|\bpounds?\b|\bcents?\b|\d\s?%|\bper ?cent\b)", re.I)
_DATE = re.compile(r"\b(january|february|march|april|may|june|july|august|september|october|november|december|"
                   r"jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec|monday|tuesday|wednesday|thursday|friday|"
                   r"saturday|sunday|century|centuries|\d{3,4}s?|\d{1,2}:\d{2}|\d{1,2}(st|nd|rd|th)|"
                   r"spring|summer|autumn|winter|morning|evening|noon|midnight|bc|ad)\b", re.I)
_WORD = re.compile(r"[A-Za-zÀ-ÖØ-öø-ÿĀ-ž0-9][\wÀ-ÖØ-öø-ÿĀ-ž'’-]*")
# a sentence ends at . ! ? (then space and a capital, digit or quote), or at a line break
_SENT_END = re.compile(r"(?<=[.!?])\s+(?=[\"“'(\[A-Z0-9À-ÖØ-ÞĀ-Ž])|\n+")
_MARKUP = re.compile(r"^\s*(#{1,6}\s+|[-*+]\s+|\d+[.)]\s+|>\s*)")
STOP = frozenset("""a an the of to in on at for by with from and or but is are was were be been being do does did
done have has had what which who whom whose when where why how that this these those it its as if then than
so such can could should would will shall may might must not no i you we they he she my your our their me us
them there here about into over under up down out off again all any each few more most other some own same
very just also only much many long per one get got tell please""".split())


_HEADING = re.compile(r"^\s*#{1,6}\s+")
_LIST = re.compile(r"^\s*([-*+]|\d+[.)])\s+")
_RULE_CELL = set("-: ")


def _soft_lines(text: str) -> list[str]:
    """The passage's lines, soft-wrapped ones joined: a line that ends no sentence, followed by one
    that opens in lower case or with a digit (and is no list item, table row or heading), continues
    it (a slide's "Code SNOW-24 gives" / "15 percent off all" / "snowshoe tours")."""
    out: list[str] = []
    for line in text.split("\n"):
        s = line.strip()
        prev = out[-1] if out else ""
        if (s and prev and not prev.startswith(("|", "#")) and not s.startswith("|") and not _LIST.match(s)
                and not re.search(r"[.!?:;]\s*$", prev) and (s[0].islower() or s[0].isdigit())):
            out[-1] = f"{prev} {s}"
        else:
            out.append(s)
    return out


_EMPHASIS = re.compile(r"(\*\*|__|`)")


def _cells(row: str) -> list[str]:
    return [_EMPHASIS.sub("", c).strip() for c in row.strip().strip("|").split("|")]


def _is_title(line: str, following: str) -> bool:
    """A line that names what follows rather than saying something: no sentence end, no table
    row or list item, and either under three words ("WINTER PROMO") or, without a digit, in title
    case before a blank line ("Adiyan Travel: Frequently Asked Questions")."""
    if line.startswith("|") or _LIST.match(line) or re.search(r"[.!?;]\s*$", line):
        return False
    words = _WORD.findall(line)
    if len(words) < 3:
        return True
    if any(ch.isdigit() for ch in line):  # "Julian Alps Weekend: 450 EUR per person" says something
        return False
    long = [w for w in words if len(w) > 3 and not w[0].isdigit()]
    return not following and bool(long) and sum(w[0].isupper() for w in long) / len(long) >= 0.75


def split_units(text: str) -> list[tuple[str, str]]:
    """A passage's answerable units, each with the heading it sits under: ``(unit, heading)``.

    Units are sentences and lines (list items, a slide's lines), markup stripped, whitespace
    collapsed. Headings are context, never a unit: a Markdown heading, and the chunker's heading
    path on a chunk's first line ("Guide > Chapter 4 > The Zlatorog Saddle Hut"); they are what
    the units under them are about. A table row is one unit read with its header,
    "Product code: TR-JUL-03; Target 2026: 720" (a row cut from its header by the chunker is read
    as its cells). Units of fewer than three words are dropped (labels)."""
    out: list[tuple[str, str]] = []
    heading, header, prev_cells = "", None, None
    lines = _soft_lines(text)
    for n, line in enumerate(lines):
        if not line:  # a blank line ends a table: the next table's header is its own
            header = prev_cells = None
            continue
        if _HEADING.match(line) or (n == 0 and " > " in line) or _is_title(line, lines[n + 1] if n + 1 < len(lines) else ""):
            heading, header = " ".join(_EMPHASIS.sub("", _HEADING.sub("", line)).split()), None
            continue
        if line.startswith("|"):
            cells = _cells(line)
            if all(set(c) <= _RULE_CELL for c in cells):  # the |---| rule: the row before it was the header
                if prev_cells is not None and out and out[-1][0] == " ".join(" | ".join(c for c in prev_cells if c).split()):
                    out.pop()
                header, prev_cells = prev_cells, None
                continue
            prev_cells = cells
            if header and len(header) == len(cells):
                unit = "; ".join(f"{h}: {c}" if h else c for h, c in zip(header, cells) if c)
            else:
                unit = " | ".join(c for c in cells if c)
            unit = " ".join(unit.split())
            if len(_WORD.findall(unit)) >= 3:
                out.append((unit, heading))
            continue
        header = prev_cells = None
        # a list item is one unit (its sentences share a subject: "The Julian Alps Weekend costs 450
        # euros per person. The single supplement is 95 euros."), unless it is long
        parts = [line] if _LIST.match(line) and len(line.split()) <= 60 else _SENT_END.split(line)
        for part in parts:
            s = " ".join(_EMPHASIS.sub("", _MARKUP.sub("", part)).strip().split())
            if s.endswith(" …"):  # a passage the budget cut: its last unit is partial, still a quote
                s = s[:-2].rstrip()
            if len(_WORD.findall(s)) >= 3:
                out.append((s, heading))
    return out


def split_sentences(text: str) -> list[str]:
    """A passage's answerable units (``split_units`` without their headings)."""
    return [u for u, _ in split_units(text)]


def _stem(w: str) -> str:
    w = w.lower().strip("'’-")
    for suf in ("ing", "es", "s"):
        if len(w) > len(suf) + 2 and w.endswith(suf):
            return w[: -len(suf)]
    return w


def content_words(text: str) -> set[str]:
    return {_stem(w) for w in _WORD.findall(text) if w.lower() not in STOP}


def question_types(question: str) -> set[str]:
    """What the question asks for: ``number``, ``money``, ``date``, ``name`` (possibly several)."""
    t = set()
    if _NUM_Q.search(question):
        t.add("number")
    if _MONEY_Q.search(question) and ("number" in t or re.search(r"\bhow much\b", question, re.I)):
        t.add("money")
    if _WHEN_Q.search(question):
        t.add("date")
    if _WHO_Q.search(question):
        t.add("name")
    return t


def cue(types: set[str], question: str, sentence: str) -> float:
    """1 when the sentence carries what the question type asks for (every type it asks), else 0."""
    if not types:
        return 0.0
    q_numbers = set(_NUMBER.findall(question))
    q_words = {w.lower() for w in _WORD.findall(question)}
    ok = True
    if "number" in types:
        ok &= any(n not in q_numbers for n in _NUMBER.findall(sentence))
    if "money" in types:
        ok &= bool(_MONEY.search(sentence))
    if "date" in types:
        ok &= bool(_DATE.search(sentence))
    if "name" in types:
        tokens = _WORD.findall(sentence)
        ok &= any(t[0].isupper() and t.lower() not in q_words and t.lower() not in STOP for t in tokens[1:])
    return float(ok)


@dataclass
class Candidate:
    passage: int  # 1-based number of the passage in the context
    position: int  # sentence index within the passage
    text: str
    score: float = 0.0
    similarity: float = 0.0
    cue: float = 0.0
    overlap: float = 0.0
    previous: str = ""  # the sentence before it in the passage ("" for the first)
    heading: str = ""  # the heading it sits under ("" for none)
    reader: float | None = None  # the reader's P(it answers the question); None: not read

    def headed(self) -> str:
        """What the reader reads: the unit under its heading (and after the unit it refers back to)."""
        body = self.quote()
        return f"{self.heading}: {body}" if self.heading else body

    def quote(self) -> str:
        """The sentence, with the one before it when it opens with a pronoun."""
        if self.previous and _ANAPHOR.match(self.text):
            return f"{self.previous} {self.text}"
        return self.text


_ANAPHOR = re.compile(r"^(it|its|they|their|them|this|these|that|those|he|she|his|her|there)\b", re.I)


@dataclass
class Extraction:
    text: str
    quoted: list[Candidate]  # what the answer quotes, best first
    best: Candidate | None
    abstained: bool


def load_params(path: Path = PARAMS_FILE) -> dict:
    """The calibrated parameters (``extractive.yaml``), over the built-in defaults."""
    params = dict(DEFAULT_PARAMS)
    if path.is_file():
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        params.update({k: data[k] for k in DEFAULT_PARAMS if k in data})
    return params


class ExtractiveAnswerer:
    """Quotes the best-answering retrieved sentence(s) with citations, or abstains.

    It is not a generative model: ``generative = False`` tells the entry points that need one
    (HyDE, history rewriting, memory consolidation) to refuse it by name. ``chat`` answers the
    grounded prompt (numbered passages in the system message, the question last); any other
    prompt has no passages and gets the abstention.
    """

    generative = False

    def __init__(self, embedder, *, params: dict | None = None, context_size: int = 8192, reader=None):
        self.embedder = embedder
        self.params = {**load_params(), **(params or {})}  # "reader" comes from llm.reader (default off)
        self.context_size = context_size  # passages it can read at once (no model window: the budget rules)
        eid = getattr(embedder, "id", "?")
        self.reader = reader if self.params.get("reader") else None
        if self.params.get("reader") and reader is None:
            raise ValueError("the extractive answerer with reader=True needs the reader (models.reader.Reader.load(), "
                             "passed by the registry for llm.reader=true)")
        self.id = f"extractive-v2:{eid}" + (f"+{self.reader.identity}" if self.reader else "")
        self.temperature, self.max_tokens, self.seed = 0.0, 0, 0

    def describe(self) -> dict:
        return {"id": self.id, "kind": "extractive", "params": dict(self.params),
                "reader": getattr(self.reader, "identity", None),
                "params_file": str(PARAMS_FILE) if PARAMS_FILE.is_file() else None}

    def count_tokens(self, text: str) -> int:
        return max(1, (len(text) + 3) // 4)

    # -- scoring --------------------------------------------------------------------------
    def features(self, question: str, passages: Sequence[str]) -> list[Candidate]:
        """Every sentence of every passage with its similarity, cue and overlap (unscored)."""
        cands: list[Candidate] = []
        for i, text in enumerate(passages, 1):
            units = split_units(text)
            for j, (sent, heading) in enumerate(units):
                prev = units[j - 1][0] if j and units[j - 1][1] == heading else ""
                cands.append(Candidate(i, j, sent, previous=prev, heading=heading))
        if not cands:
            return []
        # each unit is read alone and under its heading (what it is about); one that opens with a
        # pronoun also with the unit before it, which says what "it" is (and is quoted with it)
        windows = [f"{c.previous} {c.text}" if c.previous and _ANAPHOR.match(c.text) else c.text for c in cands]
        headed = [f"{c.heading}: {c.text}" if c.heading else c.text for c in cands]
        q = np.asarray(self.embedder.embed([question], kind="query"), dtype=np.float32)[0]
        uniq = list(dict.fromkeys([c.text for c in cands] + windows + headed))
        rows = np.asarray(self.embedder.embed(uniq, kind="document"), dtype=np.float32)
        sim = dict(zip(uniq, (rows @ q).tolist()))
        types = question_types(question)
        qwords = content_words(question)
        for c, w, h in zip(cands, windows, headed):
            c.similarity = round(max(sim[c.text], sim[w], sim[h]), 6)
            c.cue = cue(types, question, c.text)
            c.overlap = (round(len(qwords & (content_words(w) | content_words(c.heading))) / len(qwords), 6)
                         if qwords else 0.0)
        return cands

    def rescore(self, cands: list[Candidate], params: dict | None = None) -> list[Candidate]:
        p = params or self.params
        for c in cands:
            c.score = round(c.similarity + p["cue_weight"] * c.cue + p["lexical_weight"] * c.overlap, 6)
        return cands

    def read(self, question: str, cands: list[Candidate], top: int | None = None) -> list[Candidate]:
        """The reader's P(answers) on the ``top`` candidates by score (the rest keep ``reader=None``)."""
        if self.reader is None or not cands:
            return cands
        n = int(top if top is not None else self.params["reader_top"])
        ranked = sorted(cands, key=lambda c: (-c.score, c.passage, c.position))[:n]
        for c, p in zip(ranked, self.reader.answers(question, [c.headed() for c in ranked])):
            c.reader = round(p, 6)
        return cands

    def candidates(self, question: str, passages: Sequence[str]) -> list[Candidate]:
        """Every sentence of every passage, scored (unsorted; passage numbers from 1); with the
        reader, the best ``reader_top`` of them also read."""
        return self.read(question, self.rescore(self.features(question, passages)))

    def extract(self, question: str, passages: Sequence[str]) -> Extraction:
        return self.decide(question, self.candidates(question, passages))

    def decide(self, question: str, cands: list[Candidate], params: dict | None = None) -> Extraction:
        """The answer from scored candidates: the best, a second close one, or the abstention."""
        p = params or self.params
        if not cands:
            return Extraction(ABSTAIN_TEXT, [], None, True)
        if p.get("reader") and any(c.reader is not None for c in cands):
            return self._decide_read(cands, p)
        ranked = sorted(cands, key=lambda c: (-c.score, c.passage, c.position))
        best = ranked[0]
        if best.score < p["threshold"]:
            return Extraction(ABSTAIN_TEXT, [], best, True)
        quoted = [best]
        typed = bool(question_types(question))
        for c in ranked[1:]:
            if len(quoted) >= int(p["max_sentences"]):
                break
            if c.score < best.score - p["second_margin"] or (typed and not c.cue):
                break
            if c.text not in {q.text for q in quoted} and c.text != best.previous and c.previous != best.text:
                quoted.append(c)
        text = " ".join(f"{c.quote()} [{c.passage}]" for c in quoted)
        return Extraction(text, quoted, best, False)

    def _decide_read(self, cands: list[Candidate], p: dict) -> Extraction:
        """With the reader: each read unit's ``score + reader_weight · P(answers)`` decides. The best
        is quoted unless it is under ``reader_threshold`` (then the abstention); a second unit within
        ``reader_margin`` of it that also clears the threshold is quoted too."""
        w = p["reader_weight"]
        z = {id(c): c.score + w * c.reader for c in cands if c.reader is not None}
        read = sorted((c for c in cands if c.reader is not None),
                      key=lambda c: (-z[id(c)], c.passage, c.position))
        best = read[0]
        if z[id(best)] < p["reader_threshold"]:
            return Extraction(ABSTAIN_TEXT, [], best, True)
        quoted = [best]
        for c in read[1:]:
            if len(quoted) >= int(p["max_sentences"]) or \
                    z[id(c)] < max(p["reader_threshold"], z[id(best)] - p["reader_margin"]):
                break
            if c.text not in {q.text for q in quoted} and c.text != best.previous and c.previous != best.text:
                quoted.append(c)
        text = " ".join(f"{c.quote()} [{c.passage}]" for c in quoted)
        return Extraction(text, quoted, best, False)

    # -- the LLM interface, for callers that only have messages ---------------------------
    def chat(self, messages: Sequence[ChatMessage | dict], *, max_tokens: int | None = None,
             temperature: float | None = None) -> Completion:
        msgs = as_messages(messages)
        question = next((m["content"] for m in reversed(msgs) if m["role"] == "user"), "")
        system = next((m["content"] for m in msgs if m["role"] == "system"), "")
        passages = parse_passages(system)
        ex = self.extract(question, passages) if passages else Extraction(ABSTAIN_TEXT, [], None, True)
        return Completion(text=ex.text, model=self.id)


_PASSAGE = re.compile(r"^\[(\d+)\] \((.*?)\)\n", re.M)


def parse_passages(system: str) -> list[str]:
    """The numbered passages of a grounded prompt (``generation.assemble_context``), in order."""
    if "\n\nContext:\n" not in system:
        return []
    body = system.split("\n\nContext:\n", 1)[1].split("\n\nWhat you remember about the user:\n", 1)[0]
    marks = list(_PASSAGE.finditer(body))
    return [body[m.end(): marks[i + 1].start() if i + 1 < len(marks) else len(body)].strip()
            for i, m in enumerate(marks)]
