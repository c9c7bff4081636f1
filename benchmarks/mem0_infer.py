"""mem0 consolidation (``memory.infer=true``) against a local OpenAI-compatible server (issue 25, item 1).

What mem0 stores when an LLM consolidates (facts instead of the messages verbatim), the recall it
reaches against ``infer=False`` on the same data, and what it costs (calls, seconds). Both through
the product code: :func:`adiyan.experiments.memory.evaluate_memory` on the memory evalset
(``evalsets/memory``: hit@1 / MRR of the expected memory, each stored fact carrying its source
memory's id) and :func:`adiyan.eval.locomo.run.evaluate` (path ``memory_similarity``: evidence
recall@k, each fact carrying its turn's ``dia_id``) on ONE LoCoMo conversation (by default its first three sessions: each
consolidated turn is one LLM call, ~1.5 min each for SmolLM2 on a loaded 2-core machine).

The LLM: mem0's extraction call goes through ``adiyan.memory``'s adapter to
``openai-compatible:URL``, i.e. ``response_format`` json_schema, refused by llama-cpp-python's
server, then ``json_object`` + mem0's schema (a grammar on the server). Without ``--url`` this
starts ``python -m llama_cpp.server`` on a free loopback port serving the packaged
SmolLM2-135M-Instruct with a 12,288-token window: mem0 2.2's extraction prompt alone is 8,530
SmolLM2 tokens and SmolLM2 was trained on 8,192, so the window is stretched by YaRN (factor 1.5,
``yarn_orig_ctx`` 8192). A 135M model proves the wiring, not the method: read the recall as
"what this model's facts give", never as mem0's.

Replies are cached by prompt (``<cache_dir>/calls.sqlite``, namespace ``mem0``) and the stores are
built once per (data, embedder, LLM) under ``--data-dir``; a re-run with the same model and data
replays them without a call (mem0's prompt carries the statement's date, not today's).

    python benchmarks/mem0_infer.py --out reports/benchmarks/mem0_infer.json
    python benchmarks/mem0_infer.py --url http://127.0.0.1:8000/v1 --model NAME --context-size 32768 --out ...
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import machine, write_json  # noqa: E402

SERVER_CTX = 12_288
SERVER_ALIAS = "smollm2"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(workdir: Path, threads: int) -> tuple[subprocess.Popen, str, dict]:
    """llama-cpp-python's OpenAI-compatible server with SmolLM2 at SERVER_CTX tokens (YaRN x1.5)."""
    from adiyan.models import assets

    port = _free_port()
    model = {"model": str(assets.smollm2_path()), "model_alias": SERVER_ALIAS, "n_ctx": SERVER_CTX,
             "rope_scaling_type": 2, "rope_freq_scale": 8192 / SERVER_CTX, "yarn_orig_ctx": 8192,
             "n_threads": threads, "n_threads_batch": threads, "seed": 0, "verbose": False}
    cfg = {"host": "127.0.0.1", "port": port, "models": [model]}
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "server.json").write_text(json.dumps(cfg, indent=1))
    log = (workdir / "server.log").open("wb")
    env = {k: v for k, v in os.environ.items() if k.lower() not in {"host", "port", "config_file", "model"}}
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--config_file", str(workdir / "server.json")],
                            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    log.close()
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llama_cpp.server exited at start:\n{(workdir / 'server.log').read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(base + "/v1/models", timeout=5):
                return proc, base + "/v1", model
        except OSError:
            time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGTERM)
    raise RuntimeError("llama_cpp.server did not answer within 300 s")


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def what_is_stored(settings, es, embedder) -> dict:
    """The consolidated memory evalset store: facts per source memory, how many are the source's
    own text (verbatim), and every fact beside its source."""
    from adiyan.experiments.memory import memory_store

    mem = memory_store(settings, es, embedder)
    src = {m["id"]: m for m in es.memories}
    rows = [{"eval_id": r.metadata.get("eval_id"), "fact": r.text, "source": src.get(r.metadata.get("eval_id"), {}).get("text")}
            for u in sorted({m["user"] for m in es.memories}) for r in mem.all(u)]
    verbatim = sum(r["fact"].strip() == (r["source"] or "").strip() for r in rows)
    per_source = {}
    for r in rows:
        per_source[r["eval_id"]] = per_source.get(r["eval_id"], 0) + 1
    return {"facts": len(rows), "verbatim": verbatim, "sources_with_a_fact": len(per_source),
            "sources": len(es.memories), "rows": rows}


