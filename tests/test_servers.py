"""The OpenAI-compatible path end to end over real HTTP, against a real server and real models.

llama-cpp-python's own server (tests/servers.py) serves the packaged SmolLM2 GGUF (chat) and the
nomic-embed-text GGUF (embeddings) on a loopback port; generation, the judge, HyDE, mem0 and the
embedder are configured with ``openai-compatible:URL`` exactly as a user would, and what comes
back is checked against llama.cpp run in-process on the same files. The failure cases (slow,
down, malformed) are in test_servers_faults.py; Ollama, which is not available here, in
test_servers_ollama.py (recorded responses).
"""

from __future__ import annotations

import pytest

from adiyan.cache import call_cache
from adiyan.eval.judge.client import judge_from_settings
from adiyan.factory import open_embedder, open_kb, open_llm, open_memory, open_retriever
from adiyan.generation import answer_question, assemble_context
from adiyan.models import ModelError, ModelResponseError
from adiyan.models.base import cosine
from adiyan.retrieval.transform import HYDE_PROMPT
from adiyan.store import open_store
from servers import CHAT_ALIAS, EMBED_ALIAS, llama_server, over_http  # noqa: F401 - llama_server: a fixture

pytestmark = pytest.mark.slow  # a server start and ~10 generations on one thread: 76 s here under load

# llama_cpp.server's sampler defaults that the OpenAI API cannot set (the in-process
# LlamaCppLLM uses llama-cpp-python's create_chat_completion defaults, repeat_penalty 1.0)
SERVER_REPEAT_PENALTY = 1.1
DOCS = [
    ("# Prices\n\nThe Julian Alps Weekend costs 450 euros per person.", "prices.md", "office", "global"),
    ("# Hotels\n\nOn day 2 of the lakes tour guests sleep at Hotel Dachsteinblick.", "hotels.md", "office", "global"),
    ("# Packing\n\nBring rain gear and sturdy boots for every hike.", "packing.md", "office", "global"),
    ("# Alice\n\nAlice's private note: the Julian Alps Weekend hotel code is ALICE-77.", "note.md", "alice", "private"),
]


@pytest.fixture(scope="module")
def in_process_chat(llama_server):
    """llama.cpp in this process on the GGUF the server serves, with the server's sampler."""
    from llama_cpp import Llama  # heavy: only this module compares against a raw llama.cpp model

    llama = Llama(model_path=llama_server.chat_path, n_ctx=2048, seed=0, n_threads=1, verbose=False)

    def chat(messages, max_tokens):
        llama.reset()
        out = llama.create_chat_completion(messages=messages, max_tokens=max_tokens, temperature=0.0, seed=0,
                                           repeat_penalty=SERVER_REPEAT_PENALTY)
        return out["choices"][0]["message"]["content"]

    yield chat
    llama.close()


@pytest.fixture
def kb_over_http(make_settings, llama_server):
    s = over_http(make_settings, llama_server.url)
    store = open_store(s)
    kb = open_kb(s, store=store)
    for doc in DOCS:
        kb.ingest_text(*doc)
    yield s, kb
    store.close()


def test_embedder_over_http_matches_the_in_process_gguf(make_settings, llama_server, nomic):
    """nomic-embed-text through the server equals the in-process GGUF to within 1e-3 cosine, with
    its task prefixes, in input order across batches; truncation keeps the same head."""
    s = over_http(make_settings, llama_server.url, **{"embedder.batch_size": 2})
    emb = open_embedder(s, cached=False)
    assert (emb.id, emb.dim) == (f"openai-compatible:{EMBED_ALIAS}", 768)
    assert emb.prefix("query") == nomic.prefix("query") == "search_query: "
    texts = ["The refund window is 14 days.", "Bring rain gear and sturdy boots.", "Hotel Dachsteinblick, day 2",
             "Wer bezahlt die Kurtaxe?", "450 euros per person"]
    before = llama_server.requests("/v1/embeddings")
    for kind in ("query", "document"):
        over, local = emb.embed(texts, kind), nomic.embed(texts, kind)
        sims = (over * local).sum(axis=1)  # rows are L2-normalised
        assert sims.min() >= 1 - 1e-3, sims
        # and not trivially so: each row is far from the others' in-process vectors
        assert max(float(over[i] @ local[j]) for i in range(5) for j in range(5) if i != j) < 0.9
    assert llama_server.requests("/v1/embeddings") - before == 2 * 3  # batches of 2: 2 + 2 + 1, per kind
    short = open_embedder(over_http(make_settings, llama_server.url, **{"embedder.truncate_dim": 256}), cached=False)
    local_256 = nomic.embed(texts[:2], "query")[:, :256]
    assert short.id == f"openai-compatible:{EMBED_ALIAS}@256" and short.dim == 256
    for a, b in zip(short.embed(texts[:2], "query"), local_256):
        assert cosine(a, b) >= 1 - 1e-3


