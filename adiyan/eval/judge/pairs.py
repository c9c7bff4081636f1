"""Labelled calibration pairs from an evalset: the gold answer and a corrupted copy.

:func:`make_calibration_pairs` turns an evalset into labelled pairs: the gold answer (label
``correct``) and a corrupted copy (a number changed, a name swapped or a statement negated;
label ``corrupted``), each with a context that supports the gold answer
(:func:`support_passage`, the paragraphs of the gold documents that cover the answer).
Deterministic for a seed; no model is involved.
"""

from __future__ import annotations

import random
import re
from typing import Mapping, Sequence

from .calibration import CalibrationPair

_NUM = re.compile(r"(?<![\w\-.,:])(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)(?![\w\-]|[.,:]\d)")
_TIME = re.compile(r"\b([01]?\d|2[0-3]):([0-5]\d)\b")
_CAPWORD = r"[A-Z][a-z]+(?:-[A-Z][a-z]+)*"
_CAPSEQ = re.compile(rf"{_CAPWORD}(?:[ \t]+{_CAPWORD})*")
_NAME_STOP = {"The", "If", "On", "In", "At", "Each", "Your", "You", "Children", "Refunds", "Form", "Dietary",
              "Guests", "A", "An", "All", "Flights", "Prices", "This", "When", "Our", "We", "It", "They",
              "There", "For", "From", "After", "Before", "During", "Yes", "No"}
_CALENDAR = {"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday", "January",
             "February", "March", "April", "May", "June", "July", "August", "September", "October",
             "November", "December"}
_THIRD_PERSON = {"costs": "cost", "guides": "guide", "receives": "receive", "gets": "get", "includes": "include",
                 "applies": "apply", "pays": "pay", "stays": "stay", "says": "say", "covers": "cover",
                 "needs": "need", "offers": "offer", "requires": "require", "takes": "take", "runs": "run",
                 "leads": "lead", "starts": "start", "ends": "end", "opens": "open", "closes": "close"}
_NEGATIONS = [
    (r"\b(is|are|was|were)\b(?! not\b)", r"\1 not"),
    (r"\bcan\b(?! not\b)", "cannot"),
    (r"\b(may|will|must|should|could|would)\b(?! not\b)", r"\1 not"),
    (r"\b(" + "|".join(_THIRD_PERSON) + r")\b", lambda m: "does not " + _THIRD_PERSON[m.group(1)]),
    (r"\b(receive|get|include|pay|stay|need|cost|apply|take)\b", r"do not \1"),
]


def _fmt_like(original: str, value: float) -> str:
    if "," in original:
        return f"{int(round(value)):,}"
    if "." in original:
        decimals = len(original.split(".", 1)[1])
        return f"{value:.{decimals}f}"
    s = str(int(round(value)))
    return s.zfill(len(original)) if original.startswith("0") else s


def _corrupt_number(answer: str, context: str, rng: random.Random) -> tuple[str, str] | None:
    times = list(_TIME.finditer(answer))
    nums = [m for m in _NUM.finditer(answer) if not any(t.start() <= m.start() < t.end() for t in times)]
    spans = [("time", m) for m in times] + [("num", m) for m in nums]
    rng.shuffle(spans)
    for kind, m in spans:
        if kind == "time":
            h, mm = int(m.group(1)), m.group(2)
            for dh in rng.sample([2, 3, -2, 4, -3, 5], 6):
                new = f"{(h + dh) % 24:0{len(m.group(1))}d}:{mm}"
                if new not in context and new not in answer:
                    return answer[: m.start()] + new + answer[m.end():], f"number: {m.group(0)} -> {new}"
            continue
        tok = m.group(1)
        val = float(tok.replace(",", ""))
        factors = [2, 3, 0.5, 1.5, 4, 10]
        rng.shuffle(factors)
        for f in factors:
            newv = val * f if val else rng.choice([3, 5, 7])
            new = _fmt_like(tok, newv)
            if new != tok and new not in context and new.replace(",", "") not in context.replace(",", ""):
                return answer[: m.start(1)] + new + answer[m.end(1):], f"number: {tok} -> {new}"
    return None


def _names(text: str) -> list[str]:
    """Capitalised word sequences that look like names (a lone capitalised word opening a
    sentence, or a leading article / pronoun, is not a name)."""
    out = []
    for m in _CAPSEQ.finditer(text):
        words = m.group(0).split()
        at_start = m.start() == 0 or re.search(r"(?:[.!?:]\s*|\n\s*(?:[-*#|>]+\s*)?)$", text[: m.start()]) is not None
        if at_start:
            if words[0] in _NAME_STOP:
                words = words[1:]
            elif len(words) == 1:
                continue
        if words and not (len(words) == 1 and (words[0] in _NAME_STOP or words[0] in _CALENDAR)):
            out.append(" ".join(words))
    return list(dict.fromkeys(out))


def _corrupt_name(answer: str, context: str, pool: Sequence[str], rng: random.Random) -> tuple[str, str] | None:
    names = _names(answer)
    rng.shuffle(names)
    for name in names:
        cands = [p for p in pool if p != name and p not in context and name not in p and p not in name]
        if not cands:
            continue
        # prefer a name of the same length in words (a tour for a tour, a person for a person)
        best = min(abs(len(c.split()) - len(name.split())) for c in cands)
        new = rng.choice(sorted(c for c in cands if abs(len(c.split()) - len(name.split())) == best))
        return answer.replace(name, new), f"name: {name} -> {new}"
    return None


