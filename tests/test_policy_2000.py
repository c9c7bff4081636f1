"""The access-policy property of ``test_access_policy.py`` over at least 2,000 generated cases.

Re-runs ``ingest_and_check`` (imported, so both suites test the same
property) on the default engine (Qdrant's embedded engine, exact search as there) with
``max_examples = max(2000, $ADIYAN_PROPERTY_EXAMPLES)``, and asserts the property function
really ran that many times.

Cheap per example, still an empty knowledge base each time: one ``EdgeStore`` collection for
the whole run, emptied after every example (and checked empty before the next; creating and
dropping a shard costs ~1 s, emptying it milliseconds), a new knowledge base over a new
document index (``RawStore``) per example whose content-addressed ``files/`` folder is shared
(a symlink: blobs are named by their sha256, so sharing them cannot mix documents up), and the
real minilm behind an embedding cache (36 distinct note texts in all).
"""

from __future__ import annotations

import itertools
import os
import shutil
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from adiyan.cache import CachedEmbedder, EmbeddingCache
from adiyan.config import load_settings
from adiyan.ingest.rawstore import RawStore
from adiyan.factory import open_kb, open_retriever
from adiyan.store import Cond, EdgeStore, Filter
from adiyan.types import OWNER
from test_access_policy import REQUESTERS, docs_strategy, ingest_and_check

EXAMPLES = max(2000, int(os.environ.get("ADIYAN_PROPERTY_EXAMPLES", "0")))
EVERYTHING = Filter(must_not=(Cond("source_filename", "\x00"),))  # no source key contains a NUL


def run_property(embedder, tmp: Path, examples: int) -> dict:
    """Run the property for ``examples`` generated cases; returns how many ran and how long."""
    base = load_settings(environ={}, overrides={"paths.data_dir": str(tmp / "data"), "store.exact": True})
    store = EdgeStore(tmp / "data", hnsw_m=base.store.hnsw_m, hnsw_ef_construct=base.store.hnsw_ef_construct)
    blobs = tmp / "blobs"
    blobs.mkdir(exist_ok=True)
    counter = itertools.count()
    ran = []

    @given(docs=docs_strategy, requester=st.sampled_from(REQUESTERS))
    @settings(max_examples=examples, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    def prop(docs, requester):
        n = next(counter)
        raw_root = tmp / "raw" / str(n)
        raw_root.mkdir(parents=True)
        (raw_root / "files").symlink_to(blobs, target_is_directory=True)
        kb = open_kb(base, embedder=embedder, store=store, raw=RawStore(raw_root))
        assert kb.count_chunks() == 0 and kb.list_documents(OWNER) == []
        try:
            ingest_and_check(open_retriever(base, kb), docs, requester)
        finally:
            store.delete(kb.collection, EVERYTHING)
            del kb
            shutil.rmtree(raw_root, ignore_errors=True)
        ran.append((len(docs), requester))

    t0 = time.perf_counter()
    try:
        prop()
    finally:
        store.close()
    return {"examples": len(ran), "seconds": time.perf_counter() - t0,
            "requesters": sorted({str(r) for _, r in ran}), "max_docs": max((d for d, _ in ran), default=0)}


@pytest.mark.reliability
def test_no_requester_sees_another_owners_private_data_2000_cases(minilm, tmp_path):
    """Injects: at least 2,000 generated (documents of alice / bob / carol, private or global;
    requester among them, mallory or anonymous) cases. Expects the access policy on all six read
    paths in each (test_access_policy.check_policy), and the owner role seeing everything."""
    embedder = CachedEmbedder(minilm, EmbeddingCache(tmp_path / "emb.sqlite"))
    out = run_property(embedder, tmp_path, EXAMPLES)
    print(f"{out['examples']} generated cases in {out['seconds']:.0f}s "
          f"({out['seconds'] / max(1, out['examples']):.3f}s each); requesters {out['requesters']}")
    assert out["examples"] >= EXAMPLES
    assert len(out["requesters"]) == len(REQUESTERS) and out["max_docs"] == 6
