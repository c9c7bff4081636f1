"""Parameter sweeps: one parameterised notebook, executed once per point of a grid.

``invoke sweep NAME`` (``python -m adiyan.sweep NAME``) reads ``sweeps/NAME.yaml``::

    notebook: notebooks/retrieval.ipynb
    description: top-k on the authored evalset, retrieval only
    engine: persistent          # or papermill (a fresh kernel per point)
    jobs: 1                     # points executed at once (one kernel each)
    parameters: {}              # fixed notebook parameters
    overrides:                  # fixed settings overrides (every point)
      eval.generate: false
    grid:                       # a mapping (the product of its lists) or a list of mappings
      retrieval.kb_top_k: [1, 2, 4, 8]
    baseline: {retrieval.kb_top_k: 4}   # the point the others are tested against
    frontier: {x: context_tokens, y: hit_rate}

A grid key with a dot (``retrieval.kb_top_k``) is a settings override, merged into the
notebook's ``overrides`` parameter; a key without one (``dataset``) is a notebook parameter.
Each point gets ``reports/sweeps/NAME/points/<point-id>/``: the executed notebook
(``notebook.ipynb``) and its HTML, ``params.json``, ``config.yaml`` (the resolved settings),
``point.json`` (metrics and per-question scores, written by the notebook through
:func:`record`) and, written last, ``COMPLETE.json``. A point is finished when that marker is
there and its fingerprint (notebook code, parameters) matches, so a sweep killed midway and
started again runs only the rest. Afterwards ``runs.parquet`` (one row per point: parameters
and metrics), ``per_question.parquet`` (point, question, metric, value) and ``index.html``
(metric-versus-parameter plots, a quality-versus-cost frontier, the best point per metric,
paired randomization tests against the baseline) are written beside them.

Engines: ``papermill`` starts a fresh kernel per point (full isolation; every point pays for
kernel start, imports and model loads); ``persistent`` runs the points of one worker in one
kernel that stays up, the user namespace reset between points (``%reset -f``), so imports,
loaded models, opened indexes and caches are shared and a point costs only its own work.
Both go through papermill (parameters injected after the ``parameters`` cell, per-cell
progress). ``--jobs N`` runs N workers, each with its own kernel.

Paying only for what changed: embeddings are cached by content hash
(``.cache/adiyan/embeddings.sqlite``), parsed documents by (file bytes, parser settings,
parser code) (``.cache/adiyan/parsed.sqlite``), and each knowledge-base index lives in its own
data directory keyed by (evalset hash, chunking config, embedder, HNSW build parameters), so a
sweep over top-k, ef or half-life embeds and indexes nothing twice, and switching chunking
configs back and forth costs nothing after the first build. The lower half of this module
holds the experiments the notebooks call (retrieval, chunking cost, HNSW recall/latency,
memory recency, embedding size and int8 storage, context budget).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import itertools
import json
import math
import os
import queue
import re
import shutil
import signal
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

SWEEPS_DIR = Path("sweeps")
OUT_ROOT = Path("reports") / "sweeps"
ENGINES = ("persistent", "papermill")
MARKER = "COMPLETE.json"
FAILED = "FAILED.json"
POINT_FILE = "point.json"
DEFAULT_KERNEL = "adiyan"
SIG_PERMUTATIONS = 10_000
SIG_SEED = 42
# A metric whose name contains one of these (or ends in _s / _ms / _mb / _bytes) is better when lower.
LOWER_IS_BETTER = ("latency", "_ms", "_s", "time", "cost", "bytes", "_mb", "leak", "stale", "private_returned",
                   "tokens", "abstain_rate_answerable", "n_chunks", "chars")


class SweepError(ValueError):
    """A sweep spec that cannot be run, or a sweep whose points failed; the message says which."""


# ============================================================================ spec and grid


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
    lower_is_better: list[str] = field(default_factory=list)
    higher_is_better: list[str] = field(default_factory=list)
    timeout: int | None = None  # per cell, seconds
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
                   lower_is_better=list(data.get("lower_is_better") or []),
                   higher_is_better=list(data.get("higher_is_better") or []),
                   timeout=data.get("timeout"), source=source)
        for key in ("overrides", "parameters"):
            bad = [k for k in getattr(spec, key) if key == "parameters" and "." in k]
            if bad:
                raise SweepError(f"{source}: parameters {bad} contain a dot; put settings under 'overrides'")
        return spec

    def lower_better(self, metric: str) -> bool:
        if metric in self.lower_is_better:
            return True
        if metric in self.higher_is_better:
            return False
        return lower_is_better(metric)


def lower_is_better(metric: str) -> bool:
    m = metric.lower()
    if m.startswith(("hit", "recall", "ndcg", "mrr", "map", "keyword", "correction_hit", "stable_hit")):
        return False
    return m.endswith(("_s", "_ms", "_mb", "_bytes")) or any(w in m for w in LOWER_IS_BETTER)


def load_spec(name_or_path: str | os.PathLike, sweeps_dir: str | os.PathLike = SWEEPS_DIR) -> SweepSpec:
    """``sweeps/NAME.yaml`` for a bare name, else the YAML file at that path."""
    p = Path(name_or_path)
    if not p.suffix:
        p = Path(sweeps_dir) / f"{name_or_path}.yaml"
    if not p.is_file():
        avail = sorted(x.stem for x in Path(sweeps_dir).glob("*.yaml")) if Path(sweeps_dir).is_dir() else []
        raise SweepError(f"{p}: no such sweep spec" + (f"; available: {', '.join(avail)}" if avail else ""))
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise SweepError(f"{p}: not valid YAML: {exc}") from None
    if not isinstance(data, Mapping):
        raise SweepError(f"{p}: top level must be a mapping")
    return SweepSpec.from_dict(data, name=p.stem, source=str(p))


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
            canon = _canon(point)
            if canon not in seen:
                seen.add(canon)
                out.append(point)
    return out


def _canon(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def _sha(obj: Any) -> str:
    return hashlib.sha256((obj if isinstance(obj, str) else _canon(obj)).encode("utf-8")).hexdigest()


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
        return "default--" + _sha({})[:8]
    label = "__".join(f"{k.split('.')[-1]}-{_fmt_value(v)}" for k, v in sorted(params.items()))
    label = re.sub(r"[^A-Za-z0-9_.+-]", "-", label)[:80]
    return f"{label}--{_sha(dict(params))[:8]}"


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
    points = []
    for params in expand_grid(spec.grid):
        overrides = {**spec.overrides, **{k: v for k, v in params.items() if "." in k}}
        nb_params = {**spec.parameters, **{k: v for k, v in params.items() if "." not in k}}
        nb_params.update({"overrides": overrides, "config_file": spec.config_file})
        points.append(Point(point_id(params), dict(params), nb_params, overrides))
    ids = [p.id for p in points]
    if len(set(ids)) != len(ids):  # only on a sha256 prefix collision
        raise SweepError(f"{spec.source}: two points share an id")
    return points


def notebook_code_hash(path: str | os.PathLike) -> str:
    """sha256 of the notebook's code cells: editing a Markdown cell does not invalidate points."""
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    return _sha([c.source for c in nb.cells if c.cell_type == "code"])


def point_fingerprint(spec: SweepSpec, point: Point, code_hash: str | None = None) -> str:
    code_hash = code_hash or notebook_code_hash(spec.notebook)
    return _sha({"notebook": code_hash, "params": point.notebook_params, "id": point.id})[:16]


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


