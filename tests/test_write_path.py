"""The write path: re-ingesting is idempotent; a failure at any step leaves the previous version
returned by every read path; a crash between steps is repaired on the next open."""

import pytest

from adiyan.factory import open_kb, open_retriever
from adiyan.kb import DocumentNotFound, IngestError
from adiyan.store import open_store
from adiyan.types import OWNER

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
    res = kb.rp.retrieve_knowledge_base("Julian Alps price", "someone", top_k=10)
    assert res.chunks and all(needle in c.text and absent not in c.text for c in res.chunks if c.source == key)
    within = kb.rp.search_within_document(key, "price", "someone", top_k=10)
    assert within.chunks and all(needle in c.text for c in within.chunks)
    assert kb.rp.find_source_document("Julian Alps price", "someone")["source"] == key
    assert needle in kb.get_document_text(key, "someone") and absent not in kb.get_document_text(key, "someone")
    assert needle.encode() in kb.get_document(key, "someone")
    docs = kb.list_documents("someone")
    assert [d["source"] for d in docs] == [key]


@pytest.fixture
def kb(make_settings, minilm):
    s = make_settings(**{"chunking.size": 300, "chunking.overlap": 50})
    store = open_store(s)
    kb = open_kb(s, embedder=minilm, store=store)
    kb.rp = open_retriever(s, kb)  # the six read paths over this KB
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
    kb = open_kb(s, embedder=minilm, store=store)
    kb.rp = open_retriever(s, kb)  # the six read paths over this KB
    v1 = kb.ingest_text(V1, "tour.md", "office", "global")
    kb.fault_hook = _fail_at("after_commit")
    with pytest.raises(InjectedFault):
        kb.ingest_text(V2, "tour.md", "office", "global")
    assert kb.count_chunks("office/tour.md") > v1.n_chunks  # both versions present: the crash window
    store.close()
    store2 = open_store(s)
    kb2 = open_kb(s, embedder=minilm, store=store2)  # repair() runs on open
    kb2.rp = open_retriever(s, kb2)  # the six read paths over this KB
    assert kb2.count_chunks("office/tour.md") == kb2.raw.get("office/tour.md", OWNER).n_chunks
    _all_paths_show(kb2, "520", "450")
    store2.close()


def test_bad_input_changes_nothing(kb):
    kb.ingest_text(V1, "tour.md", "office", "global")
    before = kb.count_chunks()
    for args, reason in [(("", "x.md", "office", "global"), "no text"),
                         ((V2, "../tour.md", "office", "global"), "'..' path component"),
                         ((V2, "a//tour.md", "office", "global"), "empty path component"),
                         ((V2, "tour.md", "office", "public"), "visibility must be one of"),
                         ((V2, "tour.md", "of/fice", "global"), "invalid owner identity")]:
        with pytest.raises(IngestError, match=reason):
            kb.ingest_text(*args)
    assert kb.count_chunks() == before
    _all_paths_show(kb, "450", "520")


# -- batches (ingest_many) -------------------------------------------------------------------------


def _doc(name, marker):
    return (f"# {name}\n\nThe {name} tour is described here. Marker {marker}. " * 8).encode(), f"{name}.md"


def test_batch_a_bad_file_fails_alone_and_the_rest_are_stored(kb):
    items = [(*_doc("bled", "B-1"), "office", "global"), (b"", "empty.pdf", "office", "global"),
             (*_doc("soca", "S-1"), "office", "private"), (b"%PDF-1.4\n1 0 obj", "cut.pdf", "office", "global")]
    res = kb.ingest_many(items)
    assert [type(r).__name__ for r in res] == ["IngestResult", "IngestError", "IngestResult", "IngestError"]
    assert str(res[1]).startswith("empty.pdf: ") and str(res[3]).startswith("cut.pdf: ")
    assert sorted(d["source"] for d in kb.list_documents(OWNER)) == ["office/bled.md", "office/soca.md"]
    assert kb.count_chunks() == res[0].n_chunks + res[2].n_chunks
    assert "S-1" in kb.get_document_text("office/soca.md", "office")
    with pytest.raises(Exception):
        kb.get_document_text("office/soca.md", "someone")  # the batch kept each document's visibility


