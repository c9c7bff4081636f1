"""What every experiment shares: its result type, how a notebook records it, the project root.

A notebook computes a :class:`PointResult` with an experiment of this package and ends with
``record(output_dir, result)``, which writes ``output_dir/point.json`` for the sweep runner
(a no-op when the notebook is run by hand, ``output_dir`` None). Every metric and every
numeric per-question score must be declared in the metric registry (:mod:`adiyan.metrics`): a
name ``group.name`` whose group is a run's metrics.json group is that run metric
(``retrieval.ndcg@10``, ``ragas.rouge_score``: a point reuses the run's names, never a renamed
copy), any other name is an experiment's own (group ``sweep``). The sweep pages read its
direction from there, so an undeclared name is an error here, in the notebook, rather than a
guess later.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .. import metrics as M

POINT_FILE = "point.json"
METRIC_GROUP = "sweep"  # the registry group of every experiment metric and per-question score
# A point's metric or per-question score named ``group.name`` with one of these groups is that run
# metric: ``ragas.rouge_score`` is ragas/rouge_score, ``retrieval.hit_rate@k`` retrieval/hit_rate@{k}.
RUN_GROUPS = tuple(sorted({m.group for m in M.REGISTRY} - {METRIC_GROUP}))
# Bumped when point names change: part of every point's fingerprint, so a sweep re-runs points
# recorded under older names instead of gathering them (2: run names instead of renamed copies;
# 3: every point scored like a run, regression cases and incident 3 included).
POINT_FORMAT = 3


def project_root() -> Path:
    """Enter the project root (from ``notebooks/`` when opened in JupyterLab) and return it."""
    cwd = Path.cwd()
    for cand in (cwd, *cwd.parents):
        if (cand / "pyproject.toml").is_file() and (cand / "adiyan").is_dir():
            if cand != cwd:
                os.chdir(cand)
            return cand
    return cwd


def jsonable(v: Any) -> Any:
    """``v`` with numpy scalars and arrays, paths and non-finite floats made JSON-safe."""
    if isinstance(v, np.generic):
        v = v.item()
    elif isinstance(v, np.ndarray):
        v = v.tolist()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, Mapping):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, Path):
        return str(v)
    return v


def mean(values) -> float | None:
    """The mean of the values that are not None, or None when there are none."""
    vals = [float(v) for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def is_score(v: Any) -> bool:
    """A per-question value the sweep gathers and tests: a number or a boolean, not NaN."""
    return isinstance(v, (int, float, np.number)) and not (isinstance(v, float) and math.isnan(v))


@dataclass
class PointResult:
    """What an experiment returns: scalar metrics, per-question scores, anything else in ``info``."""

    metrics: dict[str, float]
    per_question: list[dict] = field(default_factory=list)  # each {"qid": ..., score: value, ...}
    info: dict = field(default_factory=dict)

    def frame(self):
        """The metrics as a tidy two-column table."""
        import pandas as pd  # heavy: only notebooks ask for tables

        return pd.DataFrame({"metric": list(self.metrics), "value": list(self.metrics.values())})

    def questions(self):
        import pandas as pd  # heavy: only notebooks ask for tables

        return pd.DataFrame(self.per_question)


def registry_key(name: str) -> tuple[str, str]:
    """(group, name) of a point metric: ``ragas.rouge_score`` -> (ragas, rouge_score), else (sweep, name)."""
    group, dot, rest = name.partition(".")
    return (group, rest) if dot and group in RUN_GROUPS else (METRIC_GROUP, name)


def unregistered(metrics: Mapping[str, Any], per_question: Sequence[Mapping] = ()) -> list[str]:
    """Metric names and numeric per-question score names the registry does not declare."""
    names = [registry_key(n) for n in metrics]
    names += [registry_key(k) for r in per_question for k, v in r.items() if k != "qid" and is_score(v)]
    out = []
    for group, name in dict.fromkeys(names):
        try:
            M.lookup(group, name)
        except M.UnregisteredMetric:
            out.append(name if group == METRIC_GROUP else f"{group}.{name}")
    return out


def record(output_dir: str | os.PathLike | None, result: PointResult | Mapping[str, float], *,
           per_question: Sequence[Mapping] | None = None, info: Mapping | None = None) -> Path | None:
    """Save a point's metrics for the sweep (``output_dir/point.json``); a no-op without ``output_dir``.

    Metrics must be numbers (or None) and registered in group ``sweep`` of the metric registry;
    ``per_question`` rows carry a ``qid`` and numeric scores (also registered), the input of the
    paired tests against the baseline.
    """
    if isinstance(result, PointResult):
        metrics, pq, inf = result.metrics, result.per_question, result.info
    else:
        metrics, pq, inf = dict(result), [], {}
    pq = list(per_question) if per_question is not None else pq
    inf = {**inf, **(info or {})}
    bad = {k: v for k, v in metrics.items() if v is not None and not isinstance(v, (int, float))
           and type(v).__module__ != "numpy"}
    if bad:
        raise TypeError(f"metrics must be numbers, got {bad}")
    if any("qid" not in r for r in pq):
        raise ValueError("every per_question row needs a 'qid'")
    missing = unregistered(metrics, pq)
    if missing:
        raise M.UnregisteredMetric(f"metric(s) {', '.join(missing)} not registered in group {METRIC_GROUP!r} (or the "
                                   "group before the dot) of "
                                   "adiyan.metrics.REGISTRY: declare each (direction, range) before recording it")
    if output_dir is None:
        return None
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    p = out / POINT_FILE
    tmp = p.with_suffix(".tmp")
    keys = {n: list(registry_key(n)) for n in metrics if registry_key(n)[0] != METRIC_GROUP}
    tmp.write_text(json.dumps(jsonable({"status": "ok", "metrics": metrics, "per_question": pq, "info": inf,
                                        **({"registry_keys": keys} if keys else {}),
                                        "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}),
                              indent=1, ensure_ascii=False), encoding="utf-8")
    tmp.replace(p)
    return p
