"""Score floors: the calibration rules and what a floor removes, checked by hand; when a floor is
applied (a calibrated one that cannot separate is not; a configured one is, with its J); the
shipped floors calibrated on data disjoint from the set invoke eval scores."""

from types import SimpleNamespace

import pytest

from adiyan.config import RetrievalConfig
from adiyan.eval.evalset import EvalQuestion
from adiyan.eval.floors import floor_effect
from adiyan.retrieval.floor import (
    best_threshold, floor_decision, load_floors, rates_at, recall_threshold, resolve_floor,
)
from adiyan.types import RetrievalResult, RetrievedChunk

from tests.conftest import ROOT


def test_youden_by_hand():
    rel = [0.9, 0.8, 0.7, 0.4]
    irr = [0.5, 0.3, 0.2, 0.1]
    # t=0.7: TPR 3/4, FPR 0 → J 0.75; t=0.4: TPR 1, FPR 1/4 → J 0.75 (tie: lower wins → 0.4)
    t, j, tpr, fpr = best_threshold(rel, irr)
    assert (t, j, tpr, fpr) == (0.4, 0.75, 1.0, 0.25)


def test_recall_rule_by_hand():
    rel = [0.2 + i / 100 for i in range(20)]  # 0.20 .. 0.39
    irr = [0.1, 0.25, 0.3]
    # 95% of 20 = 19 kept → drop the single lowest (0.20) → floor 0.21; irrelevant ≥ 0.21: 0.25, 0.3
    t, j, tpr, fpr = recall_threshold(rel, irr, 0.95)
    assert t == pytest.approx(0.21) and tpr == 0.95 and fpr == pytest.approx(2 / 3)
    assert recall_threshold(rel, irr, 1.0)[0] == pytest.approx(0.20)
    with pytest.raises(ValueError):
        recall_threshold([], irr)


# ---------------------------------------------------------------------------- applying a floor

CAL = {"floor": 0.3463, "youden_j": 0.15, "tpr": 0.95, "fpr": 0.8, "evalset": "xquad_en-test",
       "evalset_hash": "3e61b25bd09ea473", "split": "all 1190 answerable questions", "rule": "recall@0.95"}


def test_rates_at_by_hand():
    rel, irr = [0.9, 0.6, 0.5, 0.2], [0.7, 0.4, 0.3, 0.1, 0.05]
    # t = 0.45: relevant kept 3/4, irrelevant kept 1/5 -> J = 0.55
    assert rates_at(rel, irr, 0.45) == (pytest.approx(0.55), 0.75, 0.2)


def test_a_calibrated_floor_that_cannot_separate_is_not_applied_and_says_so():
    rc = RetrievalConfig(score_floors={})
    d = floor_decision(rc, "minilm", {"minilm": CAL})
    assert (d.floor, d.candidate, d.applied, d.source, d.warning) == (0.0, 0.3463, False, "calibrated",
                                                                      "floor_cannot_separate")
    assert "NOT applied" in d.reason and "is 0.150 < retrieval.floor_min_j 0.2" in d.reason and "xquad_en-test" in d.reason
    # J over the line: applied; the line is a setting
    assert floor_decision(rc, "minilm", {"minilm": {**CAL, "youden_j": 0.25}}).floor == 0.3463
    assert floor_decision(rc.model_copy(update={"floor_min_j": 0.1}), "minilm", {"minilm": CAL}).applied
    # no J recorded: not known to separate, not applied
    assert not floor_decision(rc, "minilm", {"minilm": {"floor": 0.3}}).applied


def test_a_configured_floor_is_applied_as_set_and_its_j_reported():
    rc = RetrievalConfig()  # the seed's 0.55 for nomic-embed-text
    weak = {"nomic-embed-text": {**CAL, "floor": 0.61, "configured": {"floor": 0.55, "youden_j": 0.12}}}
    d = floor_decision(rc, "nomic-embed-text", weak)
    assert (d.floor, d.applied, d.youden_j, d.warning) == (0.55, True, 0.12, "floor_cannot_separate")
    assert "applied as configured" in d.reason
    strong = {"nomic-embed-text": {**CAL, "configured": {"floor": 0.55, "youden_j": 0.4}}}
    assert floor_decision(rc, "nomic-embed-text", strong).warning is None
    unmeasured = floor_decision(rc, "nomic-embed-text", {})
    assert (unmeasured.floor, unmeasured.warning) == (0.55, "floor_not_measured")
    # a configured value other than the one measured has no J
    other = floor_decision(rc.model_copy(update={"score_floors": {"nomic-embed-text": 0.5}}), "nomic-embed-text",
                           strong)
    assert other.youden_j is None and other.warning == "floor_not_measured"


