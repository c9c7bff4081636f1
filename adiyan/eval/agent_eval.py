"""Agent evaluation (``invoke eval --set eval.mode=agent``): the ReAct agent over the evalset's questions.

The design calls agentic retrieval the core of Adiyan, so it is measured like single-shot
answering: the same question rows (:func:`adiyan.eval.harness.question_rows`), the same
retriever (every ``retrieval.*`` setting, the access filter in the engine), the same answer
scorers (keyword recall, abstention, RAGAS's non-LLM metrics, applied by the runner to the rows
built here). Beside them, what only an agent has: steps used, tool calls by tool, compactions,
scratchpads cut by their budget, cap hits (``stopped_reason == "max_steps"``), refusals, the
grounded-answer rate (the loop's own grounding check, under ``generation.strict_grounding``) and
latency per question over ``eval.agent_repeats`` runs (p50 / p95 and the spread across repeats).

Each question runs as its requester with the ``member`` tier (a signed-in user: search and full
text, never the owner bypass). The agent's LLM calls are not cached, so every repeat pays real
latency; answers and counts come from the first repeat, and ``repeat_agreement`` says whether
the others matched it. Traces keep, per step, the tool, its arguments, a summary of the
observation (never the raw output) and the scratchpad as the next decision prompt shows it.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median, pstdev
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from ..agent import Agent, AuthorizationError, DocumentText, Scratchpad, ToolFailure, compact
from ..generation import NO_CONTEXT_ANSWER
from ..types import RetrievalResult
from .. import metrics as M
from .harness import leaked
from .scorers import ANSWER_SCORERS, Rows, score

AGENT_TIER = "member"
TRACES_FILE = "agent_traces.jsonl"
_PAD_HEAD, _PAD_TAIL = "Scratchpad:\n", "\n\nStep "


def _observation(raw: Any, requester: str | None) -> dict:
    """A summary of one tool's raw output: what it named, and anything private of another owner."""
    if isinstance(raw, ToolFailure):
        return {"summary": f"failed: {raw.error}", "sources": [], "private_seen": []}
    if isinstance(raw, RetrievalResult):
        ranked = raw.ranked or raw.chunks
        shown = ", ".join(f"{c.source}#{c.chunk_index} ({c.score:.3f})" for c in raw.chunks)
        summary = f"{len(raw.chunks)} chunk(s): {shown}" if raw.chunks else f"no results ({raw.empty_reason})"
        return {"summary": summary, "sources": list(dict.fromkeys(c.source for c in ranked)),
                "private_seen": leaked(ranked, requester)}
    if isinstance(raw, DocumentText):
        cut = f", first {len(raw.text)} shown" if raw.truncated else ""
        return {"summary": f"{raw.source}: {raw.total_chars} characters{cut}", "sources": [raw.source],
                "private_seen": []}
    if isinstance(raw, dict) and "source" in raw:  # find_document
        return {"summary": f"{raw['source']} (score {float(raw.get('score') or 0):.3f})", "sources": [raw["source"]],
                "private_seen": []}
    if raw is None:
        return {"summary": "nothing", "sources": [], "private_seen": []}
    if isinstance(raw, list) and all(isinstance(d, dict) and "source" in d for d in raw):  # list_documents
        srcs = [d["source"] for d in raw]
        private = [d["source"] for d in raw if d.get("visibility") != "global" and d.get("owner_identity") != requester]
        return {"summary": f"{len(srcs)} document(s): {', '.join(srcs[:12])}", "sources": srcs,
                "private_seen": private}
    if isinstance(raw, list):  # memory hits
        return {"summary": f"{len(raw)} memory hit(s)", "sources": [], "private_seen": []}
    return {"summary": repr(raw)[:200], "sources": [], "private_seen": []}


