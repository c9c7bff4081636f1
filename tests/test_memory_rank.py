"""Memory ranking (adiyan/retrieval/memory_rank.py) and the memory's hybrid search and supersession
(adiyan/memory.py): scores computed by hand, leaks that must not happen, with the real minilm and mem0."""

from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from adiyan.retrieval.bm25 import BM25Retriever
from adiyan.retrieval.memory_rank import Candidate, rank_memories, states_change, supersessions, with_lexical

NOW = datetime(2025, 6, 1, 12, tzinfo=timezone.utc)
H = 14.0


def at(days_ago: float) -> str:
    return (NOW - timedelta(days=days_ago)).isoformat()


def unit(*rows):
    v = np.asarray(rows, dtype=np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


# -- the pure ranking -------------------------------------------------------------------------------

def test_states_change_reads_whole_words():
    assert states_change("Actually it is crimson, not teal.")
    assert states_change("From now on put me on the evening slots")
    assert states_change("mornings don't work any  more")  # a phrase across two spaces
    assert not states_change("I know the notice board is by the door")  # 'know', 'notice': no whole cue word
    assert not states_change("My favourite colour is teal.")


def test_seed_scope_decays_every_memory_by_its_age():
    cands = [Candidate("old", "I was born in Porto.", 0.6, at(200)), Candidate("new", "Lunch was curry.", 0.3, at(1))]
    ranked = rank_memories(cands, now=NOW, k=None, scope="all", half_life_days=H)
    by = {r.candidate.id: r for r in ranked}
    assert by["old"].weight == pytest.approx(0.5 ** (200 / H))
    assert by["old"].score == pytest.approx(0.6 * 0.5 ** (200 / H))
    assert by["new"].score == pytest.approx(0.3 * 0.5 ** (1 / H))
    assert [r.candidate.id for r in ranked] == ["new", "old"]  # the distant past is buried: 0.6 x 5e-5 < 0.3 x 0.95


def test_superseded_scope_keeps_the_past_and_decays_only_what_a_newer_memory_replaces():
    # old fact, unrelated to the newer distractor (cosine 0): kept at weight 1;
    # stale statement and its correction (cosine 0.8 >= 0.7): stale decayed by the 29-day gap.
    cands = [Candidate("fact", "I was born in Porto.", 0.6, at(200)),
             Candidate("distractor", "Lunch was curry.", 0.3, at(1)),
             Candidate("stale", "My favourite colour is teal.", 0.78, at(30)),
             Candidate("fix", "My favourite colour is crimson.", 0.72, at(1))]
    vecs = unit([1, 0, 0], [0, 1, 0], [0, 0, 1], [0, 0.6, 0.8])  # cos(stale, fix) = 0.8, cos(distractor, fix) = 0.6
    ranked = rank_memories(cands, now=NOW, k=None, scope="superseded", half_life_days=H, vectors=vecs,
                           supersede_min_similarity=0.7, supersede_cue_min_similarity=0.3)
    by = {r.candidate.id: r for r in ranked}
    assert by["fact"].weight == 1.0 and by["fact"].score == pytest.approx(0.6)
    assert by["distractor"].weight == 1.0  # as old as "fix" (not newer) and unlike the fact: never superseded
    assert by["stale"].superseded_by == "fix"
    assert by["stale"].weight == pytest.approx(0.5 ** (29 / H))
    assert by["fix"].weight == 1.0
    assert [r.candidate.id for r in ranked] == ["fix", "fact", "distractor", "stale"]


def test_a_change_cue_lowers_the_threshold_and_only_newer_memories_supersede():
    old = Candidate("old", "My day rate is 180 euros.", 0.5, at(100))
    plain = Candidate("plain", "My day rate is 210 euros.", 0.5, at(10))
    cue = Candidate("cue", "New contract: I charge 210 from now on.", 0.5, at(10))
    vecs = unit([1, 0], [0.5, 0.866], [0.5, 0.866])  # cosine 0.5 with the old statement
    assert supersessions([old, plain], vecs[:2], 0.7, 0.3) == {}  # 0.5 < 0.7 and no cue
    assert supersessions([old, cue], vecs[[0, 2]], 0.7, 0.3) == {0: 1}  # a cue: 0.5 >= 0.3
    assert supersessions([cue, old], vecs[[2, 0]], 0.7, 0.3) == {1: 0}  # order of the list does not matter
    same_day = Candidate("same", "Now it is 210.", 0.5, at(100))
    assert supersessions([old, same_day], vecs[[0, 2]], 0.7, 0.3) == {}  # not strictly newer


def test_hybrid_is_the_convex_mix_of_bm25_share_and_cosine():
    cands = with_lexical([Candidate("a", "x", 0.4, at(5)), Candidate("b", "y", 0.7, at(5)),
                          Candidate("c", "z", 0.2, at(5))], {"a": 6.0, "c": 3.0})
    assert [c.lexical for c in cands] == [1.0, 0.0, 0.5]
    ranked = rank_memories(cands, now=NOW, k=2, search="hybrid", lexical_weight=0.5, recency=False)
    assert [(r.candidate.id, round(r.score, 6)) for r in ranked] == [("a", 0.7), ("b", 0.35)]


# -- the memory, real mem0 and minilm ----------------------------------------------------------------

def test_hybrid_search_finds_a_rare_term_and_scores_it_as_computed_by_hand(memory_factory, minilm):
    mem = memory_factory(minilm, **{"memory.search": "hybrid", "memory.recency": False})
    texts = ["My locker at the depot is number 17.", "The depot lockers are being repainted this week.",
             "I keep my boots in the van.", "The depot opens at six."]
    ids = [mem.add(t, user_id="tomas", created_at=at(10 + i)) for i, t in enumerate(texts)]
    query = "locker 17"
    hits = mem.search(query, user_id="tomas", k=4, now=NOW)
    bm = BM25Retriever().index(ids, texts)
    s = bm.scores(query)
    best = float(s.max())
    q = minilm.embed([query], "query")[0]
    d = minilm.embed(texts, "document")
    for h in hits:
        i = ids.index(h.id)
        cos = float(d[i] @ q / np.linalg.norm(d[i]) / np.linalg.norm(q))
        assert h.lexical == pytest.approx(float(s[i]) / best, abs=1e-6)
        assert h.similarity == pytest.approx(cos, abs=1e-4)
        assert h.score == pytest.approx(0.5 * float(s[i]) / best + 0.5 * cos, abs=1e-4)
    assert hits[0].id == ids[0]


def test_hybrid_search_never_reads_another_users_memories(memory_factory, minilm):
    mem = memory_factory(minilm, **{"memory.search": "hybrid", "memory.recency_scope": "superseded"})
    mem.add("My bank PIN is 4321 and my locker code is 9988.", user_id="alice", created_at=at(3))
    bob = mem.add("I prefer window seats on trains.", user_id="bob", created_at=at(2))
    for q in ("bank PIN 4321 locker code 9988", "What is my bank PIN?"):
        assert [h.id for h in mem.search(q, user_id="bob", k=10, now=NOW)] == [bob]
    assert mem.search("bank PIN", user_id="carol", k=5, now=NOW) == []


def test_the_lexical_index_follows_new_memories(memory_factory, minilm):
    mem = memory_factory(minilm, **{"memory.search": "hybrid", "memory.recency": False})
    mem.add("The office closes at 18:00.", user_id="office", created_at=at(20))
    assert mem.search("kayak supplier", user_id="office", k=2, now=NOW)[0].lexical == 0.0
    new = mem.add("The kayak supplier is BlueWave Rentals.", user_id="office", created_at=at(5))
    top = mem.search("kayak supplier", user_id="office", k=2, now=NOW)[0]
    assert top.id == new and top.lexical == 1.0


def test_superseded_scope_keeps_an_old_fact_that_the_seed_decay_buries(memory_factory, minilm):
    fact, distractor = "I'm allergic to peanuts, so keep them out of my packed lunches.", \
        "Lunch on today's tour was a lovely lentil curry at the river cafe."
    question = "What food allergy do I have?"
    seed = memory_factory(minilm, **{"memory.recency_scope": "all"})
    f_id = seed.add(fact, user_id="mira", created_at=at(200))
    d_id = seed.add(distractor, user_id="mira", created_at=at(1))
    assert [h.id for h in seed.search(question, user_id="mira", k=2, now=NOW)] == [d_id, f_id]
    seed.close()
    kept = memory_factory(minilm, **{"memory.recency_scope": "superseded"})  # the same store, reopened
    hits = kept.search(question, user_id="mira", k=2, now=NOW)
    assert [h.id for h in hits] == [f_id, d_id] and hits[0].weight == 1.0 and hits[0].superseded_by is None


def test_the_newest_superseder_sets_the_gap_and_a_correction_said_after_now_supersedes_nothing():
    old = Candidate("old", "My rate is 180.", 0.5, at(100))
    mid = Candidate("mid", "Now my rate is 200.", 0.5, at(40))
    new = Candidate("new", "Now my rate is 210.", 0.5, at(10))
    vecs = unit([1, 0], [1, 0], [1, 0])  # every pair restates the subject (cosine 1)
    ranked = {r.candidate.id: r for r in rank_memories([old, mid, new], now=NOW, k=None, scope="superseded",
                                                        half_life_days=H, vectors=vecs)}
    assert ranked["old"].superseded_by == "new" and ranked["old"].weight == pytest.approx(0.5 ** (90 / H))
    assert ranked["mid"].superseded_by == "new" and ranked["mid"].weight == pytest.approx(0.5 ** (30 / H))
    assert ranked["new"].weight == 1.0
    # asked 20 days ago, "new" was not said yet: it supersedes nothing, "mid" supersedes "old" by 60 days
    then = NOW - timedelta(days=20)
    ranked = {r.candidate.id: r for r in rank_memories([old, mid, new], now=then, k=None, scope="superseded",
                                                        half_life_days=H, vectors=vecs)}
    assert ranked["old"].superseded_by == "mid" and ranked["old"].weight == pytest.approx(0.5 ** (60 / H))
    assert ranked["mid"].weight == 1.0 and ranked["mid"].superseded_by is None


def test_hybrid_brings_a_memory_outside_the_dense_over_fetch_and_the_replay_ranks_it_alike(memory_factory, minilm):
    """k=1 over-fetches 10 by cosine; twelve memories about trains outrank, by cosine, the one that names the
    rare locker number asked for: hybrid search joins it from BM25 (cosine computed here) and ranks it first,
    and the LoCoMo candidate replay, from its own cached cosine list, returns the same hit."""
    from adiyan.eval.locomo.paths import CandidateMemory

    mem = memory_factory(minilm, **{"memory.search": "hybrid", "memory.recency": False})
    noise = [f"The train to Porto number {n} left late again, the train was full." for n in range(12)]
    for i, t in enumerate(noise):
        mem.add(t, user_id="u", created_at=at(30 + i))
    target = mem.add("Locker Q7781 holds the spare keys.", user_id="u", created_at=at(5))
    q = "the train to Porto left late again and was full Q7781"
    dense = mem.dense_candidates(q, user_id="u", kind="conversation", depth=10)
    assert target not in [c.id for c in dense]  # outside the cosine over-fetch
    hits = mem.search(q, user_id="u", k=1, now=NOW)
    assert [h.id for h in hits] == [target] and hits[0].lexical == 1.0
    qv = minilm.embed([q], "query")[0]
    dv = minilm.embed(["Locker Q7781 holds the spare keys."], "document")[0]
    assert hits[0].similarity == pytest.approx(float(qv @ dv / np.linalg.norm(qv) / np.linalg.norm(dv)), abs=1e-5)
    cm = CandidateMemory(mem, depth=12)
    got = cm.search(q, user_id="u", k=1, now=NOW)
    assert [(h.id, round(h.score, 9)) for h in got] == [(h.id, round(h.score, 9)) for h in hits]


def test_the_lexical_index_forgets_deleted_memories(memory_factory, minilm):
    mem = memory_factory(minilm, **{"memory.search": "hybrid", "memory.recency": False})
    mem.add("My locker code is 9988.", user_id="u", created_at=at(3))
    assert mem.search("locker 9988", user_id="u", k=1, now=NOW)[0].lexical == 1.0
    assert mem.delete_all("u") == 1
    assert mem.search("locker 9988", user_id="u", k=1, now=NOW) == [] and mem.lexical_scores("locker", "u") == ({}, {})
