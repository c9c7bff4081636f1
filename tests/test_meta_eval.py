"""The meta-evaluation against RAGChecker's human labels (adiyan/eval/meta_eval*.py, docs/meta-eval.md):
the method checked by hand on a tiny set, RAGChecker's published row reproduced from its real file,
BLEU checked by hand, the committed registry table against a fresh computation, and the judge's
wiring (control flow with a test double; the embedded smollm2 in a slow test)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import yaml

os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")

from adiyan.eval import meta_eval as ME  # noqa: E402
from adiyan.eval import meta_eval_scores as MS  # noqa: E402
from adiyan import metrics as M  # noqa: E402
from adiyan.eval.meta_eval_method import (ASPECTS, against_humans, bootstrap_indices, correlation,  # noqa: E402
                                          human_agreement, interval, metric_row, same_scores, scaled_deltas)
from adiyan.eval.ragas_metrics import bleu_score, chrf_score, score_non_llm  # noqa: E402
from adiyan.models.base import Completion  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "datasets" / "ragchecker_meta"
needs_data = pytest.mark.skipif(not (DATA / ME.HUMAN_FILE).exists(), reason=f"needs {DATA}")

# a hand-built set of four instances: model1 / model2 scores (one None: its delta is NaN) and the
# two annotators' labels
S1, S2 = [0.2, 0.5, None, 0.1], [0.6, 0.3, 0.4, 0.1]
LABELS = np.array([[2, 1], [-1, -2], [0, 0], [1, -1]], dtype=float)


def test_nan_to_median_and_min_max_scaling_by_hand():
    scaled, info = scaled_deltas(S1, S2)
    # deltas 0.4, -0.2, NaN, 0.0 -> NaN becomes the median 0.0 -> ((d + 0.2) / 0.6 - 0.5) * 4
    assert scaled == pytest.approx([2.0, -2.0, -2 / 3, -2 / 3])
    assert info == {"n_nan": 1, "constant": False}
    flat, info = scaled_deltas([0.3, 0.3], [0.3, 0.3])
    assert info["constant"] and list(flat) == [0.0, 0.0]  # left unscaled, as the authors' script does


def test_correlation_against_both_annotators_by_hand():
    scaled, _ = scaled_deltas(S1, S2)
    # x = each delta twice: 2, 2, -2, -2, -2/3 x 4; y = 2, 1, -1, -2, 0, 0, 1, -1 (mean -1/3 and 0)
    # Pearson: sum(xc * y) = 12, sum(xc^2) = 152/9, sum(y^2) = 12 -> 12 / sqrt(152/9 * 12) = 36 / sqrt(1824)
    # Spearman: ranks x 7.5, 7.5, 1.5, 1.5, 4.5 x 4; ranks y 8, 6.5, 2.5, 1, 4.5, 4.5, 6.5, 2.5
    #           -> 33 / sqrt(36 * 40.5)
    pearson, spearman = against_humans(scaled, LABELS)
    assert pearson == round(36 / math.sqrt(1824) * 100, 2) == 84.29
    assert spearman == round(33 / math.sqrt(36 * 40.5) * 100, 2) == 86.42
    # annotator 1 (2, -1, 0, 1) against annotator 2 (1, -2, 0, -1): 4 / sqrt(5 * 5)
    agree = human_agreement(LABELS, bootstrap_indices(4, 200, seed=0))
    assert agree["pearson"] == 80.0
    assert correlation([1, 1, 1], [1, 2, 3]) == (None, None)  # constant: no correlation, not NaN


def test_a_constant_metric_is_undefined_not_zero():
    labels = {a: LABELS for a in ASPECTS}
    row = metric_row("exact_match", same_scores([0.0] * 4, [0.0] * 4), labels, n_boot=100, seed=0, kind="offline")
    assert row["status"] == "undefined"
    assert all(c["pearson"] is None and "same for every instance" in c["why"] for c in row["aspects"].values())


def test_bootstrap_is_seeded_over_instances_and_brackets_the_estimate():
    rng = np.random.default_rng(3)
    labels = rng.integers(-2, 3, size=(60, 2)).astype(float)
    scaled = labels.mean(axis=1) + rng.normal(0, 1, 60)
    idx = bootstrap_indices(60, 500, seed=1)
    assert (idx == bootstrap_indices(60, 500, seed=1)).all() and not (idx == bootstrap_indices(60, 500, 2)).all()
    ci = interval(scaled, labels, idx)
    p, s = against_humans(scaled, labels)
    assert ci["pearson_ci"][0] < p < ci["pearson_ci"][1] and ci["spearman_ci"][0] < s < ci["spearman_ci"][1]
    # a metric that is the label itself (both annotators agree): every resample correlates perfectly
    same = np.repeat(labels[:, :1], 2, axis=1)
    assert interval(same[:, 0], same, idx)["pearson_ci"] == [100.0, 100.0]


@needs_data
def test_ragcheckers_published_row_is_reproduced_from_its_file():
    instances = ME.load_meta_set(DATA)
    assert len(instances) == 280 and instances[0].models == ("bm25_llama3_8b", "e5_mistral_gpt_4")
    rc = ME.load_ragchecker_scores(DATA, instances)
    labels = {a: ME.labels_matrix(instances, a) for a in ASPECTS}
    row = metric_row("ragchecker", {a: (rc[a][:, 0], rc[a][:, 1]) for a in ASPECTS}, labels, n_boot=100, seed=0,
                     kind="reference")
    published = ME.load_published()
    check = ME.reproduction_check(row, published["ragchecker"]["figures"])
    assert check["passed"], check
    assert [row["aspects"][a]["pearson"] for a in ASPECTS] == pytest.approx([49.66, 60.67, 61.93], abs=0.5)
    assert [row["aspects"][a]["spearman"] for a in ASPECTS] == pytest.approx([46.95, 58.11, 60.90], abs=0.5)
    idx = bootstrap_indices(280, 100, 0)
    human = {a: human_agreement(labels[a], idx) for a in ASPECTS}
    assert ME.reproduction_check(human, published["human"]["figures"])["passed"]
    assert [human[a]["pearson"] for a in ASPECTS] == pytest.approx([63.67, 71.91, 70.09], abs=0.5)


def test_a_wrong_published_figure_fails_the_check():
    row = {"aspects": {a: {"pearson": 50.0, "spearman": 40.0} for a in ASPECTS}}
    published = {a: {"pearson": 50.4, "spearman": 40.0} for a in ASPECTS}
    assert ME.reproduction_check(row, published)["passed"]
    published["overall"] = {"pearson": 50.6, "spearman": 40.0}
    check = ME.reproduction_check(row, published)
    assert not check["passed"] and not check["aspects"]["overall"]["passed"]


def _write_set(folder: Path, *, model1_as_literal: bool = True, n: int = 3) -> None:
    """A tiny meta-evaluation folder in the real files' shapes (model1 as a Python-literal string)."""
    human, rc = [], []
    for i in range(n):
        m1 = {"model_name": "a", "response": f"Paris is the capital, number {i}."}
        m2 = {"model_name": "b", "response": f"The capital of France is Paris {i} and more."}
        base = {"instance_id": i, "dataset": "tiny", "query": f"Capital {i}?", "gt_answer": f"Paris {i} is the capital."}
        for lab in (i % 3 - 1, i % 2):  # annotator 1, annotator 2
            human.append({**base, "model1": repr(m1) if model1_as_literal else m1, "model2": m2,
                          **{f"{a}_label": str(lab) for a in ASPECTS}})
        rc.append({**base, "instance_id": str(i), "model1": {**m1, "ragchecker": {f"{a}_label": 0.1 * i for a in ASPECTS}},
                   "model2": {**m2, "ragchecker": {f"{a}_label": 0.3 for a in ASPECTS}}})
    (folder / ME.HUMAN_FILE).write_text(json.dumps(human))
    (folder / ME.RAGCHECKER_FILE).write_text(json.dumps(rc))