def mark_complete(point_dir: str | os.PathLike, fingerprint: str, **info) -> Path:
    """Write the completion marker atomically (tmp + rename); call only once everything else is written."""
    p = Path(point_dir) / MARKER
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps({"fingerprint": fingerprint,
                               "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                               **info}, indent=2, default=str), encoding="utf-8")
    tmp.replace(p)
    return p


# ============================================================================ notebook side


def project_root() -> Path:
    """Enter the project root (from ``notebooks/`` when opened in JupyterLab) and return it."""
    cwd = Path.cwd()
    for cand in (cwd, *cwd.parents):
        if (cand / "pyproject.toml").is_file() and (cand / "adiyan").is_dir():
            if cand != cwd:
                os.chdir(cand)
            return cand
    return cwd


def _jsonable(v: Any) -> Any:
    try:
        import numpy as np

        if isinstance(v, np.generic):
            v = v.item()
        elif isinstance(v, np.ndarray):
            v = v.tolist()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, Path):
        return str(v)
    return v


@dataclass
class PointResult:
    """What an experiment returns: scalar metrics, per-question scores, anything else in ``info``."""

    metrics: dict[str, float]
    per_question: list[dict] = field(default_factory=list)  # each {"qid": ..., metric: value, ...}
    info: dict = field(default_factory=dict)

    def frame(self):
        """The metrics as a tidy two-column table."""
        import pandas as pd

        return pd.DataFrame({"metric": list(self.metrics), "value": list(self.metrics.values())})

    def questions(self):
        import pandas as pd

        return pd.DataFrame(self.per_question)


def record(output_dir: str | os.PathLike | None, result: PointResult | Mapping[str, float], *,
           per_question: Sequence[Mapping] | None = None, info: Mapping | None = None) -> Path | None:
    """Save a point's metrics for the sweep (``output_dir/point.json``); a no-op without ``output_dir``.

    Metrics must be numbers (or None); ``per_question`` rows carry a ``qid`` and numeric
    scores, the input of the paired tests against the baseline.
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
    if output_dir is None:
        return None
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    p = out / POINT_FILE
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(_jsonable({"status": "ok", "metrics": metrics, "per_question": pq, "info": inf,
                                         "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}),
                              indent=1, ensure_ascii=False), encoding="utf-8")
    tmp.replace(p)
    return p


def _fallback_point(point_dir: Path) -> dict | None:
    """A notebook that ran ``run_eval`` (evaluate.ipynb) instead of :func:`record`: read its metrics.json."""
    found = sorted(point_dir.rglob("metrics.json"))
    if not found:
        return None
    m = json.loads(found[-1].read_text(encoding="utf-8"))
    metrics = {}
    for group, vals in (m.get("metrics") or {}).items():
        for k, v in (vals or {}).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                metrics[f"{group}.{k}"] = v
    for k, v in (m.get("timings") or {}).items():
        metrics[f"timings.{k}"] = v
    pq = []
    qfile = found[-1].parent / "questions.jsonl"
    if qfile.is_file():
        for line in qfile.read_text(encoding="utf-8").splitlines():
            if line.strip():
                r = json.loads(line)
                row = {"qid": r["id"]}
                for k in ("hit", "reciprocal_rank", "keyword_hit"):
                    if r.get(k) is not None:
                        row[k] = float(r[k])
                pq.append(row)
    return {"status": "ok", "metrics": metrics, "per_question": pq, "info": {"run_dir": str(found[-1].parent)}}


def read_point(point_dir: str | os.PathLike) -> dict | None:
    point_dir = Path(point_dir)
    p = point_dir / POINT_FILE
    if p.is_file():
        return json.loads(p.read_text(encoding="utf-8"))
    return _fallback_point(point_dir)


# ============================================================================ execution engines

_ENGINE_REGISTERED = False


def _register_engine() -> None:
    """A papermill engine that runs on a kernel manager we own: fresh per point, or kept alive."""
    global _ENGINE_REGISTERED
    if _ENGINE_REGISTERED:
        return
    from papermill.clientwrap import PapermillNotebookClient
    from papermill.engines import NBClientEngine, papermill_engines
    from papermill.log import logger

    class SweepEngine(NBClientEngine):
        @classmethod
        def execute_managed_notebook(cls, nb_man, kernel_name, log_output=False, stdout_file=None,
                                     stderr_file=None, start_timeout=60, execution_timeout=None,
                                     kernel=None, **kwargs):
            client = PapermillNotebookClient(nb_man, km=kernel.km, kernel_name=kernel_name, timeout=execution_timeout,
                                             startup_timeout=start_timeout, log=logger, log_output=log_output,
                                             stdout_file=stdout_file, stderr_file=stderr_file)
            client.kc = kernel.client()  # one client per kernel, kept open across its points
            nb = client.execute(cleanup_kc=False)
            if kernel.persistent:  # clear the namespace for the next point; modules and models stay
                client.wait_for_reply(client.kc.execute(RESET_CODE, silent=True, store_history=False))
            return nb

    papermill_engines.register("adiyan-sweep", SweepEngine)
    _ENGINE_REGISTERED = True


# Between the points of a persistent kernel: drop the user's variables and figures. Cheaper than
# %reset -f (which also runs a full gc over a heap holding torch and the models).
RESET_CODE = ("_ip = get_ipython()\n"
              "for _n in [n for n in _ip.user_ns if not n.startswith('_') and n not in _ip.user_ns_hidden]:\n"
              "    del _ip.user_ns[_n]\n"
              "import matplotlib.pyplot as _plt; _plt.close('all'); del _plt, _ip, _n\n")


class _Kernel:
    """One kernel (IPC transport, cwd = the project root) and its client, started and shut down by us."""

    def __init__(self, kernel_name: str, cwd: Path, *, persistent: bool):
        from jupyter_client.manager import KernelManager

        self.kernel_name, self.cwd, self.persistent = kernel_name, cwd, persistent
        # IPC sockets under a private folder: kernels started at once never pick the same paths.
        self._sockets = tempfile.mkdtemp(prefix=f"adiyan-kernel-{os.getpid()}-")
        self.km = KernelManager(kernel_name=kernel_name, transport="ipc", ip=os.path.join(self._sockets, "k"))
        self.km.start_kernel(cwd=str(cwd))
        self._kc = None

    def client(self):
        if self._kc is None:
            kc = self.km.client()
            kc.start_channels()
            kc.wait_for_ready(timeout=120)
            kc.allow_stdin = False
            self._kc = kc
        return self._kc

    def alive(self) -> bool:
        return self.km.is_alive()

    def close(self, now: bool = False) -> None:
        with contextlib.suppress(Exception):
            if self._kc is not None:
                self._kc.stop_channels()
        self._kc = None
        with contextlib.suppress(Exception):
            self.km.shutdown_kernel(now=now)  # a clean exit runs the kernel's atexit (replica clean-up)
        with contextlib.suppress(Exception):
            self.km.cleanup_resources()
        shutil.rmtree(self._sockets, ignore_errors=True)


def _kernel_name(spec: SweepSpec) -> str:
    if spec.kernel:
        return spec.kernel
    import nbformat

    nb = nbformat.read(str(spec.notebook), as_version=4)
    name = (nb.metadata.get("kernelspec") or {}).get("name")
    if name:
        return name
    return DEFAULT_KERNEL


# ---------------------------------------------------------------------------- HTML of a notebook

NB_CSS = """
.jp-Cell{margin:.6em 0}.jp-InputArea-editor,.highlight{background:#f7f7f7;padding:.3em .5em;border-radius:3px;overflow-x:auto}
.jp-InputPrompt,.jp-OutputPrompt{display:none}.jp-OutputArea-output pre{white-space:pre-wrap;margin:.2em 0}
.jp-RenderedText[data-mime-type="application/vnd.jupyter.stderr"] pre{background:#fff4f4}
.jp-OutputArea-output img{max-width:100%}table.dataframe{font-size:12px}
"""


def notebook_html(nb_path: str | os.PathLike, html_path: str | os.PathLike, title: str = "", _exporter=None) -> Path:
    """The executed notebook as one self-contained HTML page (nbconvert's body, no CDN scripts)."""
    import nbformat
    from markupsafe import escape

    from .report import CSS

    nb = nbformat.read(str(nb_path), as_version=4)
    if _exporter is None:
        from nbconvert import HTMLExporter

        _exporter = HTMLExporter(template_name="basic")
    body, _ = _exporter.from_notebook_node(nb)
    page = (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
            f"<style>{CSS}{NB_CSS}</style></head><body>\n<p><a href=\"../../index.html\">sweep index</a> · "
            f'<a href="notebook.ipynb">notebook.ipynb</a> · <a href="config.yaml">config.yaml</a> · '
            f'<a href="params.json">params.json</a></p>\n{body}\n</body></html>\n')
    out = Path(html_path)
    out.write_text(page, encoding="utf-8")
    return out


# ---------------------------------------------------------------------------- the runner


@dataclass
class SweepResult:
    name: str
    out_dir: Path
    points: list[str]
    ran: list[str]
    reused: list[str]
    failed: dict[str, str]
    wall_s: float
    runs: Path | None = None
    index: Path | None = None


def _prepare_point(spec: SweepSpec, point: Point, pdir: Path, fingerprint: str) -> dict:
    from .config import load_settings

    if pdir.exists():
        shutil.rmtree(pdir)
    pdir.mkdir(parents=True)
    params = {k: (v.replace("{output_dir}", str(pdir)) if isinstance(v, str) else v)
              for k, v in point.notebook_params.items()}
    params["overrides"] = {k: (v.replace("{output_dir}", str(pdir)) if isinstance(v, str) else v)
                           for k, v in params["overrides"].items()}
    settings = load_settings(spec.config_file, params["overrides"])
    (pdir / "config.yaml").write_text(settings.to_yaml(), encoding="utf-8")
    (pdir / "params.json").write_text(json.dumps({"sweep": spec.name, "point_id": point.id, "grid": point.params,
                                                  "notebook": str(spec.notebook), "fingerprint": fingerprint,
                                                  "config_hash": settings.config_hash(),
                                                  "parameters": params}, indent=2, default=str), encoding="utf-8")
    return {**params, "output_dir": str(pdir), "point_id": point.id}


def run_sweep(spec: SweepSpec | str | os.PathLike, *, jobs: int | None = None, engine: str | None = None,
              out_dir: str | os.PathLike | None = None, sweeps_dir: str | os.PathLike = SWEEPS_DIR,
              force: bool = False, only: Sequence[str] | None = None, overrides: Mapping[str, Any] | None = None,
              progress: bool = True, cwd: str | os.PathLike | None = None) -> SweepResult:
    """Expand the grid, execute every unfinished point, gather metrics, write runs.parquet and index.html.

    ``only`` restricts execution to these point ids (the report still covers every finished
    point); ``overrides`` are added to every point's settings overrides (they change the
    fingerprints, so the affected points run again). Raises :class:`SweepError` after writing
    the report when a point failed.
    """
    t_start = time.perf_counter()
    if not isinstance(spec, SweepSpec):
        spec = load_spec(spec, sweeps_dir)
    if overrides:
        spec.overrides = {**spec.overrides, **dict(overrides)}
    engine = engine or spec.engine
    if engine not in ENGINES:
        raise SweepError(f"engine must be one of {ENGINES}, got {engine!r}")
    jobs = max(1, int(jobs or spec.jobs or 1))
    cwd = Path(cwd or Path.cwd()).resolve()
    if not spec.notebook.is_absolute():
        spec.notebook = (cwd / spec.notebook)
    if not spec.notebook.is_file():
        raise SweepError(f"{spec.source}: notebook {spec.notebook} does not exist")
    out = Path(out_dir) if out_dir else OUT_ROOT / spec.name
    out = (cwd / out) if not out.is_absolute() else out
    (out / "points").mkdir(parents=True, exist_ok=True)
    points = expand(spec)
    if only:
        unknown = set(only) - {p.id for p in points}
        if unknown:
            raise SweepError(f"unknown point id(s): {', '.join(sorted(unknown))}")
    code_hash = notebook_code_hash(spec.notebook)
    fps = {p.id: point_fingerprint(spec, p, code_hash) for p in points}
    todo = [p for p in points if (not only or p.id in only)
            and (force or not is_complete(out / "points" / p.id, fps[p.id]))]
    reused = [p.id for p in points if p not in todo and is_complete(out / "points" / p.id, fps[p.id])]
    (out / "sweep.json").write_text(json.dumps({
        "name": spec.name, "source": spec.source, "notebook": str(spec.notebook), "description": spec.description,
        "engine": engine, "jobs": jobs, "grid": spec.grid, "overrides": spec.overrides,
        "parameters": spec.parameters, "baseline": spec.baseline, "frontier": spec.frontier,
        "points": [{"id": p.id, "params": p.params, "fingerprint": fps[p.id]} for p in points]},
        indent=2, default=str), encoding="utf-8")
    failed: dict[str, str] = {}
    wall: dict[str, float] = {}
    if todo:
        _execute(spec, todo, out, fps, engine=engine, jobs=jobs, cwd=cwd, progress=progress,
                 failed=failed, wall=wall, n_total=len(points), n_done=len(reused))
    runs, index = write_outputs(spec, points, out, engine=engine, jobs=jobs,
                                session={"ran": [p.id for p in todo], "reused": reused, "failed": failed,
                                         "wall_s": round(time.perf_counter() - t_start, 2), "point_wall_s": wall})
    res = SweepResult(spec.name, out, [p.id for p in points], [p.id for p in todo if p.id not in failed], reused,
                      failed, time.perf_counter() - t_start, runs, index)
    if failed:
        raise SweepError(f"sweep {spec.name}: {len(failed)} point(s) failed: " +
                         "; ".join(f"{k}: {v[:300]}" for k, v in failed.items()) + f" (report: {index})")
    return res


def _execute(spec, todo, out, fps, *, engine, jobs, cwd, progress, failed, wall, n_total, n_done) -> None:
    import papermill as pm
    from tqdm.auto import tqdm

    _register_engine()
    _drop_orphan_replicas()
    kernel_name = _kernel_name(spec)
    work: queue.Queue = queue.Queue()
    for p in todo:
        work.put(p)
    n_workers = min(jobs, len(todo))
    bar = tqdm(total=n_total, initial=n_done, desc=f"sweep {spec.name}", unit="point", disable=not progress,
               position=0, leave=True)
    finisher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sweep-html")
    exporter_holder: dict = {}
    lock = threading.Lock()
    stop = threading.Event()
    live: list[_Kernel] = []  # closed here if the sweep is interrupted (workers are daemon threads)

    def finish(point: Point, pdir: Path, seconds: float, error: str | None) -> None:
        try:
            if "exp" not in exporter_holder:
                from nbconvert import HTMLExporter

                exporter_holder["exp"] = HTMLExporter(template_name="basic")
            if (pdir / "notebook.ipynb").is_file():
                notebook_html(pdir / "notebook.ipynb", pdir / "notebook.html", f"{spec.name}: {point.label}",
                              _exporter=exporter_holder["exp"])
            if error is None:
                data = read_point(pdir)
                if data is None:
                    error = f"the notebook recorded no metrics ({POINT_FILE}): call adiyan.sweep.record(output_dir, ...)"
            if error is None:
                mark_complete(pdir, fps[point.id], point_id=point.id, engine=engine, wall_s=round(seconds, 3),
                              status=data.get("status", "ok"))
        except Exception as exc:  # noqa: BLE001 - a broken point must not stop the others
            error = error or f"{type(exc).__name__}: {exc}"
        if error is not None:
            with lock:
                failed[point.id] = error
            (pdir / FAILED).write_text(json.dumps({"point_id": point.id, "error": error}, indent=2), encoding="utf-8")
        with lock:
            wall[point.id] = round(seconds, 3)
            bar.update(1)
            bar.set_postfix_str(f"last {point.id[:30]} {seconds:.1f}s" + (" FAILED" if error else ""))

    def worker(wid: int) -> None:
        kernel = None
        try:
            while not stop.is_set():
                try:
                    point = work.get_nowait()
                except queue.Empty:
                    return
                pdir = out / "points" / point.id
                error = None
                t0 = time.perf_counter()
                try:
                    params = _prepare_point(spec, point, pdir, fps[point.id])
                    if engine == "persistent" and (kernel is None or not kernel.alive()):
                        if kernel is not None:
                            kernel.close()
                        kernel = _Kernel(kernel_name, cwd, persistent=True)
                        live.append(kernel)
                    own = _Kernel(kernel_name, cwd, persistent=False) if engine == "papermill" else None
                    if own is not None:
                        live.append(own)
                    try:
                        pm.execute_notebook(str(spec.notebook), str(pdir / "notebook.ipynb"), parameters=params,
                                            engine_name="adiyan-sweep", kernel_name=kernel_name,
                                            kernel=own or kernel, progress_bar=progress and jobs == 1,
                                            request_save_on_cell_execute=False,
                                            execution_timeout=spec.timeout, log_output=False)
                    finally:
                        if own is not None:
                            own.close()
                            live.remove(own)
                except Exception as exc:  # noqa: BLE001 - recorded, reported, the sweep goes on
                    error = _error_text(exc)
                finally:
                    seconds = time.perf_counter() - t0
                finisher.submit(finish, point, pdir, seconds, error)
        finally:
            if kernel is not None and kernel in live:
                live.remove(kernel)
                kernel.close()

    threads = [threading.Thread(target=worker, args=(i,), name=f"sweep-worker-{i}", daemon=True)
               for i in range(n_workers)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(0.5)
    except BaseException:  # Ctrl-C or SIGTERM: no kernel left behind; finished points keep their markers
        stop.set()
        for k in list(live):
            k.close(now=True)
        raise
    finally:
        finisher.shutdown(wait=True)
        bar.close()
        _drop_orphan_replicas()


def _error_text(exc: BaseException) -> str:
    name = type(exc).__name__
    if name == "PapermillExecutionError":
        return f"cell {getattr(exc, 'exec_count', '?')}: {getattr(exc, 'ename', '')}: {getattr(exc, 'evalue', '')}"
    return f"{name}: {exc}"


# ============================================================================ gather and report


def gather(spec: SweepSpec, points: Sequence[Point], out: Path, *, engine: str = "") -> tuple:
    """(runs DataFrame one row per point, per-question long DataFrame, param columns, metric columns).

    A point finished under another fingerprint (the notebook's code or the parameters changed
    since) is listed as ``stale``, without its metrics."""
    import pandas as pd

    rows, pq_rows, metric_cols = [], [], []
    param_cols = list(dict.fromkeys(k for p in points for k in p.params))
    code_hash = notebook_code_hash(spec.notebook) if Path(spec.notebook).is_file() else None
    for p in points:
        pdir = out / "points" / p.id
        # a parameter some points vary and others take from the spec's fixed overrides: the value
        # in force, so every row has it (plots and tables compare like with like)
        fixed = {k: spec.overrides[k] for k in param_cols if k not in p.params and k in (spec.overrides or {})}
        row = {"sweep": spec.name, "point_id": p.id, "label": p.label, **fixed, **p.params}
        data = None
        if is_complete(pdir) and code_hash and not is_complete(pdir, point_fingerprint(spec, p, code_hash)):
            row["status"] = "stale"
        elif is_complete(pdir):
            data = read_point(pdir)
            marker = json.loads((pdir / MARKER).read_text(encoding="utf-8"))
            row["status"] = data.get("status", "ok") if data else "no-metrics"
            row["point_wall_s"] = marker.get("wall_s")
            row["finished_at"] = marker.get("finished_at")
        else:
            row["status"] = "failed" if (pdir / FAILED).is_file() else "pending"
            if (pdir / FAILED).is_file():
                row["error"] = json.loads((pdir / FAILED).read_text(encoding="utf-8")).get("error")
        row["notebook"] = f"points/{p.id}/notebook.ipynb"
        row["html"] = f"points/{p.id}/notebook.html"
        row["config"] = f"points/{p.id}/config.yaml"
        if data:
            for k, v in (data.get("metrics") or {}).items():
                key = k if k not in row else f"metric.{k}"
                row[key] = v
                if key not in metric_cols:
                    metric_cols.append(key)
            for q in data.get("per_question") or []:
                for k, v in q.items():  # numbers and booleans; labels (kind, top1...) stay in point.json
                    if k != "qid" and isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v)):
                        pq_rows.append({"point_id": p.id, "qid": str(q["qid"]), "metric": k, "value": float(v)})
        rows.append(row)
    runs = pd.DataFrame(rows)
    for c in param_cols:  # parquet wants one type per column
        vals = [v for v in runs[c] if v is not None and not (isinstance(v, float) and math.isnan(v))]
        if len({type(v) for v in vals}) > 1 and not all(isinstance(v, (int, float)) for v in vals):
            runs[c] = runs[c].map(lambda v: None if v is None else str(v))
    pq = pd.DataFrame(pq_rows, columns=["point_id", "qid", "metric", "value"])
    return runs, pq, param_cols, metric_cols


def write_outputs(spec: SweepSpec, points: Sequence[Point], out: Path, *, engine: str = "", jobs: int = 1,
                  session: dict | None = None) -> tuple[Path, Path]:
    import pyarrow as pa
    import pyarrow.parquet as papq

    runs, pq, param_cols, metric_cols = gather(spec, points, out, engine=engine)
    table = pa.Table.from_pandas(runs, preserve_index=False)
    meta = dict(table.schema.metadata or {})
    meta[b"adiyan.sweep"] = json.dumps({"name": spec.name, "params": param_cols, "metrics": metric_cols}).encode()
    papq.write_table(table.replace_schema_metadata(meta), out / "runs.parquet")
    papq.write_table(pa.Table.from_pandas(pq, preserve_index=False), out / "per_question.parquet")
    sig = significance(spec, points, runs, pq, metric_cols)
    (out / "significance.json").write_text(json.dumps(_jsonable(sig), indent=2), encoding="utf-8")
    index = write_index(spec, runs, pq, param_cols, metric_cols, sig, out, engine=engine, jobs=jobs,
                        session=session or {})
    return out / "runs.parquet", index


# ---------------------------------------------------------------------------- statistics


def baseline_point(spec: SweepSpec, points: Sequence[Point]) -> Point | None:
    if not points:
        return None
    if spec.baseline:
        match = [p for p in points if all(_canon(p.params.get(k)) == _canon(v) for k, v in spec.baseline.items())]
        if not match:
            raise SweepError(f"{spec.source}: baseline {spec.baseline} matches no point of the grid")
        return match[0]
    return points[0]


def _holm(pvals: dict[str, float]) -> dict[str, float]:
    items = sorted((p, k) for k, p in pvals.items() if p is not None)
    m, out, running = len(items), {}, 0.0
    for i, (p, k) in enumerate(items):
        running = max(running, min(1.0, (m - i) * p))
        out[k] = running
    return out


def significance(spec: SweepSpec, points: Sequence[Point], runs, pq, metric_cols) -> dict:
    """Paired two-sided randomization tests (Fisher) of every point against the baseline, per metric,
    over the questions both answered; Holm-adjusted across the points of each metric."""
    from .eval.ir_metrics import fisher_randomization_p

    import numpy as np

    base = baseline_point(spec, points)
    res = {"baseline": base.id if base else None, "baseline_label": base.label if base else None,
           "test": f"paired randomization (Fisher), two-sided, {SIG_PERMUTATIONS} permutations, seed {SIG_SEED}; "
                   "Holm-adjusted over the points of each metric", "metrics": {}}
    if base is None or pq.empty:
        return res
    ok = set(runs.loc[runs["status"] == "ok", "point_id"])
    if base.id not in ok:
        res["note"] = "the baseline point has no results"
        return res
    wanted = spec.paired or sorted(set(pq["metric"]))
    for metric in wanted:
        sub = pq[pq["metric"] == metric]
        if sub.empty:
            continue
        table = sub.pivot_table(index="qid", columns="point_id", values="value", aggfunc="first")
        if base.id not in table:
            continue
        rows, pvals = {}, {}
        for p in points:
            if p.id == base.id or p.id not in table or p.id not in ok:
                continue
            both = table[[base.id, p.id]].dropna()
            if len(both) < 2:
                continue
            a, b = both[base.id].to_numpy(float), both[p.id].to_numpy(float)
            pval = 1.0 if np.array_equal(a, b) else fisher_randomization_p(a, b, SIG_PERMUTATIONS, SIG_SEED)
            pvals[p.id] = pval
            rows[p.id] = {"label": p.label, "n": int(len(both)), "baseline_mean": float(a.mean()),
                          "mean": float(b.mean()), "delta": float(b.mean() - a.mean()), "p_value": pval,
                          "win": int((b > a).sum()), "tie": int((b == a).sum()), "loss": int((b < a).sum()),
                          "lower_is_better": spec.lower_better(metric)}
        for pid, adj in _holm(pvals).items():
            rows[pid]["p_holm"] = adj
            rows[pid]["significant"] = bool(adj < 0.05)
        if rows:
            res["metrics"][metric] = rows
    return res


def pareto_front(xs: Sequence[float], ys: Sequence[float], *, x_lower: bool = True, y_lower: bool = False) -> list[int]:
    """Indexes of the points no other point beats on both axes (directions as given)."""
    sx = [(-x if not x_lower else x) for x in xs]  # minimise both after sign flips
    sy = [(-y if not y_lower else y) for y in ys]
    front = []
    for i in range(len(xs)):
        dominated = any(sx[j] <= sx[i] and sy[j] <= sy[i] and (sx[j] < sx[i] or sy[j] < sy[i])
                        for j in range(len(xs)) if j != i)
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: xs[i])


# ---------------------------------------------------------------------------- plots and HTML

_RC = {"svg.hashsalt": "adiyan-sweep", "text.parse_math": False, "font.size": 8}


def _svg(fig):
    from .report import _svg as inline_svg  # imported here: report selects the Agg backend

    return inline_svg(fig, _RC)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v is not None and not (
        isinstance(v, float) and math.isnan(v))


def _plot_metric_vs_param(runs, axis: str, metrics: list[str], others: list[str]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = runs[runs["status"] == "ok"]
    vals = list(dict.fromkeys(ok[axis].tolist()))
    numeric = all(_is_num(v) for v in vals)
    order = sorted(vals, key=lambda v: (v is None, v if numeric else str(v)))
    pos = {_canon(v): i for i, v in enumerate(order)}
    n = len(metrics)
    cols = min(3, n)
    rows_n = math.ceil(n / cols)
    with plt.rc_context(_RC):
        fig, axes = plt.subplots(rows_n, cols, figsize=(3.6 * cols, 2.6 * rows_n), squeeze=False)
        groups = ok.groupby(others, dropna=False, sort=True) if others else [((), ok)]
        for i, metric in enumerate(metrics):
            ax = axes[i // cols][i % cols]
            for key, g in groups:
                g = g[g[metric].map(_is_num)] if metric in g else g.iloc[0:0]
                if g.empty:
                    continue
                g = g.assign(_x=g[axis].map(lambda v: v if numeric else pos[_canon(v)])).sort_values("_x")
                lab = ", ".join(f"{o.split('.')[-1]}={v}" for o, v in zip(others, key if isinstance(key, tuple) else (key,))) if others else None
                ax.plot(g["_x"], g[metric].astype(float), marker="o", label=lab)
            if numeric:
                xs = [float(v) for v in vals]
                if min(xs) > 0 and max(xs) / min(xs) >= 16:
                    ax.set_xscale("log", base=2)
                    ax.set_xticks(xs, [str(v) for v in vals])
            else:
                ax.set_xticks(range(len(order)), [str(v) for v in order], rotation=20, ha="right")
            ax.set_title(metric + (" (lower is better)" if lower_is_better(metric) else ""), fontsize=8)
            ax.set_xlabel(axis.split(".")[-1])
            if others and i == 0 and len(groups if isinstance(groups, list) else list(groups)) > 1:
                ax.legend(fontsize=6)
        for j in range(n, rows_n * cols):
            axes[j // cols][j % cols].axis("off")
        fig.tight_layout()
        return _svg(fig)


def _plot_frontier(runs, x: str, y: str, x_lower: bool, y_lower: bool, baseline_id: str | None):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = runs[(runs["status"] == "ok")]
    ok = ok[ok[x].map(_is_num) & ok[y].map(_is_num)] if x in ok and y in ok else ok.iloc[0:0]
    xs, ys = ok[x].astype(float).tolist(), ok[y].astype(float).tolist()
    front = pareto_front(xs, ys, x_lower=x_lower, y_lower=y_lower)
    with plt.rc_context(_RC):
        fig, ax = plt.subplots(figsize=(6.5, 4.0))
        ax.scatter(xs, ys, color="#9e9e9e", zorder=2, label="point")
        if front:
            ax.plot([xs[i] for i in front], [ys[i] for i in front], color="#d95f02", marker="o", zorder=3,
                    label="Pareto front")
        for i, (_, r) in enumerate(ok.iterrows()):
            ax.annotate(str(r["label"])[:40], (xs[i], ys[i]), fontsize=6, xytext=(3, 3), textcoords="offset points")
            if r["point_id"] == baseline_id:
                ax.scatter([xs[i]], [ys[i]], s=120, facecolors="none", edgecolors="#1b9e77", zorder=4,
                           label="baseline")
        ax.set_xlabel(f"{x} ({'lower' if x_lower else 'higher'} is better)")
        ax.set_ylabel(f"{y} ({'lower' if y_lower else 'higher'} is better)")
        ax.legend(fontsize=7)
        fig.tight_layout()
        svg = _svg(fig)
    return svg, [ok.iloc[i]["point_id"] for i in front]


INDEX_TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Sweep {{ spec.name }}</title><style>{{ css }}</style></head><body>
<h1>Sweep <code>{{ spec.name }}</code></h1>
<p>{{ spec.description }}</p>
<table>
<tr><th>notebook</th><td><code>{{ notebook }}</code></td></tr>
<tr><th>spec</th><td><code>{{ spec.source }}</code></td></tr>
<tr><th>grid</th><td><code>{{ grid }}</code></td></tr>
<tr><th>fixed overrides</th><td><code>{{ overrides }}</code></td></tr>
<tr><th>points</th><td>{{ counts }}</td></tr>
<tr><th>this invocation</th><td>engine {{ engine }}, jobs {{ jobs }}; ran {{ session.ran|length }}, reused {{ session.reused|length }} finished point(s), failed {{ session.failed|length }}; wall {{ fmt(session.wall_s) }} s</td></tr>
<tr><th>files</th><td><a href="runs.parquet">runs.parquet</a> · <a href="per_question.parquet">per_question.parquet</a> · <a href="significance.json">significance.json</a> · <a href="sweep.json">sweep.json</a></td></tr>
</table>

<h2>Points</h2>
<table><tr><th>point</th>{% for c in param_cols %}<th>{{ c }}</th>{% endfor %}<th>status</th>{% for m in metric_cols %}<th>{{ m }}</th>{% endfor %}<th>wall s</th><th>files</th></tr>
{% for r in rows %}<tr><td><code>{{ r.point_id }}</code>{% if r.point_id == baseline %} <b>(baseline)</b>{% endif %}</td>{% for c in param_cols %}<td>{{ fmt(r[c]) }}</td>{% endfor %}<td>{{ r.status }}</td>{% for m in metric_cols %}<td class="num{% if r.point_id in best.get(m, ()) and best[m]|length < n_ok %} best{% endif %}">{{ fmt(r.get(m)) }}</td>{% endfor %}<td class="num">{{ fmt(r.get("point_wall_s")) }}</td><td><a href="{{ r.html }}">html</a> · <a href="{{ r.notebook }}">ipynb</a> · <a href="{{ r.config }}">config</a></td></tr>
{% endfor %}</table>

<h2>Best point per metric</h2>
<table><tr><th>metric</th><th>direction</th><th>best value</th><th>point</th></tr>
{% for m, b in best_rows %}<tr><td>{{ m }}</td><td>{{ b.direction }}</td><td class="num">{{ fmt(b.value) }}</td><td>{{ b.label }}</td></tr>
{% endfor %}</table>

{% if frontier %}<h2>Frontier: {{ frontier.y }} versus {{ frontier.x }}</h2>
<p>Pareto-optimal points (no other point is better on both): {{ frontier.front|join(", ") }}</p>
{{ frontier.svg }}
{% endif %}
<h2>Metrics versus parameters</h2>
{% for axis, svg in param_plots %}<h3>{{ axis }}</h3>
{{ svg }}
{% else %}<p>Only one point: nothing varies.</p>{% endfor %}

<h2>Paired tests against the baseline</h2>
<p>Baseline: <b>{{ sig.baseline_label or "—" }}</b> (<code>{{ sig.baseline or "—" }}</code>). {{ sig.test }}. Per-question scores are in per_question.parquet.</p>
{% for metric, rows_ in sig.metrics.items() %}<h3>{{ metric }}</h3>
<table><tr><th>point</th><th>n</th><th>baseline</th><th>point</th><th>delta</th><th>win / tie / loss</th><th>p</th><th>p (Holm)</th><th></th></tr>
{% for pid, s in rows_.items() %}<tr><td>{{ s.label }}</td><td class="num">{{ s.n }}</td><td class="num">{{ fmt(s.baseline_mean) }}</td><td class="num">{{ fmt(s.mean) }}</td><td class="num">{{ "%+.4f"|format(s.delta) }}</td><td>{{ s.win }} / {{ s.tie }} / {{ s.loss }}</td><td class="num">{{ fmt(s.p_value) }}</td><td class="num">{{ fmt(s.p_holm) }}</td><td>{% if s.significant %}<b>significant</b>{% endif %}</td></tr>
{% endfor %}</table>
{% else %}<p>No per-question scores to test (or a single point).</p>{% endfor %}
{% if failures %}<h2>Failed points</h2>
<ul>{% for pid, err in failures %}<li><code>{{ pid }}</code>: <a href="points/{{ pid }}/notebook.html">notebook</a><pre>{{ err }}</pre></li>{% endfor %}</ul>
{% endif %}</body></html>
"""


def write_index(spec: SweepSpec, runs, pq, param_cols, metric_cols, sig, out: Path, *, engine: str, jobs: int,
                session: dict) -> Path:
    from jinja2 import Environment
    from markupsafe import Markup

    from .report import CSS, fmt

    ok = runs[runs["status"] == "ok"] if "status" in runs else runs.iloc[0:0]
    shown_metrics = [m for m in (spec.metrics or metric_cols) if m in runs.columns]
    numeric_metrics = [m for m in shown_metrics if ok[m].map(_is_num).any()] if not ok.empty else []
    best, best_rows = {}, []
    for m in numeric_metrics:
        vals = ok[ok[m].map(_is_num)]
        if vals.empty:
            continue
        lower = spec.lower_better(m)
        col = vals[m].astype(float)
        target = float(col.min() if lower else col.max())
        winners = vals[col == target]
        best[m] = set(winners["point_id"])
        tie = len(winners) > 1
        best_rows.append((m, {"direction": "lower is better" if lower else "higher is better", "value": target,
                              "label": "all points (tie)" if tie and len(winners) == len(vals) else
                              "; ".join(winners["label"].astype(str)) + (" (tie)" if tie else "")}))
    varied = [c for c in param_cols if c in ok and ok[c].map(_canon).nunique() > 1]
    plot_metrics = numeric_metrics[:12]
    param_plots = []
    for axis in varied:
        others = [c for c in varied if c != axis]
        if plot_metrics:
            param_plots.append((axis, _plot_metric_vs_param(ok, axis, plot_metrics, others)))
    frontier = None
    if spec.frontier and len(ok) >= 1:
        x, y = spec.frontier.get("x"), spec.frontier.get("y")
        if x in ok and y in ok:
            svg, front = _plot_frontier(ok, x, y, spec.lower_better(x), spec.lower_better(y), sig.get("baseline"))
            labels = [ok.loc[ok["point_id"] == pid, "label"].iloc[0] for pid in front]
            frontier = {"x": x, "y": y, "svg": svg, "front": labels}
    counts = runs["status"].value_counts().to_dict() if "status" in runs else {}
    rows = runs.astype(object).where(runs.notna(), None).to_dict("records")
    failures = [(r["point_id"], r.get("error") or "") for r in rows if r.get("status") == "failed"]
    env = Environment(autoescape=True)
    env.globals.update(fmt=fmt)
    html = env.from_string(INDEX_TEMPLATE).render(
        spec=spec, notebook=str(spec.notebook), grid=_canon(spec.grid), overrides=_canon(spec.overrides),
        counts=", ".join(f"{v} {k}" for k, v in counts.items()), engine=engine, jobs=jobs, session=session,
        rows=rows, param_cols=param_cols, metric_cols=shown_metrics, best=best, best_rows=best_rows,
        param_plots=param_plots, frontier=frontier, n_ok=len(ok), sig=sig, baseline=sig.get("baseline"), failures=failures,
        css=Markup(CSS))
    p = out / "index.html"
    p.write_text(html, encoding="utf-8")
    return p


# ============================================================================ shared caches for experiments
#
# Everything below is what the notebooks call. Work shared between points is cached on disk
# (embeddings, parsed documents, built indexes, each keyed by content) and, within one process
# (the persistent kernel), opened indexes and stores are memoised.

_MEMO: dict[tuple, Any] = {}
_MEMO_LOCK = threading.RLock()
_REPLICAS: list[str] = []


@atexit.register
def _drop_replicas() -> None:
    for d in _REPLICAS:
        shutil.rmtree(d, ignore_errors=True)


@contextlib.contextmanager
def _dir_lock(path: Path):
    """An exclusive advisory lock on ``<path>.lock``: one process builds a keyed directory, others wait."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(str(path) + ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _replica(src: Path) -> Path:
    """A private copy of a built directory, for a process that finds the original locked by another."""
    dst = Path(tempfile.mkdtemp(prefix=f"adiyan-replica-{os.getpid()}-")) / src.name
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.lock"))
    _REPLICAS.append(str(dst.parent))
    return dst


def _drop_orphan_replicas() -> None:
    """Replicas and kernel socket folders of processes that are gone (killed before cleaning up)."""
    tmp = Path(tempfile.gettempdir())
    for d in [*tmp.glob("adiyan-replica-*-*"), *tmp.glob("adiyan-kernel-*-*")]:
        try:
            pid = int(d.name.split("-")[2])
            os.kill(pid, 0)
        except (ValueError, IndexError):
            continue
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
        except PermissionError:
            continue


def _locked_error(exc: BaseException) -> bool:
    text = str(exc)
    return "WouldBlock" in text or "in use by another" in text or "already accessed by another instance" in text


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)


def _package_hash(*modules: str) -> str:
    """sha256 of the source of the named adiyan modules (the parser's code is part of a parse cache key)."""
    import importlib.util

    h = hashlib.sha256()
    for mod in modules:
        spec = importlib.util.find_spec(mod)
        if spec and spec.origin and Path(spec.origin).is_file():
            h.update(Path(spec.origin).read_bytes())
    return h.hexdigest()


def parse_cached(data: bytes, filename: str, settings):
    """``parse_document`` through an on-disk cache keyed by (file bytes, OCR engine, size limit, parser code)."""
    from .cache import CallCache
    from .ingest.parse import ParsedDocument, parse_document

    cache = _MEMO.get(("parse-cache", str(settings.paths.cache_dir)))
    if cache is None:
        cache = CallCache(Path(settings.paths.cache_dir) / "parsed.sqlite", "parse")
        _MEMO[("parse-cache", str(settings.paths.cache_dir))] = cache
    code = _MEMO.setdefault(("parser-code",), _package_hash(
        "adiyan.ingest.parse", "adiyan.ingest.docling_convert", "adiyan.ingest.ocr", "adiyan.ingest.pptx_text",
        "adiyan.ingest.report"))
    key = cache.key({"sha256": hashlib.sha256(data).hexdigest(), "ext": Path(filename).suffix.lower(),
                     "ocr": settings.ingest.ocr, "max_bytes": settings.ingest.max_bytes, "code": code})
    hit = cache.get(key)
    if hit is not None:
        return hit["text"], hit["report"]
    parsed: ParsedDocument = parse_document(data, filename, max_bytes=settings.ingest.max_bytes,
                                            ocr=settings.ingest.ocr)
    report = parsed.report.to_dict()
    cache.put(key, {"text": parsed.text, "report": report})
    return parsed.text, report


class TruncatedEmbedder:
    """Matryoshka truncation of a cached full-width embedder: the first ``dim`` components, re-normalised.

    The full vector is embedded (and cached) once; every width reads it from the cache, so a
    sweep over widths embeds each text once. Equal to the library's own ``truncate_dim`` (which
    truncates the raw vector, then normalises: normalising first only rescales the row).
    """

    def __init__(self, base, dim: int):
        if dim > base.dim:
            raise ValueError(f"cannot truncate {base.id} ({base.dim}-d) to {dim}")
        self.base, self.dim = base, int(dim)
        self.id = base.id if dim == base.dim else f"{base.id}@{dim}"
        self.normalized = True
        self.stats = base.stats

    def prefix(self, kind):
        return self.base.prefix(kind)

    def describe(self) -> dict:
        return {**self.base.describe(), "id": self.id, "dim": self.dim, "truncated_from": self.base.dim}

    def embed(self, texts, kind="document"):
        import numpy as np

        v = np.asarray(self.base.embed(texts, kind), dtype=np.float32)[:, : self.dim]
        n = np.linalg.norm(v, axis=1, keepdims=True)
        return (v / np.where(n == 0, 1, n)).astype(np.float32)


def sweep_embedder(settings, *, dim: int | None = None, progress: bool = False):
    """The configured embedder behind the embedding cache (memoised per process), optionally truncated."""
    from .models import embedder_from_settings

    key = ("embedder", settings.embedder.name, settings.embedder.url, str(settings.paths.cache_dir),
           str(settings.paths.models_dir))
    with _MEMO_LOCK:
        emb = _MEMO.get(key)
        if emb is None:
            emb = embedder_from_settings(settings.with_overrides({"embedder.truncate_dim": None}), progress=progress)
            _MEMO[key] = emb
    dim = dim or settings.embedder.truncate_dim
    if dim and dim < emb.dim:
        return TruncatedEmbedder(emb, dim)
    return emb


@dataclass
class KBHandle:
    kb: Any
    evalset: Any
    data_dir: Path
    build: dict  # how (and how long) the index was built, from build.json
    opened_s: float
    reused: bool  # the index existed before this call (built by an earlier point or run)


def kb_key(settings, evalset_hash: str, embedder_id: str) -> dict:
    """What a knowledge-base index depends on: evalset content, chunking, embedder, HNSW build parameters."""
    return {"evalset": evalset_hash, "chunking": settings.chunking.model_dump(mode="json"), "embedder": embedder_id,
            "hnsw_m": settings.store.hnsw_m, "hnsw_ef_construct": settings.store.hnsw_ef_construct,
            "quantization": settings.store.quantization, "indexing_threshold_kb": settings.store.indexing_threshold_kb,
            "engine": settings.store.engine, "ocr": settings.ingest.ocr, "prefix": settings.store.collection_prefix}


def open_sweep_kb(settings, evalset=None, *, embedder=None, progress: bool = False) -> KBHandle:
    """The evalset's knowledge base in a data directory of its own per :func:`kb_key`.

    Built once (under a lock, ``build.json`` written last, recording build time and embedding
    cache use); afterwards opened without re-parsing or re-embedding anything. Within a process
    the opened index is memoised, its settings replaced by the caller's (top-k, mode, ef...).
    """
    from .kb import KnowledgeBase
    from .store import open_store

    t0 = time.perf_counter()
    es = evalset if evalset is not None and not isinstance(evalset, (str, Path)) else \
        _memo_evalset(evalset or settings.eval.evalset)
    embedder = embedder or sweep_embedder(settings, progress=progress)
    es_hash = _memo_evalset_hash(es)
    key = kb_key(settings, es_hash, embedder.id)
    kdir = (Path(settings.paths.data_dir) / "sweep" / "kb" / f"{_slug(es.name)}-{es_hash[:8]}" / _slug(embedder.id)
            / _sha(key)[:12])
    memo_key = ("kb", str(kdir.resolve()))
    with _MEMO_LOCK:
        handle = _MEMO.get(memo_key)
        if handle is not None:
            handle.kb.settings = settings.with_overrides({"paths.data_dir": str(handle.data_dir)})
            handle.kb.embedder = embedder
            return KBHandle(handle.kb, es, handle.data_dir, handle.build, time.perf_counter() - t0, True)
        reused = (kdir / "build.json").is_file()
        if not reused:
            with _dir_lock(kdir):
                if not (kdir / "build.json").is_file():
                    _build_kb(settings, es, embedder, kdir, key, progress=progress)
        build = json.loads((kdir / "build.json").read_text(encoding="utf-8"))
        data_dir = kdir
        kb_settings = settings.with_overrides({"paths.data_dir": str(data_dir)})
        try:
            kb = KnowledgeBase(kb_settings, open_store(kb_settings), embedder)
        except Exception as exc:  # noqa: BLE001
            if not _locked_error(exc):
                raise
            data_dir = _replica(kdir)  # another process (a parallel worker) holds the shard
            kb_settings = settings.with_overrides({"paths.data_dir": str(data_dir)})
            kb = KnowledgeBase(kb_settings, open_store(kb_settings), embedder)
        handle = KBHandle(kb, es, data_dir, build, time.perf_counter() - t0, reused)
        _MEMO[memo_key] = handle
        return handle


def _memo_evalset(path):
    from .eval.evalset import load_evalset

    key = ("evalset", str(Path(path).resolve()))
    if key not in _MEMO:
        _MEMO[key] = load_evalset(path)
    return _MEMO[key]


def _memo_evalset_hash(es) -> str:
    key = ("evalset-hash", str(Path(es.root).resolve()), id(es))
    if key not in _MEMO:
        _MEMO[key] = es.content_hash()
    return _MEMO[key]


def _build_kb(settings, es, embedder, kdir: Path, key: dict, *, progress: bool) -> None:
    from tqdm.auto import tqdm

    from .kb import KnowledgeBase, source_key
    from .store import open_store

    if kdir.exists():  # a build interrupted before build.json: start clean
        shutil.rmtree(kdir)
    kdir.mkdir(parents=True)
    kb_settings = settings.with_overrides({"paths.data_dir": str(kdir)})
    hits0, misses0 = embedder.stats.hits, embedder.stats.misses
    t0 = time.perf_counter()
    parse_s = 0.0
    kb = KnowledgeBase(kb_settings, open_store(kb_settings), embedder)
    results = []
    try:
        for doc in tqdm(es.documents, desc="build index", unit="doc", disable=not progress, leave=False):
            data = doc.path.read_bytes()
            tp = time.perf_counter()
            text, report = parse_cached(data, doc.filename, settings)
            parse_s += time.perf_counter() - tp
            results.append(kb._ingest(source_key(doc.owner, doc.filename), doc.filename, doc.owner,
                                      doc.visibility, data, text, report,
                                      authored_markdown=bool(report.get("authored_markdown")), ingested_at=None))
        t_opt = time.perf_counter()
        kb.finish_ingest()
        optimize_s = time.perf_counter() - t_opt
        n_chunks = kb.count_chunks()
    finally:
        kb.store.close()
    chars = [r.chunk_stats.get("mean", 0) * r.chunk_stats.get("count", 0) for r in results]
    build = {"key": key, "built_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
             "build_s": round(time.perf_counter() - t0, 3), "parse_s": round(parse_s, 3),
             "chunk_s": round(sum(r.chunk_stats.get("chunk_s", 0.0) for r in results), 3),
             "optimize_s": round(optimize_s, 3), "n_documents": len(results), "n_chunks": n_chunks,
             "chunk_chars_total": round(sum(chars)), "embed_cache_hits": embedder.stats.hits - hits0,
             "embed_cache_misses": embedder.stats.misses - misses0,
             "chunks_per_doc": {r.source: r.n_chunks for r in results}}
    tmp = kdir / "build.json.tmp"
    tmp.write_text(json.dumps(build, indent=2), encoding="utf-8")
    tmp.replace(kdir / "build.json")


# ============================================================================ retrieval (top-k, mode, RRF, re-rank, chunking)

IR_DEPTH = 10
EVAL_REQUESTER = "eval-user"


def evaluate_retrieval(settings, evalset=None, *, embedder=None, progress: bool = False) -> PointResult:
    """Retrieval-only evaluation of one configuration on an authored evalset.

    Per answerable question: hit and reciprocal rank at ``retrieval.kb_top_k`` over gold
    sources, nDCG@10 / Recall@10 over the source ranking (ranx), retrieval latency, and the
    tokens of the top-k context (what generation would be handed: the cost side of top-k).
    Every question also counts private chunks of other owners retrieved (must be 0). With
    ``retrieval.rerank`` the top ``k * rerank_overfetch`` (at least 10) candidates are
    re-ordered by the ``retrieval.rerank_model`` bi-encoder; ``retrieval.query_transform`` (split |
    hyde, :mod:`adiyan.retrieval.transform`) rewrites the question first. The index comes from
    :func:`open_sweep_kb`, so nothing is embedded or indexed twice.
    """
    import numpy as np

    from .eval import metrics as M
    from .eval.ir_metrics import per_query
    from .generation import approx_tokens

    h = open_sweep_kb(settings, evalset, embedder=embedder, progress=progress)
    kb, es = h.kb, h.evalset
    rc = settings.retrieval
    k = rc.kb_top_k
    depth = max(k, IR_DEPTH)
    reranker = None
    if rc.rerank:
        from .retrieval.rerank import BiEncoderReranker

        rkey = ("reranker", rc.rerank_model, str(settings.paths.cache_dir))
        reranker = _MEMO.get(rkey) or _MEMO.setdefault(rkey, BiEncoderReranker.from_settings(settings))
        depth = max(depth, k * rc.rerank_overfetch)
    from .retrieval import transform

    hyde_llm = hyde_cache = None
    if rc.query_transform == "hyde":
        from .cache import CallCache
        from .models import llm_from_settings

        hyde_llm = llm_from_settings(settings)
        hyde_cache = CallCache(Path(settings.paths.cache_dir) / "calls.sqlite", "hyde")
    rows, run, qrels = [], {}, {}
    lat = []
    for q in es.questions:
        requester = q.requester or EVAL_REQUESTER
        t0 = time.perf_counter()
        res = transform.retrieve(kb, q.question, requester, top_k=depth, llm=hyde_llm, cache=hyde_cache)
        chunks = res.chunks
        if reranker is not None and chunks:
            scores = reranker.score(q.question, [c.text for c in chunks])
            chunks = [c for _, c in sorted(zip(scores, chunks), key=lambda t: -t[0])]
        dt = time.perf_counter() - t0
        lat.append(dt)
        top = chunks[:k]
        sources = [c.source for c in top]
        leaked = sum(1 for c in chunks if c.payload.get("visibility") != "global"
                     and c.payload.get("owner_identity") != requester)
        row = {"qid": q.id, "kind": q.kind, "retrieve_ms": dt * 1000,
               "context_tokens": sum(approx_tokens(c.text) for c in top), "private_leaked": leaked}
        if q.answerable:
            qrels[q.id] = {s: 1 for s in q.gold_sources}
            src_run: dict[str, float] = {}
            for rank, c in enumerate(chunks[:IR_DEPTH], 1):
                src_run.setdefault(c.source, 1.0 / rank)
            run[q.id] = src_run
            row["hit"] = float(M.hit(sources, q.gold_sources))
            row["rr"] = float(M.reciprocal_rank(sources, q.gold_sources))
        rows.append(row)
    if qrels:
        nd = per_query(qrels, run, f"ndcg@{IR_DEPTH}")
        rc10 = per_query(qrels, run, f"recall@{IR_DEPTH}")
        for r in rows:
            if r["qid"] in nd:
                r[f"ndcg@{IR_DEPTH}"] = nd[r["qid"]]
                r[f"recall@{IR_DEPTH}"] = rc10[r["qid"]]
    ans = [r for r in rows if "hit" in r]
    metrics = {
        "hit_rate": _mean(r["hit"] for r in ans),
        "mrr": _mean(r["rr"] for r in ans),
        f"ndcg@{IR_DEPTH}": _mean(r.get(f"ndcg@{IR_DEPTH}") for r in ans),
        f"recall@{IR_DEPTH}": _mean(r.get(f"recall@{IR_DEPTH}") for r in ans),
        "context_tokens": _mean(r["context_tokens"] for r in rows),
        "retrieve_ms": 1000 * float(np.mean(lat)) if lat else None,
        "retrieve_p95_ms": 1000 * float(np.percentile(lat, 95)) if lat else None,
        "private_leaked": float(sum(r["private_leaked"] for r in rows)),
    }
    for kind in sorted({r["kind"] for r in ans}):
        metrics[f"hit_rate.{kind}"] = _mean(r["hit"] for r in ans if r["kind"] == kind)
    b = h.build
    metrics.update({"n_chunks": float(b["n_chunks"]), "index_build_s": b["build_s"], "chunking_s": b.get("chunk_s", 0.0),
                    "index_embedded_texts": float(b["embed_cache_misses"]),
                    "mean_chunk_chars": b["chunk_chars_total"] / max(1, b["n_chunks"])})
    info = {"evalset": es.name, "questions": len(rows), "answerable": len(ans), "k": k, "depth": depth,
            "mode": rc.mode, "rerank": bool(rc.rerank), "embedder": kb.embedder.id,
            "floor": settings.score_floor(kb.embedder.id) if rc.mode == "dense" else None,
            "index_dir": str(h.data_dir), "index_reused": h.reused, "index_open_s": round(h.opened_s, 4),
            "build": {k_: v for k_, v in b.items() if k_ != "key"}}
    return PointResult(metrics, rows, info)


def _mean(values) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def chunking_cost(settings, evalset=None, *, embedder=None, max_documents: int | None = 60) -> dict:
    """What indexing with this chunking costs from cold, independent of what the caches hold.

    The index of a sweep point may have been built from a warm embedding cache, so its build
    time says what that run paid, not what the configuration costs. Here the (cached) parsed
    text of up to ``max_documents`` documents is chunked and the chunks embedded with the model
    itself, bypassing the embedding cache: ``cold_chunking_s`` (the semantic chunker embeds
    every sentence), ``cold_embed_s`` and their sum ``cold_index_s``, with ``cost_documents``.
    """
    from .chunking import chunk_text
    from .eval.evalset import load_evalset

    es = evalset if evalset is not None and not isinstance(evalset, (str, Path)) else \
        load_evalset(evalset or settings.eval.evalset)
    emb = embedder or sweep_embedder(settings)
    raw = getattr(emb, "inner", emb)  # the model behind the embedding cache
    docs = es.documents[:max_documents] if max_documents else es.documents
    texts = []
    for d in docs:
        text, report = parse_cached(d.path.read_bytes(), d.filename, settings)
        texts.append((text, bool(report.get("authored_markdown"))))
    t0 = time.perf_counter()
    chunks = [c.text for text, md in texts for c in chunk_text(text, settings.chunking, embedder=raw,
                                                                 authored_markdown=md)]
    chunk_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    raw.embed(chunks, "document")
    embed_s = time.perf_counter() - t0
    return {"cold_chunking_s": chunk_s, "cold_embed_s": embed_s, "cold_index_s": chunk_s + embed_s,
            "cost_documents": float(len(docs)), "cost_chunks": float(len(chunks))}


def chunk_table(settings, evalset=None, *, embedder=None):
    """Chunks per document and chunk-length statistics of the configuration's index (a DataFrame)."""
    import pandas as pd

    h = open_sweep_kb(settings, evalset, embedder=embedder)
    return pd.DataFrame([{"document": s, "chunks": n} for s, n in h.build["chunks_per_doc"].items()])


# ============================================================================ HNSW: recall vs exact and latency

HNSW_COLLECTION = "hnsw_sweep"
VECTOR_SETS = ("synthetic-20k", "scifact-minilm")


@dataclass
class VectorSet:
    name: str
    ids: list[str]
    vectors: Any  # float32, L2-normalised
    queries: Any
    query_ids: list[str]
    info: dict

    @property
    def key(self) -> str:
        return _sha({"name": self.name, **{k: v for k, v in self.info.items() if k in ("seed", "n", "dim", "source_hash")}})[:12]


def synthetic_vectors(n: int = 20_000, dim: int = 384, *, n_queries: int = 200, clusters: int = 100,
                      spread: float = 1.0, seed: int = 0) -> VectorSet:
    """A seeded mixture of ``clusters`` Gaussian blobs on the unit sphere (queries from the same law).

    Unstructured Gaussian noise in 384-d is an unrealistically hard case for any graph index;
    clustered data with noise as large as the centres' spread is closer to text embeddings.
    """
    import numpy as np

    from .models.base import l2_normalize

    rng = np.random.default_rng(seed)
    centres = l2_normalize(rng.standard_normal((clusters, dim)).astype(np.float32))

    def draw(m):
        c = centres[rng.integers(0, clusters, m)]
        return l2_normalize((c + spread * rng.standard_normal((m, dim)).astype(np.float32) / math.sqrt(dim)))

    vecs, qs = draw(n), draw(n_queries)
    return VectorSet(f"synthetic-{n // 1000}k" if n % 1000 == 0 else f"synthetic-{n}", [str(i) for i in range(n)],
                     vecs, qs, [f"q{i}" for i in range(n_queries)],
                     {"seed": seed, "n": n, "dim": dim, "clusters": clusters, "spread": spread,
                      "queries": n_queries, "source": "synthetic"})


def scifact_vectors(settings, *, n_queries: int | None = 200, embed_missing: bool = False,
                    progress: bool = False) -> VectorSet:
    """SciFact (test) documents and queries as all-MiniLM-L6-v2 vectors, read from the embedding cache.

    Raises ``LookupError`` when they are not cached and ``embed_missing`` is off (embedding the
    5,183 documents takes minutes: ``benchmarks/scifact.py`` fills the cache).
    """
    import numpy as np

    from .cache import EmbeddingCache, embedding_key
    from .eval.beir import load_beir, resolve_beir

    path = resolve_beir("scifact", settings.paths.datasets_dir, settings.paths.cache_dir)
    ds = load_beir(path, "test")
    ids, texts = ds.doc_ids(), ds.doc_texts()
    qids = list(ds.queries)[: n_queries or None]
    qtexts = [ds.queries[q] for q in qids]
    cache = EmbeddingCache(Path(settings.paths.cache_dir) / "embeddings.sqlite")
    dkeys = [embedding_key("minilm", "", t) for t in texts]
    qkeys = [embedding_key("minilm", "", t) for t in qtexts]
    found = cache.get_many(dkeys + qkeys)
    missing = len(set(dkeys + qkeys) - set(found))
    if missing:
        if not embed_missing:
            raise LookupError(f"{missing} SciFact minilm vectors are not in {cache.path}; run benchmarks/scifact.py "
                              "or pass embed_missing=True")
        emb = sweep_embedder(settings.with_overrides({"embedder.name": "minilm"}))
        from .retrieval.dense import embed_texts

        embed_texts(emb, texts, "document", progress=progress)
        embed_texts(emb, qtexts, "query", progress=progress)
        found = cache.get_many(dkeys + qkeys)
    from .models.base import l2_normalize

    vecs = l2_normalize(np.stack([found[k] for k in dkeys]).astype(np.float32))
    qv = l2_normalize(np.stack([found[k] for k in qkeys]).astype(np.float32))
    src_hash = _sha({"docs": dkeys[:50] + dkeys[-50:], "n": len(dkeys), "q": qkeys})
    return VectorSet("scifact-minilm", ids, vecs, qv, qids,
                     {"n": len(ids), "dim": int(vecs.shape[1]), "queries": len(qids), "source": str(path),
                      "source_hash": src_hash, "embedder": "minilm", "seed": 0})


def vector_set(name: str, settings, **kw) -> VectorSet:
    """``synthetic-20k`` (or ``synthetic-N``) or ``scifact-minilm``, memoised per process."""
    key = ("vectors", name, _canon(kw))
    with _MEMO_LOCK:
        if key not in _MEMO:
            if name.startswith("synthetic"):
                n = name.split("-", 1)[1] if "-" in name else "20k"
                n = int(n[:-1]) * 1000 if n.endswith("k") else int(n)
                _MEMO[key] = synthetic_vectors(n, **{k: v for k, v in kw.items() if k in ("dim", "n_queries", "clusters", "spread", "seed")})
            elif name == "scifact-minilm":
                _MEMO[key] = scifact_vectors(settings, **{k: v for k, v in kw.items() if k in ("n_queries", "embed_missing")})
            else:
                raise ValueError(f"unknown vector set {name!r}; choose one of {VECTOR_SETS}")
        return _MEMO[key]


def _visibility(doc_id: str, seed: int = 0) -> str:
    from .retrieval.hnsw_recall import visibility

    return visibility(doc_id, seed)


@dataclass
class HnswIndex:
    store: Any
    data_dir: Path
    build: dict
    visibility: list[str]


def hnsw_index(vs: VectorSet, settings, *, m: int = 16, ef_construct: int = 100, seed: int = 0,
               progress: bool = False) -> HnswIndex:
    """An HNSW index of the vector set in Qdrant's embedded engine, built once per (vectors, m, ef_construct).

    The shard's indexing threshold is lowered before ``optimize()`` so HNSW is really built
    whatever the size (with the engine's default a collection of SciFact's size stays a plain
    segment and every search is exact); ``build.json`` records the indexed vector count.
    """
    import qdrant_edge as qe
    from tqdm.auto import tqdm

    from .store import EdgeStore, Point

    key = {"vectors": vs.key, "name": vs.name, "m": m, "ef_construct": ef_construct, "seed": seed}
    kdir = Path(settings.paths.data_dir) / "sweep" / "hnsw" / f"{vs.name}-{_sha(key)[:12]}"
    memo_key = ("hnsw", str(kdir.resolve()))
    with _MEMO_LOCK:
        if memo_key in _MEMO:
            return _MEMO[memo_key]
        vis = [_visibility(i, seed) for i in vs.ids]
        if not (kdir / "build.json").is_file():
            with _dir_lock(kdir):
                if not (kdir / "build.json").is_file():
                    if kdir.exists():
                        shutil.rmtree(kdir)
                    store = EdgeStore(kdir, hnsw_m=m, hnsw_ef_construct=ef_construct)
                    dim = int(vs.vectors.shape[1])
                    store.ensure_collection(HNSW_COLLECTION, dim=dim, embedder_id=vs.name)
                    t0 = time.perf_counter()
                    for s in tqdm(range(0, len(vs.ids), 1000), desc=f"upsert {vs.name}", disable=not progress,
                                  leave=False):
                        store.upsert(HNSW_COLLECTION, [Point(i, vs.vectors[i], {"doc_id": vs.ids[i], "visibility": vis[i]})
                                                       for i in range(s, min(s + 1000, len(vs.ids)))])
                    upsert_s = time.perf_counter() - t0
                    store.close()
                    cfg = qe.EdgeConfig(vectors=qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine),
                                        hnsw_config=qe.HnswIndexConfig(m=m, ef_construct=ef_construct,
                                                                       full_scan_threshold=store.full_scan_threshold),
                                        optimizers=qe.EdgeOptimizersConfig(indexing_threshold=1))
                    shard = qe.EdgeShard.load(str(store.root / HNSW_COLLECTION), cfg)
                    t0 = time.perf_counter()
                    shard.optimize()
                    shard.flush()
                    optimize_s = time.perf_counter() - t0
                    info = shard.info()
                    shard.close()
                    build = {"key": key, "points": len(vs.ids), "dim": dim, "m": m, "ef_construct": ef_construct,
                             "upsert_s": round(upsert_s, 3), "optimize_s": round(optimize_s, 3),
                             "indexed_vectors": int(info.indexed_vectors_count), "segments": int(info.segments_count),
                             "built_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
                    (kdir / "build.json.tmp").write_text(json.dumps(build, indent=2), encoding="utf-8")
                    (kdir / "build.json.tmp").replace(kdir / "build.json")
        build = json.loads((kdir / "build.json").read_text(encoding="utf-8"))
        data_dir = kdir
        store = EdgeStore(data_dir, hnsw_m=m, hnsw_ef_construct=ef_construct)
        try:
            store.count(HNSW_COLLECTION)
        except Exception as exc:  # noqa: BLE001
            if not _locked_error(exc):
                raise
            data_dir = _replica(kdir)
            store = EdgeStore(data_dir, hnsw_m=m, hnsw_ef_construct=ef_construct)
            store.count(HNSW_COLLECTION)
        idx = HnswIndex(store, data_dir, build, vis)
        _MEMO[memo_key] = idx
        return idx


def _exact_truth(vs: VectorSet, k: int, global_only: bool, vis: list[str]) -> list[list[str]]:
    import numpy as np

    from .retrieval.dense import ExactDenseIndex

    key = ("truth", vs.key, k, global_only)
    if key not in _MEMO:
        exact = _MEMO.get(("exact", vs.key)) or _MEMO.setdefault(("exact", vs.key),
                                                                  ExactDenseIndex(vs.ids, vs.vectors, normalize=False))
        mask = np.array([v == "global" for v in vis]) if global_only else None
        _MEMO[key] = [[d for d, _ in hits] for hits in exact.search(vs.queries, k, mask=mask)]
    return _MEMO[key]


def hnsw_point(vs: VectorSet, settings, *, ef: int, access_filter: bool, k: int = 10, m: int = 16,
               ef_construct: int = 100, warmup: int = 20, progress: bool = False) -> PointResult:
    """Recall@k of HNSW against exact search, and latency, at one ``ef``, with or without the access filter.

    The filtered case searches ``visibility == global`` (about half the points, by a seeded hash
    of the id, as :mod:`adiyan.retrieval.hnsw_recall`); its truth is the exact top-k among those.
    Latency is wall time per ``EdgeStore.search`` call, one query at a time after a warm-up.
    Private points returned under the filter are counted (must be 0 at every ef).
    """
    import numpy as np

    from .store import Cond, Filter

    idx = hnsw_index(vs, settings, m=m, ef_construct=ef_construct, progress=progress)
    flt = Filter(must=(Cond("visibility", "global"),)) if access_filter else None
    truth = _exact_truth(vs, k, access_filter, idx.visibility)
    vis_of = dict(zip(vs.ids, idx.visibility))
    for q in vs.queries[:warmup]:
        idx.store.search(HNSW_COLLECTION, q, k, flt=flt, ef=ef)
    rows, lat, exact_lat, leaked = [], [], [], 0
    for qid, q, t in zip(vs.query_ids, vs.queries, truth):
        t0 = time.perf_counter()
        hits = idx.store.search(HNSW_COLLECTION, q, k, flt=flt, ef=ef)
        dt = time.perf_counter() - t0
        found = [h.payload["doc_id"] for h in hits]
        leaked += sum(1 for d in found if vis_of[d] != "global") if access_filter else 0
        lat.append(dt)
        rows.append({"qid": qid, f"recall@{k}": len(set(found) & set(t)) / k, "latency_ms": dt * 1000})
    for q in vs.queries[:50]:  # the engine's brute force on the same filter, for scale
        t0 = time.perf_counter()
        idx.store.search(HNSW_COLLECTION, q, k, flt=flt, exact=True)
        exact_lat.append(time.perf_counter() - t0)
    lat_ms = np.asarray(lat) * 1000
    metrics = {f"recall@{k}": float(np.mean([r[f"recall@{k}"] for r in rows])),
               "p50_ms": float(np.percentile(lat_ms, 50)), "p95_ms": float(np.percentile(lat_ms, 95)),
               "mean_ms": float(lat_ms.mean()), "exact_p50_ms": float(np.percentile(np.asarray(exact_lat) * 1000, 50)),
               "private_returned": float(leaked), "build_s": idx.build["upsert_s"] + idx.build["optimize_s"],
               "indexed_share": idx.build["indexed_vectors"] / max(1, idx.build["points"])}
    info = {"vectors": vs.name, "points": len(vs.ids), "dim": int(vs.vectors.shape[1]), "queries": len(rows),
            "ef": ef, "filter": "visibility == global" if access_filter else None, "k": k,
            "build": {k_: v for k_, v in idx.build.items() if k_ != "key"}, "vector_info": vs.info}
    return PointResult(metrics, rows, info)


# ============================================================================ memory: recency half-life

# A conversation-memory evalset authored for the recency sweep. Three users of the Adiyan
# assistant (two guides and the office) state facts over a year. Each question is asked "now"
# and has one expected memory:
#   correction - a fact stated, later corrected: the expected memory is the correction, the
#                superseded one must not outrank it (recency helps; too long a half-life hurts);
#   stable     - an old fact never changed, with a recent, topically close distractor: the old
#                fact must still win (too short a half-life hurts).
# Ages are days before NOW. Texts are in the users' own words (corrections rarely repeat the
# question's phrasing, which is what makes recency necessary).
MEMORY_NOW = "2025-06-30T12:00:00+00:00"
MEMORY_EVALSET_VERSION = 1

_MEM = {
    "mira": [
        ("m-allergy", 200, "I'm allergic to peanuts, so please keep them out of my packed lunches."),
        ("m-allergy-d", 1, "Lunch on today's tour was a lovely lentil curry at the river café."),
        ("m-contact", 150, "My emergency contact is my brother Jonas, phone 0171 555 0199."),
        ("m-contact-d", 3, "If the bus is late, guests should call the office, not my personal phone."),
        ("m-firstaid", 300, "I hold a wilderness first aid certificate, valid until 2027."),
        ("m-firstaid-d", 1, "A guest twisted an ankle on the ridge walk today; we bandaged it and carried on slowly."),
        ("m-lang", 240, "I speak German, Portuguese and some Italian."),
        ("m-lang-d", 2, "Today's group were all French speakers, the audio guide saved the day."),
        ("m-route", 140, "My favourite route is the Arrábida coastal hike."),
        ("m-route-d", 1, "Tomorrow's coastal hike is cancelled because of the wind warning."),
        ("m-flight", 45, "My Lisbon flight departs on 12 March at 07:40."),
        ("m-flight-c", 6, "Change of plan: the airline rebooked me, I now fly out on the 14th in the afternoon."),
        ("m-shift", 60, "I prefer to lead the morning Harbour Walk tours."),
        ("m-shift-c", 10, "From now on put me on the evening slots instead, mornings don't work any more."),
        ("m-address", 80, "My home address is 12 Alder Lane, Porto."),
        ("m-address-c", 15, "I moved last week; the new place is 4 Rua das Flores."),
        ("m-locker", 30, "My locker at the depot is number 17."),
        ("m-locker-d", 2, "The depot lockers are being repainted this week."),
        ("m-x1", 20, "The new rain jackets for guides are in the storeroom."),
        ("m-x2", 90, "I usually take the 8:15 train to the meeting point."),
    ],
    "tomas": [
        ("t-licence", 250, "I can drive the 16-seat minibus; my licence class is D1."),
        ("t-licence-d", 1, "The minibus had a flat tyre this morning, the garage fixed it by noon."),
        ("t-diet", 180, "I am vegetarian."),
        ("t-diet-d", 2, "The group dinner tonight is at the steak house on Main Street."),
        ("t-tax", 365, "My tax ID for invoices is PT 245 118 903."),
        ("t-tax-d", 4, "Sent the October invoice to accounts today."),
        ("t-kids", 200, "I have two kids, so I can't do overnight tours during school term."),
        ("t-kids-d", 2, "The overnight tour to the Douro went well, the guests loved the quinta."),
        ("t-rate", 90, "My day rate is 180 euros."),
        ("t-rate-c", 12, "We agreed the new contract: I'll charge 210 a day from next month."),
        ("t-holiday", 50, "I'm on holiday from 1 to 15 August."),
        ("t-holiday-c", 3, "Holiday moved: I'm now away 8 to 22 August."),
        ("t-phone", 40, "The best number to reach me is 0912 334 556."),
        ("t-phone-c", 4, "New phone! Use 0935 778 120 from now on."),
        ("t-boots", 25, "I wear size 44 hiking boots."),
        ("t-boots-d", 1, "Bought new boot laces at the outdoor shop today."),
        ("t-x1", 30, "The kayaks need a wash after every river trip."),
        ("t-x2", 120, "I keep a spare first aid kit in the minibus glovebox."),
    ],
    "office": [
        ("o-alarm", 220, "The office alarm code is 4471."),
        ("o-alarm-d", 1, "Someone left the office window open last night."),
        ("o-insurance", 160, "Our insurance policy with Atlantic Mutual has number AM-5520-19."),
        ("o-insurance-d", 3, "The insurer sent a newsletter about storm season."),
        ("o-founder", 300, "The company was founded in 2009 by Rosa Adiyan."),
        ("o-founder-d", 2, "Rosa is visiting the Lisbon branch next week."),
        ("o-vat", 260, "Our VAT number is PT 509 887 112."),
        ("o-vat-d", 3, "The accountant asked for the Q3 VAT return by Friday."),
        ("o-evac", 190, "The emergency evacuation point is the car park behind the church."),
        ("o-evac-d", 1, "Fire drill scheduled for next Tuesday at ten."),
        ("o-meeting", 70, "Staff meetings are on Mondays at 9."),
        ("o-meeting-c", 8, "Heads-up: we're shifting the weekly team get-together to Thursday mornings."),
        ("o-kayak", 100, "The kayak supplier is BlueWave Rentals."),
        ("o-kayak-c", 20, "We switched providers for the boats, Tejo Paddle handles them now."),
        ("o-sintra", 55, "The Sintra day trip costs 95 euros per person."),
        ("o-sintra-c", 5, "Price update: Sintra is now 110 per head."),
        ("o-hours", 35, "The office closes at 18:00."),
        ("o-hours-c", 2, "Summer hours: we stay open until 20:00."),
        ("o-wifi", 40, "The guest wifi password is Harbour2025."),
        ("o-wifi-d", 2, "The wifi router was restarted this morning after an outage."),
        ("o-parking", 21, "Staff parking is on level -2 of the Rossio garage."),
        ("o-parking-d", 1, "The garage lift is out of order until Friday."),
        ("o-x1", 15, "Printer toner is ordered on the first Monday of the month."),
        ("o-x2", 45, "New brochures arrive in two weeks."),
    ],
}

_MEM_QUESTIONS = [
    # (qid, user, question, expected memory id, superseded memory id or None)
    ("q-allergy", "mira", "What food allergy does Mira have?", "m-allergy", None),
    ("q-contact", "mira", "Who is Mira's emergency contact?", "m-contact", None),
    ("q-firstaid", "mira", "Does Mira have first aid training?", "m-firstaid", None),
    ("q-lang", "mira", "Which languages does Mira speak?", "m-lang", None),
    ("q-route", "mira", "What is Mira's favourite route?", "m-route", None),
    ("q-locker", "mira", "What is Mira's locker number?", "m-locker", None),
    ("q-flight", "mira", "When does Mira's Lisbon flight depart?", "m-flight-c", "m-flight"),
    ("q-shift", "mira", "Which Harbour Walk tours does Mira prefer to lead?", "m-shift-c", "m-shift"),
    ("q-address", "mira", "What is Mira's home address?", "m-address-c", "m-address"),
    ("q-licence", "tomas", "Which vehicle can Tomas drive?", "t-licence", None),
    ("q-diet", "tomas", "Is Tomas vegetarian?", "t-diet", None),
    ("q-tax", "tomas", "What is Tomas's tax ID for invoices?", "t-tax", None),
    ("q-kids", "tomas", "Why can't Tomas do overnight tours during school term?", "t-kids", None),
    ("q-boots", "tomas", "What size hiking boots does Tomas wear?", "t-boots", None),
    ("q-rate", "tomas", "What is Tomas's day rate?", "t-rate-c", "t-rate"),
    ("q-holiday", "tomas", "When is Tomas on holiday in August?", "t-holiday-c", "t-holiday"),
    ("q-phone", "tomas", "What is the best number to reach Tomas?", "t-phone-c", "t-phone"),
    ("q-alarm", "office", "What is the office alarm code?", "o-alarm", None),
    ("q-insurance", "office", "What is our insurance policy number?", "o-insurance", None),
    ("q-founder", "office", "Who founded the company?", "o-founder", None),
    ("q-vat", "office", "What is the company's VAT number?", "o-vat", None),
    ("q-evac", "office", "Where is the office evacuation point?", "o-evac", None),
    ("q-wifi", "office", "What is the guest wifi password?", "o-wifi", None),
    ("q-parking", "office", "Where do staff park?", "o-parking", None),
    ("q-meeting", "office", "When are the weekly staff meetings?", "o-meeting-c", "o-meeting"),
    ("q-kayak", "office", "Who is our kayak supplier?", "o-kayak-c", "o-kayak"),
    ("q-sintra", "office", "How much does the Sintra day trip cost per person?", "o-sintra-c", "o-sintra"),
    ("q-hours", "office", "What time does the office close?", "o-hours-c", "o-hours"),
]


@dataclass
class MemoryEvalset:
    now: str
    memories: list[dict]  # {"id", "user", "text", "created_at", "age_days"}
    questions: list[dict]  # {"qid", "user", "question", "expected", "superseded", "kind"}
    version: int = MEMORY_EVALSET_VERSION

    def content_hash(self) -> str:
        return _sha({"now": self.now, "memories": self.memories, "questions": self.questions, "v": self.version})

    def to_frames(self):
        import pandas as pd

        return pd.DataFrame(self.memories), pd.DataFrame(self.questions)


def memory_evalset() -> MemoryEvalset:
    """The authored conversation-memory evalset (facts, corrections, time stamps): see ``_MEM``."""
    now = datetime.fromisoformat(MEMORY_NOW)
    mems = [{"id": mid, "user": user, "text": text, "age_days": age,
             "created_at": (now - timedelta(days=age)).isoformat()}
            for user, items in _MEM.items() for mid, age, text in items]
    qs = [{"qid": qid, "user": user, "question": q, "expected": exp, "superseded": sup,
           "kind": "correction" if sup else "stable"} for qid, user, q, exp, sup in _MEM_QUESTIONS]
    known = {m["id"] for m in mems}
    for q in qs:
        assert q["expected"] in known and (q["superseded"] in known if q["superseded"] else True), q
    return MemoryEvalset(MEMORY_NOW, mems, qs)


def write_memory_evalset(path: str | os.PathLike) -> Path:
    """Export the memory evalset as JSONL (memories and questions), e.g. into ``evalsets/memory/``."""
    es = memory_evalset()
    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    (p / "memories.jsonl").write_text("".join(json.dumps(m) + "\n" for m in es.memories), encoding="utf-8")
    (p / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in es.questions), encoding="utf-8")
    return p


def _memory_store(settings, es: MemoryEvalset, embedder, *, progress: bool = False):
    """A mem0 Memory holding the evalset, built once per (evalset, embedder) and memoised per process."""
    from .memory import Memory

    key = {"evalset": es.content_hash(), "embedder": embedder.id, "prefix": settings.store.collection_prefix}
    kdir = Path(settings.paths.data_dir) / "sweep" / "memory" / f"v{es.version}-{_slug(embedder.id)}-{_sha(key)[:12]}"
    memo_key = ("memory", str(kdir.resolve()))
    mc = settings.memory

    def open_at(d: Path):
        return Memory(embedder, path=d / "qdrant", history_dir=d / "history",
                      collection_prefix=settings.store.collection_prefix, llm=None, infer=False,
                      half_life_days=mc.half_life_days, overfetch_factor=mc.overfetch_factor,
                      overfetch_min=mc.overfetch_min, recency=mc.recency, default_k=mc.top_k,
                      mem0_home=Path(settings.paths.cache_dir) / "mem0")

    with _MEMO_LOCK:
        if memo_key in _MEMO:
            return _MEMO[memo_key]
        if not (kdir / "build.json").is_file():
            with _dir_lock(kdir):
                if not (kdir / "build.json").is_file():
                    if kdir.exists():
                        shutil.rmtree(kdir)
                    kdir.mkdir(parents=True)
                    t0 = time.perf_counter()
                    mem = open_at(kdir)
                    ids = {}
                    try:
                        for m in es.memories:
                            ids[m["id"]] = mem.add(m["text"], user_id=m["user"], created_at=m["created_at"],
                                                   metadata={"eval_id": m["id"]}, infer=False)
                    finally:
                        mem.close()
                    (kdir / "build.json").write_text(json.dumps({"key": key, "memories": len(ids),
                                                                 "build_s": round(time.perf_counter() - t0, 3)}),
                                                     encoding="utf-8")
        try:
            mem = open_at(kdir)
        except Exception as exc:  # noqa: BLE001
            if not _locked_error(exc):
                raise
            mem = open_at(_replica(kdir))
        _MEMO[memo_key] = mem
        return mem


def evaluate_memory(settings, *, k: int | None = None, progress: bool = False) -> PointResult:
    """Memory search on the authored memory evalset with ``memory.half_life_days`` / ``memory.recency``.

    Per question (asked at the evalset's "now"): rank of the expected memory among the top k;
    for corrections whether the superseded statement outranks the correction (stale). Metrics:
    hit@1, MRR, correction_hit@1, stable_hit@1, stale_rate, search latency.
    """
    import numpy as np

    es = memory_evalset()
    emb = sweep_embedder(settings, progress=progress)
    mem = _memory_store(settings, es, emb, progress=progress)
    mc = settings.memory
    mem.half_life_days, mem.recency = float(mc.half_life_days), bool(mc.recency)
    mem.overfetch_factor, mem.overfetch_min = mc.overfetch_factor, mc.overfetch_min
    k = k or mc.top_k
    rows, lat = [], []
    for q in es.questions:
        t0 = time.perf_counter()
        hits = mem.search(q["question"], user_id=q["user"], k=k, now=es.now)
        lat.append(time.perf_counter() - t0)
        ranked = [h.metadata.get("eval_id") for h in hits]
        rank = ranked.index(q["expected"]) + 1 if q["expected"] in ranked else None
        row = {"qid": q["qid"], "kind": q["kind"], "hit@1": float(rank == 1), "rr": 1.0 / rank if rank else 0.0,
               "top1": ranked[0] if ranked else None, "search_ms": lat[-1] * 1000,
               "top1_weight": hits[0].weight if hits else None}
        if q["superseded"]:
            srank = ranked.index(q["superseded"]) + 1 if q["superseded"] in ranked else None
            row["stale"] = float(srank is not None and (rank is None or srank < rank))
        rows.append(row)
    corr = [r for r in rows if r["kind"] == "correction"]
    stab = [r for r in rows if r["kind"] == "stable"]
    metrics = {"hit@1": _mean(r["hit@1"] for r in rows), "mrr": _mean(r["rr"] for r in rows),
               "correction_hit@1": _mean(r["hit@1"] for r in corr), "stable_hit@1": _mean(r["hit@1"] for r in stab),
               "stale_rate": _mean(r["stale"] for r in corr), "search_ms": 1000 * float(np.mean(lat))}
    info = {"now": es.now, "questions": len(rows), "corrections": len(corr), "stable": len(stab),
            "memories": len(es.memories), "half_life_days": mc.half_life_days, "recency": mc.recency, "k": k,
            "embedder": emb.id, "evalset_hash": es.content_hash()}
    return PointResult(metrics, rows, info)


# ============================================================================ embedding size and int8 storage


def storage_report(settings, evalset=None, *, embedder=None, k: int = 10) -> dict:
    """Storage of the index's chunk vectors and what the engine's int8 quantization does to the ranking.

    Measured, not computed: the index is the sweep's knowledge base in Qdrant's embedded engine,
    built with ``store.quantization`` (none | int8, scalar int8 codes from the 0.99 quantile)
    and ``store.indexing_threshold_kb`` (set it to 1 so a small collection is indexed and
    quantized at all). ``engine_recall@10`` is the overlap of the engine's top 10 (HNSW, with
    int8 codes and ``store.quantization_rescore``) with the exact float32 top 10 computed in
    NumPy from the stored vectors; the disk figures are the shard's files by part (float32
    matrix, int8 codes, HNSW graph, and all segment files, many of them preallocated). The
    seed's arithmetic, 4 bytes a component (768 x 4 = 3 KB a vector, 1M chunks ~ 3 GB), is given
    beside it per width, and the same for int8 (1 byte a component).
    """
    import numpy as np

    h = open_sweep_kb(settings, evalset, embedder=embedder)
    kb = h.kb
    pts = list(kb.store.scroll(kb.collection, with_vectors=True))
    ids = [p.id for p in pts]
    X = np.stack([p.vector for p in pts]).astype(np.float32)
    Q = np.asarray(kb.embedder.embed([q.question for q in h.evalset.questions], "query"), dtype=np.float32)
    kk = min(k, len(ids))
    top_f = np.argsort(-(Q @ X.T), axis=1)[:, :kk]
    recall = []
    for q, truth in zip(Q, top_f):
        got = {hit.id for hit in kb.store.search(kb.collection, q, kk, ef=max(settings.store.hnsw_ef, kk))}
        recall.append(len(got & {ids[i] for i in truth}) / kk)
    dim = X.shape[1]
    quant = settings.store.quantization
    usage = kb.store.disk_usage(kb.collection) if hasattr(kb.store, "disk_usage") else {}
    per_vec = dim if quant == "int8" else 4 * dim  # what the search reads per vector
    return {"engine_recall@10": float(np.mean(recall)), "dim": dim, "vectors": len(ids),
            "bytes_per_vector": per_vec, "float32_bytes_per_vector": 4 * dim, "int8_bytes_per_vector": dim,
            "projected_1M_chunks_gb": per_vec * 1_000_000 / 1e9,
            "projected_1M_chunks_float32_gb": 4 * dim * 1_000_000 / 1e9,
            "disk_segments_kb": usage.get("segments", 0) / 1024, "disk_dense_vectors_kb": usage.get("dense_vectors", 0) / 1024,
            "disk_quantized_kb": usage.get("quantized", 0) / 1024, "disk_hnsw_kb": usage.get("hnsw", 0) / 1024,
            "quantized_built": float(usage.get("quantized", 0) > 0), "per_question_engine_recall": recall}


def evaluate_dims(settings, evalset=None, *, dim: int | None = None, progress: bool = False) -> PointResult:
    """Retrieval quality at one embedding width (Matryoshka truncation of ``embedder.name``, re-normalised)
    and storage (``store.quantization`` none | int8), with the engine's recall against exact float32."""
    emb = sweep_embedder(settings, dim=dim, progress=progress)
    res = evaluate_retrieval(settings, evalset, embedder=emb, progress=progress)
    st = storage_report(settings, evalset, embedder=emb)
    per_q = st.pop("per_question_engine_recall")
    for row, r in zip(res.per_question, per_q):
        row["engine_recall@10"] = r
    res.metrics.update({k: float(v) for k, v in st.items()})
    res.info.update({"embedder": emb.id, "full_dim": getattr(getattr(emb, "base", emb), "dim", emb.dim),
                     "quantization": (f"Qdrant scalar int8 (quantile 0.99), rescore "
                                      f"{'on' if settings.store.quantization_rescore else 'off'}"
                                      if settings.store.quantization == "int8" else "none (float32)")})
    return res


# ============================================================================ context budget


def evaluate_context(settings, evalset=None, *, progress: bool = False) -> PointResult:
    """Answers under ``generation.context_budget_tokens``: keyword recall, abstention, tokens used.

    Retrieves ``retrieval.kb_top_k`` chunks per question (index from :func:`open_sweep_kb`),
    assembles the context under the budget and answers with the configured LLM; answers are
    cached by prompt hash, so only budgets that change the prompt cost generation time.
    """
    import numpy as np

    from .cache import CallCache
    from .eval import metrics as M
    from .generation import answer_question
    from .models import llm_from_settings

    h = open_sweep_kb(settings, evalset, progress=progress)
    kb, es = h.kb, h.evalset
    llm = llm_from_settings(settings)
    cache = CallCache(Path(settings.paths.cache_dir) / "calls.sqlite", "answer")
    rows, gen = [], []
    for q in es.questions:
        requester = q.requester or EVAL_REQUESTER
        chunks = kb.retrieve_knowledge_base(q.question, requester, top_k=settings.retrieval.kb_top_k).chunks
        t0 = time.perf_counter()
        ans = answer_question(llm, q.question, chunks, settings, cache=cache)
        gen.append(time.perf_counter() - t0)
        row = {"qid": q.id, "kind": q.kind, "context_tokens": ans.context_tokens, "truncated": float(ans.truncated),
               "passages_used": len(ans.used), "abstained": float(M.abstained(ans.text)), "generate_s": gen[-1],
               "answer": ans.text}
        if q.answerable:
            row["keyword_hit"] = float(M.keyword_hit(ans.text, q.answer_keywords))
            row["gold_in_context"] = float(any(u["source"] in q.gold_sources for u in ans.used))
        rows.append(row)
    ans_rows = [r for r in rows if "keyword_hit" in r]
    una = [r for r in rows if "keyword_hit" not in r]
    metrics = {"keyword_recall": _mean(r["keyword_hit"] for r in ans_rows),
               "gold_in_context": _mean(r["gold_in_context"] for r in ans_rows),
               "abstain_rate_answerable": _mean(r["abstained"] for r in ans_rows),
               "abstain_rate_unanswerable": _mean(r["abstained"] for r in una),
               "context_tokens": _mean(r["context_tokens"] for r in rows),
               "truncated_share": _mean(r["truncated"] for r in rows),
               "generate_s": float(np.mean(gen)), "answer_cache_hits": float(cache.stats.hits),
               "answer_cache_misses": float(cache.stats.misses)}
    info = {"llm": llm.id, "budget": settings.generation.context_budget_tokens, "k": settings.retrieval.kb_top_k,
            "evalset": es.name}
    return PointResult(metrics, [{k: v for k, v in r.items() if k != "answer"} for r in rows],
                       {**info, "answers": {r["qid"]: r["answer"] for r in rows}})


# ============================================================================ incidents


def evaluate_incidents(settings, *, progress: bool = False) -> PointResult:
    """The five incident replays (:func:`adiyan.eval.incidents.replay_all`) as sweep metrics."""
    from .eval.incidents import replay_all

    results = replay_all(settings, embedder=sweep_embedder(settings), progress=progress)
    metrics = {"principles_holding_share": sum(r.holds for r in results) / len(results)}
    rows = []
    for r in results:
        metrics[f"{r.number}_{r.name.replace(' ', '_')}_holds"] = float(r.holds)
        rows.append({"qid": f"incident-{r.number}", "holds": float(r.holds), "seconds": r.seconds})
    return PointResult(metrics, rows, {"incidents": [asdict(r) for r in results]})


def incident_narrative(result: PointResult) -> str:
    """The incident replays of :func:`evaluate_incidents` told in Markdown: what happened to the
    seed, what the replay measured here and with which model, the principle, and whether it holds."""
    lines = []
    for r in result.info["incidents"]:
        verdict = "the principle holds" if r["holds"] else "**the principle does not hold**"
        lines.append(f"### {r['number']}. {r['name']}: {verdict}")
        lines.append(f"*Principle.* {r['principle']}")
        lines.append(f"*The seed recorded* {r['seed_figure']}. *Measured here* ({r['model']}, {r['seconds']:.1f} s): "
                     f"{r['measured']}.")
        details = {k: v for k, v in (r.get("details") or {}).items() if not isinstance(v, (list, dict))}
        if details:
            lines.append("*Details:* " + "; ".join(f"{k} = {v}" for k, v in details.items()) + ".")
        lines.append("")
    return "\n\n".join(lines)


# ============================================================================ command line


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    from .config import parse_set

    ap = argparse.ArgumentParser(prog="python -m adiyan.sweep",
                                 description="Run sweeps/NAME.yaml: one notebook execution per grid point.")
    ap.add_argument("name", nargs="?", help="sweep name (sweeps/NAME.yaml) or a path to a spec")
    ap.add_argument("--jobs", type=int, default=None, help="points at once (one kernel each; default: the spec's)")
    ap.add_argument("--engine", choices=ENGINES, default=None, help="persistent (one kernel per worker, reset "
                    "between points) or papermill (a fresh kernel per point); default: the spec's")
    ap.add_argument("--force", action="store_true", help="re-run finished points too")
    ap.add_argument("--only", action="append", default=None, help="run only this point id (repeatable)")
    ap.add_argument("--set", dest="set_", action="append", default=[], help="settings override for every point")
    ap.add_argument("--out-dir", default=None, help="output folder (default reports/sweeps/NAME)")
    ap.add_argument("--sweeps-dir", default=str(SWEEPS_DIR))
    ap.add_argument("--list", action="store_true", help="list the sweeps, or the points of NAME, and exit")
    ap.add_argument("--report-only", action="store_true", help="rewrite runs.parquet and index.html only")
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    args = ap.parse_args(argv)
    for k, v in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                 "MEM0_TELEMETRY": "False"}.items():
        os.environ.setdefault(k, v)

    def _terminate(signum, frame):  # SIGTERM unwinds like Ctrl-C, so kernels are shut down
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _terminate)
    if not args.name or args.name == "list":
        for p in sorted(Path(args.sweeps_dir).glob("*.yaml")):
            s = load_spec(p)
            print(f"{p.stem:<12} {len(expand(s)):>3} points  {s.notebook}  {s.description}")
        return 0
    spec = load_spec(args.name, args.sweeps_dir)
    if args.list:
        for p in expand(spec):
            print(f"{p.id}  {p.label}")
        return 0
    overrides = parse_set(args.set_)
    if args.report_only:
        if overrides:
            spec.overrides = {**spec.overrides, **overrides}
        out = Path(args.out_dir) if args.out_dir else OUT_ROOT / spec.name
        runs, index = write_outputs(spec, expand(spec), out, engine=args.engine or spec.engine)
        print(f"{runs}\n{index}")
        return 0
    try:
        res = run_sweep(spec, jobs=args.jobs, engine=args.engine, out_dir=args.out_dir, force=args.force,
                        only=args.only, overrides=overrides, progress=not args.quiet)
    except SweepError as exc:
        print(f"error: {exc}")
        return 1
    print(f"sweep {res.name}: {len(res.points)} points, ran {len(res.ran)}, reused {len(res.reused)}, "
          f"wall {res.wall_s:.1f}s\n  {res.runs}\n  {res.index}")
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
