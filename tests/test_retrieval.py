"""Retrieval stages and IR metrics, each checked against numbers worked out by hand.

Fast: toy inputs, plus the real SciFact files for the loader. The whole-corpus comparison with
published figures is in test_scifact.py (slow).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from adiyan.eval import ir_metrics
from adiyan.eval.beir import BeirFormatError, doc_text, load_beir
from adiyan.eval.ir_metrics import compare_runs, evaluate_run, fisher_randomization_p, per_query
from adiyan.retrieval import BiEncoderReranker, BM25Retriever, ExactDenseIndex, rerank, rrf
from adiyan.retrieval.hnsw_recall import measure_hnsw_recall, visibility

SCIFACT = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "scifact"
BACKENDS = [True, False] if ir_metrics.backend() == "ranx" else [False]


# -- RRF --------------------------------------------------------------------------------------
def test_rrf_hand_values():
    run_a = {"q": {"a": 3.0, "b": 2.0, "c": 1.0}}  # ranks a1 b2 c3
    run_b = {"q": {"c": 0.9, "a": 0.5, "d": 0.1}}  # ranks c1 a2 d3
    fused = rrf([run_a, run_b], k=60)["q"]
    assert fused["a"] == pytest.approx(1 / (60 + 1) + 1 / (60 + 2))  # 0.032522
    assert fused["c"] == pytest.approx(1 / (60 + 3) + 1 / (60 + 1))  # 0.032266
    assert fused["b"] == pytest.approx(1 / (60 + 2))
    assert fused["d"] == pytest.approx(1 / (60 + 3))
    assert list(fused) == ["a", "c", "b", "d"]


def test_rrf_ties_are_broken_by_doc_id():
    # x and y swap ranks between the runs: both get 1/61 + 1/62, so id order decides.
    fused = rrf([{"q": {"y": 1.0, "x": 0.5}}, {"q": {"x": 1.0, "y": 0.5}}])["q"]
    assert fused["x"] == fused["y"] == pytest.approx(1 / 61 + 1 / 62)
    assert list(fused) == ["x", "y"]
    # equal scores inside one run: ranks follow the ids (a=1, b=2)
    single = rrf([{"q": {"b": 1.0, "a": 1.0}}], k=60)["q"]
    assert single == {"a": pytest.approx(1 / 61), "b": pytest.approx(1 / 62)}


def test_rrf_query_in_one_run_only_and_top_k():
    fused = rrf([{"q1": {"a": 1.0}}, {"q2": {"b": 2.0, "c": 1.0}}], k=10, top_k=1)
    assert fused == {"q1": {"a": pytest.approx(1 / 11)}, "q2": {"b": pytest.approx(1 / 11)}}


# -- exact dense index --------------------------------------------------------------------------
def test_exact_index_matches_brute_force_sort():
    rng = np.random.default_rng(7)
    docs = rng.normal(size=(300, 16)).astype(np.float32)
    ids = [f"d{i:03d}" for i in rng.permutation(300)]
    queries = rng.normal(size=(12, 16)).astype(np.float32)
    index = ExactDenseIndex(ids, docs)
    unit = docs / np.linalg.norm(docs, axis=1, keepdims=True)
    for q, hits in zip(queries, index.search(queries, 10)):
        cos = unit @ (q / np.linalg.norm(q))
        expected = sorted(range(300), key=lambda i: (-cos[i], ids[i]))[:10]
        assert [h[0] for h in hits] == [ids[i] for i in expected]
        assert [h[1] for h in hits] == pytest.approx([float(cos[i]) for i in expected], abs=1e-5)


def test_exact_index_ties_by_id_and_mask(tmp_path):
    v = np.array([[1, 0], [1, 0], [0, 1], [1, 0]], dtype=np.float32)
    index = ExactDenseIndex(["c", "b", "z", "a"], v)
    hits = index.search(np.array([1.0, 0.0]), 3)[0]
    assert [d for d, _ in hits] == ["a", "b", "c"]  # three cosines of 1.0: id order
    loaded = ExactDenseIndex.load(index.save(tmp_path / "idx"))
    assert loaded.search(np.array([1.0, 0.0]), 3)[0] == hits
    assert [s for _, s in hits] == pytest.approx([1.0, 1.0, 1.0])
    masked = index.search(np.array([1.0, 0.0]), 3, mask=np.array([True, False, True, False]))[0]
    assert [d for d, _ in masked] == ["c", "z"]  # only rows 0 and 2 allowed; cos 1 then 0
    run = index.retrieve(["q"], np.array([[0.0, 2.0]]), 1)
    assert run == {"q": {"z": pytest.approx(1.0)}}


# -- BM25 -----------------------------------------------------------------------------------------
TOY = {
    "d1": "the cat sat on the mat",  # cat sat mat        (after stopwords + Snowball)
    "d2": "the dog sat on the log",  # dog sat log
    "d3": "cats and dogs are pets",  # cat dog pet
    "d4": "a zebrafish genome was sequenced",  # zebrafish genom sequenc
    "d5": "the cat and the dog",  # cat dog
}


def test_bm25_rare_term_ranks_first_with_hand_scores(tmp_path):
    bm = BM25Retriever().index(list(TOY), list(TOY.values()))
    run = bm.retrieve({"q": "cat zebrafish"}, k=5)["q"]
    # Lucene BM25 as bm25s computes it: idf = ln(1 + (N - df + 0.5) / (df + 0.5)),
    # tf part = tf / (tf + k1 * (1 - b + b * dl / avgdl)); k1=0.9, b=0.4, N=5, avgdl = 14/5 = 2.8.
    norm = lambda dl: 1 + 0.9 * (1 - 0.4 + 0.4 * dl / 2.8)  # noqa: E731 (tf = 1 everywhere)
    zebrafish = math.log(1 + (5 - 1 + 0.5) / (1 + 0.5)) / norm(3)  # ln 4 / 1.925714 = 0.719890
    cat_idf = math.log(1 + (5 - 3 + 0.5) / (3 + 0.5))  # df(cat) = 3: d1, d3 ("cats"), d5
    assert list(run) == ["d4", "d5", "d1", "d3"]  # d1, d3 tie (same dl): id order; d2 has no query term
    assert run["d4"] == pytest.approx(zebrafish, rel=1e-5)
    assert run["d5"] == pytest.approx(cat_idf / norm(2), rel=1e-5)  # 0.538997 / 1.797143 = 0.299923
    assert run["d1"] == pytest.approx(cat_idf / norm(3), rel=1e-5) == run["d3"]
    # save / load gives the same run
    bm.save(tmp_path / "bm25")
    again = BM25Retriever.load(tmp_path / "bm25").retrieve({"q": "cat zebrafish"}, k=5)["q"]
    assert list(again) == list(run) and again == pytest.approx(run)


def test_bm25_query_without_known_terms_returns_nothing():
    bm = BM25Retriever().index(list(TOY), list(TOY.values()))
    assert bm.retrieve(["unicorn", "the and"], k=3) == {"0": {}, "1": {}}


# -- re-ranking -----------------------------------------------------------------------------------
class _TableReranker:
    """Test double for control flow: fixed scores per text."""

    id = "table"

    def __init__(self, table):
        self.table = table

    def score(self, query, texts):
        return [self.table[t] for t in texts]


def test_rerank_reorders_top_n_and_keeps_the_tail():
    run = {"q": {"a": 4.0, "b": 3.0, "c": 2.0, "d": 1.0}}
    texts = {d: f"text {d}" for d in "abcd"}
    stats: dict = {}
    out = rerank(run, {"q": "query"}, texts, _TableReranker({"text a": 0.1, "text b": 0.9, "text c": 0.5}),
                 top_n=3, progress=False, stats=stats)["q"]
    assert list(out) == ["b", "c", "a", "d"]  # block re-ordered by 0.9 > 0.5 > 0.1, d stays below
    assert out["b"] == 0.9 and out["d"] == pytest.approx(0.1 - 1.0)
    assert stats["unique_docs"] == 3 and stats["pairs"] == 3
    dropped = rerank(run, {"q": "query"}, texts, _TableReranker({"text a": 1.0, "text b": 1.0}), top_n=2,
                     keep_tail=False, progress=False)["q"]
    assert list(dropped) == ["a", "b"]  # equal re-ranker scores: id order


def test_bi_encoder_reranker_with_minilm_prefers_the_answer(minilm):
    reranker = BiEncoderReranker(minilm)
    texts = {"bike": "Bicycles need their chains oiled every few weeks.",
             "tour": "The tour costs 450 euros per person."}
    run = {"q": {"bike": 2.0, "tour": 1.0}}  # first stage got it wrong
    out = rerank(run, {"q": "How much does the tour cost?"}, texts, reranker, top_n=2, progress=False)
    assert list(out["q"]) == ["tour", "bike"]
    assert out["q"]["tour"] > out["q"]["bike"] + 0.5  # cosines measured: 0.763 vs 0.099


# -- IR metrics -----------------------------------------------------------------------------------
QRELS = {"q1": {"d1": 1, "d3": 1}, "q2": {"d5": 1}}
RUN = {"q1": {"d1": 3.0, "d2": 2.0, "d3": 1.0},  # relevant at ranks 1 and 3
       "q2": {"d4": 3.0, "d5": 2.0, "d6": 1.0}}  # relevant at rank 2


@pytest.mark.parametrize("use_ranx", BACKENDS)
def test_ir_metrics_by_hand(use_ranx):
    ndcg_q1 = (1 / math.log2(2) + 1 / math.log2(4)) / (1 / math.log2(2) + 1 / math.log2(3))  # 1.5/1.63093 = 0.919721
    ndcg_q2 = (1 / math.log2(3)) / (1 / math.log2(2))  # 0.630930
    got = evaluate_run(QRELS, RUN, ["ndcg@3", "mrr@10", "recall@2", "map@3", "ndcg@1"], use_ranx=use_ranx)
    assert got["ndcg@3"] == pytest.approx((ndcg_q1 + ndcg_q2) / 2)  # 0.775325
    assert got["mrr@10"] == pytest.approx((1 / 1 + 1 / 2) / 2)  # 0.75
    assert got["recall@2"] == pytest.approx((1 / 2 + 1 / 1) / 2)  # q1 finds d1 of {d1,d3}; q2 finds d5
    assert got["map@3"] == pytest.approx(((1 / 1 + 2 / 3) / 2 + (1 / 2) / 1) / 2)  # 0.666667
    assert got["ndcg@1"] == pytest.approx((1 + 0) / 2)
    per = per_query(QRELS, RUN, "ndcg@3", use_ranx=use_ranx)
    assert per == {"q1": pytest.approx(ndcg_q1), "q2": pytest.approx(ndcg_q2)}


@pytest.mark.parametrize("use_ranx", BACKENDS)
def test_ir_metrics_graded_ties_and_missing_queries(use_ranx):
    # graded gain = relevance: DCG = 1/log2(2) + 2/log2(3), IDCG = 2/log2(2) + 1/log2(3)
    graded = evaluate_run({"q": {"a": 2, "b": 1}}, {"q": {"b": 2.0, "a": 1.0}}, ["ndcg@3"], use_ranx=use_ranx)
    assert graded["ndcg@3"] == pytest.approx((1 + 2 / math.log2(3)) / (2 + 1 / math.log2(3)))  # 0.859719
    # a tie at the top is broken by doc id: a before b, so the relevant b is at rank 2
    tie = evaluate_run({"q": {"b": 1}}, {"q": {"b": 1.0, "a": 1.0}}, ["mrr@10"], use_ranx=use_ranx)
    assert tie["mrr@10"] == pytest.approx(1 / 2)
    # a judged query missing from the run counts as 0; an unjudged one is ignored
    partial = evaluate_run(QRELS, {"q1": RUN["q1"], "zz": {"d1": 1.0}}, ["mrr@10"], use_ranx=use_ranx)
    assert partial["mrr@10"] == pytest.approx((1 + 0) / 2)


def test_ir_metrics_reject_unknown_metric():
    with pytest.raises(ValueError, match="unknown metric"):
        evaluate_run(QRELS, RUN, ["precision@5"])


def test_compare_runs_paired_tests():
    better = {"q1": {"d1": 3.0, "d3": 2.0}, "q2": {"d5": 3.0}}  # nDCG@3 = 1 on both queries
    out = compare_runs(QRELS, {"base": RUN, "better": better, "same": RUN}, ["ndcg@3"], baseline="base",
                       stat_test="fisher", n_permutations=2000, seed=1)
    d = out["vs_baseline"]["better"]["ndcg@3"]
    assert d["delta"] == pytest.approx(1 - 0.775325, abs=1e-6)
    assert (d["win"], d["tie"], d["loss"]) == (2, 0, 0)
    assert out["vs_baseline"]["same"]["ndcg@3"]["p_value"] == pytest.approx(1.0)
    again = compare_runs(QRELS, {"base": RUN, "better": better}, ["ndcg@3"], baseline="base",
                         stat_test="fisher", n_permutations=2000, seed=1)
    assert again["vs_baseline"]["better"]["ndcg@3"]["p_value"] == d["p_value"]  # seeded
    with pytest.raises(ValueError, match="baseline"):
        compare_runs(QRELS, {"a": RUN}, ["ndcg@3"], baseline="nope")


def test_student_t_test_matches_scipy():
    from scipy import stats

    better = {"q1": {"d1": 3.0, "d3": 2.0}, "q2": {"d5": 3.0}}
    out = compare_runs(QRELS, {"base": RUN, "better": better}, ["ndcg@3"], stat_test="student")
    base = [0.919721, 0.630930]  # per-query nDCG@3 of RUN, as in test_ir_metrics_by_hand
    # differences 0.080279, 0.369070: mean 0.224675, sd 0.204206, t = 0.224675 / (0.204206 / sqrt 2) = 1.556, 1 df
    expected = stats.ttest_rel(base, [1.0, 1.0]).pvalue  # 0.3636
    assert out["vs_baseline"]["better"]["ndcg@3"]["p_value"] == pytest.approx(expected, abs=1e-4)


def test_fisher_randomization_two_queries_by_hand():
    # differences (+1, +1): of the 4 equally likely sign patterns, 2 reach |mean| >= 1 -> p = 1/2
    p = fisher_randomization_p(np.array([0.0, 0.0]), np.array([1.0, 1.0]), n_permutations=20_000, seed=3)
    assert p == pytest.approx(0.5, abs=0.02)


# -- BEIR loader ----------------------------------------------------------------------------------
def _write_beir(root: Path) -> None:
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text('{"_id": "d1", "title": "T", "text": "body"}\n'
                                       '{"_id": "d2", "title": "", "text": " x "}\n')
    (root / "queries.jsonl").write_text('{"_id": "1", "text": "judged"}\n{"_id": "2", "text": "unjudged"}\n')
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n1\td1\t1\n")


def test_load_beir_keeps_judged_queries_and_names_missing_files(tmp_path):
    _write_beir(tmp_path / "toy")
    data = load_beir(tmp_path / "toy")
    assert data.queries == {"1": "judged"} and data.qrels == {"1": {"d1": 1}}
    assert data.doc_texts() == ["T body", "x"]
    (tmp_path / "toy" / "queries.jsonl").unlink()
    with pytest.raises(BeirFormatError, match="queries.jsonl"):
        load_beir(tmp_path / "toy")
    with pytest.raises(BeirFormatError, match="qrels.*dev.tsv|dev.tsv"):
        _write_beir(tmp_path / "toy2")
        load_beir(tmp_path / "toy2", split="dev")


@pytest.mark.skipif(not SCIFACT.is_dir(), reason="../shared/datasets/scifact not present")
def test_load_real_scifact_counts():
    test = load_beir(SCIFACT)  # counts from ../shared/datasets/README.md
    assert test.stats() == {"docs": 5183, "queries": 300, "qrels": 339, "split": "test"}
    train = load_beir(SCIFACT, split="train")
    assert (len(train.queries), sum(map(len, train.qrels.values()))) == (809, 919)
    assert doc_text(test.corpus["4983"]).startswith("Microstructural development of human newborn")


# -- HNSW recall harness --------------------------------------------------------------------------
def test_visibility_is_seeded_and_about_half():
    ids = [str(i) for i in range(2000)]
    vis = [visibility(i, seed=0) for i in ids]
    assert vis == [visibility(i, seed=0) for i in ids]
    assert 900 < vis.count("global") < 1100
    assert vis != [visibility(i, seed=1) for i in ids]


def test_hnsw_recall_harness_small():
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(3000, 96)).astype(np.float32)  # 1.1 MB: above the full-scan threshold
    queries = rng.normal(size=(30, 96)).astype(np.float32)
    out = measure_hnsw_recall([f"d{i}" for i in range(3000)], vecs, queries, efs=(16, 256), progress=False)
    rows = {(r["ef"], r["filter"]): r for r in out["rows"]}
    assert set(rows) == {(16, "none"), (16, "global_only"), (256, "none"), (256, "global_only")}
    assert all(r["private_returned"] == 0 for r in out["rows"] if r["filter"] == "global_only")
    assert out["exact_engine"]["none"]["recall@10"] == 1.0  # the engine's brute force equals NumPy's
    assert out["exact_engine"]["global_only"]["recall@10"] == 1.0
    assert rows[(256, "none")]["recall@10"] >= rows[(16, "none")]["recall@10"]


def test_package_exports_the_pipeline_retriever():
    """``from adiyan.retrieval import Retriever`` is the one pipeline class, not a look-alike."""
    import adiyan.retrieval as R
    from adiyan.retrieval import pipeline
    assert R.Retriever is pipeline.Retriever and R.UnsupportedSetting is pipeline.UnsupportedSetting
    assert "Retriever" in R.__all__
