"""SciFact (BEIR test split) end to end, against the published numbers in
../shared/datasets/README.md, as bm25s checks itself against a reference on real BEIR data.

Slow: BM25 indexes 5,183 abstracts; all-MiniLM-L6-v2 embeds them (about 5-15 minutes on 2 cores
the first time, then cache look-ups: the project's embedding cache in .cache/adiyan is shared
with benchmarks/scifact.py); the re-rank test embeds the ~3,200 unique top-20 hybrid candidates
with all-mpnet-base-v2 (about 45 minutes cold, seconds once cached).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
SCIFACT = ROOT.parent / "shared" / "datasets" / "scifact"
METRICS = ["ndcg@10", "recall@100"]

if not SCIFACT.is_dir():  # pragma: no cover
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
    """Re-ranks the hybrid's top N (default 5: ~1,000 unique abstracts, minutes cold on 2 cores;
    the benchmark's top 20 embeds 3,200 and took an hour on a loaded machine — set
    ADIYAN_SCIFACT_RERANK_TOP=20 to test that)."""
    import os

    from adiyan.eval.ir_metrics import evaluate_run
    from adiyan.retrieval import BiEncoderReranker, rerank

    top_n = int(os.environ.get("ADIYAN_SCIFACT_RERANK_TOP", "5"))

    reranker = BiEncoderReranker.from_settings(settings, "mpnet")
    stats: dict = {}
    docs = dict(zip(scifact.doc_ids(), scifact.doc_texts()))
    out = rerank(hybrid_run, scifact.queries, docs, reranker, top_n=top_n, progress=False, stats=stats)
    got = evaluate_run(scifact.qrels, out, METRICS)
    base = evaluate_run(scifact.qrels, hybrid_run, METRICS)
    assert got["recall@100"] == pytest.approx(base["recall@100"])  # re-ranking only permutes the top N
    assert stats["pairs"] == top_n * 300
    assert np.isfinite(list(out["1"].values())).all()
    # Against the hybrid it re-ranks (0.716): all-mpnet-base-v2 is the weaker ranker (0.656 alone), so
    # re-ranking by it costs nDCG@10, by an amount measured on this copy (issue 4's note: top 5 0.699,
    # top 20 0.6746). The loss is pinned: losing 0.07 (the old floor of 0.646 allowed it) fails.
    measured_delta = {5: 0.699 - 0.7162, 20: 0.6746 - 0.7162}
    if top_n not in measured_delta:
        pytest.fail(f"no measured re-rank delta for top {top_n}; measured: {sorted(measured_delta)}")
    delta = got["ndcg@10"] - base["ndcg@10"]
    assert delta == pytest.approx(measured_delta[top_n], abs=0.01), (got, base)
    assert base["ndcg@10"] == pytest.approx(0.7162, abs=0.002)  # the baseline is the benchmark's hybrid