def test_loader_reads_literal_strings_and_names_the_file_in_every_error(tmp_path):
    _write_set(tmp_path)
    inst = ME.load_meta_set(tmp_path)
    assert [i.responses[0] for i in inst][0] == "Paris is the capital, number 0."  # parsed from a literal
    assert inst[1].labels["overall"] == (0, 1)
    with pytest.raises(ME.MetaEvalDataError, match=str(tmp_path / "missing")):
        ME.load_meta_set(tmp_path / "missing")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / ME.HUMAN_FILE).write_text("[{")
    with pytest.raises(ME.MetaEvalDataError, match=f"{bad / ME.HUMAN_FILE}: not valid JSON"):
        ME.load_meta_set(bad)
    records = json.loads((tmp_path / ME.HUMAN_FILE).read_text())
    records[3]["overall_label"] = "3"
    (bad / ME.HUMAN_FILE).write_text(json.dumps(records))
    with pytest.raises(ME.MetaEvalDataError, match="record 3: overall_label 3 is outside -2..2"):
        ME.load_meta_set(bad)
    records[3]["overall_label"], records[3]["instance_id"] = "1", 7
    (bad / ME.HUMAN_FILE).write_text(json.dumps(records))
    with pytest.raises(ME.MetaEvalDataError, match="must both be instance 1"):
        ME.load_meta_set(bad)


