"""What a sweep point costs when every point does real work: the cold first point against the warm rest.

    python benchmarks/sweep_cost.py [--grids ef,chunk_size] [--engine persistent]
                                    [--out reports/benchmarks/sweep_cost.json]

Two grids, each run with the real command (``python -m adiyan.sweeps SPEC``) in a fresh process
and a fresh data directory, timed from outside, and each point's own wall time read from its
completion marker:

- ``ef``: ``notebooks/hnsw.ipynb`` on SciFact's 5,183 all-MiniLM-L6-v2 vectors, ef 16 / 32 / 64 /
  128 / 256 (m 16, ef_construct 100). The first point builds the HNSW index (checked: every
  vector indexed) and the exact truth; the others search 200 queries at their ef. That ef does
  real work is checked by recall@10 against exact search rising from ef 16 to ef 256.
- ``chunk_size``: ``notebooks/chunking.ipynb`` on adiyan_full, recursive chunks of 400 / 600 /
  800 / 1,200 / 1,600 characters (overlap 100), with an empty embedding and parse cache: every
  point re-chunks and re-embeds its corpus (checked: a different chunk count per point and
  texts embedded at every point); the first also parses (Docling, OCR) and loads the models.

Reported per grid: one point alone (the first grid value, its own fresh process and data), the
whole sweep, each point's wall time, the cold first point apart from the warm rest (median), and
the ratio sweep / single point. Target: a warm point costs at most half the cold one (the
persistent engine pays models, parsing and index builds once). SciFact's vectors are read from
the project's embedding cache (filled first, untimed, if missing: ``prep_s``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from _common import ROOT, machine, write_json

TARGET_WARM_TO_COLD = 0.5
MODELS_DIR = str(ROOT / ".cache" / "adiyan" / "models")
GRIDS = {
    "ef": {
        "notebook": str(ROOT / "notebooks" / "hnsw.ipynb"),
        "parameters": {"dataset": "scifact-minilm", "access_filter": False, "k": 10, "n_queries": 200},
        "overrides": {"store.hnsw_m": 16, "store.hnsw_ef_construct": 100},
        "grid": {"store.hnsw_ef": [16, 32, 64, 128, 256]},
        "metrics": ["recall@10", "p50_ms", "mean_ms", "indexed_share", "build_s"],
        "paired": ["recall@10"],
        "fresh_cache": False,  # the SciFact vectors come from the project's embedding cache
    },
    "chunk_size": {
        "notebook": str(ROOT / "notebooks" / "chunking.ipynb"),
        "parameters": {},
        "overrides": {"eval.evalset": "evalsets/adiyan_full", "eval.generate": False, "eval.incidents": False,
                      "eval.judge": None, "chunking.strategy": "recursive", "chunking.overlap": 100},
        "grid": {"chunking.size": [400, 600, 800, 1200, 1600]},
        "metrics": ["retrieval.hit_rate@k", "n_chunks", "index_embedded_texts", "index_build_s", "cold_index_s"],
        "paired": ["hit"],
        "fresh_cache": True,  # every point must embed its chunks: nothing cached beforehand
    },
}


def spec_for(name: str, work: Path, *, single: bool, tag: str) -> Path:
    """A sweep spec for grid ``name`` (only its first value when ``single``), in fresh directories."""
    g = GRIDS[name]
    overrides = {**g["overrides"], "paths.data_dir": str(work / f"data-{tag}"), "paths.models_dir": MODELS_DIR}
    if g["fresh_cache"]:
        overrides["paths.cache_dir"] = str(work / f"cache-{tag}")
    grid = {k: ([v[0]] if single else v) for k, v in g["grid"].items()}
    spec = {"name": f"cost_{name}_{tag}", "notebook": g["notebook"], "engine": "persistent", "jobs": 1,
            "parameters": g["parameters"], "overrides": overrides, "grid": grid,
            "baseline": {k: v[0] for k, v in g["grid"].items()}, "metrics": g["metrics"], "paired": g["paired"]}
    path = work / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    return path


def run_sweep(spec: Path, out: Path, engine: str) -> float:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "adiyan.sweeps", str(spec), "--out-dir", str(out), "--engine", engine,
                           "--quiet"], cwd=ROOT, env=env, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{spec.name} ({engine}) failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return dt


def points_of(out: Path) -> list[dict]:
    """Each point in grid order: its parameters, wall time (from its marker) and metrics."""
    sweep = json.loads((out / "sweep.json").read_text(encoding="utf-8"))
    rows = []
    for p in sweep["points"]:
        pdir = out / "points" / p["id"]
        marker = json.loads((pdir / "COMPLETE.json").read_text(encoding="utf-8"))
        metrics = json.loads((pdir / "point.json").read_text(encoding="utf-8")).get("metrics", {})
        rows.append({"id": p["id"], "params": p["params"], "wall_s": marker["wall_s"], "metrics": metrics})
    return rows


def checks_for(name: str, points: list[dict]) -> dict[str, bool]:
    """That the grid's points did the real work they claim (see the module docstring)."""
    m = [p["metrics"] for p in points]
    if name == "ef":
        return {"hnsw_built_for_every_point": all(x.get("indexed_share") == 1.0 for x in m),
                "recall_rises_with_ef": m[0]["recall@10"] < m[-1]["recall@10"]}
    chunks = [x["n_chunks"] for x in m]
    return {"chunk_count_differs_per_point": len(set(chunks)) == len(chunks),
            "every_point_embedded_texts": all(x.get("index_embedded_texts", 0) > 0 for x in m)}


