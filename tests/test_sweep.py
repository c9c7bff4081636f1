"""Sweeps: grid expansion, stable point ids, resume, gathered table, offline index, notebook hygiene.

The execution tests run a tiny notebook written into tmp_path (a few seconds each on the
project's kernel); the real notebooks are exercised by `invoke sweep NAME` and
benchmarks/sweep_cost.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import numpy as np
import pytest

from adiyan import sweep as S

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------- grid and ids


def test_expand_grid_is_the_product_first_key_slowest():
    got = S.expand_grid({"a": [1, 2], "b": ["x", "y", "z"], "c": 7})
    assert got == [
        {"a": 1, "b": "x", "c": 7}, {"a": 1, "b": "y", "c": 7}, {"a": 1, "b": "z", "c": 7},
        {"a": 2, "b": "x", "c": 7}, {"a": 2, "b": "y", "c": 7}, {"a": 2, "b": "z", "c": 7},
    ]


def test_expand_grid_list_of_mappings_is_a_union_without_repeats():
    got = S.expand_grid([{"mode": ["dense", "bm25"], "k": 4}, {"mode": "hybrid", "rrf": [10, 60], "k": 4},
                         {"mode": "dense", "k": 4}])
    assert got == [{"mode": "dense", "k": 4}, {"mode": "bm25", "k": 4},
                   {"mode": "hybrid", "rrf": 10, "k": 4}, {"mode": "hybrid", "rrf": 60, "k": 4}]
    assert S.expand_grid({}) == [{}]


def test_point_id_is_stable_readable_and_distinct():
    a = S.point_id({"retrieval.kb_top_k": 4, "chunking.size": 800})
    b = S.point_id({"chunking.size": 800, "retrieval.kb_top_k": 4})  # key order does not matter
    assert a == b
    assert a.startswith("size-800__kb_top_k-4--") and re.fullmatch(r"[A-Za-z0-9_.+-]+", a)
    assert S.point_id({"retrieval.kb_top_k": 8, "chunking.size": 800}) != a
    assert S.point_id({"x": "a/b c"}) != S.point_id({"x": "a-b-c"})  # the hash sees the real value
    assert a == S.point_id({"retrieval.kb_top_k": 4, "chunking.size": 800})  # deterministic across calls


def test_expand_splits_settings_overrides_from_notebook_parameters():
    spec = S.SweepSpec.from_dict({"notebook": "nb.ipynb", "parameters": {"k": 10},
                                  "overrides": {"eval.generate": False},
                                  "grid": {"store.hnsw_ef": [16, 64], "access_filter": [False, True]}})
    pts = S.expand(spec)
    assert len(pts) == 4
    p = pts[1]
    assert p.params == {"store.hnsw_ef": 16, "access_filter": True}
    assert p.overrides == {"eval.generate": False, "store.hnsw_ef": 16}
    assert p.notebook_params["access_filter"] is True and p.notebook_params["k"] == 10
    assert p.notebook_params["overrides"] == p.overrides
    with pytest.raises(S.SweepError, match="unknown key"):
        S.SweepSpec.from_dict({"notebook": "x.ipynb", "grdi": {}})


def test_every_shipped_sweep_loads_and_its_notebook_has_a_parameters_cell():
    from adiyan.config import load_settings

    specs = sorted((ROOT / "sweeps").glob("*.yaml"))
    assert {p.stem for p in specs} >= {"topk", "hnsw", "recency", "chunking", "dims", "context"}
    for path in specs:
        spec = S.load_spec(path)
        points = S.expand(spec)
        assert points, path
        nb = nbformat.read(str(ROOT / spec.notebook), as_version=4)
        tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(tagged) == 1, f"{spec.notebook}: needs exactly one cell tagged parameters"
        for p in points:  # every point's settings resolve (invalid keys fail before anything runs)
            load_settings(None, p.overrides, environ={})
        if spec.baseline:
            assert S.baseline_point(spec, points) is not None


def test_notebooks_only_call_the_library():
    allowed = {"adiyan", "matplotlib", "pandas", "numpy", "IPython"}  # IPython: display only
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = nbformat.read(str(path), as_version=4)
        assert any("parameters" in c.metadata.get("tags", []) for c in nb.cells), path
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            for mod in re.findall(r"^\s*(?:from|import)\s+([A-Za-z_][\w]*)", cell.source, flags=re.M):
                assert mod in allowed | {"json", "os", "pathlib"}, f"{path.name} imports {mod}"


# ---------------------------------------------------------------------------- statistics and helpers


def test_pareto_front_by_hand():
    xs = [1, 2, 3, 4, 2]  # cost, lower is better
    ys = [0.5, 0.8, 0.8, 0.9, 0.6]  # quality, higher is better
    assert S.pareto_front(xs, ys, x_lower=True, y_lower=False) == [0, 1, 3]
    assert S.pareto_front([1, 1], [1, 1]) == [0, 1]  # equal points do not dominate each other


def test_holm_adjustment_by_hand():
    adj = S._holm({"a": 0.01, "b": 0.04, "c": 0.03})
    assert adj == pytest.approx({"a": 0.03, "c": 0.06, "b": 0.06})


def test_direction_of_metrics():
    for m in ("hit_rate", "mrr", "ndcg@10", "recall@10", "correction_hit@1", "stable_hit@1", "keyword_recall"):
        assert not S.lower_is_better(m), m
    for m in ("p50_ms", "retrieve_ms", "index_build_s", "context_tokens", "stale_rate", "private_returned"):
        assert S.lower_is_better(m), m


def test_record_validates_and_is_a_noop_without_output_dir(tmp_path):
    assert S.record(None, {"a": 1.0}) is None
    with pytest.raises(TypeError):
        S.record(tmp_path, {"a": "high"})
    with pytest.raises(ValueError):
        S.record(tmp_path, S.PointResult({"a": 1.0}, [{"score": 1.0}]))
    p = S.record(tmp_path, S.PointResult({"a": np.float32(0.5), "b": float("nan")}, [{"qid": "q1", "s": 1}]))
    data = json.loads(p.read_text())
    assert data["metrics"] == {"a": 0.5, "b": None} and data["per_question"] == [{"qid": "q1", "s": 1}]


class _FakeEmbedder:
    id, dim, normalized = "fake", 6, True

    def __init__(self):
        from adiyan.cache import CacheStats

        self.stats = CacheStats()
        rng = np.random.default_rng(0)
        self.raw = rng.standard_normal((3, 6)).astype(np.float32)

    def prefix(self, kind):
        return ""

    def describe(self):
        return {"id": self.id}

    def embed(self, texts, kind="document"):
        v = self.raw[: len(texts)]
        return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_truncated_embedder_equals_truncate_then_normalise():
    base = _FakeEmbedder()
    t = S.TruncatedEmbedder(base, 4)
    assert t.id == "fake@4" and t.dim == 4
    want = base.raw[:, :4] / np.linalg.norm(base.raw[:, :4], axis=1, keepdims=True)
    np.testing.assert_allclose(t.embed(["a", "b", "c"]), want, rtol=1e-5, atol=1e-6)
    assert S.TruncatedEmbedder(base, 6).id == "fake"


def test_engine_int8_quantization_is_real_and_rescoring_undoes_it(tmp_path):
    """Qdrant's scalar int8 quantization in the embedded engine: with rescoring off the scores
    are the int8 approximations (off by more than float rounding, under 0.05), with it on they
    are exact float32 again; the codes exist on disk (a quarter of the float32 vector bytes)."""
    import uuid

    from adiyan.store import EdgeStore
    from adiyan.store.base import Point

    rng = np.random.default_rng(0)
    X = rng.standard_normal((2000, 64)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    Q = X[:20] + 0.3 * rng.standard_normal((20, 64)).astype(np.float32)
    Q /= np.linalg.norm(Q, axis=1, keepdims=True)
    errs = {}
    for quant, rescore in [("none", False), ("int8", False), ("int8", True)]:
        store = EdgeStore(tmp_path / f"{quant}-{rescore}", quantization=quant, quantization_rescore=rescore,
                          indexing_threshold_kb=1)
        store.ensure_collection("c", dim=64, embedder_id="random")
        store.upsert("c", [Point(str(uuid.UUID(int=i)), X[i], {"i": i}) for i in range(len(X))])
        store.optimize("c")
        worst, recall = 0.0, []
        for q in Q:
            hits = store.search("c", q, 10, ef=256)
            worst = max(worst, max(abs(h.score - float(X[h.payload["i"]] @ q)) for h in hits))
            recall.append(len({h.payload["i"] for h in hits} & set(np.argsort(-(X @ q))[:10])) / 10)
        usage = store.disk_usage("c")
        store.close()
        errs[(quant, rescore)] = worst
        assert np.mean(recall) >= 0.9, (quant, rescore, np.mean(recall))
        assert 2000 * 64 * 4 <= usage["dense_vectors"] < 2000 * 64 * 4 * 1.1  # the float32 matrix is kept
        if quant == "int8":
            assert 2000 * 64 <= usage["quantized"] < 2000 * 64 * 1.1  # one byte a component, plus headers
        else:
            assert usage["quantized"] == 0
    assert errs[("none", False)] < 1e-5 and errs[("int8", True)] < 1e-5
    assert 1e-4 < errs[("int8", False)] < 0.05, errs


def test_memory_evalset_is_consistent():
    es = S.memory_evalset()
    by_id = {m["id"]: m for m in es.memories}
    assert len(by_id) == len(es.memories)
    kinds = {q["kind"] for q in es.questions}
    assert kinds == {"correction", "stable"}
    for q in es.questions:
        exp = by_id[q["expected"]]
        assert exp["user"] == q["user"]
        if q["superseded"]:  # a correction is newer than what it corrects
            assert by_id[q["superseded"]]["age_days"] > exp["age_days"]
    assert es.content_hash() == S.memory_evalset().content_hash()


# ---------------------------------------------------------------------------- execution (tiny notebook)

TINY_PARAMS = """x = 1
label = "a"
overrides = {}
config_file = None
output_dir = None
point_id = None"""

TINY_WORK = """from adiyan import sweep
import matplotlib.pyplot as plt
if label == "boom":
    raise RuntimeError("boom")
