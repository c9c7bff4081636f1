"""Gathering a sweep: every finished point's metrics into one table, paired tests, the Pareto front.

A point's metrics come from its ``point.json`` (written by the notebook through
:func:`adiyan.experiments.common.record`, metric group ``sweep`` of the registry) or, for a
notebook that ran ``run_eval`` (evaluate.ipynb), from the run's ``metrics.json``, where a column
``retrieval.ndcg@10`` is metric ``ndcg@10`` of group ``retrieval`` and ``timings.total_s`` is
``total_s`` of group ``timings``. Which direction is better always comes from the metric
registry (:mod:`adiyan.metrics`) under that (group, name); a metric it does not declare is
an error naming it, never a guess from the name.

An LLM-judged metric (the registry's ``judged`` flag) of a point whose judge was not calibrated
reliable (its ``ragas_llm.judge_reliable`` is not 1) is unreliable: never "best", left out of
the plots and of the paired tests, and struck on the page (:meth:`Gathered.unreliable`).
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from .. import metrics as M
from ..eval.ir_metrics import fisher_randomization_p, holm
from ..experiments.common import METRIC_GROUP, POINT_FILE, is_score, registry_key
from .spec import FAILED, MARKER, Point, SweepSpec, baseline_point, is_complete, notebook_code_hash, point_fingerprint

SIG_PERMUTATIONS = 10_000
SIG_SEED = 42
JUDGE_RELIABLE = "ragas_llm.judge_reliable"  # a run_eval point's column: 1 when its judge is reliable


def _fallback_point(point_dir: Path) -> dict | None:
    """A notebook that ran ``run_eval`` (evaluate.ipynb) instead of ``record``: read its metrics.json."""
    found = sorted(point_dir.rglob("metrics.json"))
    if not found:
        return None
    m = json.loads(found[-1].read_text(encoding="utf-8"))
    metrics, keys = {}, {}
    for group, vals in (m.get("metrics") or {}).items():
        for k, v in (vals or {}).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                metrics[f"{group}.{k}"] = v
                keys[f"{group}.{k}"] = [group, k]
    for k, v in (m.get("timings") or {}).items():
        metrics[f"timings.{k}"] = v
        keys[f"timings.{k}"] = ["timings", k]
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
    judge = (m.get("models") or {}).get("judge")
    scored = {"regression": m.get("regression") or [], "questions": (m.get("dataset") or {}).get("n_questions"),
              "answered_questions": ((m.get("dataset") or {}).get("n_questions")
                                     if ((m.get("config") or {}).get("eval") or {}).get("generate") else 0),
              "judge": judge}
    return {"status": "ok", "metrics": metrics, "per_question": pq,
            "info": {"run_dir": str(found[-1].parent), "scored": scored}, "registry_keys": keys}


def read_point(point_dir: str | os.PathLike) -> dict | None:
    """A point's recorded data (point.json, or the metrics.json of a run_eval notebook), or None."""
    point_dir = Path(point_dir)
    p = point_dir / POINT_FILE
    if p.is_file():
        return json.loads(p.read_text(encoding="utf-8"))
    return _fallback_point(point_dir)


