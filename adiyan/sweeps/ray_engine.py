"""The Ray executor: each sweep point a Ray task, its outputs gathered into the driver's folder.

``invoke sweep NAME --executor ray`` starts a local Ray cluster (``ray.init(num_cpus=2)``, no
dashboard, bound to loopback) or joins one by address (``--ray-address HOST:PORT``, a cluster
started with ``ray start --head``). Each unfinished point is one task (``num_cpus=1``): it
executes the point's notebook in a fresh kernel (the ``papermill`` engine) inside a temporary
folder on the worker's node and returns every file it wrote; the driver writes them into
``reports/sweeps/NAME/points/<id>/`` and the same ``finish`` step as the local engines (HTML,
``point.json`` check, the ``COMPLETE.json`` marker, or ``FAILED.json``) runs there. So resume is
unchanged: a point with a matching marker is never submitted, a point that raised is recorded as
failed, and a task whose worker died is retried by Ray (``max_retries``) before it is reported.

Caches are keyed by content hash and live under ``paths.cache_dir`` / ``paths.data_dir`` of each
worker's settings: per node on a real cluster (each node pays once for what it has not embedded),
shared when those paths are on shared storage. The project checkout (and its .venv) must exist
at the same path on every node: the kernel is started there.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from .engines import ENGINE_NAME, Kernel, error_text, register_engine

TASK_RETRIES = 2  # a task whose worker process died is resubmitted this many times
START_ATTEMPTS = 3  # a local cluster that timed out starting (a loaded machine) is started again


def _substitute(params: dict, out_dir: Path) -> dict:
    sub = {k: (v.replace("{output_dir}", str(out_dir)) if isinstance(v, str) else v) for k, v in params.items()}
    sub["overrides"] = {k: (v.replace("{output_dir}", str(out_dir)) if isinstance(v, str) else v)
                        for k, v in (params.get("overrides") or {}).items()}
    return sub


def run_point(notebook_text: str, notebook_params: dict, point_id: str, kernel: str, cwd: str,
              timeout: int | None) -> dict:
    """Execute one point's notebook in a temporary folder; ``{"files": {relpath: bytes}, "error": ...}``.

    Runs in a Ray worker (or anywhere): the notebook's exception is returned as the point's
    error, not raised, so Ray retries only lost workers, never a point that failed on its own.
    """
    import papermill as pm  # heavy: only a worker executing a point needs it

    register_engine()
    tmp = Path(tempfile.mkdtemp(prefix="adiyan-ray-point-"))
    t0 = time.perf_counter()
    try:
        src = tmp / "_source.ipynb"
        src.write_text(notebook_text, encoding="utf-8")
        params = {**_substitute(notebook_params, tmp), "output_dir": str(tmp), "point_id": point_id}
        error = None
        k = Kernel(kernel, Path(cwd), persistent=False)
        try:
            pm.execute_notebook(str(src), str(tmp / "notebook.ipynb"), parameters=params, engine_name=ENGINE_NAME,
                                kernel_name=kernel, kernel=k, progress_bar=False,
                                request_save_on_cell_execute=False, execution_timeout=timeout, log_output=False)
        except Exception as exc:  # noqa: BLE001 - the point's own failure: recorded by the driver
            error = error_text(exc)
        finally:
            k.close()
        src.unlink()
        files = {str(p.relative_to(tmp)): p.read_bytes() for p in sorted(tmp.rglob("*")) if p.is_file()}
        return {"files": files, "error": error, "seconds": time.perf_counter() - t0}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def start(address: str | None = None, *, num_cpus: int = 2):
    """Join the cluster at ``address``, or start a local one: ``num_cpus`` CPUs, no dashboard, loopback only.

    Returns (ray, whether this call connected it): the caller shuts down only what it started."""
    import ray  # heavy, optional: only the Ray executor needs it

    if ray.is_initialized():
        return ray, False
    if address:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
        return ray, True
    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
            return ray, True
        except Exception as exc:  # noqa: BLE001 - only a slow start is retried
            # the raylet waits 30 s for its agent's port file; on a loaded machine the agent can take longer
            if "timed out during startup" not in str(exc) or attempt == START_ATTEMPTS:
                raise RuntimeError(f"the local Ray cluster did not start ({attempt} attempt(s)): {exc}") from exc
            ray.shutdown()
    raise AssertionError("unreachable")


def execute(spec, todo, out: Path, prepare, finish, *, cwd: Path, kernel: str, address: str | None = None,
            num_cpus: int = 2) -> None:
    """Submit every point of ``todo`` as a task, write each result into its folder as it comes back.

    ``prepare(point, pdir)`` returns the notebook parameters (the local engines' ``prepare_point``);
    ``finish(point, pdir, seconds, error)`` is the local engines' finishing step (marker or failure).
    """
    ray, started = start(address, num_cpus=num_cpus)
    try:
        _submit_and_gather(ray, spec, todo, out, prepare, finish, cwd=cwd, kernel=kernel)
    finally:
        if started:
            ray.shutdown()


def _submit_and_gather(ray, spec, todo, out: Path, prepare, finish, *, cwd: Path, kernel: str) -> None:
    task = ray.remote(num_cpus=1, max_retries=TASK_RETRIES)(run_point)
    nb_text = Path(spec.notebook).read_text(encoding="utf-8")
    pending = {}
    started = time.perf_counter()
    for point in todo:
        pdir = out / "points" / point.id
        try:
            prepare(point, pdir)  # a clean folder with config.yaml and params.json, as the local engines
        except Exception as exc:  # noqa: BLE001 - a point that cannot be prepared fails alone
            finish(point, pdir, 0.0, error_text(exc))
            continue
        # the unsubstituted parameters: "{output_dir}" becomes the worker's temporary folder
        ref = task.remote(nb_text, point.notebook_params, point.id, kernel, str(cwd), spec.timeout)
        pending[ref] = (point, pdir)
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        point, pdir = pending.pop(done[0])
        try:
            res = ray.get(done[0])
        except Exception as exc:  # noqa: BLE001 - the task was lost after its retries: reported
            finish(point, pdir, time.perf_counter() - started, f"ray task failed: {type(exc).__name__}: {exc}")
            continue
        for rel, data in res["files"].items():
            target = pdir / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        finish(point, pdir, res["seconds"], res["error"])
