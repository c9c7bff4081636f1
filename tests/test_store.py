"""Both Qdrant engines behind one interface; the same-model rule is enforced, not hoped for."""

import numpy as np
import pytest

from adiyan.store import Cond, EdgeStore, EmbedderMismatchError, Filter, Point, ServerStore


@pytest.fixture(params=["edge", "local"])
def store(request, tmp_path):
    s = EdgeStore(tmp_path / "data") if request.param == "edge" else ServerStore(path=str(tmp_path / "ql"))
    yield s
    s.close()


def _unit(rng, n, d):
    v = rng.standard_normal((n, d)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_search_filter_delete_match_numpy(store):
    rng = np.random.default_rng(0)
    vecs = _unit(rng, 60, 16)
    store.ensure_collection("c", dim=16, embedder_id="toy", normalized=True)
    store.upsert("c", [Point(f"00000000-0000-0000-0000-{i:012d}", vecs[i],
                             {"owner_identity": f"o{i % 3}", "visibility": "global" if i % 2 else "private",
                              "source_filename": f"o{i % 3}/f{i}", "i": i}) for i in range(60)])
    assert store.count("c") == 60
    q = vecs[7]
    hits = store.search("c", q, 5, exact=True)
    expected = np.argsort(-(vecs @ q), kind="stable")[:5]
    assert [h.payload["i"] for h in hits] == expected.tolist()
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)
    flt = Filter(should=(Cond("visibility", "global"), Cond("owner_identity", "o0")))
    allowed = [i for i in range(60) if i % 2 or i % 3 == 0]
    fh = store.search("c", q, 10, flt=flt, exact=True)
    assert len(fh) == 10 and all(h.payload["i"] in allowed for h in fh)
    ref = sorted(allowed, key=lambda i: -float(vecs[i] @ q))[:10]
    assert [h.payload["i"] for h in fh] == ref
    assert store.count("c", flt) == len(allowed)
    store.delete("c", Filter(must=(Cond("owner_identity", "o1"),)))
    assert store.count("c") == 40
    assert sorted(p.payload["i"] for p in store.scroll("c", flt=Filter(must=(Cond("owner_identity", "o2"),)))) \
        == list(range(2, 60, 3))


def test_collection_records_the_embedder(store):
    meta = store.ensure_collection("kb", dim=384, embedder_id="minilm", normalized=True)
    assert (meta.embedder_id, meta.dim, meta.normalized) == ("minilm", 384, True)
    again = store.collection_meta("kb")
    assert (again.embedder_id, again.dim) == ("minilm", 384)
    with pytest.raises(EmbedderMismatchError, match="built with embedder 'minilm'.*'mpnet'"):
        store.ensure_collection("kb", dim=768, embedder_id="mpnet", normalized=True)
    with pytest.raises(EmbedderMismatchError):  # same width, different model: still refused
        store.ensure_collection("kb", dim=384, embedder_id="sentence-transformers:/x", normalized=True)


def test_edge_store_persists_across_reopen(tmp_path):
    rng = np.random.default_rng(1)
    vecs = _unit(rng, 20, 8)
    s = EdgeStore(tmp_path / "d")
    s.ensure_collection("c", dim=8, embedder_id="toy")
    s.upsert("c", [Point(f"00000000-0000-0000-0000-{i:012d}", vecs[i], {"i": i}) for i in range(20)])
    before = [(h.id, round(h.score, 6)) for h in s.search("c", vecs[3], 5, exact=True)]
    s.close()
    s2 = EdgeStore(tmp_path / "d")
    assert s2.count("c") == 20
    assert [(h.id, round(h.score, 6)) for h in s2.search("c", vecs[3], 5, exact=True)] == before
    s2.close()
