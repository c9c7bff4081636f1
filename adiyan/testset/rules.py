"""The offline question rules: sentences, answer spans, wh-questions and rule paraphrases.

No model is involved: every function is a pure function of its text (and of a seeded
``random.Random`` where a choice is made), so the same corpus and seed give the same questions.

Answer spans, most specific first: a date, a year, a code (letters and digits, ``TR-TRG-04``), a
quantity with a unit (``320 euros``, ``2,214 metres``, ``8%``), a bare number, a named entity (a run
of capitalised words not at the sentence's start). A lookup question is its sentence clause with
the span replaced by a wh-phrase fitting its type ("which year", "how many euros", "which code",
"what"); a paraphrase fronts the wh-phrase, drops function words and replaces words by synonyms
from :data:`SYNONYMS`, so the question's word overlap with its chunk drops (the report measures it).
"""

from __future__ import annotations

import random
import re

MONTHS = ("January|February|March|April|May|June|July|August|September|October|November|December|"
          "Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec")
UNITS = ("percent|per cent|%|euros?|EUR|€|dollars?|USD|\\$|pounds?|GBP|£|km|kilometres?|kilometers?|miles?|"
         "metres?|meters?|m|cm|mm|kg|g|tonnes?|tons?|litres?|liters?|hours?|hrs?|minutes?|mins?|seconds?|days?|"
         "weeks?|months?|years?|nights?|people|persons?|points?|pages?|MB|GB|TB|KB|ms|Hz|kHz|MHz|GHz|°C|°F|"
         "degrees?|million|billion|thousand|hectares?|acres?|inches|inch|feet|foot|ft|words?|times|members?|"
         "employees?|students?|copies|species|votes?|seats?")
_DATE = re.compile(rf"\b(?:\d{{1,2}}(?:st|nd|rd|th)?\s+(?:{MONTHS})\.?,?\s+\d{{4}}|(?:{MONTHS})\.?\s+\d{{1,2}}"
                   rf"(?:st|nd|rd|th)?,?\s+\d{{4}}|\d{{4}}-\d{{2}}-\d{{2}}|(?:{MONTHS})\s+\d{{4}})\b")
_TIME = re.compile(r"\b(?:[01]?\d|2[0-3])[:.][0-5]\d(?:\s?[ap]\.?m\.?)?(?![\d])")
_YEAR = re.compile(r"\b(?:1[5-9]\d\d|20\d\d)s?\b")
_CODE = re.compile(r"\b(?=[A-Z0-9-]*[A-Z])(?=[A-Z0-9-]*\d)[A-Z0-9]+(?:-[A-Z0-9]+)+\b|\b[A-Z]{2,}\d+[A-Z0-9]*\b")
_QTY = re.compile(rf"(?<![\w.])[$€£]?\d[\d,]*(?:\.\d+)?\s?(?:{UNITS})(?![\w])")
_NUM = re.compile(r"(?<![\w.,:\[-])\d[\d,]*(?:\.\d+)?(?![\w%\]])")
_ENTITY = re.compile(r"\b[A-Z][\w'’-]*[a-z][\w'’-]*(?:\s+(?:of|de|van|von|the|and|du|la|del)?\s*[A-Z][\w'’-]*)*")
_SENT = re.compile(r"(?<=[.!?])[\"'”’)]?\s+(?=[\"'“‘(]?[A-Z0-9])")
_WORD = re.compile(r"[^\W_]+(?:[-'][^\W_]+)*")

STOPWORDS = frozenset("""a an the of to in on at by for with from and or but is are was were be been being it its this
that these those as which who whom whose what when where why how do does did has have had not no nor so than then
there their they them he she his her him we our you your i me my into over under about after before between during
also can could may might must shall should will would if while such any all each both some more most other per via
up out off only own same very just""".split())

PREPOSITIONS = frozenset("in on at by since until till from before after during around about of".split())

