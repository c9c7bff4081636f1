"""The scorers every evaluation composes (adiyan/eval/scorers.py): values computed by hand, and
each scorer writing only the registry entries it declares (adiyan.metrics.SCORED)."""

from __future__ import annotations

import math

import pytest

from adiyan import metrics as M
from adiyan.eval import scorers as S


def _row(qid, kind, gold, retrieved, *, answer=None, keywords=(), gold_answer="", probe=None, needs_ocr=False,
         leaked=()):
    hit = M.hit(retrieved, gold) if gold else None
    row = {"id": qid, "question": f"question {qid}", "kind": kind, "gold_sources": list(gold),
           "gold_answer": gold_answer, "answer_keywords": list(keywords), "needs_ocr": needs_ocr,
           "probe_private": probe, "probe_leaked": False if probe else None,
           "probe_owner_retrieved": True if probe else None, "leaked_private": list(leaked),
           "retrieved": [{"source": s, "chunk_index": 0, "text": f"text of {s}"} for s in retrieved],
           "hit": hit, "reciprocal_rank": M.reciprocal_rank(retrieved, gold) if gold else None,
           "transform_failed": False, "queries": None}
    return S.annotate_answer(row, answer)


@pytest.fixture
def data():
    rows = [_row("q1", "lookup", ["a.md"], ["x.md", "a.md"], answer="The refund window is 30 days.",
                 keywords=["30 days"], gold_answer="The refund window is 30 days."),
            _row("q2", "lookup", ["b.md"], ["b.md"], answer="I don't know.", keywords=["Lisbon"],
                 gold_answer="Lisbon"),
            _row("q3", "paraphrase", ["c.md"], ["x.md", "y.md"], answer="Maybe Porto.", keywords=["Porto"],
                 gold_answer="Porto", needs_ocr=True),
            _row("q4", "private", [], ["x.md"], answer="I don't know.", probe="alice/p.md")]
    run = {r["id"]: {s["source"]: 1.0 / i for i, s in enumerate(r["retrieved"], 1)} for r in rows if r["gold_sources"]}
    qrels = {r["id"]: {g: 1 for g in r["gold_sources"]} for r in rows if r["gold_sources"]}
    return S.Rows(rows, run, qrels)


def test_retrieval_scorers_by_hand(data):
    g = S.score(S.RETRIEVAL_SCORERS, data, 2)
    assert list(g) == ["retrieval", "by_kind", "privacy", "ocr"]
    r = g["retrieval"]
    assert r["hit_rate@2"] == pytest.approx(2 / 3, abs=1e-6)  # q1 (rank 2), q2 (rank 1); q3 missed
    assert r["mrr@2"] == pytest.approx((0.5 + 1 + 0) / 3, abs=1e-6)
    assert r["ndcg@10"] == pytest.approx((1 / math.log2(3) + 1 + 0) / 3, abs=1e-6)  # 0.543643
    assert r["recall@10"] == pytest.approx(2 / 3, abs=1e-6)
    assert "transform_failures" not in r  # no transformation ran: the count is left out
    assert g["by_kind"] == {"hit_rate.lookup": 1.0, "hit_rate.paraphrase": 0.0}
    assert g["privacy"] == {"private_chunks_leaked": 0, "probe_questions": 1, "probes_leaked": 0,
                            "probes_owner_retrieved": 1.0}
    assert g["ocr"] == {"hit_rate": 0.0, "questions": 1}


def test_answer_scorers_by_hand(data):
    g = S.score(S.ANSWER_SCORERS, data, 2)
    assert g["answer"] == {"keyword_recall": pytest.approx(2 / 3, abs=1e-6),  # q1 and q3 hold theirs, q2 not
                           "abstain_rate_unanswerable": 1.0,  # q4 declined
                           "abstain_rate_answerable": pytest.approx(1 / 3, abs=1e-6)}  # q2 declined
    assert g["ragas"]["exact_match"] == pytest.approx(1 / 3, abs=1e-6)  # q1 word for word; q4 has no reference
    assert data.rows[0]["ragas"]["exact_match"] == 1.0 and data.rows[3]["ragas"]["exact_match"] is None
    # ID-based precision over the top-k sources: q1 1/2, q2 1, q3 0, q4 0 (no reference ids)
    assert g["ragas"]["id_based_context_precision"] == pytest.approx((0.5 + 1 + 0 + 0) / 4, abs=1e-6)


def test_no_answers_no_answer_group(data):
    for r in data.rows:
        S.annotate_answer(r, None)
    assert "answer" not in S.score(S.ANSWER_SCORERS, data, 2)


def test_every_scorer_writes_only_what_it_declares(data):
    """A scorer's output names resolve to entries of its own block (adding a metric without its
    registry line fails here), under agent_<group> too; an undeclared name is caught."""
    groups = {**S.score(S.RETRIEVAL_SCORERS, data, 2), **S.score(S.ANSWER_SCORERS, data, 2),
              **S.score(S.ANSWER_SCORERS, data, 2, prefix=M.AGENT_PREFIX)}
    conv = [{**r, "hit_raw": r["hit"], "rr_raw": r["reciprocal_rank"], "memory_precision": None,
             "memory_recall": None, "stale_in_context": None, "history": [], "conversation": "c1"} for r in data.rows]
    groups.update(S.score([S.CONVERSATION], S.Rows(conv), 2))
    by_group = {s.group: s for s in S.SCORERS}
    for group, values in groups.items():
        scorer = by_group[group.removeprefix(M.AGENT_PREFIX)]
        for name in values:
            entry = M.lookup(group, name)
            assert (entry.name, entry.direction) in {(m.name, m.direction) for m in scorer.metrics}, (group, name)
    assert not M.check_metrics(groups)
    rogue = S.Scorer("answer", lambda d, k: S.Scored({"answer_length": 12.0}))
    with pytest.raises(M.UnregisteredMetric):
        for name in S.score([rogue], data, 2)["answer"]:
            M.lookup("answer", name)


def test_ranking_metrics_come_from_the_retrieval_block():
    assert S.ranking_metrics() == ["ndcg@10", "recall@10", "mrr@10", "map@10"]
    assert S.RETRIEVAL.per_question == ("ndcg@{depth}", "recall@{depth}")


def test_sweep_columns_reuse_the_run_names():
    assert S.point_column("retrieval", "hit_rate@4", 4) == "retrieval.hit_rate@k"  # the same column at any k
    assert S.point_column("retrieval", "ndcg@10", 4) == "retrieval.ndcg@10"  # a fixed depth stays
    assert S.point_column("retrieval", "mrr@10", 4) == "retrieval.mrr@10"  # ranx's MRR@10, not the top-k one
    assert S.point_column("conversation", "hit_rate_rewrite@2", 2) == "conversation.hit_rate_rewrite@k"
    assert S.point_column("by_kind", "hit_rate.lookup", 4) == "by_kind.hit_rate.lookup"
    assert M.direction("retrieval", "hit_rate@k") == M.HIGHER  # the column resolves to the run's entry
