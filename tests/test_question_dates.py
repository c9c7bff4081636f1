"""Dates in a question matched against when a memory was said (``memory.question_dates``,
adiyan/retrieval/question_dates.py): windows read by hand, the tier in the pure ranking, and the real
minilm and mem0 through Memory.search and the three-part context."""

from datetime import datetime, timezone

import pytest

from adiyan.context import assemble
from adiyan.retrieval.memory_rank import Candidate, rank_memories
from adiyan.retrieval.question_dates import DATE_TIER, REPORT_LAG_DAYS, asks_about_past, question_window


def utc(y, m, d):
    return datetime(y, m, d, tzinfo=timezone.utc)


@pytest.mark.parametrize("question, start, end", [
    ("What movie did Joanna watch on 1 May, 2022?", utc(2022, 5, 1), utc(2022, 5, 9)),
    ("Who did Maria have dinner with on May 3, 2023?", utc(2023, 5, 3), utc(2023, 5, 11)),
    ("What painting did Melanie show on October 13th 2023?", utc(2023, 10, 13), utc(2023, 10, 21)),
    ("What did John attend with his colleagues in March 2023?", utc(2023, 3, 1), utc(2023, 4, 8)),
    ("Which country was Jolene in during the last week of August 2023?", utc(2023, 8, 1), utc(2023, 9, 8)),
    ("What happened in December 2023?", utc(2023, 12, 1), utc(2024, 1, 8)),  # the year rolls over
    ("What happened to John's job situation in 2022?", utc(2022, 1, 1), utc(2023, 1, 8)),
    ("What did Gina buy on 31 February, 2023?", utc(2023, 2, 1), utc(2023, 3, 8)),  # no such day: the month
])
def test_an_absolute_date_names_its_day_month_or_year_and_a_week_after(question, start, end):
    assert REPORT_LAG_DAYS == 7
    assert question_window(question) == (start, end)


@pytest.mark.parametrize("question", [
    "What did Caroline paint last week?",       # relative: depends on when it is asked
    "May I ask what Jon's favourite dance is?",  # "May" is not a month here
    "What did I do in May?",                     # a month without a year
    "How many times did she run 2022 meters?",   # a number, not a year
])
def test_no_date_is_read_where_none_is_named(question):
    assert question_window(question) is None


def test_memories_said_in_the_window_rank_above_the_rest_and_keep_their_order():
    window = question_window("What movie did Joanna watch on 1 May, 2022?")
    cands = [Candidate("march", "Joanna watched Dune.", 0.9, "2022-03-01T12:00:00+00:00"),
             Candidate("may2", "Joanna: I watched The Lord of the Rings last night!", 0.4, "2022-05-02T12:00:00+00:00"),
             Candidate("may5", "Joanna: movies are fun.", 0.5, "2022-05-05T12:00:00+00:00"),
             Candidate("june", "Joanna watched Heat.", 0.8, "2022-06-20T12:00:00+00:00")]
    ranked = rank_memories(cands, now="2022-07-01T00:00:00+00:00", k=None, recency=False, date_window=window)
    assert [r.candidate.id for r in ranked] == ["may5", "may2", "march", "june"]
    by = {r.candidate.id: r for r in ranked}
    assert by["may2"].score == pytest.approx(0.4 + DATE_TIER) and by["may2"].date_match
    assert by["march"].score == pytest.approx(0.9) and not by["march"].date_match
    # a window holding every candidate, or none, changes nothing
    for w in (question_window("What happened in 2022?"), question_window("What happened in 2019?")):
        same = rank_memories(cands, now="2022-07-01T00:00:00+00:00", k=None, recency=False, date_window=w)
        assert [r.candidate.id for r in same] == ["march", "june", "may5", "may2"]
        assert not any(r.date_match for r in same)


SAID = [("I watched Dune at the cinema, what a film.", "2022-03-01"),
        ("We watched Heat on TV, a great film.", "2022-03-15"),
        ("The film festival showed old films all week.", "2022-04-02"),
        ("A film about sailing was on, nice film.", "2022-04-20"),
        ("Last night we saw The Lord of the Rings.", "2022-05-02"),  # the answer, sharing no word with the question
        ("My cat knocked a film reel off the shelf.", "2022-06-01")]