def memory_evalset_part(base, embedder) -> dict:
    from adiyan.experiments.memory import evaluate_memory, memory_evalset

    es = memory_evalset()
    out = {}
    for infer in (False, True):
        s = base.with_overrides({"memory.infer": infer})
        t0 = time.perf_counter()
        res = evaluate_memory(s, evalset=es)
        out["infer" if infer else "verbatim"] = {"metrics": res.metrics, "info": res.info,
                                                 "seconds": round(time.perf_counter() - t0, 1),
                                                 "rows": res.per_question}
    out["stored"] = what_is_stored(base.with_overrides({"memory.infer": True}), es, embedder)
    return out


def first_sessions(ls, n: int | None):
    """The conversation cut to its first ``n`` sessions, with the questions whose evidence lies
    wholly in them (a sample: every consolidated turn is one LLM call); all when None."""
    import dataclasses
    import hashlib

    if n is None:
        return ls
    convs = []
    for c in ls.conversations:
        turns = [t for t in c.turns if t.session <= n]
        ids = {t.dia_id for t in turns}
        qs = [q for q in c.questions if q.evidence and all(e in ids for e in q.evidence)]
        convs.append(dataclasses.replace(c, turns=turns, questions=qs,
                                         session_times={k: v for k, v in c.session_times.items() if k <= n}))
    sha = hashlib.sha256(f"{ls.sha256}#first-{n}-sessions".encode()).hexdigest()
    return dataclasses.replace(ls, conversations=convs, sha256=sha)


