"""Conversation and coaching memory on mem0, with the real minilm and nomic-embed-text.

The seed's stale-fact case: a user said "teal" a month ago and corrected it to "crimson"
yesterday. By similarity alone the stale statement wins (it is the shorter, cleaner match for
"What is my favourite colour?"); recency re-ranking puts the correction first.
"""

from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from adiyan.memory import KINDS, Memory, MemoryHit, consolidation_capable
from adiyan.models import ModelError
from adiyan.store import EmbedderMismatchError, StoreError

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=timezone.utc)
STALE = "My favourite colour is teal."
CORRECTION = "Actually my favourite colour is crimson, not teal."
QUERY = "What is my favourite colour?"
HALF_LIFE = 14.0


def ago(days: float) -> datetime:
    return NOW - timedelta(days=days)


SEED = {"memory__search": "dense", "memory__recency_scope": "all"}  # the seed's memory: cosine, every memory decayed


@pytest.mark.parametrize("model", ["minilm", "nomic"])
def test_stale_fact_replay(request, memory_factory, model):
    emb = request.getfixturevalue(model)
    mem = memory_factory(emb, **SEED)
    assert mem.half_life_days == HALF_LIFE and not mem.infer
    stale_id = mem.add(STALE, user_id="alice", created_at=ago(30))
    fix_id = mem.add(CORRECTION, user_id="alice", created_at=ago(1))

    plain = mem.search(QUERY, user_id="alice", k=2, recency=False, now=NOW)
    by_id = {h.id: h for h in plain}
    print(f"\n[{emb.id}] similarity without recency: stale {by_id[stale_id].similarity:.3f}, "
          f"correction {by_id[fix_id].similarity:.3f} (seed, nomic-embed-text via Ollama: 0.781 vs 0.725)")
    # The failure mode: by similarity alone the stale statement outranks the correction.
    assert [h.id for h in plain] == [stale_id, fix_id]
    assert by_id[stale_id].similarity > by_id[fix_id].similarity
    assert all(h.weight == 1.0 and h.score == h.similarity for h in plain)

    # The similarity is the model's query-document cosine (task prefixes applied by kind).
    q = emb.embed([QUERY], "query")[0]
    docs = emb.embed([STALE, CORRECTION], "document")
    assert by_id[stale_id].similarity == pytest.approx(float(np.dot(docs[0], q)), abs=1e-4)
    assert by_id[fix_id].similarity == pytest.approx(float(np.dot(docs[1], q)), abs=1e-4)

    ranked = mem.search(QUERY, user_id="alice", k=2, now=NOW)  # recency on by default
    print(f"[{emb.id}] with recency (half-life 14 d): "
          + ", ".join(f"{h.text[:24]!r} {h.similarity:.3f} x {h.weight:.4f} = {h.score:.3f}" for h in ranked))
    assert [h.id for h in ranked] == [fix_id, stale_id]
    ages = {stale_id: 30.0, fix_id: 1.0}
    for h in ranked:
        assert h.age_days == pytest.approx(ages[h.id], abs=1e-9)
        assert h.weight == pytest.approx(0.5 ** (ages[h.id] / HALF_LIFE), abs=1e-12)
        assert abs(h.score - h.similarity * 0.5 ** (ages[h.id] / HALF_LIFE)) < 1e-6
        assert h.similarity == pytest.approx(by_id[h.id].similarity, abs=1e-9)
    assert ranked[0].created_at == ago(1).isoformat()