class _Recorder:
    """The agent's compactor, wrapped to keep each step's observation summary and the scratchpad
    the next decision prompt shows (rendered at ``agent.scratchpad_budget_tokens``)."""

    def __init__(self, question: str, requester: str | None, max_steps: int):
        self.question, self.requester, self.max_steps = question, requester, max_steps
        self.agent: Agent | None = None
        self.by_step: dict[int, dict] = {}

    def __call__(self, pad: Scratchpad, tool: str, args, raw, **kw) -> Scratchpad:
        new = compact(pad, tool, args, raw, **kw)
        step = int(kw.get("step", 0))
        obs = _observation(raw, self.requester)
        prompt = self.agent.decision_messages(self.question, new, step + 1, self.max_steps)[-1].content
        i, j = prompt.find(_PAD_HEAD), prompt.rfind(_PAD_TAIL)
        shown = prompt[i + len(_PAD_HEAD): j] if i >= 0 and j > i else prompt
        obs.update(scratchpad=shown, scratchpad_trimmed=shown.strip() != new.render(10**9).strip(),
                   new_findings=len(new.findings) - len(pad.findings))
        self.by_step[step] = obs
        return new


def _evidence(pad: Scratchpad) -> list[dict]:
    """The agent's findings as retrieved-context rows (one per source chunk, best first), for the
    ID-based RAGAS metrics and the report."""
    out: dict[tuple, dict] = {}
    for f in pad.best_findings():
        key = (f.source, f.chunk_index)
        if key not in out:
            out[key] = {"source": f.source, "chunk_index": -1 if f.chunk_index is None else f.chunk_index,
                        "score": f.score, "text": f.text}
        else:
            out[key]["text"] += " " + f.text
    return list(out.values())


def run_question(settings, llm, kb, retriever, question: str, requester: str | None) -> dict:
    """One agent run: answer, trace (steps with observation summaries and scratchpads), counts, latency."""
    rec = _Recorder(question, requester, settings.agent.max_steps)
    agent = Agent(llm, kb, None, settings, tier=AGENT_TIER, requester_id=requester, retriever=retriever,
                  compactor=rec)
    rec.agent = agent
    t0 = time.perf_counter()
    refused, result = None, None
    try:
        result = agent.run(question)
        steps = result.steps
    except AuthorizationError as err:
        refused, steps = str(err), list(getattr(err, "steps", []) or agent.last_steps)
    latency = time.perf_counter() - t0
    trace = []
    for s in steps:
        d = {k: s.to_dict()[k] for k in ("step", "tool", "args", "action_source", "parse_ok", "note", "error",
                                          "authorized", "latency_s", "decision_text", "scratchpad_tokens",
                                          "n_findings", "structured", "schema_valid", "parse_via", "model_tool",
                                          "model_args", "default_tool", "default_args")}
        d["model_differs"] = s.model_differs
        d.update(rec.by_step.get(s.step, {}) if s.tool != "finish" and s.authorized else {})
        trace.append(d)
    pad = result.scratchpad if result else Scratchpad()
    answer = result.answer if result else ""
    decided = [s for s in steps if s.decision_text or not s.parse_ok]  # not the route check, not the final answer
    decisions = len(decided)
    tools = Counter(t["tool"] for t in trace if t["authorized"] and not t["tool"].startswith("route:"))
    return {
        "answer": answer, "stopped_reason": result.stopped_reason if result else "refused",
        "answer_source": result.answer_source if result else "refused", "route": result.route if result else "",
        "refused": refused, "n_steps": decisions,  # loop steps: each one decided (by the model or a default)
        "tool_calls": dict(tools), "compactions": len(rec.by_step),
        "scratchpad_trims": sum(bool(o.get("scratchpad_trimmed")) for o in rec.by_step.values()),
        "decisions": decisions, "decisions_parsed": sum(1 for s in decided if s.parse_ok),
        # issue 25: schema-valid replies, actions the model chose that were run, and model actions
        # (parsed, run or not) that differ from the default action at that step
        "decisions_schema_valid": sum(1 for s in decided if s.schema_valid),
        "decisions_model": sum(1 for s in decided if s.action_source == "model"),
        "decisions_differ": sum(1 for s in decided if s.model_differs),
        "decisions_differ_tool": sum(1 for s in decided if s.model_tool is not None and s.model_tool != s.default_tool),
        "structured": sorted({s.structured for s in decided if s.structured}),
        "grounded": bool(answer) and agent._grounded(answer, pad),  # the check strict grounding enforces
        "private_seen": sorted({p for t in trace for p in t.get("private_seen", [])}),
        "latency_s": latency, "evidence": _evidence(pad), "steps": trace,
        "final_scratchpad": pad.render(10**9),
    }


