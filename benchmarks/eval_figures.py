"""`adiyan eval` as a regression command: run it with the given settings and copy metrics.json to --out.

The run is the production `run_eval` (the same path `invoke eval` takes); its report lands in a
scratch reports folder so a regression check leaves the user's `reports/` as it was, while the
data and cache folders are the configured ones (a warm index or embedding cache is reused).
A run that fails a regression case (exit 3 in `adiyan eval`) still writes its metrics: the
figures decide here, so they are copied before the failure is reported.

    python benchmarks/eval_figures.py --set eval.generate=false --set eval.judge=null --out FILE.json
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    from adiyan.config import load_settings, parse_set
    from adiyan.eval.runner import RegressionFailed, run_eval

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default=None)
    p.add_argument("--preset", default=None)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--out", required=True, help="where metrics.json is copied")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="eval-figures-") as tmp:
        overrides = {"paths.reports_dir": tmp, **parse_set(a.set)}
        settings = load_settings(a.config, overrides, preset=a.preset)
        status = 0
        try:
            run_dir = run_eval(settings, progress=False)
        except RegressionFailed as exc:
            run_dir, status = exc.run_dir, 3
            print(f"eval_figures: regression cases failed: {exc}", file=sys.stderr)
        out = Path(a.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(run_dir) / "metrics.json", out)
    print(f"eval_figures: metrics.json copied to {out}")
    return status


if __name__ == "__main__":
    sys.exit(main())