@dataclass
class Gathered:
    """runs (one row per point), pq (point, question, metric, value), and which registry entry
    each metric column is: ``keys`` maps a column to its (group, name), default (``sweep``, column)."""

    runs: object  # pandas.DataFrame
    pq: object  # pandas.DataFrame
    param_cols: list[str]
    metric_cols: list[str]
    keys: dict[str, tuple[str, str]] = field(default_factory=dict)
    # scored like a run (adiyan.experiments.scoring): per point id, what info["scored"] recorded
    # (regression cases with status and reason, answered n, the judge and its calibration)
    scored: dict[str, dict] = field(default_factory=dict)

    def key(self, col: str) -> tuple[str, str]:
        return self.keys.get(col) or registry_key(col)

    def direction(self, col: str) -> str:
        """higher | lower | neutral, from the registry (UnregisteredMetric if it is not declared)."""
        return M.direction(*self.key(col))

    @staticmethod
    def question_direction(name: str) -> str:
        return M.direction(*registry_key(name))

    def judged(self, col: str) -> bool:
        """The registry says an LLM judged this column (unregistered: not judged)."""
        try:
            return M.is_judged(*self.key(col))
        except M.UnregisteredMetric:
            return False

    def unreliable(self, row, col: str) -> bool:
        """``row[col]`` is an LLM-judged value from a point whose judge is not reliable."""
        if not self.judged(col):
            return False
        flag = row.get(JUDGE_RELIABLE) if hasattr(row, "get") else None
        return not (is_num(flag) and float(flag) == 1.0)

    def reliable_values(self, frame, col: str):
        """``frame[col]`` with the values of unreliable judges blanked (NaN): for "best" and plots."""
        if not self.judged(col) or frame.empty:
            return frame[col]
        return frame[col].where(frame.apply(lambda r: not self.unreliable(r, col), axis=1))

    def unscored(self) -> list[str]:
        """Finished points scored like nothing (issue 44.8): no metric value, or no regression case
        recorded (a case that does not apply still counts: it is listed with why). "id: reason" each."""
        out = []
        if self.runs is None or not len(self.runs):
            return out
        for _, row in self.runs.iterrows():
            if row.get("status") != "ok":
                continue
            pid = row["point_id"]
            if not any(is_num(row.get(c)) and not math.isnan(float(row.get(c))) for c in self.metric_cols):
                out.append(f"{pid}: no metric")
            elif not (self.scored.get(pid) or {}).get("regression"):
                out.append(f"{pid}: no regression cases")
        return out

    def unregistered(self) -> list[str]:
        """group/name of every gathered metric and per-question score the registry does not declare."""
        wanted = [self.key(c) for c in self.metric_cols]
        wanted += [registry_key(n) for n in (sorted(set(self.pq["metric"])) if len(self.pq) else [])]
        out = []
        for group, name in dict.fromkeys(wanted):
            try:
                M.lookup(group, name)
            except M.UnregisteredMetric:
                out.append(f"{group}/{name}")
        return out


def gather(spec: SweepSpec, points: Sequence[Point], out: Path) -> Gathered:
    """Every point's row and per-question scores.

    A point finished under another fingerprint (the notebook's code or the parameters changed
    since) is listed as ``stale``, without its metrics."""
    import pandas as pd  # heavy: only gathering builds tables

    rows, pq_rows, metric_cols, keys, scored = [], [], [], {}, {}
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
            if (data.get("info") or {}).get("scored"):
                scored[p.id] = data["info"]["scored"]
            reg = data.get("registry_keys") or {}
            for k, v in (data.get("metrics") or {}).items():
                col = k if k not in row else f"metric.{k}"
                row[col] = v
                keys[col] = tuple(reg.get(k) or registry_key(k))
                if col not in metric_cols:
                    metric_cols.append(col)
            for q in data.get("per_question") or []:
                for k, v in q.items():  # numbers and booleans; labels (kind, top1...) stay in point.json
                    if k != "qid" and is_score(v):
                        pq_rows.append({"point_id": p.id, "qid": str(q["qid"]), "metric": k, "value": float(v)})
        rows.append(row)
    runs = pd.DataFrame(rows)
    for c in param_cols:  # parquet wants one type per column
        vals = [v for v in runs[c] if v is not None and not (isinstance(v, float) and math.isnan(v))]
        if len({type(v) for v in vals}) > 1 and not all(isinstance(v, (int, float)) for v in vals):
            runs[c] = runs[c].map(lambda v: None if v is None else str(v))
    pq = pd.DataFrame(pq_rows, columns=["point_id", "qid", "metric", "value"])
    return Gathered(runs, pq, param_cols, metric_cols, keys, scored)


# ---------------------------------------------------------------------------- statistics


def significance(spec: SweepSpec, points: Sequence[Point], g: Gathered) -> dict:
    """Paired two-sided randomization tests (Fisher) of every point against the baseline, per
    per-question score, over the questions both answered; Holm-adjusted across the points of
    each score. Each row says the score's registered direction."""
    runs, pq = g.runs, g.pq
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
    reliable_judge = {r["point_id"]: is_num(r.get(JUDGE_RELIABLE)) and float(r[JUDGE_RELIABLE]) == 1.0
                      for r in runs.to_dict("records")}
    for metric in wanted:
        sub = pq[pq["metric"] == metric]
        if sub.empty:
            continue
        direction = g.question_direction(metric)
        judged = M.is_judged(*registry_key(metric))
        table = sub.pivot_table(index="qid", columns="point_id", values="value", aggfunc="first")
        if base.id not in table:
            continue
        rows, pvals = {}, {}
        for p in points:
            if p.id == base.id or p.id not in table or p.id not in ok:
                continue
            if judged and not (reliable_judge.get(base.id) and reliable_judge.get(p.id)):
                res.setdefault("excluded", {}).setdefault(metric, []).append(
                    {"point": p.id, "why": "LLM-judged by a judge that is not calibrated reliable"})
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
                          "direction": direction,
                          "lower_is_better": None if direction == M.NEUTRAL else direction == M.LOWER}
        for pid, adj in holm(pvals).items():
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