# A small rule thesaurus (lowercase word -> replacement); common words of documents and questions.
SYNONYMS = {
    "buy": "purchase", "purchase": "buy", "cost": "price", "costs": "is priced at", "price": "cost",
    "begin": "start", "begins": "starts", "start": "begin", "starts": "begins", "started": "began",
    "end": "finish", "ends": "finishes", "finished": "ended", "big": "large", "large": "big", "small": "little",
    "little": "small", "many": "numerous", "use": "employ", "uses": "employs", "used": "employed", "using": "employing",
    "make": "produce", "makes": "produces", "made": "produced", "show": "display", "shows": "displays",
    "shown": "displayed", "help": "assist", "helps": "assists", "get": "obtain", "gets": "obtains", "got": "obtained",
    "give": "provide", "gives": "provides", "gave": "provided", "given": "provided", "need": "require",
    "needs": "requires", "needed": "required", "allow": "permit", "allows": "permits", "allowed": "permitted",
    "build": "construct", "built": "constructed", "building": "structure", "city": "town", "town": "city",
    "country": "nation", "nation": "country", "people": "persons", "person": "individual", "children": "kids",
    "child": "kid", "car": "vehicle", "house": "home", "home": "house", "job": "occupation", "work": "labour",
    "works": "labours", "worked": "laboured", "company": "firm", "firm": "company", "business": "enterprise",
    "large-scale": "big", "important": "significant", "significant": "important", "main": "principal",
    "major": "principal", "first": "initial", "last": "final", "final": "last", "new": "novel", "old": "aged",
    "ancient": "very old", "famous": "renowned", "known": "recognised", "called": "named", "named": "called",
    "name": "title", "law": "statute", "rule": "regulation", "rules": "regulations", "government": "administration",
    "leader": "head", "king": "monarch", "war": "conflict", "battle": "fight", "fight": "battle", "army": "military",
    "river": "waterway", "mountain": "peak", "mountains": "peaks", "lake": "loch", "sea": "ocean", "island": "isle",
    "area": "region", "region": "area", "land": "territory", "road": "route", "route": "path", "trip": "journey",
    "journey": "trip", "tour": "excursion", "travel": "journey", "travellers": "tourists", "guests": "visitors",
    "guest": "visitor", "guide": "leader", "hotel": "lodging", "hut": "cabin", "room": "chamber", "price list": "tariff",
    "refund": "reimbursement", "fee": "charge", "fees": "charges", "discount": "reduction", "book": "reserve",
    "booking": "reservation", "booked": "reserved", "cancel": "call off", "cancelled": "called off",
    "cancellation": "calling off", "document": "file", "documents": "files", "report": "account", "study": "research",
    "studies": "research", "research": "study", "scientist": "researcher", "scientists": "researchers",
    "found": "discovered", "discovered": "found", "increase": "rise", "increased": "rose", "decrease": "drop",
    "decreased": "fell", "reduce": "lower", "reduced": "lowered", "high": "tall", "higher": "taller",
    "fast": "quick", "quick": "fast", "slow": "unhurried", "early": "premature", "late": "tardy",
    "age": "era",
    "century": "hundred years", "population": "inhabitants", "food": "nourishment", "money": "funds",
    "school": "academy", "university": "college", "student": "pupil", "students": "pupils", "teacher": "instructor",
    "team": "squad", "game": "match", "won": "triumphed in", "win": "triumph", "lost": "was defeated in",
    "play": "perform", "played": "performed", "song": "track", "album": "record", "film": "movie", "movie": "film",
    "show ": "programme", "series": "sequence", "season": "period", "member": "participant", "members": "participants",
    "group": "party", "largest": "biggest", "biggest": "largest", "smallest": "tiniest", "highest": "tallest",
    "longest": "lengthiest", "oldest": "most ancient", "best": "finest", "located": "situated", "lies": "sits",
    "include": "comprise", "includes": "comprises", "included": "comprised", "contain": "hold", "contains": "holds",
    "receive": "get", "received": "got", "create": "form", "created": "formed", "develop": "evolve",
    "developed": "evolved", "produce": "generate", "produced": "generated", "protein": "polypeptide",
    "cells": "cellular units", "cell": "cellular unit", "patients": "subjects", "patient": "subject",
    "disease": "illness", "risk": "danger", "treatment": "therapy", "effect": "impact", "effects": "impacts",
    "associated": "linked", "levels": "amounts", "level": "amount", "method": "approach", "methods": "approaches",
    "results": "findings", "result": "outcome", "data": "information", "table": "grid", "figure": "illustration",
    "page": "sheet", "section": "part", "chapter": "part", "model": "system", "system": "framework",
    "performance": "efficacy", "version": "edition", "released": "issued", "release": "issue", "born": "delivered",
    "died": "passed away", "married": "wed", "wrote": "authored", "written": "authored", "located in": "found in",
}

