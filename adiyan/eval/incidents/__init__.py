"""The five incidents of the seed, replayed through production code: a *before* and an *after*.

Each replay runs the seed's failure as a configuration of the real pipeline (the before) and the
workbench's defence (the after) over authored variants in ``evalsets/incidents/``, and reports
how many variants hold (the before shows the failure, the after prevents it), e.g. "6/6
variants" or "3/7 variants, 4 not reproduced"; the verdict rule is in :mod:`.common`, and each
result names its basis: a *production configuration* (1, 3, 4) or a *replica* of a before that
production refuses to run (2, 5; the verdict then reads "demonstrated on a replica").
``invoke replay`` prints the table and writes ``reports/incidents.json``; ``invoke eval``
records :func:`incident_metrics`.

1. chunk dilution (:mod:`.dilution`): knowledge base, heading-blind versus structural chunking
2. unscoped search (:mod:`.unscoped`): the KB search with the access filter off versus on
3. stale fact (:mod:`.stale`): memory without versus with recency re-ranking
4. image-only slide (:mod:`.slides`): the parser without versus with its OCR tier
5. permission gap (:mod:`.permissions`): the router with the seed's tier table versus ours
"""

from __future__ import annotations

import json
import textwrap
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

from ...factory import open_embedder
from .common import INCIDENTS_DIR, IncidentResult
from .dilution import chunk_dilution
from .permissions import permission_gap, route_outcome
from .slides import image_only_slide
from .stale import stale_fact
from .unscoped import leaks_by_path, unscoped_search

INCIDENTS = [chunk_dilution, unscoped_search, stale_fact, image_only_slide, permission_gap]
NAMES = {1: "chunk dilution", 2: "unscoped search", 3: "stale fact", 4: "image-only slide", 5: "permission gap"}

__all__ = ["INCIDENTS", "INCIDENTS_DIR", "IncidentResult", "as_dict", "chunk_dilution", "format_table",
           "image_only_slide", "incident_metrics", "leaks_by_path", "permission_gap", "replay_all", "route_outcome",
           "stale_fact", "summary", "unscoped_search", "write_results"]


def replay_all(settings, *, embedder=None, progress: bool = True) -> list[IncidentResult]:
    embedder = embedder or open_embedder(settings, progress=progress)
    results = []
    for number, fn in enumerate(INCIDENTS, 1):
        t0 = time.perf_counter()
        try:
            res = fn(settings, embedder)
        except Exception as exc:  # noqa: BLE001 - a replay that crashes is a principle not shown
            res = IncidentResult(number, NAMES[number], "", f"ERROR {type(exc).__name__}: {exc}",
                                 getattr(embedder, "id", "?"), False, (fn.__module__ or "").rsplit(".", 1)[-1])
        res.seconds = round(time.perf_counter() - t0, 2)
        results.append(res)
    return results


def metric_stem(r: IncidentResult) -> str:
    """``"4_image-only_slide"``: the name earlier runs recorded, so runs stay comparable."""
    return f"{r.number}_{r.name.replace(' ', '_')}"


def incident_metrics(results: list[IncidentResult]) -> dict[str, float]:
    """The ``incidents`` metric group: per incident whether it holds and the share of variants
    held; ``principles_holding_share`` over the incidents measurable here (n/a ones are left out
    and named by their missing ``_holds``)."""
    measurable = [r for r in results if r.holds is not None]
    group: dict[str, float] = {}
    if measurable:
        group["principles_holding_share"] = round(sum(bool(r.holds) for r in measurable) / len(measurable), 6)
    for r in results:
        if r.holds is not None:
            group[f"{metric_stem(r)}_holds"] = float(r.holds)
        if r.variants_share is not None:
            group[f"{metric_stem(r)}_variants_held"] = r.variants_share
        for key, value in r.metrics.items():  # e.g. 1_chunk_dilution_margin_gain_min
            group[f"{metric_stem(r)}_{key}"] = value
    return group


def as_dict(r: IncidentResult) -> dict:
    return {**asdict(r), "status": r.status, "variants_text": r.variants_text}


def format_table(results: list[IncidentResult]) -> str:
    rows = [("#", "incident", "seed's figure", "measured here", "model", "variants", "before", "principle")]
    rows += [(str(r.number), r.name, r.seed_figure, r.measured, r.model, r.variants_text, r.basis, r.status)
             for r in results]
    caps = (3, 18, 34, 60, 22, 20, 22, 25)
    widths = [min(max(len(row[i]) for row in rows), caps[i]) for i in range(len(caps))]
    out = []
    for j, row in enumerate(rows):
        cells = [textwrap.wrap(c, w) or [""] for c, w in zip(row, widths)]
        for k in range(max(len(c) for c in cells)):
            out.append("  ".join((c[k] if k < len(c) else "").ljust(w) for c, w in zip(cells, widths)))
        out.append("  ".join("-" * w for w in widths) if j == 0 else "")
    return "\n".join(out).rstrip()


def summary(results: list[IncidentResult]) -> tuple[str, int]:
    """The closing line of ``invoke replay`` and its exit status (1 when a principle fails)."""
    failing = [r for r in results if r.holds is False]
    na = [r for r in results if r.holds is None]
    replica = [r for r in results if r.holds is True and r.status != "holds"]
    line = (f"{sum(r.status == 'holds' for r in results)}/{len(results)} principles hold in the production "
            f"configuration"
            + (f", {len(replica)} demonstrated on a replica of a before production refuses to run "
               f"({', '.join(r.name for r in replica)})" if replica else "")
            + (f", {len(failing)} FAIL ({', '.join(r.name for r in failing)})" if failing else "")
            + (f", {len(na)} n/a ({', '.join(r.name for r in na)})" if na else "")
            + "; variants: " + ", ".join(f"{r.number} {r.variants_text}" for r in results))
    return line, 1 if failing else 0


def write_results(results: list[IncidentResult], path: Path, settings) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "config_hash": settings.config_hash(), "embedder": settings.embedder.name,
        "all_hold": all(r.holds is True for r in results), "metrics": incident_metrics(results),
        "incidents": [as_dict(r) for r in results]}, indent=2), encoding="utf-8")
