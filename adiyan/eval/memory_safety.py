"""Memory safety under many users (issue 43.2): the run behind
``invoke eval --set eval.evalset=evalsets/memory_safety`` (a folder whose manifest says
``kind: memory-safety``; docs/memory_safety.md).

LoCoMo, LongMemEval and the memory vendors' evaluations test one user at a time; the seed's second
incident was a leak between users of one collection, and the conversation memory shares one
collection too. This run loads a LoCoMo file's conversations as different users into one memory
(each session one conversation of its user, its turns also written as that user's conversation
files) and measures three things, each on every memory read path the package has:

* **isolation**: every user asks every path a seeded sample of the questions of conversations it does
  not own; a returned memory (or history turn) that another user owns is a leak.
* **updates**: corrections in the shape of incident 3 are injected into the conversations (a fact
  stated, then changed weeks later, some negated: "crimson now, not teal"); measured at the
  conversation's end: how often the stale memory ranks above its correction, how often the
  correction is retrieved at all.
* **deletion**: single memories of every user, one conversation and one whole user are deleted through
  :class:`adiyan.memory.Memory`; measured: how often a deleted memory is still returned by a read
  path asked by its owner with its own text and its questions, still held by the raw store, mem0's
  history and message tables, the embedding cache or a lexical index rebuilt later; and whether any
  other user's memories moved. A deletion attempted by another user must be refused.

The store is built in a fresh folder under ``paths.data_dir/memory_safety/`` for every run (about 15
s on cached embeddings) and removed afterwards. Nothing calls an LLM; the figures are deterministic.
"""

from __future__ import annotations

import random
import shutil
import sqlite3
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from tqdm.auto import tqdm

from ..agent.tools import build_tools
from ..context import Conversation as ChatConversation
from ..context import assemble, forget_user
from ..factory import open_embedder
from ..memory import Memory, mem0_session_scope
from ..retrieval.pipeline import UnsupportedSetting
from ..retrieval.recency import parse_timestamp, to_utc_iso
from .locomo.data import Conversation, LocomoSet, load_locomo
from .locomo.paths import CandidateMemory
from .memory_safety_report import add_section
from .memory_safety_set import KIND, SafetySet, check_conversations, is_memory_safety_set, load_safety_set  # noqa: F401 - re-exported
from .record import RunRecord
from .regression import record_fields, run_cases

ENTRY_POINT = "invoke eval (memory safety)"
PATHS = ("search", "search_without_time", "lexical_index", "list", "three_part_context", "agent_memory_tool",
         "ask_conversation", "locomo_candidate_replay")
PROBES_PER_USER = 120  # deleted memories probed per user (every one when fewer)
STORES = ("raw_store", "mem0_history", "mem0_messages", "embedding_cache", "lexical_index_rebuilt",
          "candidate_cache")


# ------------------------------------------------------------------------------- the dataset kind


def session_of(dia_id: str) -> int:
    return int(dia_id[1:].split(":")[0])


def conversation_id(conv: Conversation, session: int) -> str:
    """Each LoCoMo session is one conversation of its user (as ``adiyan ask --conversation`` keeps them)."""
    return f"{conv.id}-s{session}"


# ------------------------------------------------------------------------------- the store


