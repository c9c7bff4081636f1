"""Peak memory of ``invoke eval``: the CLI as a subprocess, beside a models-only reference process.

Runs ``python -m adiyan.cli --set paths.data_dir=<tmp>/data --set paths.reports_dir=<tmp>/reports
--set paths.cache_dir=<tmp>/cache eval --quiet`` (the default config otherwise: evalset
adiyan_full, answers by the embedded LLM, the judge on a sample, the incidents) with every cache
cold, and measures its peak resident set size two ways:

- psutil polling every 0.1 s of the child and all its descendants, summed (the reported
  ``peak_rss_mib``): catches concurrent helper processes, at the cost of missing a peak shorter
  than the interval;
- ``ru_maxrss`` from ``os.wait4()`` on that child, kept as an upper bound only: Linux copies the
  parent's high-water mark into a forked child, so a child of a big process (``invoke bench``
  runs this after other suites) reports at least the parent's peak (seen: the 10-second
  models-only reference reported the same 1,733 MiB as the whole eval).

The reference, measured the same way in the same run, is a process that only imports the
package and loads the models the mode needs (embedder; plus the LLM and judge for the full
mode): the eval's peak is reported as a ratio of it (what the job adds beyond holding the models).

``--fast`` sets ``eval.generate=false eval.judge=null eval.incidents=false`` (retrieval and
non-LLM scoring only; the LLM is never loaded); the full default eval takes 5-15 minutes on a
loaded two-core machine. The JSON says which was measured.

    python benchmarks/eval_memory.py [--fast] [--out reports/benchmarks/eval_memory.json]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time

from _common import ROOT, machine, write_json

FAST_SETS = ["eval.generate=false", "eval.judge=null", "eval.incidents=false"]
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "RAGAS_DO_NOT_TRACK": "true",
       "MEM0_TELEMETRY": "False", "TOKENIZERS_PARALLELISM": "false"}
MODELS_ONLY = """
import sys
from adiyan.config import load_settings, parse_set
from adiyan.models import embedder_from_settings, llm_from_settings
s = load_settings(None, parse_set(sys.argv[1:]))
emb = embedder_from_settings(s, progress=False)
emb.embed(["reference"], "query")
if s.eval.generate:
    llm_from_settings(s).chat([{"role": "user", "content": "Say hi."}], max_tokens=4)
if s.eval.judge:
    from adiyan.eval.judge import judge_from_settings
    judge_from_settings(s)
"""


def measure(cmd: list[str], *, poll_s: float = 0.1, timeout_s: float = 3600) -> dict:
    """Run ``cmd``; its exit code, wall time and peak RSS (wait4 ru_maxrss and psutil tree polling)."""
    import psutil

    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, **ENV}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    ps = psutil.Process(proc.pid)
    peak_tree = peak_main = 0
    samples = 0
    output: list[bytes] = []
    reader = threading.Thread(target=lambda: output.append(proc.stdout.read()), daemon=True)
    reader.start()
    status = rusage = None
    while True:
        pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            break
        try:
            main_rss = ps.memory_info().rss
            tree = main_rss + sum(c.memory_info().rss for c in ps.children(recursive=True))
        except psutil.Error:
            tree = main_rss = 0
        peak_tree, peak_main = max(peak_tree, tree), max(peak_main, main_rss)
        samples += 1
        if samples % int(30 / poll_s) == 0:  # a line every 30 s: a killed run still leaves its peak so far
            print(f"  ... {time.perf_counter() - t0:.0f}s, peak so far {peak_tree / 2**20:.0f} MiB (psutil tree)",
                  file=sys.stderr, flush=True)
        if time.perf_counter() - t0 > timeout_s:
            proc.kill()
        time.sleep(poll_s)
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped by wait4: tell Popen
    reader.join(timeout=10)
    tail = (output[0] if output else b"").decode(errors="replace").strip().splitlines()[-8:]
    return {"exit_code": proc.returncode, "seconds": round(time.perf_counter() - t0, 1),
            "peak_rss_mib_wait4": round(rusage.ru_maxrss / 1024, 1),  # Linux: KiB
            "peak_rss_mib_psutil_tree": round(peak_tree / 2**20, 1),
            "peak_rss_mib_psutil_main": round(peak_main / 2**20, 1), "psutil_samples": samples,
            "output_tail": tail}


def run(fast: bool = False, progress: bool = True) -> dict:
    mode = "fast" if fast else "full"
    extra = FAST_SETS if fast else []
    with tempfile.TemporaryDirectory(prefix="adiyan_eval_memory_") as tmp:
        sets = [f"paths.data_dir={tmp}/data", f"paths.reports_dir={tmp}/reports", f"paths.cache_dir={tmp}/cache",
                *extra]
        cli = [sys.executable, "-m", "adiyan.cli"] + [a for s in sets for a in ("--set", s)] + ["eval", "--quiet"]
        if progress:
            print(f"[eval_memory] reference: models only ({mode})", flush=True)
        reference = measure([sys.executable, "-c", MODELS_ONLY, *sets])
        if progress:
            print(f"  {reference['peak_rss_mib_psutil_tree']} MiB in {reference['seconds']}s", flush=True)
            print(f"[eval_memory] {' '.join(cli[1:])}", flush=True)
        ev = measure(cli)
        if progress:
            print(f"  exit {ev['exit_code']}, {ev['peak_rss_mib_psutil_tree']} MiB (psutil tree; wait4 upper bound "
                  f"{ev['peak_rss_mib_wait4']}) in {ev['seconds']}s", flush=True)
    return {
        "benchmark": "eval_peak_memory", "mode": mode,
        "measured": ("default config (adiyan_full, generation by the embedded LLM, judge sample, incidents), "
                     "cold caches in a temporary folder") if not fast else
                    ("--fast: eval.generate=false eval.judge=null eval.incidents=false (the LLM is never loaded), "
                     "cold caches in a temporary folder"),
        "command": "python -m adiyan.cli " + " ".join(f"--set {s.replace(tmp, '<tmp>')}" for s in sets) + " eval --quiet",
        "eval": ev,
        "reference_models_only": reference,
        # psutil's sampled tree peak is the figure: wait4's ru_maxrss of a child starts from the
        # parent's high-water mark at fork time (Linux copies it), so it is only an upper bound
        "peak_rss_mib": ev["peak_rss_mib_psutil_tree"],
        "ratio_eval_to_models_only_peak": round(ev["peak_rss_mib_psutil_tree"] / reference["peak_rss_mib_psutil_tree"], 2),
        "eval_minus_models_only_mib": round(ev["peak_rss_mib_psutil_tree"] - reference["peak_rss_mib_psutil_tree"], 1),
        "machine": machine(),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--fast", action="store_true", help="generate, judge and incidents off")
    p.add_argument("--out", default=None, help="default: reports/benchmarks/eval_memory[_fast].json")
    a = p.parse_args()
    out = a.out or f"reports/benchmarks/eval_memory{'_fast' if a.fast else ''}.json"
    result = run(a.fast)
    write_json(result, out)
    if result["eval"]["exit_code"] not in (0, 3):  # 3: a regression floor failed, the run is complete
        sys.exit(1)


if __name__ == "__main__":
    main()
