"""The README's five-minute tour, timed as a newcomer meets it: steps 1-5, every command as written.

The commands are read from README.md's "A five-minute tour" section (the section's bash blocks up to
step 6, which is about the user's own documents), not re-spelt here, so the figure is the tour that
the README shows. Step 1's main command is the inline `invoke eval` (the README's first command, with
the install already done); the placeholders ``RUN_A RUN_B`` of step 3 become the run ids of step 1's
`invoke eval` and step 3's `invoke eval --set retrieval.mode=hybrid`, which is what a reader compares.

"After install" is measured cold: every command runs from the repository root with a fresh, empty
data folder, embedding / parse / LLM cache and reports folder (``ADIYAN_PATHS__DATA_DIR``,
``ADIYAN_PATHS__CACHE_DIR``, ``ADIYAN_PATHS__REPORTS_DIR`` in a temporary folder), while the model
files the install unpacked (``paths.models_dir``) stay where the install put them. A second pass
(``--passes 2``) re-runs the tour on the warm folders: what a returning user pays.

Each command's wall time, exit status and last output line land in the JSON; the tour's total is
the sum over steps 1-5. The goal (issue 41) is a total of at most 300 s on 2 cores.

    python benchmarks/tour.py [--passes 1] [--out benchmarks/results/tour.json] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from _common import ROOT, machine, write_json

GOAL_S = 300.0
SECTION = "## A five-minute tour"


def tour_commands(readme: Path = ROOT / "README.md") -> list[tuple[int, str]]:
    """``(step, command)`` for README's tour steps 1-5, in order; step 1 starts with `invoke eval`."""
    text = readme.read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    section = text[start:end if end > 0 else len(text)]
    out: list[tuple[int, str]] = []
    step = 0
    for part in re.split(r"(```bash\n.*?```)", section, flags=re.S):
        if part.startswith("```bash"):
            if 1 <= step <= 5:
                for line in part.splitlines()[1:-1]:
                    cmd = line.split("  #")[0].strip()  # "cmd      # comment"
                    if cmd:
                        out.append((step, cmd))
            continue
        for m in re.finditer(r"\*\*(\d+)\. ", part):
            step = int(m.group(1))
            if step == 1 and not out:
                out.append((1, ".venv/bin/invoke eval"))
    if not out or out[0] != (1, ".venv/bin/invoke eval"):
        raise SystemExit(f"{readme}: no tour step 1 found under {SECTION!r}")
    return out


def _runs(reports: Path) -> set[str]:
    return {p.name for p in reports.iterdir() if p.is_dir() and (p / "metrics.json").is_file()} \
        if reports.is_dir() else set()


def run_tour(root: Path, *, label: str) -> dict:
    env = dict(os.environ)
    env.update({"ADIYAN_PATHS__DATA_DIR": str(root / "data"), "ADIYAN_PATHS__CACHE_DIR": str(root / "cache"),
                "ADIYAN_PATHS__REPORTS_DIR": str(root / "reports"), "HF_HUB_OFFLINE": "1"})
    evals: list[str] = []
    rows = []
    for step, cmd in tour_commands():
        if "RUN_A" in cmd:
            if len(evals) < 2:
                raise SystemExit(f"step {step}: {cmd!r} needs two earlier `invoke eval` runs, saw {evals}")
            cmd = cmd.replace("RUN_A", evals[0]).replace("RUN_B", evals[-1])
        before = _runs(root / "reports")
        print(f"[{label}] step {step}: {cmd}", flush=True)
        t0 = time.perf_counter()
        p = subprocess.run(["bash", "-c", cmd], cwd=ROOT, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        new = sorted(_runs(root / "reports") - before)
        if cmd.startswith(".venv/bin/invoke eval") and "eval.generate=false" not in cmd and new:
            evals.append(new[-1])
        lines = [x for x in (p.stdout + p.stderr).splitlines() if x.strip()]
        rows.append({"step": step, "command": cmd, "seconds": round(seconds, 1), "exit": p.returncode,
                     "last_line": lines[-1][:300] if lines else ""})
        print(f"    {seconds:.1f} s, exit {p.returncode}: {rows[-1]['last_line'][:160]}", flush=True)
    steps = {}
    for r in rows:
        steps[str(r["step"])] = round(steps.get(str(r["step"]), 0.0) + r["seconds"], 1)
    total = round(sum(r["seconds"] for r in rows), 1)
    return {"label": label, "commands": rows, "seconds_per_step": steps, "total_s": total,
            "exits_nonzero": [r["command"] for r in rows if r["exit"] != 0]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passes", type=int, default=1, help="1: cold only; 2: cold, then warm on the same folders")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "tour.json"))
    ap.add_argument("--keep", default=None, help="use (and keep) this folder instead of a temporary one")
    args = ap.parse_args()
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="adiyan_tour_"))
    if args.keep and root.exists() and any(root.iterdir()):
        raise SystemExit(f"{root}: not empty (the tour is measured from empty folders)")
    root.mkdir(parents=True, exist_ok=True)
    try:
        passes = [run_tour(root, label="cold")]
        if args.passes > 1:
            passes.append(run_tour(root, label="warm"))
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    cold = passes[0]
    result = {"benchmark": "tour", "readme_section": SECTION, "goal_s": GOAL_S, "machine": machine(),
              "cold_total_s": cold["total_s"], "meets_goal": cold["total_s"] <= GOAL_S and not cold["exits_nonzero"],
              "passes": passes}
    if len(passes) > 1:
        result["warm_total_s"] = passes[1]["total_s"]
    write_json(result, args.out, quiet=True)
    print(f"tour: cold {cold['total_s']:.1f} s" + (f", warm {passes[1]['total_s']:.1f} s" if len(passes) > 1 else "")
          + f" (goal <= {GOAL_S:.0f} s); steps {cold['seconds_per_step']}")
    return 0 if result["meets_goal"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
