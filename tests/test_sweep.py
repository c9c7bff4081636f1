"""Sweeps and experiments: grid expansion, stable point ids, resume, gathered table, offline
index, directions from the metric registry, the memory evalset as data, notebook hygiene.

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

from adiyan import sweeps as S
from adiyan import metrics as M
from adiyan.experiments import common as C
from adiyan.experiments import dims as D
from adiyan.experiments import memory as MEM
from adiyan.sweeps import gather as G
from adiyan.sweeps.run import write_outputs

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
    adj = G.holm({"a": 0.01, "b": 0.04, "c": 0.03})
    assert adj == pytest.approx({"a": 0.03, "c": 0.06, "b": 0.06})


def test_direction_of_metrics_comes_from_the_registry():
    """Every metric a shipped experiment records has a registered direction; the three the old
    name-fragment guess got wrong ("_s" in rouge_score, non_llm_string_similarity,
    principles_holding_share) are higher-is-better. A run metric a point records is the run's
    own entry (``retrieval.hit_rate@k`` is retrieval/hit_rate@{k})."""
    for m in ("retrieval.hit_rate@k", "mrr", "retrieval.ndcg@10", "recall@10", "correction_hit@1", "stable_hit@1",
              "answer.keyword_recall", "incidents.principles_holding_share", "incidents.3_stale_fact_holds",
              "engine_recall@10", "hit@1", "hit", "rr", "reciprocal_rank"):
        assert M.direction(*C.registry_key(m)) == M.HIGHER, m
    for m in ("p50_ms", "retrieve_ms", "index_build_s", "context_tokens", "stale_rate", "private_returned",
              "bytes_per_vector", "search_ms", "latency_ms", "stale"):
        assert M.direction("sweep", m) == M.LOWER, m
    for m in ("n_chunks", "mean_chunk_chars", "truncated_share", "abstained"):  # counts, sizes, two-sided
        assert M.direction("sweep", m) == M.NEUTRAL, m
    assert M.direction("ragas", "rouge_score") == M.HIGHER
    assert M.direction("ragas", "non_llm_string_similarity") == M.HIGHER
    assert M.direction("timings", "total_s") == M.LOWER
    with pytest.raises(M.UnregisteredMetric, match="sweep/cost_ms"):
        M.direction("sweep", "cost_ms")


def test_every_metric_a_shipped_sweep_names_is_registered():
    for path in sorted((ROOT / "sweeps").glob("*.yaml")):
        spec = S.load_spec(path)
        named = list(spec.metrics) + [v for v in (spec.frontier or {}).values()] + list(spec.paired)
        for m in named:  # group.name of a run group is that run metric, anything else an experiment's own
            M.lookup(*C.registry_key(m))


def test_no_sweep_entry_copies_a_run_metric():
    """A point records a run metric under the run's name: no ``sweep`` entry renames a scorer's
    metric (the second entries hit_rate, rouge_score, private_leaked... are gone)."""
    scored = {m.name for block in M.SCORED.values() for m in block}
    copies = sorted(m.name for m in M.REGISTRY if m.group == C.METRIC_GROUP and m.name in scored)
    assert not copies, copies
    for gone in ("hit_rate", "private_leaked", "rouge_score", "keyword_recall", "principles_holding_share",
                 "hit_rate_rewrite", "agent_keyword_recall", "memory_recall@5"):
        with pytest.raises(M.UnregisteredMetric):
            M.lookup(C.METRIC_GROUP, gone)


def test_record_validates_and_is_a_noop_without_output_dir(tmp_path):
    hr = "retrieval.hit_rate@k"  # the run's name at the point's own k
    assert C.record(None, {hr: 1.0}) is None
    with pytest.raises(TypeError):
        C.record(tmp_path, {hr: "high"})
    with pytest.raises(ValueError):
        C.record(tmp_path, C.PointResult({hr: 1.0}, [{"hit": 1.0}]))
    with pytest.raises(M.UnregisteredMetric, match="cost_ms"):  # an undeclared metric fails in the notebook
        C.record(tmp_path, {hr: 1.0, "cost_ms": 3.0})
    with pytest.raises(M.UnregisteredMetric, match="hit_rate"):  # so does the old renamed copy
        C.record(tmp_path, {"hit_rate": 1.0})
    with pytest.raises(M.UnregisteredMetric, match="score"):  # and so does an undeclared per-question score
        C.record(tmp_path, C.PointResult({hr: 1.0}, [{"qid": "q1", "score": 1.0, "kind": "lookup"}]))
    assert not (tmp_path / C.POINT_FILE).exists()
    p = C.record(tmp_path, C.PointResult({hr: np.float32(0.5), "mrr": float("nan")},
                                         [{"qid": "q1", "hit": 1, "kind": "lookup"}]))
    data = json.loads(p.read_text())
    assert data["metrics"] == {hr: 0.5, "mrr": None}
    assert data["per_question"] == [{"qid": "q1", "hit": 1, "kind": "lookup"}]


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
    t = D.TruncatedEmbedder(base, 4)
    assert t.id == "fake@4" and t.dim == 4
    want = base.raw[:, :4] / np.linalg.norm(base.raw[:, :4], axis=1, keepdims=True)
    np.testing.assert_allclose(t.embed(["a", "b", "c"]), want, rtol=1e-5, atol=1e-6)
    assert D.TruncatedEmbedder(base, 6).id == "fake"


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
    es = MEM.memory_evalset()
    by_id = {m["id"]: m for m in es.memories}
    assert len(by_id) == len(es.memories)
    kinds = {q["kind"] for q in es.questions}
    assert kinds == {"correction", "stable"}
    for q in es.questions:
        exp = by_id[q["expected"]]
        assert exp["user"] == q["user"]
        if q["superseded"]:  # a correction is newer than what it corrects
            assert by_id[q["superseded"]]["age_days"] > exp["age_days"]
    assert es.content_hash() == MEM.memory_evalset().content_hash()


# The content hash of the memory evalset when it was a Python literal in adiyan/sweep.py (version
# 1), computed from that literal before it was deleted: the data under evalsets/memory/ must load
# to exactly the same rows (and so the same memory store key).
MEMORY_V1_HASH = "3c151509f4beeea65a92b17e7f69fa034eaecf8d10e58a3fd087ad428c4a308b"


def test_memory_evalset_data_equals_the_former_literal():
    es = MEM.load_memory_evalset(ROOT / "evalsets" / "memory")
    assert es.content_hash() == MEMORY_V1_HASH
    assert (es.version, es.now, len(es.memories), len(es.questions)) == (1, "2025-06-30T12:00:00+00:00", 62, 28)
    by_id = {m["id"]: m for m in es.memories}
    assert by_id["m-flight-c"] == {"id": "m-flight-c", "user": "mira", "age_days": 6,
                                   "created_at": "2025-06-24T12:00:00+00:00",
                                   "text": "Change of plan: the airline rebooked me, I now fly out on the 14th in the afternoon."}
    assert es.questions[-1] == {"qid": "q-hours", "user": "office", "question": "What time does the office close?",
                                "expected": "o-hours-c", "superseded": "o-hours", "kind": "correction"}
    assert sum(q["kind"] == "correction" for q in es.questions) == 10  # 3 + 3 + 4 in the literal


def test_memory_evalset_loader_rejects_inconsistent_rows(tmp_path):
    src = ROOT / "evalsets" / "memory"
    for f in ("manifest.yaml", "memories.jsonl", "questions.jsonl"):
        (tmp_path / f).write_text((src / f).read_text(encoding="utf-8"), encoding="utf-8")
    rows = (tmp_path / "questions.jsonl").read_text(encoding="utf-8").replace('"kind": "correction"', '"kind": "stable"', 1)
    (tmp_path / "questions.jsonl").write_text(rows, encoding="utf-8")
    with pytest.raises(ValueError, match="kind 'stable' does not match"):
        MEM.load_memory_evalset(tmp_path)


def test_experiments_that_bypass_the_pipeline_refuse_retrieval_settings(tmp_path):
    """The hnsw experiment searches raw vector sets and the memory experiment mem0: neither can
    honour a retrieval.* setting, so each refuses it by name before doing anything."""
    from adiyan.config import load_settings
    from adiyan.experiments import hnsw
    from adiyan.retrieval.pipeline import UnsupportedSetting

    def settings(**kw):
        return load_settings(None, {"paths.data_dir": str(tmp_path / "d"), "paths.cache_dir": str(tmp_path / "c"),
                                    **kw}, environ={})

    with pytest.raises(UnsupportedSetting, match=r"retrieval.rerank=True is not honoured by the hnsw experiment"):
        hnsw.vector_set("synthetic-1000", settings(**{"retrieval.rerank": True}))
    with pytest.raises(UnsupportedSetting, match=r"retrieval.kb_top_k=8 is not honoured by the memory experiment"):
        MEM.evaluate_memory(settings(**{"retrieval.kb_top_k": 8}))
    vs = hnsw.vector_set("synthetic-1000", settings(), n_queries=5)  # defaults are fine
    assert vs.vectors.shape == (1000, 384) and len(vs.queries) == 5


# ---------------------------------------------------------------------------- execution (tiny notebook)

TINY_PARAMS = """x = 1
label = "a"
overrides = {}
config_file = None
output_dir = None
point_id = None"""

TINY_WORK = """from adiyan.experiments.common import PointResult, record
import matplotlib.pyplot as plt
if label == "boom":
    raise RuntimeError("boom")