def test_bleu_by_hand_and_ragas_bleu_as_shipped_ignores_later_sentences():
    # "the cat sat on a mat" vs "the cat sat on the mat": n-gram precisions 5/6, 3/5, 2/4, 1/3, no
    # brevity penalty -> (5/6 * 3/5 * 1/2 * 1/3) ** (1/4) = (1/12) ** (1/4)
    assert bleu_score("the cat sat on the mat", "the cat sat on a mat") == pytest.approx((1 / 12) ** 0.25)
    # every n-gram of "the cat sat on the" matches; 5 of 6 reference tokens: brevity penalty e^(1 - 6/5)
    assert bleu_score("the cat sat on the mat", "the cat sat on the") == pytest.approx(math.exp(1 - 6 / 5))
    assert bleu_score("the cat sat on the mat", "the cat sat on the mat") == 1.0
    # ragas splits both on ". " and sacreBLEU zips hypotheses with reference streams: the response's
    # first sentence is scored against each reference sentence, the rest of the response is dropped
    ref = "The cat sat on the mat. A dog barked."
    resp = "The cat sat on the mat. Then entirely unrelated words follow here."
    assert MS.ragas_bleu_as_shipped([ref], [resp]) == [pytest.approx(1.0)]
    assert bleu_score(ref, resp) < 0.5


def test_chrf_by_hand():
    # "abc" vs reference "abd", whitespace-free character n-grams: 1-grams 2 of 3 match (P = R = 2/3),
    # 2-grams 1 of 2 (1/2), 3-grams 0 of 1; no text has 4- to 6-grams, so those orders are left out.
    # P = R = (2/3 + 1/2 + 0) / 3 = 7/18, and F-beta of equal P and R is that value
    assert chrf_score("abd", "abc") == pytest.approx(7 / 18)
    assert chrf_score("the cat sat", "the cat sat") == 1.0
    assert chrf_score("abc", "xyz") == 0.0
    # per row beside BLEU, None without a reference
    per_row = score_non_llm([{"answer": "abc", "reference": "abd"}, {"answer": "abc", "reference": None}])
    assert per_row["chrf_score"] == [pytest.approx(7 / 18), None]


def test_derived_keywords_and_their_share():
    kws = MS.answer_keywords("Pre-training corpora are constructed using large-scale unlabeled datasets [4]. "
                             "The goal is universal representations [4, 5] with 2 steps.")
    assert kws == ["pre-training", "corpora", "constructed", "large-scale", "unlabeled", "datasets", "goal",
                   "universal", "representations", "2", "steps"]
    assert MS.keyword_share("Corpora of unlabeled DATASETS", kws) == 3 / 11
    assert M.keyword_hit("corpora", ["corpora", "goal"]) is False


