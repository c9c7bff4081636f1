"""The five incidents of the seed, replayed: each with a *before* and an *after* configuration.

Each replay measures its figure with the configured embedder (and the real parser, memory and
agent), and reports whether the principle the incident taught holds: the *before* reproduces
the failure and the *after* prevents it. `invoke replay` prints the table and writes
``reports/incidents.json``; it fails when a principle does not hold.
"""

from __future__ import annotations

import io
import json
import logging
import tempfile
import textwrap
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from ..agent import TIERS, AuthorizationError, Requester, route_request
from ..chunking import chunk_text
from ..factory import open_embedder, open_kb, open_memory, open_retriever, score_floor
from ..ingest.parse import parse_document
from ..kb import DocumentNotFound
from ..models.base import cosine
from ..store import Point

ROOT = Path(__file__).resolve().parents[2]
INCIDENTS_DIR = ROOT / "evalsets" / "incidents"


@dataclass
class IncidentResult:
    number: int
    name: str
    seed_figure: str
    measured: str
    model: str
    holds: bool
    principle: str
    details: dict = field(default_factory=dict)
    seconds: float = 0.0


def _settings_for(settings, tmp: str, **overrides):
    return settings.with_overrides({"paths.data_dir": tmp, **overrides})


# 1 ---------------------------------------------------------------------------------------------
def chunk_dilution(settings, embedder) -> IncidentResult:
    """A fact in a Markdown file of five unrelated sections: heading-blind chunking (the whole
    file in one chunk, as the seed had it) leaves it under the floor; structural chunking lifts it."""
    text = (INCIDENTS_DIR / "chunk_dilution_notes.md").read_text(encoding="utf-8")
    query, fact = "What is my favourite colour?", "favourite colour is teal"
    qv = embedder.embed([query], "query")[0]

    def fact_score(**chunking) -> tuple[float, int]:
        cfg = settings.chunking.model_copy(update=chunking)
        chunks = [c for c in chunk_text(text, cfg, embedder=embedder, authored_markdown=True)]
        holding = [c.text for c in chunks if fact in c.text]
        return max(float(v @ qv) for v in embedder.embed(holding, "document")), len(chunks)

    before, n_before = fact_score(strategy="fixed", size=max(len(text) + 1, 50), overlap=0)
    after, n_after = fact_score(strategy="markdown", size=settings.chunking.size, overlap=settings.chunking.overlap)
    floor = score_floor(settings, embedder.id)
    holds = before < floor <= after
    return IncidentResult(1, "chunk dilution", "0.496 → 0.665 (floor 0.55, nomic-embed-text)",
                          f"{before:.3f} → {after:.3f} (floor {floor:.3f})", embedder.id, holds,
                          "the fact scores under the floor with heading-blind chunks and above it with structural chunks",
                          {"before": before, "after": after, "floor": floor, "chunks_before": n_before,
                           "chunks_after": n_after})


# 2 ---------------------------------------------------------------------------------------------
def unscoped_search(settings, embedder) -> IncidentResult:
    """Another owner's private chunk leaks through a search without the requester's scope; the
    policy stops it on all six read paths; the migration makes legacy (unlabelled) chunks private."""
    secret = "The door code of Mira's flat is 4-7-1-9."
    with tempfile.TemporaryDirectory() as tmp:
        s = _settings_for(settings, tmp, **{"store.exact": True})
        kb = open_kb(s, embedder=embedder)
        retriever = open_retriever(s, kb)
        try:
            kb.ingest_text("# Office\n\nThe office door code is posted at reception.", "office.md", "office", "global")
            kb.ingest_text(f"# Private\n\n{secret}", "mira.md", "mira", "private")
            q = "What is the door code?"
            unscoped = retriever.retrieve_knowledge_base(q, None, is_owner=True, top_k=4, floor=-1).chunks  # the seed's bug
            leaked_before = sum(secret in c.text for c in unscoped)
            leaks_after = 0
            leaks_after += sum(secret in c.text for c in retriever.retrieve_knowledge_base(q, "tomas", top_k=4, floor=-1).chunks)
            found = retriever.find_source_document(q, "tomas", floor=-1)
            leaks_after += int(bool(found) and found["source"] == "mira/mira.md")
            leaks_after += sum(d["source"] == "mira/mira.md" for d in kb.list_documents("tomas"))
            for call in (lambda: retriever.search_within_document("mira/mira.md", q, "tomas", floor=-1),
                         lambda: kb.get_document_text("mira/mira.md", "tomas"),
                         lambda: kb.get_document("mira/mira.md", "tomas")):
                try:
                    call()
                    leaks_after += 1
                except DocumentNotFound:
                    pass
            # legacy chunks written before visibility existed: migrate them to private
            vec = embedder.embed(["Legacy note: the safe code is 2-2-0-8."], "document")[0]
            kb.store.upsert(kb.collection, [Point("00000000-0000-0000-0000-00000000beef", vec,
                                                  {"source_filename": "legacy.md", "chunk_index": 0,
                                                   "text": "Legacy note: the safe code is 2-2-0-8."})])
            migrated = kb.migrate_private("mira")
            legacy_visible = sum("2-2-0-8" in c.text for c in
                                 retriever.retrieve_knowledge_base("safe code", "tomas", top_k=10, floor=-1).chunks)
            legacy_owner = sum("2-2-0-8" in c.text for c in
                               retriever.retrieve_knowledge_base("safe code", "mira", top_k=10, floor=-1).chunks)
        finally:
            kb.store.close()
    holds = leaked_before >= 1 and leaks_after == 0 and migrated == 1 and legacy_visible == 0 and legacy_owner == 1
    return IncidentResult(2, "unscoped search", "another owner's private data returned by an unscoped search",
                          f"leaked {leaked_before} before, {leaks_after} after on 6 read paths; "
                          f"{migrated} legacy chunk migrated", embedder.id, holds,
                          "no requester ever receives another owner's private chunk; legacy chunks become private",
                          {"leaked_before": leaked_before, "leaks_after_six_paths": leaks_after,
                           "migrated": migrated, "legacy_visible_to_other": legacy_visible,
                           "legacy_visible_to_owner": legacy_owner})


