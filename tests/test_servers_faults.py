"""The OpenAI-compatible path when the server is slow, down, or answers garbage.

Real HTTP throughout: the real llama-cpp-python server (tests/servers.py) behind a loopback
proxy of ours that delays or replaces its answers, or a port nothing listens on. Every failure
must be a named ModelError naming the URL (ModelTimeoutError / ModelConnectionError /
ModelResponseError), counted where it is counted (the judge's statuses), cached nowhere as a
success; and a later run with the server back must succeed.
"""

from __future__ import annotations

import sqlite3

import pytest
from pydantic import BaseModel

from adiyan.cache import call_cache
from adiyan.eval.judge.client import judge_from_settings
from adiyan.factory import open_embedder, open_kb, open_llm, open_memory, open_retriever
from adiyan.generation import answer_question
from adiyan.models import ModelConnectionError, ModelError, ModelResponseError, ModelTimeoutError
from adiyan.store import open_store
from adiyan.types import RetrievedChunk
from servers import FAULTS, FaultProxy, free_port, llama_server, over_http  # noqa: F401 - llama_server: a fixture

pytestmark = pytest.mark.reliability

QUESTION = "What does the Julian Alps Weekend cost?"
CHUNKS = [RetrievedChunk("office/prices.md", 0, 0.9, "The Julian Alps Weekend costs 450 euros per person.")]
JUDGE_PROMPT = 'Is Paris the capital of France? Answer as JSON: {"verdict": "yes"} or {"verdict": "no"}'


class Verdict(BaseModel):
    verdict: str


def cached_rows(settings, namespace: str | None = None) -> int:
    """Rows in the run's call cache (answers, judge verdicts, HyDE passages)."""
    path = settings.paths.cache_dir / "calls.sqlite"
    if not path.exists():
        return 0
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0]


@pytest.fixture
def proxy(llama_server):
    with FaultProxy(llama_server.base) as p:
        yield p


@pytest.mark.private_cache  # counts the embedding cache's rows: a shared cache holds other tests' rows
def test_slow_server(make_settings, proxy):
    """Replies later than llm.timeout_s / eval.judge_timeout_s / embedder.timeout_s: timeouts,
    named and counted, nothing cached; the next run (server answering in time) succeeds."""
    s = over_http(make_settings, proxy.url, **{"llm.timeout_s": 1, "eval.judge_timeout_s": 1,
                                               "embedder.timeout_s": 1})
    embedder = open_embedder(s)  # built (dimension probe) while the server is quick
    proxy.mode, proxy.delay_s = "delay", 4.0
    cache = call_cache(s, "answer")
    with pytest.raises(ModelTimeoutError, match=f"no reply from {proxy.url} within 1 s"):
        answer_question(open_llm(s), QUESTION, CHUNKS, s, cache=cache)
    judge = judge_from_settings(s)
    r = judge.ask(JUDGE_PROMPT, Verdict, metric="probe", sample_id="q1")
    assert r.status == "timeout" and r.value is None
    assert (judge.stats.timeout, judge.stats.failed, judge.stats.ok) == (1, 1, 0)
    assert judge.failures[0][:3] == ("probe", "q1", "timeout")
    with pytest.raises(ModelTimeoutError, match=proxy.url):
        embedder.embed(["The refund window is 14 days."], "document")
    assert cached_rows(s) == 0 and len(embedder.cache) == 0
    assert judge.cache.get(judge.cache_key(JUDGE_PROMPT, Verdict)) is None

    proxy.mode = "pass"  # the server is back to its usual speed: a later run, default timeouts
    later = s.with_overrides({"llm.timeout_s": 120, "eval.judge_timeout_s": 120, "embedder.timeout_s": 120})
    answer = answer_question(open_llm(later), QUESTION, CHUNKS, later, cache=cache)
    assert answer.text and not answer.cached
    judge2 = judge_from_settings(later)
    assert judge2.ask(JUDGE_PROMPT, Verdict).status == "ok" and judge2.stats.failed == 0
    assert cached_rows(s) == 2
    assert open_embedder(later).embed(["The refund window is 14 days."], "document").shape == (1, 768)