@needs_data
def test_committed_registry_table_matches_a_fresh_computation(make_settings):
    """adiyan/human_correlation.yaml (written by adiyan meta-eval --write-registry) holds the
    figures this data gives today for every offline registry metric."""
    table = yaml.safe_load(M.HUMAN_CORRELATION_FILE.read_text(encoding="utf-8"))
    assert table["data_sha256"] == {f: ME.file_sha256(DATA / f) for f in (ME.HUMAN_FILE, ME.RAGCHECKER_FILE)}
    instances = ME.load_meta_set(DATA)
    labels = {a: ME.labels_matrix(instances, a) for a in ASPECTS}
    settings = make_settings(seed=table["seed"])
    fresh = {"rows": MS.offline_rows(instances, labels, settings, n_boot=table["n_bootstrap"], progress=False,
                                     extras=False, checker=False),  # the checker's rows: the slow test below
             "method": table["method"], "dataset": {"sha256": table["data_sha256"]},
             "n_bootstrap": table["n_bootstrap"], "seed": table["seed"]}
    want = ME.human_correlation_table(fresh)["metrics"]
    assert set(want) == {"rouge_score", "non_llm_string_similarity", "bleu_score", "exact_match", "keyword_recall",
                         "chrf_score"}  # every offline answer metric a run writes
    assert want["chrf_score"]["groups"] == ["ragas", "agent_ragas"]  # from the registry, not a list kept by hand
    for name, entry in want.items():
        assert table["metrics"][name] == entry, name
    assert table["metrics"]["rouge_score"]["status"] == "measured"
    assert table["metrics"]["exact_match"]["status"] == "undefined"
    for name in ("faithfulness", "llm_context_precision", "llm_context_recall", "noise_sensitivity"):
        assert "no retrieved contexts" in table["metrics"][name]["why"]


def test_the_checker_rows_of_the_registry_table_are_the_committed_runs():
    """The claim checker's rows in adiyan/human_correlation.yaml are those of the committed meta-eval
    output (benchmarks/results/meta-eval.json, the run `invoke bench --verify meta-eval` re-checks
    against fresh figures: scoring the 560 responses takes ~9 min, too long for a test)."""
    table = yaml.safe_load(M.HUMAN_CORRELATION_FILE.read_text(encoding="utf-8"))["metrics"]
    committed = json.loads((ROOT / "benchmarks" / "results" / "meta-eval.json").read_text(encoding="utf-8"))
    rows = {r["metric"]: r for r in committed["rows"]}
    for name in ("claim_precision", "claim_recall", "claim_f1"):
        assert table[name]["groups"] == ["claims", "agent_claims"] and table[name]["kind"] == "checker"
        for a in ASPECTS:
            assert table[name][a]["pearson"] == rows[name]["aspects"][a]["pearson"], (name, a)


def test_registry_and_report_show_the_measured_correlation():
    from adiyan.report import human_badge

    table = yaml.safe_load(M.HUMAN_CORRELATION_FILE.read_text(encoding="utf-8"))["metrics"]
    rouge = M.human_correlation("ragas", "rouge_score")
    assert rouge == table["rouge_score"] and rouge["status"] == "measured"
    badge = str(human_badge("ragas", "rouge_score"))
    assert f"vs humans: Pearson r ×100 = {rouge['overall']['pearson']}" in badge and "RAGChecker meta-evaluation" in badge
    assert "not measured" in str(human_badge("ragas_llm", "faithfulness"))
    assert M.human_correlation("retrieval", "hit_rate@5")["status"] == "not_measured"
    assert str(human_badge("retrieval", "hit_rate@5")) == ""  # not an answer metric: nothing shown


def _tiny_instances(n: int = 6):
    from adiyan.eval.meta_eval_method import MetaInstance

    signs = [(1, 2), (-1, -1), (0, 1), (2, 1), (-2, -1), (1, -1)]
    return [MetaInstance(i, "tiny", f"What is item {i}?", f"Item {i} is a red box.",
                         (f"Item {i} is blue.", f"Item {i} is a red box of wood."), ("m1", "m2"),
                         {a: signs[i % 6] for a in ASPECTS}) for i in range(n)]


def test_preference_pairs_keep_clear_preferences_and_balance_positions():
    pairs = MS.preference_pairs(_tiny_instances(), n_pairs=10, seed=0)
    # instances 2 (0 vs 1) and 5 (1 vs -1) have no agreed preference
    assert sorted(p.id for p in pairs) == ["ragchecker-0", "ragchecker-1", "ragchecker-3", "ragchecker-4"]
    assert [p.better for p in pairs] == ["A", "B", "A", "B"]
    for p in pairs:
        i = int(p.id.split("-")[1])
        better = "of wood" if i in (0, 3) else "is blue"  # model2 better where the labels are positive
        assert better in (p.answer_a if p.better == "A" else p.answer_b)


