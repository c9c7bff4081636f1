"""Memory safety under many users (issue 43.2): deletion forgets every copy, another user can neither delete
nor see, and the memory-safety benchmark counts leaks (0 here, and more than 0 when a read path's user
filter is removed). Real mem0, real MiniLM behind a private embedding cache."""

import json
import sqlite3
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from adiyan.context import Conversation, forget_user
from adiyan.eval.evalset import EvalsetError
from adiyan.eval.locomo.paths import CandidateMemory
from adiyan.eval.memory_safety import load_safety_set
from adiyan.eval.runner import RegressionFailed, run_eval, summary_lines
from adiyan.factory import open_embedder
from adiyan.memory import Memory
from adiyan.retrieval.memory_rank import Candidate

NOW = datetime(2025, 6, 1, 12, tzinfo=timezone.utc)
FOUR_USERS = Path(__file__).parent / "data" / "locomo_four_users.json"
PIN = "My bank PIN is 4321 and my locker code is 9988."


def _history_rows(settings, mem, memory_id: str) -> int:
    db = Path(settings.paths.data_dir) / "memory" / f"{mem.collection('conversation')}.history.db"
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT COUNT(*) FROM history WHERE memory_id = ? OR old_memory = ? OR new_memory = ?",
                            (memory_id, PIN, PIN)).fetchone()[0]


def _raw_points(mem, text: str) -> int:
    points, _ = mem.client.scroll(mem.collection("conversation"), limit=1000, with_payload=True)
    return sum((p.payload or {}).get("data") == text for p in points)


@pytest.fixture
def two_users(make_settings):
    settings = make_settings(**{"memory.search": "hybrid"})
    emb = open_embedder(settings, progress=False)  # behind the embedding cache, as the product opens it
    mem = Memory.from_settings(settings, embedder=emb)
    ids = {"alice": [], "bob": []}
    for i, t in enumerate([PIN, "I am allergic to peanuts and shellfish.", "My sister Ines lives in Braga."]):
        ids["alice"].append(mem.add(t, user_id="alice", created_at=NOW - timedelta(days=10 + i),
                                    metadata={"conversation": "a1" if i < 2 else "a2"}))
    for i, t in enumerate(["I prefer window seats on trains.", "My dog Bolt loves the beach."]):
        ids["bob"].append(mem.add(t, user_id="bob", created_at=NOW - timedelta(days=3 + i)))
    yield settings, emb, mem, ids
    mem.close()


@pytest.mark.private_cache
def test_deleting_a_memory_forgets_every_copy_and_only_its_owner_can(two_users):
    settings, emb, mem, ids = two_users
    pin = ids["alice"][0]
    # every copy is there before (so finding none after is a test)
    assert pin in [h.id for h in mem.search("bank PIN", user_id="alice", now=NOW)]
    assert _raw_points(mem, PIN) == 1 and _history_rows(settings, mem, pin) == 1
    assert len(emb.cache.get_many(emb.keys_of([PIN]))) == 1
    bob_before = [(r.id, r.text) for r in mem.all("bob")]

    assert mem.delete(pin, user_id="bob") is False  # not bob's: neither deleted nor revealed
    assert [r.id for r in mem.all("alice")] == ids["alice"][::-1]  # oldest first
    assert mem.delete(pin, user_id="alice") is True
    assert mem.delete(pin, user_id="alice") is False  # gone

    assert pin not in [h.id for h in mem.search("bank PIN", user_id="alice", now=NOW)]
    assert pin not in mem.lexical_scores("bank PIN locker code", "alice")[0]
    assert [r.text for r in mem.all("alice")] == ["My sister Ines lives in Braga.",
                                                  "I am allergic to peanuts and shellfish."]
    assert _raw_points(mem, PIN) == 0
    assert _history_rows(settings, mem, pin) == 0  # mem0 keeps the text in its ADD and DELETE rows: purged
    assert len(emb.cache.get_many(emb.keys_of([PIN]))) == 0  # the vector and the key of the text
    assert [(r.id, r.text) for r in mem.all("bob")] == bob_before


