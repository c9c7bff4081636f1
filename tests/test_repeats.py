"""eval.repeats: the spread of every metric split into the system's part (answers differ between
repeats) and the judge's part (verdicts differ on the same answer), recovered from a scripted
generator and a scripted judge whose variances are known; exact zeros where nothing varies; the
judge's cache key includes a judging's seed; ``invoke compare`` flags a difference inside the
repeat spread and not one outside it; settings that cannot act are refused by name.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from adiyan.cache import CallCache
from adiyan.config import load_settings
from adiyan.eval import repeats as R
from adiyan.eval.compare import compare_runs, summary_lines
from adiyan.eval.harness import refuse_conversation_settings
from adiyan.eval.judge import Judge, SupportVerdict
from adiyan.models.base import Completion
from adiyan.retrieval.pipeline import UnsupportedSetting

K = 4
A_GOOD = 0.5  # the scripted generator's chance of a good answer, independently per repeat
P_FLIP = 0.2  # the scripted judge's chance of flipping its verdict on an answer, per judging
# by hand: a score y = T xor F, T ~ Bernoulli(A_GOOD) per repeat (the answer), F ~ Bernoulli(P_FLIP)
# per judging. Judge variance = Var(y | T) = p(1-p) = 0.16; system variance = Var(E[y | T]) =
# (1-2p)^2 a(1-a) = 0.36 * 0.25 = 0.09. Keyword hit = T: system a(1-a) = 0.25, no judge.
JUDGE_VAR = P_FLIP * (1 - P_FLIP)
SYSTEM_VAR_JUDGED = (1 - 2 * P_FLIP) ** 2 * A_GOOD * (1 - A_GOOD)
SYSTEM_VAR_KEYWORD = A_GOOD * (1 - A_GOOD)
N_QUESTIONS, N_REPEATS, N_JUDGINGS = 1500, 3, 2
TOL = 0.02  # about 3 standard errors of each estimate at 1,500 questions (checked over 20 seeds: largest error 0.011)


def scripted_generator(n_questions: int, a: float):
    """Test double for the answer stage (control flow only, no model): repeat ``i`` under ``seed``
    answers each question well with probability ``a`` (seeded); retrieval is fixed (every question
    hits at rank 1), as the real pipeline's is."""

    def answer(i: int, seed: int) -> list[dict]:
        rng = np.random.default_rng(1000 + seed)
        good = rng.random(n_questions) < a
        return [{"id": f"q{n:04d}", "hit": True, "reciprocal_rank": 1.0, "answer": "good" if g else "bad",
                 "keyword_hit": bool(g), "ragas": {"rouge_score": 1.0 if g else 0.25}} for n, g in enumerate(good)]

    return answer


def scripted_judge(p: float, *, sample: int | None = None):
    """Test double for the judge (control flow only, no model): the verdict is the answer's
    fixed truth (1 for a good answer, 0 for a bad one) flipped with probability ``p``, drawn from
    the judging's seed; ``sample`` questions only, as the real judge's sample (None = all)."""

    def judge(i: int, j: int, seed: int, rows: list[dict]) -> list[dict]:
        rng = np.random.default_rng(50_000 + seed)
        flips = rng.random(len(rows)) < p
        return [{"id": r["id"], "sampled": sample is None or n < sample,
                 "scores": {"faithfulness": float((r["answer"] == "good") ^ bool(f))}}
                for n, (r, f) in enumerate(zip(rows, flips))]

    return judge


@pytest.fixture(scope="module")
def split():
    rep = R.collect(N_REPEATS, N_JUDGINGS, 7, K, scripted_generator(N_QUESTIONS, A_GOOD), scripted_judge(P_FLIP))
    return rep, rep.record(seed=0, n_boot=500)


