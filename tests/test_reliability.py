"""Faults: SIGKILL at each step of an ingest, then a restart; persistence across restarts.

Marked `reliability` (CI runs it with `invoke test --all`). What each test injects is in its
docstring.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from adiyan.config import load_settings
from adiyan.kb import KnowledgeBase
from adiyan.models import load_embedder
from adiyan.store import open_store

pytestmark = pytest.mark.reliability

V1 = "# Tour\n\n" + "The Julian Alps Weekend costs 450 euros per person. " * 40
V2 = "# Tour\n\n" + "The Julian Alps Weekend now costs 520 euros per person. " * 40

CHILD = textwrap.dedent('''
    import os, signal, sys
    from adiyan.config import load_settings
    from adiyan.kb import KnowledgeBase
    from adiyan.models import load_embedder
    from adiyan.store import open_store
    data_dir, stage, v1, v2 = sys.argv[1:5]
    s = load_settings(environ={}, overrides={"paths.data_dir": data_dir, "chunking.size": 300, "chunking.overlap": 50,
                                             "retrieval.use_calibrated_floors": False})
    kb = KnowledgeBase(s, open_store(s), load_embedder("minilm"))
    kb.ingest_document(v1, "tour.md", "office", "global")
    def hook(at):
        if at == stage:
            os.kill(os.getpid(), signal.SIGKILL)
    kb.fault_hook = hook
    kb.ingest_document(v2, "tour.md", "office", "global")
    print("survived")
''')


def _settings(data_dir):
    return load_settings(environ={}, overrides={"paths.data_dir": str(data_dir), "chunking.size": 300,
                                                "chunking.overlap": 50, "retrieval.use_calibrated_floors": False})


def _visible_version(kb) -> str:
    """Which version every read path shows; fails if any path shows a mix or nothing."""
    key = "office/tour.md"
    seen = set()
    texts = [c.text for c in kb.retrieve_knowledge_base("Julian Alps price", "x", top_k=50, floor=-1).chunks]
    texts += [c.text for c in kb.search_within_document(key, "price", "x", top_k=50, floor=-1).chunks]
    texts.append(kb.get_document_text(key, "x"))
    texts.append(kb.get_document(key, "x").decode())
    for t in texts:
        seen |= {v for v, n in (("v1", "450"), ("v2", "520")) if n in t}
    assert len(seen) == 1, f"read paths disagree or are empty: {seen}"
    assert kb.find_source_document("Julian Alps price", "x")["source"] == key
    assert [d["source"] for d in kb.list_documents("x")] == [key]
    rec = kb.raw.get(key, is_owner=True)
    assert kb.count_chunks(key) == rec.n_chunks  # no partial or doubled document
    return seen.pop()


@pytest.mark.parametrize("stage,expected", [("after_parse", "v1"), ("after_embed", "v1"),
                                            ("after_upsert", "v1"), ("after_commit", "v2")])
def test_sigkill_during_reingest(tmp_path, stage, expected):
    """Injects: SIGKILL of the ingesting process at `stage` of re-ingesting a changed document.
    Expects: the store opens, the previous version (or, once committed, the new one) is what
    every read path returns, complete."""
    (tmp_path / "v1.md").write_text(V1)
    (tmp_path / "v2.md").write_text(V2)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "d"), stage, str(tmp_path / "v1.md"),
                           str(tmp_path / "v2.md")], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert "survived" not in proc.stdout
    s = _settings(tmp_path / "d")
    kb = KnowledgeBase(s, open_store(s), load_embedder("minilm"))
    try:
        assert _visible_version(kb) == expected
        kb.ingest_text(V2, "tour.md", "office", "global")  # and the store still takes writes
        assert _visible_version(kb) == "v2"
    finally:
        kb.store.close()


def test_results_identical_across_restarts(tmp_path):
    """Injects: a close and reopen of the embedded engine. Expects the same hits, ids and scores."""
    s = _settings(tmp_path / "d")
    kb = KnowledgeBase(s, open_store(s), load_embedder("minilm"))
    kb.ingest_text(V1, "tour.md", "office", "global")
    kb.ingest_text("# Other\n\nOffice hours are 9 to 17.", "hours.md", "office", "private")
    kb.finish_ingest()
    before = [(c.source, c.chunk_index, c.score) for c in kb.retrieve_knowledge_base("price", "office", top_k=8, floor=-1).chunks]
    kb.store.close()
    kb2 = KnowledgeBase(s, open_store(s), load_embedder("minilm"))
    after = [(c.source, c.chunk_index, c.score) for c in kb2.retrieve_knowledge_base("price", "office", top_k=8, floor=-1).chunks]
    kb2.store.close()
    assert after == before and len(before) == 8
