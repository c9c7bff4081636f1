"""Labelled calibration pairs from an evalset, four labels over every question kind.

:func:`make_calibration_pairs` turns an evalset's questions into labelled (question, context,
answer) pairs: ``correct`` (the gold answer in a context that supports it: :func:`support_passage`,
the paragraphs of the gold documents that cover the answer) and three ways an answer is not
supported: ``corrupted_fact`` (a number, name or negation changed), ``unsupported_addition``
(a fact from another document appended) and ``wrong_source`` (the gold answer beside a context
from other documents that does not state it). :func:`select_pairs` picks a balanced set: half
correct, the rest spread over the negative labels, round-robin over question kinds.
Deterministic for a seed; no model is involved.
"""

from __future__ import annotations

import random
import re
from typing import Mapping, Sequence

from .calibration import CalibrationPair

_NUM = re.compile(r"(?<![\w\-.,:])(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)(?![\w\-]|[.,:]\d)")
_TIME = re.compile(r"\b([01]?\d|2[0-3]):([0-5]\d)\b")
_CAPWORD = r"[A-Z][a-z\u00e0-\u024f]+(?:-[A-Z][a-z\u00e0-\u024f]+)*"  # Belopeška, Ribčev
_CAPSEQ = re.compile(rf"(?<![\w-]){_CAPWORD}(?:[ \t]+{_CAPWORD})*(?![\w-])")  # whole words (not EpiPen)
_NAME_STOP = {"The", "If", "On", "In", "At", "Each", "Your", "You", "Children", "Refunds", "Form", "Dietary",
              "Guests", "A", "An", "All", "Flights", "Prices", "This", "When", "Our", "We", "It", "They",
              "There", "For", "From", "After", "Before", "During", "Yes", "No", "Mr", "Mrs", "Ms", "Dr"}
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


_CODE = re.compile(r"\b[A-Z][A-Z0-9]*(?:-[A-Z0-9]+)+\b")  # TR-SNW-02, HB-9, KESTREL-58


def _key_tokens(text: str) -> set[str]:
    """What makes a statement checkable: its numbers, times, codes and names (lower-cased)."""
    toks = {m.group(0) for m in _NUM.finditer(text)} | {m.group(0) for m in _TIME.finditer(text)}
    toks |= {m.group(0) for m in _CODE.finditer(text)}
    toks |= {w for name in _names(text) for w in name.split()}
    return {t.lower() for t in toks}


def _absent(tokens: set[str], context: str) -> set[str]:
    ctx = context.lower()
    return {t for t in tokens if t not in ctx and t.replace(",", "") not in ctx.replace(",", "")}


def _first_sentence(text: str) -> str:
    m = re.match(r"(.+?[.!?])(?:\s|$)", text.strip(), re.S)
    return (m.group(1) if m else text).strip()


def _sources(q) -> set[str]:
    """A question's gold sources; a question given without any stands for a document of its own."""
    given = _q(q, "gold_sources", None)
    return set(given) if given is not None else {f"question:{_q(q, 'id')}"}


def _answerable(q) -> bool:
    given = _q(q, "gold_sources", None)
    return given is None or bool(given)


def _overlap(a: str, b: str) -> int:
    return len(_content_tokens(a) & _content_tokens(b))


def _corrupt_fact(gold: str, context: str, pool: Sequence[str], rng: random.Random) -> tuple[str, str] | None:
    strategies = ["number", "name", "negation"]
    rng.shuffle(strategies)
    for s in strategies:
        if s == "number":
            out = _corrupt_number(gold, context, rng)
        elif s == "name":
            out = _corrupt_name(gold, context, pool, rng)
        else:
            out = _corrupt_negation(gold, context, rng)
        if out:
            return out
    return None


