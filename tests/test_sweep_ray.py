"""The Ray executor (adiyan/sweeps/ray_engine.py) on a local Ray cluster started by the runner
(2 CPUs, no dashboard, loopback): the same numbers as the in-process engine, recomputed by the
workers from their own data and cache directories (nothing of the local run's index or embeddings
is shared), and resume after a kill keeps every finished point.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from adiyan import sweeps as S

pytest.importorskip("ray")
ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

# timings differ run to run by nature; everything else a point records must be identical
TIMING = ("_ms", "_s", "wall_s")


def _retrieval_spec(tmp: Path) -> S.SweepSpec:
    """The sweep with its data (the evaluation index) and caches (embeddings) in ``tmp``: each run its own."""
    from tests.conftest import MODEL_DIR

    overrides = {"paths.data_dir": str(tmp / "data"), "paths.cache_dir": str(tmp / "cache"),
                 "paths.models_dir": str(MODEL_DIR), "eval.evalset": str(ROOT / "evalsets" / "adiyan_basic"),
                 "eval.generate": False, "eval.judge": None, "eval.incidents": False,
                 "retrieval.use_calibrated_floors": False}
    return S.SweepSpec.from_dict({"notebook": str(ROOT / "notebooks" / "retrieval.ipynb"), "name": "raytiny",
                                  "overrides": overrides, "grid": {"retrieval.kb_top_k": [1, 4]}}, source="test")


def test_ray_executor_gives_the_in_process_numbers_bit_for_bit(tmp_path):
    import pandas as pd

    from adiyan.cache import EmbeddingCache

    local = S.run_sweep(_retrieval_spec(tmp_path / "local-dirs"), out_dir=tmp_path / "local", cwd=ROOT, progress=False)
    ray_res = S.run_sweep(_retrieval_spec(tmp_path / "ray-dirs"), out_dir=tmp_path / "ray", cwd=ROOT, progress=False,
                          executor="ray")
    assert local.ran == ray_res.ran and len(ray_res.ran) == 2 and not ray_res.failed  # ids: the grid's values
    # a Ray worker built the index (a shared index would have been reused by every Ray point)
    ray_infos = [json.loads((tmp_path / "ray" / "points" / pid / "point.json").read_text())["info"] for pid in ray_res.ran]
    assert not all(i["index_reused"] for i in ray_infos), "the Ray points reused an index built before them"
    # each run built its own index once (the Ray points run side by side: one builds under the index's
    # lock, the other waits and opens it), every chunk embedded there from an empty embedding cache
    builds = {d: [json.loads(f.read_text()) for f in (tmp_path / d / "data" / "index").rglob("build.json")]
              for d in ("local-dirs", "ray-dirs")}
    assert [len(b) for b in builds.values()] == [1, 1], builds
    (local_build,), (ray_build,) = builds.values()
    assert ray_build["embed_cache_hits"] == 0 and ray_build["embed_cache_misses"] == local_build["embed_cache_misses"] > 0
    assert ray_build["n_chunks"] == local_build["n_chunks"]
    rows = [len(EmbeddingCache(tmp_path / d / "cache" / "embeddings.sqlite")) for d in ("local-dirs", "ray-dirs")]
    assert rows[0] == rows[1] > 0  # chunks and questions: the same embeddings, computed by each run
    a = pd.read_parquet(tmp_path / "local" / "runs.parquet")
    b = pd.read_parquet(tmp_path / "ray" / "runs.parquet")
    metric_cols = [c for c in a.columns if c not in ("point_wall_s", "finished_at", "notebook", "html", "config")
                   and not c.endswith(TIMING) and a[c].dtype.kind == "f"]
    assert {"retrieval.hit_rate@k", "retrieval.mrr@k", "retrieval.ndcg@10", "ragas.id_based_context_precision",
            "ragas.id_based_context_recall", "regression.no-private-leak"} <= set(metric_cols)
    assert list(a["point_id"]) == list(b["point_id"])
    for c in metric_cols:  # bit for bit: same floats, same missing values
        pd.testing.assert_series_equal(a[c], b[c], check_exact=True)
    qa = pd.read_parquet(tmp_path / "local" / "per_question.parquet")
    qb = pd.read_parquet(tmp_path / "ray" / "per_question.parquet")
    qa, qb = (q[~q["metric"].str.endswith(TIMING)].reset_index(drop=True) for q in (qa, qb))
    assert qa.equals(qb)
    # the same files as the local engine, written into the driver's folder, marker last
    for pid in ray_res.ran:
        d = tmp_path / "ray" / "points" / pid
        for f in ("notebook.ipynb", "notebook.html", "config.yaml", "params.json", "point.json", S.MARKER):
            assert (d / f).is_file(), (pid, f)


SLEEPY_PARAMS = """x = 1
overrides = {}
config_file = None
output_dir = None
point_id = None"""

SLEEPY_WORK = """import os, time
from adiyan.experiments.common import PointResult, record
if x == 3 and os.path.exists(os.environ.get("SWEEP_TEST_SLOW_FLAG", "/nonexistent")):
    time.sleep(120)  # the point the test kills the sweep during
