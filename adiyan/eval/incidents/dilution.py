"""Incident 1, chunk dilution: a fact sharing one chunk with unrelated sections loses its score.

The seed's notes file of five unrelated sections scored 0.496 for its fact, under the 0.55
floor, with heading-blind chunking, and 0.665 once chunks followed the headings (nomic-embed-text
via Ollama). Here every authored variant (``evalsets/incidents/chunk_dilution.yaml``: different
facts, topics and positions) goes into one knowledge base twice: *before*, heading-blind, each
whole file one chunk (``chunking.strategy=fixed`` with a size past the longest file); *after*, the
production's structural chunking (``chunking.strategy=markdown``). Each question is asked of the
whole knowledge base through the retrieval pipeline (``retrieve_knowledge_base``, no floor), so
the other files' chunks compete with the fact's.

The principle, in a form every dense configuration can check, with or without a floor (issue 23):
per variant, the cosine of the chunk of the variant's file that holds the fact, its **rank** among
the chunks that do not hold it (1 = above every unrelated chunk) and its **margin** over the best
unrelated chunk (fact's cosine minus the best cosine of a chunk without the fact), before and
after. A variant is

- *diluted before* (the seed's failure) when the fact's cosine in the shared chunk is lower than
  in its own structural chunk;
- *kept apart after* (the defence) when structural chunking widens the margin and does not
  worsen the rank.

Held = both; not reproduced = the margin widened but the fact was not diluted; violated = the
margin did not widen or the rank fell. When the pipeline applies a floor (nomic-embed-text's 0.55)
the seed's own form is reported beside it: the fact's chunk fell under the floor before and was
kept after (``floor_variants_held``; regression case ``chunk-dilution-floor``).

Dilution is only measured inside the embedder's input window: a text past it is truncated, and
then the figure would measure truncation (the seed's file is ~500 tokens, twice minilm's 256).
Every compared text (the whole file, the fact's chunk, the question, with the model's prefix) is
counted with the embedder's own tokenizer; a variant with a text past the window is n/a.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ...factory import open_kb, open_retriever, score_floor
from ...retrieval.floor import floor_decision
from .common import (
    HELD, INCIDENTS_DIR, NA, IncidentResult, classify, count_tokens, counts, input_window, load_spec, settings_for,
    verdict,
)

OWNER = "notes"
SEED = "0.496 → 0.665 around the 0.55 floor (the seed: one notes file, nomic-embed-text via Ollama)"
PRINCIPLE = ("a fact that shares a chunk with unrelated sections is diluted; once chunks follow the headings its "
             "margin over the best unrelated chunk widens and its rank does not fall (and a floor keeps it)")


def fact_standing(chunks, source: str, fact: str) -> dict:
    """The fact's chunk of ``source`` in a ranking of the whole knowledge base: its cosine, its rank
    among the chunks without the fact (1 = above all of them) and its margin over the best of them."""
    own = next((c for c in chunks if c.source == source and fact in c.text), None)
    if own is None:
        return {}
    unrelated = [c for c in chunks if fact not in c.text]
    best = max((c.score for c in unrelated), default=None)
    return {"chunk": own, "score": round(own.score, 4), "rank": 1 + sum(c.score > own.score for c in unrelated),
            "best_unrelated": None if best is None else round(best, 4),
            "best_unrelated_source": next((c.source for c in unrelated if c.score == best), None),
            "margin": None if best is None else round(own.score - best, 4)}


def chunk_dilution(settings, embedder) -> IncidentResult:
    spec = load_spec("chunk_dilution.yaml")
    variants = spec["variants"]
    texts = {v["id"]: (INCIDENTS_DIR / v["file"]).read_text(encoding="utf-8") for v in variants}
    window, window_note = input_window(embedder)
    floor = score_floor(settings, embedder.id)
    before_cfg = {"chunking.strategy": "fixed", "chunking.size": max(len(t) for t in texts.values()) + 1,
                  "chunking.overlap": 0}
    after_cfg = {"chunking.strategy": "markdown"}  # size and overlap as configured
    base = {"floor": floor, "input_window": window, "window_note": window_note, "mode": settings.retrieval.mode,
            "before_chunking": before_cfg, "after_chunking": {**after_cfg, "chunking.size": settings.chunking.size,
                                                              "chunking.overlap": settings.chunking.overlap},
            "corpus": f"the {len(variants)} variant files in one knowledge base (owner {OWNER!r})"}
    if settings.retrieval.mode != "dense":  # fused / BM25 scores: no cosine, so no margin to compare
        why = f"retrieval.mode={settings.retrieval.mode}: its scores are not cosines, no margin to compare"
        return IncidentResult(1, "chunk dilution", SEED, f"n/a: {why} ({window_note})", embedder.id, None, PRINCIPLE,
                              **counts([NA] * len(variants)), details={**base, "na_reason": why})
    floor_note = "" if floor > 0 else (
        f"no score floor applies to {embedder.id} here ({floor:g}: "
        f"{floor_decision(settings.retrieval, embedder.id).reason}), so only rank and margin are checked")
    rows = {v["id"]: {"id": v["id"], "position": v["position"], "question": v["question"]} for v in variants}
    with tempfile.TemporaryDirectory(prefix="adiyan-incident1-") as tmp:
        for label, cfg in (("before", before_cfg), ("after", after_cfg)):
            s = settings_for(settings, Path(tmp) / label, **cfg)
            kb = open_kb(s, embedder=embedder)
            try:
                retriever = open_retriever(s, kb, entry_point="the chunk-dilution replay")
                n_chunks = 0
                for v in variants:
                    rows[v["id"]][f"{label}_chunks"] = n = kb.ingest_text(texts[v["id"]], f"{v['id']}.md", OWNER,
                                                                          "global").n_chunks
                    n_chunks += n
                for v in variants:
                    source, row = f"{OWNER}/{v['id']}.md", rows[v["id"]]
                    ranking = retriever.retrieve_knowledge_base(v["question"], OWNER, top_k=n_chunks, floor=-1.0).chunks
                    st = fact_standing(ranking, source, v["fact"])
                    if not st:
                        raise ValueError(f"{INCIDENTS_DIR / v['file']}: the fact {v['fact']!r} is in no chunk")
                    for key in ("score", "rank", "margin", "best_unrelated", "best_unrelated_source"):
                        row[f"{label}_{key}"] = st[key]
                    row[f"{label}_tokens"] = count_tokens(embedder, embedder.prefix("document") + st["chunk"].text)
                    if floor > 0:  # the seed's form: does the pipeline's floor keep the fact's chunk?
                        kept = retriever.retrieve_knowledge_base(v["question"], OWNER, top_k=n_chunks).chunks
                        row[f"{label}_kept"] = any(c.source == source and v["fact"] in c.text for c in kept)
            finally:
                kb.close()
    for v in variants:
        row = rows[v["id"]]
        row["question_tokens"] = count_tokens(embedder, embedder.prefix("query") + v["question"])
        sizes = [row["before_tokens"], row["after_tokens"], row["question_tokens"]]
        if window is None or any(n is None for n in sizes):
            row["status"], row["na_reason"] = NA, window_note
        elif max(sizes) > window:
            row["status"], row["na_reason"] = NA, f"{max(sizes)} tokens, past {embedder.id}'s {window}-token window"
        else:
            row["diluted_before"] = row["before_score"] < row["after_score"]
            row["margin_gain"] = round(row["after_margin"] - row["before_margin"], 4)
            row["kept_apart_after"] = row["margin_gain"] > 0 and row["after_rank"] <= row["before_rank"]
            row["status"] = classify(before_failed=row["diluted_before"], after_prevented=row["kept_apart_after"])
            if floor > 0:
                row["floor_status"] = classify(before_failed=not row["before_kept"], after_prevented=row["after_kept"])
    statuses = [r["status"] for r in rows.values()]
    inside = [r for r in rows.values() if r["status"] != NA]
    metrics: dict[str, float] = {}
    if inside:
        n = len(inside)

        def span(key):
            return f"{min(r[key] for r in inside):+.3f}…{max(r[key] for r in inside):+.3f}"

        measured = (f"over the {len(variants)} files in one KB, the fact's cosine was lower in the shared chunk in "
                    f"{sum(r['diluted_before'] for r in inside)}/{n}; its margin over the best unrelated chunk went "
                    f"from {span('before_margin')} (one chunk per file) to {span('after_margin')} (structural), "
                    f"wider in {sum(r['margin_gain'] > 0 for r in inside)}/{n} (gain {span('margin_gain')}); rank "
                    f"{'/'.join(str(r['before_rank']) for r in inside)} before, "
                    f"{'/'.join(str(r['after_rank']) for r in inside)} after; every text within {window} tokens")
        metrics = {"margin_gain_min": min(r["margin_gain"] for r in inside),
                   "after_margin_min": min(r["after_margin"] for r in inside),
                   "after_rank_max": float(max(r["after_rank"] for r in inside))}
        if floor > 0:
            fs = [r["floor_status"] for r in inside]
            metrics["floor_variants_held"] = round(fs.count(HELD) / n, 6)
            measured += (f"; floor {floor:.4g}: under it heading-blind in {sum(not r['before_kept'] for r in inside)}/{n}"
                         f", kept with structural chunks in {sum(r['after_kept'] for r in inside)}/{n} "
                         f"({fs.count(HELD)}/{n} held in the seed's form)")
        else:
            measured += f"; {floor_note}"
    else:
        measured = f"n/a: no variant fits {embedder.id}'s {window}-token window"
    na_rows = [r for r in rows.values() if r["status"] == NA]
    if na_rows:
        measured += "; " + "; ".join(f"{r['id']} n/a ({r['na_reason']})" for r in na_rows)
    return IncidentResult(1, "chunk dilution", SEED, measured, embedder.id, verdict(statuses), PRINCIPLE,
                          **counts(statuses), metrics=metrics,
                          before="knowledge base with chunking.strategy=fixed, size past the longest file (one chunk "
                                 "per file), the question asked of the whole KB through the retrieval pipeline",
                          after="the same with chunking.strategy=markdown (the production's structural chunking)",
                          details={**base, "floor_note": floor_note, "variants": list(rows.values())})
