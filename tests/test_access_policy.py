"""The access policy holds on all six read paths, for generated owners, documents and requesters.

A document is visible to a requester when it is global or the requester owns it; the owner
role sees everything; a hidden document answers exactly like a missing one.
"""

import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from adiyan.cache import CachedEmbedder, EmbeddingCache
from adiyan.config import load_settings
from adiyan.factory import open_kb, open_retriever
from adiyan.kb import DocumentNotFound
from adiyan.types import OWNER, Requester

OWNERS = ["alice", "bob", "carol"]
REQUESTERS = OWNERS + ["mallory", None]
COMMON = "Quarterly travel budget and supplier contract notes."
EXAMPLES = int(os.environ.get("ADIYAN_PROPERTY_EXAMPLES", "20"))


def _text(owner: str, i: int, vis: str) -> str:
    return f"# Note {i}\n\n{COMMON} Marker SECRET-{owner}-{i}-{vis} belongs to {owner}.\n"


docs_strategy = st.lists(
    st.tuples(st.sampled_from(OWNERS), st.sampled_from(["private", "global"])), min_size=1, max_size=6)


@pytest.fixture(scope="module")
def shared_embedder(minilm, tmp_path_factory):
    # Real minilm; the cache makes repeated texts across generated examples cost nothing.
    return CachedEmbedder(minilm, EmbeddingCache(tmp_path_factory.mktemp("emb") / "e.sqlite"))


def _kb(tmp: str, embedder, engine: str):
    """The six read paths (the retrieval pipeline over a fresh KB, which is ``.kb``)."""
    s = load_settings(environ={}, overrides={"paths.data_dir": tmp, "store.engine": engine,
                                             "store.exact": True})
    return open_retriever(s, open_kb(s, embedder=embedder))


def check_policy(kb, docs, requester):
    keys = [f"{o}/doc{i}.md" for i, (o, _) in enumerate(docs)]
    visible = {k for k, (o, v) in zip(keys, docs) if v == "global" or o == requester}
    secrets = {k: f"SECRET-{o}-{i}-{v}" for i, (k, (o, v)) in enumerate(zip(keys, docs))}
    hidden_secrets = [secrets[k] for k in keys if k not in visible]

    def no_leak(text: str):
        for s in hidden_secrets:
            assert s not in text, f"{requester} received {s}"

    # 1. retrieve_knowledge_base: k results are k permitted results
    res = kb.retrieve_knowledge_base(COMMON, requester, top_k=10, floor=-1.0)
    assert {c.source for c in res.chunks} <= visible
    assert len(res.chunks) == min(10, len(visible))  # one chunk per note
    for c in res.chunks:
        no_leak(c.text)
    # 6. list_documents
    assert {d["source"] for d in kb.list_documents(requester)} == visible
    # 3. find_source_document
    found = kb.find_source_document(COMMON, requester, floor=-1.0)
    assert (found is None) == (not visible)
    if found:
        assert found["source"] in visible
    for k in keys + ["nobody/missing.md"]:
        if k in visible:
            # 2, 4, 5 on a visible document
            within = kb.search_within_document(k, COMMON, requester, floor=-1.0)
            assert {c.source for c in within.chunks} == {k}
            assert secrets[k] in kb.get_document_text(k, requester)
            assert secrets[k].encode() in kb.get_document(k, requester)
        else:
            # hidden answers exactly like missing: same exception type, same message shape
            for call in (lambda: kb.search_within_document(k, COMMON, requester, floor=-1.0),
                         lambda: kb.get_document_text(k, requester),
                         lambda: kb.get_document(k, requester),
                         lambda: kb.extraction_report(k, requester)):
                with pytest.raises(DocumentNotFound) as err:
                    call()
                assert str(err.value) == f"no document {k!r}"


def check_owner_sees_all(kb, docs):
    keys = {f"{o}/doc{i}.md" for i, (o, _) in enumerate(docs)}
    assert {d["source"] for d in kb.list_documents(OWNER)} == keys
    res = kb.retrieve_knowledge_base(COMMON, OWNER, top_k=10, floor=-1.0)
    assert {c.source for c in res.chunks} == keys
    for k in keys:
        assert kb.get_document(k, Requester("whoever", is_owner=True))


def ingest_and_check(kb, docs, requester) -> None:
    """Ingest the generated documents, then the property: the policy for ``requester`` on all six
    read paths, and the owner role seeing everything."""
    for i, (owner, vis) in enumerate(docs):
        kb.kb.ingest_text(_text(owner, i, vis), f"doc{i}.md", owner, vis)
    check_policy(kb, docs, requester)
    check_owner_sees_all(kb, docs)


@pytest.mark.parametrize("engine", ["edge", "local"])
@given(docs=docs_strategy, requester=st.sampled_from(REQUESTERS))
@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_no_requester_sees_another_owners_private_data(engine, shared_embedder, docs, requester):
    with tempfile.TemporaryDirectory() as tmp:
        kb = _kb(tmp, shared_embedder, engine)
        try:
            ingest_and_check(kb, docs, requester)
        finally:
            kb.kb.store.close()


def test_migrate_private_tags_legacy_chunks(shared_embedder, tmp_path):
    """The seed's migration: chunks stored before visibility existed become private to the owner."""
    from adiyan.store import Point

    rp = _kb(str(tmp_path), shared_embedder, "edge")
    kb = rp.kb
    kb.ingest_text(_text("alice", 0, "global"), "doc0.md", "alice", "global")
    vec = shared_embedder.embed(["legacy text about the travel budget"])[0]
    kb.store.upsert(kb.collection, [Point("00000000-0000-0000-0000-00000000abcd", vec,
                                          {"source_filename": "legacy.md", "chunk_index": 0,
                                           "text": "legacy SECRET-legacy"})])
    # before: an unscoped search by the owner role sees it, a requester does not (fail closed)
    assert any("legacy" in c.text for c in rp.retrieve_knowledge_base(COMMON, OWNER, top_k=10, floor=-1).chunks)
    assert not any("SECRET-legacy" in c.text for c in rp.retrieve_knowledge_base(COMMON, "bob", top_k=10, floor=-1).chunks)
    assert kb.migrate_private("owner-1") == 1
    assert kb.migrate_private("owner-1") == 0  # idempotent
    got = rp.retrieve_knowledge_base(COMMON, "owner-1", top_k=10, floor=-1).chunks
    legacy = [c for c in got if "SECRET-legacy" in c.text]
    assert legacy and legacy[0].payload["visibility"] == "private"
    assert not any("SECRET-legacy" in c.text for c in rp.retrieve_knowledge_base(COMMON, "bob", top_k=10, floor=-1).chunks)
    kb.store.close()
