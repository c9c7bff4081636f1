"""Context assembly: the seed's fixed order, the stated truncation policy, sources carried."""

from adiyan.generation import NO_CONTEXT_ANSWER, Answer, answer_question, assemble_context
from adiyan.kb import RetrievedChunk


def words(n: int, w: str = "word") -> str:
    return " ".join([w] * n)


def chunk(i: int, text: str) -> RetrievedChunk:
    return RetrievedChunk(f"office/doc{i}.md", i, 0.9 - i / 10, text)


def count_words(text: str) -> int:  # a tokenizer we can check by hand: one token per word
    return len(text.split())


def test_fixed_order_memory_history_then_message():
    ctx = assemble_context("What now?", [chunk(0, "The tour costs 450 euros.")],
                           memory=["likes crimson"], history=[{"role": "user", "content": "hello"},
                                                              {"role": "assistant", "content": "hi there"}])
    roles = [m.role for m in ctx.messages]
    assert roles == ["system", "user", "assistant", "user"]
    system = ctx.messages[0].content
    assert system.index("Context:") < system.index("[1] (office/doc0.md)") < system.index("What you remember")
    assert ctx.messages[-1].content == "What now?"
    assert ctx.used == [{"source": "office/doc0.md", "chunk_index": 0}]
    assert not ctx.truncated


def test_budget_keeps_question_then_passages_then_memory_then_newest_history():
    # budget 30 tokens (words): question 3 → 27 left; passage blocks are "[i] (src)" + text:
    # 2 header tokens + 10 words = 12 each → two fit (24), 3 left; the third (12) is cut since a
    # quarter (3) fits: the longest prefix within 3 words is "[3] …" ("(office/doc2.md)\nw2" is
    # 2 words); 1 token is left: the memory line "- m1 m2" (3) is dropped, the history turn
    # "old" (1) still fits, so 3 + 24 + 2 + 1 = 30 tokens are used.
    chunks = [chunk(i, words(10, f"w{i}")) for i in range(3)]
    ctx = assemble_context("one two three", chunks, memory=["m1 m2"], history=[{"role": "user", "content": "old"}],
                           budget_tokens=30, count=count_words)
    assert [u["chunk_index"] for u in ctx.used] == [0, 1, 2]
    assert ctx.used[2].get("partial") is True and "partial" not in ctx.used[0]
    assert ctx.messages[0].content.endswith("[3] …") and ctx.tokens == 30
    assert ctx.dropped == {"passages": 0, "memory": 1, "history": 0}
    assert [m.content for m in ctx.messages[1:-1]] == ["old"]
    assert ctx.truncated
    assert ctx.messages[-1].content == "one two three"


def test_history_is_dropped_oldest_first():
    hist = [{"role": "user", "content": words(5, "old")}, {"role": "assistant", "content": words(5, "new")}]
    ctx = assemble_context("q", [], history=hist, budget_tokens=7, count=count_words)
    assert [m.content for m in ctx.messages[1:-1]] == [words(5, "new")]
    assert ctx.dropped["history"] == 1


def test_strict_grounding_without_context_says_so_without_calling_the_model(make_settings):
    class NoCallLLM:  # control-flow double: any call is a failure
        id = "none"

        def chat(self, *a, **k):
            raise AssertionError("the model must not be called without context under strict grounding")

    ans = answer_question(NoCallLLM(), "What is the safe code?", [], make_settings())
    assert isinstance(ans, Answer) and ans.text == NO_CONTEXT_ANSWER and ans.used == []


def test_answer_carries_its_sources_with_the_real_model(make_settings, smollm2):
    s = make_settings()
    chunks = [chunk(0, "The Julian Alps Weekend (TR-JUL-03) costs 450 euros per person."),
              chunk(1, "Office hours are 9 to 17 on weekdays.")]
    ans = answer_question(smollm2, "How much does the Julian Alps Weekend cost per person?", chunks, s)
    assert "450" in ans.text
    assert ans.used == [{"source": "office/doc0.md", "chunk_index": 0}, {"source": "office/doc1.md", "chunk_index": 1}]
    assert ans.prompt_tokens and ans.prompt_tokens > 20


def test_a_sampled_answer_is_cached_under_its_seed_and_replays(make_settings):
    """eval.repeats draws answers at temperature > 0 under seed+i: each is kept under a key holding the
    temperature and the seed, so a re-run replays it, and another seed (or temperature) asks again."""
    from adiyan.cache import call_cache
    from adiyan.models.base import Completion

    class CountingLLM:  # control-flow double: a different reply per call, so a replay is visible
        id = "counting-double"
        calls = 0

        def chat(self, messages, **_):
            CountingLLM.calls += 1
            return Completion(f"draw {CountingLLM.calls}", prompt_tokens=10, completion_tokens=2)

    chunks = [chunk(0, "The Julian Alps Weekend (TR-JUL-03) costs 450 euros per person.")]
    q = "How much does the Julian Alps Weekend cost?"
    s7 = make_settings(**{"llm.temperature": 0.7, "llm.seed": 7})
    cache = call_cache(s7, "answer")
    first = answer_question(CountingLLM(), q, chunks, s7, cache=cache)
    again = answer_question(CountingLLM(), q, chunks, s7, cache=cache)
    assert (first.text, first.cached, again.text, again.cached, CountingLLM.calls) == ("draw 1", False, "draw 1", True, 1)
    other_seed = answer_question(CountingLLM(), q, chunks, s7.with_overrides({"llm.seed": 8}), cache=cache)
    hotter = answer_question(CountingLLM(), q, chunks, s7.with_overrides({"llm.temperature": 0.9}), cache=cache)
    assert (other_seed.text, hotter.text, CountingLLM.calls) == ("draw 2", "draw 3", 3)
