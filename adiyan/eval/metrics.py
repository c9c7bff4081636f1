"""Retrieval and answer metrics of the slice, computed by hand so tests can check them exactly."""

from __future__ import annotations

import re
from statistics import fmean
from typing import Sequence


def reciprocal_rank(retrieved_sources: Sequence[str], gold: Sequence[str]) -> float:
    """1/rank of the first retrieved chunk whose source is a gold source; 0 if none."""
    gold = set(gold)
    for rank, src in enumerate(retrieved_sources, 1):
        if src in gold:
            return 1.0 / rank
    return 0.0


def hit(retrieved_sources: Sequence[str], gold: Sequence[str]) -> bool:
    return bool(set(retrieved_sources) & set(gold))


def keyword_hit(answer: str, keywords: Sequence[str]) -> bool:
    """Every answer keyword occurs in the answer (case-insensitive)."""
    a = answer.lower()
    return all(k.lower() in a for k in keywords)


_ABSTAIN = re.compile(r"\b(i don'?t know|do(es)? not (contain|mention|say|state|include|provide)|"
                      r"not (mentioned|stated|provided|specified|available|found)|no information|cannot answer)\b", re.I)


def abstained(answer: str) -> bool:
    return bool(_ABSTAIN.search(answer))


def mean_or_none(values: Sequence[float | bool | None]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return round(fmean(vals), 6) if vals else None
