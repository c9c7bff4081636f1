"""The conversation evaluation: ``invoke eval --set eval.evalset=evalsets/conversations``.

Each conversation of the set (:func:`adiyan.eval.evalset.load_conversation_set`) is replayed turn
by turn at its turns' times against the documents' shared index and a fresh mem0 memory (the
facts each turn states are added after it, dated; one memory user per conversation). Per turn:

- retrieval **without** the rewrite (the message as written) and **with** it (the configured
  ``retrieval.query_transform`` when it is ``history_rules`` / ``history_llm``, else
  ``history_rules``), both through the pipeline with the last ``conversation.history_window``
  turns as history: hit and reciprocal rank at k;
- the three-part context (:func:`adiyan.context.assemble`): which facts reached it — memory
  precision (of the facts in a scored turn's context, the share it should recall) and recall (of
  the facts it should recall, the share there) — and the stale-fact rate (turns whose context
  holds a fact that a later one corrected); the history turns kept and dropped with their relevance;
- the answer (``eval.generate``) from the rewritten retrieval and the three parts: answer
  keyword recall.

It writes its run through :class:`~adiyan.eval.record.RunRecord`, as ``invoke eval`` does
(metrics.json, questions.jsonl with one row per turn, report.html with a per-turn table, the runs index).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from jinja2 import Environment
from markupsafe import Markup
from tqdm.auto import tqdm

from ..cache import call_cache
from ..context import answer as answer_turn
from ..context import assemble, open_conversation_retriever
from ..factory import describe_engines, open_llm, open_memory
from ..generation import effective_budget
from ..report import fmt
from ..retrieval.pipeline import UnsupportedSetting
from ..retrieval.transform import HISTORY_MODES
from .. import metrics as M
from .evalset import ConversationSet, load_conversation_set
from .regression import record_fields, run_cases
from .harness import EVAL_REQUESTER, close_index, open_index, refuse_repeats
from .record import RunRecord
from .reliability import warning
from .scorers import CONVERSATION_SCORERS, Rows, score

ENTRY_POINT = "invoke eval (conversations)"


def rewrite_mode(settings) -> str:
    """The history transform the "with rewrite" side uses: the configured one, else the rules."""
    qt = settings.retrieval.query_transform
    return qt if qt in HISTORY_MODES else "history_rules"


def _raw_settings(settings):
    """The "as said" side: no history transform (not even conversation.rewrite_followups' rules)."""
    over = {"conversation.rewrite_followups": False}
    if settings.retrieval.query_transform in HISTORY_MODES:
        over["retrieval.query_transform"] = "none"
    return settings.with_overrides(over)


def window_messages(history, window: int) -> list[dict]:
    """The last ``window`` turns as the retrieval sees them (a window of 0: no history, no rewrite)."""
    return [{"role": h["role"], "content": h["content"]} for h in (list(history)[-window:] if window > 0 else [])]


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def replay(settings, cs: ConversationSet, kb, embedder, *, llm=None, rewrite_llm=None, answer_cache=None,
           memory=None, progress: bool = False) -> list[dict]:
    """One row per turn of every conversation (see the module docstring); ``memory`` must be empty.
    ``llm`` answers (None: no answers); ``rewrite_llm`` writes history_llm rewrites (default ``llm``)."""
    rewrite_llm = rewrite_llm if rewrite_llm is not None else llm
    k = settings.retrieval.kb_top_k
    rw_settings = settings.with_overrides({"retrieval.query_transform": rewrite_mode(settings)})
    raw = open_conversation_retriever(_raw_settings(settings), kb, rewrite_llm, entry_point=ENTRY_POINT,
                                      cache=answer_cache)
    rw = open_conversation_retriever(rw_settings, kb, rewrite_llm, entry_point=ENTRY_POINT, cache=answer_cache)
    rows = []
    bar = tqdm(total=len(cs.turns()), desc="turns", unit="turn", disable=not progress, leave=False)
    for conv in cs.conversations:
        history: list[dict] = []
        mem_user = f"{conv.user}--{conv.id}"
        for i, t in enumerate(conv.turns, 1):
            t0 = time.perf_counter()
            msgs = window_messages(history, settings.conversation.history_window)
            r0 = r1 = None
            if t.gold_sources:
                r0 = raw.retrieve(t.message, EVAL_REQUESTER, history=msgs)
                r1 = rw.retrieve(t.message, EVAL_REQUESTER, history=msgs)
            ctx = assemble(settings, t.message, memory=memory, user_id=mem_user, history=history, embedder=embedder,
                           now=t.at, rewritten=r1.queries[0] if r1 is not None and r1.queries else None)
            scored = t.kind != "statement"
            row = {"id": f"{conv.id}.t{i}", "conversation": conv.id, "turn": i, "kind": t.kind, "at": t.at,
                   "question": t.message, "standalone": t.standalone, "requester": EVAL_REQUESTER,
                   "gold_sources": t.gold_sources, "gold_answer": t.standalone or "",
                   "answer_keywords": t.answer_keywords, "recall_expected": t.recall, "stale_expected": t.stale,
                   "facts": [{"fact_id": h.metadata.get("fact_id"), "kind": h.kind, "text": h.text,
                              "score": round(h.score, 6), "weight": round(h.weight, 6)} for h in ctx.facts],
                   "facts_dropped": ctx.dropped_facts, "history": ctx.history_scores,
                   "history_kept": sum(s["kept"] for s in ctx.history_scores),
                   "history_dropped": sum(not s["kept"] for s in ctx.history_scores)}
            if r1 is not None:
                s0, s1 = [c.source for c in r0.chunks], [c.source for c in r1.chunks]
                row.update({"rewritten": r1.queries[0] if r1.queries else t.message,
                            "transform_failed": r1.transform_failed,
                            "hit_raw": M.hit(s0, t.gold_sources), "rr_raw": M.reciprocal_rank(s0, t.gold_sources),
                            "hit": M.hit(s1, t.gold_sources), "reciprocal_rank": M.reciprocal_rank(s1, t.gold_sources),
                            "retrieved": [c.as_dict() for c in r1.chunks], "retrieved_raw": s0})
                chunks = r1.chunks
            else:
                row.update({"hit": None, "hit_raw": None, "reciprocal_rank": None, "rr_raw": None, "retrieved": []})
                chunks = []
            ids = set(ctx.fact_ids())
            recall = set(t.recall)
            row["memory_precision"] = _ratio(len(ids & recall), len(ids)) if scored and ids else None
            row["memory_recall"] = _ratio(len(ids & recall), len(recall)) if recall else None
            row["stale_in_context"] = bool(ids & set(t.stale)) if t.stale else None
            if llm is not None and scored and t.answer_keywords:
                t1 = time.perf_counter()
                out = answer_turn(llm, ctx, chunks, settings, answer_cache)
                row.update({"generate_s": round(time.perf_counter() - t1, 4), "answer": out.text, "answer_used": out.used,
                            "keyword_hit": M.keyword_hit(out.text, t.answer_keywords),
                            "abstained": M.abstained(out.text)})
            row["latency_s"] = round(time.perf_counter() - t0, 4)
            rows.append(row)
            if memory is not None:
                for f in t.remember:
                    memory.add(f["text"], user_id=mem_user, kind=f["kind"], created_at=t.at,
                               metadata={"fact_id": f["id"], "conversation": conv.id})
            history.append({"role": "user", "content": t.message, "at": t.at})
            if t.reply:
                history.append({"role": "assistant", "content": t.reply, "at": t.at})
            bar.update()
    bar.close()
    return rows


def open_scratch_memory(settings, embedder):
    """A fresh, empty mem0 memory in a temporary folder (never the configured store): the replay's
    facts must not land in a real user's memory. Returns (memory, folder to delete)."""
    tmp = Path(tempfile.mkdtemp(prefix="adiyan-conv-mem-"))
    local = settings.with_overrides({"paths.data_dir": str(tmp), "store.engine": "edge"})
    return open_memory(local, embedder, None, infer=False), tmp


_SECTION = Environment(autoescape=True).from_string("""<h2 id="conversations">Conversation turns ({{ rows|length }})</h2>
<p>Per turn: retrieval hit without / with the history rewrite ({{ mode }}), the facts that reached the context
(<span class="hit">expected</span>, <span class="miss">stale</span>), history turns kept of those in the window.</p>
<table><tr><th>turn</th><th>kind</th><th>message</th><th>rewritten</th><th>hit raw</th><th>hit rewrite</th><th>facts in context</th>
<th>mem P</th><th>mem R</th><th>stale</th><th>history kept</th><th>keyword hit</th><th>answer</th></tr>
{% for r in rows %}<tr id="turn-{{ r.id }}"><td>{{ r.id }}</td><td>{{ r.kind }}</td><td>{{ r.question }}</td>
<td>{{ r.rewritten if r.rewritten and r.rewritten != r.question else "" }}</td><td>{{ fmt(r.hit_raw) }}</td><td>{{ fmt(r.hit) }}</td>
<td>{% for f in r.facts %}<span class="{{ 'hit' if f.fact_id in r.recall_expected else ('miss' if f.fact_id in r.stale_expected else '') }}">{{ f.fact_id }}</span> {% endfor %}</td>
<td class="num">{{ fmt(r.memory_precision) }}</td><td class="num">{{ fmt(r.memory_recall) }}</td><td>{{ fmt(r.stale_in_context) }}</td>
<td class="num">{{ r.history_kept }}/{{ r.history_kept + r.history_dropped }}</td><td>{{ fmt(r.keyword_hit) }}</td><td>{{ r.answer or "" }}</td></tr>
{% endfor %}</table>
""")


def _add_section(run_dir: Path, rows: list[dict], mode: str) -> None:
    path = run_dir / "report.html"
    html = path.read_text(encoding="utf-8")
    section = _SECTION.render(rows=rows, mode=mode, fmt=fmt)
    marker = "<h2>Timings and cache</h2>"
    html = html.replace(marker, Markup(section) + marker, 1) if marker in html else html.replace(
        "</body>", section + "</body>")
    path.write_text(html, encoding="utf-8")


def run_conversations(settings, *, progress: bool = True, run_id: str | None = None, incidents=None,
                      incidents_why: str | None = None) -> Path:
    """Replay the conversation evalset ``eval.evalset``, score every turn, write the run's files.

    ``incidents(embedder, run_dir)`` (the runner's replay, when ``eval.incidents``) adds its group.
    ``eval.mode=agent`` is refused by name; the LLM judge is not run on conversations (a warning says so).
    """
    if getattr(settings.eval, "mode", "answer") != "answer":
        raise UnsupportedSetting(f"eval.mode={settings.eval.mode}", ENTRY_POINT,
                                 "conversations are replayed single-shot with the three-part context")
    refuse_repeats(settings, ENTRY_POINT)  # eval.repeats: question sets only
    t_start = time.perf_counter()
    cs = load_conversation_set(settings.eval.evalset)
    record = RunRecord.for_settings(settings, run_id)
    t0 = time.perf_counter()
    index = open_index(settings, str(cs.documents.root), progress=progress)  # shared with the documents' evalset
    kb, embedder = index.kb, index.kb.embedder
    timings = {"ingest_s": time.perf_counter() - t0}
    answer_cache = call_cache(settings, "answer")
    need_llm = settings.eval.generate or settings.retrieval.query_transform == "history_llm"
    llm = open_llm(settings) if need_llm else None
    memory, scratch = open_scratch_memory(settings, embedder)
    try:
        t0 = time.perf_counter()
        rows = replay(settings, cs, kb, embedder, llm=llm if settings.eval.generate else None, rewrite_llm=llm,
                      answer_cache=answer_cache, memory=memory, progress=progress)
        timings["replay_s"] = time.perf_counter() - t0
        timings["generate_s"] = sum(r.get("generate_s", 0.0) for r in rows)
        n_chunks = kb.count_chunks()
    finally:
        memory.close()
        shutil.rmtree(scratch, ignore_errors=True)
        close_index(index)
    groups = score(CONVERSATION_SCORERS, Rows(rows), settings.retrieval.kb_top_k)  # conversation, by_kind
    if incidents is not None:
        t0 = time.perf_counter()
        groups["incidents"] = incidents(embedder, record.dir)
        timings["incidents_s"] = time.perf_counter() - t0
    # the regression cases, as every job checks them (those for another set or metric listed as n/a, with why)
    regression = run_cases(groups, embedder.id, cs.name,
                           incidents_why="the incidents were not replayed" if incidents_why else None)
    warnings = [warning("judge_not_run", "a conversation set has no LLM-judged metrics (keyword recall scores the "
                        "answers), so the judge was not asked; nothing to do, --set eval.judge=null silences this",
                        f"eval.judge={settings.eval.judge}")] if settings.eval.judge else []
    timings["total_s"] = time.perf_counter() - t_start
    out = {
        **record.envelope(settings),
        "models": {"embedder": embedder.describe(), "llm": ({"id": llm.id} if llm else None), "judge": None},
        "dataset": {"name": cs.name, "kind": "conversations", "path": str(cs.root), "hash": cs.content_hash(),
                    "documents": str(cs.documents.root), "n_conversations": len(cs.conversations),
                    "n_questions": len(rows), "n_chunks": n_chunks, "index_dir": str(index.data_dir),
                    "index_reused": index.reused},
        "retrieval": {"rewrite": rewrite_mode(settings), "kb_top_k": settings.retrieval.kb_top_k,
                      "mode": settings.retrieval.mode},
        "generation": {"context_budget": effective_budget(settings, llm) if llm is not None else None},
        "engines": describe_engines(settings, kb=kb, memory=memory),  # the KB's and mem0's Qdrant (issue 14)
        "warnings": warnings, "metrics": groups, **record_fields(regression, incidents_why),
        "timings": {k: round(v, 3) for k, v in timings.items()},
        "cache": {"embeddings": embedder.stats.as_dict(), "answers": answer_cache.stats.as_dict(),
                  "hits": embedder.stats.hits, "misses": embedder.stats.misses},
    }
    return record.finish(out, rows, section=lambda run_dir: _add_section(run_dir, rows, rewrite_mode(settings)))