def test_the_split_recovers_the_scripted_judge_and_generator(split):
    rep, block = split
    assert block["answer_seeds"] == [7, 8, 9]
    assert block["judge_seeds"] == [[7, 8], [9, 10], [11, 12]]  # each judging its own seed
    f = block["metrics"]["ragas_llm/faithfulness"]
    assert f["judged"] and f["n_questions"] == N_QUESTIONS and f["judgings"] == N_JUDGINGS
    assert f["judge_var"] == pytest.approx(JUDGE_VAR, abs=TOL)
    assert f["system_var"] == pytest.approx(SYSTEM_VAR_JUDGED, abs=TOL)
    assert f["judge_var_ci95"][0] <= JUDGE_VAR <= f["judge_var_ci95"][1]
    assert f["system_var_ci95"][0] <= SYSTEM_VAR_JUDGED <= f["system_var_ci95"][1]
    assert f["sd_run"] == pytest.approx(math.sqrt((f["judge_var"] + f["system_var"]) / N_QUESTIONS))
    kw = block["metrics"]["answer/keyword_recall"]
    assert not kw["judged"] and kw["judge_var"] == 0.0
    assert kw["system_var"] == pytest.approx(SYSTEM_VAR_KEYWORD, abs=TOL)
    rouge = block["metrics"]["ragas/rouge_score"]  # 1 or 0.25: a(1-a) * 0.75^2
    assert rouge["system_var"] == pytest.approx(SYSTEM_VAR_KEYWORD * 0.75 ** 2, abs=TOL)


def test_deterministic_retrieval_has_exactly_zero_spread(split):
    _, block = split
    for name in (f"retrieval/hit_rate@{K}", f"retrieval/mrr@{K}"):
        d = block["metrics"][name]
        assert d["system_var"] == 0.0 and d["judge_var"] == 0.0 and d["sd_run"] == 0.0
        assert d["system_var_ci95"] == [0.0, 0.0] and d["repeat_means"] == [1.0, 1.0, 1.0]


def test_a_retrieval_that_changes_between_repeats_is_not_zero():
    """The zero of deterministic retrieval is a check that can fail: one question whose hit
    differs in one repeat gives a positive system variance (by hand: var([1,1,0]) = 1/3 over 4
    questions = 1/12)."""
    vals = {f"q{n}": [[1.0], [1.0], [1.0]] for n in range(3)}
    vals["q3"] = [[1.0], [1.0], [0.0]]
    d = R.decompose(vals, judged=False, n_boot=200)
    assert d["system_var"] == pytest.approx(1 / 12) and d["judge_var"] == 0.0


def test_only_judge_noise_gives_no_system_part_and_constants_give_exact_zeros():
    rep = R.collect(3, 2, 0, K, scripted_generator(1200, 1.0), scripted_judge(P_FLIP))
    f = rep.record(n_boot=300)["metrics"]["ragas_llm/faithfulness"]
    assert f["judge_var"] == pytest.approx(JUDGE_VAR, abs=TOL)
    assert f["system_var"] < TOL  # true value 0: floored, small
    assert rep.record(n_boot=300)["metrics"]["answer/keyword_recall"]["system_var"] == 0.0  # always good
    const = R.decompose({"a": [[0.1, 0.1], [0.1, 0.1], [0.1, 0.1]], "b": [[0.7, 0.7]] * 3}, judged=True, n_boot=100)
    assert (const["system_var"], const["judge_var"], const["sd_run"]) == (0.0, 0.0, 0.0)
    assert const["system_var_ci95"] == [0.0, 0.0] and const["judge_var_ci95"] == [0.0, 0.0]
    assert const["repeat_means"] == [0.4, 0.4, 0.4] or all(abs(x - 0.4) < 1e-12 for x in const["repeat_means"])


