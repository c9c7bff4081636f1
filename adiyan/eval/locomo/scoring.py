"""LoCoMo's scores, as its ``task_eval/evaluation.py`` defines them.

- **Evidence recall** of a retrieved context: the share of a question's evidence dialog ids
  found in it (``ev in context`` for each ``ev``); a question without evidence counts 1. An
  evidence id the file spells wrongly (``"D8:6; D9:17"``) is never found, as in LoCoMo.
- **nDCG@k** over evidence turns (binary gains, log2 discount; the ideal ranking puts every
  evidence turn first; no evidence: no value).
- **Answer F1**: LoCoMo's normalisation (lower case, punctuation and commas removed, the words
  a / an / the / and removed, whitespace collapsed), Porter stems (nltk), token-bag F1. Category 1
  (multi-hop) splits prediction and reference on commas and averages, over reference parts, the
  best F1 of any prediction part; category 3 keeps the reference up to its first ``;``;
  categories 2, 3, 4 score the whole strings; category 5 (adversarial) scores 1 when the answer
  says "no information available" or "not mentioned" (LoCoMo's abstention check), else 0.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from typing import Sequence

ABSTENTION_PHRASES = ("no information available", "not mentioned")
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
_PUNCT = set(string.punctuation)
_stemmer = None


def _stem(word: str) -> str:
    global _stemmer
    if _stemmer is None:
        from nltk.stem import PorterStemmer  # LoCoMo's stemmer; nltk loads only when answers are scored

        _stemmer = PorterStemmer()
    return _stemmer.stem(word)


def evidence_recall(evidence: Sequence[str], context_ids: Sequence[str]) -> float:
    """Share of ``evidence`` ids in ``context_ids``; 1.0 for a question without evidence."""
    if not evidence:
        return 1.0
    ctx = set(context_ids)
    return sum(e in ctx for e in evidence) / len(evidence)


def ndcg_at_k(evidence: Sequence[str], ranked_ids: Sequence[str], k: int = 10) -> float | None:
    """Binary-gain nDCG@k of ``ranked_ids`` against the evidence turns (None without evidence)."""
    rel = set(evidence)
    if not rel:
        return None
    seen, dcg = set(), 0.0
    for i, d in enumerate(list(ranked_ids)[:k]):
        if d in rel and d not in seen:
            dcg += 1.0 / math.log2(i + 2)
            seen.add(d)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(rel), k)))
    return dcg / ideal


def normalize_answer(s: str) -> str:
    """LoCoMo's ``normalize_answer``."""
    s = str(s).replace(",", "").lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def f1_score(prediction: str, reference: str) -> float:
    """Token F1 of the stemmed, normalised strings (LoCoMo's ``f1_score``)."""
    p = [_stem(w) for w in normalize_answer(prediction).split()]
    g = [_stem(w) for w in normalize_answer(reference).split()]
    same = sum((Counter(p) & Counter(g)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def multi_hop_f1(prediction: str, reference: str) -> float:
    """LoCoMo's ``f1``: comma-split parts, mean over reference parts of the best prediction part."""
    preds = [x.strip() for x in str(prediction).split(",")]
    refs = [x.strip() for x in str(reference).split(",")]
    return sum(max(f1_score(p, r) for p in preds) for r in refs) / len(refs)


def abstains(prediction: str) -> bool:
    low = str(prediction).lower()
    return any(p in low for p in ABSTENTION_PHRASES)


def answer_score(prediction: str, reference: str, category: int) -> float:
    """The LoCoMo score of one answer for a question of ``category``."""
    if category == 5:
        return 1.0 if abstains(prediction) else 0.0
    if category == 1:
        return multi_hop_f1(prediction, reference)
    if category == 3:
        reference = str(reference).split(";")[0].strip()
    if category in (2, 3, 4):
        return f1_score(prediction, reference)
    raise ValueError(f"LoCoMo category {category!r}: expected 1..5")