@pytest.mark.private_cache
def test_deleting_a_conversation_and_a_user(two_users):
    settings, emb, mem, ids = two_users
    chat = Conversation(settings, "a1", "alice", memory=mem, embedder=emb)
    chat.add_turn("user", "I booked the ferry to Faro.", at=NOW, remember=False)
    reply = "Your ferry to Faro leaves at 08:40 from pier 3."
    chat.add_turn("assistant", reply, at=NOW)
    chat.context_for("When does my ferry leave?", now=NOW)  # the history filter embeds both turns
    assert chat.path.is_file()
    assert len(emb.cache.get_many(emb.keys_of([reply]))) == 1  # so finding none after is a test
    assert chat.delete() == 2  # the two memories stated in a1, and its transcript
    for task in ("document", "query", None):  # the assistant's turn, never a memory, leaves no vector
        assert emb.cache.get_many(emb.keys_of([reply, "I booked the ferry to Faro."], task)) == {}
    assert not chat.path.is_file()
    assert [r.text for r in mem.all("alice")] == ["My sister Ines lives in Braga."]
    Conversation(settings, "a2", "alice", memory=mem, embedder=emb).add_turn("user", "Hello again.", at=NOW)
    assert forget_user(settings, "alice", mem) == 2  # a2's memory and the turn just remembered
    assert mem.all("alice") == [] and not (Path(settings.paths.data_dir) / "conversations" / "alice").exists()
    assert [r.id for r in mem.all("bob")] == ids["bob"][::-1]
    with pytest.raises(ValueError, match="use letters"):
        forget_user(settings, "../etc", mem)


def test_kept_searches_and_candidates_are_dropped_by_a_write(memory_factory, minilm):
    mem = memory_factory(minilm, **{"memory.search": "hybrid"})
    first = mem.add("My favourite colour is teal.", user_id="u", created_at=NOW - timedelta(days=30))
    replay = CandidateMemory(mem, depth=30)
    assert [h.id for h in replay.search("favourite colour", user_id="u", k=5, now=NOW)] == [first]
    assert [h.id for h in mem.search("favourite colour", user_id="u", k=5, now=NOW)] == [first]
    kept = mem.dense_candidates("favourite colour", user_id="u", kind="conversation", depth=10)
    assert [c.id for c in kept] == [first]
    kept[0].metadata["x"] = 1  # a caller changing what it got does not change what the memory keeps
    assert "x" not in mem.dense_candidates("favourite colour", user_id="u", kind="conversation", depth=10)[0].metadata
    second = mem.add("My favourite colour is crimson now.", user_id="u", created_at=NOW - timedelta(days=2))
    # the kept similarity search (no BM25 involved) and the replay's candidates both see the write
    assert second in [c.id for c in mem.dense_candidates("favourite colour", user_id="u", kind="conversation",
                                                         depth=10)]
    assert second in [h.id for h in replay.search("favourite colour", user_id="u", k=5, now=NOW)]
    assert mem.delete(first, user_id="u")
    assert first not in [h.id for h in replay.search("favourite colour", user_id="u", k=5, now=NOW)]


def _manifest(tmp_path, **over) -> Path:
    root = tmp_path / "safety"
    root.mkdir(exist_ok=True)
    m = {"name": "safety_tiny", "kind": "memory-safety", "source": str(FOUR_USERS), "questions_per_user": None,
         "delete_memories_per_user": 1, "delete_memories_of": ["u-1"], "delete_conversation_of": "u-2",
         "delete_user": "u-3", "stale_days": 60, "correction_days": 20,
         "corrections": [{"id": "colour", "stale_text": "{name}: My favourite colour is teal.",
                          "correction_text": "{name}: My favourite colour is crimson now, not teal.",
                          "question": "What is {name}'s favourite colour?"},
                         {"id": "city", "stale_text": "{name}: I live in Porto.",
                          "correction_text": "{name}: We moved, I live in Lisbon now.",
                          "question": "Which city does {name} live in?"}], **over}
    (root / "manifest.yaml").write_text(yaml.safe_dump(m), encoding="utf-8")
    return root


@pytest.fixture
def safety_run(make_settings, tmp_path):
    def run(**over):
        s = make_settings(**{"eval.evalset": str(_manifest(tmp_path, **over)), "eval.generate": False,
                             "eval.judge": None})
        try:
            run_dir, failed = run_eval(s, progress=False), []
        except RegressionFailed as exc:  # the run's gate: a leak or a deleted memory found fails it
            run_dir, failed = exc.run_dir, sorted(f.id for f in exc.failures)
        m = json.loads((run_dir / "metrics.json").read_text())
        m["_gate_failed"] = failed
        return run_dir, m
    return run