record(output_dir, PointResult({"retrieval.hit_rate@k": x / 4}, [{"qid": "q0", "hit": 1.0}]))"""


def test_killed_ray_sweep_resumes_and_skips_finished_points(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "adiyan", "display_name": "Python (adiyan)", "language": "python"}
    params = nbformat.v4.new_code_cell(SLEEPY_PARAMS)
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(SLEEPY_WORK)]
    nbformat.write(nb, str(tmp_path / "sleepy.ipynb"))
    (tmp_path / "sleepy.yaml").write_text(json.dumps({"notebook": str(tmp_path / "sleepy.ipynb"),
                                                      "grid": {"x": [1, 2, 3]}}))
    flag = tmp_path / "slow"
    flag.write_text("1")
    out = tmp_path / "out"
    env = {**os.environ, "SWEEP_TEST_SLOW_FLAG": str(flag)}
    proc = subprocess.Popen([sys.executable, "-m", "adiyan.sweeps", str(tmp_path / "sleepy.yaml"), "--executor",
                             "ray", "--out-dir", str(out), "--quiet"], cwd=ROOT, env=env,
                            start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=open(tmp_path / "driver.err", "w"))
    spec = S.load_spec(tmp_path / "sleepy.yaml")
    points = S.expand(spec)
    done = [out / "points" / p.id for p in points[:2]]
    deadline = time.monotonic() + 600
    try:
        while not all(S.is_complete(d) for d in done):
            assert proc.poll() is None, ("the sweep ended before it could be killed: "
                                         + (tmp_path / "driver.err").read_text()[-3000:])
            assert time.monotonic() < deadline, "points 1 and 2 did not finish in 10 minutes"
            time.sleep(1)
        time.sleep(2)  # point 3 is running (it sleeps while the flag exists)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the driver and what it started in its session
        proc.wait()
    assert not S.is_complete(out / "points" / points[2].id)
    markers = {p.id: (out / "points" / p.id / S.MARKER).read_text() for p in points[:2]}
    flag.unlink()
    # the flag is gone: point 3 runs at once
    res = S.run_sweep(S.load_spec(tmp_path / "sleepy.yaml"), out_dir=out, cwd=ROOT, progress=False, executor="ray")
    assert res.reused == [p.id for p in points[:2]] and res.ran == [points[2].id]
    for p in points[:2]:  # the finished points were not touched
        assert (out / "points" / p.id / S.MARKER).read_text() == markers[p.id]
    assert S.is_complete(out / "points" / points[2].id, S.point_fingerprint(spec, points[2]))


# The point with x == 3 blocks in its first attempt only: that attempt claims hold-3 (a rename, so
# a retry cannot claim it again), reports its kernel's pid and parent (the Ray worker), and sleeps.
# Every attempt logs its worker's pid when it starts and its x when it reaches the end.
GATED_WORK = """import json, math, os, time
from pathlib import Path
from adiyan.experiments.common import PointResult, record
gate = Path(GATE_DIR)
with open(gate / "started.log", "a") as f:
    f.write(f"{x} {os.getppid()}\\n")
try:
    os.rename(gate / f"hold-{x}", gate / f"held-{x}")
except FileNotFoundError:
    pass
else:
    (gate / f"attempt-{x}.json").write_text(json.dumps({"pid": os.getpid(), "ppid": os.getppid()}))
    time.sleep(120)  # killed long before this ends
