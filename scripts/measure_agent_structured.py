"""The agent's own decisions under the action schema, on N questions of an evalset (issue 25).

A sample companion of ``invoke eval --set eval.mode=agent`` for a machine where the full run
does not fit: the same index, retriever, agent runs (``adiyan.eval.agent_eval.run_question``, tier
member) and keyword scorer, and beside each agent answer the single-shot answer (the answer cache).
Prints each question as it ends; writes decision counts, rates and every step's model / default
action as JSON.

The agent's model calls go through :class:`adiyan.models.cached_llm.CachedLLM` (greedy replies kept
in ``<cache_dir>/calls.sqlite``, namespace ``agent-measure``), so a re-run replays them and is
cheap; the counts are the same either way (a replayed reply is validated like a fresh one).

    python scripts/measure_agent_structured.py --n 4 --set eval.evalset=evalsets/adiyan_basic --out a.json
    python scripts/measure_agent_structured.py --evalset adiyan_basic --evalset adiyan_full:12 \\
        --set llm.name=smollm2 --set agent.max_steps=3 --out agent.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from adiyan.cache import call_cache
from adiyan.config import load_settings, parse_set
from adiyan import metrics as M
from adiyan.eval.agent_eval import run_question
from adiyan.eval.harness import close_index, open_index, question_rows
from adiyan.factory import open_llm, open_retriever
from adiyan.eval.ir_metrics import mcnemar_p
from adiyan.generation import answer_question
from adiyan.models.cached_llm import CachedLLM
from adiyan.models.structured import describe_structured

COUNTS = ("decisions_schema_valid", "decisions_parsed", "decisions_model", "decisions_differ", "decisions_differ_tool")


def summarize(out_rows: list[dict]) -> dict:
    """Decision counts and rates, keyword recall agent vs single-shot (with the exact McNemar p)."""
    n_dec = sum(r["decisions"] for r in out_rows)
    model_steps = [s for r in out_rows for s in r["steps"] if s.get("model_tool")]
    agent_only = sum(bool(r["agent_keyword_hit"] and not r["single_keyword_hit"]) for r in out_rows)
    single_only = sum(bool(r["single_keyword_hit"] and not r["agent_keyword_hit"]) for r in out_rows)
    return {"questions": len(out_rows), "decisions": n_dec,
            **{k: sum(r[k] for r in out_rows) for k in COUNTS},
            **{f"{k}_rate": round(sum(r[k] for r in out_rows) / max(1, n_dec), 4) for k in COUNTS},
            "model_tools": {t: sum(s["model_tool"] == t for s in model_steps)
                            for t in sorted({s["model_tool"] for s in model_steps})},
            "model_query_is_question": sum(1 for r in out_rows for s in r["steps"]
                                           if (s.get("model_args") or {}).get("query") == r["question"]),
            "single_keyword_recall": M.mean_or_none([r["single_keyword_hit"] for r in out_rows]),
            "agent_keyword_recall": M.mean_or_none([r["agent_keyword_hit"] for r in out_rows]),
            "agent_and_single_both_hit": sum(bool(r["agent_keyword_hit"] and r["single_keyword_hit"])
                                             for r in out_rows),
            "agent_only_hit": agent_only, "single_only_hit": single_only,
            "agent_vs_single_mcnemar_p": mcnemar_p(agent_only, single_only),
            "seconds": round(sum(r["seconds"] for r in out_rows), 1)}


def measure(settings, n: int | None, progress_out: Path | None = None, ids: list[str] | None = None) -> dict:
    """The agent on ``n`` questions with gold sources of ``settings.eval.evalset``, spread evenly over
    the set (all when None), or on the questions ``ids``."""
    index = open_index(settings)
    out_rows = []
    try:
        llm = open_llm(settings)
        cache = call_cache(settings, "answer")
        agent_llm = CachedLLM(llm, call_cache(settings, "agent-measure"))
        retriever = open_retriever(settings, index.kb, llm, cache=cache, entry_point="measure_agent_structured")
        qr = question_rows(index, retriever, progress=False)
        gold = [r for r in qr.rows if r["hit"] is not None]
        # n questions spread evenly over the set (its kinds come in blocks), all when n is None
        rows = gold if n is None or n >= len(gold) else [gold[i * len(gold) // n] for i in range(n)]
        if ids:
            unknown = sorted(set(ids) - {r["id"] for r in gold})
            if unknown:
                raise SystemExit(f"{settings.eval.evalset}: no question with gold sources {unknown}")
            rows = [r for r in gold if r["id"] in set(ids)]
        for r in rows:
            t0 = time.perf_counter()
            single = answer_question(llm, r["question"], qr.results[r["id"]].chunks, settings, cache=cache)
            run = run_question(settings, agent_llm, index.kb, retriever, r["question"], r["requester"])
            row = {"id": r["id"], "question": r["question"], "single_answer": single.text,
                   "single_keyword_hit": M.keyword_hit(single.text, r["answer_keywords"]),
                   "agent_answer": run["answer"], "agent_keyword_hit": M.keyword_hit(run["answer"], r["answer_keywords"]),
                   "answer_source": run["answer_source"],
                   **{k: run[k] for k in ("decisions", *COUNTS, "structured")},
                   "steps": [{k: s.get(k) for k in ("step", "tool", "args", "action_source", "note", "structured",
                                                    "schema_valid", "parse_via", "model_tool", "model_args",
                                                    "default_tool", "default_args", "decision_text")}
                             for s in run["steps"]],
                   "seconds": time.perf_counter() - t0}
            out_rows.append(row)
            print(json.dumps({k: row[k] for k in ("id", "decisions", "decisions_schema_valid", "decisions_model",
                                                  "decisions_differ", "single_keyword_hit", "agent_keyword_hit",
                                                  "seconds")}), flush=True)
            if progress_out is not None:
                progress_out.write_text(json.dumps({"rows": out_rows}, indent=1, default=str), encoding="utf-8")
    finally:
        close_index(index)
    summary = {"evalset": str(settings.eval.evalset), "questions_with_gold": len(gold),
               "ids": [r["id"] for r in out_rows], "llm": {"id": llm.id, **describe_structured(agent_llm)},
               "cache": {"replayed": agent_llm.hits, "asked": agent_llm.misses}, **summarize(out_rows)}
    return {"summary": summary, "rows": out_rows}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--set", action="append", default=[], dest="overrides")
    ap.add_argument("--n", type=int, default=4, help="questions (with gold sources, spread evenly) of eval.evalset")
    ap.add_argument("--evalset", action="append", default=[], metavar="NAME[:N|=ID,ID...]",
                    help="evalsets/NAME, N of its questions with gold sources spread evenly (all without :N), or "
                         "the questions named after '='; repeatable, replaces eval.evalset and --n")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    settings = load_settings(None, parse_set(args.overrides))
    out = Path(args.out)
    if not args.evalset:
        res = measure(settings, args.n, out)
        out.write_text(json.dumps(res, indent=1, default=str), encoding="utf-8")
        print(json.dumps(res["summary"]))
        return 0
    result = {"settings": {"llm": settings.llm.name, "max_steps": settings.agent.max_steps,
                           "temperature": settings.llm.temperature}, "evalsets": {}}
    for spec in args.evalset:
        name, _, ids = spec.partition("=")
        name, _, n = name.partition(":")
        s = settings.with_overrides({"eval.evalset": f"evalsets/{name}"})
        result["evalsets"][name] = measure(s, int(n) if n else None, out.with_suffix(f".{name}.partial.json"),
                                           ids=[i for i in ids.split(",") if i] or None)
        out.write_text(json.dumps(result, indent=1, default=str), encoding="utf-8")
        print(name, json.dumps(result["evalsets"][name]["summary"]), flush=True)
    result["overall"] = summarize([r for e in result["evalsets"].values() for r in e["rows"]])
    out.write_text(json.dumps(result, indent=1, default=str), encoding="utf-8")
    print("overall", json.dumps(result["overall"]), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
