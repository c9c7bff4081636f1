"""Claim-level answer scoring with the trained claim checker (RAGChecker's decomposition, offline).

An answer is split into atomic claims (sentences, and their coordinated clauses where each half
stands as a statement; numbers, names and dates are never cut), each claim is checked against the
retrieved context in windows the encoder fits, and the best window is kept as its supporting span.
From the verdicts:

- ``claim_faithfulness``: share of the answer's claims the context supports;
- ``claim_hallucination``: 1 when any claim is unsupported;
- with a gold answer (RAGChecker's definitions, the checker standing in for GPT-4's entailment):
  ``claim_precision`` (answer claims entailed by the gold answer), ``claim_recall`` (gold claims
  entailed by the answer), ``claim_f1``, ``claim_context_utilisation`` (of the gold claims the context
  supports, the share the answer states) and ``claim_noise_sensitivity`` (share of the answer's claims
  that the gold answer does not entail but the context does: noise taken up from retrieval).

An abstention has no claims: its faithfulness is undefined (None), never 1.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Sequence

from ..models.checker import ClaimChecker, numbers_agree, windows

# P(supported) at or above which a claim counts as supported: chosen on RAGTruth's dev half (the rule
# fixed in advance: the best overall response-level F1 over 0.05, 0.1, ..., 0.5; 0.692 at 0.1 against
# 0.649 at 0.5); the other half, kept aside, checks it
SUPPORT_THRESHOLD = 0.1
_CITATION = re.compile(r"\s*\[\d+(?:\s*[,-]\s*\d+)*\]")
# a sentence ends at . ! ? (not after an initial or a common abbreviation) before a capital, a digit or
# a citation; a citation right after the stop stays with the sentence it cites
_SENT = re.compile(r"(?<=[.!?])(?<!\b[A-Z]\.)(?<!\bMr\.)(?<!\bMrs\.)(?<!\bMs\.)(?<!\bDr\.)(?<!\bSt\.)(?<!\bvs\.)"
                   r"(?<!\betc\.)(?:\s*\[\d+(?:\s*[,-]\s*\d+)*\])?[\"'”’)\]]*\s+(?=[\"'“‘(]?[A-Z0-9])|\n+")
_CLAUSE = re.compile(r";\s+|,\s+(?:and|but|while|whereas)\s+|(?<!only)\s+but\s+(?!also\b)")
_WORD = re.compile(r"[A-Za-z0-9][\w'’-]*")
# a clause after ", and" / "but" is a claim of its own when it opens with a subject (a pronoun, a
# determiner or a name) and holds a finite verb; "lunch, dinner, and wine tasting" does not split
_SUBJECT = re.compile(r"^(it|they|he|she|we|you|i|this|that|these|those|there|its|their|his|her|the|a|an|"
                      r"[A-Z][\w'’-]*)\b")
_FINITE = re.compile(r"\b(is|are|was|were|has|have|had|does|did|can|could|will|would|may|might|must|should|"
                     r"[a-z]{3,}ed|[a-z]{3,}(?<!s)s)\b")
# sentences that talk about the answering, not the world: not claims (an abstention has none)
_META = re.compile(r"^(i (do not|don't|cannot|can't|am unable)|i'm (sorry|unable)|sorry\b|"
                   r"(the|these) (provided |given )?(passages?|context|documents?|sources?|text) (do(es)? not|did not|"
                   r"don't|doesn't) |there is no (information|mention)|no (information|answer) (is )?(available|found)|"
                   r"based on the (provided |given )?(passages?|context|information)[^,]*,?\s*$)", re.I)


@dataclass(frozen=True)
class ClaimVerdict:
    claim: str
    start: int       # character offsets of the claim in the answer (citations included)
    end: int
    support: float   # the checker's P(supported) of the best window
    supported: bool
    span: str        # that window (the evidence shown beside the claim)


def _words(s: str) -> int:
    return len(_WORD.findall(s))


def claim_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the atomic claims of ``text`` (see the module doc)."""
    spans: list[tuple[int, int]] = []
    pos = 0
    for m in list(_SENT.finditer(text)) + [None]:
        end = m.start() if m else len(text)
        nxt = m.end() if m else len(text)
        seg_start, seg_end = pos, end
        pos = nxt
        seg = text[seg_start:seg_end]
        if not _words(seg):
            continue
        lead = len(seg) - len(seg.lstrip())
        seg_start += lead
        seg = seg.strip()
        if _META.match(_CITATION.sub("", seg).strip()):
            continue
        pieces, start = [], seg_start
        for c in _CLAUSE.finditer(seg):
            left, right = text[start:seg_start + c.start()], seg[c.end():]
            rest = right.split(None, 1)
            independent = c.group(0).startswith(";") or (
                bool(_SUBJECT.match(right)) and len(rest) > 1 and bool(_FINITE.search(rest[1])))
            if _words(left) >= 4 and _words(right) >= 4 and independent:
                pieces.append((start, seg_start + c.start()))
                start = seg_start + c.end()
        pieces.append((start, seg_start + len(seg)))
        for a, b in pieces:
            piece = text[a:b].rstrip(" ,;")
            if _words(piece) >= 3:
                spans.append((a, a + len(piece)))
    if not spans and _words(text) and not _META.match(_CITATION.sub("", text).strip()):
        # a short answer ("Yes.", "450 euros") says something all the same: one claim, whole
        a = len(text) - len(text.lstrip())
        spans.append((a, len(text.rstrip())))
    return spans