@pytest.mark.parametrize("model", ["minilm", "nomic"])
def test_stale_fact_with_the_default_memory_decays_only_the_superseded_statement(request, memory_factory, model):
    """The default (hybrid search, recency_scope=superseded): the correction supersedes the statement
    (cosine >= 0.7 with a change cue), so the statement is decayed by the 29-day gap and the correction
    keeps weight 1; an unrelated memory 200 days old is not decayed at all."""
    emb = request.getfixturevalue(model)
    mem = memory_factory(emb)
    assert (mem.search_mode, mem.recency_scope) == ("hybrid", "superseded")
    stale_id = mem.add(STALE, user_id="alice", created_at=ago(30))
    fix_id = mem.add(CORRECTION, user_id="alice", created_at=ago(1))
    old_id = mem.add("I was born in Porto and grew up by the river.", user_id="alice", created_at=ago(200))
    ranked = mem.search(QUERY, user_id="alice", k=3, now=NOW)
    by_id = {h.id: h for h in ranked}
    assert ranked[0].id == fix_id and by_id[fix_id].weight == 1.0
    assert by_id[stale_id].superseded_by == fix_id
    assert by_id[stale_id].weight == pytest.approx(0.5 ** (29 / HALF_LIFE), abs=1e-12)
    assert by_id[old_id].weight == 1.0 and by_id[old_id].superseded_by is None
    for h in ranked:  # score = (0.5 BM25 share + 0.5 cosine) x weight
        assert h.score == pytest.approx((0.5 * h.lexical + 0.5 * h.similarity) * h.weight, abs=1e-9)


def test_overfetch_brings_a_newer_statement_into_the_top_k(memory_factory, minilm):
    mem = memory_factory(minilm, **SEED)
    # Four stale statements, each more similar to the query than the correction (on minilm).
    stale = ["My favourite colour is teal.", "My favourite colour is definitely teal.",
             "My favourite colour is teal!", "My favourite colour? Teal."]
    stale_ids = [mem.add(text, user_id="alice", created_at=ago(40 + i)) for i, text in enumerate(stale)]
    fix_id = mem.add(CORRECTION, user_id="alice", created_at=ago(1))
    plain = mem.search(QUERY, user_id="alice", k=4, recency=False, now=NOW)
    assert sorted(h.id for h in plain) == sorted(stale_ids)  # the correction is outside the plain top 4...
    top = mem.search(QUERY, user_id="alice", k=1, now=NOW)
    assert [h.id for h in top] == [fix_id]  # ...but fetched (max(3*1, 10)) and first with recency


def test_users_never_see_each_others_memories(memory_factory, minilm):
    mem = memory_factory(minilm)
    mem.add("My bank PIN is 4321.", user_id="alice", created_at=ago(2))
    mem.add(STALE, user_id="alice", created_at=ago(3))
    bob_id = mem.add("I prefer window seats on trains.", user_id="bob", created_at=ago(1))
    for recency in (True, False):
        bob_hits = mem.search("What is my bank PIN?", user_id="bob", k=10, recency=recency, now=NOW)
        assert [h.id for h in bob_hits] == [bob_id]
    assert [r.id for r in mem.all("bob")] == [bob_id]
    assert mem.search(QUERY, user_id="carol", now=NOW) == [] and mem.all("carol") == []
    assert mem.delete_all("bob") == 1
    assert mem.all("bob") == [] and len(mem.all("alice")) == 2


def test_kinds_are_separate_collections(memory_factory, minilm):
    mem = memory_factory(minilm)
    assert [mem.collection(k) for k in KINDS] == ["adiyan_conversation_memory", "adiyan_coaching_memory"]
    conv = mem.add(STALE, user_id="alice", created_at=ago(2))
    coach = mem.add("Coaching goal: run 5 km three times a week.", user_id="alice", kind="coaching",
                    created_at=ago(1), metadata={"goal": "fitness"})
    assert [r.id for r in mem.all("alice")] == [conv]
    assert [r.id for r in mem.all("alice", kind="coaching")] == [coach]
    hits = mem.search("running goal", user_id="alice", kind="coaching", k=5, now=NOW)
    assert [h.id for h in hits] == [coach] and hits[0].metadata == {"goal": "fitness"} and hits[0].kind == "coaching"
    assert coach not in [h.id for h in mem.search("running goal", user_id="alice", k=5, now=NOW)]
    assert mem.delete_all("alice", kind="coaching") == 1 and [r.id for r in mem.all("alice")] == [conv]
    with pytest.raises(ValueError, match="unknown memory kind"):
        mem.add("x", user_id="alice", kind="diary")