def _signature(run: dict) -> tuple:
    return run["answer"], tuple(t["tool"] for t in run["steps"])


@dataclass
class AgentEvalRun:
    """The agent's runs over an evalset: ``rows`` (question rows with the first repeat's answer,
    scored by the runner like single-shot rows) and ``traces`` (every repeat, per question)."""

    rows: list[dict]
    traces: list[dict]
    repeats: int
    max_steps: int
    strict: bool
    seconds: float
    groups_extra: dict = field(default_factory=dict)

    def metric_groups(self, k: int) -> dict[str, dict]:
        """``agent_answer`` and ``agent_ragas``: the agent's answers through the answer scorers of
        single-shot (:data:`adiyan.eval.scorers.ANSWER_SCORERS`), and ``agent``."""
        groups = score(ANSWER_SCORERS, Rows(self.rows), k, prefix=M.AGENT_PREFIX)
        groups["agent"] = agent_metrics(self.traces, self.max_steps, self.strict)
        return groups

    def annotate(self, question_rows: list[dict]) -> None:
        """Put the agent's answer and counts beside each single-shot row of questions.jsonl."""
        by_id = {t["id"]: t for t in self.traces}
        for r in question_rows:
            t = by_id.get(r["id"])
            if t is None:
                continue
            first = t["runs"][0]
            mine = next(a for a in self.rows if a["id"] == r["id"])
            r["agent"] = {"answer": first["answer"], "keyword_hit": mine["keyword_hit"],
                          "abstained": mine["abstained"], "stopped_reason": first["stopped_reason"],
                          "steps": first["n_steps"], "tools": [s["tool"] for s in first["steps"]],
                          "grounded": first["grounded"], "latency_s": t["latency_s"]}

    def write(self, run_dir: Path) -> Path:
        out = Path(run_dir) / TRACES_FILE
        with open(out, "w", encoding="utf-8") as f:
            for t in self.traces:
                f.write(json.dumps(t, ensure_ascii=False, default=str) + "\n")
        return out


def _pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 6) if values else None


def _share(runs: list[dict], key: str) -> float:
    """``key`` summed over the runs, per decision (runs traced before issue 25 count 0)."""
    return round(sum(r.get(key, 0) for r in runs) / max(1, sum(r["decisions"] for r in runs)), 6)


