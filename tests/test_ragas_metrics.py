"""RAGAS 0.4 metrics: non-LLM values checked by hand against ragas' definitions; the
LLM-judged path wired through the judge, where every failure is counted and nothing is NaN."""

from __future__ import annotations

import json
import math
import os

import pytest

os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")

from adiyan.cache import CallCache  # noqa: E402
from adiyan.eval.judge import Judge, calibrate, evalset_calibration_pairs  # noqa: E402
from adiyan.eval.ragas_metrics import (  # noqa: E402
    LLM_METRICS,
    score_llm,
    score_non_llm,
    summarize,
    summary_lines,
    to_ragas_dataset,
)
from adiyan.models.base import Completion  # noqa: E402

A, B, C, D = ("adiyan-office/price_list.md", "adiyan-office/faq.md", "adiyan-office/refund_policy.md",
              "adiyan-office/itineraries.md")
GOLD = "The Julian Alps Weekend (TR-JUL-03) costs 450 euros per person."

HAND_ROWS = [
    # identical answer; retrieved [a, b, c, d] vs reference [b, d]
    {"id": "r1", "question": "Price?", "answer": GOLD, "reference": GOLD, "contexts": ["x"] * 4,
     "retrieved_ids": [A, B, C, D], "reference_ids": [B, D]},
    # one edit pattern away; duplicates in retrieved ids collapse (ragas uses sets)
    {"id": "r2", "question": "Word?", "answer": "kitten", "reference": "sitting", "contexts": ["x"] * 3,
     "retrieved_ids": [A, A, B], "reference_ids": [B, C]},
    # no answer, nothing retrieved, no reference ids: everything undefined
    {"id": "r3", "question": "?", "answer": None, "reference": "anything", "contexts": [],
     "retrieved_ids": [], "reference_ids": []},
    # unanswerable: something retrieved, no reference ids
    {"id": "r4", "question": "Founded?", "answer": "The documents do not say.",
     "reference": "The documents do not say.", "contexts": ["x"], "retrieved_ids": [A], "reference_ids": []},
]


def test_non_llm_metrics_match_hand_computed_values():
    s = score_non_llm(HAND_ROWS)
    # ragas IDBasedContextPrecision = |set(retrieved) & set(reference)| / |set(retrieved)|
    assert s["id_based_context_precision"] == [2 / 4, 1 / 2, None, 0.0]
    # ragas IDBasedContextRecall = |set(retrieved) & set(reference)| / |set(reference)|
    assert s["id_based_context_recall"] == [2 / 2, 1 / 2, None, None]
    assert s["exact_match"] == [1.0, 0.0, None, 1.0]
    assert s["rouge_score"][0] == 1.0 and s["rouge_score"][3] == 1.0  # ROUGE of identical strings
    # 1 - Levenshtein("kitten", "sitting") / max(len) = 1 - 3/7
    assert s["non_llm_string_similarity"][1] == pytest.approx(4 / 7)
    assert s["non_llm_string_similarity"][0] == 1.0
    assert s["rouge_score"][1] == 0.0 and s["rouge_score"][2] is None
    for vals in s.values():
        assert all(v is None or math.isfinite(v) for v in vals)  # never NaN
    summ = summarize(s)
    assert summ["id_based_context_recall"] == {"mean": 0.75, "n": 2, "n_undefined": 2}


def test_exact_match_is_byte_exact():
    rows = [{"id": "a", "answer": "450 euros", "reference": "450 euros"},
            {"id": "b", "answer": "450 Euros", "reference": "450 euros"},
            {"id": "c", "answer": "450 euros ", "reference": "450 euros"}]
    assert score_non_llm(rows)["exact_match"] == [1.0, 0.0, 0.0]