class Store:
    """One memory holding every conversation of the set as its own user, in a fresh folder; the owner of
    every memory id and every text each user said, for counting leaks."""

    def __init__(self, settings, ls: LocomoSet, folder: Path, progress: bool = False):
        # its own data and caches: a deletion's copies are counted in this run's embedding cache, which no
        # other process writes (another job embedding the same public turns would put rows back)
        self.settings = settings.with_overrides({"paths.data_dir": str(folder / "data"), "store.engine": "edge",
                                                 "memory.infer": False, "paths.cache_dir": str(folder / "cache")})
        self.ls, self.folder = ls, folder
        self.embedder = open_embedder(self.settings, progress=progress)
        self.mem = Memory.from_settings(self.settings, embedder=self.embedder)
        self.owner: dict[str, str] = {}  # memory id -> user
        self.texts: dict[str, set[str]] = {}  # user -> every text it said
        self.ids_of_dia: dict[tuple[str, str], str] = {}  # (user, dia_id) -> memory id
        for conv in tqdm(ls.conversations, desc="memory safety: store", unit="user", disable=not progress,
                         leave=False):
            self.texts[conv.user] = set()
            by_session: dict[int, list] = {}
            for t in conv.turns:
                by_session.setdefault(session_of(t.dia_id), []).append(t)
            for n, turns in sorted(by_session.items()):
                chat = ChatConversation(self.settings, conversation_id(conv, n), conv.user, memory=None)
                for t in turns:
                    mid = self.add(conv.user, t.text, t.at, {"dia_id": t.dia_id,
                                                           "conversation": conversation_id(conv, n)})
                    self.ids_of_dia[(conv.user, t.dia_id)] = mid
                    chat.add_turn("user", t.text, at=t.at, remember=False)

    def add(self, user: str, text: str, at, metadata: dict) -> str:
        mid = self.mem.add(text, user_id=user, created_at=at, role="user", metadata=metadata)
        self.owner[mid] = user
        self.texts.setdefault(user, set()).add(text)
        return mid

    def close(self) -> None:
        self.mem.close()


def read_paths(store: Store, asker: str, now) -> dict:
    """Every memory read path, each as ``question -> [(memory id or None, text)]`` returned to ``asker``."""
    mem, s = store.mem, store.settings
    tool = build_tools(None, mem, asker, retriever=None, memory_k=10)["search_memory"]
    cm = CandidateMemory(mem, depth=30)

    def lexical(q):
        scores, recs = mem.lexical_scores(q, asker)
        return [(i, recs[i].text) for i in sorted(scores, key=lambda i: (-scores[i], i))[:10]]

    def ask_conversation(q, conv_id):
        # the asker opens a conversation of that id (one another user has): its own, empty or not
        chat = ChatConversation.load(s, conv_id, asker, memory=mem, embedder=store.embedder)
        ctx = chat.context_for(q, now=now)
        return ([(h.id, h.text) for h in ctx.facts] + [(None, t["content"]) for t in ctx.history]
                + [(None, d["text"]) for d in ctx.dropped_facts])

    def context(q):
        ctx = assemble(s, q, memory=mem, user_id=asker, now=now)
        return [(h.id, h.text) for h in ctx.facts] + [(None, d["text"]) for d in ctx.dropped_facts]

    return {
        "search": lambda q, c: [(h.id, h.text) for h in mem.search(q, user_id=asker, k=10, now=now)],
        "search_without_time": lambda q, c: [(h.id, h.text) for h in mem.search(q, user_id=asker, k=10,
                                                                                recency=False, now=now)],
        "lexical_index": lambda q, c: lexical(q),
        "list": lambda q, c: [(r.id, r.text) for r in mem.all(asker)],
        "three_part_context": lambda q, c: context(q),
        "agent_memory_tool": lambda q, c: [(h.id, h.text) for h in tool.fn(q)],
        "ask_conversation": ask_conversation,
        "locomo_candidate_replay": lambda q, c: [(h.id, h.text) for h in cm.search(q, user_id=asker, k=10,
                                                                                   now=now)],
    }


def _is_leak(store: Store, asker: str, mid: str | None, text: str) -> bool:
    if mid is not None:
        return store.owner.get(mid) != asker  # an id nobody here owns counts too
    # a history turn or a dropped fact (no id): another user's words that the asker never said
    return text not in store.texts.get(asker, set()) and any(text in said for u, said in store.texts.items()
                                                             if u != asker)


# ------------------------------------------------------------------------------- isolation


