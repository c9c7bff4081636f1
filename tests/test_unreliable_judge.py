"""An unreliable judge's metrics look unreliable wherever they appear: struck with a badge in
report.html, in reports/index.html and on sweep pages, marked in the CLI summary, never "best",
left out of paired tests; with a reliable judge they are plain numbers with their sample size.
And invoke eval wires it: the calibration decides the sample, the run says so by name.

The run folders here are hand-made fixtures (metrics.json written by the test) except in the
last test, which runs ``run_eval`` with judge doubles (control flow: a coin, an oracle).
"""

from __future__ import annotations

import json
import random
import re

import pandas as pd
import pytest

from adiyan import sweeps as S
from adiyan import metrics as M
from adiyan.eval.judge import Judge, calibration_prompt
from adiyan.eval.reliability import group_line
from adiyan.eval.runner import run_eval, summary_lines
from adiyan.models.base import Completion
from adiyan.report import write_run_report
from adiyan.report.index import write_index
from adiyan.sweeps import gather as G
from adiyan.sweeps.run import write_outputs

from tests.conftest import ROOT
from tests.test_sweep import _finished_sweep, _tiny_spec

UNRELIABLE_WARNING = {"name": "judge_unreliable", "message": "judge agreement 0.55 on 40 labelled pairs ..."}


def _ragas_llm(reliable: bool, relevancy: float, n: int) -> dict:
    return {"judge_agreement": 0.975 if reliable else 0.55, "judge_agreement_ci_low": 0.871 if reliable else 0.398,
            "judge_agreement_ci_high": 0.996 if reliable else 0.694, "judge_calibration_pairs": 40,
            "judge_reliable": float(reliable), "answer_relevancy": relevancy, "answer_relevancy.n": n,
            "answer_relevancy.failed": 0}


def _run(root, run_id, day, reliable, relevancy, n, hit=0.9):
    d = root / run_id
    d.mkdir(parents=True)
    m = {"run_id": run_id, "created_at": f"2026-12-0{day}T09:00:00+00:00", "config_hash": "ab" * 32,
         "models": {"embedder": {"id": "minilm"}, "llm": {"id": "smollm2"}, "judge": "smollm2"},
         "dataset": {"name": "adiyan_full", "hash": "cd" * 32, "n_questions": 48, "n_chunks": 90},
         "metrics": {"retrieval": {"hit_rate@4": hit}, "ragas_llm": _ragas_llm(reliable, relevancy, n)},
         "warnings": [] if reliable else [UNRELIABLE_WARNING],
         "timings": {"total_s": 1.0, "ingest_s": 0.1, "generate_s": 0.1}, "cache": {"embeddings": {"hits": 0, "misses": 0},
                                                                                  "answers": {"hits": 0, "misses": 0}}}
    (d / "metrics.json").write_text(json.dumps(m), encoding="utf-8")
    return d


@pytest.fixture
def reports(tmp_path):
    root = tmp_path / "reports"
    _run(root, "run-unreliable", 3, False, 0.9375, 2)
    _run(root, "run-good-a", 2, True, 0.6, 20, hit=0.95)
    _run(root, "run-good-b", 1, True, 0.7, 20)
    return root


def test_report_html_strikes_an_unreliable_judges_metrics(reports):
    html = write_run_report(reports / "run-unreliable").read_text(encoding="utf-8")
    row = re.search(r"<tr><td>answer_relevancy[^\n]*</tr>", html).group(0)
    assert '<span class="badge">unreliable judge</span>' in row
    assert '<span class="unreliable">0.9375</span> (n=2)' in row
    assert '<td class="num">0.9375</td>' not in html  # never a plain number
    assert ".unreliable{color:#999;text-decoration:line-through}" in html
    # the agreement itself is not judged: a plain number; the warning is named at the top
    assert '<td>judge_agreement</td><td class="num">0.55</td>' in html
    assert '<li id="warning-judge_unreliable"><b>judge_unreliable</b>' in html
    assert html.index("Warnings (1)") < html.index("<h2>Metrics</h2>")

    good = write_run_report(reports / "run-good-a").read_text(encoding="utf-8")
    assert '<tr><td>answer_relevancy</td><td class="num">0.6 (n=20)</td></tr>' in good
    assert "unreliable judge" not in good and "Warnings" not in good


