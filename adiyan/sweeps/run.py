"""Running a sweep: every unfinished point executed (resume), failures recorded, outputs written.

Each point gets ``OUT/points/<point-id>/``: ``config.yaml`` (the resolved settings),
``params.json``, the executed ``notebook.ipynb`` and its HTML, ``point.json`` (written by the
notebook) and, last, ``COMPLETE.json``; a point that fails gets ``FAILED.json`` and the others
go on. Afterwards ``runs.parquet``, ``per_question.parquet``, ``significance.json`` and
``index.html`` are written beside them.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from tqdm.auto import tqdm

from ..config import load_settings
from ..eval.harness import drop_orphan_replicas
from ..experiments.common import POINT_FILE, jsonable
from . import ray_engine
from .engines import ENGINE_NAME, Kernel, error_text, kernel_name, register_engine
from .gather import gather, read_point, significance
from .html import html_exporter, notebook_html, write_index
from .spec import (ENGINES, EXECUTORS, FAILED, default_out_dir, SWEEPS_DIR, Point, SweepError, SweepSpec, expand, is_complete,
                   load_spec, mark_complete, notebook_code_hash, point_fingerprint)


@dataclass
class SweepResult:
    name: str
    out_dir: Path
    points: list[str]
    ran: list[str]
    reused: list[str]
    failed: dict[str, str]
    wall_s: float
    runs: Path | None = None
    index: Path | None = None


def prepare_point(spec: SweepSpec, point: Point, pdir: Path, fingerprint: str) -> dict:
    """A clean point folder with its resolved settings and parameters; the notebook's parameters."""
    if pdir.exists():
        shutil.rmtree(pdir)
    pdir.mkdir(parents=True)
    params = {k: (v.replace("{output_dir}", str(pdir)) if isinstance(v, str) else v)
              for k, v in point.notebook_params.items()}
    params["overrides"] = {k: (v.replace("{output_dir}", str(pdir)) if isinstance(v, str) else v)
                           for k, v in params["overrides"].items()}
    settings = load_settings(spec.config_file, params["overrides"])
    (pdir / "config.yaml").write_text(settings.to_yaml(), encoding="utf-8")
    (pdir / "params.json").write_text(json.dumps({"sweep": spec.name, "point_id": point.id, "grid": point.params,
                                                  "notebook": str(spec.notebook), "fingerprint": fingerprint,
                                                  "config_hash": settings.config_hash(),
                                                  "parameters": params}, indent=2, default=str), encoding="utf-8")
    return {**params, "output_dir": str(pdir), "point_id": point.id}