def test_runner_rows_map_to_a_ragas_dataset():
    runner_row = {"id": "q01", "question": "How much?", "answer": "450 euros.", "gold_answer": GOLD,
                  "gold_sources": [A],
                  "retrieved": [{"source": A, "chunk_index": 3, "score": 0.8, "text": "costs 450 euros"},
                                {"source": B, "chunk_index": 0, "score": 0.5, "text": "suitcase 20 kg"}]}
    ds = to_ragas_dataset([runner_row, HAND_ROWS[0]])
    assert len(ds) == 2
    s = ds[0]
    assert (s.user_input, s.response, s.reference) == ("How much?", "450 euros.", GOLD)
    assert s.retrieved_contexts == ["costs 450 euros", "suitcase 20 kg"]
    assert s.retrieved_context_ids == [A, B] and s.reference_context_ids == [A]
    assert to_ragas_dataset([runner_row], id_field="chunk")[0].retrieved_context_ids == [f"{A}#3", f"{B}#0"]
    assert score_non_llm([runner_row])["id_based_context_precision"] == [0.5]


# ---------------------------------------------------------------- the LLM-judged path

def _input(prompt: str) -> dict:
    """The JSON input block every ragas 0.4 collections prompt ends with."""
    return json.loads(prompt.rsplit("input: ", 1)[1].rsplit("\nOutput:", 1)[0])


class RuleJudgeLLM:
    """Test double for control flow only (not a judge): answers each ragas prompt by a fixed
    rule so the wiring can be checked against hand-computed values. Statements are split on
    '. '; a statement or context is 'supported' when it contains '450'. Replies "oops" (not
    JSON) to statement extraction for answers containing 'FAIL'."""

    id = "rule-judge"
    context_size = 8192

    def __init__(self):
        self.calls = 0

    def chat(self, messages, *, max_tokens=None, temperature=None):
        self.calls += 1
        p = messages[-1]["content"]
        data = _input(p)
        if p.startswith("Given a question and an answer, analyze"):
            text = data.get("answer") or data.get("text")
            if "FAIL" in text:
                return Completion(text="oops")
            out = {"statements": [s.strip() for s in text.split(". ") if s.strip()]}
        elif p.startswith("Your task is to judge the faithfulness"):
            out = {"statements": [{"statement": s, "reason": "-", "verdict": int("450" in s and "450" in data["context"])}
                                  for s in data["statements"]]}
        elif p.startswith("Generate a question"):
            out = {"question": "How much does the Julian Alps Weekend cost?", "noncommittal": 0}
        elif p.startswith("Given question, answer and context verify"):
            out = {"reason": "-", "verdict": int("450" in data["context"])}
        elif p.startswith("Given a context and an answer, analyze each statement"):
            out = {"classifications": [{"statement": s, "reason": "-", "attributed": int("450" in s)}
                                       for s in data["answer"].split(". ")]}
        else:
            raise AssertionError("unexpected prompt: " + p[:80])
        return Completion(text="```json\n" + json.dumps(out) + "\n```")


LLM_ROWS = [
    {"id": "r1", "question": "How much does the Julian Alps Weekend cost?",
     "answer": "The weekend costs 450 euros. It is fun.",
     "contexts": ["The Julian Alps Weekend costs 450 euros per person.", "Bicycles need oil."],
     "retrieved_ids": [A, B], "reference": "It costs 450 euros. Breakfast is included", "reference_ids": [A]},
    {"id": "r2", "question": "How much does the Julian Alps Weekend cost?",
     "answer": "FAIL. The weekend costs 450 euros.",
     "contexts": ["Bicycles need oil.", "The Julian Alps Weekend costs 450 euros per person."],
     "retrieved_ids": [B, A], "reference": "It costs 450 euros. Breakfast is included", "reference_ids": [A]},
    {"id": "r3", "question": "How much does the Julian Alps Weekend cost?", "answer": None,
     "contexts": ["Bicycles need oil."], "retrieved_ids": [B], "reference": "It costs 450 euros.",
     "reference_ids": [A]},
]