plt.plot([0, 1], [0, x])
result = PointResult({"retrieval.hit_rate@k": x / 4, "retrieve_ms": 10.0 * x},
                     [{"qid": f"q{i}", "hit": float(i < x)} for i in range(6)])
record(output_dir, result)"""


def _tiny_spec(tmp_path: Path, grid, **extra) -> S.SweepSpec:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "adiyan", "display_name": "Python (adiyan)", "language": "python"}
    params = nbformat.v4.new_code_cell(TINY_PARAMS)
    params.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell("# tiny"), params, nbformat.v4.new_code_cell(TINY_WORK)]
    path = tmp_path / "tiny.ipynb"
    nbformat.write(nb, str(path))
    return S.SweepSpec.from_dict({"notebook": str(path), "grid": grid, "name": "tiny",
                                  "frontier": {"x": "retrieve_ms", "y": "retrieval.hit_rate@k"}, **extra}, source="test")


def _run(spec, tmp_path, **kw):
    return S.run_sweep(spec, out_dir=tmp_path / "out", cwd=ROOT, progress=False, **kw)


def test_sweep_runs_gathers_and_writes_an_offline_index(tmp_path):
    import pandas as pd

    spec = _tiny_spec(tmp_path, {"x": [1, 2, 3]}, baseline={"x": 1})
    res = _run(spec, tmp_path)
    assert res.ran == [S.point_id({"x": v}) for v in (1, 2, 3)] and not res.reused and not res.failed
    runs = pd.read_parquet(tmp_path / "out" / "runs.parquet")
    assert len(runs) == 3 and list(runs["x"]) == [1, 2, 3]
    assert list(runs["retrieval.hit_rate@k"]) == [0.25, 0.5, 0.75] and list(runs["status"]) == ["ok"] * 3
    for pid in res.points:  # every point: executed notebook, its HTML, its config, the marker
        d = tmp_path / "out" / "points" / pid
        for f in ("notebook.ipynb", "notebook.html", "config.yaml", "params.json", C.POINT_FILE, S.MARKER):
            assert (d / f).is_file(), (pid, f)
        executed = nbformat.read(str(d / "notebook.ipynb"), as_version=4)
        assert any("injected-parameters" in c.metadata.get("tags", []) for c in executed.cells)
    pq = pd.read_parquet(tmp_path / "out" / "per_question.parquet")
    assert set(pq["metric"]) == {"hit"} and len(pq) == 18
    html = (tmp_path / "out" / "index.html").read_text()
    assert html.count("<svg") >= 2  # metric-vs-parameter and frontier plots, inline
    for bad in ("<script", "<link", "<img", "@import", 'src="http', "src='http", 'href="http', "url(http"):
        assert bad not in html, bad
    assert "Paired tests against the baseline" in html and "Pareto" in html
    sig = json.loads((tmp_path / "out" / "significance.json").read_text())
    assert sig["baseline"] == S.point_id({"x": 1}) and set(sig["metrics"]["hit"]) == set(res.points[1:])
    assert all(r["direction"] == "higher" for r in sig["metrics"]["hit"].values())
    # best per metric by the registry: the highest hit rate (x=3), the lowest latency (x=1)
    assert '<td>retrieval.hit_rate@k</td><td>higher is better</td><td class="num">0.75</td><td>x=3</td>' in html
    assert '<td>retrieve_ms</td><td>lower is better</td><td class="num">10.0</td><td>x=1</td>' in html
    assert "Pareto-optimal points (no other point is better on both): x=1, x=2, x=3" in html
    page = (tmp_path / "out" / "points" / res.points[0] / "notebook.html").read_text()
    assert "<script" not in page and 'src="http' not in page


def test_resume_runs_only_unfinished_points(tmp_path):
    spec = _tiny_spec(tmp_path, {"x": [1, 2, 3]})
    points = S.expand(spec)
    first = tmp_path / "out" / "points" / points[0].id
    first.mkdir(parents=True)  # point 1 finished in an earlier (killed) run
    C.record(first, C.PointResult({"retrieval.hit_rate@k": 1.0, "retrieve_ms": 1.0}, [{"qid": "q0", "hit": 0.0}]))
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
    assert list(runs["retrieval.hit_rate@k"]) == [1.0, 0.5, 0.75]  # the finished point's recorded result is kept
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
    data = G.read_point(tmp_path)
    assert data["metrics"] == {"retrieval.hit_rate@4": 0.75, "retrieval.mrr@4": 0.5, "privacy.probes_leaked": 0,
                               "timings.total_s": 3.5}
    assert data["per_question"] == [{"qid": "q1", "hit": 1.0, "reciprocal_rank": 1.0},
                                    {"qid": "q2", "hit": 0.0, "reciprocal_rank": 0.0, "keyword_hit": 1.0}]


def test_chunking_cost_bypasses_the_cache_and_counts_the_index_chunks(tmp_path):
    """cold_* figures come from the model itself (the cache sees no call) on exactly the chunks
    the index holds."""
    from adiyan.config import load_settings
    from adiyan.eval.harness import open_index
    from adiyan.experiments import chunking
    from tests.conftest import MODEL_DIR

    s = load_settings(environ={}, overrides={"paths.data_dir": str(tmp_path / "d"), "paths.cache_dir": str(tmp_path / "c"),
                                              "paths.models_dir": str(MODEL_DIR),
                                              "eval.evalset": str(ROOT / "evalsets" / "adiyan_basic")})
    h = open_index(s)
    emb = h.kb.embedder
    before = (emb.stats.hits, emb.stats.misses)
    cost = chunking.chunking_cost(s)
    assert (emb.stats.hits, emb.stats.misses) == before
    assert cost["cost_chunks"] == h.build["n_chunks"] and cost["cost_documents"] == len(h.evalset.documents)
    assert cost["cold_index_s"] == pytest.approx(cost["cold_chunking_s"] + cost["cold_embed_s"])


# ---------------------------------------------------------------------------- "best" from the registry


def _finished_sweep(tmp_path, spec, data_by_x):
    """Points marked finished with the given data (point.json, or a run_eval folder), no kernel."""
    points = S.expand(spec)
    out = tmp_path / "out"
    for p in points:
        pdir = out / "points" / p.id
        pdir.mkdir(parents=True)
        data = data_by_x[p.params["x"]]
        if "metrics.json" in data:  # what evaluate.ipynb leaves: run_eval's folder inside the point
            run = pdir / "run" / "20250101-000000-abc"
            run.mkdir(parents=True)
            (run / "metrics.json").write_text(json.dumps(data["metrics.json"]))
        else:
            C.record(pdir, data["point"])
        S.mark_complete(pdir, S.point_fingerprint(spec, p))
    return points, out


def _best_table(html: str) -> list[tuple[str, ...]]:
    part = html.split("<h2>Best point per metric</h2>", 1)[1].split("</table>", 1)[0]
    return re.findall(r'<tr(?: class="grey")?><td>([^<]+)</td><td>([^<]+)</td><td class="num">([^<]+)</td>'
                      r'<td>([^<]+)</td><td>(.*?)</td></tr>', part)


def _best_rows(html: str) -> dict[str, tuple[str, str, str]]:
    """metric -> (direction, highest value, its point(s))."""
    return {m: (d, v, lab) for m, d, v, lab, _ in _best_table(html)}


def _verdicts(html: str) -> dict[str, str]:
    """metric -> the verdict cell's text ("<b>best</b>: ..." when crowned)."""
    return {m: verdict for m, _, _, _, verdict in _best_table(html)}