def run_sweep(spec: SweepSpec | str | os.PathLike, *, jobs: int | None = None, engine: str | None = None,
              out_dir: str | os.PathLike | None = None, sweeps_dir: str | os.PathLike = SWEEPS_DIR,
              force: bool = False, only: Sequence[str] | None = None, overrides: Mapping[str, Any] | None = None,
              progress: bool = True, cwd: str | os.PathLike | None = None, executor: str = "local",
              ray_address: str | None = None) -> SweepResult:
    """Expand the grid, execute every unfinished point, gather metrics, write runs.parquet and index.html.

    ``only`` restricts execution to these point ids (the report still covers every finished
    point); ``overrides`` are added to every point's settings overrides (they change the
    fingerprints, so the affected points run again). ``executor="ray"`` runs each point as a
    Ray task (:mod:`adiyan.sweeps.ray_engine`; a local cluster, or ``ray_address``). Raises :class:`SweepError` after writing
    the report when a point failed.
    """
    t_start = time.perf_counter()
    if not isinstance(spec, SweepSpec):
        spec = load_spec(spec, sweeps_dir)
    if overrides:
        spec.overrides = {**spec.overrides, **dict(overrides)}
    engine = engine or spec.engine
    if engine not in ENGINES:
        raise SweepError(f"engine must be one of {ENGINES}, got {engine!r}")
    if executor not in EXECUTORS:
        raise SweepError(f"executor must be one of {EXECUTORS}, got {executor!r}")
    if executor == "ray":
        engine = "papermill"  # a fresh kernel per point, in the task's process
    jobs = max(1, int(jobs or spec.jobs or 1))
    cwd = Path(cwd or Path.cwd()).resolve()
    if not spec.notebook.is_absolute():
        spec.notebook = (cwd / spec.notebook)
    if not spec.notebook.is_file():
        raise SweepError(f"{spec.source}: notebook {spec.notebook} does not exist")
    out = Path(out_dir) if out_dir else default_out_dir(spec.name, spec.overrides)
    out = (cwd / out) if not out.is_absolute() else out
    (out / "points").mkdir(parents=True, exist_ok=True)
    points = expand(spec)
    if only:
        unknown = set(only) - {p.id for p in points}
        if unknown:
            raise SweepError(f"unknown point id(s): {', '.join(sorted(unknown))}")
    code_hash = notebook_code_hash(spec.notebook)
    fps = {p.id: point_fingerprint(spec, p, code_hash) for p in points}
    todo = [p for p in points if (not only or p.id in only)
            and (force or not is_complete(out / "points" / p.id, fps[p.id]))]
    reused = [p.id for p in points if p not in todo and is_complete(out / "points" / p.id, fps[p.id])]
    (out / "sweep.json").write_text(json.dumps({
        "name": spec.name, "source": spec.source, "notebook": str(spec.notebook), "description": spec.description,
        "engine": engine, "jobs": jobs, "grid": spec.grid, "overrides": spec.overrides,
        "parameters": spec.parameters, "baseline": spec.baseline, "frontier": spec.frontier,
        "points": [{"id": p.id, "params": p.params, "fingerprint": fps[p.id]} for p in points]},
        indent=2, default=str), encoding="utf-8")
    failed: dict[str, str] = {}
    wall: dict[str, float] = {}
    if todo:
        _execute(spec, todo, out, fps, engine=engine, jobs=jobs, cwd=cwd, progress=progress,
                 failed=failed, wall=wall, n_total=len(points), n_done=len(reused), executor=executor,
                 ray_address=ray_address)
    runs, index = write_outputs(spec, points, out, engine=engine if executor == "local" else f"{engine} on ray",
                                jobs=jobs,
                                session={"ran": [p.id for p in todo], "reused": reused, "failed": failed,
                                         "wall_s": round(time.perf_counter() - t_start, 2), "point_wall_s": wall})
    res = SweepResult(spec.name, out, [p.id for p in points], [p.id for p in todo if p.id not in failed], reused,
                      failed, time.perf_counter() - t_start, runs, index)
    if failed:
        raise SweepError(f"sweep {spec.name}: {len(failed)} point(s) failed: " +
                         "; ".join(f"{k}: {v[:300]}" for k, v in failed.items()) + f" (report: {index})")
    return res