def test_index_strikes_them_and_never_marks_them_best(reports):
    html = write_index(reports).read_text(encoding="utf-8")
    rows = {rid: html[html.index(f">{rid}</a>"):html.index("</tr>", html.index(f">{rid}</a>"))]
            for rid in ("run-unreliable", "run-good-a", "run-good-b")}
    # 0.9375 is the highest answer_relevancy, but its judge is unreliable: struck, badged, not best
    assert '<span class="unreliable">0.9375 (n=2)</span> <span class="badge">unreliable judge</span>' in \
        rows["run-unreliable"]
    assert 'best">0.9375' not in html and 'best"><span class="unreliable">' not in html
    assert '<td class="num best">0.7 (n=20)</td>' in rows["run-good-b"]  # the best reliable value
    assert '<td class="num">0.6 (n=20)</td>' in rows["run-good-a"]
    assert '<td class="num best">0.95</td>' in rows["run-good-a"]  # unjudged metrics as before
    assert 'title="judge agreement 0.55' in rows["run-unreliable"]  # the named warning
    assert "answer_relevancy.n" not in html  # the sample size sits in the mean's cell


def test_cli_summary_marks_them_and_prints_n(reports):
    lines = summary_lines(reports / "run-unreliable")
    text = "\n".join(lines)
    assert "answer_relevancy=[UNRELIABLE 0.938, n=2]" in text
    assert "answer_relevancy=0.938" not in text
    assert "judge_agreement=0.550 [95% CI 0.398-0.694, 40 pairs]" in text
    assert lines[2].startswith("  WARNING judge_unreliable: judge agreement 0.55")
    assert lines[2].endswith("(docs/reference/warnings.md)")  # a warning written without its section: the page
    good = "\n".join(summary_lines(reports / "run-good-a"))
    assert "answer_relevancy=0.600 (n=20)" in good and "UNRELIABLE" not in good and "WARNING" not in good


def test_summary_line_of_an_unregistered_metric_is_plain():
    m = {"metrics": {"ragas_llm": {"judge_reliable": 0.0}}}
    assert group_line(m, "answer", {"keyword_recall": 0.5}) == "  answer     keyword_recall=0.500"


def test_sweep_page_strikes_them_and_picks_best_among_reliable_judges(tmp_path):
    spec = _tiny_spec(tmp_path, {"x": [1, 2, 3]})
    data = {x: {"metrics.json": {"metrics": {"ragas_llm": _ragas_llm(rel, val, n)}, "timings": {"total_s": 1.0 * x}}}
            for x, (rel, val, n) in {1: (False, 0.95, 2), 2: (True, 0.6, 20), 3: (True, 0.7, 20)}.items()}
    points, out = _finished_sweep(tmp_path, spec, data)
    _, index = write_outputs(spec, points, out)
    html = index.read_text()
    best = G.best_points(G.gather(spec, points, out), ["ragas_llm.answer_relevancy"])
    assert best["ragas_llm.answer_relevancy"]["value"] == 0.7 and best["ragas_llm.answer_relevancy"]["n_ok"] == 2
    assert '<span class="unreliable">0.95</span> <span class="badge">unreliable judge</span>' in html
    assert 'class="num best">0.95<' not in html  # struck, never best (and with no per-question test, none is)
    part = html.split("<h2>Best point per metric</h2>", 1)[1].split("</table>", 1)[0]
    assert ("<td>ragas_llm.answer_relevancy</td><td>higher is better</td><td class=\"num\">0.7</td><td>x=3</td>"
            "<td>no per-question scores to test: not ranked</td>") in part


def test_paired_tests_leave_out_an_unreliable_judges_per_question_scores(tmp_path):
    M.register(M.Metric("judged_score_for_test", "sweep", M.HIGHER, 0.0, 1.0, judged=True))
    spec = _tiny_spec(tmp_path, {"x": [1, 2, 3]})
    points = S.expand(spec)
    runs = pd.DataFrame([{"point_id": p.id, "label": p.label, "status": "ok",
                          G.JUDGE_RELIABLE: 1.0 if p.params["x"] != 3 else 0.0} for p in points])
    rng = random.Random(0)
    pq = pd.DataFrame([{"point_id": p.id, "qid": f"q{i}", "metric": m, "value": float(rng.random() < 0.3 * p.params["x"])}
                       for p in points for i in range(12) for m in ("judged_score_for_test", "hit")])
    sig = G.significance(spec, points, G.Gathered(runs, pq, ["x"], []))
    base = sig["baseline"]
    tested = {pid for pid in sig["metrics"]["judged_score_for_test"]}
    assert tested == {points[1].id} != {base}  # x=2 (reliable) against the baseline x=1; x=3 left out
    assert sig["excluded"]["judged_score_for_test"] == [
        {"point": points[2].id, "why": "LLM-judged by a judge that is not calibrated reliable"}]
    assert set(sig["metrics"]["hit"]) == {points[1].id, points[2].id}  # unjudged scores are all tested