def test_memories_persist_across_reopening_the_data_dir(memory_factory, make_settings, minilm, nomic):
    mem = memory_factory(minilm)
    stale_id = mem.add(STALE, user_id="alice", created_at=ago(30), metadata={"session": "s1"})
    fix_id = mem.add(CORRECTION, user_id="alice", created_at=ago(1))
    before = mem.search(QUERY, user_id="alice", k=2, now=NOW)
    with pytest.raises(StoreError, match="in use"):  # local mode: one open Memory per data dir
        Memory.from_settings(make_settings(), embedder=minilm)
    mem.close()

    again = memory_factory(minilm)
    recs = again.all("alice")
    assert [(r.id, r.text, r.created_at) for r in recs] == [
        (stale_id, STALE, ago(30).isoformat()), (fix_id, CORRECTION, ago(1).isoformat())]
    assert recs[0].metadata == {"session": "s1"} and recs[0].role == "user"
    after = again.search(QUERY, user_id="alice", k=2, now=NOW)
    assert [(h.id, round(h.score, 6)) for h in after] == [(h.id, round(h.score, 6)) for h in before]
    again.close()

    # The same-model rule: the collection remembers minilm; nomic-embed-text is refused.
    with pytest.raises(EmbedderMismatchError, match="minilm"):
        Memory.from_settings(make_settings(), embedder=nomic)


def test_no_llm_is_loaded_or_called_without_consolidation(memory_factory, minilm):
    mem = memory_factory(minilm)  # default config: llm extractive, which cannot consolidate (nor can smollm2)
    assert consolidation_capable("extractive") is False and consolidation_capable("smollm2") is False and consolidation_capable("gguf:/m.gguf", 32768) is False
    assert consolidation_capable("ollama:qwen2.5:7b", 32768) and consolidation_capable("openai-compatible:http://h/v1")
    assert consolidation_capable("ollama:qwen2.5:7b", 2048) is False  # mem0's prompt alone is ~8.6k tokens
    assert not mem.infer and not mem.has_llm
    mem.add(STALE, user_id="alice", created_at=ago(1))  # stored verbatim, no LLM involved
    assert [r.text for r in mem.all("alice")] == [STALE]
    with pytest.raises(ValueError, match="needs an LLM"):
        mem.add(CORRECTION, user_id="alice", infer=True)


def test_bad_input_is_refused(memory_factory, minilm):
    mem = memory_factory(minilm)
    with pytest.raises(ValueError, match="timezone"):
        mem.add(STALE, user_id="alice", created_at=datetime(2025, 5, 1))
    with pytest.raises(ValueError, match="created_at="):
        mem.add(STALE, user_id="alice", metadata={"created_at": "2025-05-01T00:00:00+00:00"})
    with pytest.raises(ValueError, match="role"):
        mem.add(STALE, user_id="alice", role="system")
    with pytest.raises(ValueError):
        mem.add("   ", user_id="alice")
    with pytest.raises(ValueError):
        mem.search(QUERY, user_id="alice", k=0)
    assert mem.all("alice") == []


def test_server_engine_needs_a_url(make_settings, minilm):
    with pytest.raises(StoreError, match="store.url"):
        Memory.from_settings(make_settings(store__engine="server"), embedder=minilm)


def test_hit_as_dict_rounds():
    h = MemoryHit("t", 0.1234567, 0.5, 0.06172835, "2025-06-01T00:00:00+00:00", "id1", 14.0)
    assert h.as_dict()["similarity"] == 0.123457 and h.as_dict()["kind"] == "conversation"


def test_consolidation_goes_through_the_adiyan_llm_and_smollm2_cannot_hold_it(make_settings, minilm, smollm2):
    """infer=True routes mem0's extraction to our LLM; the embedded smollm2 (2k context) cannot
    even take mem0's prompt, which is why consolidation is off unless a capable LLM is configured."""
    mem = Memory.from_settings(make_settings(), embedder=minilm, llm=smollm2, infer=True)
    try:
        assert mem.infer and mem.has_llm
        with pytest.raises(ModelError, match="context window"):
            mem.add("Hi, I'm Alice; my favourite colour is teal.", user_id="alice")
        assert mem.all("alice") == []
        verbatim = mem.add(STALE, user_id="alice", infer=False)  # per call, consolidation can be skipped
        assert [r.id for r in mem.all("alice")] == [verbatim]
    finally:
        mem.close()