# 3 ---------------------------------------------------------------------------------------------
def stale_fact(settings, embedder) -> IncidentResult:
    """'favourite colour is teal', later 'crimson, not teal': similarity alone ranks the stale
    statement first; recency re-ranking puts the correction first."""
    now = datetime(2026, 6, 1, 12, tzinfo=timezone.utc)
    stale, fix = "My favourite colour is teal.", "Actually my favourite colour is crimson, not teal."
    with tempfile.TemporaryDirectory() as tmp:
        s = _settings_for(settings, tmp)
        mem = open_memory(s, embedder, infer=False)
        try:
            mem.add(stale, user_id="u", created_at=now - timedelta(days=30))
            mem.add(fix, user_id="u", created_at=now - timedelta(days=1))
            q = "What is my favourite colour?"
            plain = mem.search(q, user_id="u", k=2, recency=False, now=now)
            ranked = mem.search(q, user_id="u", k=2, recency=True, now=now)
        finally:
            mem.close()
    sim = {h.text: h.similarity for h in plain}
    v = embedder.embed(["teal", "not teal", "bicycle"], None)
    teal_not, teal_bike = cosine(v[0], v[1]), cosine(v[0], v[2])
    holds = plain[0].text == stale and ranked[0].text == fix
    return IncidentResult(3, "stale fact", "stale 0.781 vs correction 0.725; cos(teal, not teal) 0.91 vs bicycle 0.36",
                          f"stale {sim[stale]:.3f} vs correction {sim[fix]:.3f}; with recency "
                          f"{ranked[0].score:.3f} (correction) first; cos(teal, not teal) {teal_not:.2f} vs "
                          f"bicycle {teal_bike:.2f}", embedder.id, holds,
                          "without recency the stale statement outranks its correction; with it the correction comes first",
                          {"stale_similarity": sim[stale], "correction_similarity": sim[fix],
                           "recency_order": [h.text for h in ranked], "recency_scores": [h.score for h in ranked],
                           "cos_teal_not_teal": teal_not, "cos_teal_bicycle": teal_bike})


# 4 ---------------------------------------------------------------------------------------------
def _text_frames_only(data: bytes) -> list[int]:
    """The seed's first extractor: text frames of top-level shapes, nothing else, no report."""
    from pptx import Presentation  # heavy-ish: python-pptx loads only for this replay

    return [sum(len(sh.text_frame.text.strip()) for sh in slide.shapes if sh.has_text_frame)
            for slide in Presentation(io.BytesIO(data)).slides]


def image_only_slide(settings, embedder) -> IncidentResult:
    """An image-only slide: the old extractor yields nothing and says nothing; the two-tier path
    (python-pptx, then OCR) yields its text, or a named warning when even OCR finds nothing."""
    deck = ROOT / "evalsets" / "adiyan_full" / "docs" / "sales_deck.pptx"
    data = deck.read_bytes()
    before_chars = _text_frames_only(data)
    silent = [i + 1 for i, n in enumerate(before_chars) if n == 0]
    report = parse_document(data, deck.name, ocr=settings.ingest.ocr).report
    units = {u.unit: u for u in report.units}
    warned = {w.unit for w in report.warnings}
    after = {n: (units[n].chars if n in units else 0, units[n].tier if n in units else "") for n in silent}
    holds = bool(silent) and all(chars > 0 or n in warned for n, (chars, _) in after.items())
    desc = ", ".join(f"slide {n}: {c} chars via {t or 'warning'}" for n, (c, t) in after.items())
    return IncidentResult(4, "image-only slide", "image-only slides extracted as empty, silently",
                          f"before: slide(s) {silent} with 0 chars and no warning; after: {desc}",
                          f"ocr:{settings.ingest.ocr}", holds,
                          "an image-only slide yields text or a named warning, never silent emptiness",
                          {"before_chars_per_slide": before_chars, "after": {str(k): v for k, v in after.items()},
                           "warnings": [asdict(w) for w in report.warnings]})