def test_best_is_marked_by_the_registry_direction(tmp_path):
    """A point with the higher principles_holding_share is best (the old "_s" fragment made it
    lower-is-better), the lower retrieve_ms is best, n_chunks (neutral) has no best; every metric
    marked best is registered and its direction is the registry's."""
    spec = _tiny_spec(tmp_path, {"x": [1, 2, 3]})
    vals = {1: (0.6, 30.0, 120.0), 2: (1.0, 20.0, 80.0), 3: (0.8, 10.0, 100.0)}
    points, out = _finished_sweep(tmp_path, spec, {x: {"point": C.PointResult(
        {"incidents.principles_holding_share": a, "retrieve_ms": b, "n_chunks": c})} for x, (a, b, c) in vals.items()})
    runs_path, index = write_outputs(spec, points, out)
    html = index.read_text()
    best = _best_rows(html)
    assert best == {"incidents.principles_holding_share": ("higher is better", "1.0", "x=2"),
                    "retrieve_ms": ("lower is better", "10.0", "x=3")}
    g = G.gather(spec, points, out)
    for m, b in G.best_points(g, g.metric_cols).items():
        assert b["direction"] == M.lookup(*C.registry_key(m)).direction
    # neither is crowned: the share has no per-question scores to test, retrieve_ms is a timing measured once
    verdicts = _verdicts(html)
    assert verdicts["incidents.principles_holding_share"] == "no per-question scores to test: not ranked"
    assert verdicts["retrieve_ms"].startswith("a timing measured once per point")
    assert 'class="num best"' not in html  # nothing highlighted without a significant test
    import pyarrow.parquet as papq

    meta = json.loads(papq.read_schema(runs_path).metadata[b"adiyan.sweep"])
    assert meta["direction"] == {"incidents.principles_holding_share": "higher", "retrieve_ms": "lower",
                                 "n_chunks": "neutral"}


