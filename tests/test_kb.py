"""The knowledge-base slice on the real minilm: ingest, replace, the access policy, the same-model rule."""

import pytest

from adiyan.factory import open_kb, open_retriever
from adiyan.kb import IngestError, validate_filename
from adiyan.store import EmbedderMismatchError, open_store

TEXT_A = "# Prices\n\nThe Julian Alps Weekend (TR-JUL-03) costs 450 euros per person.\n"
TEXT_B = "# Secrets\n\nThe safe code of the Ljubljana office is 7319.\n"


@pytest.fixture
def kb(make_settings, minilm):
    """The retrieval pipeline (all six read paths) over a fresh KB (``kb.kb`` for writes)."""
    s = make_settings()
    store = open_store(s)
    yield open_retriever(s, open_kb(s, embedder=minilm, store=store))
    store.close()


def test_reingest_is_a_noop_and_a_change_replaces(kb):
    r1 = kb.kb.ingest_text(TEXT_A, "prices.md", "office", "global")
    assert r1.changed and r1.n_chunks == 1
    r2 = kb.kb.ingest_text(TEXT_A, "prices.md", "office", "global")
    assert not r2.changed and kb.kb.count_chunks() == 1
    r3 = kb.kb.ingest_text(TEXT_A.replace("450", "470"), "prices.md", "office", "global")
    assert r3.changed and kb.kb.count_chunks() == 1
    top = kb.retrieve_knowledge_base("Julian Alps price", "anyone").chunks[0]
    assert "470" in top.text and top.source == "office/prices.md"


def test_private_chunks_never_reach_another_requester(kb):
    kb.kb.ingest_text(TEXT_A, "prices.md", "office", "global")
    kb.kb.ingest_text(TEXT_B, "safe.md", "alice", "private")
    for requester in ["bob", None, "office"]:
        got = kb.retrieve_knowledge_base("safe code of the office", requester, top_k=4)
        assert all(c.source != "alice/safe.md" for c in got.chunks)
        assert all(d["source"] != "alice/safe.md" for d in kb.list_documents(requester))
    own = kb.retrieve_knowledge_base("safe code of the office", "alice", top_k=1)
    assert own.chunks[0].source == "alice/safe.md"
    assert {d["source"] for d in kb.list_documents(None, is_owner=True)} == {"office/prices.md", "alice/safe.md"}


def test_floor_drops_results_and_says_so(kb):
    kb.kb.ingest_text(TEXT_A, "prices.md", "office", "global")
    res = kb.retrieve_knowledge_base("quantum chromodynamics lattice", "x", floor=0.99)
    assert res.chunks == [] and res.dropped_below_floor == 1
    assert "below the floor 0.990" in res.empty_reason


def test_querying_with_another_embedder_raises(make_settings, minilm, mpnet):
    s = make_settings()
    store = open_store(s)
    open_kb(s, embedder=minilm, store=store).ingest_text(TEXT_A, "prices.md", "office", "global")
    with pytest.raises(EmbedderMismatchError, match="minilm"):
        open_kb(s, embedder=mpnet, store=store)
    store.close()


@pytest.mark.parametrize("name", ["../etc/passwd", "a/b.md", "/abs.md", "nul\x00.md", "..", "", "C:evil.md"])
def test_file_names_are_keys_not_paths(name):
    with pytest.raises(IngestError):
        validate_filename(name)


def test_empty_document_is_an_error_naming_the_file(kb):
    with pytest.raises(IngestError, match="'empty.md': no text"):
        kb.kb.ingest_text("  \n", "empty.md", "office", "global")
    assert kb.kb.count_chunks() == 0


@pytest.mark.parametrize("mode", ["bm25", "hybrid"])
def test_lexical_modes_find_exact_tokens_under_the_policy(make_settings, minilm, mode):
    s = make_settings(**{"retrieval.mode": mode})
    store = open_store(s)
    kb = open_retriever(s, open_kb(s, embedder=minilm, store=store))
    kb.kb.ingest_text(TEXT_A, "prices.md", "office", "global")
    kb.kb.ingest_text(TEXT_B, "safe.md", "alice", "private")
    kb.kb.ingest_text("# Codes\n\nThe refund form is RF-22; the equipment list is EQ-5.\n", "codes.md", "office", "global")
    res = kb.retrieve_knowledge_base("RF-22", "bob", top_k=2)
    assert res.mode == mode and res.chunks[0].source == "office/codes.md"
    assert all(c.source != "alice/safe.md" for c in kb.retrieve_knowledge_base("safe code 7319", "bob", top_k=3).chunks)
    assert kb.retrieve_knowledge_base("safe code 7319", "alice", top_k=1).chunks[0].source == "alice/safe.md"
    store.close()