def isolation(store: Store, ss: SafetySet, seed: int, progress: bool = False) -> tuple[dict, list[dict]]:
    convs = store.ls.conversations
    rng = random.Random(seed)
    plan = []  # (asker conv, victim conv, question)
    for asker in convs:
        others = [(v, q) for v in convs if v.id != asker.id for q in v.questions]
        take = others if ss.questions_per_user is None else rng.sample(others, min(ss.questions_per_user, len(others)))
        plan += [(asker, v, q) for v, q in take]
    leaks = dict.fromkeys(PATHS, 0)
    returned = dict.fromkeys(PATHS, 0)
    examples: list[dict] = []
    listed: set[str] = set()
    paths_of = {}
    for asker, victim, q in tqdm(plan, desc="memory safety: isolation", unit="question", disable=not progress,
                                 leave=False):
        paths = paths_of.setdefault(asker.user, read_paths(store, asker.user, asker.end))
        conv_id = conversation_id(victim, session_of(q.evidence[0]) if q.evidence and _dia_ok(q.evidence[0])
                                  else 1)
        for name, fn in paths.items():
            if name == "list" and asker.user in listed:
                continue  # the same for every question: counted once per asker
            got = fn(q.question, conv_id)
            returned[name] += len(got)
            bad = [(mid, t) for mid, t in got if _is_leak(store, asker.user, mid, t)]
            leaks[name] += len(bad)
            if bad and len(examples) < 20:
                examples.append({"path": name, "asker": asker.user, "question": q.question,
                                 "owner": store.owner.get(bad[0][0]) if bad[0][0] else "(history)",
                                 "text": bad[0][1]})
        listed.add(asker.user)
    users = len(convs)
    return {"users": users, "cross_user_questions": len(plan), "asked_per_path": len(plan),
            "list_calls": len(listed), "leaks": leaks, "leaks_total": sum(leaks.values()),
            "returned": returned}, examples


def _dia_ok(d: str) -> bool:
    try:
        session_of(d)
        return True
    except (ValueError, IndexError):
        return False


# ------------------------------------------------------------------------------- updates


def inject_corrections(store: Store, ss: SafetySet) -> list[dict]:
    """Each correction goes to one user in turn (the first speaker's name), stale and correction at
    ``stale_days`` / ``correction_days`` before that conversation's end; returns their ids."""
    out = []
    convs = store.ls.conversations
    for i, c in enumerate(ss.corrections):
        conv = convs[i % len(convs)]
        name = conv.speakers[0]
        end = parse_timestamp(conv.end)
        cid = conversation_id(conv, 10_000 + i)  # a conversation of its own
        stale = store.add(conv.user, c.stale_text.format(name=name), to_utc_iso(end - timedelta(days=ss.stale_days)),
                          {"conversation": cid, "injected": c.id, "role_in_update": "stale"})
        corr = store.add(conv.user, c.correction_text.format(name=name),
                         to_utc_iso(end - timedelta(days=ss.correction_days)),
                         {"conversation": cid, "injected": c.id, "role_in_update": "correction"})
        out.append({"id": c.id, "user": conv.user, "question": c.question.format(name=name), "stale_id": stale,
                    "correction_id": corr, "now": conv.end})
    return out


def updates(store: Store, injected: list[dict]) -> tuple[dict, list[dict]]:
    rows = []
    k = store.mem.default_k
    for u in injected:
        hits = store.mem.search(u["question"], user_id=u["user"], k=max(k, 10), now=u["now"])
        ids = [h.id for h in hits]
        rs = ids.index(u["stale_id"]) + 1 if u["stale_id"] in ids else None
        rc = ids.index(u["correction_id"]) + 1 if u["correction_id"] in ids else None
        rows.append({**u, "stale_rank": rs, "correction_rank": rc,
                     "stale_above": rs is not None and (rc is None or rs < rc),
                     "correction_found_at_k": rc is not None and rc <= k, "correction_found_at_10": rc is not None})
    n = len(rows)
    return {"corrections": n, "k": k,
            "stale_above_correction": sum(r["stale_above"] for r in rows),
            "stale_above_rate": round(sum(r["stale_above"] for r in rows) / n, 4) if n else None,
            "correction_found_at_k": sum(r["correction_found_at_k"] for r in rows),
            "correction_found_rate": round(sum(r["correction_found_at_k"] for r in rows) / n, 4) if n else None,
            "correction_found_at_10": sum(r["correction_found_at_10"] for r in rows)}, rows