def test_best_follows_the_holm_adjusted_paired_test(tmp_path):
    """Against the baseline x=1 (hit on 10 of 40 questions), x=2 hits 30 more (significant after Holm)
    and x=3 one more (p = 1.0): only x=2 is crowned and highlighted; when x=2 is dropped, x=3 has
    the highest value and is shown grey with "no difference shown", not best."""
    spec = _tiny_spec(tmp_path, {"x": [1, 2, 3]}, baseline={"x": 1})
    hits = {1: [1.0] * 10 + [0.0] * 30, 2: [1.0] * 40, 3: [1.0] * 11 + [0.0] * 29}
    data = {x: {"point": C.PointResult({"retrieval.hit_rate@k": sum(h) / 40},
                                       per_question=[{"qid": f"q{i}", "hit": v} for i, v in enumerate(h)])}
            for x, h in hits.items()}
    points, out = _finished_sweep(tmp_path, spec, data)
    _, index = write_outputs(spec, points, out)
    html = index.read_text()
    assert _best_rows(html)["retrieval.hit_rate@k"] == ("higher is better", "1.0", "x=2")
    assert _verdicts(html)["retrieval.hit_rate@k"] == "<b>best</b>: Holm-adjusted p &lt; 0.05 against the baseline"
    assert html.count('class="num best"') == 1 and 'class="num best">1.0<' in html
    g = G.gather(spec, points, out)
    sig = G.significance(spec, points, g)
    assert sig["metrics"]["hit"][points[2].id]["p_holm"] == 1.0  # one more hit in 40: no evidence
    data.pop(2)
    (tmp_path / "b").mkdir()
    spec2 = _tiny_spec(tmp_path / "b", {"x": [1, 3]}, baseline={"x": 1})
    points2, out2 = _finished_sweep(tmp_path / "b", spec2, data)
    _, index2 = write_outputs(spec2, points2, out2)
    html2 = index2.read_text()
    assert _best_rows(html2)["retrieval.hit_rate@k"] == ("higher is better", "0.275", "x=3")
    assert _verdicts(html2)["retrieval.hit_rate@k"].startswith("no difference shown")
    assert 'class="num best"' not in html2 and '<tr class="grey"><td>retrieval.hit_rate@k</td>' in html2