def test_batch_equals_one_by_one(kb, make_settings, minilm):
    """Same chunks, ranks and scores whether documents come in a batch or one call each."""
    items = [(*_doc(n, f"M-{i}"), "office", "global") for i, n in enumerate(["bled", "soca", "vrsic", "piran"])]
    kb.ingest_many(items, batch_chunks=3)  # several groups
    s2 = make_settings(**{"chunking.size": 300, "chunking.overlap": 50, "paths.data_dir": str(kb.raw.root.parent.parent / "other")})
    store2 = open_store(s2)
    kb2 = open_kb(s2, embedder=minilm, store=store2)
    kb2.rp = open_retriever(s2, kb2)  # the six read paths over this KB
    try:
        for data, name, owner, vis in items:
            kb2.ingest_document(data, name, owner, vis)
        for q in ["bled tour", "Marker M-3", "piran"]:
            a = kb.rp.retrieve_knowledge_base(q, "x", top_k=8, floor=-1.0).chunks
            b = kb2.rp.retrieve_knowledge_base(q, "x", top_k=8, floor=-1.0).chunks
            assert a and [(c.source, c.chunk_index, c.text) for c in a] == [(c.source, c.chunk_index, c.text) for c in b]
            # torch's batched matmuls round differently for another batch make-up (~1e-6), never more
            assert [c.score for c in a] == pytest.approx([c.score for c in b], abs=1e-5)
        assert kb.count_chunks() == kb2.count_chunks()
    finally:
        store2.close()


def test_batch_that_fails_to_store_is_retried_one_by_one(kb):
    """Injects: one failure at after_upsert (the whole group's store step). Expects the group
    rolled back, then each document written alone: all stored, no duplicate chunk."""
    calls = []

    def hook(stage):  # control flow only: the first group write fails
        if stage == "after_upsert":
            calls.append(stage)
            if len(calls) == 1:
                raise InjectedFault("injected at after_upsert")

    kb.fault_hook = hook
    items = [(*_doc(n, f"R-{i}"), "office", "global") for i, n in enumerate(["bled", "soca", "vrsic"])]
    res = kb.ingest_many(items)
    kb.fault_hook = None
    assert all(r.changed for r in res) and len(calls) == 1 + 3
    assert kb.count_chunks() == sum(r.n_chunks for r in res)
    assert not list(kb.pending_dir.iterdir())


def test_batch_failing_for_good_keeps_every_previous_version(kb):
    v1 = kb.ingest_text(V1, "tour.md", "office", "global")
    kb.fault_hook = _fail_at("after_upsert")
    res = kb.ingest_many([(V2.encode(), "tour.md", "office", "global"), (*_doc("bled", "B-2"), "office", "global")])
    kb.fault_hook = None
    assert all(isinstance(r, IngestError) for r in res)
    assert "previous version kept" in str(res[0])
    assert kb.count_chunks() == v1.n_chunks
    _all_paths_show(kb, "450 euros", "520 euros")


def test_two_versions_of_one_document_in_a_batch_are_refused_by_name(kb):
    """Never a silent replace within one batch: the second item with the key is refused, the first stands."""
    res = kb.ingest_many([(V1.encode(), "tour.md", "office", "global"), (V2.encode(), "tour.md", "office", "global")])
    assert res[0].changed and isinstance(res[1], IngestError) and res[1].source == "office/tour.md"
    assert "same key as item 1 earlier in this batch" in str(res[1])
    assert kb.count_chunks("office/tour.md") == res[0].n_chunks
    _all_paths_show(kb, "450 euros", "520 euros")


# -- no visibility window: every read goes through the committed version ---------------------------

A = "# Tour\n\n" + "The Julian Alps Weekend costs 450 euros per person, marker VERSION-ONE. " * 30
B = "# Tour\n\n" + "The Julian Alps Weekend now costs 520 euros per person, marker VERSION-TWO. " * 30
KEY = "alice/tour.md"