def split_claims(text: str) -> list[str]:
    """The atomic claims of an answer, citation markers removed."""
    return [_CITATION.sub("", text[a:b]).strip() for a, b in claim_spans(text)]


def check_claims(checker: ClaimChecker, answer: str, contexts: Sequence[str],
                 threshold: float = SUPPORT_THRESHOLD) -> list[ClaimVerdict]:
    spans = claim_spans(answer)
    claims = [_CITATION.sub("", answer[a:b]).strip() for a, b in spans]
    found = checker.support(claims, contexts)
    return [ClaimVerdict(c, a, b, round(s.probability, 4), s.probability >= threshold, s.span)
            for c, (a, b), s in zip(claims, spans, found)]


def _share(flags: Sequence[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def answer_claim_scores(checker: ClaimChecker, answer: str, contexts: Sequence[str], gold: str | None,
                        threshold: float = SUPPORT_THRESHOLD) -> dict:
    """Every claim-level metric for one answer, and the verdicts the report shows."""
    verdicts = check_claims(checker, answer, contexts, threshold)
    out: dict = {"claims": [asdict(v) for v in verdicts]}
    ctx = [v.supported for v in verdicts]
    out["claim_faithfulness"] = _share(ctx)
    out["claim_hallucination"] = None if not verdicts else float(not all(ctx))
    if gold:
        answer_claims = [v.claim for v in verdicts]
        gold_claims = split_claims(gold)
        in_gold = [s.probability >= threshold for s in checker.support(answer_claims, [gold])] if answer_claims else []
        in_answer = [s.probability >= threshold for s in checker.support(gold_claims, [answer])] if gold_claims and answer_claims else [False] * len(gold_claims)
        p, r = _share(in_gold), _share(in_answer)
        out["claim_precision"] = p
        out["claim_recall"] = r
        out["claim_f1"] = (2 * p * r / (p + r) if p + r else 0.0) if p is not None and r is not None else None
        gold_in_ctx = [s.probability >= threshold for s in checker.support(gold_claims, contexts)] if gold_claims else []
        both = [g and a for g, a in zip(gold_in_ctx, in_answer)]
        out["claim_context_utilisation"] = (sum(both) / sum(gold_in_ctx)) if any(gold_in_ctx) else None
        wrong = [c for c, g in zip(ctx, in_gold) if not g]
        out["claim_noise_sensitivity"] = (sum(wrong) / len(in_gold)) if in_gold else None
    return out


def claim_prf_many(checker: ClaimChecker, answers: Sequence[str], golds: Sequence[str],
                   threshold: float = SUPPORT_THRESHOLD) -> list[dict]:
    """RAGChecker's claim precision / recall / F1 of many (answer, gold) pairs at once: every
    (claim, window) pair of the lot scored in one batched pass (the meta-evaluation's 560)."""
    jobs: list[tuple[int, str, int, int]] = []  # (item, side, claim index, window index) per scored pair
    pairs: list[tuple[str, str]] = []
    shapes = []
    for i, (a, g) in enumerate(zip(answers, golds)):
        ac, gc = split_claims(a), split_claims(g)
        aw, gw = windows(a) if a.strip() else [], windows(g) if g.strip() else []
        shapes.append((len(ac), len(gc), len(gw), len(aw)))
        for side, claims, wins in (("p", ac, gw), ("r", gc, aw)):
            for ci, c in enumerate(claims):
                for wi, w in enumerate(wins):
                    jobs.append((i, side, ci, wi))
                    pairs.append((c, w))
    probs = [p if numbers_agree(c, w) else 0.0 for (c, w), p in zip(pairs, checker.probabilities(pairs))]
    best: dict[tuple[int, str, int], float] = {}
    for (i, side, ci, _), p in zip(jobs, probs):
        key = (i, side, ci)
        best[key] = max(best.get(key, 0.0), p)
    out = []
    for i, (na, ng, _, _) in enumerate(shapes):
        p = _share([best.get((i, "p", c), 0.0) >= threshold for c in range(na)])
        r = _share([best.get((i, "r", c), 0.0) >= threshold for c in range(ng)]) if na else (0.0 if ng else None)
        f = (2 * p * r / (p + r) if p + r else 0.0) if p is not None and r is not None else None
        out.append({"claim_precision": p, "claim_recall": r, "claim_f1": f})
    return out
