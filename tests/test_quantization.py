"""Binary quantization (``store.quantization=binary``: one-bit codes, queries as 8-bit scalars;
``binary_symmetric``: queries binarised too) on both engines, on a collection small enough to check
by hand.

The collection: the 32 sign patterns ``S`` of a 16 x 16 Hadamard matrix and its negation (any two
differ in 8 or 16 of the 16 signs), each stored twice with different magnitudes,
``a_i = S_i * (3, 1, ..., 1) / sqrt(24)`` and ``b_i = S_i * (1, ..., 1, 3) / sqrt(24)``. A one-bit
code keeps only the signs, so ``a_i`` and ``b_i`` have the same code, and for the query ``a_0``:

- exact cosines: ``a_0`` 1, ``b_0`` (3 + 14 + 3) / 24 = 5/6, every other point at most 1/3
  (8 signs differ: (24 - 2 * 8) / 24 when none of them is a weight-3 component);
- binary codes alone (no rescoring): ``a_0`` and ``b_0`` get one score (it cannot tell them
  apart); with the query binarised too, agreeing minus disagreeing bits: 16 for both, 16 - 2 * 8 = 0
  for the rest;
- with rescoring the candidates the codes preselect get their exact cosines back; with
  ``quantization_oversampling`` 16 a limit of 4 preselects all 64 points, so the top 4 are the
  exact top 4.

``a_0`` is private to ``o1``; everything else is global: a requester ``o2`` must never see it.
"""

from __future__ import annotations

import json
import uuid

import numpy as np
import pytest

from adiyan.config import ConfigError, load_settings
from adiyan.kb import access_filter
from adiyan.store import EdgeStore, Point, ServerStore, StoreError, open_store


def _collection() -> tuple[np.ndarray, np.ndarray]:
    from scipy.linalg import hadamard

    h = hadamard(16).astype(np.float32)
    signs = np.concatenate([h, -h])
    wa, wb = np.ones(16, np.float32), np.ones(16, np.float32)
    wa[0], wb[-1] = 3.0, 3.0
    return signs * wa / np.sqrt(24.0), signs * wb / np.sqrt(24.0)


def _fill(store) -> np.ndarray:
    a, b = _collection()
    store.ensure_collection("c", dim=16, embedder_id="hadamard")
    pts = []
    for i in range(32):
        pts.append(Point(str(uuid.UUID(int=2 * i + 1)), a[i], {
            "name": f"a{i}", "owner_identity": "o1" if i == 0 else "o3", "visibility": "private" if i == 0 else "global"}))
        pts.append(Point(str(uuid.UUID(int=2 * i + 2)), b[i], {"name": f"b{i}", "owner_identity": "o3",
                                                               "visibility": "global"}))
    store.upsert("c", pts)
    store.optimize("c")
    return a


def _edge(tmp_path, name: str, quantization: str = "binary", **kw) -> EdgeStore:
    # indexing_threshold_kb=1: the 64 points (4 KB of float32) are quantized; by default a segment
    # is quantized from ~10 MB on
    return EdgeStore(tmp_path / name, quantization=quantization, indexing_threshold_kb=1, **kw)


@pytest.mark.parametrize("quantization", ["binary", "binary_symmetric"])
def test_edge_binary_codes_cannot_tell_same_signs_apart_and_rescoring_can(tmp_path, quantization):
    s = _edge(tmp_path, "norescore", quantization, quantization_rescore=False)
    a = _fill(s)
    hits = s.search("c", a[0], 4)
    assert {h.payload["name"] for h in hits[:2]} == {"a0", "b0"}
    assert hits[0].score == hits[1].score > hits[2].score  # one code, one score: the signs are all it has
    assert abs(hits[0].score - 1.0) > 1e-3  # not the cosine of either
    if quantization == "binary_symmetric":  # the query binarised too: agreeing minus disagreeing bits
        assert [h.score for h in hits] == [16.0, 16.0, 0.0, 0.0]
    exact = s.search("c", a[0], 2, exact=True)  # exact search reads the float32 originals
    assert [h.payload["name"] for h in exact] == ["a0", "b0"]
    assert [h.score for h in exact] == pytest.approx([1.0, 5 / 6], abs=1e-6)
    usage = s.disk_usage("c")
    codes = sum(f.stat().st_size for f in (s.root / "c").rglob("quantized.data"))
    s.close()
    # one bit a component, stored in 128-bit words: 16 bytes a point, 64 points (beside them small JSON
    # files; for 8-bit queries per-component statistics)
    assert codes == 64 * 16 and usage["quantized"] < codes + 4096
    assert usage["dense_vectors"] >= 64 * 16 * 4  # the float32 originals are kept for rescoring

    r = _edge(tmp_path, "rescore", quantization, quantization_rescore=True)
    _fill(r)
    hits = r.search("c", a[0], 4)
    assert [h.payload["name"] for h in hits[:2]] == ["a0", "b0"]
    assert [h.score for h in hits[:2]] == pytest.approx([1.0, 5 / 6], abs=1e-6)
    for h in hits:  # every returned score is the exact cosine of its point
        i = int(h.payload["name"][1:])
        want = float((a if h.payload["name"][0] == "a" else _collection()[1])[i] @ a[0])
        assert h.score == pytest.approx(want, abs=1e-6)
    r.close()