def test_llm_metrics_through_the_judge_hand_checked_and_accounted(tmp_path, minilm):
    llm = RuleJudgeLLM()
    judge = Judge(llm, CallCache(tmp_path / "calls.sqlite", "judge"), timeout_s=30, max_retries=0)
    per_row, summary = score_llm(LLM_ROWS, judge, minilm, LLM_METRICS)
    r1, r2, r3 = per_row
    # faithfulness: statements ["...450 euros", "It is fun"], one supported -> 1/2
    assert r1["scores"]["faithfulness"] == 0.5
    # context precision (average precision over verdicts): [1, 0] -> 1, [0, 1] -> 1/2
    # (ragas adds 1e-10 to the denominator, hence approx)
    assert r1["scores"]["llm_context_precision"] == pytest.approx(1.0)
    assert r2["scores"]["llm_context_precision"] == pytest.approx(0.5)
    # context recall: reference statements ["It costs 450 euros", "Breakfast is included"] -> 1/2
    assert r1["scores"]["llm_context_recall"] == 0.5 and r2["scores"]["llm_context_recall"] == 0.5
    # answer relevancy: the generated question equals the user question -> cosine 1
    assert r1["scores"]["answer_relevancy"] == pytest.approx(1.0, abs=1e-6)
    # r2's answer makes statement extraction fail: None and counted, never a number
    assert r2["status"]["faithfulness"] == "judge_failed" and r2["scores"]["faithfulness"] is None
    assert r2["status"]["noise_sensitivity"] == "judge_failed"
    assert "invalid_json" in r2["errors"]["faithfulness"]
    # r3 has no answer: answer-based metrics are skipped, reference-based ones still scored
    assert r3["status"]["faithfulness"] == "skipped" and r3["scores"]["faithfulness"] is None
    assert r3["status"]["llm_context_recall"] == "ok" and r3["scores"]["llm_context_recall"] == 1.0
    assert r3["status"]["llm_context_precision"] == "ok" and r3["scores"]["llm_context_precision"] < 1e-6

    f = summary["metrics"]["faithfulness"]
    assert (f["rows"], f["ok"], f["failed"], f["skipped"], f["undefined"]) == (3, 1, 1, 1, 0)
    assert f["mean"] == 0.5
    assert f["judge_calls"] == 3 and f["judge_calls_failed"] == 1  # r1: 2 calls, r2: 1 failed call
    _check_accounting(per_row, summary, judge)
    assert [(x["metric"], x["sample_id"], x["status"]) for x in summary["failures"]] == [
        ("faithfulness", "r2", "invalid_json"), ("noise_sensitivity", "r2", "invalid_json")]
    assert any("[UNCALIBRATED]" in line for line in summary_lines(summary))

    # a second run: nothing is asked again. The successes come from the cache, and so do r2's two
    # invalid-JSON failures, which a temperature-0 judge would repeat word for word (Judge's
    # REPLAYABLE_STATUSES); they are still counted and listed as failures, marked cached
    calls = llm.calls
    judge2 = Judge(RuleJudgeLLM(), CallCache(tmp_path / "calls.sqlite", "judge"), timeout_s=30, max_retries=0)
    per_row2, summary2 = score_llm(LLM_ROWS, judge2, minilm, LLM_METRICS)
    assert judge2.llm.calls == 0 and llm.calls == calls
    assert [r["scores"] for r in per_row2] == [r["scores"] for r in per_row]
    f2 = summary2["metrics"]["faithfulness"]
    assert f2["judge_calls_cached"] == 3 and f2["judge_calls_failed"] == 1  # r1's two + r2's replayed failure
    assert [(x["metric"], x["sample_id"], x["status"]) for x in summary2["failures"]] == [
        ("faithfulness", "r2", "invalid_json"), ("noise_sensitivity", "r2", "invalid_json")]


def test_sampling_and_calibration_flags(tmp_path, minilm):
    judge = Judge(RuleJudgeLLM(), CallCache(tmp_path / "calls.sqlite", "judge"), timeout_s=30)
    per_row, summary = score_llm(LLM_ROWS, judge, minilm, ["faithfulness", "response_relevancy"], sample=2, seed=1)
    assert sum(r["sampled"] for r in per_row) == 2 and summary["sample"]["n_scored"] == 2
    assert set(summary["metrics"]) == {"faithfulness", "answer_relevancy"}
    unsampled = [r for r in per_row if not r["sampled"]][0]
    assert set(unsampled["status"].values()) == {"not_sampled"}
    assert summary["metrics"]["faithfulness"]["rows"] == 2
    with pytest.raises(ValueError):
        score_llm(LLM_ROWS, judge, minilm, ["bleu"])


