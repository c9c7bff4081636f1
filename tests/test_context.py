"""The three-part context (adiyan/context.py) with real mem0 memory and the real MiniLM embedder:
facts -> history -> message in that order, irrelevant history filtered at the threshold, a
corrected fact's stale version kept out only when recency re-ranking is on, another user's
private memory never in the context, and conversations persisted under the data directory.
"""

from __future__ import annotations

import pytest

from adiyan.context import Conversation, assemble, answer, filter_history
from adiyan.factory import open_memory
from adiyan.models.base import Completion, as_messages
from adiyan.types import RetrievedChunk


class RecordingLLM:
    """Test double for control flow only: records the messages it is sent, answers a fixed text."""

    id = "recording"
    context_size = 4096

    def __init__(self):
        self.sent = []

    def chat(self, messages, *, max_tokens=None, temperature=None):
        self.sent.append(as_messages(messages))
        return Completion("recorded")


@pytest.fixture
def memory(make_settings, minilm):
    s = make_settings()
    mem = open_memory(s, minilm, None, infer=False)
    yield mem
    mem.close()


def test_context_order_is_facts_then_history_then_message(make_settings, minilm, memory):
    s = make_settings(**{"conversation.history_min_relevance": -1.0})
    memory.add("My daughter is 10 years old and travels with me.", user_id="ana", created_at="2025-05-01T10:00:00+00:00")
    history = [{"role": "user", "content": "Which tours have a minimum age for children?"},
               {"role": "assistant", "content": "The Triglav Lakes Trek has a minimum age of 14."}]
    ctx = assemble(s, "What child discount would my daughter get?", memory=memory, user_id="ana", history=history,
                   embedder=minilm, now="2025-05-01T10:05:00+00:00")
    assert [h.text for h in ctx.facts] == ["My daughter is 10 years old and travels with me."]
    llm = RecordingLLM()
    chunk = RetrievedChunk("adiyan-office/price_list.md", 3, 0.7, "A child aged 4 to 11 receives a 30% discount.")
    answer(llm, ctx, [chunk], s)
    sent = llm.sent[0]
    flat = [(i, m["role"], m["content"]) for i, m in enumerate(sent)]
    # the passages and the facts are in the system message, the facts after the passages
    system = sent[0]["content"]
    assert system.index("30% discount") < system.index("My daughter is 10 years old")
    # then the history turns, in order, then the new message last
    assert [m["content"] for m in sent[1:]] == [history[0]["content"], history[1]["content"],
                                              "What child discount would my daughter get?"]
    assert flat[-1][1] == "user"


def test_irrelevant_history_turn_is_filtered_at_the_threshold(minilm):
    message = "Is there a minimum age for the Triglav Lakes Trek?"
    history = [{"role": "user", "content": "How much does the Triglav Lakes Trek cost?"},
               {"role": "user", "content": "My cat knocked a vase off the kitchen shelf this morning."}]
    _, scored = filter_history(message, history, minilm, window=6, min_relevance=-1.0)
    trek, cat = (s["relevance"] for s in scored)
    assert trek > 0.5 > 0.1 > cat  # measured: 0.75 and 0.02 with MiniLM
    kept, scored = filter_history(message, history, minilm, window=6, min_relevance=0.3)
    assert [t["content"] for t in kept] == [history[0]["content"]]
    assert [s["kept"] for s in scored] == [True, False]
    # the threshold decides exactly: just under the irrelevant turn's relevance it stays, just over it goes
    assert len(filter_history(message, history, minilm, window=6, min_relevance=cat - 1e-4)[0]) == 2
    assert len(filter_history(message, history, minilm, window=6, min_relevance=cat + 1e-4)[0]) == 1
    # the window counts turns from the newest back
    kept, scored = filter_history(message, history, minilm, window=1, min_relevance=-1.0)
    assert [t["content"] for t in kept] == [history[1]["content"]]