def test_edge_binary_oversampling_preselects_more_candidates(tmp_path):
    """Oversampling 16 x limit 4 = all 64 points preselected: the rescored top 4 is the exact top 4
    (recall against exact search, by score: the points at 1/3 tie)."""
    s = _edge(tmp_path, "over", quantization_oversampling=16.0)
    a = _fill(s)
    exact = [h.score for h in s.search("c", a[0], 4, exact=True)]
    assert exact == pytest.approx([1.0, 5 / 6, 1 / 3, 1 / 3], abs=1e-6)
    assert [h.score for h in s.search("c", a[0], 4)] == pytest.approx(exact, abs=1e-6)
    s.close()


@pytest.mark.parametrize("engine", ["edge", "local"])
def test_binary_collection_records_its_quantization_and_keeps_the_access_filter(tmp_path, engine):
    s = _edge(tmp_path, "e") if engine == "edge" else ServerStore(path=str(tmp_path / "ql"), quantization="binary")
    a = _fill(s)
    assert s.collection_meta("c").extra["quantization"] == "binary"
    if engine == "edge":  # the engine's own record of the collection
        cfg = json.loads((s.root / "c" / "edge_config.json").read_text())
        assert cfg["vectors"][""]["quantization_config"] == {"binary": {
            "always_ram": True, "encoding": "one_bit", "query_encoding": "scalar8bits"}}
    flt = access_filter("o2")
    for q in np.concatenate(_collection()):
        hits = s.search("c", q, 10, flt=flt)
        assert hits and all(h.payload["visibility"] == "global" for h in hits)
    top = s.search("c", a[0], 2, flt=flt)
    assert top[0].payload["name"] == "b0" and top[0].score == pytest.approx(5 / 6, abs=1e-6)
    # o1 sees its own a_0 (limit 2: with one candidate the codes could preselect b_0, their tie)
    assert s.search("c", a[0], 2, flt=access_filter("o1"))[0].payload["name"] == "a0"
    s.close()
    # a collection keeps the quantization it was built with: opening it with another is refused by name
    other = EdgeStore(tmp_path / "e") if engine == "edge" else ServerStore(path=str(tmp_path / "ql"))
    with pytest.raises(StoreError, match=r"built with store.quantization=binary.*opened with store.quantization=none"):
        other.ensure_collection("c", dim=16, embedder_id="hadamard")
    other.close()


class _Spy:
    """Test double for control flow only: wraps a local-mode QdrantClient and records the
    collection config and search params the server engine sends (local mode ignores both)."""

    def __init__(self, client):
        self.client, self.created, self.params = client, [], []

    def __getattr__(self, name):
        return getattr(self.client, name)

    def create_collection(self, *args, **kwargs):
        self.created.append(kwargs)
        return self.client.create_collection(*args, **kwargs)

    def query_points(self, *args, **kwargs):
        self.params.append(kwargs.get("search_params") or [p.params for p in kwargs.get("prefetch") or []])
        return self.client.query_points(*args, **kwargs)


def test_server_engine_sends_binary_quantization_and_its_search_params(tmp_path):
    from qdrant_client import models as m

    s = ServerStore(path=str(tmp_path / "ql"), quantization="binary", quantization_rescore=True,
                    quantization_oversampling=3.0, indexing_threshold_kb=5)
    s.client = spy = _Spy(s.client)
    a = _fill(s)
    sent = spy.created[0]
    assert sent["quantization_config"] == m.BinaryQuantization(binary=m.BinaryQuantizationConfig(
        always_ram=True, encoding=m.BinaryQuantizationEncoding.ONE_BIT,
        query_encoding=m.BinaryQuantizationQueryEncoding.SCALAR8BITS))
    assert sent["optimizers_config"] == m.OptimizersConfigDiff(indexing_threshold=5)
    assert sent["metadata"]["adiyan"]["extra"]["quantization"] == "binary"
    hits = s.search("c", a[0], 2, ef=64)
    assert [h.payload["name"] for h in hits] == ["a0", "b0"]  # local mode is exact: the stand-in's answer
    assert spy.params[-1] == m.SearchParams(hnsw_ef=64, exact=False, quantization=m.QuantizationSearchParams(
        ignore=False, rescore=True, oversampling=3.0))
    s.close()


def test_oversampling_without_quantization_is_refused_by_name(tmp_path):
    with pytest.raises(ConfigError, match="quantization_oversampling"):
        load_settings(None, {"store.quantization_oversampling": 0.5}, environ={})
    settings = load_settings(None, {"store.quantization_oversampling": 2.0, "paths.data_dir": str(tmp_path)},
                             environ={})
    with pytest.raises(StoreError, match=r"store.quantization_oversampling=2.0 has nothing to act on"):
        open_store(settings)