def test_eval_sweep_columns_are_looked_up_by_group(tmp_path):
    """evaluate.ipynb's columns are group.name of metrics.json: ragas.rouge_score and
    ragas.non_llm_string_similarity are higher-is-better, timings.total_s lower (the old
    fragment list had the first two backwards)."""
    spec = _tiny_spec(tmp_path, {"x": [1, 2, 3]})
    vals = {1: (0.2, 0.7, 5.0), 2: (0.5, 0.3, 3.0), 3: (0.4, 0.5, 4.0)}
    data = {x: {"metrics.json": {"metrics": {"ragas": {"rouge_score": a, "non_llm_string_similarity": b}},
                                 "timings": {"total_s": t}}} for x, (a, b, t) in vals.items()}
    points, out = _finished_sweep(tmp_path, spec, data)
    _, index = write_outputs(spec, points, out)
    assert _best_rows(index.read_text()) == {
        "ragas.rouge_score": ("higher is better", "0.5", "x=2"),
        "ragas.non_llm_string_similarity": ("higher is better", "0.7", "x=1"),
        "timings.total_s": ("lower is better", "3.0", "x=2")}
    g = G.gather(spec, points, out)
    assert g.key("ragas.rouge_score") == ("ragas", "rouge_score") and g.direction("timings.total_s") == M.LOWER


