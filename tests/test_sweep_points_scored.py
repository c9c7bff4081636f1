"""Every sweep in sweeps/ scores each point like a run (issue 44.8): metrics and regression cases (a case
that does not apply is listed with why), and, for the sweeps whose knob is the memory's half-life,
incident 3's verdict and margin. The test walks sweeps/ and runs each spec's baseline point through its
own notebook (``run_sweep(only=[baseline])``, the persistent kernel), on small inputs so that it stays
minutes, not hours. What the small inputs change is listed in ``SMALL`` and never what is scored: a
smaller question set (adiyan_basic instead of adiyan_full, one LoCoMo conversation, 2,000 synthetic
vectors and 20 queries for HNSW), fewer agent repeats, the extractive answerer instead of SmolLM2 (the
LLM answers; the scoring of its answers is the same), no LLM judge for the top-k sweep (judged metrics at
a sweep point are checked in tests/test_sweep_scoring.py), MiniLM at its own width for the dims sweep. A
sweep added to sweeps/ without an entry here runs as written.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from adiyan import sweeps as S

ROOT = Path(__file__).resolve().parents[1]
SWEEPS = sorted(p.stem for p in (ROOT / "sweeps").glob("*.yaml"))
QUESTIONS = {"eval.evalset": "evalsets/adiyan_basic"}
SMALL = {
    "agent": ({**QUESTIONS, "eval.agent_repeats": 1, "llm.name": "extractive"}, {}),
    "chunking": (QUESTIONS, {}),
    "chunking_qa": (QUESTIONS, {}),
    "context": ({"llm.name": "extractive"}, {}),
    "dims": ({**QUESTIONS, "embedder.name": "minilm"}, {"embedder.truncate_dim": 384}),
    "retrieval": (QUESTIONS, {}),
    "topk": ({**QUESTIONS, "eval.judge": None}, {}),  # the judged metrics at a point: tests/test_sweep_scoring.py
    "locomo": ({"eval.locomo_conversations": ["conv-26"]}, {}),
    "hnsw": ({}, {"dataset": "synthetic-2000"}),
}
HALF_LIFE = {"recency", "conversations", "locomo"}  # memory.half_life_days is a knob: incident 3 at each point


def _baseline_only(name: str, tmp: Path, shared_cache: Path) -> tuple[S.SweepSpec, str]:
    from tests.conftest import MODEL_DIR, SHARE, SHARED_CACHE_FILES

    if SHARE:  # the session's content-addressed parse and embedding caches, as make_settings links them
        (tmp / "cache").mkdir(parents=True, exist_ok=True)
        for f in SHARED_CACHE_FILES:
            (tmp / "cache" / f).symlink_to(shared_cache / f)

    spec = S.load_spec(name, ROOT / "sweeps")
    over, params = SMALL.get(name, ({}, {}))
    base = {**spec.baseline, **params}
    spec.grid = {k: [v] for k, v in base.items()}
    spec.baseline = base
    if name == "hnsw":
        spec.parameters = {**spec.parameters, "n_queries": 20}
    spec.overrides = {**spec.overrides, **over, "paths.data_dir": str(tmp / "data"),
                      "paths.cache_dir": str(tmp / "cache"), "paths.models_dir": str(MODEL_DIR)}
    if "paths.reports_dir" not in spec.overrides:
        spec.overrides["paths.reports_dir"] = str(tmp / "reports")
    points = S.expand(spec)
    return spec, points[0].id


@pytest.mark.slow
@pytest.mark.parametrize("name", SWEEPS)
def test_every_sweep_point_reports_metrics_and_regression_cases(name, tmp_path, shared_cache_dir):
    spec, pid = _baseline_only(name, tmp_path, shared_cache_dir)
    S.run_sweep(spec, out_dir=tmp_path / "out", cwd=ROOT, progress=False, only=[pid])
    data = S.read_point(tmp_path / "out" / "points" / pid)
    assert data and data.get("status", "ok") == "ok", data
    assert any(isinstance(v, (int, float)) for v in data["metrics"].values()), "no metric"
    cases = data["info"]["scored"]["regression"]
    assert cases, "no regression case recorded"
    assert all(c["reason"] for c in cases if c["status"] == "n/a"), "a case that does not apply says why"
    if name in HALF_LIFE:
        assert "incidents.3_stale_fact_holds" in data["metrics"] and "incidents.3_stale_fact_margin_days_min" in data["metrics"]
        stale = {c["id"]: c for c in cases}["incidents-variants-stale-fact"]
        assert stale["status"] in ("pass", "fail")  # applies at a half-life point, checked on the replay
    html = (tmp_path / "out" / "index.html").read_text(encoding="utf-8")
    assert "Regression cases per point" in html and 'id="unscored"' not in html
    assert ('id="incident-3"' in html) == (name in HALF_LIFE)  # the half-life sweeps show incident 3 per point


def test_an_unscored_point_is_named_by_the_sweep(tmp_path):
    """The sweep's own check (stderr and the index page): a finished point with no metric or no regression
    case is named (hand-made gathered table, no notebook run)."""
    import pandas as pd

    from adiyan.sweeps.gather import Gathered

    runs = pd.DataFrame([{"point_id": "a", "status": "ok", "hit@1": 1.0}, {"point_id": "b", "status": "ok", "hit@1": 0.5},
                         {"point_id": "c", "status": "ok", "hit@1": float("nan")}, {"point_id": "d", "status": "failed"}])
    g = Gathered(runs, pd.DataFrame(), [], ["hit@1"], scored={"a": {"regression": [{"id": "x", "status": "pass"}]}})
    assert g.unscored() == ["b: no regression cases", "c: no metric"]


def test_hnsw_point_scores_a_judged_set_against_its_labels(tmp_path):
    """A judged vector set: each query's one relevant document is its exact nearest neighbour. At a
    generous ef the HNSW top 10 ranks it first, so nDCG@10 = recall@10 = 1.0; under the access filter
    only the global half can be found, so both equal the share of queries whose neighbour is global
    (computed here from the same seeded visibility the index uses)."""
    import dataclasses

    import numpy as np

    from adiyan.experiments import hnsw as H

    from adiyan.config import load_settings

    s = load_settings(None, {"paths.data_dir": str(tmp_path / "data"), "paths.cache_dir": str(tmp_path / "cache")},
                      environ={})
    vs = H.synthetic_vectors(500, 16, n_queries=20, clusters=5)
    nn = [vs.ids[int(np.argmax(vs.vectors @ q))] for q in vs.queries]
    judged = dataclasses.replace(vs, qrels={q: {d: 1} for q, d in zip(vs.query_ids, nn)})
    full = H.hnsw_point(judged, s, ef=512, access_filter=False, k=10)
    assert full.metrics["retrieval.ndcg@10"] == 1.0 and full.metrics["retrieval.recall@10"] == 1.0
    filtered = H.hnsw_point(judged, s, ef=512, access_filter=True, k=10)
    share = np.mean([H.visibility(d, vs.info["seed"]) == "global" for d in nn])
    assert 0 < share < 1
    assert filtered.metrics["retrieval.ndcg@10"] == pytest.approx(share)
    cases = {c["id"]: c for c in filtered.info["scored"]["regression"]}
    assert cases["hnsw-filter-no-private"]["status"] == "pass" and cases["hnsw-filter-no-private"]["value"] == 0
    assert {c["id"]: c for c in full.info["scored"]["regression"]}["hnsw-filter-no-private"]["status"] == "n/a"
