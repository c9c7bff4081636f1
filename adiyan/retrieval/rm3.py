"""RM3 query expansion for BM25 (pseudo-relevance feedback on the lexical side).

Reference: Nasreen Abdul-Jaleel, James Allan, W. Bruce Croft, Fernando Diaz, Leah Larkey, Xiaoyan Li,
Mark D. Smucker and Courtney Wade, "UMass at TREC 2004: Novelty and HARD", TREC 2004 (RM3: the
relevance model of Lavrenko and Croft, SIGIR 2001, interpolated with the original query), as
Anserini implements it (fbDocs, fbTerms, originalQueryWeight):

    P(t | R) = (1/m) Σ_{d in the top m} tf(t, d) / |d|            (feedback documents weighted equally)
    q'(t)    = λ · q(t) / Σ q + (1 − λ) · P(t | R) / Σ_{top n} P     (only the n heaviest feedback terms)

The feedback documents are weighted equally, as the dense side's Rocchio mean weighs them: the first
ranking may be a fused one whose scores (z-sums, RRF) are no query likelihoods. Terms are the
engine's own (Qdrant's BM25 tokenizer: English stemmer, stop words removed), so the expanded query
is a sparse vector of term weights the engine scores with its IDF like any BM25 query.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping

from ..store.base import Sparse


def relevance_model(term_counts: Iterable[Mapping[int, int]]) -> dict[int, float]:
    """P(t | R): the mean over feedback documents of tf(t, d) / |d| (a document without terms counts 0)."""
    docs = list(term_counts)
    rel: dict[int, float] = {}
    for counts in docs:
        total = sum(counts.values())
        if not total:
            continue
        for t, tf in counts.items():
            rel[t] = rel.get(t, 0.0) + tf / total / len(docs)
    return rel


def expand(query: Sparse, feedback: list[str], term_counts: Callable[[str], Mapping[int, int]], *,
           terms: int, weight: float) -> Sparse:
    """The RM3 query: the original terms (L1-normalised) × ``weight`` plus the ``terms`` heaviest feedback
    terms (L1-normalised among themselves) × (1 − ``weight``); ties between terms by term id. With no
    feedback text, or ``weight`` 1, the original query's order is unchanged (its weights only rescaled)."""
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"retrieval.rm3_weight must be in [0, 1], got {weight}")
    if terms < 1:
        raise ValueError(f"retrieval.rm3_terms must be >= 1, got {terms}")
    q: dict[int, float] = {}
    for t, v in zip(query.indices, query.values):
        q[int(t)] = q.get(int(t), 0.0) + float(v)
    zq = sum(q.values())
    out = {t: weight * v / zq for t, v in q.items()} if zq > 0 else {}
    rel = relevance_model(term_counts(text) for text in feedback)
    top = sorted(rel.items(), key=lambda kv: (-kv[1], kv[0]))[:terms]
    z = sum(p for _, p in top)
    if z > 0 and weight < 1.0:
        for t, p in top:
            out[t] = out.get(t, 0.0) + (1.0 - weight) * p / z
    if not out:  # a query of stop words only, and no feedback: nothing to search with, as before
        return query
    keys = sorted(out)
    return Sparse(tuple(keys), tuple(out[k] for k in keys))
