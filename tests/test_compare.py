"""invoke compare: deltas with directions from the registry, paired tests, flipped questions."""

import json
from pathlib import Path

import pytest

from adiyan import cli
from adiyan.eval.compare import CompareError, compare_runs, resolve_run
from adiyan.eval.runner import run_eval

ROOT = Path(__file__).resolve().parents[1]
BASIC = ROOT / "evalsets" / "adiyan_basic"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from adiyan.config import load_settings

    tmp = tmp_path_factory.mktemp("compare")
    base = {"paths.data_dir": str(tmp / "data"), "paths.cache_dir": str(tmp / "cache"),
            "paths.reports_dir": str(tmp / "reports"), "paths.models_dir": str(ROOT / ".cache/adiyan/models"),
            "eval.evalset": str(BASIC), "eval.generate": False, "eval.judge": None, "eval.incidents": False,
            "retrieval.use_calibrated_floors": False}
    dense = run_eval(load_settings(None, base, environ={}), progress=False, run_id="dense-1")
    bm25 = run_eval(load_settings(None, {**base, "retrieval.mode": "bm25"}, environ={}), progress=False,
                    run_id="bm25-1")
    again = run_eval(load_settings(None, base, environ={}), progress=False, run_id="dense-2")
    return tmp, dense, bm25, again


def _rows(run_dir):
    return {r["id"]: r for r in map(json.loads, (run_dir / "questions.jsonl").read_text().splitlines())}


def test_deltas_flips_and_tests_match_the_runs(runs):
    tmp, dense, bm25, _ = runs
    out, res = compare_runs(dense, bm25, tmp / "reports" / "compare")
    ma = json.loads((dense / "metrics.json").read_text())["metrics"]
    mb = json.loads((bm25 / "metrics.json").read_text())["metrics"]
    row = next(m for m in res["metrics"] if (m["group"], m["name"]) == ("retrieval", "mrr@4"))
    assert row["delta"] == pytest.approx(mb["retrieval"]["mrr@4"] - ma["retrieval"]["mrr@4"])
    assert row["verdict"] == ("better" if row["delta"] > 0 else "worse" if row["delta"] < 0 else "same")
    leak = next(m for m in res["metrics"] if m["name"] == "private_chunks_leaked")
    assert leak["direction"] == "lower"
    # the flipped questions are exactly those whose hit differs between the two question files
    ra, rb = _rows(dense), _rows(bm25)
    expected = {q for q in ra if ra[q]["hit"] is not None and bool(ra[q]["hit"]) != bool(rb[q]["hit"])}
    assert {f["id"] for f in res["flipped"] if any("hit" in c and "keyword" not in c for c in f["changes"])} == expected
    # the paired test on reciprocal rank pairs every answerable question, with B - A means
    rr = next(t for t in res["paired_tests"] if t["score"] == "reciprocal_rank")
    n = sum(1 for q in ra.values() if q["hit"] is not None)
    assert rr["n"] == n
    assert rr["delta"] == pytest.approx(sum(rb[q]["reciprocal_rank"] - ra[q]["reciprocal_rank"]
                                            for q in ra if ra[q]["hit"] is not None) / n)
    assert rr["wins"] + rr["losses"] + rr["ties"] == n
    assert {d["key"] for d in res["config_diff"]} >= {"retrieval.mode"}
    html = (out / "index.html").read_text()
    assert "retrieval.mode" in html and "dense-1" in html and "bm25-1" in html


def test_identical_runs_differ_in_nothing(runs):
    tmp, dense, _, again = runs
    _, res = compare_runs(dense, again, tmp / "reports" / "compare")
    assert not res["flipped"] and not res["config_diff"]
    assert all(t["p_value"] == 1.0 and t["delta"] == 0 for t in res["paired_tests"])
    assert all(m["verdict"] == "same" for m in res["metrics"] if m["group"] in ("retrieval", "by_kind", "privacy"))