def test_the_benchmark_counts_no_leak_and_no_deleted_memory(safety_run):
    run_dir, m = safety_run()
    g, d = m["metrics"]["memory_safety"], m["memory_safety"]
    # 4 users (3, 3, 3 and 2 questions), each asks every question of the conversations it does not own
    assert g["cross_user_questions"] == 8 + 8 + 8 + 9 == 33 and g["users"] == 4 and m["_gate_failed"] == []
    assert g["leaks_total"] == 0 and set(d["isolation"]["leaks"]) == {
        "search", "search_without_time", "lexical_index", "list", "three_part_context", "agent_memory_tool",
        "ask_conversation", "locomo_candidate_replay"}
    assert d["isolation"]["returned"]["search"] > 0  # the paths answer: they return the asker's own memories
    # deletion: 1 memory of u-1, one session of u-2 (3 or 2 turns), every memory of u-3 (4 turns)
    de = d["deletion"]
    assert de["deleted"]["memories"] == 1 and de["deleted"]["conversation"] in (2, 3) and de["deleted"]["user"] == 4
    assert de["found_before"] > 0 and de["embedding_cache_rows_before"] > 0
    assert g["deleted_recalled_total"] == 0 and de["stores"] == dict.fromkeys(de["stores"], 0)
    assert g["cross_user_delete_refused"] == g["cross_user_delete_attempts"] > 0
    assert g["cross_user_delete_not_refused"] == 0
    assert g["other_users_changed"] == 0
    # updates: two corrections, to u-1 and u-2, ranked at their conversations' ends
    assert g["corrections"] == 2 and [r["user"] for r in d["updates_rows"]] == ["locomo-u-1", "locomo-u-2"]
    html = (run_dir / "report.html").read_text()
    assert "Memory safety under many users" in html and "the agent&#39;s search_memory tool" in html
    assert any("33 cross-user questions on 8 read paths: 0 leaks" in line for line in summary_lines(run_dir))
    assert d["deletion"]["bystanders"] == ["locomo-u-4"] and d["deletion"]["bystander_searches"] == 2


@pytest.mark.slow  # a whole benchmark run with a test double (CI runs it)
def test_the_benchmark_counts_leaks_when_the_user_filter_is_removed(safety_run, monkeypatch):
    """A test double for control flow: the memory's similarity search without its user filter, as a bug
    would have it. The same run then counts leaks on every path built on it."""
    def unfiltered(self, query, *, user_id, kind, depth):  # Memory._dense_search minus filters={"user_id": ...}
        q = self._unit_vectors([query], "query")[0].tolist()
        hits = self.client.query_points(self.collection(kind), query=q, limit=depth, with_payload=True).points
        return [Candidate(str(p.id), p.payload["data"], float(p.score), p.payload["created_at"],
                          {k: v for k, v in p.payload.items() if k in ("dia_id", "conversation")}) for p in hits]

    monkeypatch.setattr(Memory, "_dense_search", unfiltered)
    _, m = safety_run()
    leaks = m["memory_safety"]["isolation"]["leaks"]
    assert leaks["search"] > 0 and leaks["three_part_context"] > 0 and leaks["agent_memory_tool"] > 0
    assert leaks["ask_conversation"] > 0 and leaks["locomo_candidate_replay"] > 0
    assert leaks["list"] == 0 and leaks["lexical_index"] == 0  # they do not use it
    assert "memory-safety-no-leak" in m["_gate_failed"]  # and the run fails its gate


def test_a_bad_manifest_is_refused_by_name(tmp_path):
    root = _manifest(tmp_path, delete_user="u-1")
    with pytest.raises(EvalsetError, match="delete_user u-1 is deleted whole"):
        load_safety_set(root, tmp_path)
    root = _manifest(tmp_path, source="nowhere.json")
    with pytest.raises(EvalsetError, match="source nowhere.json not found"):
        load_safety_set(root, tmp_path)
    root = _manifest(tmp_path, stale_days=10, correction_days=20)
    with pytest.raises(EvalsetError, match="the correction is the newer statement"):
        load_safety_set(root, tmp_path)


@pytest.mark.slow  # a whole benchmark run with a test double (CI runs it)
def test_the_benchmark_counts_copies_when_deletion_leaves_them(safety_run, monkeypatch):
    """A test double for control flow: deletion without purging the copies (mem0's own delete only), as
    before this benchmark. The same run then counts the texts left in mem0's history and the embedding cache."""
    monkeypatch.setattr(Memory, "_purge_copies", lambda self, *a, **k: None)
    _, m = safety_run()
    stores = m["memory_safety"]["deletion"]["stores"]
    assert stores["mem0_history"] > 0 and stores["embedding_cache"] > 0
    assert stores["raw_store"] == 0  # mem0 does delete the point itself
    assert m["metrics"]["memory_safety"]["deleted_recalled_total"] > 0
    assert "memory-safety-deleted-gone" in m["_gate_failed"]


def test_a_manifest_with_a_typo_or_no_bystander_is_refused(tmp_path, make_settings):
    with pytest.raises(EvalsetError, match="unknown key.*question_per_user"):
        load_safety_set(_manifest(tmp_path, question_per_user=5), tmp_path)
    with pytest.raises(EvalsetError, match="names a conversation twice"):
        load_safety_set(_manifest(tmp_path, delete_memories_of=["u-1", "u-1"]), tmp_path)
    s = make_settings(**{"eval.evalset": str(_manifest(tmp_path, delete_memories_of=["u-1", "u-4"])),
                         "eval.generate": False, "eval.judge": None})
    with pytest.raises(EvalsetError, match="leave at least one user out"):
        run_eval(s, progress=False)
