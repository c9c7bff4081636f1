"""The write path: re-ingesting is idempotent; a failure at any step leaves the previous version
returned by every read path; a crash between steps is repaired on the next open."""

import pytest

from adiyan.kb import IngestError, KnowledgeBase
from adiyan.store import open_store

V1 = "# Tour\n\n" + "The Julian Alps Weekend costs 450 euros per person. " * 30
V2 = "# Tour\n\n" + "The Julian Alps Weekend now costs 520 euros per person. " * 30


class InjectedFault(RuntimeError):
    pass


def _fail_at(stage):
    def hook(s):  # control flow only: raises where the test says
        if s == stage:
            raise InjectedFault(f"injected at {s}")
    return hook


def _all_paths_show(kb, needle, absent):
    key = "office/tour.md"
    res = kb.retrieve_knowledge_base("Julian Alps price", "someone", top_k=10)
    assert res.chunks and all(needle in c.text and absent not in c.text for c in res.chunks if c.source == key)
    within = kb.search_within_document(key, "price", "someone", top_k=10)
    assert within.chunks and all(needle in c.text for c in within.chunks)
    assert kb.find_source_document("Julian Alps price", "someone")["source"] == key
    assert needle in kb.get_document_text(key, "someone") and absent not in kb.get_document_text(key, "someone")
    assert needle.encode() in kb.get_document(key, "someone")
    docs = kb.list_documents("someone")
    assert [d["source"] for d in docs] == [key]


@pytest.fixture
def kb(make_settings, minilm):
    s = make_settings(**{"chunking.size": 300, "chunking.overlap": 50})
    store = open_store(s)
    kb = KnowledgeBase(s, store, minilm)
    yield kb
    store.close()


def test_reingest_three_times_keeps_the_chunk_count(kb):
    first = kb.ingest_text(V1, "tour.md", "office", "global")
    assert first.n_chunks > 3
    for _ in range(3):
        again = kb.ingest_text(V1, "tour.md", "office", "global")
        assert not again.changed
        assert kb.count_chunks("office/tour.md") == first.n_chunks
    assert kb.count_chunks() == first.n_chunks


@pytest.mark.parametrize("stage", ["after_embed", "after_upsert"])
def test_failure_keeps_the_previous_version_on_every_read_path(kb, stage):
    v1 = kb.ingest_text(V1, "tour.md", "office", "global")
    kb.fault_hook = _fail_at(stage)
    with pytest.raises(IngestError, match="'tour.md': ingest failed, previous version kept: InjectedFault"):
        kb.ingest_text(V2, "tour.md", "office", "global")
    kb.fault_hook = None
    assert kb.count_chunks("office/tour.md") == v1.n_chunks
    _all_paths_show(kb, "450", "520")
    # and the next attempt succeeds and replaces it completely
    kb.ingest_text(V2, "tour.md", "office", "global")
    _all_paths_show(kb, "520", "450")


def test_crash_after_commit_is_repaired_on_reopen(make_settings, minilm):
    """A crash between commit and the old version's deletion leaves both; reopening keeps the new one."""
    s = make_settings(**{"chunking.size": 300, "chunking.overlap": 50})
    store = open_store(s)
    kb = KnowledgeBase(s, store, minilm)
    v1 = kb.ingest_text(V1, "tour.md", "office", "global")
    kb.fault_hook = _fail_at("after_commit")
    with pytest.raises(InjectedFault):
        kb.ingest_text(V2, "tour.md", "office", "global")
    assert kb.count_chunks("office/tour.md") > v1.n_chunks  # both versions present: the crash window
    store.close()
    store2 = open_store(s)
    kb2 = KnowledgeBase(s, store2, minilm)  # repair() runs on open
    assert kb2.count_chunks("office/tour.md") == kb2.raw.get("office/tour.md", is_owner=True).n_chunks
    _all_paths_show(kb2, "520", "450")
    store2.close()


def test_bad_input_changes_nothing(kb):
    kb.ingest_text(V1, "tour.md", "office", "global")
    before = kb.count_chunks()
    for args, reason in [(("", "x.md", "office", "global"), "no text"),
                         ((V2, "../tour.md", "office", "global"), "must not contain a path separator"),
                         ((V2, "..tour.md", "office", "global"), "start with '..'"),
                         ((V2, "tour.md", "office", "public"), "visibility must be one of"),
                         ((V2, "tour.md", "of/fice", "global"), "invalid owner identity")]:
        with pytest.raises(IngestError, match=reason):
            kb.ingest_text(*args)
    assert kb.count_chunks() == before
    _all_paths_show(kb, "450", "520")