# ------------------------------------------------------------------------------- deletion


def _snapshot(store: Store, user: str) -> list[tuple]:
    return [(r.id, r.text, r.created_at) for r in store.mem.all(user)]


def _own_searches(store: Store, users, per_user: int = 25) -> dict:
    """The ids each user's search returns for its own first questions."""
    return {(c.user, q.qid): [h.id for h in store.mem.search(q.question, user_id=c.user, k=10, now=c.end)]
            for c in store.ls.conversations if c.user in users for q in c.questions[:per_user]}


def deletion(store: Store, ss: SafetySet, seed: int, progress: bool = False) -> tuple[dict, list[dict]]:
    """Delete single memories (``delete_memories_of``), one session of ``delete_conversation_of`` as a
    conversation (:meth:`adiyan.context.Conversation.delete`) and the whole ``delete_user``
    (:func:`adiyan.context.forget_user`); then count what of them any read path or copy still holds."""
    mem, ls = store.mem, store.ls
    by_id = {c.id: c for c in ls.conversations}
    rng = random.Random(seed + 1)
    questions_of: dict[tuple[str, str], list[str]] = {}  # (user, dia_id) -> the questions it is evidence of
    for conv in ls.conversations:
        for q in conv.questions:
            for d in q.evidence:
                questions_of.setdefault((conv.user, d), []).append(q.question)
    how: dict[str, str] = {}  # memory id -> memory | conversation | user
    singles: list[tuple[str, str]] = []
    for cid in ss.delete_memories_of:
        conv = by_id[cid]
        cands = sorted(d for (u, d) in questions_of if u == conv.user and (u, d) in store.ids_of_dia)
        for d in rng.sample(cands, min(ss.delete_memories_per_user, len(cands))):
            singles.append((conv.user, store.ids_of_dia[(conv.user, d)]))
            how[store.ids_of_dia[(conv.user, d)]] = "memory"
    victim = by_id[ss.delete_conversation_of]
    sessions = sorted({session_of(t.dia_id) for t in victim.turns})
    session = sessions[rng.randrange(len(sessions))]
    for t in victim.turns:
        if session_of(t.dia_id) == session:
            how[store.ids_of_dia[(victim.user, t.dia_id)]] = "conversation"
    gone = by_id[ss.delete_user].user
    how.update({mid: "user" for mid, u in store.owner.items() if u == gone})
    touched = sorted({store.owner[m] for m in how})
    record = {r.id: r for u in touched for r in mem.all(u)}
    dead = {mid: record[mid] for mid in sorted(how)}
    bystanders = sorted(c.user for c in ls.conversations if c.user not in touched)

    # before: the deleted memories are found (so finding none after is a test); the others' state
    probes = _deletion_probes(store, dead, questions_of)
    found_before = sum(mid in {h.id for h in mem.search(q, user_id=u, k=10, now=now)} for u, mid, q, now in probes)
    before = {u: _snapshot(store, u) for u in {c.user for c in ls.conversations} - {gone}}
    searches = _own_searches(store, bystanders)
    replay = CandidateMemory(mem, depth=30)  # a candidate cache warmed before the deletion
    for u, _mid, q, now in probes:
        replay.search(q, user_id=u, k=10, now=now)

    # another user can neither delete them nor learn that they exist
    intruder = bystanders[0]  # the manifest leaves at least one user out of every deletion
    by_said = sorted(dead, key=lambda m: (store.owner[m], dead[m].created_at, dead[m].text))  # not by random id
    targets = [m for m in by_said if store.owner[m] != intruder][:50]
    refused = sum(not mem.delete(m, user_id=intruder) for m in targets)
    listed = {u: {r.id for r in mem.all(u)} for u in {store.owner[m] for m in targets}}
    kept = sum(m in listed[store.owner[m]] for m in targets)  # and each is still its owner's

    cached_before = _cache_rows(store, {r.text for r in dead.values()})
    t0 = time.perf_counter()
    n_memory = sum(mem.delete(m, user_id=u) for u, m in singles)
    n_conv = ChatConversation.load(store.settings, conversation_id(victim, session), victim.user, memory=mem,
                                   embedder=store.embedder).delete()
    n_user = forget_user(store.settings, gone, mem)
    delete_s = time.perf_counter() - t0
    # the copies, before any probe: a probe asking with a deleted text embeds that text again as a query
    copies = _copies_after(store, dead)

    # after: every read path as the owner, with each deleted memory's text and its questions
    recalled = dict.fromkeys(PATHS, 0)
    examples: list[dict] = []
    paths_of: dict[str, dict] = {}
    for u, mid, q, now in tqdm(probes, desc="memory safety: deletion", unit="probe", disable=not progress,
                               leave=False):
        paths = paths_of.setdefault(u, read_paths(store, u, now))
        for name, fn in paths.items():
            got = fn(q, dead[mid].metadata.get("conversation", "none"))
            # a transcript turn counts where the transcript was deleted (a conversation, a user): deleting one
            # memory leaves the conversation's transcript as it was said
            hit = [t for i, t in got if i == mid or (i is None and how[mid] != "memory" and t == dead[mid].text
                                                      and not _still_said(store, u, t, dead))]
            recalled[name] += bool(hit)
            if hit and len(examples) < 20:
                examples.append({"path": name, "user": u, "deleted_as": how[mid], "query": q, "text": hit[0]})
    stores = {**copies, **_indexes_after(store, replay, probes)}
    after = {u: _snapshot(store, u) for u in before}
    # nobody lost or changed anything beyond what was deleted; bystanders' searches return the same
    changed = sum(after[u] != [r for r in before[u] if r[0] not in dead] for u in before)
    moved = sum(_own_searches(store, bystanders)[key] != v for key, v in searches.items())
    return {"deleted": {"memories": n_memory, "conversation": n_conv, "user": n_user, "total": len(dead),
                        "conversation_id": conversation_id(victim, session), "user_id": gone,
                        "memories_of": [by_id[c].user for c in ss.delete_memories_of]},
            "probes": len(probes), "found_before": found_before, "embedding_cache_rows_before": cached_before,
            "recalled_after": recalled, "recalled_after_total": sum(recalled.values()),
            "stores": stores, "stores_total": sum(stores.values()),
            "cross_user_delete_attempts": len(targets), "cross_user_delete_refused": refused,
            "cross_user_delete_targets_kept": kept,
            "users_checked": len(before), "users_changed_beyond_deletion": changed,
            "bystanders": bystanders, "bystander_searches": len(searches), "bystander_searches_moved": moved,
            "delete_s": round(delete_s, 3)}, examples


