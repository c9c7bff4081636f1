"""Score-aware fusion (convex, DBSF) and dense pseudo-relevance feedback, checked against hand-computed
figures; and the pipeline's PRF moving the query vector by exactly the Rocchio formula."""

from __future__ import annotations

import math

import numpy as np
import pytest

from adiyan.config import RetrievalConfig
from adiyan.retrieval.fusion import convex, dbsf, normalise, rank_order, rocchio, weighted
from adiyan.retrieval.pipeline import Retriever
from adiyan.types import RetrievedChunk

DENSE = {"a": 0.9, "b": 0.8, "c": 0.5, "e": 0.8}  # b and e tie: the dense order breaks it by id
SPARSE = {"c": 10.0, "d": 5.0, "a": 0.0, "e": 7.0}


@pytest.mark.parametrize("norm", ["minmax", "z"])
def test_convex_alpha_one_ranks_exactly_as_dense_and_zero_as_bm25(norm):
    only_dense = list(convex(DENSE, SPARSE, 1.0, norm=norm))
    assert only_dense[:4] == rank_order(DENSE) == ["a", "b", "e", "c"]
    assert only_dense == ["a", "b", "e", "c", "d"]  # d is BM25-only: after every dense document
    only_bm25 = list(convex(DENSE, SPARSE, 0.0, norm=norm))
    assert only_bm25 == rank_order(SPARSE) + ["b"] == ["c", "e", "d", "a", "b"]


def test_convex_between_hand_computed():
    d, s = {"a": 0.9, "b": 0.8, "c": 0.5}, {"c": 10.0, "d": 5.0, "a": 0.0}
    # min-max: dense a 1, b 0.75, c 0; bm25 c 1, d 0.5, a 0; a missing document scores 0
    got = convex(d, s, 0.6)
    assert list(got) == ["a", "b", "c", "d"]
    assert got == pytest.approx({"a": 0.6, "b": 0.45, "c": 0.4, "d": 0.2})
    got = convex(d, s, 0.4)  # c 0.6, a 0.4, then b and d tie at 0.3: by id
    assert list(got) == ["c", "a", "b", "d"]
    assert got["b"] == pytest.approx(0.3) and got["d"] == pytest.approx(0.3)


def test_convex_z_missing_document_takes_the_lists_minimum():
    d, s = {"a": 3.0, "b": 1.0}, {"b": 2.0, "c": 0.0}
    # z: dense a +1, b -1; bm25 b +1, c -1; c missing from dense gets -1, a missing from bm25 gets -1
    got = convex(d, s, 0.5, norm="z")
    assert got == pytest.approx({"a": 0.0, "b": 0.0, "c": -1.0})
    assert list(got) == ["a", "b", "c"]


def test_weighted_three_lists_hand_computed_and_two_lists_equal_convex():
    d1, d2, s = {"a": 3.0, "b": 1.0}, {"b": 5.0, "c": 1.0, "a": 3.0}, {"c": 2.0, "d": 0.0}
    # z: d1 a +1, b -1 (floor -1); d2 b +1.2247, a 0, c -1.2247 (floor -1.2247); s c +1, d -1 (floor -1)
    r = math.sqrt(1.5)
    got = weighted([d1, d2, s], [0.5, 0.25, 0.25], norm="z")
    want = {"a": 0.5 + 0.0 - 0.25, "b": -0.5 + 0.25 * r - 0.25, "c": -0.5 - 0.25 * r + 0.25,
            "d": -0.5 - 0.25 * r - 0.25}
    assert got == pytest.approx(want)
    assert list(got) == ["a", "b", "c", "d"]
    for norm in ("minmax", "z"):  # two lists: exactly the convex combination
        assert weighted([DENSE, SPARSE], [0.3, 0.7], norm=norm) == pytest.approx(convex(DENSE, SPARSE, 0.3, norm=norm))
    with pytest.raises(ValueError, match="sum to 1"):
        weighted([d1, s], [0.5, 0.6])