def agent_metrics(traces: list[dict], max_steps: int, strict: bool) -> dict[str, float]:
    """The ``agent`` group: counts from each question's first run, latency over every repeat."""
    firsts = [t["runs"][0] for t in traces]
    n = len(firsts)
    tool_totals: Counter = Counter()
    for r in firsts:
        tool_totals.update(r["tool_calls"])
    medians = [median(t["latency_s"]) for t in traces]
    multi = [t["latency_s"] for t in traces if len(t["latency_s"]) >= 2]
    out: dict[str, float] = {
        "questions": n, "repeats": min((len(t["latency_s"]) for t in traces), default=0), "max_steps": max_steps,
        "steps_mean": M.mean_or_none([r["n_steps"] for r in firsts]),
        "steps_max": max((r["n_steps"] for r in firsts), default=0),
        "cap_hits": sum(r["stopped_reason"] == "max_steps" for r in firsts),
        "cap_hit_rate": M.mean_or_none([r["stopped_reason"] == "max_steps" for r in firsts]),
        "compactions_mean": M.mean_or_none([r["compactions"] for r in firsts]),
        "scratchpad_trims": sum(r["scratchpad_trims"] for r in firsts),
        "refusals": sum(r["refused"] is not None or r["answer"] == NO_CONTEXT_ANSWER for r in firsts),
        "authorization_refusals": sum(r["refused"] is not None for r in firsts),
        "grounded_answer_rate": M.mean_or_none([r["grounded"] for r in firsts]),
        "strict_grounding": float(strict),
        "decision_parse_rate": (round(sum(r["decisions_parsed"] for r in firsts) /
                                      max(1, sum(r["decisions"] for r in firsts)), 6)),
        "decision_schema_valid_rate": _share(firsts, "decisions_schema_valid"),
        "model_action_rate": _share(firsts, "decisions_model"),  # decisions whose model action was run
        "model_differs_rate": _share(firsts, "decisions_differ"),  # model action != the default action
        "model_differs_tool_rate": _share(firsts, "decisions_differ_tool"),
        "private_observed": sum(len(r["private_seen"]) for t in traces for r in t["runs"]),
        "latency_p50_s": _pct(medians, 50), "latency_p95_s": _pct(medians, 95),
        "latency_mean_s": M.mean_or_none(medians),
        "repeat_agreement": M.mean_or_none([len({_signature(r) for r in t["runs"]}) == 1 for t in traces]),
    }
    if multi:
        out["latency_std_s_mean"] = M.mean_or_none([pstdev(x) for x in multi])
        out["latency_range_s_max"] = round(max(max(x) - min(x) for x in multi), 6)
        out["latency_cv_mean"] = M.mean_or_none([pstdev(x) / (sum(x) / len(x)) for x in multi if sum(x) > 0])
    for tool, k in sorted(tool_totals.items()):
        out[f"tool_calls.{tool}"] = round(k / max(1, n), 6)
    return out


def run_agent_eval(settings, index, retriever, llm, qr, *, progress: bool = True) -> AgentEvalRun:
    """Run the agent over every question of ``qr`` (harness rows) ``eval.agent_repeats`` times.

    Repeats go round the whole set (question 1..n, then again), so one question's samples are
    not taken back to back. ``retriever`` is the run's pipeline: the agent's searches honour every
    retrieval setting and the access filter, as the single-shot rows did.
    """
    if llm is None:
        raise ValueError("eval.mode=agent needs an LLM (llm.name); none was opened")
    repeats = settings.eval.agent_repeats
    questions = {q.id: q for q in index.evalset.questions}
    runs: dict[str, list[dict]] = {r["id"]: [] for r in qr.rows}
    t0 = time.perf_counter()
    bar = tqdm(total=repeats * len(qr.rows), desc="agent", unit="run", disable=not progress)
    for _ in range(repeats):
        for r in qr.rows:
            runs[r["id"]].append(run_question(settings, llm, index.kb, retriever, questions[r["id"]].question,
                                              r["requester"]))
            bar.update(1)
    bar.close()
    rows, traces = [], []
    for r in qr.rows:
        first = runs[r["id"]][0]
        answerable = r["hit"] is not None
        row = {k: r[k] for k in ("id", "question", "kind", "requester", "gold_answer", "gold_sources",
                                 "answer_keywords", "hit")}
        row.update(answer=first["answer"], retrieved=first["evidence"],
                   answer_used=[{"source": e["source"], "chunk_index": e["chunk_index"]} for e in first["evidence"]],
                   keyword_hit=M.keyword_hit(first["answer"], r["answer_keywords"]) if answerable else None,
                   abstained=M.abstained(first["answer"]))
        rows.append(row)
        traces.append({"id": r["id"], "question": r["question"], "requester": r["requester"], "kind": r["kind"],
                       "latency_s": [round(x["latency_s"], 6) for x in runs[r["id"]]],
                       "runs": runs[r["id"]]})
    return AgentEvalRun(rows, traces, repeats, settings.agent.max_steps, settings.generation.strict_grounding,
                        time.perf_counter() - t0)
