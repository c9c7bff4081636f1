"""A sweep's spec, its grid, point ids and fingerprints, and the marker that says a point is finished.

``sweeps/NAME.yaml`` holds a :class:`SweepSpec`; :func:`expand` turns its grid into
:class:`Point` s with stable, readable ids; a point is finished when its ``COMPLETE.json``
marker (written last, atomically) is there and its fingerprint (notebook code, parameters)
matches, which is what lets a killed sweep resume with only the rest.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

import nbformat

from ..config import load_settings, read_yaml_mapping
from ..experiments.common import POINT_FORMAT

SWEEPS_DIR = Path("sweeps")
OUT_ROOT = Path("reports") / "sweeps"  # under the default paths.reports_dir; see default_out_dir


def default_out_dir(name: str, overrides: Mapping[str, Any] | None = None) -> Path:
    """Where sweep NAME writes when no ``--out-dir`` is given: ``<paths.reports_dir>/sweeps/NAME``, the
    reports folder every other entry point honours (config file, ``ADIYAN_PATHS__REPORTS_DIR``, ``--set``)."""
    # a per-point template ("{output_dir}/run") is filled point by point, never a sweep's own folder
    fixed = {k: v for k, v in dict(overrides or {}).items() if not (isinstance(v, str) and "{output_dir}" in v)}
    return Path(load_settings(overrides=fixed).paths.reports_dir) / "sweeps" / name
ENGINES = ("persistent", "papermill")
EXECUTORS = ("local", "ray")  # where points run: this machine's kernels, or Ray tasks (adiyan.sweeps.ray_engine)
MARKER = "COMPLETE.json"
FAILED = "FAILED.json"
DEFAULT_KERNEL = "adiyan"


class SweepError(ValueError):
    """A sweep spec that cannot be run, or a sweep whose points failed; the message says which."""


@dataclass
class SweepSpec:
    name: str
    notebook: Path
    grid: list[dict] = field(default_factory=list)  # list of mappings, each expanded as a product
    parameters: dict = field(default_factory=dict)  # fixed notebook parameters
    overrides: dict = field(default_factory=dict)  # fixed settings overrides
    config_file: str | None = None
    description: str = ""
    engine: str = "persistent"
    jobs: int = 1
    kernel: str | None = None
    baseline: dict | None = None
    frontier: dict | None = None  # {"x": metric, "y": metric}
    metrics: list[str] = field(default_factory=list)  # metrics shown and plotted (default: all)
    paired: list[str] = field(default_factory=list)  # per-question scores tested (default: all)
    timeout: int | None = None  # per cell, seconds
    # Scored like a run (adiyan.experiments.scoring): questions answered per point for RAGAS
    # (a seeded sample, the same at every point; None = all) and the regression cases file
    # (None = evalsets/regression.yaml). Passed to the notebook as parameters when set.
    answer_questions: int | None = None
    regression_cases: str | None = None
    source: str = ""

    @classmethod
    def from_dict(cls, data: Mapping, *, name: str | None = None, source: str = "") -> "SweepSpec":
        data = dict(data)
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(data) - known
        if unknown:
            raise SweepError(f"{source or 'sweep spec'}: unknown key(s) {', '.join(sorted(unknown))}; "
                             f"known: {', '.join(sorted(known - {'source'}))}")
        if "notebook" not in data:
            raise SweepError(f"{source or 'sweep spec'}: 'notebook' is required")
        grid = data.get("grid") or [{}]
        if isinstance(grid, Mapping):
            grid = [dict(grid)]
        if not isinstance(grid, list) or not all(isinstance(g, Mapping) for g in grid):
            raise SweepError(f"{source}: 'grid' must be a mapping or a list of mappings")
        engine = data.get("engine", "persistent")
        if engine not in ENGINES:
            raise SweepError(f"{source}: engine must be one of {ENGINES}, got {engine!r}")
        spec = cls(name=data.get("name") or name or Path(str(data["notebook"])).stem,
                   notebook=Path(data["notebook"]), grid=[dict(g) for g in grid],
                   parameters=dict(data.get("parameters") or {}), overrides=dict(data.get("overrides") or {}),
                   config_file=data.get("config_file"), description=data.get("description", ""),
                   engine=engine, jobs=int(data.get("jobs", 1)), kernel=data.get("kernel"),
                   baseline=data.get("baseline"), frontier=data.get("frontier"),
                   metrics=list(data.get("metrics") or []), paired=list(data.get("paired") or []),
                   timeout=data.get("timeout"), answer_questions=data.get("answer_questions"),
                   regression_cases=data.get("regression_cases"), source=source)
        bad = [k for k in spec.parameters if "." in k]
        if bad:
            raise SweepError(f"{source}: parameters {bad} contain a dot; put settings under 'overrides'")
        return spec


def load_spec(name_or_path: str | os.PathLike, sweeps_dir: str | os.PathLike = SWEEPS_DIR) -> SweepSpec:
    """``sweeps/NAME.yaml`` for a bare name, else the YAML file at that path."""
    p = Path(name_or_path)
    if not p.suffix:
        p = Path(sweeps_dir) / f"{name_or_path}.yaml"
    missing = "no such sweep spec"
    if not p.is_file() and Path(sweeps_dir).is_dir():  # name the specs there are
        avail = sorted(x.stem for x in Path(sweeps_dir).glob("*.yaml"))
        missing += f"; available: {', '.join(avail)}" if avail else ""
    data = read_yaml_mapping(p, SweepError, missing)
    return SweepSpec.from_dict(data, name=p.stem, source=str(p))


def canon(obj: Any) -> str:
    """Canonical JSON: sorted keys, no spaces (ids, fingerprints and grouping compare these)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def sha(obj: Any) -> str:
    return hashlib.sha256((obj if isinstance(obj, str) else canon(obj)).encode("utf-8")).hexdigest()


