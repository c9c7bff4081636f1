"""Incident 1, chunk dilution: a fact sharing one chunk with unrelated sections falls under the floor.

The seed's notes file of five unrelated sections scored 0.496 for its fact, under the 0.55
floor, with heading-blind chunking, and 0.665 once chunks followed the headings (nomic-embed-text
via Ollama). Here every authored variant (``evalsets/incidents/chunk_dilution.yaml``: different
facts, topics and positions) goes through the knowledge base twice: *before*, heading-blind, the
whole file one chunk (``chunking.strategy=fixed`` with a size past the file); *after*, the
production's structural chunking (``chunking.strategy=markdown``). Each question is asked within
its file through the retrieval pipeline (``search_within_document``), whose floor decides
whether the fact's chunk is returned.

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
    INCIDENTS_DIR, NA, IncidentResult, classify, count_tokens, counts, input_window, load_spec, settings_for, verdict,
)

OWNER = "notes"
SEED = "0.496 → 0.665 around the 0.55 floor (the seed: one notes file, nomic-embed-text via Ollama)"
PRINCIPLE = ("a fact the floor drops when it shares a chunk with unrelated sections is kept once chunks "
             "follow the headings")


def _fact_hit(retriever, source: str, question: str, fact: str, *, floor: float | None):
    """The highest-ranked chunk of ``source`` holding ``fact`` that the pipeline returns, or None."""
    res = retriever.search_within_document(source, question, OWNER, top_k=50, floor=floor)
    return next((c for c in res.chunks if fact in c.text), None)


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
                                                              "chunking.overlap": settings.chunking.overlap}}
    if settings.retrieval.mode != "dense":  # fused / BM25 scores: no floor, and no cosine to report
        why = f"retrieval.mode={settings.retrieval.mode}: no floor applies to its scores"
        return IncidentResult(1, "chunk dilution", SEED, f"n/a: {why}; dilution can only drop a fact under a floor "
                              f"({window_note})", embedder.id, None, PRINCIPLE, **counts([NA] * len(variants)),
                              details={**base, "na_reason": why})
    no_floor = None  # why no floor can drop a fact here; the scores are measured all the same
    if floor <= 0:
        no_floor = (f"no score floor applies to {embedder.id} in this configuration (the pipeline's floor is "
                    f"{floor:g}: {floor_decision(settings.retrieval, embedder.id).reason}; "
                    f"retrieval.score_floors.{embedder.id} would set one)")
    rows = {v["id"]: {"id": v["id"], "position": v["position"], "question": v["question"]} for v in variants}
    with tempfile.TemporaryDirectory(prefix="adiyan-incident1-") as tmp:
        for label, cfg in (("before", before_cfg), ("after", after_cfg)):
            s = settings_for(settings, Path(tmp) / label, **cfg)
            kb = open_kb(s, embedder=embedder)
            try:
                retriever = open_retriever(s, kb, entry_point="the chunk-dilution replay")
                for v in variants:
                    rows[v["id"]][f"{label}_chunks"] = kb.ingest_text(texts[v["id"]], f"{v['id']}.md", OWNER,
                                                                      "global").n_chunks
                for v in variants:
                    source, row = f"{OWNER}/{v['id']}.md", rows[v["id"]]
                    scored = _fact_hit(retriever, source, v["question"], v["fact"], floor=-1.0)  # every chunk
                    if scored is None:
                        raise ValueError(f"{INCIDENTS_DIR / v['file']}: the fact {v['fact']!r} is in no chunk")
                    kept = _fact_hit(retriever, source, v["question"], v["fact"], floor=None)  # the pipeline's floor
                    row[f"{label}_score"] = round(scored.score, 4)
                    row[f"{label}_kept"] = kept is not None
                    row[f"{label}_tokens"] = count_tokens(embedder, embedder.prefix("document") + scored.text)
            finally:
                kb.store.close()
    for v in variants:
        row = rows[v["id"]]
        row["question_tokens"] = count_tokens(embedder, embedder.prefix("query") + v["question"])
        sizes = [row["before_tokens"], row["after_tokens"], row["question_tokens"]]
        if window is None or any(n is None for n in sizes):
            row["status"], row["na_reason"] = NA, window_note
        elif max(sizes) > window:
            row["status"], row["na_reason"] = NA, f"{max(sizes)} tokens, past {embedder.id}'s {window}-token window"
        elif no_floor:
            row["status"], row["na_reason"] = NA, "no floor"
        else:  # the failure: the floor drops the fact; the defence: structural chunks keep it
            row["status"] = classify(before_failed=not row["before_kept"], after_prevented=row["after_kept"])
    statuses = [r["status"] for r in rows.values()]
    if no_floor:  # the scores inside the window, without a verdict: nothing can fall under a floor
        inside = [r for r in rows.values() if r.get("na_reason") == "no floor"]
        past = [r for r in rows.values() if r["status"] == NA and r not in inside]
        measured = (f"n/a: {no_floor}; dilution can only drop a fact under a floor. Scores without one: "
                    + (f"the fact's cosine rose from {min(r['before_score'] for r in inside):.3f}–"
                       f"{max(r['before_score'] for r in inside):.3f} (one chunk per file) to "
                       f"{min(r['after_score'] for r in inside):.3f}–{max(r['after_score'] for r in inside):.3f} "
                       f"(structural chunks) in {sum(r['after_score'] > r['before_score'] for r in inside)}/"
                       f"{len(inside)} variants within {embedder.id}'s {window}-token window" if inside
                       else f"no variant fits {window_note}")
                    + "".join(f"; {r['id']} past the window ({r['na_reason']})" for r in past))
        return IncidentResult(1, "chunk dilution", SEED, measured, embedder.id, None, PRINCIPLE, **counts(statuses),
                              details={**base, "na_reason": no_floor, "variants": list(rows.values())})
    measured_rows = [r for r in rows.values() if r["status"] != NA]
    n = len(measured_rows)
    if n:
        lifted = sum(r["after_score"] > r["before_score"] for r in measured_rows)
        lo_b, hi_b = min(r["before_score"] for r in measured_rows), max(r["before_score"] for r in measured_rows)
        lo_a, hi_a = min(r["after_score"] for r in measured_rows), max(r["after_score"] for r in measured_rows)
        measured = (f"floor {floor:.4g}: the fact fell under it with heading-blind chunks in "
                    f"{sum(not r['before_kept'] for r in measured_rows)}/{n} (cosine {lo_b:.3f}–{hi_b:.3f}) and stayed "
                    f"above it with structural chunks in {sum(r['after_kept'] for r in measured_rows)}/{n} "
                    f"({lo_a:.3f}–{hi_a:.3f}); the score rose in {lifted}/{n}; every text within {window} tokens")
    else:
        lifted, measured = 0, f"n/a: no variant fits {embedder.id}'s {window}-token window"
    na_rows = [r for r in rows.values() if r["status"] == NA]
    if na_rows:
        measured += "; " + "; ".join(f"{r['id']} n/a ({r['na_reason']})" for r in na_rows)
    return IncidentResult(1, "chunk dilution", SEED, measured, embedder.id, verdict(statuses), PRINCIPLE, **counts(statuses),
                          before="knowledge base with chunking.strategy=fixed, size past the file (one chunk), "
                                 "asked through the retrieval pipeline within the file",
                          after="the same with chunking.strategy=markdown (the production's structural chunking)",
                          details={**base, "variants": list(rows.values()), "score_rose": lifted})
