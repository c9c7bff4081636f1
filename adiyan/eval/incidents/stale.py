"""Incident 3, stale fact: similarity alone ranks a statement above its later correction.

The seed stored "my favourite colour is teal" and later its correction; asked for the colour, its
memory returned the stale statement first (0.781 against 0.725), because a negation barely moves
an embedding: the seed measured cos("teal", "not teal") 0.86 against 0.39 for an unrelated word.
Those two are the seed's recorded constants (``details["seed_constants"]``); every run computes
the same pair with its own embedder (``details["measured_pair"]``, with the embedder id), e.g.
0.91 against 0.36 for "bicycle" with nomic-embed-text in-process when this was written (that
figure is checked by the nomic replay test, never written into a run).

Every authored variant (``evalsets/incidents/stale_fact.yaml``) goes through the real memory
(``open_memory``, no LLM consolidation): the statement dated 30 days before the question, its
correction 1 day before. *Before*: the seed's failure, ``memory.search=dense`` with
``memory.recency=false`` (similarity alone); *after*: the configured memory (by default hybrid search
with ``memory.recency_scope=superseded``: only a statement a newer memory supersedes is decayed, by the
gap between the two; :mod:`adiyan.retrieval.memory_rank`). A variant holds when the stale statement is
first before and the correction first after.

The dates decide a great deal: the stale statement's score is s × 0.5 ** (gap / half-life) (gap = how
much older it is; under the seed's ``recency_scope=all`` both are decayed by their ages, which gives the
same ratio), so it wins only when s_stale / s_correction > 2 ** (gap / half-life). At 29 days and a
14-day half-life that ratio is 4.2, which no pair of cosines reaches. So the replay also reports, per
variant and from the scores the configured search gives without time (cosine, or the hybrid fusion),
the **break-even gap** h × log2(s_stale / s_correction) (the correction wins only when it is more than
that many days newer), the **margin in days** (the configured gap minus that: days to spare), the
score the stale text lacks at the configured gap, and re-ranks each variant with the production
ranking (``rank_memories``) over a grid of gaps (``GAPS_DAYS``, the correction a day old). Under
``recency_scope=superseded`` it reports too whether the correction was found to supersede the
statement, and by how much the pair's cosine clears its threshold (``detection_margin``): below it
the statement is not decayed at all. Figures that depend on the embedder and the texts, not only
on the dates chosen.
"""

from __future__ import annotations

import math
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

from ...factory import open_memory
from ...models.base import cosine
from ...retrieval.memory_rank import Candidate, rank_memories, states_change
from .common import IncidentResult, classify, counts, load_spec, settings_for, verdict

NOW = datetime(2026, 6, 1, 12, tzinfo=timezone.utc)  # fixed, so the same data gives the same ranks
STALE_AGE_DAYS, CORRECTION_AGE_DAYS = 30, 1
SEED = ("stale 0.781 vs correction 0.725; cos(teal, not teal) 0.86 vs 0.39 for an unrelated word "
        "(the seed, nomic-embed-text via Ollama)")
SEED_COS_NEGATION, SEED_COS_UNRELATED = 0.86, 0.39  # the seed's recorded constants, not measured here
GAPS_DAYS = (0.5, 1, 2, 3, 5, 7, 14, 29)  # how much older the stale statement is, over the age grid
PRINCIPLE = "similarity alone ranks the stale statement above its correction; recency re-ranking puts the correction first"


def _top_texts(settings, embedder, variants, *, add: bool) -> dict[str, list]:
    """Each variant's ranking (text, similarity, score) from a memory opened with ``settings``."""
    mem = open_memory(settings, embedder, infer=False)
    try:
        if add:
            for v in variants:
                user = f"incident3-{v['id']}"
                mem.add(v["stale"], user_id=user, created_at=NOW - timedelta(days=STALE_AGE_DAYS))
                mem.add(v["correction"], user_id=user, created_at=NOW - timedelta(days=CORRECTION_AGE_DAYS))
        return {v["id"]: [(h.text, round(h.similarity, 4), round(h.score, 4))
                          for h in mem.search(v["question"], user_id=f"incident3-{v['id']}", k=2, now=NOW)]
                for v in variants}
    finally:
        mem.close()