def is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not (isinstance(v, float) and math.isnan(v))


TIMING_SUFFIXES = ("_ms", "_s")
# a run column whose per-question score has another name in per_question.parquet
PER_QUESTION_OF = ((re.compile(r"^retrieval\.hit_rate@(\d+|k)$"), "hit"),
                   (re.compile(r"^retrieval\.mrr@(\d+|k)$"), "reciprocal_rank"),
                   (re.compile(r"^answer\.keyword_recall$"), "keyword_hit"))


def per_question_name(metric: str) -> str | None:
    """The per-question score a run column is the mean of, when it is named otherwise."""
    return next((name for pattern, name in PER_QUESTION_OF if pattern.match(metric)), None)


def is_timing(metric: str) -> bool:
    """A wall-clock figure (``retrieve_ms``, ``index_build_s``, ``seconds``): measured once per point."""
    name = metric.rsplit(".", 1)[-1]
    return name == "seconds" or name.endswith(TIMING_SUFFIXES)


def _verdict(m: str, direction: str, winners: list[str], sig: dict) -> tuple[str, list[str], str]:
    """("significant" | "no difference" | "untested" | "timing", the points crowned, a note)."""
    if is_timing(m):
        return "timing", [], "a timing measured once per point (no repeats): not ranked"
    rows = (sig.get("metrics") or {}).get(m) or (sig.get("metrics") or {}).get(per_question_name(m) or "")
    if not rows:
        return "untested", [], "no per-question scores to test: not ranked"
    better = (lambda r: r["delta"] < 0) if direction == M.LOWER else (lambda r: r["delta"] > 0)
    crowned = [p for p in winners if p in rows and rows[p].get("significant") and better(rows[p])]
    base = sig.get("baseline")
    if not crowned and base in winners and all(r.get("significant") and not better(r) for r in rows.values()):
        crowned = [base]  # the baseline, every other point significantly worse
    if crowned:
        return "significant", crowned, "Holm-adjusted p < 0.05 against the baseline"
    return "no difference", [], "no difference shown (paired test against the baseline, Holm-adjusted)"


def best_points(g: Gathered, metrics: Sequence[str], sig: dict | None = None) -> dict[str, dict]:
    """For each metric with a direction in the registry: the best value among the finished points
    and the points that reach it; neutral metrics (counts, sizes) have no best. With the sweep's
    paired tests (``sig``, :func:`significance`) each entry also has ``verdict`` and ``crowned``: a
    point is crowned best only when its test against the baseline is significant after Holm (or it
    is the baseline and every other point is significantly worse); a timing or a metric without
    per-question scores is never crowned, whatever its value."""
    runs = g.runs
    ok = runs[runs["status"] == "ok"] if "status" in runs else runs.iloc[0:0]
    out = {}
    for m in metrics:
        if m not in ok:
            continue
        direction = g.direction(m)
        vals = ok[ok[m].map(is_num)]
        if g.judged(m) and not vals.empty:  # an unreliable judge's value is never best
            vals = vals[vals.apply(lambda r: not g.unreliable(r, m), axis=1)]
        if vals.empty or direction == M.NEUTRAL:
            continue
        col = vals[m].astype(float)
        target = float(col.min() if direction == M.LOWER else col.max())
        winners = vals[col == target]
        out[m] = {"direction": direction, "value": target, "points": list(winners["point_id"]),
                  "labels": list(winners["label"].astype(str)), "n_ok": len(vals)}
        if sig is not None:
            verdict, crowned, note = _verdict(m, direction, out[m]["points"], sig)
            out[m].update(verdict=verdict, crowned=crowned, note=note)
    return out