def _seen(kb, requester) -> dict[str, set[str]]:
    """What each of the six read paths shows of alice/tour.md to ``requester``: the versions whose
    markers it returns ('hidden' when the path says the document does not exist for them)."""
    def marks(texts):
        return {v for v, m in (("one", "VERSION-ONE"), ("two", "VERSION-TWO")) if any(m in t for t in texts)}

    out = {}
    res = kb.rp.retrieve_knowledge_base("Julian Alps Weekend price", requester, top_k=6, floor=-1.0).chunks
    out["retrieve"] = marks([c.text for c in res if c.source == KEY])
    out["retrieve_k"] = len(res)
    found = kb.rp.find_source_document("Julian Alps Weekend price", requester, floor=-1.0)
    out["find"] = {"shown"} if found and found["source"] == KEY else set()
    for name, call in (("within", lambda: [c.text for c in kb.rp.search_within_document(KEY, "price", requester,
                                                                                         top_k=20, floor=-1.0).chunks]),
                       ("text", lambda: [kb.get_document_text(KEY, requester)]),
                       ("bytes", lambda: [kb.get_document(KEY, requester).decode()])):
        try:
            out[name] = marks(call())
        except DocumentNotFound:
            out[name] = {"hidden"}
    listed = [d for d in kb.list_documents(requester) if d["source"] == KEY]
    out["list"] = {"listed"} if listed else set()
    return out


def _expect(kb, version: str, vis: str) -> None:
    """alice sees ``version`` on every path; bob sees it only when it is global, else nothing at all."""
    mine = _seen(kb, "alice")
    assert mine == {"retrieve": {version}, "retrieve_k": 6, "find": {"shown"}, "within": {version},
                    "text": {version}, "bytes": {version}, "list": {"listed"}}, mine
    other = _seen(kb, "bob")
    if vis == "global":
        assert other == mine, other
    else:
        assert other == {"retrieve": set(), "retrieve_k": 6, "find": set(), "within": {"hidden"},
                         "text": {"hidden"}, "bytes": {"hidden"}, "list": set()}, other


@pytest.mark.parametrize("old_vis,new_vis", [("global", "private"), ("private", "global")], ids=["narrow", "widen"])
def test_reads_during_a_reingest_show_exactly_the_committed_version(kb, old_vis, new_vis):
    """Reads run inside the write path (the fault hook, control flow only): with the new version's
    chunks stored but not committed the old version is what every path shows, to alice and bob
    alike; right after the commit, with the old chunks not yet deleted, only the new one is. Six
    chunks are asked for and six come back (replaced chunks ranking first are refilled), and
    narrowing global -> private hides the document from bob at the commit, not at the delete."""
    for i in range(3):  # other global documents, so a full top 6 exists for every requester
        kb.ingest_text(f"# Other {i}\n\n" + f"Julian Alps hiking notes number {i}. " * 20, f"other{i}.md", "office", "global")
    kb.ingest_text(A, "tour.md", "alice", old_vis)
    checked = []

    def hook(stage):  # control flow only: read at the two moments that used to be a window
        if stage == "after_upsert":
            assert kb.count_chunks(KEY) > kb.raw.get(KEY, OWNER).n_chunks  # both versions stored
            _expect(kb, "one", old_vis)
            checked.append(stage)
        elif stage == "after_commit":
            assert kb.count_chunks(KEY) > kb.raw.get(KEY, OWNER).n_chunks  # old not yet deleted
            _expect(kb, "two", new_vis)
            checked.append(stage)

    kb.fault_hook = hook
    kb.ingest_text(B, "tour.md", "alice", new_vis)
    kb.fault_hook = None
    assert checked == ["after_upsert", "after_commit"]
    _expect(kb, "two", new_vis)


def test_a_delete_that_fails_after_the_commit_leaks_nothing_in_a_running_process(kb):
    """Injects: an exception right after the commit of a global -> private re-ingest, so the old
    global chunks stay stored and no reopen repairs them (a long-running process). Expects: bob
    sees nothing of either version on any path, alice the new version only; repair() then
    deletes the stale chunks."""
    for i in range(3):
        kb.ingest_text(f"# Other {i}\n\n" + f"Julian Alps hiking notes number {i}. " * 20, f"other{i}.md", "office", "global")
    kb.ingest_text(A, "tour.md", "alice", "global")
    kb.fault_hook = _fail_at("after_commit")
    with pytest.raises(InjectedFault):
        kb.ingest_text(B, "tour.md", "alice", "private")
    kb.fault_hook = None
    rec = kb.raw.get(KEY, OWNER)
    assert rec.visibility == "private" and kb.count_chunks(KEY) > rec.n_chunks  # the stale global chunks are there
    _expect(kb, "two", "private")
    assert kb.repair() == [KEY] and kb.count_chunks(KEY) == rec.n_chunks
    _expect(kb, "two", "private")