def test_a_floor_applied_on_one_side_only_is_named_as_a_confound(runs, tmp_path):
    """Two runs whose dense floor differs without a setting naming it (mpnet's calibrated floor
    clears floor_min_j, MiniLM's does not: 0.565 vs 0.888 on adiyan_full, 21 of the 32 points were
    the floor) are flagged; the same floor on both sides is not. The second run is a copy of the
    first with only its recorded floor decision changed, so nothing else can raise the flag."""
    import shutil

    tmp, dense, _, again = runs
    assert compare_runs(dense, again, tmp / "reports" / "compare")[1]["floor_confound"] is None
    floored = tmp_path / "floored"
    shutil.copytree(again, floored)
    m = json.loads((floored / "metrics.json").read_text())
    m["floor"].update(applied=True, floor=0.3589, source="calibrated")
    (floored / "metrics.json").write_text(json.dumps(m))
    out, res = compare_runs(dense, floored, tmp / "reports" / "compare")
    assert res["floor_confound"] and "0.3589 (calibrated" in res["floor_confound"]["b"]
    assert res["floor_confound"]["a"].startswith("0.0 (")
    assert "Confound:" in (out / "index.html").read_text()
    from adiyan.eval.compare import summary_lines

    assert any(line.strip().startswith("CONFOUND: the dense score floor") for line in summary_lines(res))


def test_unlike_runs_are_refused_and_names_resolve(runs, tmp_path, capsys):
    tmp, dense, _, _ = runs
    other = tmp_path / "other"
    other.mkdir()
    m = json.loads((dense / "metrics.json").read_text())
    m["dataset"]["hash"] = "0" * 64
    (other / "metrics.json").write_text(json.dumps(m))
    (other / "questions.jsonl").write_text((dense / "questions.jsonl").read_text())
    with pytest.raises(CompareError, match="different data"):
        compare_runs(dense, other, tmp_path / "c")
    _, res = compare_runs(dense, other, tmp_path / "c", force=True)
    assert not res["same_data"] and not res["paired_tests"]
    assert resolve_run(tmp / "reports", "bm25") == tmp / "reports" / "bm25-1"
    with pytest.raises(CompareError, match="ambiguous"):
        resolve_run(tmp / "reports", "dense")
    rc = cli.main(["--set", f"paths.reports_dir={tmp / 'reports'}", "compare", "dense-1", "bm25-1"])
    out = capsys.readouterr().out
    assert rc == 0 and "compare dense-1 → bm25-1" in out and "setting retrieval.mode: dense → bm25" in out


def test_colour_follows_the_holm_adjusted_test():
    """Issues 44.5 / 41.5: a metric is called better or worse only when its per-question paired test is
    significant after Holm's adjustment over the comparison's tests; p 0.03 alone among three tests
    (Holm 0.09) is "no difference shown", and a metric with no per-question score says so."""
    from adiyan.eval.compare import mark_significance
    from adiyan.eval.ir_metrics import holm

    raw = {"hit": 0.01, "keyword_hit": 0.03, "reciprocal_rank": 0.5}
    adj = holm(raw)
    assert adj == pytest.approx({"hit": 0.03, "keyword_hit": 0.06, "reciprocal_rank": 0.5})  # by hand
    tests = [{"score": k, "metric": m, "p_value": raw[k], "p_holm": adj[k], "significant": adj[k] < 0.05}
             for k, m in (("hit", "retrieval/hit_rate@4"), ("keyword_hit", "answer/keyword_recall"),
                          ("reciprocal_rank", "retrieval/mrr@4"))]
    metrics = [{"group": "retrieval", "name": "hit_rate@4", "verdict": "better"},
               {"group": "answer", "name": "keyword_recall", "verdict": "better"},
               {"group": "retrieval", "name": "mrr@4", "verdict": "worse"},
               {"group": "ragas", "name": "bleu_score", "verdict": "better"}]
    mark_significance(metrics, tests)
    assert [m["shown"] for m in metrics] == ["better", "no difference shown", "no difference shown", "no paired test"]
    assert metrics[1]["p_holm"] == pytest.approx(0.06)