WH = {"date": "on what date", "time": "at what time", "year": "in which year", "code": "which code", "number": "what number",
      "entity": "what", "quantity": "how much"}


def sentences(body: str, *, min_chars: int = 30, max_chars: int = 320) -> list[str]:
    """Prose sentences of a chunk body: split on lines and sentence ends; headings, table rows,
    list bullets' markers and very short or very long pieces dropped."""
    out = []
    for line in body.splitlines():
        s = line.strip()
        if not s or s.startswith(("#", "|", "```", "<!--")) or s.count("|") >= 2:
            continue
        s = re.sub(r"^(?:[-*+•]|\d+[.)])\s+", "", s).replace("**", "").replace("__", "")
        for piece in _SENT.split(s):
            piece = piece.strip()
            if min_chars <= len(piece) <= max_chars and is_prose(piece):
                out.append(piece)
    return out


_MARKUP = re.compile(r"\]\(|\$\$|</?[a-zA-Z]|\\[_a-zA-Z]|\. \. \.|\.{4,}|&#|\{|\}|\[\^")
_LATIN_WORD = re.compile(r"\b[A-Za-z][a-z]+\b")


def is_prose(text: str) -> bool:
    """A sentence worth asking about: at least 5 Latin-script words (the wh-phrases are English) making
    up most of it, no markup (links, LaTeX, HTML tags, escapes, table-of-contents dot leaders)."""
    if _MARKUP.search(text):
        return False
    words = _WORD.findall(text)
    latin = _LATIN_WORD.findall(text)
    if len(latin) < 5 or len(latin) < 0.6 * len(words):
        return False
    return sum(ch.isalpha() or ch.isspace() for ch in text) >= 0.8 * len(text)


def _unit_of(span: str) -> str:
    m = re.search(r"[A-Za-z%€$£°]+.*$", span)
    return m.group(0).strip() if m else ""


def spans(sentence: str) -> list[tuple[str, str, int]]:
    """(span, type, start) candidates of a sentence, most specific type first, non-overlapping."""
    found: list[tuple[str, str, int]] = []
    taken: list[tuple[int, int]] = []

    def add(m, kind):
        s, e = m.start(), m.end()
        if any(s < b and a < e for a, b in taken):
            return
        taken.append((s, e))
        found.append((m.group(0).strip(), kind, s))

    for rx, kind in ((_DATE, "date"), (_TIME, "time"), (_CODE, "code"), (_YEAR, "year"), (_QTY, "quantity"), (_NUM, "number")):
        for m in rx.finditer(sentence):
            if kind == "number" and len(m.group(0).replace(",", "").split(".")[0]) < 2:
                taken.append((m.start(), m.end()))  # a single digit: a list number or a count too vague to ask
                continue
            add(m, kind)
    for m in _ENTITY.finditer(sentence):
        text = m.group(0).strip()
        if m.start() == 0 and " " not in text:
            continue  # a capitalised first word is just the sentence's start
        if text.lower() in STOPWORDS or len(text) < 3:
            continue
        if m.start() == 0:  # drop the sentence-initial word of a multi-word run ("The Triglav" -> "Triglav")
            first, _, rest = text.partition(" ")
            if first.lower() in STOPWORDS:
                text = rest.strip()
                if " " not in text and len(text) < 4:
                    continue
                add(re.search(re.escape(text), sentence), "entity")
                continue
        add(m, "entity")
    found.sort(key=lambda t: t[2])
    return found


def wh_phrase(span: str, kind: str) -> str:
    if kind == "quantity":
        unit = _unit_of(span)
        if unit in ("%", "percent", "per cent"):
            return "what percentage"
        if unit.lower() in ("million", "billion", "thousand"):
            return "how many"
        if unit and unit[0] in "€$£":
            return "how much money"
        return f"how many {unit}" if unit else "how many"
    if kind == "quantity" and span[:1] in "€$£":
        return "how much money"
    return WH[kind]