def test_server_down(make_settings, llama_server, minilm):
    """Nothing listens at the URL: ModelConnectionError naming it, from generation, the judge
    (status error), the embedder, HyDE and mem0's consolidation; nothing cached or stored. When a
    server comes up on that port, the same LLM and judge objects answer."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    s = over_http(make_settings, url)
    llm = open_llm(s)
    cache = call_cache(s, "answer")
    with pytest.raises(ModelConnectionError, match=f"cannot reach the server at {url}"):
        answer_question(llm, QUESTION, CHUNKS, s, cache=cache)
    judge = judge_from_settings(s)
    r = judge.ask(JUDGE_PROMPT, Verdict, metric="probe")
    assert r.status == "error" and "ModelConnectionError" in r.error and url in r.error
    assert (judge.stats.error, judge.stats.failed, judge.stats.llm_calls) == (1, 1, 2)  # asked, retried once
    with pytest.raises(ModelConnectionError, match=url):
        open_embedder(s)
    store = open_store(s)
    try:  # HyDE: the KB embeds in-process, the passage is asked of the server that is down
        kb = open_kb(s, embedder=minilm, store=store)
        kb.ingest_text("# Prices\n\nThe Julian Alps Weekend costs 450 euros per person.", "prices.md", "office",
                       "global")
        hyde = open_retriever(s.with_overrides({"retrieval.query_transform": "hyde"}), kb, llm)
        with pytest.raises(ModelConnectionError, match=url):
            hyde.retrieve(QUESTION, "bob")
    finally:
        store.close()
    with open_memory(s, embedder=minilm, llm=llm) as mem:
        mem.add("My favourite colour is teal.", user_id="ana")
        with pytest.raises(ModelError, match=f"cannot reach the server at {url}"):
            mem.add("I moved to Graz last week.", user_id="ana", infer=True)
        assert mem.count("ana") == 1
    assert cached_rows(s) == 0

    with FaultProxy(llama_server.base, port=port):  # the server comes up where it was expected
        assert answer_question(llm, QUESTION, CHUNKS, s, cache=cache).text
        r = judge.ask(JUDGE_PROMPT, Verdict, metric="probe")
        assert r.status == "ok" and (judge.stats.ok, judge.stats.error) == (1, 1)
        assert cached_rows(s) == 2


@pytest.mark.private_cache  # counts the embedding cache's rows: a shared cache holds other tests' rows
def test_malformed_replies(make_settings, proxy):
    """HTTP 500, JSON cut off, a text body, JSON of the wrong shape: each a ModelResponseError
    naming the URL, each a counted judge error, none cached; then the real answer is."""
    s = over_http(make_settings, proxy.url)
    llm, embedder, judge = open_llm(s), open_embedder(s), judge_from_settings(s)
    for mode in FAULTS:
        proxy.mode = mode
        with pytest.raises(ModelResponseError, match=proxy.url) as err:
            llm.chat([{"role": "user", "content": QUESTION}])
        if mode == "http500":
            assert "HTTP 500" in str(err.value)
        with pytest.raises(ModelResponseError, match=proxy.url):
            embedder.embed([f"text for {mode}"], "document")
        r = judge.ask(JUDGE_PROMPT, Verdict, metric=mode)
        assert r.status == "error" and "ModelResponseError" in r.error, mode
    assert judge.stats.error == judge.stats.failed == len(FAULTS) and judge.stats.ok == 0
    assert sorted(f.metric for f in judge.failures) == sorted(FAULTS)
    assert cached_rows(s) == 0 and len(embedder.cache) == 0
    proxy.mode = "pass"
    r = judge.ask(JUDGE_PROMPT, Verdict)
    assert r.status == "ok" and cached_rows(s) == 1
    assert embedder.embed(["text for pass"], "document").shape == (1, 768) and len(embedder.cache) == 1