class AlwaysALLM:
    """Test double (control flow only): prefers answer A, calls every response relevant to the question
    'What is item 0?', so the judged row is computed from real ragas arithmetic on fixed replies."""

    id = "always-a"
    context_size = 4096

    def chat(self, messages, **kw):
        prompt = messages[-1]["content"]
        if '"better"' in prompt:
            return Completion(text='{"better": "A"}')
        return Completion(text='{"question": "What is item 0?", "noncommittal": 0}')


def test_judged_part_reports_both_calibrations_and_strikes_an_unreliable_judge(make_settings, monkeypatch, tmp_path,
                                                                                 minilm):
    from adiyan.cache import CallCache
    from adiyan.eval.judge import Calibration, Judge

    judge = Judge(AlwaysALLM(), CallCache(tmp_path / "j.sqlite", "judge"), timeout_s=None, max_retries=0)
    monkeypatch.setattr(MS, "judge_from_settings", lambda s: judge)
    authored = Calibration(0.5, 40, {"correct": {"n": 40, "agree": 20, "disagree": 20, "failed": 0}}, [], 0.8, judge.id)
    monkeypatch.setattr(MS, "_authored_calibration", lambda s, j, p: authored)  # control flow: no evalset ingest
    monkeypatch.setattr(MS, "embedder_from_settings", lambda s, progress=False: minilm)
    inst = _tiny_instances(6)
    labels = {a: ME.labels_matrix(inst, a) for a in ASPECTS}
    s = make_settings(**{"eval.judge": "always-a", "eval.judge_calibration_pairs": 4, "eval.judge_sample_unreliable": 3})
    out = MS.judged_part(s, inst, labels, n_boot=100, progress=False)
    human = out["calibration"]["human_preferences"]
    assert human["n"] == 4 and human["agreement"] == 0.5  # always "A" on balanced positions
    assert out["calibration"]["authored"]["agreement"] == 0.5 and out["reliable"] is False
    rows = {r["metric"]: r for r in out["rows"]}
    assert set(rows) == {"answer_relevancy", "faithfulness", "llm_context_precision", "llm_context_recall",
                         "noise_sensitivity"}
    assert rows["faithfulness"]["status"] == "not_applicable"
    ar = rows["answer_relevancy"]
    assert ar["struck"] and ar["sample"] == 3 == out["sample"]["n"] and ar["failed"] == 0
    assert "wiring only" in ar["why"]
    entry = ME.human_correlation_table({"rows": out["rows"], "method": "", "dataset": {"sha256": {}},
                                        "n_bootstrap": 100, "seed": 0})["metrics"]["answer_relevancy"]
    assert entry["status"] == "not_measured"  # a struck figure never enters the registry as measured


@pytest.mark.slow
def test_judged_metrics_wired_with_the_embedded_smollm2_on_a_few_instances(make_settings):
    """Wiring only: smollm2 is no judge. The real chain (authored calibration on adiyan_basic, human
    preference pairs, ragas answer relevancy) runs on two instances and every call is accounted for."""
    instances = ME.load_meta_set(DATA)[:8]
    labels = {a: ME.labels_matrix(instances, a) for a in ASPECTS}
    # 4 pairs can never clear the reliability line, so the early stop would end the calibration at
    # once: switched off here, so every call of the chain is made and accounted for
    s = make_settings(**{"eval.evalset": str(ROOT / "evalsets" / "adiyan_basic"), "eval.judge": "smollm2",
                         "eval.judge_calibration_pairs": 4, "eval.judge_calibration_early_stop": False,
                         "eval.judge_sample_unreliable": 2,
                         "eval.judge_sample": 2})
    out = MS.judged_part(s, instances, labels, n_boot=100, progress=False)
    for cal in out["calibration"].values():
        assert cal["n"] == 4 and cal["judge"].startswith("smollm2") and cal["n_agree"] + cal["n_failed"] <= 4
        assert len(cal["verdicts"]) == 4 and cal["n_failed"] == len(cal["failures"])  # every failure listed
    ar = next(r for r in out["rows"] if r["metric"] == "answer_relevancy")
    assert ar["sample"] == 2 and ar["judge"].startswith("smollm2") and ar["struck"]  # smollm2 is no judge
    summ = out["summary"]["metrics"]["answer_relevancy"]
    assert summ["rows"] == 4 and summ["ok"] + summ["failed"] + summ["undefined"] + summ["skipped"] == 4
    assert summ["judge_calls"] == summ["judge_calls_ok"] + summ["judge_calls_failed"] >= 4