def expand_grid(grid: Mapping | Sequence[Mapping]) -> list[dict]:
    """Every point of a grid, in order.

    A mapping is the product of its values (a list is an axis, anything else a fixed value),
    the first key varying slowest; a list of mappings is the union of their products, with
    repeated points dropped. ``{"a": [1, 2], "b": ["x", "y"]}`` gives a=1,b=x; a=1,b=y;
    a=2,b=x; a=2,b=y.
    """
    blocks = [grid] if isinstance(grid, Mapping) else list(grid)
    out, seen = [], set()
    for block in blocks:
        keys = list(block)
        axes = [v if isinstance(v, list) else [v] for v in block.values()]
        for combo in itertools.product(*axes):
            point = dict(zip(keys, combo))
            c = canon(point)
            if c not in seen:
                seen.add(c)
                out.append(point)
    return out


def _fmt_value(v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return re.sub(r"[^A-Za-z0-9.+]+", "-", str(v)).strip("-") or "x"


def point_id(params: Mapping[str, Any]) -> str:
    """A readable, stable id from the parameters alone: ``kb_top_k-4--<sha8>``.

    Keys are sorted and values canonicalised, so the id does not depend on the order of the
    YAML; the hash covers the full keys and values, the readable part only their last segment.
    """
    if not params:
        return "default--" + sha({})[:8]
    label = "__".join(f"{k.split('.')[-1]}-{_fmt_value(v)}" for k, v in sorted(params.items()))
    label = re.sub(r"[^A-Za-z0-9_.+-]", "-", label)[:80]
    return f"{label}--{sha(dict(params))[:8]}"


@dataclass
class Point:
    id: str
    params: dict  # the grid's values for this point (all keys)
    notebook_params: dict  # parameters injected into the notebook (without output_dir)
    overrides: dict  # settings overrides (fixed + grid)

    @property
    def label(self) -> str:
        return ", ".join(f"{k.split('.')[-1]}={v}" for k, v in self.params.items()) or "default"


def expand(spec: SweepSpec) -> list[Point]:
    """The spec's points: grid keys with a dot are settings overrides, the others notebook parameters."""
    points = []
    for params in expand_grid(spec.grid):
        overrides = {**spec.overrides, **{k: v for k, v in params.items() if "." in k}}
        nb_params = {**spec.parameters, **{k: v for k, v in params.items() if "." not in k}}
        nb_params.update({"overrides": overrides, "config_file": spec.config_file})
        nb_params.update({k: getattr(spec, k) for k in ("answer_questions", "regression_cases")
                          if getattr(spec, k) is not None})
        points.append(Point(point_id(params), dict(params), nb_params, overrides))
    ids = [p.id for p in points]
    if len(set(ids)) != len(ids):  # only on a sha256 prefix collision
        raise SweepError(f"{spec.source}: two points share an id")
    return points


def baseline_point(spec: SweepSpec, points: Sequence[Point]) -> Point | None:
    """The point the others are tested against: the first matching ``baseline``, else the first."""
    if not points:
        return None
    if spec.baseline:
        match = [p for p in points if all(canon(p.params.get(k)) == canon(v) for k, v in spec.baseline.items())]
        if not match:
            raise SweepError(f"{spec.source}: baseline {spec.baseline} matches no point of the grid")
        return match[0]
    return points[0]


def notebook_code_hash(path: str | os.PathLike) -> str:
    """sha256 of the notebook's code cells: editing a Markdown cell does not invalidate points."""
    nb = nbformat.read(str(path), as_version=4)
    return sha([c.source for c in nb.cells if c.cell_type == "code"])


def point_fingerprint(spec: SweepSpec, point: Point, code_hash: str | None = None) -> str:
    code_hash = code_hash or notebook_code_hash(spec.notebook)
    return sha({"notebook": code_hash, "params": point.notebook_params, "id": point.id, "format": POINT_FORMAT})[:16]


def is_complete(point_dir: str | os.PathLike, fingerprint: str | None = None) -> bool:
    """The point's marker exists (it is written last) and, if given, its fingerprint matches."""
    p = Path(point_dir) / MARKER
    if not p.is_file():
        return False
    try:
        marker = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return fingerprint is None or marker.get("fingerprint") == fingerprint


def estimate(spec: SweepSpec, out_dir: str | os.PathLike, cwd: str | os.PathLike | None = None) -> dict:
    """What running the sweep would cost now, from its output folder's state: points done (finished
    with the current fingerprint, reused for free), points left, and the time those take, estimated
    from the wall time each earlier finished point recorded (its own when it ran before, else the
    median of the sweep's measured points). ``seconds_left`` is None when nothing was ever measured."""
    nb = Path(spec.notebook)
    nb = nb if nb.is_absolute() else Path(cwd or Path.cwd()) / nb
    code = notebook_code_hash(nb) if nb.is_file() else None
    points = expand(spec)
    recorded: dict[str, float] = {}  # point id -> the wall time its marker recorded (any fingerprint)
    done: set[str] = set()  # finished with the current fingerprint: reused for free
    for p in points:
        try:
            m = json.loads((Path(out_dir) / "points" / p.id / MARKER).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(m.get("wall_s"), (int, float)):
            recorded[p.id] = float(m["wall_s"])
        if code and m.get("fingerprint") == point_fingerprint(spec, p, code):
            done.add(p.id)
    measured = sorted(recorded.values())
    median = measured[len(measured) // 2] if measured else None
    left = [p for p in points if p.id not in done]
    secs = None if median is None else sum(recorded.get(p.id, median) for p in left)
    return {"points": len(points), "done": len(done), "left": len(left), "seconds_left": secs}


def mark_complete(point_dir: str | os.PathLike, fingerprint: str, **info) -> Path:
    """Write the completion marker atomically (tmp + rename); call only once everything else is written."""
    p = Path(point_dir) / MARKER
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps({"fingerprint": fingerprint,
                               "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                               **info}, indent=2, default=str), encoding="utf-8")
    tmp.replace(p)
    return p
