"""Run the benchmarks, all or a selection; each writes its JSON under reports/benchmarks/.

Suites (``--suite``, comma-separated or repeated; default ``all``):

    ingest    benchmarks/ingest.py: end-to-end ingest vs the embedder alone (ratio)
    latency   benchmarks/latency.py: HNSW vs exact p50 / p95, SciFact size and 100k, filtered or not
    cache     benchmarks/cache_effect.py: re-ingest and re-eval, cold vs warm embedding cache
    memory    benchmarks/eval_memory.py: peak RSS of ``adiyan eval`` vs a models-only process
    sweep_cost benchmarks/sweep_cost.py: one sweep point alone vs an 8-point top-k x ef sweep, warm
    scifact   benchmarks/scifact.py's run_scifact, when that file is present
    all       every suite above, in that order
    quick     ingest (100 docs), latency (SciFact size only), cache (50 docs), memory --fast,
              sweep_cost (1 repeat)

``--fast`` makes ``memory`` measure the fast eval (no LLM, judge or incidents) and ``scifact``
skip the re-rank. A failing suite is reported and the others still run; the exit status is 1
if any failed. A summary (per suite: status, seconds, output file, headline figures) goes to
``reports/benchmarks/run_all.json``.

    python benchmarks/run_all.py [--suite all] [--fast] [--out-dir reports/benchmarks]
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import traceback
from pathlib import Path

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

from _common import ROOT, machine, write_json  # noqa: E402

ORDER = ["ingest", "latency", "cache", "memory", "sweep_cost", "scifact"]


def _headline(name: str, r: dict) -> dict:
    """The few figures worth a line in the summary."""
    try:
        if name == "ingest":
            return {"ratio_ingest_to_embed": r["ratio_ingest_to_embed"], "meets_target": r["meets_target"],
                    "cache_speedup_reingest": r["cache_speedup_reingest"]}
        if name == "latency":
            return {f"{s['vectors']}/{row['filter']}": {"p50": row["ratio_exact_to_hnsw_p50"],
                                                        "p95": row["ratio_exact_to_hnsw_p95"]}
                    for s in r["sizes"] for row in s["rows"]}
        if name == "cache":
            return {"reingest_cold_to_warm": r["reingest"]["ratio_cold_to_warm"],
                    "reeval_cold_to_warm": r["reeval"]["ratio_cold_to_warm"],
                    "reeval_cold_to_warm_embedding_cache_only": r["reeval"]["ratio_cold_to_warm_embedding_cache_only"]}
        if name == "memory":
            return {"mode": r["mode"], "peak_rss_mib": r["peak_rss_mib"],
                    "ratio_to_models_only": r["ratio_eval_to_models_only_peak"]}
        if name == "sweep_cost":
            return {"single_point_s": r["single_point_s"], "sweep_8_points_s": r["sweep_8_points_s"], "ratio": r["ratio"]}
        if name == "scifact":
            return {m: row["ndcg@10"]["measured"] for m, row in r["methods"].items()} | {"checks": r["checks"]}
    except (KeyError, TypeError) as exc:
        return {"headline_unavailable": repr(exc)}
    return {}


def run_suite(name: str, out_dir: Path, *, fast: bool, quick: bool) -> dict:
    """Run one suite; returns its summary row (status ok | failed | skipped)."""
    out = out_dir / {"cache": "cache_effect.json", "memory": f"eval_memory{'_fast' if fast or quick else ''}.json"}.get(
        name, f"{name}.json")
    t0 = time.perf_counter()
    row: dict = {"suite": name, "out": str(out)}
    try:
        if name == "ingest":
            result = importlib.import_module("ingest").run(100 if quick else 400)
        elif name == "latency":
            result = importlib.import_module("latency").run(("scifact",) if quick else ("scifact", 100_000))
        elif name == "cache":
            result = importlib.import_module("cache_effect").run(50 if quick else 200)
        elif name == "memory":
            result = importlib.import_module("eval_memory").run(fast or quick)
            if result["eval"]["exit_code"] not in (0, 3):
                raise RuntimeError(f"adiyan eval exited {result['eval']['exit_code']}: {result['eval']['output_tail']}")
        elif name == "sweep_cost":
            result = importlib.import_module("sweep_cost").run(repeats=1 if quick else 2)
            if not result["meets_target"]:
                print(f"sweep_cost: ratio {result['ratio']} above the target {result['target_ratio']}", flush=True)
        elif name == "scifact":
            if not (BENCH / "scifact.py").is_file():
                return {**row, "status": "skipped", "reason": "benchmarks/scifact.py is not present"}
            scifact = importlib.import_module("scifact")
            if not hasattr(scifact, "run_scifact"):
                return {**row, "status": "skipped", "reason": "benchmarks/scifact.py has no run_scifact"}
            result = scifact.run_scifact(None, out, rerank=not (fast or quick), progress=False)
        else:
            raise ValueError(f"unknown suite {name!r}")
        if name != "scifact":  # run_scifact writes its own file
            write_json(result, out)
        row.update(status="ok", headline=_headline(name, result))
    except Exception as exc:  # noqa: BLE001 - one failing suite must not stop the others
        traceback.print_exc()
        row.update(status="failed", error=f"{type(exc).__name__}: {exc}")
    row["seconds"] = round(time.perf_counter() - t0, 1)
    return row


def expand(suites: list[str]) -> tuple[list[str], bool]:
    names: list[str] = []
    quick = False
    for item in suites:
        for name in (s.strip() for s in item.split(",") if s.strip()):
            if name == "all":
                names += ORDER
            elif name == "quick":
                quick = True
                names += [n for n in ORDER if n != "scifact"]
            elif name in ORDER:
                names.append(name)
            else:
                raise SystemExit(f"unknown suite {name!r}; choose from: all, quick, {', '.join(ORDER)}")
    return list(dict.fromkeys(names)), quick


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--suite", action="append", default=None, help="all | quick | " + " | ".join(ORDER) +
                   " (comma-separated or repeated; default all)")
    p.add_argument("--fast", action="store_true", help="memory: the fast eval; scifact: no re-rank")
    p.add_argument("--out-dir", default=str(ROOT / "reports" / "benchmarks"))
    a = p.parse_args(argv)
    names, quick = expand(a.suite or ["all"])
    out_dir = Path(a.out_dir)
    rows = []
    for name in names:
        print(f"\n=== {name} ===", flush=True)
        rows.append(run_suite(name, out_dir, fast=a.fast, quick=quick))
        print(f"=== {name}: {rows[-1]['status']} in {rows[-1]['seconds']}s", flush=True)
    summary = {"benchmark": "run_all", "suites": rows, "fast": a.fast, "quick": quick, "machine": machine()}
    write_json(summary, out_dir / "run_all.json")
    return 1 if any(r["status"] == "failed" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