plt.plot([0, 1], [0, x])
result = sweep.PointResult({"y": 2.0 * x, "cost_ms": 10.0 * x},
                           [{"qid": f"q{i}", "score": float(i < x)} for i in range(6)])
sweep.record(output_dir, result)"""


def _tiny_spec(tmp_path: Path, grid, **extra) -> S.SweepSpec:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "adiyan", "display_name": "Python (adiyan)", "language": "python"}
    params = nbformat.v4.new_code_cell(TINY_PARAMS)
    params.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell("# tiny"), params, nbformat.v4.new_code_cell(TINY_WORK)]
    path = tmp_path / "tiny.ipynb"
    nbformat.write(nb, str(path))
    return S.SweepSpec.from_dict({"notebook": str(path), "grid": grid, "name": "tiny",
                                  "frontier": {"x": "cost_ms", "y": "y"}, **extra}, source="test")


def _run(spec, tmp_path, **kw):
    return S.run_sweep(spec, out_dir=tmp_path / "out", cwd=ROOT, progress=False, **kw)


def test_sweep_runs_gathers_and_writes_an_offline_index(tmp_path):
    import pandas as pd

    spec = _tiny_spec(tmp_path, {"x": [1, 2, 3]}, baseline={"x": 1})
    res = _run(spec, tmp_path)
    assert res.ran == [S.point_id({"x": v}) for v in (1, 2, 3)] and not res.reused and not res.failed
    runs = pd.read_parquet(tmp_path / "out" / "runs.parquet")
    assert len(runs) == 3 and list(runs["x"]) == [1, 2, 3]
    assert list(runs["y"]) == [2.0, 4.0, 6.0] and list(runs["status"]) == ["ok"] * 3
    for pid in res.points:  # every point: executed notebook, its HTML, its config, the marker
        d = tmp_path / "out" / "points" / pid
        for f in ("notebook.ipynb", "notebook.html", "config.yaml", "params.json", "point.json", S.MARKER):
            assert (d / f).is_file(), (pid, f)
        executed = nbformat.read(str(d / "notebook.ipynb"), as_version=4)
        assert any("injected-parameters" in c.metadata.get("tags", []) for c in executed.cells)
    pq = pd.read_parquet(tmp_path / "out" / "per_question.parquet")
    assert set(pq["metric"]) == {"score"} and len(pq) == 18
    html = (tmp_path / "out" / "index.html").read_text()
    assert html.count("<svg") >= 2  # metric-vs-parameter and frontier plots, inline
    for bad in ("<script", "<link", "<img", "@import", 'src="http', "src='http", 'href="http', "url(http"):
        assert bad not in html, bad
    assert "Paired tests against the baseline" in html and "Pareto" in html
    sig = json.loads((tmp_path / "out" / "significance.json").read_text())
    assert sig["baseline"] == S.point_id({"x": 1}) and set(sig["metrics"]["score"]) == set(res.points[1:])
    page = (tmp_path / "out" / "points" / res.points[0] / "notebook.html").read_text()
    assert "<script" not in page and 'src="http' not in page


def test_resume_runs_only_unfinished_points(tmp_path):
    spec = _tiny_spec(tmp_path, {"x": [1, 2, 3]})
    points = S.expand(spec)
    first = tmp_path / "out" / "points" / points[0].id
    first.mkdir(parents=True)  # point 1 finished in an earlier (killed) run
    S.record(first, S.PointResult({"y": -1.0, "cost_ms": 1.0}, [{"qid": "q0", "score": 0.0}]))
    S.mark_complete(first, S.point_fingerprint(spec, points[0]))
    half = tmp_path / "out" / "points" / points[1].id
    half.mkdir(parents=True)  # point 2 was killed midway: files but no marker
    (half / "notebook.ipynb").write_text("partial")
    res = _run(spec, tmp_path)
    assert res.reused == [points[0].id] and res.ran == [points[1].id, points[2].id]
    assert not (first / "notebook.ipynb").exists()  # not executed again
    assert S.is_complete(half) and (half / "notebook.html").is_file()
    import pandas as pd

    runs = pd.read_parquet(tmp_path / "out" / "runs.parquet")
    assert list(runs["y"]) == [-1.0, 4.0, 6.0]  # the finished point's recorded result is kept
    again = _run(spec, tmp_path)
    assert again.ran == [] and len(again.reused) == 3
    spec2 = _tiny_spec(tmp_path, {"x": [1, 2, 3]})  # same notebook code: same fingerprints
    assert [S.point_fingerprint(spec2, p) for p in S.expand(spec2)] == \
           [S.point_fingerprint(spec, p) for p in points]
    spec.overrides = {"seed": 3}  # a changed setting changes every fingerprint
    assert S.point_fingerprint(spec, S.expand(spec)[0]) != S.point_fingerprint(spec2, points[0])


def test_failed_point_is_reported_and_the_others_finish(tmp_path):
    spec = _tiny_spec(tmp_path, {"label": ["ok", "boom"]}, engine="papermill")
    with pytest.raises(S.SweepError, match="boom"):
        _run(spec, tmp_path)
    ok, boom = [tmp_path / "out" / "points" / p.id for p in S.expand(spec)]
    assert S.is_complete(ok) and not S.is_complete(boom) and (boom / S.FAILED).is_file()
    assert (boom / "notebook.html").is_file()  # the traceback is kept, as HTML too
    html = (tmp_path / "out" / "index.html").read_text()
    assert "Failed points" in html


def test_a_run_eval_notebook_is_read_through_its_metrics_json(tmp_path):
    """evaluate.ipynb records nothing itself: the point's metrics come from the run_eval folder inside it."""
    run = tmp_path / "reports" / "20250101-000000-abcdef"
    run.mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps({
        "metrics": {"retrieval": {"hit_rate@4": 0.75, "mrr@4": 0.5}, "privacy": {"probes_leaked": 0}},
        "timings": {"total_s": 3.5}}))
    (run / "questions.jsonl").write_text(
        json.dumps({"id": "q1", "hit": True, "reciprocal_rank": 1.0, "keyword_hit": None}) + "\n" +
        json.dumps({"id": "q2", "hit": False, "reciprocal_rank": 0.0, "keyword_hit": True}) + "\n")
    data = S.read_point(tmp_path)
    assert data["metrics"] == {"retrieval.hit_rate@4": 0.75, "retrieval.mrr@4": 0.5, "privacy.probes_leaked": 0,
                               "timings.total_s": 3.5}
    assert data["per_question"] == [{"qid": "q1", "hit": 1.0, "reciprocal_rank": 1.0},
                                    {"qid": "q2", "hit": 0.0, "reciprocal_rank": 0.0, "keyword_hit": 1.0}]


def test_chunking_cost_bypasses_the_cache_and_counts_the_index_chunks(tmp_path):
    """cold_* figures come from the model itself (the cache sees no call) on exactly the chunks
    the index holds."""
    from adiyan.config import load_settings
    from tests.conftest import MODEL_DIR

    s = load_settings(environ={}, overrides={"paths.data_dir": str(tmp_path / "d"), "paths.cache_dir": str(tmp_path / "c"),
                                              "paths.models_dir": str(MODEL_DIR),
                                              "eval.evalset": str(ROOT / "evalsets" / "adiyan_basic")})
    h = S.open_sweep_kb(s)
    emb = S.sweep_embedder(s)
    before = (emb.stats.hits, emb.stats.misses)
    cost = S.chunking_cost(s)
    assert (emb.stats.hits, emb.stats.misses) == before
    assert cost["cost_chunks"] == h.build["n_chunks"] and cost["cost_documents"] == len(h.evalset.documents)
    assert cost["cold_index_s"] == pytest.approx(cost["cold_chunking_s"] + cost["cold_embed_s"])
