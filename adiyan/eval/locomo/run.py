"""The LoCoMo run behind ``invoke eval --set eval.evalset=../shared/datasets/locomo/locomo8.json``.

Every conversation's turns are stored (mem0 memory, knowledge base) at their session times and
every question is asked at the conversation's end. Per question and path (:mod:`.paths`): the
dialog ids retrieved at k = 5, 10, 25, LoCoMo's evidence recall at each k, nDCG@10 over the
evidence turns (ranked paths). Metrics: group ``locomo`` of metrics.json (overall figures,
``<path>.recall@<k>``, ``<path>.ndcg@10``, ``context.recall`` at the configured memory.top_k) and
the top-level ``locomo`` key (``locomo/<path>/<metric>/<category|all>``, every category).

Answers (``eval.generate``): a seeded sample of ``eval.locomo_answer_per_category`` questions per
category (None: all) answered from the three-part context and the knowledge base's top
``retrieval.kb_top_k`` turns, scored with LoCoMo's F1 (:mod:`.scoring`) and the workbench's
string metrics; with the embedded smollm2 the group is labelled ``wiring`` (it proves the path,
it measures nothing). The LLM judge is not run on LoCoMo (a warning says so).
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

from tqdm.auto import tqdm

from ...cache import call_cache
from ...context import answer as answer_turn
from ...context import assemble
from ...factory import open_embedder, open_llm
from ...retrieval.pipeline import UnsupportedSetting
from ... import metrics as M
from ..ragas_metrics import score_non_llm, summarize
from ..record import RunRecord
from ..regression import not_applicable_lines, record_fields, run_cases
from ..reliability import warning
from ..harness import refuse_repeats
from . import paths as P
from .data import CATEGORIES, LocomoSet, load_locomo
from .report import add_section
from .scoring import answer_score, evidence_recall, ndcg_at_k

ENTRY_POINT = "invoke eval (LoCoMo)"
ALL = "all"


def refuse(settings) -> None:
    """Settings LoCoMo cannot honour, refused by name."""
    if getattr(settings.eval, "mode", "answer") != "answer":
        raise UnsupportedSetting(f"eval.mode={settings.eval.mode}", ENTRY_POINT,
                                 "LoCoMo questions are asked single-shot at each conversation's end")
    refuse_repeats(settings, ENTRY_POINT)  # eval.repeats: question sets only
    if settings.store.engine == "server":
        raise UnsupportedSetting("store.engine=server", ENTRY_POINT, "LoCoMo's memory and knowledge base are "
                                 "built in local stores under paths.data_dir/locomo, never in a shared server")


def _by_category(rows: list[dict], value) -> dict:
    out = {}
    for name in [ALL] + [CATEGORIES[c] for c in sorted(CATEGORIES)]:
        vals = [value(r) for r in rows if name == ALL or r["category_name"] == name]
        out[name] = M.mean_or_none([v for v in vals if v is not None])
    return out


def evaluate(settings, ls: LocomoSet, embedder, *, paths=P.PATHS, progress: bool = False,
             keep_chunks: set[str] | None = None, answer_cache=None) -> tuple[list[dict], dict]:
    """(one row per question, info: build and search seconds, mem0 searches) for ``paths``.
    ``keep_chunks``: qids whose knowledge-base chunks are kept (``row["_chunks"]``) for answering."""
    refuse(settings)
    info = {"timings": {}, "paths": list(paths)}
    t0 = time.perf_counter()
    ranked: dict[str, dict[str, dict[int, list[str]]]] = {p: {} for p in paths}  # path -> qid -> k -> ids
    if any(p in paths for p in P.REFERENCE_PATHS):
        ref = P.reference_rankings(ls, embedder, progress=progress)
        for p in P.REFERENCE_PATHS:
            if p in paths:
                ranked[p] = {qid: {k: ids[:k] for k in P.KS} for qid, ids in ref[p].items()}
    info["timings"]["reference_s"] = time.perf_counter() - t0
    qs = ls.questions()
    convs = {c.id: c for c in ls.conversations}
    context_rows: dict[str, dict] = {}
    if any(p in paths for p in ("memory_similarity", "memory_recency", "context")):
        memory, folder, built = P.memory_store(settings, ls, embedder, progress=progress)
        info["timings"]["mem0_build_s"] = built
        record = json.loads((folder / "build.json").read_text(encoding="utf-8"))
        info["mem0_build"] = {k: record.get(k) for k in ("memories", "infer", "stored", "consolidation", "build_s")}
        cm = P.CandidateMemory(memory, cache_file=folder / f"candidates-{P.CANDIDATE_DEPTH}.json")
        per_k = {k: settings.with_overrides({"memory.top_k": k}) for k in P.KS}
        histories = {c.id: P.history_of(c) for c in ls.conversations}
        t0 = time.perf_counter()
        try:
            for q in tqdm(qs, desc="memory", unit="q", disable=not progress, leave=False):
                conv = convs[q.conversation]
                for p, rec in (("memory_similarity", False), ("memory_recency", True)):
                    if p in paths:
                        ranked[p][q.qid] = {k: P.dedupe(h.metadata.get("dia_id") for h in cm.search(
                            q.question, user_id=conv.user, k=k, recency=rec, now=conv.end)) for k in P.KS}
                if "context" in paths:
                    ctxs = {k: assemble(s, q.question, memory=cm, user_id=conv.user, history=histories[conv.id],
                                        embedder=embedder, now=conv.end) for k, s in per_k.items()}
                    ranked["context"][q.qid] = {k: _context_ids(c) for k, c in ctxs.items()}
                    ctx = assemble(settings, q.question, memory=cm, user_id=conv.user, history=histories[conv.id],
                                   embedder=embedder, now=conv.end)
                    context_rows[q.qid] = {"ids": _context_ids(ctx), "ctx": ctx}
        finally:
            cm.save()
            memory.close()
        info["timings"]["memory_s"] = time.perf_counter() - t0
        info.update({"mem0_searches": cm.searches, "mem0_search_s": round(cm.search_s, 3), "mem0_store": str(folder),
                     "mem0_search_ms": round(1000 * cm.search_s / cm.searches, 3) if cm.searches else None})
    chunks: dict[str, list] = {}
    if "kb" in paths:
        kb, folder, built = P.knowledge_base(settings, ls, embedder, progress=progress)
        info["timings"]["kb_build_s"] = built
        info["kb_store"] = str(folder)
        t0 = time.perf_counter()
        try:
            retriever = P.kb_retriever(settings, kb, ENTRY_POINT, cache=answer_cache)
            info["kb_retrieval"] = retriever.describe()
            depth = max(P.KS)
            for q in tqdm(qs, desc="knowledge base", unit="q", disable=not progress, leave=False):
                conv = convs[q.conversation]
                res = retriever.retrieve(q.question, conv.user, top_k=depth)
                ids = [P.chunk_dia_id(c) for c in res.chunks]
                ranked["kb"][q.qid] = {k: P.dedupe(ids[:k]) for k in P.KS}
                if keep_chunks and q.qid in keep_chunks:
                    chunks[q.qid] = res.chunks[: settings.retrieval.kb_top_k]
        finally:
            kb.close()
        info["timings"]["kb_s"] = time.perf_counter() - t0
    rows = []
    for q in qs:
        row = {"id": q.qid, "conversation": q.conversation, "category": q.category, "category_name": q.category_name,
               "question": q.question, "gold_answer": q.answer, "evidence": list(q.evidence),
               "adversarial_answer": q.adversarial_answer, "retrieved_ids": {}, "recall": {}, "ndcg@10": {}}
        for p in paths:
            got = ranked[p][q.qid]
            row["retrieved_ids"][p] = got[max(P.KS)]
            row["recall"][p] = {str(k): evidence_recall(q.evidence, got[k]) for k in P.KS}
            if p in P.RANKED_PATHS:
                row["ndcg@10"][p] = ndcg_at_k(q.evidence, got[10], 10)
        if q.qid in context_rows:
            c = context_rows[q.qid]
            row["context_ids"] = c["ids"]
            row["context_recall"] = evidence_recall(q.evidence, c["ids"])
            row["context_facts"] = len(c["ctx"].facts)
            row["context_history"] = len(c["ctx"].history)
            row["_ctx"] = c["ctx"]
        if q.qid in chunks:
            row["_chunks"] = chunks[q.qid]
        rows.append(row)
    return rows, info


def _context_ids(ctx) -> list[str]:
    return P.dedupe([h.metadata.get("dia_id") for h in ctx.facts] + [t.get("dia_id") for t in ctx.history])


def locomo_tables(rows: list[dict], paths) -> dict:
    """``{path: {"recall@k": {category: v}, "ndcg@10": {...}}}`` plus ``context`` at the configured k."""
    out = {}
    for p in paths:
        t = {f"recall@{k}": _by_category(rows, lambda r, p=p, k=k: r["recall"][p][str(k)]) for k in P.KS}
        if p in P.RANKED_PATHS:
            t["ndcg@10"] = _by_category(rows, lambda r, p=p: r["ndcg@10"][p])
        out[p] = t
    if any("context_recall" in r for r in rows):
        out["context_configured"] = {"recall": _by_category(rows, lambda r: r.get("context_recall"))}
    out["questions"] = {name: sum(1 for r in rows if name == ALL or r["category_name"] == name)
                        for name in [ALL] + [CATEGORIES[c] for c in sorted(CATEGORIES)]}
    return out


def overall_metrics(tables: dict, paths) -> dict:
    g = {}
    for p in paths:
        for k in P.KS:
            g[f"{p}.recall@{k}"] = tables[p][f"recall@{k}"][ALL]
        if "ndcg@10" in tables[p]:
            g[f"{p}.ndcg@10"] = tables[p]["ndcg@10"][ALL]
    if "context_configured" in tables:
        g["context.recall"] = tables["context_configured"]["recall"][ALL]
    return g


def answer_sample(ls: LocomoSet, per_category: int | None, seed: int) -> list[str]:
    """The qids answered: ``per_category`` per category, seeded (None: every question)."""
    qs = ls.questions()
    if per_category is None:
        return [q.qid for q in qs]
    rng = random.Random(seed)
    out = []
    for c in sorted(CATEGORIES):
        ids = [q.qid for q in qs if q.category == c]
        out += sorted(rng.sample(ids, min(per_category, len(ids))), key=ids.index)
    return out


def answer_rows(settings, rows: list[dict], sample: list[str], llm, cache, progress: bool = False) -> float:
    """Answer the sampled rows from their context and KB chunks (rows gain answer fields); seconds."""
    t0 = time.perf_counter()
    want = set(sample)
    for r in tqdm([r for r in rows if r["id"] in want], desc="answer", unit="q", disable=not progress, leave=False):
        out = answer_turn(llm, r["_ctx"], r.get("_chunks", []), settings, cache)
        r.update({"answer": out.text, "answer_used": out.used, "abstained": M.abstained(out.text),
                  "locomo_f1": answer_score(out.text, r["gold_answer"], r["category"])})
    return time.perf_counter() - t0


def answer_metrics(settings, rows: list[dict]) -> tuple[dict, dict]:
    """(the ``locomo_answer`` group, the ``ragas`` string metrics over the answered non-adversarial rows)."""
    done = [r for r in rows if "answer" in r]
    g = {"f1": M.mean_or_none([r["locomo_f1"] for r in done]), "answered": len(done),
         "wiring": 1.0 if settings.llm.name == "smollm2" else 0.0}
    for c in sorted(CATEGORIES):
        name = CATEGORIES[c]
        g[f"f1.{name}"] = M.mean_or_none([r["locomo_f1"] for r in done if r["category"] == c])
    g["abstain_rate.adversarial"] = M.mean_or_none([r["abstained"] for r in done if r["category"] == 5])
    g["abstain_rate.answerable"] = M.mean_or_none([r["abstained"] for r in done if r["category"] != 5])
    scored = [r for r in done if r["category"] != 5]
    ragas = {}
    if scored:
        per_row = score_non_llm([{"id": r["id"], "question": r["question"], "answer": r["answer"],
                                  "gold_answer": r["gold_answer"], "retrieved_ids": r.get("context_ids", []),
                                  "reference_ids": r["evidence"]} for r in scored])
        ragas = {name: s["mean"] for name, s in summarize(per_row).items()
                 if not name.startswith("id_based")}
    return g, ragas


def _warnings(settings, wiring: bool) -> list[dict]:
    w = []
    if settings.eval.judge:
        w.append(warning("judge_not_run", "LoCoMo has no LLM-judged metrics (LoCoMo's F1 scores the answers), so "
                         "the judge was not asked; nothing to do, --set eval.judge=null silences this",
                         f"eval.judge={settings.eval.judge}"))
    if wiring:
        w.append(warning("answers_are_wiring", "the embedded SmolLM2 wrote the answers, so locomo_answer and the string "
                         "metrics prove the answer path runs but do not measure answer quality; answer with a "
                         "packaged Qwen2.5-Coder or a model server for figures that do"))
    return w


def run_locomo(settings, *, progress: bool = True, run_id: str | None = None, incidents=None,
               incidents_why: str | None = None) -> Path:
    """Run LoCoMo (``eval.evalset`` a LoCoMo .json), write reports/<run-id>/ and the runs index."""
    refuse(settings)
    t_start = time.perf_counter()
    ls = load_locomo(settings.eval.evalset).select(settings.eval.locomo_conversations)
    if settings.eval.generate and any(q.category not in CATEGORIES for q in ls.questions()):
        raise UnsupportedSetting("eval.generate=true", ENTRY_POINT, "answers are scored with LoCoMo's categories; "
                                 "a LongMemEval file is scored on evidence recall only: set eval.generate=false")
    record = RunRecord.for_settings(settings, run_id)
    embedder = open_embedder(settings, progress=progress)
    answer_cache = call_cache(settings, "answer")
    sample = answer_sample(ls, settings.eval.locomo_answer_per_category, settings.seed) if settings.eval.generate \
        else []
    rows, info = evaluate(settings, ls, embedder, progress=progress, keep_chunks=set(sample), answer_cache=answer_cache)
    timings = dict(info.pop("timings"))
    tables = locomo_tables(rows, P.PATHS)
    groups = {"locomo": {**overall_metrics(tables, P.PATHS), "questions": len(rows), "turns": len(ls.turns()),
                         "conversations": len(ls.conversations), "mem0_search_ms": info.get("mem0_search_ms")}}
    llm = None
    if sample:
        llm = open_llm(settings)
        timings["generate_s"] = answer_rows(settings, rows, sample, llm, answer_cache, progress)
        groups["locomo_answer"], ragas = answer_metrics(settings, rows)
        if ragas:
            groups["ragas"] = ragas
        tables["answer_f1"] = _by_category([r for r in rows if "answer" in r], lambda r: r["locomo_f1"])
    else:
        timings["generate_s"] = 0.0
    if incidents is not None:
        t0 = time.perf_counter()
        groups["incidents"] = incidents(embedder, record.dir)
        timings["incidents_s"] = time.perf_counter() - t0
    # the regression cases, as every job checks them (those for another set or metric listed as n/a, with why)
    regression = run_cases(groups, embedder.id, ls.name,
                           incidents_why="the incidents were not replayed" if incidents_why else None)
    timings["ingest_s"] = timings.get("mem0_build_s", 0.0) + timings.get("kb_build_s", 0.0)
    timings["total_s"] = time.perf_counter() - t_start
    known = {c.id: {t.dia_id for t in c.turns} for c in ls.conversations}
    unmatched = [{"qid": r["id"], "evidence": e} for r in rows for e in r["evidence"] if e not in known[r["conversation"]]]
    out = {
        **record.envelope(settings),
        "models": {"embedder": embedder.describe(), "llm": ({"id": llm.id} if llm else None), "judge": None},
        "dataset": {"name": ls.name, "kind": "locomo", "path": str(ls.path), "hash": ls.content_hash(),
                    "n_conversations": len(ls.conversations), "n_questions": len(rows), "n_turns": len(ls.turns()),
                    "n_chunks": len(ls.turns()), "conversations": [c.id for c in ls.conversations],
                    "evidence_unmatched": unmatched},
        "locomo": tables, "locomo_info": {**info, "ks": list(P.KS), "answered": sample,
                                          "candidate_depth": P.CANDIDATE_DEPTH},
        "engines": {"knowledge_base": {"engine": "edge", "where": info.get("kb_store", "")},  # LoCoMo's own stores
                    "memory": {"engine": "local", "where": info.get("mem0_store", ""), "used": True}, "shared": False},
        "warnings": _warnings(settings, bool(sample) and settings.llm.name == "smollm2"),
        "metrics": groups, **record_fields(regression, incidents_why),
        "timings": {k: round(v, 3) for k, v in timings.items()},
        "cache": {"embeddings": embedder.stats.as_dict(), "answers": answer_cache.stats.as_dict(),
                  "hits": embedder.stats.hits, "misses": embedder.stats.misses},
    }
    # the generic page is written before questions.jsonl: its per-question plots do not apply
    return record.finish(out, [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows],
                         rows_in_report=False, section=lambda run_dir: add_section(run_dir, out, rows))


def summary_lines(run_dir: Path) -> list[str]:
    """The per-category recall table as ``invoke eval`` prints it."""
    m = json.loads((Path(run_dir) / "metrics.json").read_text(encoding="utf-8"))
    t = m["locomo"]
    cats = [ALL] + [CATEGORIES[c] for c in sorted(CATEGORIES)]
    lines = [f"run {m['run_id']}  LoCoMo {m['dataset']['name']} ({m['dataset']['n_conversations']} conversations, "
             f"{m['dataset']['n_questions']} questions, {m['dataset']['n_turns']} turns)  embedder "
             f"{m['models']['embedder']['id']}",
             "  evidence recall@k      " + " ".join(f"{c[:11]:>11}" for c in cats)]
    for p in P.PATHS:
        if p not in t:
            continue
        for key in [f"recall@{k}" for k in P.KS] + (["ndcg@10"] if "ndcg@10" in t[p] else []):
            vals = " ".join(f"{'—' if t[p][key][c] is None else format(t[p][key][c], '.3f'):>11}" for c in cats)
            lines.append(f"  {p + ' ' + key:<22} {vals}")
    if "context_configured" in t:
        lines.append(f"  context (memory.top_k={m['config']['memory']['top_k']}, window "
                     f"{m['config']['conversation']['history_window']}): recall {t['context_configured']['recall'][ALL]:.3f}")
    if "answer_f1" in t:
        a = m["metrics"]["locomo_answer"]
        lines.append(f"  answer F1 ({a['answered']} answered{', WIRING: embedded model' if a['wiring'] else ''}) "
                     + " ".join(f"{c}={'—' if t['answer_f1'][c] is None else format(t['answer_f1'][c], '.3f')}"
                                for c in cats))
    for w in m.get("warnings", []):
        lines.append(f"  WARNING {w['name']}: {w['message']}")
    tm = m["timings"]
    lines.append(f"  time total {tm['total_s']:.1f}s (mem0 build {tm.get('mem0_build_s', 0):.1f}s, kb build "
                 f"{tm.get('kb_build_s', 0):.1f}s, memory {tm.get('memory_s', 0):.1f}s, kb {tm.get('kb_s', 0):.1f}s); "
                 f"mem0 searches {m['locomo_info'].get('mem0_searches')}; embedding cache {m['cache']['hits']} hits / "
                 f"{m['cache']['misses']} misses")
    lines += [f"  REGRESSION {r['id']}: {r['reason']}" for r in m.get("regression") or [] if r["status"] == "fail"]
    lines += not_applicable_lines(m)
    lines.append(f"  report: {Path(run_dir) / 'report.html'}")
    return lines