def margins(s_stale: float, s_correction: float, gap_days: float, half_life_days: float) -> dict:
    """How far the stale statement is from outranking its correction, ``gap_days`` older:

    - ``break_even_gap_days`` = h × log2(s_stale / s_correction): the correction comes first only when it
      is more than that many days newer (0 when it is as similar or more: it wins at any gap; None when
      its similarity is not positive and the stale one's is: no gap makes it win);
    - ``margin_days`` = gap − break-even gap: days to spare at this gap (< 0: the stale statement wins);
      comparable across half-lives, unlike a similarity margin, which grows as 2 ** (gap / h);
    - ``margin`` = s_correction × 2 ** (gap / h) − s_stale: the similarity the stale text lacks to win
      (kept in the details; above 1 − s_stale no cosine can make it up).

    Seed: 0.781 vs 0.725 at h 14 gives a break-even gap of 1.50 days, 27.5 days to spare at a 29-day gap."""
    ratio = 2 ** (gap_days / half_life_days)
    if s_stale <= s_correction:
        be = 0.0
    elif s_correction <= 0:
        be = None
    else:
        be = half_life_days * math.log2(s_stale / s_correction)
    return {"margin": round(s_correction * ratio - s_stale, 4), "weight_ratio": round(ratio, 4),
            "break_even_gap_days": None if be is None else round(be, 3),
            "margin_days": None if be is None else round(gap_days - be, 3)}


def gap_grid(pairs: list[tuple], half_life_days: float, gaps=GAPS_DAYS, *, memory=None) -> dict[str, int]:
    """Per gap (days), how many pairs put the correction first when the production ranking weighs a
    correction 1 day old against a statement ``gap`` days older. ``pairs``: (s_stale, s_correction) or
    (s_stale, s_correction, stale text, correction text, their two normalised vectors as a 2-row array).
    ``memory`` (a :class:`adiyan.memory.Memory` or None) gives the ranking's settings
    (:func:`adiyan.retrieval.memory_rank.rank_memories`: ``memory.recency_scope`` and its thresholds);
    None ranks as the seed did (every memory decayed by its age)."""
    out = {}
    for gap in gaps:
        first = 0
        for pair in pairs:
            s_stale, s_corr = pair[0], pair[1]
            texts = pair[2:4] if len(pair) > 2 else ("stale", "correction")
            cands = [Candidate("stale", texts[0], s_stale, (NOW - timedelta(days=1 + gap)).isoformat()),
                     Candidate("correction", texts[1], s_corr, (NOW - timedelta(days=1)).isoformat())]
            scope = memory.recency_scope if memory is not None else "all"
            ranked = rank_memories(cands, now=NOW, k=None, recency=True, scope=scope, half_life_days=half_life_days,
                                   vectors=pair[4] if len(pair) > 4 else None,
                                   supersede_min_similarity=getattr(memory, "supersede_min_similarity", 0.8),
                                   supersede_cue_min_similarity=getattr(memory, "supersede_cue_min_similarity", None))
            first += ranked[0].candidate.id == "correction"
        out[f"{gap:g}"] = first
    return out


def detection(v: dict, vecs, settings) -> dict:
    """Whether ``memory.recency_scope=superseded`` finds that the correction supersedes the statement: the
    pair's cosine, the threshold that applies (the lower cue threshold when the correction states a change),
    and the margin (cosine minus threshold; < 0: not detected, so the stale statement keeps weight 1)."""
    mc = settings.memory
    cos = float(vecs[0] @ vecs[1])
    cue = states_change(v["correction"])
    need = min(mc.supersede_min_similarity, mc.supersede_cue_min_similarity) if cue else mc.supersede_min_similarity
    return {"pair_cosine": round(cos, 4), "change_cue": cue, "supersede_threshold": need,
            "detection_margin": round(cos - need, 4), "detected": cos >= need}


