"""The agent experiment (notebooks/agent.ipynb; sweep agent): single-shot and agent side by side.

A point is the evaluation job in agent mode (``run_eval`` with ``eval.mode=agent``), so it is
scored exactly like ``invoke eval``: the same rows, scorers and report with traces. The sweep
reads the run's ``metrics.json`` (columns ``answer.keyword_recall``, ``agent_answer.keyword_recall``,
``agent.steps_mean``, ``agent.latency_p95_s``...), as it does for the evaluate notebook; these
helpers only shape what the notebook shows.
"""

from __future__ import annotations

import json
from pathlib import Path

from statistics import median

from ..eval.agent_eval import TRACES_FILE
from ..eval.runner import run_eval
from .common import PointResult

# what a sweep point records: these (group, name) of the run's metrics.json, as group.name columns
POINT_METRICS = (("answer", "keyword_recall"), ("answer", "abstain_rate_answerable"),
                 ("answer", "abstain_rate_unanswerable"), ("agent_answer", "keyword_recall"),
                 ("agent_answer", "abstain_rate_answerable"), ("agent_answer", "abstain_rate_unanswerable"),
                 *(("agent", k) for k in (
                     "steps_mean", "cap_hit_rate", "scratchpad_trims", "grounded_answer_rate", "decision_parse_rate",
                     "refusals", "private_observed", "repeat_agreement", "latency_p50_s", "latency_p95_s",
                     "latency_std_s_mean", "latency_range_s_max")),
                 ("timings", "generate_s"), ("timings", "agent_s"))

PAIRS = (("answer", "agent_answer"), ("ragas", "agent_ragas"), ("claims", "agent_claims"))


def evaluate_agent(settings, *, progress: bool = False, run_id: str | None = None) -> Path:
    """Run the evaluation job in agent mode on ``settings``; returns the run folder."""
    if settings.eval.mode != "agent":
        settings = settings.with_overrides({"eval.mode": "agent"})
    return run_eval(settings, progress=progress, run_id=run_id)


def load(run_dir: Path) -> dict:
    return json.loads((Path(run_dir) / "metrics.json").read_text(encoding="utf-8"))


def side_by_side(run_dir: Path) -> list[dict]:
    """One row per answer metric: the single-shot value beside the agent's."""
    m = load(run_dir)["metrics"]
    return [{"metric": f"{single}.{k}", "single_shot": (m.get(single) or {}).get(k), "agent": v}
            for single, agent in PAIRS for k, v in (m.get(agent) or {}).items()]


def agent_counts(run_dir: Path) -> dict:
    """The ``agent`` group: steps, tool calls, cap hits, refusals, grounding, latency and its spread."""
    return dict(load(run_dir)["metrics"].get("agent") or {})


def per_question(run_dir: Path) -> list[dict]:
    """Per question: single-shot and agent keyword hit, steps, stop reason, tools, latency samples."""
    traces = {}
    path = Path(run_dir) / TRACES_FILE
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            t = json.loads(line)
            traces[t["id"]] = t
    out = []
    for line in (Path(run_dir) / "questions.jsonl").read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        a, t = r.get("agent") or {}, traces.get(r["id"], {})
        lat = t.get("latency_s") or []
        out.append({"qid": r["id"], "kind": r["kind"], "keyword_hit": r.get("keyword_hit"),
                    "agent_keyword_hit": a.get("keyword_hit"), "agent_steps": a.get("steps"),
                    "stopped": a.get("stopped_reason"), "tools": " ".join(a.get("tools") or []),
                    "latency_min_s": min(lat) if lat else None, "latency_max_s": max(lat) if lat else None,
                    "latency_median_s": median(lat) if lat else None,
                    "answer": r.get("answer"), "agent_answer": a.get("answer")})
    return out


def point_result(run_dir: Path) -> PointResult:
    """The run as a sweep point: single-shot and agent metrics side by side (the run's names),
    per question the keyword hit of each, the agent's steps and its median latency."""
    m = load(run_dir)
    groups = {**m["metrics"], "timings": m.get("timings") or {}}
    metrics = {f"{g}.{k}": groups.get(g, {}).get(k) for g, k in POINT_METRICS if groups.get(g, {}).get(k) is not None}
    pq = []
    for r in per_question(run_dir):
        row = {"qid": r["qid"], "kind": r["kind"], "agent_steps": r["agent_steps"],
               "agent_latency_s": r["latency_median_s"]}
        for k in ("keyword_hit", "agent_keyword_hit"):
            if r[k] is not None:
                row[k] = float(r[k])
        pq.append(row)
    # the run's own regression cases (invoke eval checked them; n/a ones with why) as the point's
    metrics.update({f"regression.{k}": v for k, v in (m["metrics"].get("regression") or {}).items() if v is not None})
    scored = {"regression": m.get("regression") or [], "answered_questions": len(pq), "questions": len(pq),
              "judge": None}
    return PointResult(metrics, pq, {"run_dir": str(run_dir), "config_hash": m.get("config_hash"), "scored": scored})
