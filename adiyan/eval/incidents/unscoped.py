"""Incident 2, unscoped search: a search without the requester's scope returns another owner's private data.

*Before*: the real knowledge-base search with the access filter switched off
(``retrieval.unsafe_unscoped_search=true``, a test-only setting; only a retriever built with
``allow_unscoped=True`` accepts it). *After*: the configured pipeline. Both are asked every probe
of ``evalsets/incidents/unscoped_search.yaml`` by a requester who owns none of the private
documents, on all six read paths, with no floor (so a floor can never hide a leak). Each probe
must be found by its owner in the after, or the probe proves nothing. Legacy chunks written
before visibility existed are then migrated to private (``migrate_private``).
"""

from __future__ import annotations

import tempfile

from ...factory import open_kb, open_retriever
from ...kb import DocumentNotFound
from ...store import Point
from .common import IncidentResult, REPLICA, VIOLATED, classify, counts, load_spec, settings_for, verdict

PATHS = ("retrieve_knowledge_base", "find_source_document", "search_within_document", "get_document_text",
         "get_document", "list_documents")
SEED = "another owner's private data returned by an unscoped search (the seed)"
PRINCIPLE = "no requester ever receives another owner's private chunk on any read path; legacy chunks become private"
LEGACY_ID = "00000000-0000-0000-0000-00000000beef"


def leaks_by_path(retriever, probe: dict, requester: str) -> dict[str, bool]:
    """Whether each of the six read paths gives ``requester`` the probe's private document or secret."""
    q, src, secret = probe["question"], probe["source"], probe["secret"]

    def hidden(call) -> bool:  # a document the requester may not see answers like a missing one
        try:
            call()
        except DocumentNotFound:
            return True
        return False

    found = retriever.find_source_document(q, requester, floor=-1)
    try:
        within = retriever.search_within_document(src, q, requester, top_k=10, floor=-1).chunks
    except DocumentNotFound:
        within = []
    return {
        "retrieve_knowledge_base": any(secret in c.text for c in
                                       retriever.retrieve_knowledge_base(q, requester, top_k=10, floor=-1).chunks),
        "find_source_document": bool(found) and found["source"] == src,
        "search_within_document": any(secret in c.text for c in within),
        "get_document_text": not hidden(lambda: retriever.get_document_text(src, requester)),
        "get_document": not hidden(lambda: retriever.get_document(src, requester)),
        "list_documents": any(d["source"] == src for d in retriever.list_documents(requester)),
    }


def unscoped_search(settings, embedder) -> IncidentResult:
    spec = load_spec("unscoped_search.yaml")
    requester, probes, legacy = spec["requester"], spec["probes"], spec["legacy"]
    with tempfile.TemporaryDirectory(prefix="adiyan-incident2-") as tmp:
        s = settings_for(settings, tmp, **{"store.exact": True})
        kb = open_kb(s, embedder=embedder)
        try:
            after = open_retriever(s, kb, entry_point="the unscoped-search replay (after)")
            before = open_retriever(s.with_overrides({"retrieval.unsafe_unscoped_search": True}), kb,
                                    allow_unscoped=True, entry_point="the unscoped-search replay (before)")
            for d in spec["documents"]:
                kb.ingest_text(d["text"], d["file"], d["owner"], d["visibility"])
            rows = []
            for p in probes:
                owner = p["source"].split("/", 1)[0]
                rows.append({"question": p["question"], "source": p["source"],
                             "before": leaks_by_path(before, p, requester),
                             "after": leaks_by_path(after, p, requester),
                             "owner_retrieves": any(p["secret"] in c.text for c in after.retrieve_knowledge_base(
                                 p["question"], owner, top_k=10, floor=-1).chunks)})
            # a chunk written before visibility existed: no visibility, no owner
            vec = embedder.embed([legacy["text"]], "document")[0]
            # it carries every vector the collection has (embedder.extra, store.title_field), as a chunk would
            named = {n: e.embed([legacy["text"]], "document")[0] for n, e in kb.extra_embedders.items()}
            title = kb.title_vector(legacy["text"]) if kb.title_field else None
            kb.store.upsert(kb.collection, [Point(LEGACY_ID, vec, {"source_filename": legacy["file"], "chunk_index": 0,
                                                                   "text": legacy["text"]}, named=named, title=title)])
            legacy_owner_before = sum(legacy["secret"] in c.text for c in after.retrieve_knowledge_base(
                legacy["question"], legacy["owner"], top_k=10, floor=-1).chunks)
            migrated = kb.migrate_private(legacy["owner"])
            legacy_visible = sum(legacy["secret"] in c.text for c in after.retrieve_knowledge_base(
                legacy["question"], requester, top_k=10, floor=-1).chunks)
            legacy_owner = sum(legacy["secret"] in c.text for c in after.retrieve_knowledge_base(
                legacy["question"], legacy["owner"], top_k=10, floor=-1).chunks)
        finally:
            kb.close()
    cases = [(r, path) for r in rows for path in PATHS]
    leaks_after = sum(r["after"][path] for r, path in cases)
    leaks_before = sum(r["before"][path] for r, path in cases)
    before_paths = [path for path in PATHS if any(r["before"][path] for r in rows)]
    owners_ok = sum(r["owner_retrieves"] for r in rows)
    for r in rows:  # a probe its owner cannot retrieve proves nothing: it counts against the defence
        r["status"] = classify(before_failed=any(r["before"].values()),
                               after_prevented=not any(r["after"].values()) and r["owner_retrieves"])
    migration_ok = migrated == 1 and legacy_visible == 0 and legacy_owner == 1
    statuses = [r["status"] for r in rows] + ([] if migration_ok else [VIOLATED])
    per_path = ", ".join(f"{path} {sum(r['before'][path] for r in rows)}/{len(rows)}" for path in before_paths)
    measured = (f"before (access filter off in the search): {leaks_before} leaks on {len(before_paths)}/6 read paths "
                f"({per_path or 'none'}); after: {leaks_after} leaks in {len(cases)} probe × path cases, owners "
                f"retrieve {owners_ok}/{len(rows)} probes; {migrated} legacy chunk migrated to private "
                f"(its owner finds it {legacy_owner_before} → {legacy_owner}, others {legacy_visible})")
    return IncidentResult(2, "unscoped search", SEED, measured, embedder.id, verdict(statuses), PRINCIPLE,
                          **counts(statuses),
                          before="the knowledge-base search with retrieval.unsafe_unscoped_search=true "
                                 "(Retriever built with allow_unscoped=True)",
                          after="the configured retrieval pipeline (access filter in the engine query)",
                          basis=REPLICA,
                          basis_note="production cannot run the before: every entry point refuses "
                                     "retrieval.unsafe_unscoped_search by name (Retriever.from_settings without "
                                     "allow_unscoped, which only this replay passes)",
                          details={"requester": requester, "probes": rows, "leaks_before": leaks_before,
                                   "leaks_after": leaks_after, "before_leaking_paths": before_paths,
                                   "owners_retrieve": owners_ok, "migrated": migrated, "migration_ok": migration_ok,
                                   "legacy_visible_to_owner_before_migration": legacy_owner_before,
                                   "legacy_visible_to_other": legacy_visible, "legacy_visible_to_owner": legacy_owner})