def test_by_hand_small_case_and_judged_once_is_not_separable():
    # one question, 2 repeats x 2 judgings: [[1,0],[1,1]] -> within: mean(0.5, 0) = 0.25;
    # repeat means 0.5, 1.0 -> between 0.125; system = max(0, 0.125 - 0.25/2) = 0
    d = R.decompose({"q": [[1.0, 0.0], [1.0, 1.0]]}, judged=True, n_boot=50)
    assert d["judge_var"] == pytest.approx(0.25) and d["system_var"] == 0.0
    # [[1,1],[0,0]]: within 0, between 0.5 -> all system
    d = R.decompose({"q": [[1.0, 1.0], [0.0, 0.0]]}, judged=True, n_boot=50)
    assert d["judge_var"] == 0.0 and d["system_var"] == pytest.approx(0.5)
    once = R.decompose({"q": [[1.0], [0.0]], "r": [[1.0], [1.0]]}, judged=True, n_boot=50)
    assert once["judge_var"] is None and once["system_var"] == pytest.approx(0.25)  # system and judge together


def test_incomplete_questions_drop_out_counted_and_the_split_is_reproducible():
    vals = {"a": [[1.0, 0.0], [None, 1.0]], "b": [[1.0, 1.0], [0.0, 1.0]], "c": [[0.0, 0.0], [1.0, 0.0]],
            "d": [[None, None], [None, None]]}
    d1, d2 = R.decompose(vals, judged=True, seed=3), R.decompose(vals, judged=True, seed=3)
    assert (d1["n_questions"], d1["n_incomplete"], d1["n_undefined"]) == (2, 1, 1)
    assert d1 == d2  # same scores, same bootstrap seed: the same numbers, bit for bit
    with pytest.raises(ValueError, match="same repeats x judgings"):
        R.decompose({"a": [[1.0]], "b": [[1.0], [0.0]]}, judged=False)


def test_the_judge_cache_key_includes_the_judging_seed(tmp_path):
    class CountingLLM:
        """Test double for control flow only: counts calls, always the same verdict."""
        id, context_size, calls = "counting-judge", 4096, 0

        def chat(self, messages, *, max_tokens=None, temperature=None):
            self.calls += 1
            return Completion(text='{"supported": true}')

    llm, cache = CountingLLM(), CallCache(tmp_path / "calls.sqlite", "judge")
    for seed in (None, 0, 1, 1):  # judging again under a new seed asks again; the same seed replays
        Judge(llm, cache, timeout_s=None, temperature=0.7, seed=seed).ask("same prompt", SupportVerdict)
    assert llm.calls == 3
    j = Judge(llm, cache, timeout_s=None, temperature=0.7)
    assert j.cache_key("p", SupportVerdict) != Judge(llm, cache, timeout_s=None, temperature=0.7,
                                                     seed=0).cache_key("p", SupportVerdict)


def _settings(**over):
    return load_settings(None, {"eval.judge": None, **over}, environ={})


class _Generative:
    id, generative = "sampler", True


class _Extractive:
    id, generative = "extractive-v2", False


def test_settings_that_cannot_act_are_refused_by_name():
    with pytest.raises(UnsupportedSetting, match=r"eval.repeats=3 with llm.temperature=0"):
        R.refuse(_settings(**{"eval.repeats": 3}), _Generative(), "invoke eval")
    with pytest.raises(UnsupportedSetting, match=r"eval.judge_repeats=2 with eval.judge_temperature=0"):
        R.refuse(_settings(**{"eval.judge": "smollm2", "eval.judge_repeats": 2}), _Extractive(), "invoke eval")
    with pytest.raises(UnsupportedSetting, match=r"eval.judge_repeats=2.*no judge"):
        R.refuse(_settings(**{"eval.judge_repeats": 2, "eval.judge_temperature": 0.5}), _Extractive(), "invoke eval")
    with pytest.raises(UnsupportedSetting, match=r"eval.judge_temperature=0.5"):
        R.refuse(_settings(**{"eval.judge_temperature": 0.5}), _Extractive(), "invoke eval")
    with pytest.raises(UnsupportedSetting, match=r"eval.repeats=2.*eval.mode=agent"):
        R.refuse(_settings(**{"eval.repeats": 2, "eval.mode": "agent", "llm.temperature": 0.5}), _Generative(), "x")
    notes = R.refuse(_settings(**{"eval.repeats": 2}), _Extractive(), "invoke eval")
    assert any("deterministic" in n and "0 by construction" in n for n in notes)
    assert R.refuse(_settings(**{"eval.repeats": 2, "llm.temperature": 0.7}), _Generative(), "invoke eval") == []
    # every other question-set entry point refuses the repeat settings by name
    with pytest.raises(UnsupportedSetting, match=r"eval.repeats=2 is not honoured by the retrieval experiment"):
        refuse_conversation_settings(_settings(**{"eval.repeats": 2}), "the retrieval experiment")
    refuse_conversation_settings(_settings(**{"eval.repeats": 2}), "invoke eval", repeats=True)