def test_an_unregistered_metric_stops_the_report_naming_it(tmp_path):
    spec = _tiny_spec(tmp_path, {"x": [1]})
    points = S.expand(spec)
    pdir = tmp_path / "out" / "points" / points[0].id
    pdir.mkdir(parents=True)  # a point.json written past record(): "y" is declared nowhere
    (pdir / C.POINT_FILE).write_text(json.dumps({"status": "ok", "metrics": {"y": 1.0, "retrieval.hit_rate@k": 0.5},
                                                 "per_question": [{"qid": "q1", "score": 1.0}]}))
    S.mark_complete(pdir, S.point_fingerprint(spec, points[0]))
    with pytest.raises(S.SweepError, match=r"not registered.*sweep/y, sweep/score"):
        write_outputs(spec, points, tmp_path / "out")
    assert not (tmp_path / "out" / "index.html").exists()


def test_retrieval_experiment_reports_the_harness_rows_through_the_pipeline(tmp_path):
    """A retrieval point's metrics are the evaluation harness's (the rows ``invoke eval``
    computes), under the run's names; and the point's retrieval.* settings reach the pipeline (bm25 ranks
    adiyan_basic differently from dense, and has no floor)."""
    from adiyan.config import load_settings
    from adiyan.eval.harness import open_index, question_rows, retrieval_metrics
    from adiyan.experiments import retrieval
    from adiyan.factory import open_retriever
    from tests.conftest import MODEL_DIR

    s = load_settings(environ={}, overrides={"paths.data_dir": str(tmp_path / "d"), "paths.cache_dir": str(tmp_path / "c"),
                                              "paths.models_dir": str(MODEL_DIR),
                                              "eval.evalset": str(ROOT / "evalsets" / "adiyan_basic")})
    res = retrieval.evaluate_retrieval(s)
    index = open_index(s)
    qr = question_rows(index, open_retriever(s, index.kb))
    want = retrieval_metrics(qr, 4)["retrieval"]
    m = res.metrics
    assert (m["retrieval.hit_rate@k"], m["retrieval.mrr@k"], m["retrieval.ndcg@10"], m["retrieval.recall@10"]) == \
        (want["hit_rate@4"], want["mrr@4"], want["ndcg@10"], want["recall@10"])
    assert [r["qid"] for r in res.per_question] == [r["id"] for r in qr.rows]
    assert [r.get("reciprocal_rank") for r in res.per_question] == [r["reciprocal_rank"] for r in qr.rows]
    assert res.info["retrieval"]["mode"] == "dense" and m["privacy.private_chunks_leaked"] == 0
    bm25 = retrieval.evaluate_retrieval(s.with_overrides({"retrieval.mode": "bm25"}))
    assert bm25.info["retrieval"]["mode"] == "bm25" and bm25.info["floor"] is None
    # dense finds every gold source first; bm25 ranks one of the 14 answerable questions' second
    assert m["retrieval.mrr@k"] == 1.0 and bm25.metrics["retrieval.mrr@k"] == pytest.approx(13.5 / 14, abs=1e-6)
    assert sum(a.get("reciprocal_rank") != b.get("reciprocal_rank")
               for a, b in zip(res.per_question, bm25.per_question)) == 1


