"""``python -m adiyan.sweeps NAME`` (``invoke sweep NAME``): run, list or re-report a sweep."""

from __future__ import annotations

import argparse
import os
import signal
from pathlib import Path
from typing import Sequence

from ..config import parse_set
from .run import run_sweep, write_outputs
from .spec import ENGINES, EXECUTORS, SWEEPS_DIR, SweepError, default_out_dir, estimate, expand, load_spec


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m adiyan.sweeps",
                                 description="Run sweeps/NAME.yaml: one notebook execution per grid point.")
    ap.add_argument("name", nargs="?", help="sweep name (sweeps/NAME.yaml) or a path to a spec")
    ap.add_argument("--jobs", type=int, default=None, help="points at once (one kernel each; default: the spec's)")
    ap.add_argument("--engine", choices=ENGINES, default=None, help="persistent (one kernel per worker, reset "
                    "between points) or papermill (a fresh kernel per point); default: the spec's")
    ap.add_argument("--executor", choices=EXECUTORS, default="local", help="local kernels, or each point a Ray "
                    "task (a local Ray cluster of 2 CPUs, or --ray-address)")
    ap.add_argument("--ray-address", default=None, help="join this Ray cluster (HOST:PORT of `ray start --head`)")
    ap.add_argument("--force", action="store_true", help="re-run finished points too")
    ap.add_argument("--only", action="append", default=None, help="run only this point id (repeatable)")
    ap.add_argument("--set", dest="set_", action="append", default=[], help="settings override for every point")
    ap.add_argument("--out-dir", default=None, help="output folder (default <paths.reports_dir>/sweeps/NAME)")
    ap.add_argument("--sweeps-dir", default=str(SWEEPS_DIR))
    ap.add_argument("--list", action="store_true", help="list the sweeps, or the points of NAME, and exit")
    ap.add_argument("--report-only", action="store_true", help="rewrite runs.parquet and index.html only")
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    args = ap.parse_args(argv)
    for k, v in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                 "MEM0_TELEMETRY": "False"}.items():
        os.environ.setdefault(k, v)

    def _terminate(signum, frame):  # SIGTERM unwinds like Ctrl-C, so kernels are shut down
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _terminate)
    try:
        if not args.name or args.name == "list":
            print(f"{'sweep':<12} {'points':>6}  {'to run':<26} notebook / what it sweeps")
            for p in sorted(Path(args.sweeps_dir).glob("*.yaml")):
                s = load_spec(p)
                e = estimate(s, default_out_dir(s.name, s.overrides))
                cost = ("all done (reused)" if not e["left"] else
                        f"{e['left']} left, never run here" if e["seconds_left"] is None else
                        f"{e['left']} left, about {_duration(e['seconds_left'])}")
                print(f"{p.stem:<12} {e['points']:>6}  {cost:<26} {s.notebook}  {s.description}")
            print("(estimates: the wall time each point took when it last ran here; a point whose notebook "
                  "and parameters are unchanged is reused for free)")
            return 0
        spec = load_spec(args.name, args.sweeps_dir)
        if args.list:
            for p in expand(spec):
                print(f"{p.id}  {p.label}")
            return 0
        if args.ray_address and args.executor != "ray":
            raise SweepError("--ray-address needs --executor ray")
        overrides = parse_set(args.set_)
        if args.report_only:
            if overrides:
                spec.overrides = {**spec.overrides, **overrides}
            out = Path(args.out_dir) if args.out_dir else default_out_dir(spec.name, spec.overrides)
            runs, index = write_outputs(spec, expand(spec), out, engine=args.engine or spec.engine)
            print(f"{runs}\n{index}")
            return 0
        res = run_sweep(spec, jobs=args.jobs, engine=args.engine, out_dir=args.out_dir, force=args.force,
                        only=args.only, overrides=overrides, progress=not args.quiet, executor=args.executor,
                        ray_address=args.ray_address)
    except SweepError as exc:
        print(f"error: {exc}")
        return 1
    print(f"sweep {res.name}: {len(res.points)} points, ran {len(res.ran)}, reused {len(res.reused)}, "
          f"wall {res.wall_s:.1f}s\n  {res.runs}\n  {res.index}")
    return 0