def _clause(sentence: str, start: int, end: int, max_words: int = 26) -> tuple[str, int, int]:
    """The sentence cut to its ';'-clause holding [start, end), then to at most ``max_words`` words around it."""
    a = sentence.rfind("; ", 0, start)
    b = sentence.find("; ", end)
    if a >= 0 or b >= 0:
        a = a + 2 if a >= 0 else 0
        b = b if b >= 0 else len(sentence)
        return _clause(sentence[a:b], start - a, end - a, max_words)
    words = list(re.finditer(r"\S+", sentence))
    if len(words) <= max_words:
        return sentence, start, end
    idx = [i for i, w in enumerate(words) if w.end() > start and w.start() < end]
    lo = max(0, idx[0] - max_words // 2)
    hi = min(len(words), lo + max_words)
    lo = max(0, hi - max_words)
    a, b = words[lo].start(), words[hi - 1].end()
    return sentence[a:b], start - a, end - a


def lookup_question(sentence: str, span: str, kind: str, start: int) -> str:
    """The sentence (clause) with its span replaced by a wh-phrase, as a question."""
    end = start + len(span)
    text, s, e = _clause(sentence, start, end)
    wh = wh_phrase(span, kind)
    before = text[:s].rstrip()
    first, _, rest = wh.partition(" ")
    last = before.rsplit(" ", 1)[-1].lower() if before else ""
    if rest and first in PREPOSITIONS and last in PREPOSITIONS:  # "renew it in" + "on what date": "renew it on what date"
        before = before[: len(before) - len(last)].rstrip()
    if wh == "what" and (before.lower().endswith(" the") or before.lower() == "the"):
        before = before[:-3].rstrip()  # "the what" -> "what"
    q = before + (" " if before and before[-1] not in "([{“‘\"'" else "") + wh + text[e:]
    q = re.sub(r"\s+", " ", q).strip().rstrip(".!;:,") + "?"
    return q[:1].upper() + q[1:]


def paraphrase_question(sentence: str, span: str, kind: str, start: int, rng: random.Random) -> str:
    """A rule rewording: the wh-phrase first, function words dropped, words swapped for synonyms
    (each with probability 0.8), about 30% of the lowercase content words left out (names and numbers stay)."""
    end = start + len(span)
    text, s, e = _clause(sentence, start, end, max_words=22)
    rest = text[:s] + " " + text[e:]
    words = []
    for w in _WORD.findall(rest):
        lw = w.lower()
        if lw in STOPWORDS:
            continue
        syn = SYNONYMS.get(lw)
        words.append(syn if syn and rng.random() < 0.8 else w)
    keep = [w for w in words if w[:1].isupper() or w[:1].isdigit() or rng.random() >= 0.3] or words[:3]
    wh = wh_phrase(span, kind)
    q = f"{wh[:1].upper()}{wh[1:]}: {' '.join(keep)}?"
    return q


def tokens(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def overlap(question: str, chunk: str) -> float:
    """Share of the question's content words that occur in the chunk."""
    q = {w for w in tokens(question) if w not in STOPWORDS}
    if not q:
        return 0.0
    c = set(tokens(chunk))
    return len(q & c) / len(q)


def fake_name(rng: random.Random, known: str) -> str:
    """A two-word capitalised name whose words occur nowhere in ``known`` (the corpus, lowercased)."""
    onsets = ["br", "k", "v", "z", "tr", "m", "l", "d", "sk", "gl", "p", "r", "h", "n", "st"]
    vowels = ["a", "e", "i", "o", "u", "ai", "ou", "ea"]
    codas = ["n", "r", "l", "x", "th", "sk", "m", "nd", "v", ""]
    for _ in range(200):
        words = []
        for _w in range(2):
            w = "".join(rng.choice(onsets) + rng.choice(vowels) for _ in range(rng.randint(2, 3))) + rng.choice(codas)
            words.append(w.capitalize())
        if all(w.lower() not in known for w in words):
            return " ".join(words)
    raise RuntimeError("could not make a name absent from the corpus")


def pronoun(text: str, entity: str) -> str:
    """``text`` with ``entity`` (and a "the" before it) replaced by "it"."""
    out = re.sub(rf"\b[Tt]he\s+{re.escape(entity)}", "it", text)
    out = out.replace(entity, "it")
    return out[:1].upper() + out[1:] if out.startswith("it") and text[:1].isupper() else out