def test_every_notebook_parameter_is_seen_by_papermill():
    """papermill reads a parameters cell line by line and drops a line with a second "=" (in its
    comment, "None = all") with "Unable to parse line", then warns "Passed unknown parameter" at every
    point: each name the cell assigns must be one papermill sees."""
    import ast

    import papermill as pm

    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = nbformat.read(str(path), as_version=4)
        cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        if not cells:
            continue
        assigned = {t.id for node in ast.parse(cells[0].source).body if isinstance(node, ast.Assign)
                    for t in node.targets if isinstance(t, ast.Name)}
        assert set(pm.inspect_notebook(str(path))) == assigned, path.name


def test_the_estimate_reads_the_output_folders_state(tmp_path):
    """Two of three points finished (16.9 s and 1.8 s recorded), one with the current fingerprint:
    one done, two left, the stale one at its own 16.9 s and the never-run one at the median."""
    spec = _tiny_spec(tmp_path, {"x": [1, 2, 3]})
    points = S.expand(spec)
    out = tmp_path / "out"
    assert S.estimate(spec, out)["seconds_left"] is None  # never run: no figure to invent
    for p, wall, fp in ((points[0], 16.9, "stale"), (points[1], 1.8, S.point_fingerprint(spec, points[1]))):
        (out / "points" / p.id).mkdir(parents=True)
        S.mark_complete(out / "points" / p.id, fp, wall_s=wall)
    e = S.estimate(spec, out)
    assert (e["points"], e["done"], e["left"]) == (3, 1, 2)
    assert e["seconds_left"] == pytest.approx(16.9 + 16.9)  # stale point: its own; never run: median of [1.8, 16.9]


def test_a_sweeps_folder_follows_paths_reports_dir_and_ignores_per_point_templates(monkeypatch, tmp_path):
    """sweeps/eval.yaml sets paths.reports_dir to "{output_dir}/run", a template filled per point: the
    sweep's own folder must not be ./{output_dir}/run/sweeps/eval but the reports folder's sweeps/eval;
    a reports folder set by the environment moves it."""
    spec = S.load_spec("eval", ROOT / "sweeps")
    assert "{output_dir}" in spec.overrides["paths.reports_dir"]
    monkeypatch.delenv("ADIYAN_PATHS__REPORTS_DIR", raising=False)
    assert S.default_out_dir(spec.name, spec.overrides) == Path("reports") / "sweeps" / "eval"
    monkeypatch.setenv("ADIYAN_PATHS__REPORTS_DIR", str(tmp_path / "r"))
    assert S.default_out_dir("topk", {}) == tmp_path / "r" / "sweeps" / "topk"


def test_a_lower_is_better_score_is_crowned_when_it_drops_significantly(tmp_path):
    """A per-question score where lower is better: x=2 lowers it on 30 of 40 questions (significant
    after Holm) and is crowned; x=3 raises it and is not (the direction decides which way wins)."""
    M.register(M.Metric("errors_for_test", "sweep", M.LOWER, 0.0, 1.0))
    spec = _tiny_spec(tmp_path, {"x": [1, 2, 3]}, baseline={"x": 1}, paired=["errors_for_test"])
    errs = {1: [1.0] * 30 + [0.0] * 10, 2: [0.0] * 40, 3: [1.0] * 40}
    data = {x: {"point": C.PointResult({"errors_for_test": sum(e) / 40},
                                       per_question=[{"qid": f"q{i}", "errors_for_test": v} for i, v in enumerate(e)])}
            for x, e in errs.items()}
    points, out = _finished_sweep(tmp_path, spec, data)
    g = G.gather(spec, points, out)
    best = G.best_points(g, ["errors_for_test"], G.significance(spec, points, g))["errors_for_test"]
    assert best["value"] == 0.0 and best["verdict"] == "significant" and best["crowned"] == [points[1].id]