def test_dbsf_matches_a_hand_computed_example():
    a = {"a": 1.0, "b": 0.5, "c": 0.0}  # mean 0.5, population sigma sqrt(1/6)
    b = {"b": 3.0, "d": 1.0}  # mean 2, sigma 1: b -> (3 - (-1)) / 6, d -> (1 - (-1)) / 6
    sig = math.sqrt(1 / 6)
    lo, span = 0.5 - 3 * sig, 6 * sig
    assert normalise(a, "dbsf") == pytest.approx({"a": (1 - lo) / span, "b": 0.5, "c": (0 - lo) / span})
    got = dbsf([a, b])
    assert got == pytest.approx({"b": 0.5 + 4 / 6, "a": 0.7041241, "d": 2 / 6, "c": 0.2958759}, abs=1e-6)
    assert list(got) == ["b", "a", "d", "c"]


def test_rocchio_by_hand():
    q = [1.0, 0.0, 0.0]
    docs = [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    # q + 1.0 * mean = (1, .5, .5), unit length: / sqrt(1.5)
    assert rocchio(q, docs, 1.0) == pytest.approx([1 / math.sqrt(1.5), 0.5 / math.sqrt(1.5), 0.5 / math.sqrt(1.5)])
    assert rocchio(q, docs, 0.0) == pytest.approx(q)
    with pytest.raises(ValueError, match="prf_weight"):
        rocchio(q, docs, -1.0)


class _FakeKB:
    """Test double (control flow only): records each engine query and answers with fixed chunks."""

    def __init__(self):
        self.calls = []
        self.embedder = self

    def embed(self, texts, kind):
        table = {"the query": [1.0, 0.0, 0.0], "doc one": [0.0, 1.0, 0.0], "doc two": [0.0, 0.0, 1.0],
                 "doc three": [0.6, 0.8, 0.0]}
        return np.asarray([table[t] for t in texts], dtype=np.float32)

    def search(self, q, limit, *, mode, query_vector=None, query_vectors=None, **kw):
        query_vector = (query_vectors or {}).get("dense", query_vector)  # the main dense signal's vector
        self.calls.append({"mode": mode, "query_vector": None if query_vector is None else np.array(query_vector),
                           "limit": limit})
        return [RetrievedChunk(f"s/{t}", 0, 1.0 - 0.1 * i, t) for i, t in enumerate(["doc one", "doc two", "doc three"])]


def test_pipeline_prf_moves_the_query_vector_by_the_formula():
    kb = _FakeKB()
    r = Retriever(kb, RetrievalConfig(prf_docs=2, prf_weight=0.5, rank_depth=10), floor=0.0)
    r.retrieve("the query", "someone")
    first, second = kb.calls
    assert first["query_vector"] is None  # the first stage embeds the query itself
    # top 2 = doc one, doc two; q' = (1, 0, 0) + 0.5 * (0, .5, .5) = (1, .25, .25), unit length
    n = math.sqrt(1 + 2 * 0.25 ** 2)
    assert second["query_vector"] == pytest.approx([1 / n, 0.25 / n, 0.25 / n], abs=1e-6)
    kb.calls.clear()
    Retriever(kb, RetrievalConfig(prf_docs=0, rank_depth=10), floor=0.0).retrieve("the query", "someone")
    assert len(kb.calls) == 1  # no feedback: one engine query


def test_pipeline_convex_fuses_the_two_engine_lists():
    kb = _FakeKB()
    r = Retriever(kb, RetrievalConfig(mode="hybrid", fusion="convex", fusion_weight=0.3, rank_depth=10), floor=0.0)
    res = r.retrieve("the query", "someone")
    assert [c["mode"] for c in kb.calls] == ["dense", "bm25"]
    # both lists score one 1.0, two 0.9, three 0.8 -> min-max 1, .5, 0 on both sides
    assert [round(c.score, 6) for c in res.ranked] == [1.0, 0.5, 0.0]