mrr = math.fsum(1.0 / (i + x * math.pi) for i in range(1, 4000)) / 4000  # a float with rounding to get right
record(output_dir, PointResult({"retrieval.hit_rate@k": x / 4, "mrr": mrr}, [{"qid": "q0", "hit": 1.0}]))
with open(gate / "finished.log", "a") as f:
    f.write(f"{x}\\n")"""


def _descendants() -> set[int]:
    import psutil

    return {p.pid for p in psutil.Process().children(recursive=True)}


def test_ray_sweep_survives_a_worker_killed_mid_point(tmp_path):
    """Issue 15 item 6: a local 2-CPU cluster, the Ray worker running a point SIGKILLed mid-point.

    Ray retries the task (``max_retries``) in another worker: every point completes once, the
    killed point's numbers equal an in-process run's, the killed attempt's kernel does not linger,
    and nothing of Ray is left running after shutdown. The worker is found by the pid the point's
    kernel reports (its parent) and checked to be a Ray worker executing ``run_point`` by its
    process title: Ray's state API needs the dashboard, which the executor does not start.
    """
    import threading

    import pandas as pd
    import psutil

    from adiyan.sweeps import ray_engine

    gate = tmp_path / "gate"
    gate.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "adiyan", "display_name": "Python (adiyan)", "language": "python"}
    params = nbformat.v4.new_code_cell(SLEEPY_PARAMS)
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(f"GATE_DIR = {str(gate)!r}\n" + GATED_WORK)]
    nbformat.write(nb, str(tmp_path / "gated.ipynb"))
    (tmp_path / "gated.yaml").write_text(json.dumps({"notebook": str(tmp_path / "gated.ipynb"),
                                                     "grid": {"x": [1, 2, 3]}}))
    (gate / "hold-3").write_text("")
    before = _descendants()
    ray, started = ray_engine.start(num_cpus=2)  # as the executor starts one: 2 CPUs, no dashboard, loopback
    assert started, "a Ray cluster was already connected in this process"
    killed: dict = {}

    def kill_the_worker_running_point_3():
        try:
            deadline = time.monotonic() + 300
            while not (gate / "attempt-3.json").exists():
                if time.monotonic() > deadline:
                    killed["error"] = "point 3 never started"
                    return
                time.sleep(0.5)
            kernel = json.loads((gate / "attempt-3.json").read_text())
            worker = psutil.Process(kernel["ppid"])
            killed.update(kernel=kernel["pid"], worker=worker.pid, title=" ".join(worker.cmdline()),
                          worker_parent=" ".join(worker.parent().cmdline()))
            os.kill(worker.pid, signal.SIGKILL)
        except Exception as exc:  # noqa: BLE001 - reported by the test below
            killed["error"] = repr(exc)

    killer = threading.Thread(target=kill_the_worker_running_point_3, daemon=True)
    ray_pids: set[int] = set()
    try:
        killer.start()
        spec = S.load_spec(tmp_path / "gated.yaml")
        res = S.run_sweep(spec, out_dir=tmp_path / "ray", cwd=ROOT, progress=False, executor="ray")
        killer.join(timeout=60)
        ray_pids = _descendants() - before
    finally:
        if started:
            ray.shutdown()
    assert "error" not in killed, killed
    # the process killed was a Ray worker executing the point, a child of the raylet
    assert killed["title"].startswith("ray::run_point") and "raylet" in killed["worker_parent"], killed
    points = S.expand(spec)
    assert res.ran == [p.id for p in points] and not res.failed
    for p in points:
        assert S.is_complete(tmp_path / "ray" / "points" / p.id, S.point_fingerprint(spec, p)), p.id
        assert not (tmp_path / "ray" / "points" / p.id / S.FAILED).exists(), p.id
    # point 3 started twice, the second time in another worker (Ray's retry); each point ran to its end once
    starts = [line.split() for line in (gate / "started.log").read_text().splitlines()]
    assert sorted(x for x, _ in starts) == ["1", "2", "3", "3"]
    workers_3 = [int(pid) for x, pid in starts if x == "3"]
    assert workers_3[0] == killed["worker"] and workers_3[1] != killed["worker"], (workers_3, killed)
    assert sorted((gate / "finished.log").read_text().split()) == ["1", "2", "3"]
    # the same numbers as the in-process engine (the gate is claimed: every point runs straight through)
    local = S.run_sweep(S.load_spec(tmp_path / "gated.yaml"), out_dir=tmp_path / "local", cwd=ROOT, progress=False)
    assert local.ran == res.ran
    a = pd.read_parquet(tmp_path / "local" / "runs.parquet")
    b = pd.read_parquet(tmp_path / "ray" / "runs.parquet")
    assert list(a["point_id"]) == list(b["point_id"])
    for c in ("retrieval.hit_rate@k", "mrr"):
        pd.testing.assert_series_equal(a[c], b[c], check_exact=True)
    assert b.loc[b["point_id"] == points[2].id, "retrieval.hit_rate@k"].item() == 0.75
    # nothing left behind: the orphaned kernel exits with its worker (ipykernel's parent poller),
    # and every process Ray started in this test is gone after shutdown
    leftover: list = []
    for _ in range(60):
        leftover = []
        for pid in ray_pids | {killed["kernel"], killed["worker"]}:
            try:
                proc = psutil.Process(pid)
                if proc.status() != psutil.STATUS_ZOMBIE:
                    leftover.append((pid, " ".join(proc.cmdline())[:200]))
            except psutil.NoSuchProcess:
                pass
        if not leftover:
            break
        time.sleep(0.5)
    assert ray_pids and not leftover, leftover