# ---------------------------------------------------------------------------------- invoke eval


class CoinJudgeLLM:
    """Test double (control flow): answers every judge prompt with a seeded coin."""

    id = "coin-judge"

    def __init__(self):
        self.rng = random.Random(7)

    def chat(self, messages, **kw):
        return Completion(text=json.dumps({"supported": self.rng.random() < 0.5}))


class OracleJudgeLLM:
    """Test double (control flow): knows the label of every calibration pair the run makes."""

    id = "oracle-judge"
    truth: dict = {}

    def chat(self, messages, **kw):
        prompt = messages[-1]["content"]
        return Completion(text=json.dumps({"supported": self.truth.get(prompt, True)}))


@pytest.mark.slow
@pytest.mark.parametrize("judge_llm,reliable", [(CoinJudgeLLM, False), (OracleJudgeLLM, True)])
def test_invoke_eval_calibrates_on_40_pairs_and_sizes_the_judged_sample(make_settings, monkeypatch, tmp_path,
                                                                        judge_llm, reliable):
    import adiyan.eval.scorers as R  # where invoke eval's judged scorer finds its judge and pairs
    from adiyan.cache import CallCache

    real_pairs = R.evalset_calibration_pairs

    def spy_pairs(*a, **kw):  # observation only: the oracle learns the labels of the pairs made
        pairs = real_pairs(*a, **kw)
        OracleJudgeLLM.truth = {calibration_prompt(p): p.label == "correct" for p in pairs}
        return pairs

    monkeypatch.setattr(R, "evalset_calibration_pairs", spy_pairs)
    monkeypatch.setattr(R, "judge_from_settings", lambda s: Judge(judge_llm(), CallCache(tmp_path / "j.sqlite", "judge"),
                                                                  timeout_s=None, max_retries=0))
    # the early stop (tests/test_calibration_early_stop.py) would end the coin's calibration once
    # 0.8 is out of reach: off here, so every label's 40-pair breakdown below is made
    s = make_settings(**{"eval.evalset": str(ROOT / "evalsets" / "adiyan_basic"), "eval.generate": False,
                         "eval.incidents": False, "eval.judge_metrics": ["faithfulness"],
                         "eval.judge_calibration_early_stop": False})
    run = run_eval(s, progress=False, run_id="r")
    m = json.loads((run / "metrics.json").read_text())
    judge = json.loads((run / "judge.json").read_text())
    g = m["metrics"]["ragas_llm"]
    assert g["judge_calibration_pairs"] == 40 and judge["calibration"]["n"] == 40
    assert set(judge["calibration"]["per_label"]) == {"correct", "corrupted_fact", "unsupported_addition",
                                                      "wrong_source"}
    assert all(v["n"] > 0 for v in judge["calibration"]["per_label"].values())
    assert g["judge_reliable"] == float(reliable)
    assert g["judge_agreement_ci_low"] == judge["calibration"]["ci95_low"] < g["judge_agreement"]
    # a reliable judge scores eval.judge_sample (20) questions; an unreliable one is not asked again
    # (issue 39: its metrics would be struck), the run names it and records no judged metric. Every
    # judged mean carries its n (0 here: no answers were generated, so faithfulness skipped every row)
    assert judge["summary"]["sample"]["n_scored"] == (14 if reliable else 0)  # adiyan_basic: 14 answerable
    if reliable:
        assert g["faithfulness.n"] == 0 and judge["summary"]["metrics"]["faithfulness"]["skipped"] == 14
    else:
        assert "faithfulness" not in g and judge["skipped"] is True
        assert m["timings"]["judge_metrics_s"] == 0.0
    names = [w["name"] for w in m["warnings"]]
    assert ("judge_unreliable" in names) is (not reliable)
    assert reliable or "not computed" in next(w["message"] for w in m["warnings"] if w["name"] == "judge_unreliable")
    assert m["timings"]["judge_calibration_s"] > 0
    assert M.check_metrics(m["metrics"]) == []  # every metric written is registered
    # the floor of minilm (no floor configured here): reported on the scored set all the same
    assert m["metrics"]["floor"]["relevant_top_k"] + m["metrics"]["floor"]["irrelevant_top_k"] == 16 * 4