def _deletion_probes(store: Store, dead: dict, questions_of) -> list[tuple[str, str, str, str]]:
    """(owner, memory id, query, now): each deleted memory asked with its own text and its first question;
    a user's deleted memories are sampled evenly, at most ``PROBES_PER_USER`` of them."""
    ends = {c.user: c.end for c in store.ls.conversations}
    out = []
    by_user: dict[str, list] = {}
    for mid, r in sorted(dead.items(), key=lambda kv: (kv[1].created_at, kv[0])):
        by_user.setdefault(store.owner[mid], []).append((mid, r))
    for u, items in by_user.items():
        step = max(1, len(items) // PROBES_PER_USER)
        for mid, r in items[::step][:PROBES_PER_USER]:
            out.append((u, mid, r.text, ends[u]))
            qs = questions_of.get((u, r.metadata.get("dia_id")), [])
            if qs:
                out.append((u, mid, qs[0], ends[u]))
    return out


def _still_said(store: Store, user: str, text: str, deleted) -> bool:
    """The same words in a memory of this user that was not deleted (LoCoMo repeats "Thanks!")."""
    return any(r.text == text and r.id not in deleted for r in store.mem.all(user))


def _cache_rows(store: Store, texts) -> int:
    """Embedding-cache rows held for these texts, under every embedder of the memory and every task prefix."""
    keys = {k for emb in store.mem.embedders() if hasattr(emb, "keys_of")
            for task in ("document", "query", None) for k in emb.keys_of(sorted(texts), task)}
    return len(store.embedder.cache.get_many(sorted(keys)))


def _copies_after(store: Store, dead: dict) -> dict:
    """Copies of the deleted memories left in the store's files and the embedding cache (each must be 0)."""
    mem = store.mem
    kept_texts = {r.text for u in {c.user for c in store.ls.conversations} for r in mem.all(u)}
    dead_texts = {r.text for r in dead.values()} - kept_texts  # words no remaining memory says
    # the raw store: every point of the collection, read past the memory's filters
    raw = 0
    offset = None
    name = mem.collection("conversation")
    while True:
        points, offset = mem.client.scroll(name, limit=1000, offset=offset, with_payload=True, with_vectors=False)
        raw += sum(str(p.id) in dead or (p.payload or {}).get("data") in dead_texts for p in points)
        if offset is None:
            break
    db = Path(store.settings.paths.data_dir) / "memory" / f"{name}.history.db"
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT memory_id, old_memory, new_memory FROM history").fetchall()
        history = sum(m in dead or o in dead_texts or n in dead_texts for m, o, n in rows)
        scopes = {mem0_session_scope(store.owner[m]) for m in dead}
        msgs = conn.execute("SELECT session_scope, content FROM messages").fetchall()
        messages = sum(s in scopes and c in dead_texts for s, c in msgs)
    cache = _cache_rows(store, dead_texts)
    return {"raw_store": raw, "mem0_history": history, "mem0_messages": messages, "embedding_cache": cache}


def _indexes_after(store: Store, replay: CandidateMemory, probes) -> dict:
    """The deleted memories in a BM25 index rebuilt from the store, and in a candidate cache warmed before."""
    mem = store.mem
    mem.drop_lexical_index()
    lexical = cand = 0
    for u, mid, q, now in probes:
        scores, _ = mem.lexical_scores(q, u)
        lexical += mid in scores
        cand += mid in {h.id for h in replay.search(q, user_id=u, k=10, now=now)}
    return {"lexical_index_rebuilt": lexical, "candidate_cache": cand}


# ------------------------------------------------------------------------------- the run


def refuse(settings) -> None:
    if settings.store.engine == "server":
        raise UnsupportedSetting("store.engine=server", ENTRY_POINT, "the benchmark builds, mutates and removes its "
                                 "own store; it runs in a local folder, never in a shared server")
    if settings.memory.infer is True:
        raise UnsupportedSetting("memory.infer=true", ENTRY_POINT, "every turn is stored verbatim: LLM consolidation "
                                 "of 4,805 turns is hours on a CPU and is measured by the mem0-infer regression")
    if settings.eval.mode != "answer" or settings.eval.generate:
        raise UnsupportedSetting(f"eval.mode={settings.eval.mode} eval.generate={settings.eval.generate}",
                                 ENTRY_POINT, "nothing is answered: set eval.generate=false")


def evaluate_safety(settings, ss: SafetySet, *, progress: bool = False) -> tuple[dict, dict, list[dict]]:
    """(metrics group, details, per-item rows) of one run, in a fresh store removed afterwards."""
    ls = load_locomo(ss.source)
    check_conversations(ss, ls)
    base = Path(settings.paths.data_dir) / "memory_safety"
    base.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="run-", dir=base))
    timings = {}
    try:
        t0 = time.perf_counter()
        store = Store(settings, ls, folder, progress=progress)
        timings["build_s"] = time.perf_counter() - t0
        try:
            t0 = time.perf_counter()
            iso, iso_examples = isolation(store, ss, settings.seed, progress)
            timings["isolation_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            upd, upd_rows = updates(store, inject_corrections(store, ss))
            timings["updates_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            dele, del_examples = deletion(store, ss, settings.seed, progress)
            timings["deletion_s"] = time.perf_counter() - t0
            emb_stats = store.embedder.stats.as_dict()
        finally:
            store.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    group = {
        "cross_user_questions": iso["cross_user_questions"], "users": iso["users"],
        "leaks_total": iso["leaks_total"], **{f"leaks.{p}": v for p, v in iso["leaks"].items()},
        "stale_above_rate": upd["stale_above_rate"], "correction_found_rate": upd["correction_found_rate"],
        "corrections": upd["corrections"],
        "deleted_total": dele["deleted"]["total"], "deletion_found_before": dele["found_before"],
        "deletion_probes": dele["probes"], "deleted_recalled_total": dele["recalled_after_total"] + dele["stores_total"],
        **{f"deleted_recalled.{p}": v for p, v in dele["recalled_after"].items()},
        **{f"deleted_left_in.{s}": v for s, v in dele["stores"].items()},
        "cross_user_delete_refused": dele["cross_user_delete_refused"],
        "cross_user_delete_not_refused": dele["cross_user_delete_attempts"] - min(dele["cross_user_delete_refused"],
                                                                                  dele["cross_user_delete_targets_kept"]),
        "cross_user_delete_attempts": dele["cross_user_delete_attempts"],
        "other_users_changed": dele["users_changed_beyond_deletion"] + dele["bystander_searches_moved"],
    }
    details = {"isolation": iso, "isolation_examples": iso_examples, "updates": upd, "updates_rows": upd_rows,
               "deletion": dele,
               "deletion_examples": del_examples, "timings": {k: round(v, 3) for k, v in timings.items()},
               "embeddings": emb_stats}
    return group, details, upd_rows


def run_memory_safety(settings, *, progress: bool = True, run_id: str | None = None, incidents=None,
                      incidents_why: str | None = None) -> Path:
    """Run the memory-safety set (``eval.evalset`` a folder with ``kind: memory-safety``), write
    reports/<run-id>/ and the runs index."""
    refuse(settings)
    t_start = time.perf_counter()
    ss = load_safety_set(settings.eval.evalset, settings.paths.datasets_dir)
    record = RunRecord.for_settings(settings, run_id)
    embedder = open_embedder(settings, progress=progress)  # the configured one, for the incidents and the record
    group, details, rows = evaluate_safety(settings, ss, progress=progress)
    groups = {"memory_safety": group}
    if incidents is not None:
        groups["incidents"] = incidents(embedder, record.dir)
    regression = run_cases(groups, embedder.id, ss.name,
                           incidents_why="the incidents were not replayed" if incidents_why else None)
    timings = {**details["timings"], "total_s": round(time.perf_counter() - t_start, 3)}
    out = {
        **record.envelope(settings),
        "models": {"embedder": embedder.describe(), "llm": None, "judge": None},
        "dataset": {"name": ss.name, "kind": KIND, "path": str(ss.root), "source": str(ss.source),
                    "hash": load_locomo(ss.source).content_hash(), "n_questions": group["cross_user_questions"],
                    "n_chunks": 0, "users": group["users"]},
        "memory_safety": details,
        "engines": {"memory": {"engine": "local", "where": "a fresh folder under paths.data_dir/memory_safety",
                               "used": True}, "shared": False},
        "warnings": [], "metrics": groups, **record_fields(regression, incidents_why),
        "timings": timings,
        "cache": {"embeddings": details["embeddings"], "hits": details["embeddings"].get("hits"),
                  "misses": details["embeddings"].get("misses")},  # the run's own cache (Store)
    }
    return record.finish(out, rows, rows_in_report=False, section=lambda run_dir: add_section(run_dir, out))