# 5 ---------------------------------------------------------------------------------------------
MESSAGES = {
    "kb_question": "How much does the Julian Alps Weekend cost per person?",
    "document_request": "Send me the full text of the refund policy.",
    "memory_question": "Do you remember what I told you last time about my diet?",
    "general": "Hello, who are you?",
}


def permission_gap(settings, embedder) -> IncidentResult:
    """A message routed to a capability the requester's tier lacks. Before: the seed's router
    swallowed the refusal and returned nothing, dropping the message. After: the agent's router
    raises an AuthorizationError the caller sees (and logs it), or runs the route."""
    def seed_router(message, requester):  # the gap, reproduced: refusal swallowed, message gone
        try:
            return route_request(message, requester)
        except AuthorizationError:
            return None

    logging.getLogger("adiyan.agent").setLevel(logging.CRITICAL)  # the refusals are expected here
    try:
        cases = [(route, msg, tier) for route, msg in MESSAGES.items() for tier in TIERS]
        dropped_before = sum(seed_router(msg, Requester("u", TIERS[t])) is None for _, msg, t in cases)
        ran, raised, silent, misrouted = 0, 0, 0, 0
        for route, msg, tier in cases:
            try:
                got = route_request(msg, Requester("u", TIERS[tier]))
            except AuthorizationError:
                raised += 1
                continue
            if got is None:
                silent += 1
            else:
                ran += 1
                misrouted += got != route
    finally:
        logging.getLogger("adiyan.agent").setLevel(logging.NOTSET)
    holds = dropped_before > 0 and silent == 0 and ran + raised == len(cases) and misrouted == 0
    return IncidentResult(5, "permission gap", "every message needing a missing capability dropped silently",
                          f"before: {dropped_before}/{len(cases)} route×tier messages dropped silently; after: "
                          f"{ran} ran, {raised} raised AuthorizationError, {silent} silent",
                          "agent router + tiers", holds, "every message either runs or raises a visible authorization error",
                          {"messages": len(cases), "dropped_before": dropped_before, "ran_after": ran,
                           "errors_after": raised, "silent_after": silent, "misrouted": misrouted})


INCIDENTS = [chunk_dilution, unscoped_search, stale_fact, image_only_slide, permission_gap]


def replay_all(settings, *, embedder=None, progress: bool = True) -> list[IncidentResult]:
    embedder = embedder or open_embedder(settings, progress=progress)
    results = []
    for fn in INCIDENTS:
        t0 = time.perf_counter()
        try:
            res = fn(settings, embedder)
        except Exception as exc:  # noqa: BLE001 - a replay that crashes is a principle not shown
            res = IncidentResult(INCIDENTS.index(fn) + 1, fn.__name__.replace("_", " "), "", f"ERROR {type(exc).__name__}: {exc}",
                                 getattr(embedder, "id", "?"), False, (fn.__doc__ or "").strip().split("\n")[0])
        res.seconds = round(time.perf_counter() - t0, 2)
        results.append(res)
    return results


def format_table(results: list[IncidentResult]) -> str:
    rows = [("#", "incident", "seed's figure", "measured here", "model", "principle")]
    rows += [(str(r.number), r.name, r.seed_figure, r.measured, r.model, "holds" if r.holds else "FAILS")
             for r in results]
    widths = [min(max(len(row[i]) for row in rows), 60 if i in (2, 3) else 40) for i in range(6)]

    def wrap(text: str, w: int) -> list[str]:
        return textwrap.wrap(text, w) or [""]

    out = []
    for j, row in enumerate(rows):
        cells = [wrap(c, w) for c, w in zip(row, widths)]
        for k in range(max(len(c) for c in cells)):
            out.append("  ".join((c[k] if k < len(c) else "").ljust(w) for c, w in zip(cells, widths)))
        if j == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def write_results(results: list[IncidentResult], path: Path, settings) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "config_hash": settings.config_hash(), "embedder": settings.embedder.name,
        "all_hold": all(r.holds for r in results), "incidents": [asdict(r) for r in results]}, indent=2),
        encoding="utf-8")
