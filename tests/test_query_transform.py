"""Query transformation (split, HyDE) before retrieval, under the access policy."""

import pytest

from adiyan.cache import CallCache
from adiyan.factory import open_kb, open_retriever
from adiyan.models.base import Completion
from adiyan.retrieval.pipeline import Retriever
from adiyan.retrieval.transform import split_question
from adiyan.store import open_store


def test_split_by_hand():
    assert split_question("What does the Julian Alps Weekend cost and which hotel is used on day 2?") == [
        "What does the Julian Alps Weekend cost?", "which hotel is used on day 2?"]
    assert split_question("What is form EQ-5 used for; who signs it?") == ["What is form EQ-5 used for?", "who signs it?"]
    # "and" between nouns is not a second question; short fragments are not parts
    assert split_question("What are the office hours on Saturday and Sunday?") == [
        "What are the office hours on Saturday and Sunday?"]
    assert split_question("Price? And?") == ["Price? And?"]


@pytest.fixture
def kb(make_settings, minilm):
    s = make_settings()
    store = open_store(s)
    kb = open_kb(s, embedder=minilm, store=store)
    kb.settings = s  # test convenience: the settings the pipeline is built from
    kb.ingest_text("# Prices\n\nThe Julian Alps Weekend costs 450 euros per person.", "prices.md", "office", "global")
    kb.ingest_text("# Hotels\n\nOn day 2 of the lakes tour guests sleep at Hotel Dachsteinblick.", "hotels.md",
                   "office", "global")
    kb.ingest_text("# Packing\n\nBring rain gear and sturdy boots for every hike.", "packing.md", "office", "global")
    kb.ingest_text("# Alice\n\nAlice's private note: the Julian Alps Weekend hotel code is ALICE-77.", "note.md",
                   "alice", "private")
    yield kb
    store.close()


def retrieve(kb, question, requester, *, mode, top_k=None, llm=None, cache=None):
    """The production pipeline with ``retrieval.query_transform=mode``."""
    s = kb.settings.with_overrides({"retrieval.query_transform": mode})
    if mode == "hyde":
        return Retriever(kb, s.retrieval, floor=0.0, llm=llm, cache=cache).retrieve(question, requester, top_k=top_k)
    return open_retriever(s, kb).retrieve(question, requester, top_k=top_k)


def test_split_fuses_the_parts_and_finds_both_sources(kb):
    q = "What does the Julian Alps Weekend cost and where do guests sleep on day 2 of the lakes tour?"
    res = retrieve(kb, q, "bob", top_k=2, mode="split")
    assert {c.source for c in res.chunks} == {"office/prices.md", "office/hotels.md"}
    assert res.query == q and res.describe() == "dense+split"
    # RRF scores: 1/(k + rank) summed over the runs a chunk is in (k = 60): three runs here
    assert all(0 < c.score <= 3 / 61 + 1e-12 for c in res.chunks)


def test_no_transformation_leaks_a_private_chunk(kb):
    for mode in ("none", "split"):
        res = retrieve(kb, "What is the Julian Alps Weekend hotel code and what does it cost?", "bob",
                                 top_k=4, mode=mode)
        assert res.chunks and all(not c.source.startswith("alice/") for c in res.chunks), mode
    mine = retrieve(kb, "Julian Alps Weekend hotel code", "alice", top_k=4, mode="split")
    assert mine.chunks[0].source == "alice/note.md"


class ScriptedLLM:
    """Test double for control flow only: returns a fixed passage and counts calls."""

    id = "scripted"

    def __init__(self, text):
        self.text, self.calls = text, 0

    def chat(self, messages, *, max_tokens=None, temperature=None):
        self.calls += 1
        assert "Question: where is the overnight stop?" in messages[-1].content
        return Completion(text=self.text)


def test_hyde_searches_the_generated_passage_and_caches_it(kb, tmp_path):
    llm = ScriptedLLM("Guests sleep at Hotel Dachsteinblick on the second day of the lakes tour.")
    cache = CallCache(tmp_path / "calls.sqlite", "hyde")
    res = retrieve(kb, "where is the overnight stop?", "bob", top_k=1, mode="hyde", llm=llm, cache=cache)
    assert res.chunks[0].source == "office/hotels.md" and res.describe() == "dense+hyde"
    again = retrieve(kb, "where is the overnight stop?", "bob", top_k=1, mode="hyde", llm=llm, cache=cache)
    assert llm.calls == 1 and again.chunks[0].source == "office/hotels.md"
    # the passage copies the private text: the store query still filters it out
    leak = ScriptedLLM("Alice's private note: the Julian Alps Weekend hotel code is ALICE-77.")
    res = retrieve(kb, "where is the overnight stop?", "bob", top_k=4, mode="hyde", llm=leak)
    assert res.chunks and all(not c.source.startswith("alice/") for c in res.chunks)


def test_hyde_without_an_llm_is_a_clear_error(kb):
    with pytest.raises(ValueError, match="hyde needs an LLM"):
        retrieve(kb, "anything", "bob", mode="hyde")


def test_an_empty_hyde_passage_is_a_counted_failure_not_a_hyde_search(kb, tmp_path):
    """An empty generation falls back to the question, says so, is counted and is not cached."""
    llm = ScriptedLLM("")
    cache = CallCache(tmp_path / "calls.sqlite", "hyde")
    s = kb.settings.with_overrides({"retrieval.query_transform": "hyde"})
    r = Retriever(kb, s.retrieval, floor=0.0, llm=llm, cache=cache)
    res = r.retrieve("where is the overnight stop?", "bob", top_k=1)
    assert res.transform_failed and "empty passage" in res.transform_failed
    assert res.queries == ["where is the overnight stop?"] and res.describe() == "dense+hyde(failed)"
    assert r.transform_failures == 1
    r.retrieve("where is the overnight stop?", "bob", top_k=1)
    assert llm.calls == 2 and r.transform_failures == 2  # the failure was not replayed from the cache
