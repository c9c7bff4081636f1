"""Helpers shared by the benchmark scripts: JSON output beside the reports, machine facts."""

from __future__ import annotations

import json
import os
import platform
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared" / "datasets"


def machine() -> dict:
    import numpy as np

    return {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
            "numpy": np.__version__, "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def write_json(result: dict, out: str | Path, *, quiet: bool = False) -> Path:
    """Write ``result`` to ``out``; print it too unless ``quiet`` (a long run rewriting its file)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    if not quiet:
        print(json.dumps(result, indent=2))
    print(f"written to {out}")
    return out


def percentile(values, q: float) -> float:
    import numpy as np

    return float(np.percentile(np.asarray(values, dtype=np.float64), q))
