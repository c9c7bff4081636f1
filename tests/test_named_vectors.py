"""Several named dense vectors per chunk in one collection (issue 27 §3), on both Qdrant engines.

Hand-checkable claims: each named vector searched alone returns exactly what a collection holding
only that vector returns (same ids, same scores); the access filter holds on every named vector
(every hit is one the filter admits, and the hits are NumPy's exact filtered ranking); the engine's
RRF over three lists equals the formula applied by hand to the three lists; a point missing a
named vector, an unknown name and a collection reopened with other named vectors are refused by
name; scrolling with vectors and upserting back (the BM25 re-encode) keeps every named vector.
"""

from __future__ import annotations

import numpy as np
import pytest

from adiyan.store.base import (Cond, EmbedderMismatchError, Filter, Point, Sparse, StoreError, VectorSpec)
from adiyan.store.edge import EdgeStore
from adiyan.store.server import ServerStore

N = 60
RNG = np.random.default_rng(7)
A = RNG.normal(size=(N, 6)).astype(np.float32)  # the unnamed vector (6-d)
B = RNG.normal(size=(N, 4)).astype(np.float32)  # the named vector "b" (4-d, another "model")
IDS = [f"00000000-0000-0000-0000-{i:012d}" for i in range(N)]
OWNERS = ["alice" if i % 3 == 0 else "office" for i in range(N)]
VIS = ["private" if i % 3 == 0 else "global" for i in range(N)]
TERMS = [Sparse((i % 5, 10 + i % 7), (1.0, 0.5)) for i in range(N)]
SPEC = {"b": VectorSpec(4, "model-b")}
BOB = Filter(should=(Cond("visibility", "global"), Cond("owner_identity", "bob")))  # what bob may see


def _unit(m):
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def _points(named: bool = True, only_b: bool = False):
    out = []
    for i in range(N):
        payload = {"owner_identity": OWNERS[i], "visibility": VIS[i], "source_filename": f"{OWNERS[i]}/d{i}.md"}
        if only_b:
            out.append(Point(IDS[i], B[i], payload, sparse=TERMS[i]))
        else:
            out.append(Point(IDS[i], A[i], payload, sparse=TERMS[i], named={"b": B[i]} if named else {}))
    return out


@pytest.fixture(params=["edge", "local"])
def store(request, tmp_path):
    s = EdgeStore(tmp_path) if request.param == "edge" else ServerStore(path=":memory:")
    yield s
    s.close()


def _build(store):
    store.ensure_collection("multi", dim=6, embedder_id="model-a", vectors=SPEC)
    store.upsert("multi", _points())
    store.ensure_collection("only_a", dim=6, embedder_id="model-a")
    store.upsert("only_a", _points(named=False))
    store.ensure_collection("only_b", dim=4, embedder_id="model-b")
    store.upsert("only_b", _points(only_b=True))
    for name in ("multi", "only_a", "only_b"):
        store.optimize(name)


def _same(h1, h2):
    assert [h.id for h in h1] == [h.id for h in h2]
    assert np.allclose([h.score for h in h1], [h.score for h in h2], atol=1e-6)


def test_each_named_vector_alone_equals_a_single_vector_collection(store):
    _build(store)
    for q in RNG.normal(size=(5, 10)).astype(np.float32):
        _same(store.search("multi", q[:6], 10, exact=True), store.search("only_a", q[:6], 10, exact=True))
        _same(store.search("multi", q[6:], 10, exact=True, using="b"), store.search("only_b", q[6:], 10, exact=True))
        # and the scores are the cosines, by hand
        hits = store.search("multi", q[6:], 10, exact=True, using="b")
        cos = _unit(B) @ (q[6:] / np.linalg.norm(q[6:]))
        assert [h.id for h in hits] == [IDS[i] for i in np.argsort(-cos)[:10]]
        assert np.allclose([h.score for h in hits], np.sort(cos)[::-1][:10], atol=1e-5)


