"""What a sweep point costs from a warm cache: one point alone versus an 8-point top-k x ef sweep.

    python benchmarks/sweep_cost.py [--engine persistent] [--compare-papermill] [--repeats 2]
                                    [--out reports/benchmarks/sweep_cost.json]

Both are the real command (``python -m adiyan.sweeps SPEC``) in a fresh process, timed from
outside, each into a fresh output folder (so nothing is skipped as finished): the single
point is retrieval.ipynb at k=4, ef=128; the sweep is k in {2, 4, 6, 8} x ef in {32, 128}
on the same notebook and evalset (adiyan_full, retrieval only). A warm-up run of the sweep
first fills every cache (embeddings, parsed documents, the index, numba's and matplotlib's
caches), so both timed runs start warm. Each is repeated ``--repeats`` times, alternating;
the medians give the ratio (target: at most 1.5). With ``--compare-papermill`` the same pair
is also timed with a fresh kernel per point, which shows what the persistent kernel saves.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, machine, write_json

TARGET = 1.5
BASE = {
    "notebook": str(ROOT / "notebooks" / "retrieval.ipynb"),
    "jobs": 1,
    "overrides": {"eval.evalset": "evalsets/adiyan_full", "eval.generate": False, "eval.incidents": False,
                  "eval.judge": None},
    "metrics": ["hit_rate", "mrr", "ndcg@10", "context_tokens", "retrieve_ms"],
    "paired": ["hit", "rr"],
    "frontier": {"x": "context_tokens", "y": "hit_rate"},
}
SINGLE = {**BASE, "name": "cost_single", "grid": {"retrieval.kb_top_k": 4, "store.hnsw_ef": 128}}
SWEEP = {**BASE, "name": "cost_sweep", "grid": {"retrieval.kb_top_k": [2, 4, 6, 8], "store.hnsw_ef": [32, 128]},
         "baseline": {"retrieval.kb_top_k": 4, "store.hnsw_ef": 128}}


def _run(spec: Path, out: Path, engine: str) -> float:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "adiyan.sweeps", str(spec), "--out-dir", str(out), "--engine", engine,
                           "--quiet"], cwd=ROOT, env=env, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{spec.name} ({engine}) failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return dt


def measure(engine: str, repeats: int, work: Path, specs: dict[str, Path]) -> dict:
    single, sweep = [], []
    for i in range(repeats):
        single.append(_run(specs["single"], work / f"{engine}-single-{i}", engine))
        sweep.append(_run(specs["sweep"], work / f"{engine}-sweep-{i}", engine))
        print(f"{engine} rep {i}: single {single[-1]:.1f}s, 8-point sweep {sweep[-1]:.1f}s", file=sys.stderr)
    s, w = statistics.median(single), statistics.median(sweep)
    return {"engine": engine, "single_point_s": round(s, 2), "sweep_8_points_s": round(w, 2),
            "ratio": round(w / s, 3), "meets_target": w / s <= TARGET,
            "single_runs_s": [round(x, 2) for x in single], "sweep_runs_s": [round(x, 2) for x in sweep]}


def run(engine: str = "persistent", repeats: int = 2, compare_papermill: bool = False) -> dict:
    import yaml

    with tempfile.TemporaryDirectory(prefix="adiyan-sweep-cost-") as tmp:
        work = Path(tmp)
        specs = {}
        for name, spec in (("single", SINGLE), ("sweep", SWEEP)):
            specs[name] = work / f"{spec['name']}.yaml"
            specs[name].write_text(yaml.safe_dump(spec), encoding="utf-8")
        t0 = time.perf_counter()
        _run(specs["sweep"], work / "warmup", engine)  # fills every cache; not timed as a result
        warm = time.perf_counter() - t0
        print(f"warm-up sweep: {warm:.1f}s", file=sys.stderr)
        result = {"benchmark": "sweep_cost", "target_ratio": TARGET, "warmup_s": round(warm, 2),
                  "single_point": {k: v for k, v in SINGLE.items() if k != "notebook"},
                  "sweep": {k: v for k, v in SWEEP.items() if k != "notebook"},
                  "notebook": "notebooks/retrieval.ipynb",
                  "load_avg_before": [round(x, 2) for x in os.getloadavg()]}
        main_m = measure(engine, repeats, work, specs)
        result.update({k: main_m[k] for k in ("engine", "single_point_s", "sweep_8_points_s", "ratio", "meets_target")})
        result["runs"] = {engine: main_m}
        if compare_papermill and engine != "papermill":
            result["runs"]["papermill"] = measure("papermill", 1, work, specs)
        result["load_avg_after"] = [round(x, 2) for x in os.getloadavg()]
        result["machine"] = machine()
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engine", default="persistent", choices=["persistent", "papermill"])
    ap.add_argument("--compare-papermill", action="store_true", help="also time a fresh kernel per point")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "reports" / "benchmarks" / "sweep_cost.json"))
    args = ap.parse_args(argv)
    result = run(args.engine, args.repeats, args.compare_papermill)
    write_json(result, args.out)
    return 0 if result["meets_target"] else 1


if __name__ == "__main__":
    sys.exit(main())