def _check_accounting(per_row, summary, judge):
    """Rows and judge calls add up for every metric, and no value is NaN."""
    for name, m in summary["metrics"].items():
        assert m["ok"] + m["failed"] + m["undefined"] + m["skipped"] == m["rows"], name
        assert m["judge_calls_ok"] + m["judge_calls_failed"] == m["judge_calls"], name
        assert sum(m["judge_calls_by_status"].values()) == m["judge_calls"], name
        assert sum(r["judge_calls"][name] for r in per_row) == m["judge_calls"], name
        assert m["judge_calls_failed"] == sum(1 for x in summary["failures"] if x["metric"] == name), name
        judge_failed_rows = sum(1 for r in per_row if r["status"][name] == "judge_failed")
        assert judge_failed_rows <= m["judge_calls_failed"], name  # a failed row made >= 1 failed call
        for r in per_row:
            v = r["scores"][name]
            if r["status"][name] == "ok":
                assert isinstance(v, float) and math.isfinite(v), (name, r)
            else:
                assert v is None, (name, r)
    s = judge.stats
    assert s.ok + s.failed == s.calls


@pytest.mark.slow
def test_llm_path_with_the_embedded_smollm2_accounts_for_every_call(tmp_path, smollm2, minilm):
    """smollm2 is not a capable judge (offline.md: chance level): this checks the accounting
    only. Two real evalset rows, all five LLM-judged metrics, plus a calibration."""
    from adiyan.eval.evalset import load_evalset
    from tests.conftest import ROOT

    rows = [
        {"id": "q01", "question": "How much does the Julian Alps Weekend cost per person?",
         "answer": "The Julian Alps Weekend costs 450 euros per person.",
         "contexts": ["The Julian Alps Weekend (TR-JUL-03) costs 450 euros per person. The single supplement "
                      "is 95 euros."],
         "retrieved_ids": [A], "reference": GOLD, "reference_ids": [A]},
        {"id": "q03", "question": "What are the office hours on Saturday?",
         "answer": "On Saturday the office is open from 09:00 to 13:00.",
         "contexts": ["Office hours: Monday to Friday 08:30 to 18:00. On Saturday the office is open from "
                      "09:00 to 13:00. The office is closed on Sundays."],
         "retrieved_ids": ["adiyan-office/staff_handbook.md"],
         "reference": "On Saturday the office is open from 09:00 to 13:00.",
         "reference_ids": ["adiyan-office/staff_handbook.md"]},
    ]
    # generous deadline: 2 shared cores make the tiny model slow; a timeout would still be counted
    judge = Judge(smollm2, CallCache(tmp_path / "calls.sqlite", "judge"), timeout_s=600, max_retries=0,
                  max_tokens=96)
    es = load_evalset(ROOT / "evalsets" / "adiyan_basic")
    cal = calibrate(judge, evalset_calibration_pairs(es, seed=0)[:2])  # q01: gold and a corrupted fact
    assert cal.n == 2 and cal.agreement is not None
    assert sum(v["agree"] + v["disagree"] + v["failed"] for v in cal.per_label.values()) == 2
    per_row, summary = score_llm(rows, judge, minilm, LLM_METRICS, calibration=cal)
    _check_accounting(per_row, summary, judge)
    for name, m in summary["metrics"].items():
        assert m["rows"] == 2 and m["skipped"] == 0
        assert m["judge_calls"] >= 2  # at least one judgement per row
        assert m["judge_agreement"] == cal.agreement and m["reliable"] == cal.reliable
    print("\n".join(summary_lines(summary)))
    print("calibration:", cal.agreement, cal.per_label, "judge:", judge.stats.as_dict())
