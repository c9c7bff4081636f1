"""Faults: SIGKILL at each step of an ingest, then a restart; persistence across restarts.

Marked `reliability` (CI runs it with `invoke test --all`). What each test injects is in its
docstring.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from adiyan.config import load_settings
from adiyan.factory import open_kb, open_retriever
from adiyan.kb import DocumentNotFound
from adiyan.models import load_embedder
from adiyan.types import OWNER

pytestmark = pytest.mark.reliability

V1 = "# Tour\n\n" + "The Julian Alps Weekend costs 450 euros per person. " * 40
V2 = "# Tour\n\n" + "The Julian Alps Weekend now costs 520 euros per person. " * 40

CHILD = textwrap.dedent('''
    import os, signal, sys
    from adiyan.config import load_settings
    from adiyan.factory import open_kb
    from adiyan.models import load_embedder
    data_dir, stage, v1, v2, vis1, vis2 = sys.argv[1:7]
    s = load_settings(environ={}, overrides={"paths.data_dir": data_dir, "chunking.size": 300, "chunking.overlap": 50,
                                             "retrieval.use_calibrated_floors": False})
    kb = open_kb(s, embedder=load_embedder("minilm"))
    kb.ingest_text("# Other\\n\\n" + "Julian Alps hiking notes, another document. " * 20, "other.md", "office", "global")
    kb.ingest_document(v1, "tour.md", "office", vis1)
    def hook(at):
        if at == stage:
            os.kill(os.getpid(), signal.SIGKILL)
    kb.fault_hook = hook
    kb.ingest_document(v2, "tour.md", "office", vis2)
    print("survived")
''')


def _settings(data_dir):
    return load_settings(environ={}, overrides={"paths.data_dir": str(data_dir), "chunking.size": 300,
                                                "chunking.overlap": 50, "retrieval.use_calibrated_floors": False})


def _shown(kb, s, requester) -> set[str]:
    """The versions of office/tour.md that the six read paths show ``requester`` ('hidden' where a path
    says the document does not exist for them); fails on a partial or doubled document."""
    rp = open_retriever(s, kb)
    key = "office/tour.md"
    texts = [c.text for c in rp.retrieve_knowledge_base("Julian Alps price", requester, top_k=50, floor=-1).chunks
             if c.source == key]
    found = rp.find_source_document("Julian Alps price", requester, floor=-1)
    listed = key in [d["source"] for d in kb.list_documents(requester)]
    hidden = 0
    for call in (lambda: [c.text for c in rp.search_within_document(key, "price", requester, top_k=50, floor=-1).chunks],
                 lambda: [kb.get_document_text(key, requester)], lambda: [kb.get_document(key, requester).decode()]):
        try:
            texts += call()
        except DocumentNotFound:
            hidden += 1
    seen = {v for v, n in (("v1", "450"), ("v2", "520")) if any(n in t for t in texts)}
    if hidden:
        assert hidden == 3 and not seen and not listed and (not found or found["source"] != key), (requester, seen)
        seen.add("hidden")
    else:
        assert len(seen) == 1 and listed and found["source"] == key, (requester, seen, listed, found)
    rec = kb.raw.get(key, OWNER)
    assert kb.count_chunks(key) == rec.n_chunks  # reopened: repaired, no partial or doubled document
    return seen


STAGES = [("after_parse", "v1"), ("after_embed", "v1"), ("after_upsert", "v1"), ("after_commit", "v2"),
          ("after_cleanup", "v2")]


@pytest.mark.parametrize("vis1,vis2", [("global", "private"), ("private", "global")],
                         ids=["narrow", "widen"])
@pytest.mark.parametrize("stage,expected", STAGES, ids=[s for s, _ in STAGES])
def test_sigkill_during_reingest(tmp_path, stage, expected, vis1, vis2):
    """Injects: SIGKILL of the ingesting process at `stage` of re-ingesting a changed document,
    keeping, narrowing (global -> private) or widening its visibility. Expects: the store opens;
    the previous version (or, once committed, the new one) is what every read path returns to
    its owner, complete; another requester sees exactly that version when it is global and
    nothing of either version when it is private."""
    (tmp_path / "v1.md").write_text(V1)
    (tmp_path / "v2.md").write_text(V2)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "d"), stage, str(tmp_path / "v1.md"),
                           str(tmp_path / "v2.md"), vis1, vis2], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert "survived" not in proc.stdout
    s = _settings(tmp_path / "d")
    kb = open_kb(s, embedder=load_embedder("minilm"))
    try:
        vis = vis1 if expected == "v1" else vis2
        assert _shown(kb, s, "office") == {expected}
        assert _shown(kb, s, "x") == ({expected} if vis == "global" else {"hidden"})
        kb.ingest_text(V2, "tour.md", "office", "global")  # and the store still takes writes
        assert _shown(kb, s, "x") == {"v2"}
    finally:
        kb.store.close()


ARCHIVE_CHILD = textwrap.dedent('''
    import io, os, signal, sys, zipfile
    from adiyan.config import load_settings
    from adiyan.factory import open_kb
    from adiyan.models import load_embedder
    def archive(names):
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            for n in names:
                z.writestr(f"docs/{n}.txt", f"Member {n} of the archive: the Julian Alps notes, marker MEMBER-{n}. " * 5)
        return buf.getvalue()
    s = load_settings(environ={}, overrides={"paths.data_dir": sys.argv[1], "retrieval.use_calibrated_floors": False})
    kb = open_kb(s, embedder=load_embedder("minilm"))
    kb.ingest_many([(archive(["a", "b", "c"]), "archive.zip", "office", "global")])
    def hook(at):
        if at == "after_remove_commit":
            os.kill(os.getpid(), signal.SIGKILL)
    kb.fault_hook = hook
    kb.ingest_many([(archive(["a", "b"]), "archive.zip", "office", "global")])
    print("survived")
''')


def test_sigkill_while_removing_a_member_a_container_no_longer_has(tmp_path):
    """Injects: SIGKILL after the commit that removes docs/c.txt from a re-ingested archive (its record
    gone, its chunks not yet deleted). Expects: after reopen no read path shows c, a and b are intact."""
    proc = subprocess.run([sys.executable, "-c", ARCHIVE_CHILD, str(tmp_path / "d")], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    s = _settings(tmp_path / "d")
    kb = open_kb(s, embedder=load_embedder("minilm"))
    try:
        rp = open_retriever(s, kb)
        keys = [f"office/archive.zip/docs/{n}.txt" for n in "abc"]
        assert [d["source"] for d in kb.list_documents("x")] == keys[:2]
        assert kb.count_chunks(keys[2]) == 0 and not list(kb.pending_dir.iterdir())
        hits = rp.retrieve_knowledge_base("Julian Alps notes marker", "x", top_k=10, floor=-1).chunks
        assert {c.source for c in hits} == set(keys[:2])
        with pytest.raises(DocumentNotFound):
            kb.get_document_text(keys[2], "x")
        assert "MEMBER-b" in kb.get_document_text(keys[1], "x")
    finally:
        kb.store.close()


def test_results_identical_across_restarts(tmp_path):
    """Injects: a close and reopen of the embedded engine. Expects the same hits, ids and scores."""
    s = _settings(tmp_path / "d")
    kb = open_kb(s, embedder=load_embedder("minilm"))
    kb.ingest_text(V1, "tour.md", "office", "global")
    kb.ingest_text("# Other\n\nOffice hours are 9 to 17.", "hours.md", "office", "private")
    kb.finish_ingest()
    before = [(c.source, c.chunk_index, c.score) for c in open_retriever(s, kb).retrieve_knowledge_base("price", "office", top_k=8, floor=-1).chunks]
    kb.store.close()
    kb2 = open_kb(s, embedder=load_embedder("minilm"))
    after = [(c.source, c.chunk_index, c.score) for c in open_retriever(s, kb2).retrieve_knowledge_base("price", "office", top_k=8, floor=-1).chunks]
    kb2.store.close()
    assert after == before and len(before) == 8


# -- a sweep killed midway ----------------------------------------------------------------------------

SWEEP_PARAMS = "x = 1\noverrides = {}\nconfig_file = None\noutput_dir = None\npoint_id = None"
SWEEP_WORK = """import time
from adiyan.experiments.common import PointResult, record
time.sleep(6 if x >= 3 else 0)  # points 3 and 4 are slow: the kill lands while point 3 runs
record(output_dir, PointResult({"context_tokens": 2.0 * x}, [{"qid": "q1", "retrieve_ms": float(x)}]))"""


def test_sweep_killed_after_its_second_point_resumes_with_the_rest(tmp_path):
    """Injects: SIGKILL of the `python -m adiyan.sweeps` process once two of four points have
    their completion marker (point 3 running in the kernel). Expects: the killed run leaves no
    marker for points 3-4; the restart runs exactly points 3 and 4, leaves points 1-2's executed
    notebooks untouched, and gathers all four into runs.parquet."""
    import nbformat
    import pandas as pd
    import yaml

    from adiyan import sweeps as S
    from tests.conftest import ROOT

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "adiyan", "display_name": "Python (adiyan)", "language": "python"}
    params = nbformat.v4.new_code_cell(SWEEP_PARAMS)
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(SWEEP_WORK)]
    nbformat.write(nb, str(tmp_path / "killme.ipynb"))
    spec_path = tmp_path / "killme.yaml"
    spec_path.write_text(yaml.safe_dump({"name": "killme", "notebook": str(tmp_path / "killme.ipynb"),
                                         "grid": {"x": [1, 2, 3, 4]}, "jobs": 1, "engine": "persistent"}))
    out = tmp_path / "out"
    ids = [p.id for p in S.expand(S.load_spec(str(spec_path)))]
    cmd = [sys.executable, "-m", "adiyan.sweeps", str(spec_path), "--out-dir", str(out), "--quiet"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not all(S.is_complete(out / "points" / i) for i in ids[:2]):
            assert proc.poll() is None, proc.stdout.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the first two points did not finish in 300 s"
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the kernel too, whatever state it is in
    assert proc.returncode == -signal.SIGKILL
    assert not any(S.is_complete(out / "points" / i) for i in ids[2:])
    before = {i: (out / "points" / i / "notebook.ipynb").stat().st_mtime_ns for i in ids[:2]}
    again = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert "4 points, ran 2, reused 2" in again.stdout, again.stdout
    assert {i: (out / "points" / i / "notebook.ipynb").stat().st_mtime_ns for i in ids[:2]} == before
    runs = pd.read_parquet(out / "runs.parquet")
    assert list(runs["x"]) == [1, 2, 3, 4] and list(runs["context_tokens"]) == [2.0, 4.0, 6.0, 8.0]
    assert list(runs["status"]) == ["ok"] * 4