def _correction_context(make_settings, minilm, memory, recency: bool):
    s = make_settings(**{"memory.recency": recency, "memory.half_life_days": 14})
    memory.add("Our group is 6 friends travelling together.", user_id="femi", created_at="2025-01-05T19:00:00+00:00",
               metadata={"fact_id": "old"})
    memory.add("Our group is now 8 people travelling together.", user_id="femi",
               created_at="2025-02-20T19:00:00+00:00", metadata={"fact_id": "new"})
    ctx = assemble(s, "Do we get a group discount with our group size?", memory=memory, user_id="femi",
                   embedder=minilm, now="2025-03-10T19:00:00+00:00")
    return ctx.fact_ids()


def test_stale_fact_is_kept_out_only_with_recency(make_settings, minilm, memory):
    with_recency = _correction_context(make_settings, minilm, memory, recency=True)
    assert with_recency == ["new"]
    memory.delete_all("femi")
    without = _correction_context(make_settings, minilm, memory, recency=False)
    assert set(without) == {"new", "old"}  # the setting matters: without recency the stale fact reaches it


def test_corrected_preference_uses_the_newest(make_settings, minilm, memory):
    s = make_settings()
    memory.add("Explain things simply: I am a beginner hiker.", user_id="jonas", kind="coaching",
               created_at="2025-01-02T09:00:00+00:00")
    memory.add("Be technical with me: I am now an experienced alpine hiker.", user_id="jonas", kind="coaching",
               created_at="2025-03-15T09:00:00+00:00")
    ctx = assemble(s, "How fit do I need to be for a grade 3 tour?", memory=memory, user_id="jonas",
                   embedder=minilm, now="2025-04-01T09:00:00+00:00")
    assert ctx.fact_lines() == ["(preference) Be technical with me: I am now an experienced alpine hiker. "
                                "(said 2025-03-15)"]
    # a preference said after the turn (a replay's later turn) is not known yet
    ctx = assemble(s, "How fit do I need to be?", memory=memory, user_id="jonas", embedder=minilm,
                   now="2025-02-01T09:00:00+00:00")
    assert [h.text for h in ctx.facts] == ["Explain things simply: I am a beginner hiker."]


def test_another_users_private_memory_never_reaches_the_context(make_settings, minilm, memory):
    s = make_settings(**{"conversation.facts_min_similarity": -1.0, "conversation.facts_min_relative": 0.0})
    secret = "My passport number is X1234567 and my blood type is AB negative."
    memory.add(secret, user_id="bob", created_at="2025-01-01T00:00:00+00:00")
    memory.add("I like window seats.", user_id="alice", created_at="2025-01-01T00:00:00+00:00")
    q = "What is my passport number and blood type?"
    bob = assemble(s, q, memory=memory, user_id="bob", embedder=minilm, now="2025-02-01T00:00:00+00:00")
    assert secret in [h.text for h in bob.facts]  # the probe can fail: its owner does get it
    alice = assemble(s, q, memory=memory, user_id="alice", embedder=minilm, now="2025-02-01T00:00:00+00:00")
    assert [h.text for h in alice.facts] == ["I like window seats."]  # no floors: everything of hers, nothing of bob's


def test_conversation_persists_and_remembers_user_turns(make_settings, minilm, memory):
    s = make_settings()
    conv = Conversation.load(s, "trip-1", "ana", memory=memory, embedder=minilm)
    conv.add_turn("user", "I am travelling with my 10-year-old daughter.", at="2025-05-01T10:00:00+00:00")
    conv.add_turn("assistant", "Noted.", at="2025-05-01T10:00:05+00:00")
    again = Conversation.load(s, "trip-1", "ana", memory=memory, embedder=minilm)
    assert [(t["role"], t["content"]) for t in again.history] == [
        ("user", "I am travelling with my 10-year-old daughter."), ("assistant", "Noted.")]
    assert again.path == s.paths.data_dir / "conversations" / "ana" / "trip-1.jsonl"
    assert [m.text for m in memory.all("ana")] == ["I am travelling with my 10-year-old daughter."]  # user turns only
    with pytest.raises(ValueError, match="conversation id '../x'"):
        Conversation.load(s, "../x", "ana", memory=memory, embedder=minilm)
    again.path.write_text('{"role": "user", "content": "ok"}\nnot json\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"trip-1\.jsonl:2: not valid JSON"):
        Conversation.load(s, "trip-1", "ana", memory=memory, embedder=minilm)
