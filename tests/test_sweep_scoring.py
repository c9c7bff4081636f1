"""Every sweep point scored like a run (adiyan/experiments/scoring.py): a real 2-point top-k sweep
over evalsets/adiyan_basic through notebooks/retrieval.ipynb, checked against hand-computed
values and against ``run_eval`` (what ``invoke eval`` computes) for the same configuration.

Hand-checked on adiyan_basic (16 questions, 14 answerable; dense MiniLM ranks a gold source
first for every answerable one, tests/test_sweep.py): q14 is the only question with two gold
sources (itineraries.md, price_list.md). At k = 1 the context holds one source, so RAGAS's
ID-based context recall is 0.5 on q14 and 1 elsewhere: 13.5 / 14 = 0.964286; precision is 1 on
the 14 answerable questions and 0 on the 2 unanswerable ones (RAGAS: no reference ids):
14 / 16 = 0.875. A case "every gold source in the context" (recall floor 1.0) therefore fails at
k = 1 and passes at k = 4, while a top-4 hit-rate case passes at both (the one chunk at k = 1
is already gold).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from adiyan import sweeps as S
from adiyan.eval.regression import load_cases

ROOT = Path(__file__).resolve().parents[1]

EXTRA_CASES = [
    {"id": "basic-every-gold-in-context", "metric": "ragas.id_based_context_recall", "evalset": "adiyan_basic",
     "per_embedder": {"minilm": {"measured": 1.0, "floor": 1.0}}},
    {"id": "basic-hit-rate-top4", "metric": "retrieval.hit_rate@4", "evalset": "adiyan_basic",
     "per_embedder": {"minilm": {"measured": 1.0, "floor": 1.0}}},
]
ANSWERED = 4


@pytest.fixture(scope="module")
def scored_sweep(tmp_path_factory):
    from tests.conftest import MODEL_DIR

    tmp = tmp_path_factory.mktemp("scored")
    cases = tmp / "cases.yaml"
    cases.write_text(yaml.safe_dump({"cases": load_cases() + EXTRA_CASES}), encoding="utf-8")
    overrides = {"paths.data_dir": str(tmp / "data"), "paths.cache_dir": str(tmp / "cache"),
                 "paths.reports_dir": str(tmp / "reports"), "paths.models_dir": str(MODEL_DIR),
                 "eval.evalset": str(ROOT / "evalsets" / "adiyan_basic"), "eval.incidents": False,
                 "retrieval.use_calibrated_floors": False,
                 # the embedded judge, kept cheap: 2 labelled pairs, one metric on one question
                 "eval.judge_calibration_pairs": 2, "eval.judge_sample_unreliable": 1,
                 "eval.judge_metrics": ["answer_relevancy"]}
    spec = S.SweepSpec.from_dict({"notebook": str(ROOT / "notebooks" / "retrieval.ipynb"), "name": "scored",
                                  "overrides": overrides, "grid": {"retrieval.kb_top_k": [1, 4]},
                                  "baseline": {"retrieval.kb_top_k": 4}, "answer_questions": ANSWERED,
                                  "regression_cases": str(cases)}, source="test")
    res = S.run_sweep(spec, out_dir=tmp / "out", cwd=ROOT, progress=False)
    return spec, res, tmp, overrides, cases


def _point(res, tmp, k):
    pid = S.point_id({"retrieval.kb_top_k": k})
    return json.loads((tmp / "out" / "points" / pid / "point.json").read_text())


@pytest.mark.slow
def test_regression_grid_differs_between_points_as_computed_by_hand(scored_sweep):
    spec, res, tmp, _, _ = scored_sweep
    k1, k4 = _point(res, tmp, 1), _point(res, tmp, 4)
    assert k1["metrics"]["ragas.id_based_context_recall"] == pytest.approx(13.5 / 14, abs=1e-6)
    assert k1["metrics"]["ragas.id_based_context_precision"] == pytest.approx(14 / 16, abs=1e-6)
    assert k4["metrics"]["ragas.id_based_context_recall"] == 1.0
    by = {k: {c["id"]: c for c in p["info"]["scored"]["regression"]} for k, p in ((1, k1), (4, k4))}
    assert by[1]["basic-every-gold-in-context"]["status"] == "fail"
    assert "below floor 1.0" in by[1]["basic-every-gold-in-context"]["reason"]
    assert by[4]["basic-every-gold-in-context"]["status"] == "pass"
    for k in (1, 4):
        assert by[k]["basic-hit-rate-top4"]["status"] == "pass" and by[k]["basic-hit-rate-top4"]["value"] == 1.0
        assert by[k]["no-private-leak"]["status"] == "pass"
        assert by[k]["adiyan-full-hit-rate"]["status"] == "n/a"
        assert by[k]["adiyan-full-hit-rate"]["reason"] == "a case for evalset adiyan_full"
        assert by[k]["incidents-all-hold"]["status"] == "n/a"
        assert "not replayed" in by[k]["incidents-all-hold"]["reason"]
    assert k1["metrics"]["regression.basic-every-gold-in-context"] == 0.0
    assert k4["metrics"]["regression.basic-every-gold-in-context"] == 1.0
    assert "regression.incidents-all-hold" not in k1["metrics"]  # does not apply: not a column of None
    # the page: a grid row per case, a cell per point, coloured fail then pass
    html = (tmp / "out" / "index.html").read_text()
    row = re.search(r"<tr><td><code>basic-every-gold-in-context</code>.*?</tr>", html, re.S).group(0)
    cells = re.findall(r'<td style="background:(#[0-9a-f]+)"', row)
    assert cells == ["#f8c8c8", "#d9f2d9"]  # k=1 fail (red), k=4 pass (green)
    assert f"n = {ANSWERED} questions" in html


@pytest.mark.slow
def test_ragas_columns_equal_what_invoke_eval_computes(scored_sweep):
    from adiyan.config import load_settings
    from adiyan.eval.runner import run_eval

    spec, res, tmp, overrides, _ = scored_sweep
    k4 = _point(res, tmp, 4)
    settings = load_settings(None, {**overrides, "retrieval.kb_top_k": 4}, environ={})
    run_dir = run_eval(settings, progress=False)
    m = json.loads((run_dir / "metrics.json").read_text())
    for name in ("id_based_context_precision", "id_based_context_recall"):  # over every question
        assert k4["metrics"][f"ragas.{name}"] == m["metrics"]["ragas"][name]
    rows = {json.loads(x)["id"]: json.loads(x) for x in (run_dir / "questions.jsonl").read_text().splitlines()}
    answered = set(k4["info"]["scored"]["answers"])
    assert len(answered) == ANSWERED == k4["metrics"]["answered_questions"]
    for q in k4["per_question"]:  # per question: the same RAGAS values, string metrics where answered
        for name in ("id_based_context_precision", "id_based_context_recall", "non_llm_string_similarity",
                     "rouge_score", "exact_match"):
            want = rows[q["qid"]]["ragas"][name]
            if name.startswith("id_based") or q["qid"] in answered:
                assert q.get(f"ragas.{name}") == want, (q["qid"], name)  # the run's name
    for name in ("id_based_context_precision", "id_based_context_recall", "non_llm_string_similarity",
                 "rouge_score", "exact_match"):
        v = k4["metrics"][f"ragas.{name}"]
        assert v is not None and 0.0 <= v <= 1.0, name


@pytest.mark.slow
def test_the_embedded_judge_is_calibrated_and_not_asked_again_at_a_point(scored_sweep):
    """Issue 39: an unreliable judge's metrics would be struck, so a point computes none: its
    calibration and ``judge_reliable`` 0 only; the claim checker scores the point's answers."""
    spec, res, tmp, _, _ = scored_sweep
    for k in (1, 4):
        p = _point(res, tmp, k)
        assert p["metrics"]["ragas_llm.judge_reliable"] == 0.0
        assert p["info"]["scored"]["judge"] == "smollm2"
        assert p["info"]["scored"]["judge_calibration"]["reliable"] is False
        assert "ragas_llm.answer_relevancy" not in p["metrics"]
        assert p["metrics"]["claims.claims_checked"] > 0
        assert 0.0 <= p["metrics"]["claims.claim_faithfulness"] <= 1.0


