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
                  "max_sentences": 2}

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


def split_sentences(text: str) -> list[str]:
    """A passage's sentences (and lines: headings, list items, table rows), markup stripped,
    whitespace collapsed; units of fewer than three words are dropped (headings, labels)."""
    out = []
    for part in _SENT_END.split(text):
        s = _MARKUP.sub("", part).strip()
        if s.startswith("|"):  # a Markdown table row: its cells, readable
            cells = [c.strip() for c in s.strip("|").split("|")]
            if all(set(c) <= set("-: ") for c in cells):
                continue  # the |---|---| rule
            s = " | ".join(c for c in cells if c)
        s = " ".join(s.split())
        if s.endswith(" …"):  # a passage the budget cut: its last unit is partial, still a quote
            s = s[:-2].rstrip()
        if len(_WORD.findall(s)) >= 3:
            out.append(s)
    return out


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

    def __init__(self, embedder, *, params: dict | None = None, context_size: int = 8192):
        self.embedder = embedder
        self.params = {**load_params(), **(params or {})}
        self.context_size = context_size  # passages it can read at once (no model window: the budget rules)
        eid = getattr(embedder, "id", "?")
        self.id = f"extractive-v1:{eid}"
        self.temperature, self.max_tokens, self.seed = 0.0, 0, 0

    def describe(self) -> dict:
        return {"id": self.id, "kind": "extractive", "params": dict(self.params),
                "params_file": str(PARAMS_FILE) if PARAMS_FILE.is_file() else None}

    def count_tokens(self, text: str) -> int:
        return max(1, (len(text) + 3) // 4)

    # -- scoring --------------------------------------------------------------------------
    def features(self, question: str, passages: Sequence[str]) -> list[Candidate]:
        """Every sentence of every passage with its similarity, cue and overlap (unscored)."""
        cands: list[Candidate] = []
        for i, text in enumerate(passages, 1):
            sents = split_sentences(text)
            for j, sent in enumerate(sents):
                cands.append(Candidate(i, j, sent, previous=sents[j - 1] if j else ""))
        if not cands:
            return []
        windows = [f"{c.previous} {c.text}" if c.previous else c.text for c in cands]
        q = np.asarray(self.embedder.embed([question], kind="query"), dtype=np.float32)[0]
        uniq = list(dict.fromkeys([c.text for c in cands] + windows))
        rows = np.asarray(self.embedder.embed(uniq, kind="document"), dtype=np.float32)
        sim = dict(zip(uniq, (rows @ q).tolist()))
        types = question_types(question)
        qwords = content_words(question)
        for c, w in zip(cands, windows):
            c.similarity = round(max(sim[c.text], sim[w]), 6)
            c.cue = cue(types, question, c.text)
            c.overlap = round(len(qwords & content_words(w)) / len(qwords), 6) if qwords else 0.0
        return cands

    def rescore(self, cands: list[Candidate], params: dict | None = None) -> list[Candidate]:
        p = params or self.params
        for c in cands:
            c.score = round(c.similarity + p["cue_weight"] * c.cue + p["lexical_weight"] * c.overlap, 6)
        return cands

    def candidates(self, question: str, passages: Sequence[str]) -> list[Candidate]:
        """Every sentence of every passage, scored (unsorted; passage numbers from 1)."""
        return self.rescore(self.features(question, passages))

    def extract(self, question: str, passages: Sequence[str]) -> Extraction:
        return self.decide(question, self.candidates(question, passages))

    def decide(self, question: str, cands: list[Candidate], params: dict | None = None) -> Extraction:
        """The answer from scored candidates: the best, a second close one, or the abstention."""
        p = params or self.params
        if not cands:
            return Extraction(ABSTAIN_TEXT, [], None, True)
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