def test_generation_over_http_is_llama_cpps_greedy_answer(kb_over_http, llama_server, in_process_chat):
    """Retrieve with the HTTP embedder, answer over HTTP: the answer is exactly what llama.cpp
    writes in-process for the same messages (greedy, the server's sampler), it is cached, and the
    second call costs no request."""
    s, kb = kb_over_http
    llm = open_llm(s)
    assert llm.id == f"openai-compatible:{CHAT_ALIAS}"
    question = "What does the Julian Alps Weekend cost?"
    res = open_retriever(s, kb).retrieve(question, "bob")
    assert res.chunks[0].source == "office/prices.md"
    assert all(not c.source.startswith("alice/") for c in res.chunks)
    cache = call_cache(s, "answer")
    calls = llama_server.requests("/v1/chat/completions")
    answer = answer_question(llm, question, res.chunks, s, cache=cache)
    assert not answer.cached and answer.text and answer.completion_tokens
    ctx = assemble_context(question, res.chunks, budget_tokens=s.generation.context_budget_tokens,
                           strict=s.generation.strict_grounding)
    expected = in_process_chat([{"role": m.role, "content": m.content} for m in ctx.messages], s.llm.max_tokens)
    assert answer.text == expected.strip()
    again = answer_question(llm, question, res.chunks, s, cache=cache)
    assert again.cached and again.text == answer.text
    assert llama_server.requests("/v1/chat/completions") == calls + 1


def test_judge_over_http(make_settings, llama_server):
    """eval.judge=openai-compatible:URL: a verdict over HTTP, validated, cached, replayed from the
    cache by the next run without a request."""
    from pydantic import BaseModel

    class Verdict(BaseModel):
        verdict: str

    s = over_http(make_settings, llama_server.url)
    prompt = 'Is Paris the capital of France? Answer as JSON: {"verdict": "yes"} or {"verdict": "no"}'
    judge = judge_from_settings(s)
    assert judge.id == f"openai-compatible:{CHAT_ALIAS}" and judge.timeout_s == s.eval.judge_timeout_s
    calls = llama_server.requests("/v1/chat/completions")
    r = judge.ask(prompt, Verdict, metric="probe", sample_id="q1")
    assert r.status == "ok" and r.value.verdict == "yes" and not r.cached
    assert llama_server.requests("/v1/chat/completions") == calls + r.attempts
    rerun = judge_from_settings(s)  # a later run: same cache file
    r2 = rerun.ask(prompt, Verdict)
    assert r2.cached and r2.value.verdict == "yes" and rerun.stats.llm_calls == 0
    assert llama_server.requests("/v1/chat/completions") == calls + r.attempts


def test_hyde_over_http(kb_over_http, llama_server, in_process_chat):
    """retrieval.query_transform=hyde through open_retriever: the passage searched is the server's
    generation for the HyDE prompt (llama.cpp's greedy answer), cached by prompt; the access
    filter holds for it."""
    s, kb = kb_over_http
    s = s.with_overrides({"retrieval.query_transform": "hyde"})
    question = "Where do guests sleep on day 2 of the lakes tour?"
    retriever = open_retriever(s, kb, entry_point="test_servers")
    calls = llama_server.requests("/v1/chat/completions")
    res = retriever.retrieve(question, "bob")
    expected = in_process_chat([{"role": "user", "content": HYDE_PROMPT.format(question=question)}], 96).strip()
    assert res.transform == "hyde" and res.transform_failed is None and res.queries == [expected]
    assert llama_server.requests("/v1/chat/completions") == calls + 1
    assert res.chunks and all(not c.source.startswith("alice/") for c in res.chunks)
    again = open_retriever(s, kb).retrieve(question, "bob")  # the passage from the cache
    assert again.queries == [expected] and llama_server.requests("/v1/chat/completions") == calls + 1


def test_mem0_over_http(make_settings, llama_server, nomic):
    """mem0 with the embedder over HTTP: memories are found per user with the similarity the
    in-process GGUF gives; consolidation (infer=True) sends mem0's prompt to the LLM over HTTP,
    which refuses it (~8.6k tokens, past the server's 2,048): a named error, nothing stored."""
    s = over_http(make_settings, llama_server.url)
    embeds = llama_server.requests("/v1/embeddings")
    with open_memory(s, llm=open_llm(s)) as mem:
        assert mem.embedder.id == f"openai-compatible:{EMBED_ALIAS}" and not mem.infer
        mem.add("My favourite colour is teal.", user_id="ana")
        mem.add("I am allergic to peanuts.", user_id="ana")
        mem.add("My favourite colour is orange.", user_id="ben")
        hits = mem.search("What is my favourite colour?", user_id="ana", k=2, recency=False)
        assert [h.text for h in hits] == ["My favourite colour is teal.", "I am allergic to peanuts."]
        q = nomic.embed(["What is my favourite colour?"], "query")[0]
        for h in hits:
            assert abs(h.similarity - float(q @ nomic.embed([h.text], "document")[0])) < 1e-3
        assert llama_server.requests("/v1/embeddings") > embeds
        before = mem.count("ana")
        with pytest.raises(ModelError) as err:
            mem.add("Also, I moved to Graz last week.", user_id="ana", infer=True)
        assert f"server at {llama_server.url} answered HTTP 400" in str(err.value)
        assert "maximum context length is 2048 tokens" in str(err.value)
        assert isinstance(err.value.__cause__.__cause__, ModelResponseError)  # Memory <- mem0's LLMError <- ours
        assert mem.count("ana") == before
