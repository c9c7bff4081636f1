"""The agent's own decisions under the action schema, on the first N questions of an evalset (issue 25).

A small-sample companion of ``invoke eval --set eval.mode=agent`` for a machine where the full run
does not fit: the same index, retriever, agent runs (``adiyan.eval.agent_eval.run_question``, tier
member) and keyword scorer, and beside each agent answer the single-shot answer (the answer cache).
Prints each question as it ends; writes decision counts, rates and every step's model / default
action as JSON.

    python scripts/measure_agent_structured.py --n 4 --set eval.evalset=evalsets/adiyan_basic --out a.json
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
from adiyan.generation import answer_question
from adiyan.models.structured import describe_structured


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--set", action="append", default=[], dest="overrides")
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    settings = load_settings(None, parse_set(args.overrides))
    index = open_index(settings)
    out_rows = []
    try:
        llm = open_llm(settings)
        cache = call_cache(settings, "answer")
        retriever = open_retriever(settings, index.kb, llm, cache=cache, entry_point="measure_agent_structured")
        qr = question_rows(index, retriever, progress=False)
        rows = [r for r in qr.rows if r["hit"] is not None][: args.n]
        for r in rows:
            t0 = time.perf_counter()
            single = answer_question(llm, r["question"], qr.results[r["id"]].chunks, settings, cache=cache)
            run = run_question(settings, llm, index.kb, retriever, r["question"], r["requester"])
            row = {"id": r["id"], "question": r["question"], "single_answer": single.text,
                   "single_keyword_hit": M.keyword_hit(single.text, r["answer_keywords"]),
                   "agent_answer": run["answer"], "agent_keyword_hit": M.keyword_hit(run["answer"], r["answer_keywords"]),
                   "answer_source": run["answer_source"],
                   **{k: run[k] for k in ("decisions", "decisions_parsed", "decisions_schema_valid", "decisions_model",
                                          "decisions_differ", "decisions_differ_tool", "structured")},
                   "steps": [{k: s.get(k) for k in ("step", "tool", "args", "action_source", "note", "structured",
                                                    "schema_valid", "parse_via", "model_tool", "model_args",
                                                    "default_tool", "default_args", "decision_text")}
                             for s in run["steps"]],
                   "seconds": time.perf_counter() - t0}
            out_rows.append(row)
            print(json.dumps({k: row[k] for k in ("id", "decisions", "decisions_schema_valid", "decisions_model",
                                                  "decisions_differ", "single_keyword_hit", "agent_keyword_hit",
                                                  "seconds")}), flush=True)
            Path(args.out).write_text(json.dumps({"rows": out_rows}, indent=1, default=str), encoding="utf-8")
    finally:
        close_index(index)
    n_dec = sum(r["decisions"] for r in out_rows)
    summary = {"questions": len(out_rows), "decisions": n_dec, "llm": {"id": llm.id, **describe_structured(llm)},
               **{f"{k}_rate": round(sum(r[k] for r in out_rows) / max(1, n_dec), 4)
                  for k in ("decisions_schema_valid", "decisions_parsed", "decisions_model", "decisions_differ",
                            "decisions_differ_tool")},
               "single_keyword_recall": M.mean_or_none([r["single_keyword_hit"] for r in out_rows]),
               "agent_keyword_recall": M.mean_or_none([r["agent_keyword_hit"] for r in out_rows])}
    Path(args.out).write_text(json.dumps({"summary": summary, "rows": out_rows}, indent=1, default=str),
                              encoding="utf-8")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