def _execute(spec, todo, out, fps, *, engine, jobs, cwd, progress, failed, wall, n_total, n_done,
             executor: str = "local", ray_address: str | None = None) -> None:
    import papermill as pm  # heavy: only the runner executes notebooks

    register_engine()
    drop_orphan_replicas()
    kname = kernel_name(spec)
    work: queue.Queue = queue.Queue()
    for p in todo:
        work.put(p)
    n_workers = min(jobs, len(todo))
    bar = tqdm(total=n_total, initial=n_done, desc=f"sweep {spec.name}", unit="point", disable=not progress,
               position=0, leave=True)
    finisher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sweep-html")
    exporter_holder: dict = {}
    lock = threading.Lock()
    stop = threading.Event()
    live: list[Kernel] = []  # closed here if the sweep is interrupted (workers are daemon threads)

    def finish(point: Point, pdir: Path, seconds: float, error: str | None) -> None:
        try:
            if "exp" not in exporter_holder:
                exporter_holder["exp"] = html_exporter()
            if (pdir / "notebook.ipynb").is_file():
                notebook_html(pdir / "notebook.ipynb", pdir / "notebook.html", f"{spec.name}: {point.label}",
                              _exporter=exporter_holder["exp"])
            if error is None:
                data = read_point(pdir)
                if data is None:
                    error = (f"the notebook recorded no metrics ({POINT_FILE}): call "
                             "adiyan.experiments.common.record(output_dir, ...)")
            if error is None:
                mark_complete(pdir, fps[point.id], point_id=point.id, engine=engine, wall_s=round(seconds, 3),
                              status=data.get("status", "ok"))
        except Exception as exc:  # noqa: BLE001 - a broken point must not stop the others
            error = error or f"{type(exc).__name__}: {exc}"
        if error is not None:
            with lock:
                failed[point.id] = error
            (pdir / FAILED).write_text(json.dumps({"point_id": point.id, "error": error}, indent=2), encoding="utf-8")
        with lock:
            wall[point.id] = round(seconds, 3)
            bar.update(1)
            bar.set_postfix_str(f"last {point.id[:30]} {seconds:.1f}s" + (" FAILED" if error else ""))

    if executor == "ray":
        try:
            ray_engine.execute(spec, todo, out, lambda p, d: prepare_point(spec, p, d, fps[p.id]), finish, cwd=cwd,
                               kernel=kname, address=ray_address, num_cpus=max(2, jobs))
        finally:
            finisher.shutdown(wait=True)
            bar.close()
        return

    def worker(wid: int) -> None:
        kernel = None
        try:
            while not stop.is_set():
                try:
                    point = work.get_nowait()
                except queue.Empty:
                    return
                pdir = out / "points" / point.id
                error = None
                t0 = time.perf_counter()
                try:
                    params = prepare_point(spec, point, pdir, fps[point.id])
                    if engine == "persistent" and (kernel is None or not kernel.alive()):
                        if kernel is not None:
                            kernel.close()
                        kernel = Kernel(kname, cwd, persistent=True)
                        live.append(kernel)
                    own = Kernel(kname, cwd, persistent=False) if engine == "papermill" else None
                    if own is not None:
                        live.append(own)
                    try:
                        pm.execute_notebook(str(spec.notebook), str(pdir / "notebook.ipynb"), parameters=params,
                                            engine_name=ENGINE_NAME, kernel_name=kname,
                                            kernel=own or kernel, progress_bar=False,  # the sweep bar is the progress
                                            request_save_on_cell_execute=False,
                                            execution_timeout=spec.timeout, log_output=False)
                    finally:
                        if own is not None:
                            own.close()
                            live.remove(own)
                except Exception as exc:  # noqa: BLE001 - recorded, reported, the sweep goes on
                    error = error_text(exc)
                finally:
                    seconds = time.perf_counter() - t0
                finisher.submit(finish, point, pdir, seconds, error)
        finally:
            if kernel is not None and kernel in live:
                live.remove(kernel)
                kernel.close()

    threads = [threading.Thread(target=worker, args=(i,), name=f"sweep-worker-{i}", daemon=True)
               for i in range(n_workers)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(0.5)
    except BaseException:  # Ctrl-C or SIGTERM: no kernel left behind; finished points keep their markers
        stop.set()
        for k in list(live):
            k.close(now=True)
        raise
    finally:
        finisher.shutdown(wait=True)
        bar.close()
        drop_orphan_replicas()


def write_outputs(spec: SweepSpec, points: Sequence[Point], out: Path, *, engine: str = "", jobs: int = 1,
                  session: dict | None = None) -> tuple[Path, Path]:
    """Gather the finished points; write runs.parquet, per_question.parquet, significance.json, index.html.

    Raises :class:`SweepError` naming every metric the registry does not declare (its direction
    decides "best", the plots and the tests), before anything is written. A finished point with no
    metric or no regression case is named on stderr and on the index page.
    """
    import pyarrow as pa  # heavy: only gathering writes parquet
    import pyarrow.parquet as papq  # heavy: as above

    g = gather(spec, points, out)
    missing = g.unregistered()
    if missing:
        raise SweepError(f"sweep {spec.name}: metric(s) not registered in adiyan.metrics.REGISTRY: "
                         f"{', '.join(missing)}; declare each (group, name, direction) there")
    unscored = g.unscored()
    if unscored:  # the project's experiments all score (tests/test_sweep_points_scored.py); a user's notebook may not
        print(f"sweep {spec.name}: {len(unscored)} point(s) recorded no metric or no regression case "
              f"({'; '.join(unscored[:5])}{' ...' if len(unscored) > 5 else ''}): score them with "
              "adiyan.experiments.scoring (listed on the index page)", file=sys.stderr)
    table = pa.Table.from_pandas(g.runs, preserve_index=False)
    meta = dict(table.schema.metadata or {})
    meta[b"adiyan.sweep"] = json.dumps({"name": spec.name, "params": g.param_cols, "metrics": g.metric_cols,
                                        "registry": {c: list(g.key(c)) for c in g.metric_cols},
                                        "direction": {c: g.direction(c) for c in g.metric_cols}}).encode()
    papq.write_table(table.replace_schema_metadata(meta), out / "runs.parquet")
    papq.write_table(pa.Table.from_pandas(g.pq, preserve_index=False), out / "per_question.parquet")
    sig = significance(spec, points, g)
    (out / "significance.json").write_text(json.dumps(jsonable(sig), indent=2), encoding="utf-8")
    index = write_index(spec, g, sig, out, engine=engine, jobs=jobs, session=session or {})
    return out / "runs.parquet", index