@pytest.mark.parametrize("search", ["dense", "hybrid"])
def test_the_memory_of_the_asked_about_day_joins_the_candidates_and_ranks_first(memory_factory, minilm, search,
                                                                               tmp_path):
    q = "Which film did I watch on 1 May, 2022?"
    found = {}
    for on in (False, True):
        mem = memory_factory(minilm, **{"memory.search": search, "memory.question_dates": on, "memory.recency": False,
                                        "memory.overfetch_min": 2, "memory.overfetch_factor": 1,
                                        "paths.data_dir": str(tmp_path / f"dates-{on}")})
        for text, day in SAID:
            mem.add(text, user_id="u", created_at=f"{day}T12:00:00+00:00")
        mem.add("Another user's film night was on 1 May.", user_id="v", created_at="2022-05-02T13:00:00+00:00")
        found[on] = mem.search(q, user_id="u", k=2, now="2022-07-01T00:00:00+00:00")
    assert "Lord of the Rings" not in " ".join(h.text for h in found[False])  # too far by text for a depth of 2
    first = found[True][0]
    assert "Lord of the Rings" in first.text and first.date_match and first.score > DATE_TIER
    assert all(h.text != "Another user's film night was on 1 May." for h in found[True])  # the window is per user


def test_the_three_part_context_puts_the_dated_memory_first(memory_factory, make_settings, minilm):
    over = {"memory.question_dates": True, "memory.recency": False}
    mem = memory_factory(minilm, **over)
    for text, day in SAID:
        mem.add(text, user_id="u", created_at=f"{day}T12:00:00+00:00")
    ctx = assemble(make_settings(**over), "Which film did I watch on 1 May, 2022?", memory=mem, user_id="u",
                   embedder=minilm, now=datetime(2022, 7, 1, tzinfo=timezone.utc))
    assert "Lord of the Rings" in ctx.facts[0].text
    with pytest.raises(ValueError, match="memory.question_dates"):  # a memory opened without it is refused
        assemble(make_settings(), "hello", memory=mem, user_id="u", embedder=minilm)


@pytest.mark.parametrize("question, past", [
    ("When did Jolene lose a lot of progress in her work?", True),
    ("Where was Caroline born?", True),
    ("What were the kids painting?", True),
    ("What car did he use to drive?", True),
    ("Where has Melanie camped?", True),                      # the present perfect: experience up to now
    ("What books has Melanie read?", True),
    ("How long has Melanie been practicing art?", True),
    ("What is Nate's project called?", False),                # a participle after "'s" (is), not "has"
    ("Do I have a cat?", False),
    ("Where do I live?", False),
    ("When is my dentist appointment?", False),
    ("Am I allergic to cats?", False),
    ("What does Gina want to do with her didgeridoo?", False),  # "did" inside a word is not the auxiliary
])
def test_the_past_tense_is_read_from_its_auxiliary(question, past):
    assert asks_about_past(question) is past


def test_a_past_tense_question_sees_the_corrected_statement_where_it_scored(memory_factory, minilm, tmp_path):
    """Below-superseder ranking: for "Where do I live?" the earlier statement is superseded by the correction
    either way; for "Where did I live?" only with the setting off (on, it keeps its own fused score)."""
    out = {}
    for on in (False, True):
        mem = memory_factory(minilm, **{"memory.recency_scope": "below_superseder", "memory.past_tense_history": on,
                                        "paths.data_dir": str(tmp_path / f"past-{on}")})
        # incident 3's home-town variant (evalsets/incidents/stale_fact.yaml)
        mem.add("I live in Ljubljana.", user_id="u", created_at="2024-01-10T12:00:00+00:00")
        mem.add("I moved last month; I no longer live in Ljubljana, I live in Maribor now.", user_id="u",
                created_at="2024-05-10T12:00:00+00:00")
        for q in ("Where do I live?", "Where did I live?"):
            out[on, q] = {h.text.split(";")[0].split(".")[0]: h for h in mem.search(q, user_id="u", k=2,
                                                                                   now="2024-06-01T00:00:00+00:00")}
    for on in (False, True):  # the present: the correction first either way
        now = out[on, "Where do I live?"]
        assert now["I live in Ljubljana"].superseded_by is not None
        assert now["I moved last month"].score > now["I live in Ljubljana"].score
    before, after = out[False, "Where did I live?"], out[True, "Where did I live?"]
    assert before["I live in Ljubljana"].superseded_by is not None  # off: capped under the correction
    assert after["I live in Ljubljana"].superseded_by is None  # on: its own score, above the correction
    assert after["I live in Ljubljana"].score == pytest.approx(after["I live in Ljubljana"].similarity * 0.5
                                                           + after["I live in Ljubljana"].lexical * 0.5, abs=1e-6)