def _addition(gold: str, context: str, sources: set, others: Sequence, rng: random.Random) -> tuple[str, str] | None:
    """A fact from another question's gold answer (another document) that ``context`` does not state."""
    cands = []
    for o in others:
        o_sources = _sources(o) if _answerable(o) else set()
        extra = _first_sentence(_q(o, "gold_answer", "") or "")
        if not o_sources or o_sources & sources or not extra or extra in gold:
            continue
        keys = _key_tokens(extra)
        kws = [k for k in (_q(o, "answer_keywords", None) or []) if k]
        if keys and not (keys - _absent(keys, context)) and not any(k.lower() in context.lower() for k in kws):
            cands.append((str(_q(o, "id")), extra))
    if not cands:
        return None
    oid, extra = rng.choice(sorted(cands))
    sep = "" if gold.rstrip().endswith((".", "!", "?")) else "."
    return f"{gold.rstrip()}{sep} {extra}", f"addition: from {oid}"


def _wrong_context(q, contexts: Mapping[str, str], questions: Sequence) -> tuple[str, str] | None:
    """The context of another question, from other documents, closest to this question's words,
    that does not state this gold answer (no answer keyword, a key fact missing)."""
    gold, sources = _q(q, "gold_answer", "") or "", _sources(q)
    keys = _key_tokens(gold)
    kws = [k.lower() for k in (_q(q, "answer_keywords", None) or []) if k]
    best = None
    for o in questions:
        oid = str(_q(o, "id"))
        ctx = contexts.get(oid)
        o_sources = _sources(o) if _answerable(o) else set()
        if not ctx or not o_sources or o_sources & sources:
            continue
        if any(k in ctx.lower() for k in kws) or not _absent(keys, ctx) or gold in ctx:
            continue
        score = (_overlap(_q(q, "question", "") + " " + gold, ctx), oid)
        if best is None or score > best[0]:
            best = (score, ctx, oid)
    return (best[1], f"wrong source: context of {best[2]}") if best else None


NEGATIVE_LABELS = ("corrupted_fact", "unsupported_addition", "wrong_source")


def candidate_pairs(questions: Sequence, contexts: Mapping[str, str], seed: int = 0) -> list[CalibrationPair]:
    """Every labelled pair the questions allow (deterministic for a seed): per answerable question
    ``correct`` (the gold answer in its supporting context), ``corrupted_fact`` (a number, name
    or negation changed), ``unsupported_addition`` (the gold answer plus a fact from another
    document) and ``wrong_source`` (the gold answer beside a context from other documents that
    does not state it); per unanswerable question, its abstention plus a fact the context
    (the closest answerable question's) does not state, as ``unsupported_addition``."""
    rng = random.Random(seed)
    # swap material: names in the answerable questions' gold answers (an abstention names no entity)
    pool = list(dict.fromkeys(n for q in questions if _answerable(q) for n in _names(_q(q, "gold_answer", "") or "")))
    by_id = {str(_q(q, "id")): q for q in questions}
    out: list[CalibrationPair] = []
    for q in questions:
        qid, question = str(_q(q, "id")), _q(q, "question", "")
        gold, kind = _q(q, "gold_answer", "") or "", _q(q, "kind", "") or ""
        sources = _sources(q)
        context = contexts.get(qid)
        if not gold:
            continue
        if not _answerable(q):  # unanswerable: only an invented addition has a clean label
            near = max(((_overlap(question, c), oid) for oid, c in contexts.items() if c), default=None)
            if near is None:
                continue
            ctx = contexts[near[1]]
            added = _addition(gold, ctx, _sources(by_id[near[1]]), questions, rng)
            if added:
                out.append(CalibrationPair(f"{qid}:unsupported_addition", question, ctx, added[0],
                                           "unsupported_addition", added[1], kind))
            continue
        if not context:
            continue
        out.append(CalibrationPair(f"{qid}:correct", question, context, gold, "correct", "", kind))
        corrupted = _corrupt_fact(gold, context, pool, rng)
        if corrupted:
            out.append(CalibrationPair(f"{qid}:corrupted_fact", question, context, corrupted[0], "corrupted_fact",
                                       corrupted[1], kind))
        added = _addition(gold, context, sources, questions, rng)
        if added:
            out.append(CalibrationPair(f"{qid}:unsupported_addition", question, context, added[0],
                                       "unsupported_addition", added[1], kind))
        wrong = _wrong_context(q, contexts, questions)
        if wrong:
            out.append(CalibrationPair(f"{qid}:wrong_source", question, wrong[0], gold, "wrong_source", wrong[1], kind))
    return out