# ---------------------------------------------------------------- fast: recording and the page


def test_record_maps_run_groups_to_their_registry_entries(tmp_path):
    from adiyan import metrics as M
    from adiyan.experiments.common import PointResult, record

    p = record(tmp_path, PointResult({"retrieve_ms": 5.0, "ragas.rouge_score": 0.2, "ragas_llm.faithfulness": None,
                                      "regression.no-private-leak": 1.0, "answered_questions": 4.0}))
    data = json.loads(p.read_text())
    assert data["registry_keys"] == {"ragas.rouge_score": ["ragas", "rouge_score"],
                                     "ragas_llm.faithfulness": ["ragas_llm", "faithfulness"],
                                     "regression.no-private-leak": ["regression", "no-private-leak"]}
    with pytest.raises(M.UnregisteredMetric, match="ragas.nope"):
        record(tmp_path, {"ragas.nope": 0.1})


def test_page_shows_the_regression_grid_and_strikes_an_unreliable_judge(tmp_path):
    """Two points marked finished by hand (no kernel): the grid has a row per case and a
    coloured cell per point, with the reason of a case not checked; a judged value of a point
    whose judge is not reliable is struck."""
    from adiyan.experiments.common import PointResult, record
    from adiyan.sweeps.run import write_outputs

    nb = tmp_path / "nb.ipynb"
    import nbformat

    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]), str(nb))
    spec = S.SweepSpec.from_dict({"notebook": str(nb), "name": "grid", "grid": {"retrieval.kb_top_k": [1, 4]},
                                  "answer_questions": 8}, source="test")
    points = S.expand(spec)
    cases = {1: [{"id": "all-gold", "metric": "ragas.id_based_context_recall", "value": 0.96, "status": "fail",
                  "reason": "0.9643 below floor 1.0"},
                 {"id": "incidents-all-hold", "metric": "incidents.principles_holding_share", "value": None,
                  "status": "not_checked", "reason": "incidents are not replayed at sweep points"}],
             4: [{"id": "all-gold", "metric": "ragas.id_based_context_recall", "value": 1.0, "status": "pass",
                  "reason": ""},
                 {"id": "incidents-all-hold", "metric": "incidents.principles_holding_share", "value": None,
                  "status": "not_checked", "reason": "incidents are not replayed at sweep points"}]}
    for p, k in zip(points, (1, 4)):
        pdir = tmp_path / "out" / "points" / p.id
        record(pdir, PointResult({"retrieval.hit_rate@k": 1.0,
                                  "ragas.id_based_context_recall": 0.96 if k == 1 else 1.0,
                                  "ragas_llm.answer_relevancy": 0.7, "ragas_llm.judge_reliable": 0.0,
                                  "regression.all-gold": float(k == 4)},
                                 info={"scored": {"regression": cases[k], "answered_questions": 8, "questions": 16,
                                                  "judge": "smollm2",
                                                  "judge_calibration": {"agreement": 0.5, "n": 2, "reliable": False}}}))
        S.mark_complete(pdir, S.point_fingerprint(spec, p))
    write_outputs(spec, points, tmp_path / "out")
    html = (tmp_path / "out" / "index.html").read_text()
    row = re.search(r"<tr><td><code>all-gold</code>.*?</tr>", html, re.S).group(0)
    assert re.findall(r'<td style="background:(#[0-9a-f]+)"', row) == ["#f8c8c8", "#d9f2d9"]
    assert "<b>fail</b> (0.96)" in row and "0.9643 below floor 1.0" in row
    row = re.search(r"<tr><td><code>incidents-all-hold</code>.*?</tr>", html, re.S).group(0)
    assert row.count("#eeeeee") == 2 and row.count("<small>incidents are not replayed at sweep points</small>") == 2
    section = html.split("Scored like a run", 1)[1].split("Regression cases per point", 1)[0]
    assert section.count('<span class="unreliable">0.7</span> <span class="badge">unreliable judge</span>') == 2
    assert "n = 8 questions" in section and "8 / 16" in section
