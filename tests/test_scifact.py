"""SciFact (BEIR test split) end to end, against the published numbers in
../shared/datasets/README.md, as bm25s checks itself against a reference on real BEIR data.

Slow: BM25 indexes 5,183 abstracts; all-MiniLM-L6-v2 embeds them (about 5-15 minutes on 2 cores
the first time, then cache look-ups: the project's embedding cache in .cache/adiyan is shared
with benchmarks/scifact.py); the re-rank test embeds the top-5 hybrid candidates of the first 60
queries (254 abstracts) with all-mpnet-base-v2 (about two minutes cold, seconds once cached; the
~3,200 top-20 candidates of all 300 queries take about 45 minutes).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
SCIFACT = ROOT.parent / "shared" / "datasets" / "scifact"
METRICS = ["ndcg@10", "recall@100"]

if not SCIFACT.is_dir():  # pragma: no cover
    if os.environ.get("CI_REQUIRE_DATA") == "1":  # CI: a missing data set fails (tests/conftest.py)
        raise RuntimeError("CI_REQUIRE_DATA=1: ../shared/datasets/scifact is missing")
    pytest.skip("../shared/datasets/scifact not present", allow_module_level=True)


@pytest.fixture(scope="module")
def settings():
    from adiyan.config import load_settings

    return load_settings(None, {"paths.cache_dir": str(ROOT / ".cache" / "adiyan"),
                                "paths.models_dir": str(ROOT / ".cache" / "adiyan" / "models"),
                                "embedder.name": "minilm"}, environ={})


@pytest.fixture(scope="module")
def scifact():
    from adiyan.eval.beir import load_beir

    return load_beir(SCIFACT, "test")


@pytest.fixture(scope="module")
def bm25_run(scifact):
    from adiyan.eval.beir_runs import index_corpus
    from adiyan.retrieval import BM25Retriever

    return index_corpus(BM25Retriever(), scifact.corpus).retrieve(scifact.queries, k=1000)


@pytest.fixture(scope="module")
def dense(scifact, settings):
    from adiyan.eval.beir_runs import dense_run
    from adiyan.models import embedder_from_settings

    emb = embedder_from_settings(settings)
    assert emb.inner._model.max_seq_length == 256  # the setting the published 0.645 used
    run, index, qvecs = dense_run(emb, scifact.corpus, scifact.queries, k=1000, progress=False)
    return run, index, qvecs


@pytest.fixture(scope="module")
def hybrid_run(bm25_run, dense):
    from adiyan.retrieval import rrf

    return rrf([bm25_run, dense[0]], k=60)


def test_bm25_reproduces_published(scifact, bm25_run):
    from adiyan.eval.ir_metrics import evaluate_run

    got = evaluate_run(scifact.qrels, bm25_run, METRICS)
    # published: 0.665 (BEIR, Anserini multifield) .. 0.680 (Lucene k1=1.2 b=0.75); target: within 0.02
    assert 0.665 - 0.02 <= got["ndcg@10"] <= 0.680 + 0.02
    # same settings as the bm25s reference measured on this copy (k1=0.9, b=0.4, Snowball, stopwords): 0.676
    assert got["ndcg@10"] == pytest.approx(0.676, abs=0.005)


def test_dense_minilm_reproduces_published(scifact, dense):
    from adiyan.eval.ir_metrics import evaluate_run

    got = evaluate_run(scifact.qrels, dense[0], METRICS)
    assert got["ndcg@10"] == pytest.approx(0.645, abs=0.02)  # all-MiniLM-L6-v2, max_seq_length 256


def test_hybrid_rrf_beats_both_and_reaches_target(scifact, bm25_run, dense, hybrid_run):
    from adiyan.eval.ir_metrics import compare_runs

    cmp = compare_runs(scifact.qrels, {"bm25": bm25_run, "dense": dense[0], "hybrid": hybrid_run}, METRICS,
                       baseline="bm25", stat_test="fisher", n_permutations=5000, seed=0)
    hybrid = cmp["scores"]["hybrid"]
    assert hybrid["ndcg@10"] >= 0.71  # published: 0.718 for RRF(k=60) of the same two runs
    assert hybrid["recall@100"] >= 0.948 - 0.01  # published: 0.948
    assert hybrid["ndcg@10"] > max(cmp["scores"]["bm25"]["ndcg@10"], cmp["scores"]["dense"]["ndcg@10"])
    assert cmp["vs_baseline"]["hybrid"]["ndcg@10"]["delta"] > 0.03


def test_hnsw_recall_reaches_exact_at_moderate_ef(dense):
    from adiyan.retrieval.hnsw_recall import measure_hnsw_recall

    _, index, qvecs = dense
    out = measure_hnsw_recall(index.ids, index.vectors, qvecs, efs=(16, 64, 128), seed=0, progress=False)
    assert out["build"]["indexed_vectors"] == len(index)  # HNSW really built, not a brute-force segment
    rows = {(r["ef"], r["filter"]): r["recall@10"] for r in out["rows"]}
    assert max(rows[(ef, "none")] for ef in (16, 64, 128)) >= 0.99  # target: >= 0.99 at some ef <= 128
    assert rows[(128, "none")] >= rows[(16, "none")]
    assert all(r["private_returned"] == 0 for r in out["rows"] if r["filter"] == "global_only")
    assert out["exact_engine"]["none"]["recall@10"] == 1.0


def test_rerank_top_n_with_mpnet(scifact, hybrid_run, settings):
    """Re-ranks the hybrid's top N (default 5) for the first Q test queries (default 60, by query
    id): all-mpnet-base-v2 embeds every candidate abstract, 254 of them for 60 queries (about two
    minutes cold on 2 cores; 100 queries embed 437 and took 237 s of CI's test stage, all 300 took 481 s).
    ADIYAN_SCIFACT_RERANK_QUERIES=300 and ADIYAN_SCIFACT_RERANK_TOP=20 test the benchmark's figures."""
    import os

    from adiyan.eval.ir_metrics import evaluate_run
    from adiyan.retrieval import BiEncoderReranker, rerank

    top_n = int(os.environ.get("ADIYAN_SCIFACT_RERANK_TOP", "5"))
    n_queries = int(os.environ.get("ADIYAN_SCIFACT_RERANK_QUERIES", "60"))
    qids = sorted(hybrid_run, key=lambda q: (len(q), q))[:n_queries]
    run = {q: hybrid_run[q] for q in qids}
    qrels = {q: scifact.qrels[q] for q in qids if q in scifact.qrels}

    reranker = BiEncoderReranker.from_settings(settings, "mpnet")
    stats: dict = {}
    docs = dict(zip(scifact.doc_ids(), scifact.doc_texts()))
    out = rerank(run, scifact.queries, docs, reranker, top_n=top_n, progress=False, stats=stats)
    got = evaluate_run(qrels, out, METRICS)
    base = evaluate_run(qrels, run, METRICS)
    assert got["recall@100"] == pytest.approx(base["recall@100"])  # re-ranking only permutes the top N
    assert stats["pairs"] == top_n * len(qids)
    assert np.isfinite(list(out[qids[0]].values())).all()
    # Against the hybrid it re-ranks (0.716 on all 300): all-mpnet-base-v2 is the weaker ranker (0.656
    # alone), so re-ranking by it costs nDCG@10 on all 300 queries, by an amount measured on this copy
    # (issue 4's note: top 5 0.699, top 20 0.6746). On the first queries the sign is sample noise: the
    # first 100 lose 0.008 (measured 5 Dec 2026), the first 60 gain 0.021 (0.8192 -> 0.8400, measured
    # 6 Dec 2026, the same run reproducing the 100-query figures). Each delta is pinned: a re-rank that
    # changed nothing, or changed the order differently, fails.
    measured_delta = {(5, 300): 0.699 - 0.7162, (20, 300): 0.6746 - 0.7162, (5, 100): 0.7676 - 0.7759,
                      (5, 60): 0.8400 - 0.8192}
    if (top_n, len(qids)) not in measured_delta:
        pytest.fail(f"no measured re-rank delta for top {top_n} of {len(qids)} queries; measured: {sorted(measured_delta)}")
    delta = got["ndcg@10"] - base["ndcg@10"]
    print(f"rerank top {top_n} of {len(qids)} queries: base {base['ndcg@10']:.4f} reranked {got['ndcg@10']:.4f} delta {delta:+.4f}")
    # the computation is deterministic (same model, same data): a tolerance of 0.003 leaves room for
    # float noise only, so a re-rank that changed nothing (delta 0) fails on the 60-query default
    assert delta == pytest.approx(measured_delta[(top_n, len(qids))], abs=0.003 if len(qids) in (60, 100) else 0.01), \
        (got, base)
    reordered = [q for q in qids if list(out[q])[:top_n] != sorted(run[q], key=lambda d: -run[q][d])[:top_n]]
    assert reordered, "the re-ranker left every block in first-stage order"
    # one block by hand: mpnet's own cosine (the uncached model, not the re-ranker's score()) orders it
    q = reordered[0]
    block = list(out[q])[:top_n]
    model = reranker.embedder.inner
    qv = np.asarray(model.embed([scifact.queries[q]], "query"), dtype=np.float32)[0]
    dv = np.asarray(model.embed([docs[d] for d in block], "document"), dtype=np.float32)
    cos = dv @ qv
    assert all(cos[i] >= cos[i + 1] - 1e-5 for i in range(len(block) - 1)), (block, cos)
    if len(qids) == 300:
        assert base["ndcg@10"] == pytest.approx(0.7162, abs=0.002)  # the baseline is the benchmark's hybrid