def test_the_hnsw_and_memory_experiments_refuse_the_repeat_settings_by_name(tmp_path):
    """Neither experiment answers or judges, so eval.repeats / judge_repeats would be silently
    ignored there: each refuses a changed value by name before any work, and runs without it."""
    from adiyan.experiments import hnsw, memory

    vs = hnsw.vector_set("synthetic-200", _settings(), n_queries=5)  # the default settings pass
    for over in ({"eval.repeats": 2}, {"eval.judge_temperature": 0.5}):
        s = _settings(**over)
        key = next(iter(over))
        with pytest.raises(UnsupportedSetting, match=rf"{key}=.* is not honoured by the hnsw experiment"):
            hnsw.vector_set("synthetic-200", s, n_queries=5)
        with pytest.raises(UnsupportedSetting, match=rf"{key}=.* is not honoured by the hnsw experiment"):
            hnsw.hnsw_point(vs, s, ef=16, access_filter=False)
        with pytest.raises(UnsupportedSetting, match=rf"{key}=.* is not honoured by the memory experiment"):
            memory.evaluate_memory(s)


def _run(tmp_path, name: str, keyword_recall: float, keyword_hits: list[int], sd_run: float | None):
    d = tmp_path / name
    d.mkdir()
    m = {"run_id": name, "dataset": {"name": "toy", "hash": "h"}, "config": {"retrieval": {"kb_top_k": 4}},
         "metrics": {"answer": {"keyword_recall": keyword_recall}}}
    if sd_run is not None:
        m["repeats"] = {"repeats": 3, "judge_repeats": 1, "answer_seeds": [0, 1, 2], "judge_seeds": [],
                        "metrics": {"answer/keyword_recall": {"sd_run": sd_run}}}
    (d / "metrics.json").write_text(json.dumps(m))
    (d / "questions.jsonl").write_text("\n".join(json.dumps({"id": f"q{i}", "hit": None, "keyword_hit": bool(h)})
                                                 for i, h in enumerate(keyword_hits)))
    return d