def measure_grid(name: str, work: Path, engine: str) -> dict:
    single_s = run_sweep(spec_for(name, work, single=True, tag="single"), work / f"{name}-single", engine)
    sweep_s = run_sweep(spec_for(name, work, single=False, tag="sweep"), work / f"{name}-sweep", engine)
    points = points_of(work / f"{name}-sweep")
    cold, warm = points[0]["wall_s"], [p["wall_s"] for p in points[1:]]
    warm_median = statistics.median(warm)
    checks = checks_for(name, points)
    print(f"{name}: single {single_s:.1f}s, sweep {sweep_s:.1f}s, cold point {cold:.1f}s, warm median "
          f"{warm_median:.1f}s; checks {checks}", file=sys.stderr, flush=True)
    keep = GRIDS[name]["metrics"]
    return {"notebook": Path(GRIDS[name]["notebook"]).name, "grid": GRIDS[name]["grid"],
            "parameters": GRIDS[name]["parameters"], "fresh_cache": GRIDS[name]["fresh_cache"],
            "single_point_s": round(single_s, 2), "sweep_s": round(sweep_s, 2), "points": len(points),
            "ratio_sweep_to_single": round(sweep_s / single_s, 3),
            "cold_first_point_s": cold, "warm_points_s": warm, "warm_median_s": round(warm_median, 3),
            "ratio_warm_to_cold": round(warm_median / cold, 3),
            "meets_target": warm_median <= TARGET_WARM_TO_COLD * cold, "checks": checks,
            "per_point": [{"params": p["params"], "wall_s": p["wall_s"],
                           **{k: p["metrics"].get(k) for k in keep}} for p in points]}


def run(grids=("ef", "chunk_size"), engine: str = "persistent") -> dict:
    from adiyan.config import load_settings
    from adiyan.experiments import hnsw

    t0 = time.perf_counter()
    hnsw.scifact_vectors(load_settings(environ={}), embed_missing=True)  # untimed: fills the cache if needed
    prep = time.perf_counter() - t0
    result = {"benchmark": "sweep_cost", "engine": engine, "target_warm_to_cold": TARGET_WARM_TO_COLD,
              "prep_s": round(prep, 2), "load_avg_before": [round(x, 2) for x in os.getloadavg()], "grids": {}}
    with tempfile.TemporaryDirectory(prefix="adiyan-sweep-cost-") as tmp:
        for name in grids:
            result["grids"][name] = measure_grid(name, Path(tmp), engine)
    result["load_avg_after"] = [round(x, 2) for x in os.getloadavg()]
    result["checks"] = {f"{g}.{k}": v for g, r in result["grids"].items() for k, v in r["checks"].items()}
    result["meets_target"] = all(r["meets_target"] for r in result["grids"].values())
    result["ok"] = result["meets_target"] and all(result["checks"].values())
    result["machine"] = machine()
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grids", default="ef,chunk_size", help="comma-separated: " + ", ".join(GRIDS))
    ap.add_argument("--engine", default="persistent", choices=["persistent", "papermill"])
    ap.add_argument("--out", default=str(ROOT / "reports" / "benchmarks" / "sweep_cost.json"))
    args = ap.parse_args(argv)
    result = run(tuple(g for g in args.grids.split(",") if g), args.engine)
    write_json(result, args.out)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