def test_the_access_filter_holds_on_every_named_vector(store):
    _build(store)
    allowed = np.array([v == "global" for v in VIS])
    for q in RNG.normal(size=(5, 10)).astype(np.float32):
        for using, mat, vec in ((None, A, q[:6]), ("b", B, q[6:])):
            hits = store.search("multi", vec, 15, flt=BOB, exact=True, using=using)
            assert hits and all(h.payload["visibility"] == "global" for h in hits)
            cos = _unit(mat) @ (vec / np.linalg.norm(vec))
            cos[~allowed] = -np.inf  # NumPy's exact filtered ranking
            assert [h.id for h in hits] == [IDS[i] for i in np.argsort(-cos)[:15]]
        # the fused query holds it too, on every list
        fused = store.hybrid_search("multi", q[:6], Sparse((1, 2), (1.0, 1.0)), 40, flt=BOB, prefetch=20,
                                    named={"b": q[6:]})
        assert fused and all(h.payload["visibility"] == "global" for h in fused)


def test_engine_rrf_over_three_lists_equals_the_formula_by_hand(store):
    _build(store)
    q = RNG.normal(size=10).astype(np.float32)
    sq = Sparse((0, 12), (1.0, 1.0))
    k, pre = 60, 10
    lists = [store.search("multi", q[:6], pre, exact=True), store.search("multi", q[6:], pre, exact=True, using="b"),
             store.sparse_search("multi", sq, pre)]
    expected: dict[str, float] = {}
    for hits in lists:
        for rank, h in enumerate(hits, 1):
            expected[h.id] = expected.get(h.id, 0.0) + 1.0 / (k + rank)
    got = store.hybrid_search("multi", q[:6], sq, 100, prefetch=pre, rrf_k=k, exact=True, named={"b": q[6:]})
    assert {h.id: round(h.score, 6) for h in got} == {i: round(s, 6) for i, s in expected.items()}
    assert len({h.id for h in lists[1]} - {h.id for h in lists[0]} - {h.id for h in lists[2]}) > 0  # "b" adds points


def test_named_vectors_are_refused_by_name_when_wrong(store):
    _build(store)
    with pytest.raises(StoreError, match="lacks the named vector 'b'"):
        store.upsert("multi", _points(named=False)[:1])
    bad = _points()[:1]
    bad[0].named = {"b": B[0], "c": B[0]}
    with pytest.raises(StoreError, match="no named vector 'c'"):
        store.upsert("multi", bad)
    bad[0].named = {"b": A[0]}
    with pytest.raises(StoreError, match="named vector 'b' of shape"):
        store.upsert("multi", bad)
    with pytest.raises(StoreError, match="no named vector 'c'"):
        store.search("multi", B[0], 3, using="c")
    with pytest.raises(EmbedderMismatchError, match="named vectors"):
        store.ensure_collection("multi", dim=6, embedder_id="model-a")  # opened without "b"
    with pytest.raises(EmbedderMismatchError, match="named vectors"):
        store.ensure_collection("multi", dim=6, embedder_id="model-a", vectors={"b": VectorSpec(4, "model-c")})
    with pytest.raises(StoreError, match="reserved"):
        store.ensure_collection("other", dim=6, embedder_id="model-a", vectors={"bm25": VectorSpec(4, "m")})


def test_scroll_and_upsert_back_keeps_every_named_vector(store):
    """The BM25 re-encode (kb/bm25.py) scrolls with vectors and upserts the points back."""
    _build(store)
    q = RNG.normal(size=4).astype(np.float32)
    before = store.search("multi", q, 10, exact=True, using="b")
    points = list(store.scroll("multi", with_vectors=True))
    assert len(points) == N and all(set(p.named) == {"b"} for p in points)
    got = {p.id: p.named["b"] for p in points}
    assert np.allclose(got[IDS[3]], _unit(B)[3], atol=1e-6)  # stored normalised (cosine)
    store.upsert("multi", points)
    _same(store.search("multi", q, 10, exact=True, using="b"), before)
