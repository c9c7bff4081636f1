"""Training pairs for the claim checker: (claim, passage, supported?) built from public data.

Why synthetic pairs and not HaluEval alone: a cross-encoder trained on HaluEval's QA items reached
0.97 on held-out HaluEval and was worse than chance on human-labelled RAG responses (issue 39):
HaluEval's hallucinations are written to be caught. Real systems' unsupported claims are mostly
(RAGTruth's two families) *baseless information* -- a fluent, on-topic sentence the passage does not
hold -- and *conflicts* -- a supported sentence with one number, entity, date or polarity changed.
Both are made here from documents, MiniCheck-style:

- the passage is a window of consecutive sentences of a document;
- supported claims: a window sentence as it stands, cut to a clause, two of them fused, or framed
  ("The text says that ...");
- baseless claims: a sentence of the *same document* outside the window (on topic, fluent, and
  not in the passage), a window sentence with such a sentence's clause appended, or a sentence of
  another document;
- conflicts: a window sentence with a number, a capitalised name, a month or weekday, or its
  polarity changed.

Sources (paths given by the caller; nothing is downloaded): HaluEval's summarisation documents
(CNN/DailyMail, MIT) and QA knowledge paragraphs (HotpotQA/Wikipedia), plus HaluEval QA's right /
hallucinated answers as a minority share. Documents whose opening also opens a document of an
``exclude`` set (the human-labelled validation sources) are dropped, so nothing validated on is
trained on. Everything is seeded: the same inputs and seed give the same pairs.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Sequence

_SENT = re.compile(r"(?<=[.!?])[\"'”’)]?\s+(?=[\"'“‘(]?[A-Z0-9])")
_NUM = re.compile(r"\b\d+(?:[.,]\d+)*\b")
_NAME = re.compile(r"\b[A-Z][a-z]+(?:\s+[A-Z][a-z]+)*\b")
_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
           "October", "November", "December"]
_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
_NEG = [(r"\bis not\b", "is"), (r"\bwas not\b", "was"), (r"\bare not\b", "are"), (r"\bwere not\b", "were"),
        (r"\bdid not\b", "did"), (r"\bdoes not\b", "does"), (r"\bcan not\b|\bcannot\b", "can"),
        (r"\bhas not\b", "has"), (r"\bhave not\b", "have"), (r"\bwill not\b", "will"),
        (r"\bis\b", "is not"), (r"\bwas\b", "was not"), (r"\bare\b", "are not"), (r"\bwere\b", "were not"),
        (r"\bhas\b", "has not"), (r"\bhave\b", "have not"), (r"\bwill\b", "will not"), (r"\bcan\b", "cannot")]
_ANTONYMS = [("increase", "decrease"), ("increased", "decreased"), ("rose", "fell"), ("won", "lost"),
             ("before", "after"), ("more", "fewer"), ("higher", "lower"), ("larger", "smaller"),
             ("first", "last"), ("open", "closed"), ("allowed", "banned"), ("older", "younger"),
             ("north", "south"), ("east", "west"), ("accepted", "rejected"), ("early", "late"),
             ("better", "worse"), ("true", "false"), ("available", "unavailable"), ("free", "paid")]
_FRAMES = ["The text says that {s}", "According to the passage, {s}", "It is reported that {s}",
           "The source states that {s}", "{s}"]
_NAME_STOP = frozenset("The A An In On At For And But This That It He She They We His Her Their "
                       "When While After Before If As By From With Of To Mr Mrs Ms Dr".split())


@dataclass(frozen=True)
class Pair:
    claim: str
    passage: str
    label: int  # 1 supported, 0 not
    kind: str   # how it was made (the data card counts these)


def sentences(text: str) -> list[str]:
    out = []
    for para in re.split(r"\n\s*\n|\n", text):
        for s in _SENT.split(para.strip()):
            s = " ".join(s.split())
            if 5 <= len(s.split()) <= 60:
                out.append(s)
    return out


def _opening(text: str) -> str:
    return " ".join(text.split())[:160].lower()


def _lower_first(s: str) -> str:
    """A sentence to follow ", and ": a leading conjunction dropped, a leading function word lowered."""
    s = re.sub(r"^(And|But|So|Or|Yet)\s+", "", s)
    head = s.split()[0] if s.split() else ""
    return s[0].lower() + s[1:] if head in _NAME_STOP else s


def _frame(s: str, rng: random.Random) -> str:
    f = rng.choice(_FRAMES)
    if f == "{s}":
        return s
    head = s.split()[0] if s.split() else ""
    body = s[0].lower() + s[1:] if head in ("The", "A", "An", "It", "This", "In", "On") else s
    return f.format(s=body)


def _clause(s: str, rng: random.Random) -> str | None:
    """A sentence cut at a comma or conjunction: still entailed by the sentence (mostly)."""
    parts = re.split(r",\s+(?:and|but|which|who|while)?\s*|\s+and\s+", s)
    parts = [p.strip(" ,.;") for p in parts if len(p.split()) >= 5]
    if len(parts) < 2:
        return None
    return parts[0].rstrip(".") + "."


def perturb_number(s: str, rng: random.Random) -> str | None:
    nums = list(_NUM.finditer(s))
    if not nums:
        return None
    m = rng.choice(nums)
    raw = m.group(0)
    digits = raw.replace(",", "")
    try:
        val = float(digits)
    except ValueError:
        return None
    if "." in digits:
        new = f"{val * rng.choice([0.5, 1.5, 2, 0.8, 1.2]):.{len(digits.split('.')[1])}f}"
    elif 1900 <= val <= 2030:
        new = str(int(val) + rng.choice([-3, -2, -1, 1, 2, 3]))
    else:
        v = int(val)
        new = str(rng.choice([v + 1, v + 2, max(0, v - 1), v * 2, v * 10, v + 5]) if v < 20 else
                  int(v * rng.choice([0.5, 0.7, 1.3, 1.5, 2, 3])))
        if "," in raw:
            new = f"{int(new):,}"
    if new == raw:
        return None
    return s[:m.start()] + new + s[m.end():]


def names_in(text: str) -> list[str]:
    out = []
    for m in _NAME.finditer(text):
        n = m.group(0)
        if n.split()[0] in _NAME_STOP or m.start() == 0:
            continue
        out.append(n)
    return out


def perturb_name(s: str, doc_names: Sequence[str], rng: random.Random) -> str | None:
    here = [n for n in names_in(s)]
    if not here:
        return None
    target = rng.choice(here)
    others = [n for n in doc_names if n != target and n not in s and len(n.split()) == len(target.split())]
    if not others:
        others = [n for n in doc_names if n != target and n not in s]
    if not others:
        return None
    return s.replace(target, rng.choice(others), 1)


def perturb_calendar(s: str, rng: random.Random) -> str | None:
    for names in (_MONTHS, _DAYS):
        hits = [n for n in names if re.search(rf"\b{n}\b", s)]
        if hits:
            h = rng.choice(hits)
            return re.sub(rf"\b{h}\b", rng.choice([n for n in names if n != h]), s, count=1)
    return None


def perturb_polarity(s: str, rng: random.Random) -> str | None:
    for a, b in rng.sample(_ANTONYMS, len(_ANTONYMS)):
        for x, y in ((a, b), (b, a)):
            if re.search(rf"\b{x}\b", s):
                return re.sub(rf"\b{x}\b", y, s, count=1)
    for pat, rep in _NEG:
        if re.search(pat, s):
            return re.sub(pat, rep, s, count=1)
    return None


def perturb_roles(s: str, rng: random.Random) -> str | None:
    names = list(dict.fromkeys(names_in(s)))
    if len(names) < 2:
        return None
    a, b = names[0], names[1]
    if a in b or b in a:
        return None
    return s.replace(a, "\x00").replace(b, a).replace("\x00", b)


def document_pairs(doc: str, rng: random.Random, other_docs: Sequence[str], *, window: int = 4,
                   per_doc: int = 6) -> list[Pair]:
    """Supported and unsupported claims against one window of ``doc`` (see the module doc)."""
    sents = sentences(doc)
    if len(sents) < 4:
        return []
    w = min(window, max(2, len(sents) - 2))
    start = rng.randrange(0, len(sents) - w + 1)
    inside, outside = sents[start:start + w], sents[:start] + sents[start + w:]
    passage = " ".join(inside)
    names = names_in(doc)
    out: list[Pair] = []
    for _ in range(per_doc):
        s = rng.choice(inside)
        r = rng.random()
        if r < 0.5:  # supported
            k = rng.random()
            if k < 0.35:
                out.append(Pair(_frame(s, rng), passage, 1, "sentence"))
            elif k < 0.6:
                c = _clause(s, rng)
                out.append(Pair(c or s, passage, 1, "clause" if c else "sentence"))
            elif k < 0.85:
                t = rng.choice(inside)
                if t != s:
                    out.append(Pair(s.rstrip(".") + ", and " + _lower_first(t), passage, 1, "fused"))
                else:
                    out.append(Pair(s, passage, 1, "sentence"))
            else:
                out.append(Pair(s, passage, 1, "sentence"))
            continue
        k = rng.random()
        made = None
        if k < 0.30 and outside:  # baseless, on topic
            made = (rng.choice(outside), "baseless_same_doc")
        elif k < 0.40 and outside:
            o = rng.choice(outside)
            c = _clause(o, rng) or o
            made = (s.rstrip(".") + ", and " + _lower_first(c), "baseless_appended")
        elif k < 0.45 and other_docs:
            od = sentences(rng.choice(other_docs))
            if od:
                made = (rng.choice(od), "baseless_other_doc")
        if made is None:
            for fn, kind in rng.sample([(perturb_number, "conflict_number"), (perturb_calendar, "conflict_date"),
                                        (perturb_polarity, "conflict_polarity"), (perturb_roles, "conflict_roles"),
                                        (None, "conflict_name")], 5):
                cand = perturb_name(s, names, rng) if fn is None else fn(s, rng)
                if cand and cand != s:
                    made = (cand, kind)
                    break
        if made is None and outside:
            made = (rng.choice(outside), "baseless_same_doc")
        if made is not None:
            out.append(Pair(made[0], passage, 0, made[1]))
    return out


_WORDS = re.compile(r"[a-z0-9]+")
_STOP = frozenset("""a an the of to in on at for by with from and or but is are was were be been has have had it its
this that these those as he she they his her their him them who which what when where will would can could not
no said says also after before than then there about into over more most some any all one two""".split())


def _content(s: str) -> set[str]:
    return {w for w in _WORDS.findall(s.lower()) if w not in _STOP and len(w) > 2}


def summary_pairs(doc: str, summary: str, rng: random.Random, *, window: int = 5, per_doc: int = 4) -> list[Pair]:
    """Abstractive claims: a reference-summary sentence against the document window that holds most
    of its words (supported), against the window that holds fewest (baseless: the same fluent
    sentence, its evidence elsewhere), or perturbed against its best window (a conflict)."""
    sents = sentences(doc)
    claims = [c for c in sentences(summary) if len(_content(c)) >= 4]
    if len(sents) < window + 2 or not claims:
        return []
    wins = [sents[i:i + window] for i in range(0, len(sents) - window + 1, max(1, window // 2))]
    win_words = [_content(" ".join(w)) for w in wins]
    out: list[Pair] = []
    for c in rng.sample(claims, min(len(claims), per_doc)):
        cw = _content(c)
        cover = [len(cw & ww) / len(cw) for ww in win_words]
        best = max(range(len(wins)), key=lambda i: cover[i])
        # the hardest baseless window: the one sharing most words with the claim while holding at
        # most 30% of them (on topic, evidence elsewhere)
        lacking = [i for i in range(len(wins)) if cover[i] <= 0.3]
        worst = max(lacking, key=lambda i: cover[i]) if lacking else None
        r = rng.random()
        if r < 0.5 and cover[best] >= 0.6:
            out.append(Pair(c, " ".join(wins[best]), 1, "summary_supported"))
        elif r < 0.8 and worst is not None:
            out.append(Pair(c, " ".join(wins[worst]), 0, "summary_baseless"))
        elif cover[best] >= 0.6:
            for fn, kind in rng.sample([(perturb_number, "summary_conflict_number"),
                                        (perturb_polarity, "summary_conflict_polarity"),
                                        (perturb_roles, "summary_conflict_roles")], 3):
                cand = fn(c, rng)
                if cand and cand != c:
                    out.append(Pair(cand, " ".join(wins[best]), 0, kind))
                    break
            else:
                cand = perturb_name(c, names_in(doc), rng)
                if cand and cand != c:
                    out.append(Pair(cand, " ".join(wins[best]), 0, "summary_conflict_name"))
    return out


def _read_json_lines(path: Path) -> Iterator[dict]:
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if line:
                yield json.loads(line)


def halueval_documents(root: Path, exclude_openings: set[str]) -> tuple[list[tuple[str, str]], list[str], int]:
    """((CNN/DM document, its reference summary), QA knowledge paragraphs, documents dropped for
    overlap with ``exclude``)."""
    dropped = 0
    docs = []
    for row in _read_json_lines(root / "summarization_data.json"):
        d = row["document"]
        if _opening(d) in exclude_openings:
            dropped += 1
            continue
        docs.append((d, row["right_summary"]))
    know = [row["knowledge"] for row in _read_json_lines(root / "qa_data.json")]
    return docs, know, dropped


def halueval_qa_pairs(root: Path, rng: random.Random, n: int) -> list[Pair]:
    rows = list(_read_json_lines(root / "qa_data.json"))
    rng.shuffle(rows)
    out = []
    for row in rows[:n]:
        q = row["question"].rstrip("?")
        good = rng.random() < 0.5
        ans = row["right_answer"] if good else row["hallucinated_answer"]
        out.append(Pair(f"{q}? {ans}", row["knowledge"], int(good), "halueval_qa"))
    return out


def build_pairs(halueval_root: Path, *, n: int, seed: int, exclude_sources: Iterable[str] = (),
                qa_share: float = 0.1) -> tuple[list[Pair], dict]:
    """``n`` seeded pairs (about balanced) and a card section saying what went in."""
    rng = random.Random(seed)
    exclude = {_opening(t) for t in exclude_sources if t}
    docs, know, dropped = halueval_documents(halueval_root, exclude)
    rng.shuffle(docs)
    rng.shuffle(know)
    pool = [(d, sm) for d, sm in docs[:8000]] + [(k, "") for k in know[:4000]]
    rng.shuffle(pool)
    n_qa = int(n * qa_share)
    pairs: list[Pair] = halueval_qa_pairs(halueval_root, rng, n_qa)
    i = 0
    while len(pairs) < n and i < len(pool):
        doc, summary = pool[i]
        others = [pool[(i + 37) % len(pool)][0], pool[(i + 101) % len(pool)][0]]
        pairs.extend(document_pairs(doc, rng, others, window=rng.choice([3, 4, 5, 6]), per_doc=4))
        if summary:
            pairs.extend(summary_pairs(doc, summary, rng, window=rng.choice([4, 5, 6])))
        i += 1
    pairs = pairs[:n]
    rng.shuffle(pairs)
    kinds: dict[str, int] = {}
    for p in pairs:
        kinds[p.kind] = kinds.get(p.kind, 0) + 1
    digest = hashlib.sha256("\n".join(f"{p.label}\t{p.claim}\t{p.passage}" for p in pairs).encode()).hexdigest()
    card = {"pairs": len(pairs), "supported": sum(p.label for p in pairs), "kinds": dict(sorted(kinds.items())),
            "documents_used": i, "halueval_documents_dropped_for_overlap_with_validation": dropped,
            "pairs_sha256": digest[:16], "seed": seed}
    return pairs, card