def select_pairs(pairs: Sequence[CalibrationPair], n: int, seed: int = 0) -> list[CalibrationPair]:
    """``n`` pairs, half ``correct`` and half spread evenly over the three negative labels (so a
    judge answering one way every time agrees on half), each label's share taken round-robin
    over the question kinds in a seeded order, questions seeded within a kind. When a label has
    too few pairs, the others fill in. Deterministic for a seed; in the input's order."""
    rng = random.Random(seed)
    by_label: dict[str, dict[str, list[CalibrationPair]]] = {}
    for p in pairs:
        by_label.setdefault(p.label, {}).setdefault(p.kind or "", []).append(p)
    for kinds in by_label.values():
        for lst in kinds.values():
            rng.shuffle(lst)
    want = {"correct": (n + 1) // 2}
    neg = n - want["correct"]
    for i, lab in enumerate(NEGATIVE_LABELS):
        want[lab] = neg // 3 + (1 if i < neg % 3 else 0)

    def take(label: str, k: int, chosen: set[str]) -> list[CalibrationPair]:
        kinds = by_label.get(label, {})
        order = sorted(kinds)
        rng.shuffle(order)
        queues = {kd: [p for p in kinds[kd] if p.id not in chosen] for kd in order}
        got = []
        while len(got) < k and any(queues.values()):
            for kd in order:
                if queues[kd] and len(got) < k:
                    got.append(queues[kd].pop(0))
        return got

    chosen: set[str] = set()
    for label, k in want.items():
        chosen |= {p.id for p in take(label, k, chosen)}
    while len(chosen) < n:  # a label ran short: top up one pair per label in turn
        added = 0
        for label in ("correct",) + NEGATIVE_LABELS:
            if len(chosen) < n:
                got = take(label, 1, chosen)
                chosen |= {p.id for p in got}
                added += len(got)
        if not added:
            break
    return [p for p in pairs if p.id in chosen]


def make_calibration_pairs(questions: Sequence, contexts: Mapping[str, str] | Sequence[str], seed: int = 0,
                           n_pairs: int | None = None) -> list[CalibrationPair]:
    """Labelled pairs from an evalset's questions (see :func:`candidate_pairs` for the four
    labels), ``n_pairs`` of them chosen by :func:`select_pairs` (None: every candidate).

    ``questions`` are :class:`~adiyan.eval.evalset.EvalQuestion` objects or dicts with ``id``,
    ``question``, ``gold_answer``, ``kind`` (and ``gold_sources``, ``answer_keywords``);
    ``contexts`` maps question id to a context that supports the gold answer, or is a sequence
    parallel to ``questions``. Deterministic for a seed; no model is involved.
    """
    if isinstance(contexts, Mapping):
        ctx_of = {str(_q(q, "id")): contexts.get(str(_q(q, "id"))) for q in questions}
    else:
        if len(contexts) != len(questions):
            raise ValueError("contexts must be a mapping id -> text or parallel to questions")
        ctx_of = {str(_q(q, "id")): c for q, c in zip(questions, contexts)}
    # a context only counts for a question with gold sources (it supports the gold answer)
    ctx_of = {qid: c for qid, c in ctx_of.items() if c}
    for q in questions:
        if not _answerable(q):
            ctx_of.pop(str(_q(q, "id")), None)
    pairs = candidate_pairs(questions, ctx_of, seed)
    return pairs if n_pairs is None else select_pairs(pairs, n_pairs, seed)


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


def evalset_calibration_pairs(evalset, seed: int = 0, *, n_pairs: int | None = 40, max_context_chars: int = 1200,
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
    return make_calibration_pairs(evalset.questions, contexts, seed, n_pairs)