def test_resolve_floor_is_the_decisions_floor():
    rc = RetrievalConfig()
    for emb in ("minilm", "mpnet", "nomic-embed-text", "unknown"):
        assert resolve_floor(rc, emb) == floor_decision(rc, emb).floor


class _FixedRetriever:
    """Test double for control flow only: returns hand-set rankings, records the floor asked for."""

    def __init__(self, ranking):
        self.config = SimpleNamespace(mode="dense", query_transform="none")
        self.reranker = None
        self.ranking = ranking
        self.floors = []

    def retrieve(self, query, requester, top_k=None, floor=None):
        self.floors.append(floor)
        chunks = [RetrievedChunk(src, i, score, "") for i, (src, score) in enumerate(self.ranking[query])][:top_k]
        return RetrievalResult(query, chunks, floor)


def test_floor_effect_on_the_scored_set_by_hand():
    qs = [EvalQuestion("a", "qa", "x", ["o/gold.md"], [], "lookup"),
          EvalQuestion("b", "qb", "y", ["o/gold2.md"], [], "lookup"),
          EvalQuestion("c", "qc", "", [], [], "unanswerable")]
    ranking = {"qa": [("o/gold.md", 0.62), ("o/x.md", 0.50), ("o/y.md", 0.31), ("o/gold.md", 0.30)],
               "qb": [("o/z.md", 0.55), ("o/gold2.md", 0.33), ("o/x.md", 0.20)],
               "qc": [("o/x.md", 0.41), ("o/y.md", 0.36), ("o/z.md", 0.10)]}
    r = _FixedRetriever(ranking)
    d = floor_decision(RetrievalConfig(score_floors={}), "minilm", {"minilm": {**CAL, "floor": 0.35}})
    group, details = floor_effect(r, SimpleNamespace(questions=qs), d, k=3)
    assert set(r.floors) == {-1.0}  # measured without a floor
    # top 3: relevant 0.62, 0.33 (1 under 0.35); irrelevant 0.50, 0.31, 0.55, 0.20, 0.41, 0.36, 0.10 (3 under)
    assert (group["relevant_top_k"], group["relevant_below_floor"]) == (2, 1)
    assert (group["irrelevant_top_k"], group["irrelevant_below_floor"]) == (7, 3)
    assert group["relevant_below_floor_share"] == 0.5 and group["irrelevant_below_floor_share"] == pytest.approx(3 / 7, abs=1e-6)
    # J on the scored set, best relevant vs best irrelevant per answerable question at 0.35:
    # relevant 0.62, 0.33 -> TPR 1/2; irrelevant 0.50, 0.55 -> FPR 1  => J = -0.5
    assert group["floor_j_scored"] == -0.5 and group["floor_j_calibration"] == 0.15
    assert group["floor_applied"] == 0.0 and details["disjoint"] is True


def test_calibrating_on_the_scored_set_is_refused(capsys):
    from adiyan.cli import main

    assert main(["calibrate-floor", "--evalset", str(ROOT / "evalsets" / "adiyan_full"), "--quiet"]) == 2
    assert "flatters itself" in capsys.readouterr().err


def test_shipped_floors_are_calibrated_on_data_disjoint_from_the_scored_set():
    from adiyan.eval.evalset import load_evalset

    scored = load_evalset(ROOT / "evalsets" / "adiyan_full")
    floors = load_floors()
    assert {"minilm", "mpnet", "nomic-embed-text"} <= set(floors)
    for emb, f in floors.items():
        assert f["evalset"] != scored.name and not scored.content_hash().startswith(f["evalset_hash"]), emb
        for key in ("evalset_hash", "split", "source", "rule", "youden_j", "tpr", "fpr", "best_j"):
            assert f.get(key) not in (None, ""), (emb, key)
        assert min(f["n_relevant"], f["n_irrelevant"]) >= 100, emb
        assert f["youden_j"] == pytest.approx(f["tpr"] - f["fpr"], abs=2e-4), emb
    # the seed's configured 0.55 for nomic-embed-text is measured on the same data
    assert floors["nomic-embed-text"]["configured"]["floor"] == 0.55


