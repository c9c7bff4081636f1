"""Run the benchmarks, all or a selection; each writes its JSON under reports/benchmarks/.

Suites (``--suite``, comma-separated or repeated; default ``all``):

    ingest    benchmarks/ingest.py: end-to-end ingest vs the embedder alone (target: ratio <= 1.3)
    latency   benchmarks/latency.py: HNSW vs exact p50 / p95 and recall@10 on SciFact, 100k noisy
              copies, 100k real text spans and 100k random vectors, unfiltered and at 50% / 5%
    cache     benchmarks/cache_effect.py: re-ingest and re-eval, cold vs warm embedding cache
    memory    benchmarks/eval_memory.py: peak RSS of ``adiyan eval`` vs a models-only process
    sweep_cost benchmarks/sweep_cost.py: an ef grid (HNSW, 5,183 vectors) and a chunk-size grid
              (re-chunk, re-embed): the cold first point against the warm rest
    read_gate benchmarks/read_gate.py: the read gate (committed version, owner, visibility) vs the
              raw engine query, steady and with a write in flight
    nomic     benchmarks/nomic_assemble.py: assembling the nomic GGUF, cold and warm, vs one hash pass
    scifact   benchmarks/scifact.py's run_scifact, when that file is present
    scale     benchmarks/scale.py at 100,000 chunks (the CI-sized variant of the million-chunk one-off,
              ``python benchmarks/scale.py run``): write path, HNSW build, RAM, disk, Retriever p50 / p95 /
              p99 and recall@10 vs exact, float32 / int8 / binary, unfiltered and at 50% / 5%
    all       every suite above, in that order
    quick     ingest (100 docs), latency (SciFact only), cache (50 docs), memory --fast,
              sweep_cost (the ef grid only), nomic, scale (100k)

``--fast`` makes ``memory`` measure the fast eval (no LLM, judge or incidents) and ``scifact``
skip the re-rank. A suite is ``ok`` only when it ran *and* met its own target and checks
(``verdict``); ``missed`` when it ran but did not (the reasons are listed), ``failed`` when it
raised. A failing or missing suite is reported and the others still run; the exit status is 1
if any suite is not ok. A summary (per suite: status, reasons, seconds, output file, headline
figures) goes to ``reports/benchmarks/run_all.json``.

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

ORDER = ["ingest", "latency", "cache", "memory", "sweep_cost", "read_gate", "nomic", "scifact", "scale"]
SCALE_SIZE = 100_000  # the scale suite's collection size (the one-off goes to 1,000,000)


def _headline(name: str, r: dict) -> dict:
    """The few figures worth a line in the summary."""
    try:
        if name == "ingest":
            docs = r.get("documents") or {}
            return {"ratio_ingest_to_embed": r["ratio_ingest_to_embed"], "meets_target": r["meets_target"],
                    "cache_speedup_reingest": r["cache_speedup_reingest"],
                    "documents_ratio_ingest_to_embed": docs.get("ratio_ingest_to_embed"),
                    "documents_ratio_parse_to_embed": docs.get("ratio_parse_to_embed")}
        if name == "latency":
            return {f"{s['set']}/{row['filter']}": {"p50": row["ratio_exact_to_hnsw_p50"],
                                                    "recall@10": row["hnsw_recall@10_vs_exact"]}
                    for s in r["sizes"] for row in s["rows"]}
        if name == "cache":
            return {"reingest_cold_to_warm": r["reingest"]["ratio_cold_to_warm"],
                    "reeval_cold_to_warm": r["reeval"]["ratio_cold_to_warm"],
                    "reeval_cold_to_warm_embedding_cache_only": r["reeval"]["ratio_cold_to_warm_embedding_cache_only"]}
        if name == "memory":
            return {"mode": r["mode"], "peak_rss_mib": r["peak_rss_mib"],
                    "ratio_to_models_only": r["ratio_eval_to_models_only_peak"]}
        if name == "sweep_cost":
            return {g: {"cold_first_point_s": x["cold_first_point_s"], "warm_median_s": x["warm_median_s"],
                        "ratio_sweep_to_single": x["ratio_sweep_to_single"]} for g, x in r["grids"].items()}
        if name == "read_gate":
            return r["summary"]
        if name == "nomic":
            return {"cold_assemble_s": r["cold_assemble_s"], "ratio_warm_to_hash": r["ratio_warm_to_hash"]}
        if name == "scifact":
            return {m: row["ndcg@10"]["measured"] for m, row in r["methods"].items()} | {"checks": r["checks"]}
        if name == "scale":
            return r["target_results"]
    except (KeyError, TypeError) as exc:
        return {"headline_unavailable": repr(exc)}
    return {}


def verdict(name: str, r: dict, *, quick: bool = False) -> list[str]:
    """Why the suite missed its own target or checks (empty: it met them). ``quick`` runs a
    suite too small to measure its target (latency without the 100k sets): checks only."""
    reasons = []
    checks = r.get("checks") or {}
    reasons += [f"check failed: {k}" for k, v in checks.items() if v is False]
    if name in ("ingest", "latency", "sweep_cost", "nomic") and r.get("meets_target") is False:
        reasons.append("target missed: " + {
            "ingest": f"ratio {r.get('ratio_ingest_to_embed')} above {r.get('target_ratio')}",
            "latency": r.get("target", ""), "nomic": f"warm/hash {r.get('ratio_warm_to_hash')}",
            "sweep_cost": "; ".join(f"{g}: warm/cold {x['ratio_warm_to_cold']} above {r['target_warm_to_cold']}"
                                    for g, x in r.get("grids", {}).items() if not x["meets_target"])}[name])
    if name == "latency" and r.get("meets_target") is None and not quick:
        reasons.append("target not measured: the real_text set was not run")
    if name == "cache":
        for part in ("reingest", "reeval"):
            if not r[part]["ratio_cold_to_warm"] > 1:
                reasons.append(f"check failed: {part} is not faster with a warm cache")
    if name == "memory" and r["eval"]["exit_code"] not in (0, 3):
        reasons.append(f"adiyan eval exited {r['eval']['exit_code']}: {r['eval']['output_tail']}")
    if name == "scifact" and not checks:
        reasons.append("no checks reported")
    if name == "scale":
        for target, row in (r.get("target_results") or {}).items():
            if isinstance(row, dict) and row.get("met") is False:
                reasons.append(f"target missed: {target} {row}")
    return reasons


def run_suite(name: str, out_dir: Path, *, fast: bool, quick: bool) -> dict:
    """Run one suite; returns its summary row (status ok | missed | failed | skipped)."""
    out = out_dir / {"cache": "cache_effect.json", "memory": f"eval_memory{'_fast' if fast or quick else ''}.json",
                     "nomic": "nomic_assemble.json", "scale": f"scale_{SCALE_SIZE // 1000}k.json"}.get(name, f"{name}.json")
    t0 = time.perf_counter()
    row: dict = {"suite": name, "out": str(out)}
    try:
        if name == "ingest":
            result = importlib.import_module("ingest").run(100 if quick else 400)
        elif name == "latency":
            result = importlib.import_module("latency").run(("scifact",) if quick else
                                                            ("scifact", "noisy_copies", "real_text", "random"))
        elif name == "cache":
            result = importlib.import_module("cache_effect").run(50 if quick else 200)
        elif name == "memory":
            result = importlib.import_module("eval_memory").run(fast or quick)
        elif name == "sweep_cost":
            result = importlib.import_module("sweep_cost").run(("ef",) if quick else ("ef", "chunk_size"))
        elif name == "read_gate":
            result = importlib.import_module("read_gate").run(100 if quick else 400, 100 if quick else 300)
        elif name == "nomic":
            result = importlib.import_module("nomic_assemble").run()
        elif name == "scale":
            scale = importlib.import_module("scale")
            result = scale.run([SCALE_SIZE], scale.QUANTS, 500)
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
        reasons = verdict(name, result, quick=quick)
        row.update(status="missed" if reasons else "ok", reasons=reasons, headline=_headline(name, result))
        if reasons:
            print(f"{name}: missed its target or checks: {'; '.join(reasons)}", flush=True)
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
    return 1 if any(r["status"] in ("failed", "missed") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