def locomo_part(base, embedder, conversation: str, data: Path, sessions: int | None) -> dict:
    from adiyan.eval.locomo.data import load_locomo
    from adiyan.eval.locomo.run import evaluate
    from adiyan.eval.locomo.paths import memory_store

    full = load_locomo(data).select([conversation])
    ls = first_sessions(full, sessions)
    out = {"conversation": conversation, "sessions": sessions, "turns": len(ls.turns()),
           "questions": len(ls.questions()), "conversation_turns": len(full.turns()),
           "conversation_questions": len(full.questions())}
    for infer in (False, True):
        s = base.with_overrides({"memory.infer": infer, "eval.locomo_conversations": [conversation]})
        t0 = time.perf_counter()
        rows, info = evaluate(s, ls, embedder, paths=("memory_similarity",))
        recall = {k: round(sum(r["recall"]["memory_similarity"][k] for r in rows) / len(rows), 6)
                  for k in ("5", "10", "25")}
        by_cat = {}
        for r in rows:
            by_cat.setdefault(r["category_name"], []).append(r["recall"]["memory_similarity"]["10"])
        out["infer" if infer else "verbatim"] = {
            "recall": recall, "recall@10_by_category": {c: round(sum(v) / len(v), 6) for c, v in sorted(by_cat.items())},
            "build": info.get("mem0_build"), "seconds": round(time.perf_counter() - t0, 1)}
    # a sample of what the consolidated store holds, beside the turn it came from
    s = base.with_overrides({"memory.infer": True, "eval.locomo_conversations": [conversation]})
    mem, _folder, _ = memory_store(s, ls, embedder)
    try:
        turns = {t.dia_id: t.text for t in ls.turns()}
        facts = mem.all(ls.conversations[0].user)
        out["stored_sample"] = [{"dia_id": f.metadata.get("dia_id"), "fact": f.text,
                                 "turn": turns.get(f.metadata.get("dia_id"))} for f in facts[:40]]
        out["stored_verbatim"] = sum(f.text.strip() == (turns.get(f.metadata.get("dia_id")) or "").strip()
                                     for f in facts)
        out["turns_with_a_fact"] = len({f.metadata.get("dia_id") for f in facts})
    finally:
        mem.close()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", help="an OpenAI-compatible server (default: start llama_cpp.server with SmolLM2)")
    ap.add_argument("--model", default=SERVER_ALIAS)
    ap.add_argument("--context-size", type=int, default=SERVER_CTX)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--conversation", default="conv-30", help="the LoCoMo conversation (conv-30: the shortest, "
                    "369 turns, 105 questions)")
    ap.add_argument("--sessions", type=int, default=3, help="its first N sessions and the questions whose evidence "
                    "lies in them (conv-30, 3: 58 turns, 33 questions); 0 = the whole conversation")
    ap.add_argument("--locomo", default=None, help="LoCoMo file (default <datasets>/locomo/locomo8.json)")
    ap.add_argument("--skip-locomo", action="store_true")
    ap.add_argument("--data-dir", default=str(ROOT / "data" / "bench_mem0_infer"))
    ap.add_argument("--set", action="append", default=[], dest="overrides")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    os.environ.setdefault("MEM0_TELEMETRY", "False")
    from adiyan.config import load_settings, parse_set
    from adiyan.factory import open_embedder
    from adiyan.models import load_llm
    from adiyan.models.structured import describe_structured

    proc, server = None, None
    t_all = time.perf_counter()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the server we started (finally below)
    try:
        if a.url:
            url = a.url
        else:
            proc, url, server = start_server(Path(tempfile.mkdtemp(prefix="mem0-infer-server-")), a.threads)
        base = load_settings(None, parse_set([
            f"llm.name=openai-compatible:{url}", f"llm.model={a.model}", f"llm.context_size={a.context_size}",
            f"paths.data_dir={a.data_dir}", "llm.timeout_s=1800", *a.overrides]))
        embedder = open_embedder(base)
        result = {"benchmark": "mem0_infer", "machine": machine(), "date": time.strftime("%Y-%m-%d"),
                  "llm": {"name": "openai-compatible", "model": a.model, "context_size": a.context_size,
                          "server": server and {k: v for k, v in server.items() if k != "model"},
                          "gguf": server and Path(server["model"]).name},
                  "embedder": embedder.id}
        result["memory_evalset"] = memory_evalset_part(base, embedder)
        write_json(result, a.out)
        if not a.skip_locomo:
            data = Path(a.locomo) if a.locomo else Path(base.paths.datasets_dir) / "locomo" / "locomo8.json"
            result["locomo"] = locomo_part(base, embedder, a.conversation, data, a.sessions or None)
        llm = load_llm(base.llm.name, url=base.llm.url, model=base.llm.model, context_size=base.llm.context_size,
                       temperature=base.llm.temperature, max_tokens=base.llm.max_tokens, seed=base.llm.seed,
                       timeout_s=base.llm.timeout_s, structured=base.llm.structured)
        result["llm"].update({"id": llm.id, **describe_structured(llm), "format_refusals": llm.format_refusals})
        result["seconds"] = round(time.perf_counter() - t_all, 1)
        write_json(result, a.out)
    finally:
        if proc is not None:
            stop_server(proc)
    me = result["memory_evalset"]
    print(json.dumps({"memory_evalset": {k: me[k]["metrics"] for k in ("verbatim", "infer")},
                      "consolidation": me["infer"]["info"].get("consolidation"),
                      "stored": {k: v for k, v in me["stored"].items() if k != "rows"},
                      "locomo": {k: v for k, v in result.get("locomo", {}).items() if k != "stored_sample"}},
                     indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