def test_the_report_says_what_the_floor_removes_and_that_it_cannot_separate(tmp_path):
    """The run (metrics.json as run_eval writes it) -> report.html: a floor with J < floor_min_j
    is named at the top and the report says what it would remove on the scored set; not silent."""
    import json

    from adiyan.eval.reliability import warnings_for
    from adiyan.report import write_run_report

    qs = [EvalQuestion("a", "qa", "x", ["o/gold.md"], [], "lookup"),
          EvalQuestion("b", "qb", "y", ["o/gold2.md"], [], "lookup")]
    ranking = {"qa": [("o/gold.md", 0.62), ("o/x.md", 0.50)], "qb": [("o/z.md", 0.55), ("o/gold2.md", 0.33)]}
    d = floor_decision(RetrievalConfig(score_floors={}), "minilm", {"minilm": {**CAL, "floor": 0.35}})
    group, details = floor_effect(_FixedRetriever(ranking), SimpleNamespace(questions=qs), d, k=2)
    warnings = warnings_for(None, d, details, scored_hash="ff" * 32)
    assert [w["name"] for w in warnings] == ["floor_cannot_separate"]  # disjoint: no other floor warning
    run = tmp_path / "run-floor"
    run.mkdir()
    (run / "metrics.json").write_text(json.dumps({
        "run_id": "run-floor", "created_at": "2026-12-03T09:00:00+00:00", "config_hash": "ab" * 32,
        "models": {"embedder": {"id": "minilm"}}, "dataset": {"name": "adiyan_full", "hash": "ff" * 32},
        "metrics": {"floor": group}, "warnings": warnings,
        "floor": {**{k: v for k, v in d.as_dict().items() if k != "calibration"}, "calibration": d.calibration,
                  "effect": details}}), encoding="utf-8")
    html = write_run_report(run).read_text(encoding="utf-8")
    assert '<li id="warning-floor_cannot_separate"><b>floor_cannot_separate</b>' in html
    assert "NOT applied" in html and "0.150 &lt; retrieval.floor_min_j 0.2" in html
    # top 2 without a floor: relevant 0.62, 0.33 (1 under 0.35); irrelevant 0.50, 0.55 (none under)
    assert "the floor would remove (not applied) 1 of 2 relevant and 0 of 2 irrelevant chunks" in html
    assert "Calibrated on <b>xquad_en-test</b>" in html


def test_an_applied_floor_that_cannot_separate_on_the_scored_set_is_named():
    """mpnet on adiyan_full (issue: nDCG@10 0.565 against MiniLM's 0.888): its calibrated floor (J 0.2006
    on XQuAD, just over floor_min_j 0.2) is applied, MiniLM's (J 0.1857) is not, and on adiyan_full
    mpnet's floor drops 32 of 74 relevant top-4 chunks (J 0.075 there) without a word. Now named."""
    from adiyan.eval.reliability import warnings_for

    qs = [EvalQuestion("a", "qa", "x", ["o/gold.md"], [], "lookup"),
          EvalQuestion("b", "qb", "y", ["o/gold2.md"], [], "lookup")]
    cal = {"minilm": {**CAL, "floor": 0.35, "youden_j": 0.25}}
    d = floor_decision(RetrievalConfig(score_floors={}), "minilm", cal)
    assert d.applied and d.floor == 0.35
    # top 2 without a floor: relevant 0.62, 0.33 (1 under 0.35); irrelevant 0.50, 0.55 (none under).
    # Best relevant per question 0.62, 0.33 -> TPR 1/2; best irrelevant 0.50, 0.55 -> FPR 1: J = -0.5 < 0.2
    bad = {"qa": [("o/gold.md", 0.62), ("o/x.md", 0.50)], "qb": [("o/z.md", 0.55), ("o/gold2.md", 0.33)]}
    group, details = floor_effect(_FixedRetriever(bad), SimpleNamespace(questions=qs), d, k=2)
    assert group["floor_j_scored"] == -0.5
    warnings = warnings_for(None, d, details, scored_hash="ff" * 32)
    assert [w["name"] for w in warnings] == ["floor_cannot_separate_on_scored_set"]
    msg = warnings[0]["detail"]  # the figures; "message" says what it means and what to do
    assert "J -0.500 < 0.2 here (J 0.250 on xquad_en-test)" in msg
    assert "drops 1 of 2 relevant and 0 of 2 irrelevant top-2 chunks" in msg
    # relevant 0.62, 0.40 all kept (TPR 1); irrelevant 0.30, 0.20 all under 0.35 (FPR 0): J = 1, no warning
    good = {"qa": [("o/gold.md", 0.62), ("o/x.md", 0.30)], "qb": [("o/gold2.md", 0.40), ("o/z.md", 0.20)]}
    _, details = floor_effect(_FixedRetriever(good), SimpleNamespace(questions=qs), d, k=2)
    assert details["j_scored"] == 1.0 and warnings_for(None, d, details, scored_hash="ff" * 32) == []
    # a floor that is not applied (the same calibration under J 0.2) is the other warning's business only
    d_off = floor_decision(RetrievalConfig(score_floors={}), "minilm", {"minilm": {**CAL, "floor": 0.35}})
    _, details = floor_effect(_FixedRetriever(bad), SimpleNamespace(questions=qs), d_off, k=2)
    assert [w["name"] for w in warnings_for(None, d_off, details, scored_hash="ff" * 32)] == ["floor_cannot_separate"]
