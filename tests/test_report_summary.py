"""The summary a run report opens on: headline metrics with intervals, deltas against the previous
run on the same data and the baseline, failures worst first. Run folders are hand-made fixtures
(metrics.json / questions.jsonl written here), figures checked by hand."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from adiyan.report import write_run_report
from adiyan.report.summary import bootstrap_ci, failures, headline, ndcg_at, recall_at

DATA = {"name": "adiyan_basic", "hash": "ab" * 32, "n_questions": 5}


def _q(qid, hit, rr, ranked, gold, **extra):
    return {"id": qid, "question": f"question {qid}?", "kind": "lookup", "gold_sources": gold, "hit": hit,
            "reciprocal_rank": rr, "ranked_sources": ranked,
            "retrieved": [{"source": s, "chunk_index": 0, "score": 0.5, "text": f"CONTEXT of {qid} from {s}"}
                          for s in ranked[:2]], **extra}


QUESTIONS = [
    _q("q1", True, 1.0, ["a", "b"], ["a"], keyword_hit=True, abstained=False),
    _q("q2", False, 0.0, ["b", "c", "d", "a"], ["a"], keyword_hit=False, abstained=True),  # missed, declined
    _q("q3", True, 0.5, ["b", "g", "h"], ["g", "h"], keyword_hit=True, abstained=False),
    _q("q4", True, 1.0, ["a"], ["a"], keyword_hit=True, abstained=False, leaked_private=["bob/x.md#0"]),
    _q("q5", None, None, ["a"], [], keyword_hit=None, abstained=False),  # answered an unanswerable one
]


def _metrics(run_id, day, hit, leaked, dataset=DATA):
    return {"run_id": run_id, "created_at": f"2026-12-0{day}T10:00:00+00:00", "dataset": dataset,
            "models": {"embedder": {"id": "minilm"}, "llm": {"id": "smollm2"}},
            "metrics": {"retrieval": {"hit_rate@2": hit, "mrr@2": 0.625},
                        "answer": {"keyword_recall": 0.75, "abstain_rate_unanswerable": 0.0},
                        "privacy": {"private_chunks_leaked": leaked}}}


def _write(root: Path, run_id, m, questions=QUESTIONS):
    d = root / run_id
    d.mkdir(parents=True)
    (d / "metrics.json").write_text(json.dumps(m), encoding="utf-8")
    (d / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions), encoding="utf-8")
    return d


def test_ranking_metrics_by_hand():
    q3 = QUESTIONS[2]  # gold g, h at ranks 2 and 3
    assert recall_at(q3, 1) == 0.0 and recall_at(q3, 2) == 0.5 and recall_at(q3, 3) == 1.0
    ideal = 1 + 1 / math.log2(3)
    assert ndcg_at(q3, 10) == pytest.approx((1 / math.log2(3) + 1 / math.log2(4)) / ideal)
    assert ndcg_at(QUESTIONS[1], 10) == pytest.approx(1 / math.log2(5))  # a at rank 4
    assert recall_at(QUESTIONS[4], 10) is None  # unanswerable: not in the mean


def test_bootstrap_interval_is_seeded_and_brackets_the_mean():
    vals = [1.0] * 30 + [0.0] * 10
    lo, hi = bootstrap_ci(vals)
    assert (lo, hi) == bootstrap_ci(vals)  # reproducible page
    assert lo < 0.75 < hi and 0.55 < lo and hi < 0.9  # binomial SE ~0.068: about ±0.13
    assert bootstrap_ci([0.5] * 8) == (0.5, 0.5)


def test_headline_shows_an_interval_only_for_the_reported_figure():
    m = _metrics("r", 1, 0.75, 1)["metrics"]
    rows = {h["name"]: h for h in headline(m, QUESTIONS)}
    assert list(rows) == ["hit_rate@2", "mrr@2", "keyword_recall", "abstain_rate_unanswerable", "private_chunks_leaked"]
    assert rows["hit_rate@2"]["n"] == 4 and rows["hit_rate@2"]["ci"][0] <= 0.75 <= rows["hit_rate@2"]["ci"][1]
    assert rows["mrr@2"]["ci"] is not None  # (1 + 0 + 0.5 + 1) / 4 = 0.625
    assert rows["private_chunks_leaked"]["ci"] is None
    # a figure the rows do not reproduce gets no interval (it would be another number's)
    m["retrieval"]["hit_rate@2"] = 0.9
    row = headline(m, QUESTIONS)[0]
    assert row["ci"] is None and "do not reproduce" in row["why"]


def test_failures_worst_first_with_their_reasons():
    f = failures(QUESTIONS)
    assert [x["id"] for x in f] == ["q4", "q2", "q5"]  # leak, gold missed (+ declined, keywords), answered
    assert f[1]["reasons"] == ["gold missed", "declined an answerable question", "answer missed its keywords"]
    assert f[2]["reasons"] == ["answered an unanswerable question"]


def test_report_opens_on_summary_with_deltas_against_previous_and_baseline(tmp_path):
    root = tmp_path / "reports"
    _write(root, "r1-base", _metrics("r1-base", 1, 0.5, 0))
    _write(root, "r2-prev", _metrics("r2-prev", 2, 1.0, 0))
    _write(root, "r0-other-data", _metrics("r0-other-data", 3, 0.0, 0, {**DATA, "hash": "cd" * 32}))
    run = _write(root, "r3", _metrics("r3", 4, 0.75, 1))
    (root / "baselines.yaml").write_text("adiyan_basic: r1-base\n", encoding="utf-8")
    html = write_run_report(run).read_text(encoding="utf-8")
    assert html.index('<h2 id="summary">') < html.index('<h2 id="failures">') < html.index("<h2>Metrics</h2>")
    summary = html[html.index('<h2 id="summary">'):html.index('<h2 id="failures">')]
    # previous = the newest earlier run on the same data (not the later-dated run on other data)
    assert 'href="../r2-prev/report.html"' in summary and "invoke compare r2-prev r3" in summary
    assert "r0-other-data" not in summary
    row = re.search(r"<tr class=\"hl\"><th scope=\"row\">retrieval · hit_rate@2</th>.*?</tr>", summary).group(0)
    # the fixtures' runs answered the same questions the same way: the paired test shows no difference,
    # so the delta is grey whatever its sign (the metric values differ only because they were written so)
    assert ('<td class="num delta neutral" title="1.0 → 0.75: no difference shown (paired test, Holm p 1.000)">'
            '-0.25</td>') in row  # vs previous
    assert '<td class="num delta neutral" title="0.5 → 0.75: no difference shown' in row  # vs baseline
    leak = re.search(r"privacy · private_chunks_leaked</th>.*?</tr>", summary).group(0)
    assert 'delta worse" title="0 → 1">+1</td>' in leak  # a leak is a count that must be 0: always worse
    assert "3 failing question(s)" in summary and "1 private leak" in summary
    # the failure folds open to its retrieved context
    block = html[html.index('<details class="fail" id="fail-q2">'):]
    block = block[:block.index("</details>")]
    assert "CONTEXT of q2 from b" in block and "gold missed" in block
    # the first run here has nothing to compare with; a baseline on other data is named, not subtracted
    first = write_run_report(root / "r1-base").read_text(encoding="utf-8")
    assert "first run on this data here" in first and "this run is the baseline" in first
    assert "Δ previous" not in first
    (root / "baselines.yaml").write_text("adiyan_basic: r0-other-data\n", encoding="utf-8")
    html = write_run_report(run).read_text(encoding="utf-8")
    assert "the baseline ran on other data" in html and "Δ baseline" not in html


def test_a_question_judged_on_chunks_keeps_its_own_ndcg_and_the_headline_reproduces_it():
    """A question scoped to one document (generated evalsets' ``within``) is judged on chunks: its
    source ranking says rank 1 (nDCG 1.0), its chunk ranking rank 2 (1/log2(3) = 0.6309). The summary
    used to recompute from sources and call the run's own figure "not reproduced" (0.9062 vs 0.965)."""
    from adiyan.eval.scorers import RETRIEVAL, Rows, score

    rows = [{"id": "s1", "hit": True, "reciprocal_rank": 0.5, "ranked_sources": ["doc.md"], "gold_sources": ["doc.md"]},
            {"id": "s2", "hit": True, "reciprocal_rank": 1.0, "ranked_sources": ["doc.md"], "gold_sources": ["doc.md"]},
            {"id": "u", "hit": None, "reciprocal_rank": None, "ranked_sources": ["doc.md"], "gold_sources": []}]
    data = Rows(rows, run={"s1": {"doc.md#0": 1.0, "doc.md#2": 0.5}, "s2": {"doc.md#2": 1.0}},
                qrels={"s1": {"doc.md#2": 1}, "s2": {"doc.md#2": 1}})
    metrics = score([RETRIEVAL], data, 4)
    expected = (1 / math.log2(3) + 1.0) / 2
    assert metrics["retrieval"]["ndcg@10"] == pytest.approx(expected, abs=1e-6)
    assert rows[0]["retrieval"]["ndcg@10"] == pytest.approx(1 / math.log2(3)) and rows[2]["retrieval"]["ndcg@10"] is None
    assert ndcg_at(rows[0], 10) == 1.0  # what the source-level recomputation would have said
    row = {h["name"]: h for h in headline(metrics, rows)}["ndcg@10"]
    assert row["why"] == "" and row["n"] == 2 and row["ci"][0] <= metrics["retrieval"]["ndcg@10"] <= row["ci"][1]


def test_a_delta_is_coloured_only_when_its_paired_test_is_significant_after_holm(tmp_path):
    """40 questions: the previous run missed 30 that this run hits (paired randomization p < 0.001,
    significant after Holm over the tested metrics): hit rate's delta is green. Its keyword hits differ
    on one question only (p = 1.0): that delta is grey and says "no difference shown"."""
    root = tmp_path / "reports"
    def rows(hits, kws):
        return [_q(f"q{i}", h, 1.0 if h else 0.0, ["a"] if h else ["b"], ["a"], keyword_hit=k, abstained=False)
                for i, (h, k) in enumerate(zip(hits, kws))]
    prev_rows = rows([True] * 10 + [False] * 30, [True] * 20 + [False] * 20)
    mine = rows([True] * 40, [True] * 21 + [False] * 19)
    m_prev = _metrics("r1", 1, 0.25, 0)
    m_prev["metrics"]["answer"]["keyword_recall"] = 0.5
    _write(root, "r1", m_prev, prev_rows)
    m = _metrics("r2", 2, 1.0, 0)
    m["metrics"]["answer"]["keyword_recall"] = 0.525
    run = _write(root, "r2", m, mine)
    summary = write_run_report(run).read_text(encoding="utf-8").split('<h2 id="failures">')[0]
    hit = re.search(r"retrieval · hit_rate@2</th>.*?</tr>", summary).group(0)
    assert 'class="num delta better" title="0.25 → 1.0 (paired test, Holm p 0.000, n 40)">+0.75</td>' in hit
    kw = re.search(r"answer · keyword_recall</th>.*?</tr>", summary).group(0)
    assert 'class="num delta neutral" title="0.5 → 0.525: no difference shown (paired test, Holm p 1.000)"' in kw