def _corrupt_negation(answer: str, context: str, rng: random.Random) -> tuple[str, str] | None:
    for pattern, repl in _NEGATIONS:
        m = re.search(pattern, answer)
        if m:
            new = re.sub(pattern, repl, answer, count=1)
            if new != answer:
                return new, f"negation: {m.group(0)!r}"
    return None


def _q(q, attr: str, default=None):
    return q.get(attr, default) if isinstance(q, Mapping) else getattr(q, attr, default)


def make_calibration_pairs(questions: Sequence, contexts: Mapping[str, str] | Sequence[str], seed: int = 0,
                           ) -> list[CalibrationPair]:
    """Labelled pairs from an evalset: per answerable question, the gold answer as ``correct``
    and a corrupted copy as ``corrupted``.

    ``questions`` are :class:`~adiyan.eval.evalset.EvalQuestion` objects or dicts with ``id``,
    ``question``, ``gold_answer`` (and optionally ``gold_sources``); ``contexts`` maps question
    id to a context that supports the gold answer, or is a sequence parallel to ``questions``.
    Questions without a context or with no gold sources (unanswerable) are skipped. The
    corruption is chosen per question in a seeded random order among: change a number (or a
    time) to one the context does not contain; swap a name for another name from the evalset's gold answers
    that this context does not contain; negate the first verb phrase. Deterministic for a seed.
    """
    rng = random.Random(seed)
    if isinstance(contexts, Mapping):
        ctx_of = {str(_q(q, "id")): contexts.get(str(_q(q, "id"))) for q in questions}
    else:
        if len(contexts) != len(questions):
            raise ValueError("contexts must be a mapping id -> text or parallel to questions")
        ctx_of = {str(_q(q, "id")): c for q, c in zip(questions, contexts)}
    pool = []  # names seen in the evalset's gold answers: swap material of the same kind
    for q in questions:
        pool.extend(_names(_q(q, "gold_answer", "") or ""))
    pool = list(dict.fromkeys(pool))
    pairs: list[CalibrationPair] = []
    for q in questions:
        qid, question, gold = str(_q(q, "id")), _q(q, "question", ""), _q(q, "gold_answer", "")
        context = ctx_of.get(qid)
        sources = _q(q, "gold_sources", None)
        if not context or not gold or (sources is not None and not sources):
            continue
        strategies = ["number", "name", "negation"]
        rng.shuffle(strategies)
        corrupted = None
        for s in strategies:
            if s == "number":
                corrupted = _corrupt_number(gold, context, rng)
            elif s == "name":
                corrupted = _corrupt_name(gold, context, pool, rng)
            else:
                corrupted = _corrupt_negation(gold, context, rng)
            if corrupted:
                break
        if not corrupted:
            continue
        pairs.append(CalibrationPair(f"{qid}:correct", question, context, gold, "correct"))
        pairs.append(CalibrationPair(f"{qid}:corrupted", question, context, corrupted[0], "corrupted",
                                     corrupted[1]))
    return pairs


def _content_tokens(text: str) -> set[str]:
    return {t for t in re.findall(r"[a-z0-9][a-z0-9\-,]*", text.lower()) if len(t) > 2 or t.isdigit()}


def support_passage(document: str, answer: str, max_chars: int = 1200) -> str:
    """The paragraphs of ``document`` that best cover ``answer`` (lexical overlap, numbers and
    codes weigh double), in document order, within ``max_chars``: a compact context for a
    small judge."""
    paras = [p.strip() for p in re.split(r"\n\s*\n|\n(?=[-*|#] )", document) if p.strip()]
    target = _content_tokens(answer)

    def score(p: str) -> float:
        toks = _content_tokens(p)
        return sum(2.0 if any(ch.isdigit() for ch in t) else 1.0 for t in target & toks)

    ranked = sorted(range(len(paras)), key=lambda i: (-score(paras[i]), i))
    chosen, size = [], 0
    for i in ranked:
        if score(paras[i]) <= 0 or size + len(paras[i]) > max_chars and chosen:
            break
        chosen.append(i)
        size += len(paras[i]) + 2
    return "\n\n".join(paras[i] for i in sorted(chosen))


def evalset_calibration_pairs(evalset, seed: int = 0, *, max_context_chars: int = 1200,
                              doc_texts: Mapping[str, str] | None = None) -> list[CalibrationPair]:
    """:func:`make_calibration_pairs` on an :class:`~adiyan.eval.evalset.Evalset`, each
    context being the support passage of the question's gold documents. ``doc_texts`` maps
    source keys to extracted text (needed for DOCX, PPTX, ...); by default files are read as
    UTF-8 text, which only suits Markdown and plain text."""
    docs = dict(doc_texts) if doc_texts is not None else {
        d.source_key: d.path.read_text(encoding="utf-8") for d in evalset.documents}
    contexts = {}
    for q in evalset.questions:
        if not q.gold_sources:
            continue
        per = max(200, max_context_chars // len(q.gold_sources))
        contexts[q.id] = "\n\n".join(support_passage(docs[s], q.gold_answer, per) for s in q.gold_sources
                                     if s in docs)
    return make_calibration_pairs(evalset.questions, contexts, seed)
