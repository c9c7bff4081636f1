"""More memory signals and corrections ordered rather than decayed (issue 43): ``memory.extra_embedders`` /
``memory.signal_weights`` (adiyan/retrieval/memory_rank.fuse, Memory._with_signals) and
``memory.recency_scope=below_superseder``; scores computed by hand, the real minilm, mpnet and mem0."""

import numpy as np
import pytest

from adiyan.context import assemble
from adiyan.memory import Memory
from adiyan.retrieval.memory_rank import BELOW, Candidate, check_signal_weights, fuse, rank_memories

from tests.test_memory_rank import NOW, at, unit  # the same clock and unit vectors as the ranking's tests


def test_fused_score_is_the_normalised_weighted_sum_of_every_signal():
    c = Candidate("a", "x", similarity=0.4, created_at=at(1), lexical=1.0, signals={"mpnet": 0.7, "nomic": 0.5})
    w = {"bm25": 0.2, "mpnet": 0.5, "nomic": 0.5}
    assert fuse(c, "hybrid", 0.5, w) == pytest.approx((0.2 * 1.0 + 0.5 * 0.7 + 0.5 * 0.5) / 1.2)
    assert fuse(c, "hybrid", 0.5, None) == pytest.approx(0.5 * 1.0 + 0.5 * 0.4)  # without weights: as before
    assert fuse(c, "hybrid", 0.5, {"dense": 1.0}) == pytest.approx(0.4)


def test_signal_weights_are_checked_by_name():
    assert check_signal_weights(None, [], "dense") is None
    assert check_signal_weights({"bm25": 0.2, "mpnet": 0.5, "dense": 0}, ["mpnet"], "hybrid") == {"bm25": 0.2,
                                                                                                  "mpnet": 0.5}
    with pytest.raises(ValueError, match="need memory.search=hybrid"):
        check_signal_weights({"mpnet": 1}, ["mpnet"], "dense")
    with pytest.raises(ValueError, match="not a signal"):
        check_signal_weights({"nomic": 1}, ["mpnet"], "hybrid")
    with pytest.raises(ValueError, match="have no weight"):
        check_signal_weights({"bm25": 1}, ["mpnet"], "hybrid")
    with pytest.raises(ValueError, match="needs memory.signal_weights"):
        check_signal_weights(None, ["mpnet"], "hybrid")
    with pytest.raises(ValueError, match="not all 0"):
        check_signal_weights({"bm25": 0, "mpnet": 0}, ["mpnet"], "hybrid")


def test_below_superseder_moves_only_the_superseded_memory_and_only_under_its_superseder():
    # old colour (scores 0.8) superseded by the newer one (0.6, same subject: cosine 1); a trip (0.7) nothing replaced
    cands = [Candidate("old", "My favourite colour is teal.", 0.8, at(60)),
             Candidate("trip", "We went to Lisbon in May.", 0.7, at(300)),
             Candidate("new", "My favourite colour is crimson now.", 0.6, at(20))]
    vecs = unit([1, 0, 0], [0, 1, 0], [1, 0, 0])
    ranked = rank_memories(cands, now=NOW, k=None, scope="below_superseder", vectors=vecs,
                           supersede_min_similarity=0.8)
    assert [r.candidate.id for r in ranked] == ["trip", "new", "old"]
    by = {r.candidate.id: r for r in ranked}
    assert by["old"].score == pytest.approx(0.6 - BELOW) and by["old"].superseded_by == "new"
    assert by["trip"].score == pytest.approx(0.7) and by["trip"].weight == 1.0  # 300 days old, untouched
    # the seed-like decay of the superseded scope, for contrast: the old colour is decayed by its 40-day gap
    decayed = {r.candidate.id: r for r in rank_memories(cands, now=NOW, k=None, scope="superseded", vectors=vecs,
                                                        supersede_min_similarity=0.8, half_life_days=14)}
    assert decayed["old"].score == pytest.approx(0.8 * 0.5 ** (40 / 14))


def test_below_superseder_keeps_a_lower_scoring_old_memory_where_it_is_and_orders_a_chain():
    vecs = unit([1, 0], [1, 0], [1, 0])
    cands = [Candidate("a", "colour teal", 0.9, at(90)), Candidate("b", "colour crimson now", 0.5, at(60)),
             Candidate("c", "colour green now", 0.7, at(30))]
    ranked = rank_memories(cands, now=NOW, k=None, scope="below_superseder", vectors=vecs,
                           supersede_min_similarity=0.8)
    assert [r.candidate.id for r in ranked] == ["c", "b", "a"]  # newest first along the chain
    by = {r.candidate.id: r for r in ranked}
    assert by["b"].score == pytest.approx(0.5)  # already below its superseder c: unchanged
    assert by["a"].score == pytest.approx(0.5 - BELOW, abs=1e-12)  # under the lowest of its superseders (b)


def test_below_superseder_caps_a_memory_under_a_superseder_that_was_itself_capped():
    vecs = unit([1, 0], [1, 0], [1, 0])
    cands = [Candidate("a", "colour teal", 0.9, at(90)), Candidate("b", "colour crimson now", 0.8, at(60)),
             Candidate("c", "colour green now", 0.7, at(30))]
    ranked = rank_memories(cands, now=NOW, k=None, scope="below_superseder", vectors=vecs,
                           supersede_min_similarity=0.8)
    by = {r.candidate.id: r.score for r in ranked}
    assert [r.candidate.id for r in ranked] == ["c", "b", "a"]
    assert by["b"] == pytest.approx(0.7 - BELOW, abs=1e-12) and by["a"] == pytest.approx(0.7 - 2 * BELOW, abs=1e-12)
    assert by["c"] > by["b"] > by["a"]


def test_an_extra_embedder_ranks_by_its_own_cosine(memory_factory, minilm, mpnet):
    texts = ["I keep bees on the roof.", "My brother repairs old clocks.", "We grow tomatoes in the garden.",
             "The bakery sells rye bread."]
    plain = memory_factory(minilm, **{"memory.search": "hybrid", "memory.recency": False})
    mem = Memory(minilm, path=plain.where + "-signals", history_dir=plain.where + "-h", search="hybrid", recency=False,
                 extra_embedders={"mpnet": mpnet}, signal_weights={"mpnet": 1.0})
    try:
        for i, t in enumerate(texts):
            mem.add(t, user_id="u", created_at=at(10 + i))
        q = "Who fixes antique timepieces?"
        v = mpnet.embed([q], "query")[0]
        d = mpnet.embed(texts, "document")
        cos = d @ v / (np.linalg.norm(d, axis=1) * np.linalg.norm(v))
        expected = [texts[i] for i in np.argsort(-cos, kind="stable")]
        hits = mem.search(q, user_id="u", k=4, now=NOW)
        assert [h.text for h in hits] == expected
        assert [h.score for h in hits] == pytest.approx(sorted(cos.tolist(), reverse=True), abs=1e-5)
    finally:
        mem.close()


def test_the_context_refuses_a_memory_opened_with_other_signals(memory_factory, make_settings, minilm):
    mem = memory_factory(minilm, **{"memory.search": "hybrid"})
    settings = make_settings(**{"memory.search": "hybrid", "memory.extra_embedders": ["mpnet"],
                                "memory.signal_weights": {"bm25": 0.5, "mpnet": 0.5}})
    with pytest.raises(ValueError, match="memory.extra_embedders"):
        assemble(settings, "hello", memory=mem, user_id="u", embedder=minilm, now=NOW)