def test_compare_flags_a_delta_inside_the_repeat_spread_and_not_one_outside(tmp_path):
    hits_a = [1, 0, 1, 0, 1, 0, 1, 0, 1, 0]  # 0.5
    a = _run(tmp_path, "a", 0.5, hits_a, 0.10)
    inside = _run(tmp_path, "inside", 0.6, [1, 1, 1, 0, 1, 0, 1, 0, 1, 0], 0.10)  # +0.1 < 2 x 0.10
    outside = _run(tmp_path, "outside", 0.8, [1, 1, 1, 1, 1, 0, 1, 1, 1, 0], 0.05)  # +0.3 > 2 x sqrt((.01+.0025)/2)
    plain = _run(tmp_path, "plain", 0.6, [1, 1, 1, 0, 1, 0, 1, 0, 1, 0], None)
    _, res = compare_runs(a, inside, tmp_path / "cmp")
    row = next(m for m in res["metrics"] if m["name"] == "keyword_recall")
    assert row["noise"]["within_noise"] and row["noise"]["threshold"] == pytest.approx(0.2)
    paired = next(t for t in res["paired_tests"] if t["score"] == "keyword_hit")
    assert paired["noise"]["within_noise"]  # beside the paired test
    assert any("answer/keyword_recall" in line and "WITHIN REPEAT NOISE" in line for line in summary_lines(res))
    _, res = compare_runs(a, outside, tmp_path / "cmp")
    row = next(m for m in res["metrics"] if m["name"] == "keyword_recall")
    assert not row["noise"]["within_noise"]
    assert row["noise"]["pooled_sd"] == pytest.approx(math.sqrt((0.1 ** 2 + 0.05 ** 2) / 2))
    out, res = compare_runs(plain, a, tmp_path / "cmp")  # one run measured: its spread alone
    row = next(m for m in res["metrics"] if m["name"] == "keyword_recall")
    assert row["noise"]["pooled_sd"] == pytest.approx(0.10) and row["noise"]["within_noise"]
    assert "within repeat noise" in (out / "index.html").read_text()
    _, res = compare_runs(plain, plain, tmp_path / "cmp")
    assert next(m for m in res["metrics"] if m["name"] == "keyword_recall")["noise"] is None


def test_the_run_report_shows_the_split(tmp_path, split):
    from adiyan.report import write_run_report

    _, block = split
    block = {**block, "llm_temperature": 0.7, "judge_temperature": 0.7}
    block.pop("per_question", None)
    d = tmp_path / "run"
    d.mkdir()
    (d / "metrics.json").write_text(json.dumps({"run_id": "run", "metrics": {}, "repeats": block}))
    (d / "questions.jsonl").write_text("")
    html = write_run_report(d).read_text()
    section = html[html.index('id="repeats"'):html.index('id="run"')]
    f = block["metrics"]["ragas_llm/faithfulness"]
    assert f"{f['judge_sd']:.4f}" in section and f"{f['system_sd']:.4f}" in section
    assert "not judged" in section and "<svg" in section  # keyword recall has no judge part; the picture
    assert write_run_report(d).read_text() == html  # byte for byte


@pytest.mark.slow
def test_invoke_eval_with_repeats_on_adiyan_basic(tmp_path):
    """invoke eval on adiyan_basic with the extractive answerer and 2 repeats: retrieval and the
    deterministic answerer must come out with exactly 0 spread; metrics.json records the seeds
    and the split, repeats.json the per-question scores. (~40 s, builds its own index.)"""
    from pathlib import Path

    from adiyan.eval.runner import run_eval

    root = Path(__file__).resolve().parents[1]
    s = load_settings(None, {"paths.data_dir": str(tmp_path / "data"), "paths.reports_dir": str(tmp_path / "reports"),
                             "eval.evalset": str(root / "evalsets" / "adiyan_basic"), "eval.judge": None,
                             "eval.incidents": False, "eval.repeats": 2}, environ={})
    run = run_eval(s, progress=False, run_id="rep")
    m = json.loads((run / "metrics.json").read_text())
    rep = m["repeats"]
    assert rep["repeats"] == 2 and rep["answer_seeds"] == [s.llm.seed, s.llm.seed + 1]
    k = s.retrieval.kb_top_k
    for name in (f"retrieval/hit_rate@{k}", f"retrieval/mrr@{k}", "answer/keyword_recall", "ragas/rouge_score"):
        d = rep["metrics"][name]
        assert d["system_var"] == 0.0 and d["sd_run"] == 0.0 and d["n_questions"] > 0, name
    assert rep["metrics"]["answer/keyword_recall"]["repeat_means"][0] == pytest.approx(m["metrics"]["answer"]["keyword_recall"], abs=1e-6)
    scores = json.loads((run / "repeats.json").read_text())["scores"]
    assert all(len(v) == 2 for v in scores[f"retrieval/hit_rate@{k}"].values())
    assert 'id="repeats"' in (run / "report.html").read_text()