def stale_fact(settings, embedder) -> IncidentResult:
    variants = load_spec("stale_fact.yaml")["variants"]
    with tempfile.TemporaryDirectory(prefix="adiyan-incident3-") as tmp:
        after_settings = settings_for(settings, Path(tmp))
        # before: the seed's failure, cosine alone (dense search, no recency); the configured search without
        # recency gives the scores time works on (the margins); after: the configured memory
        before_settings = after_settings.with_overrides({"memory.recency": False, "memory.search": "dense",
                                                         "memory.extra_embedders": [], "memory.signal_weights": None})
        before = _top_texts(before_settings, embedder, variants, add=True)
        untimed = (before if after_settings.memory.search == "dense" else
                   _top_texts(after_settings.with_overrides({"memory.recency": False}), embedder, variants, add=False))
        after = _top_texts(after_settings, embedder, variants, add=False)  # the same stored memories
    rows, closer, pair_vecs = [], 0, {}
    superseded_scope = settings.memory.recency and settings.memory.recency_scope in ("superseded", "below_superseder")
    for v in variants:
        pv = np.asarray(embedder.embed([v["stale"], v["correction"]], "document"), dtype=np.float32)
        pair_vecs[v["id"]] = pv / np.linalg.norm(pv, axis=1, keepdims=True)
        t, neg, other = embedder.embed(list(v["negation"]), None)  # as the seed compared them: no prefix
        cos_neg, cos_other = cosine(t, neg), cosine(t, other)
        sims = {text: sim for text, sim, _ in before[v["id"]]}
        base = {text: score for text, _, score in untimed[v["id"]]}  # the score before time: cosine, or fused in hybrid
        row = {"id": v["id"], "question": v["question"],
               "before_first": before[v["id"]][0][0] if before[v["id"]] else None,
               "after_first": after[v["id"]][0][0] if after[v["id"]] else None,
               "stale_similarity": sims.get(v["stale"]), "correction_similarity": sims.get(v["correction"]),
               "stale_base": base.get(v["stale"]), "correction_base": base.get(v["correction"]),
               "after_scores": [s for _, _, s in after[v["id"]]],
               "negation": list(v["negation"]), "cos_negation": round(cos_neg, 4), "cos_unrelated": round(cos_other, 4)}
        if superseded_scope:
            row.update(detection(v, pair_vecs[v["id"]], settings))
        row["stale_first_before"] = row["before_first"] == v["stale"]
        row["correction_first_after"] = row["after_first"] == v["correction"]
        row["status"] = classify(before_failed=row["stale_first_before"], after_prevented=row["correction_first_after"])
        if row["stale_base"] is not None and row["correction_base"] is not None:
            row.update(margins(row["stale_base"], row["correction_base"],
                               STALE_AGE_DAYS - CORRECTION_AGE_DAYS, settings.memory.half_life_days))
        closer += cos_neg > cos_other
        rows.append(row)
    n, statuses = len(rows), [r["status"] for r in rows]
    first = rows[0]
    h, gap = settings.memory.half_life_days, STALE_AGE_DAYS - CORRECTION_AGE_DAYS
    scored = [r for r in rows if "margin" in r]
    by_id = {v["id"]: v for v in variants}
    mem_like = settings.memory if superseded_scope else None
    grid = gap_grid([(r["stale_base"], r["correction_base"], by_id[r["id"]]["stale"],
                      by_id[r["id"]]["correction"], pair_vecs[r["id"]]) for r in scored], h, memory=mem_like)
    metrics = {}
    finite = [r for r in scored if r["margin_days"] is not None]
    below = settings.memory.recency_scope == "below_superseder"  # no half-life applies: no decay margins
    if finite and settings.memory.recency and not below:
        metrics = {"margin_days_min": min(r["margin_days"] for r in finite),
                   "break_even_gap_max_days": max(r["break_even_gap_days"] for r in finite)}
        if superseded_scope:
            metrics["detection_margin_min"] = min(r["detection_margin"] for r in rows)
    elif settings.memory.recency and below and rows:
        metrics = {"detection_margin_min": min(r["detection_margin"] for r in rows)}
    measured = (f"stale first by similarity alone in {sum(r['stale_first_before'] for r in rows)}/{n}, "
                f"correction first with recency (half-life {settings.memory.half_life_days:g} d) in "
                f"{sum(r['correction_first_after'] for r in rows)}/{n}; a negation is closer than an unrelated "
                f"word in {closer}/{n} (cosine to the negation {min(r['cos_negation'] for r in rows):.2f}–"
                f"{max(r['cos_negation'] for r in rows):.2f}, to the unrelated word "
                f"{min(r['cos_unrelated'] for r in rows):.2f}–{max(r['cos_unrelated'] for r in rows):.2f}; "
                f"the seed's pair here: cos({first['negation'][0]}, {first['negation'][1]}) "
                f"{first['cos_negation']:.2f} vs {first['negation'][2]} {first['cos_unrelated']:.2f})")
    if below and metrics:
        measured += (f"; a superseded statement is placed just under its correction (no decay): the correction "
                     f"was found to supersede it in {sum(r['detected'] for r in rows)}/{n} (worst margin over its "
                     f"threshold {metrics['detection_margin_min']:+.2f})")
    elif metrics:
        out_of_reach = all(r["correction_base"] * r["weight_ratio"] > 1 for r in scored)
        measured += (f"; the correction wins once it is {min(r['break_even_gap_days'] for r in finite):.2f}–"
                     f"{metrics['break_even_gap_max_days']:.2f} days newer (break-even gap), so at the configured "
                     f"{gap}-day gap it has {metrics['margin_days_min']:.1f} days to spare at worst"
                     + (" (the stale text would need a similarity above 1: the dates alone decide here)"
                        if out_of_reach else "")
                     + (f"; recency decays only a superseded statement: the correction was found to supersede it "
                        f"in {sum(r['detected'] for r in rows)}/{n} (pair cosine "
                        f"{min(r['pair_cosine'] for r in rows):.2f}–{max(r['pair_cosine'] for r in rows):.2f}, "
                        f"worst margin over its threshold {metrics['detection_margin_min']:+.2f})"
                        if superseded_scope else "")
                     + "; correction first at a gap "
                     f"of " + ", ".join(f"{g} d {k}/{len(scored)}" for g, k in grid.items()))
    return IncidentResult(3, "stale fact", SEED, measured, embedder.id, verdict(statuses), PRINCIPLE, **counts(statuses),
                          metrics=metrics,
                          before="open_memory with memory.recency=false and memory.search=dense (similarity alone, the seed)",
                          after="open_memory as configured (recency re-ranking)",
                          details={"variants": rows, "negation_closer": closer, "now": NOW.isoformat(),
                                   "stale_age_days": STALE_AGE_DAYS, "correction_age_days": CORRECTION_AGE_DAYS,
                                   "half_life_days": settings.memory.half_life_days,
                                   "gap_grid_days": grid, "gap_grid_note": "correction first (of the variants) when "
                                   "it is 1 day old and the stale statement this many days older, re-ranked by the "
                                   "production ranking (rank_memories with memory.recency_scope) over the "
                                   "similarities measured above",
                                   "seed_constants": {"cos_teal_not_teal": SEED_COS_NEGATION,
                                                      "cos_unrelated": SEED_COS_UNRELATED,
                                                      "source": "the seed's record (nomic-embed-text via Ollama), "
                                                                "a constant, not measured in this run"},
                                   "measured_pair": {"embedder": embedder.id, "terms": first["negation"],
                                                     "cos_negation": first["cos_negation"],
                                                     "cos_unrelated": first["cos_unrelated"]}})
