"""Load and concurrency: threads ingesting and querying one knowledge base; several processes.

Threads: writers ingest and re-ingest documents (each writer its own source keys) and build the
index, while readers query all six read paths as different requesters, for a bounded time
(``ADIYAN_CONCURRENCY_SECONDS``, default 20). Expected: no errors, no duplicate or stale chunks
(the stored count equals the sum of the committed ``n_chunks``; ``(source, chunk_index)`` is
unique and every chunk is of its source's committed version), and every answer within the
access policy (a private document of owner A is never returned to requester B).

Processes: the embedded engine (qdrant-edge) takes an exclusive lock on a shard's write-ahead
log, so **one process at a time** may open a data directory (single writer; a second
``KnowledgeBase`` in the same process is refused the same way). A second process is refused
before it can touch anything (in particular before ``repair()``, which would otherwise undo the
first process's in-flight write), and the first process's data stays intact. Several processes
that only read use their own copies of a closed data directory (or a Qdrant server,
``store.engine=server``).

Marked ``reliability`` (CI runs it). What each test injects is in its docstring.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from adiyan.factory import open_kb, open_retriever
from adiyan.kb import DocumentNotFound
from adiyan.store import open_store
from adiyan.types import OWNER

pytestmark = pytest.mark.reliability

DURATION = float(os.environ.get("ADIYAN_CONCURRENCY_SECONDS", "20"))
MIN_INGESTS, MIN_QUERIES = 10, 20
OWNERS = ["alice", "bob", "carol"]
REQUESTERS = OWNERS + ["mallory", None]
QUERIES = ["travel budget for the Julian Alps", "supplier contract renewal", "office hours in Ljubljana",
           "refund policy for cancellations", "hiking gear list"]
ROOT = Path(__file__).resolve().parents[1]


def doc_text(owner: str, vis: str, writer: int, slot: int, version: int) -> str:
    """A document of about three chunks; every paragraph carries the owner and visibility marker."""
    marker = f"MARK-{owner}-{vis}-w{writer}s{slot}v{version}"
    topic = QUERIES[(slot + version) % len(QUERIES)]
    para = (f"{marker}: notes on {topic}. The team reviewed the {topic} again in version {version}; "
            f"figures and names stay with {owner}. ")
    return f"# Document {writer}-{slot}\n\n" + "\n\n".join(para * 3 for _ in range(4)) + "\n"


def marker_of(text: str) -> tuple[str, str] | None:
    import re

    m = re.search(r"MARK-(\w+)-(private|global)-", text)
    return (m.group(1), m.group(2)) if m else None


def permitted(requester, owner: str, vis: str) -> bool:
    return vis == "global" or owner == requester


def check_chunk(requester, c) -> None:
    """A returned chunk is permitted by its payload and by the marker in its own text."""
    assert permitted(requester, c.payload["owner_identity"], c.payload["visibility"]), (requester, c.source)
    mark = marker_of(c.text)
    if mark is not None:
        assert permitted(requester, *mark), (requester, c.source, c.text[:60])


def version_of(text: str) -> int | None:
    import re

    m = re.search(r"MARK-\w+-(?:private|global)-w\d+s\d+v(\d+)", text)
    return int(m.group(1)) if m else None


def committed_during(versions: dict[int, tuple], who, key: str, v: int | None, t0: float, t1: float) -> bool:
    """Was version ``v`` of ``key`` (any version the requester may read, when None) the committed one,
    readable by ``who``, at some instant of [t0, t1]? ``versions``: v -> (visibility, commit start, end)."""
    def current(i):
        vis, start, _ = versions[i]
        later = [versions[j][2] for j in versions if j > i]
        return start <= t1 and (not later or t0 <= min(later)) and permitted(who, key.split("/")[0], vis)
    return any(current(i) for i in versions) if v is None else v in versions and current(v)


def check_state(kb) -> dict:
    """The invariant after any set of completed ingests: stored chunks == committed chunks."""
    records = {r.source_key: r for r in kb.raw.list(OWNER)}
    points = list(kb.store.scroll(kb.collection))
    pairs = Counter((p.payload["source_filename"], p.payload["chunk_index"]) for p in points)
    dupes = [k for k, n in pairs.items() if n > 1]
    assert not dupes, f"duplicate chunks: {dupes[:5]}"
    assert len({p.id for p in points}) == len(points)
    assert kb.count_chunks() == len(points) == sum(r.n_chunks for r in records.values())
    for p in points:
        rec = records.get(p.payload["source_filename"])
        assert rec is not None, f"chunk of an uncommitted source: {p.payload['source_filename']}"
        assert p.payload["doc_version"] == rec.doc_version, f"stale chunk of {rec.source_key}"
        assert (p.payload["owner_identity"], p.payload["visibility"]) == (rec.owner_identity, rec.visibility)
    for key, rec in records.items():
        assert sorted(i for (s, i) in pairs if s == key) == list(range(rec.n_chunks)), key
    assert not list(kb.pending_dir.iterdir()), "pending markers left behind"
    return records


@pytest.fixture
def kb(make_settings, minilm):
    s = make_settings()
    store = open_store(s)
    kb = open_kb(s, embedder=minilm, store=store)
    kb.rp = open_retriever(s, kb)  # the six read paths over this KB
    yield kb
    store.close()


def test_threads_ingesting_and_querying_for_a_bounded_time(kb):
    """Injects: 2 writer threads ingesting and re-ingesting (new content, sometimes a new
    visibility) documents of three owners and building the index, against 3 reader threads
    querying retrieve / find / list / search-within / get-text / get-bytes as five requesters,
    for ADIYAN_CONCURRENCY_SECONDS (20 s). Expects: no exception anywhere; no duplicate or stale
    chunk; count == sum of committed n_chunks; no answer outside the access policy; and no
    window: every chunk returned, and every document named by find_source_document, was of the
    version committed at some instant of that read (commit times from the write path's fault
    hook), so a visibility flip takes effect at its commit for every reader."""
    stop = threading.Event()
    errors: list[str] = []
    committed: dict[str, object] = {}  # key -> last IngestResult (each key has one writer)
    history: dict[str, dict[int, tuple]] = {}  # key -> version -> (visibility, commit start, commit end)
    seen: list[tuple] = []  # (requester, key, version or None, t0, t1): what each read returned
    lock = threading.Lock()
    stats = Counter()
    when = threading.local()

    def hook(stage):  # runs in the writer's thread: brackets the raw store's commit
        if stage == "after_upsert":
            when.start = time.monotonic()
        elif stage == "after_commit":
            when.end = time.monotonic()

    kb.fault_hook = hook

    def guard(fn):
        def run(*args):
            try:
                fn(*args)
            except BaseException as exc:  # noqa: BLE001 - every failure is a test failure
                import traceback

                errors.append(f"{threading.current_thread().name}: {type(exc).__name__}: {exc}\n"
                              + traceback.format_exc()[-1500:])
                stop.set()
        return run

    @guard
    def writer(w: int):
        rng = random.Random(w)
        version: Counter = Counter()
        i = 0
        while not stop.is_set():
            slot = rng.randrange(6)  # 6 keys per writer: re-ingests are frequent
            owner = OWNERS[(w + slot) % 3]
            vis = rng.choice(["private", "global"])
            version[slot] += 1
            when.end = None
            res = kb.ingest_text(doc_text(owner, vis, w, slot, version[slot]), f"w{w}-doc{slot}.md", owner, vis)
            assert res.changed and when.end is not None
            with lock:
                committed[res.source] = res
                history.setdefault(res.source, {})[version[slot]] = (vis, when.start, when.end)
                stats["ingests"] += 1
            i += 1
            if w == 0 and i % 5 == 0:
                kb.finish_ingest()  # HNSW build while the readers query
                stats["optimize"] += 1

    @guard
    def reader(r: int):
        rng = random.Random(100 + r)
        while not stop.is_set():
            requester = rng.choice(REQUESTERS)
            q = rng.choice(QUERIES)
            t0 = time.monotonic()
            res = kb.rp.retrieve_knowledge_base(q, requester, top_k=8, floor=-1.0)
            t1 = time.monotonic()
            versions = Counter()
            for c in res.chunks:
                check_chunk(requester, c)
                versions[(c.source, c.chunk_index)] += 1
                seen.append((requester, c.source, version_of(c.text), t0, t1))
            assert not any(n > 1 for n in versions.values()), f"two versions of one chunk in one result: {versions}"
            for d in kb.list_documents(requester):
                assert permitted(requester, d["owner_identity"], d["visibility"]), (requester, d)
            t0 = time.monotonic()
            found = kb.rp.find_source_document(q, requester, floor=-1.0)
            if found and found["source"].split("/")[0] != requester:  # named to another: it had to be global
                seen.append((requester, found["source"], None, t0, time.monotonic()))
            with lock:
                keys = list(committed)
            if keys:
                key = rng.choice(keys)
                owner = key.split("/")[0]
                try:
                    text = kb.get_document_text(key, requester)
                    assert permitted(requester, *marker_of(text)), (requester, key)
                    data = kb.get_document(key, requester)
                    assert permitted(requester, *marker_of(data.decode())), (requester, key)
                    within = kb.rp.search_within_document(key, q, requester, floor=-1.0)
                    for c in within.chunks:
                        assert c.source == key, (key, c.source)
                        check_chunk(requester, c)
                    stats["document_reads"] += 1
                except DocumentNotFound:
                    stats["hidden_or_missing"] += 1
                    assert owner != requester, f"{requester} could not read their own {key}"
            stats["queries"] += 1

    threads = [threading.Thread(target=writer, args=(w,), name=f"writer-{w}") for w in range(2)]
    threads += [threading.Thread(target=reader, args=(r,), name=f"reader-{r}") for r in range(3)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    stop.wait(DURATION)
    while not stop.is_set() and time.perf_counter() - t0 < 3 * DURATION and \
            (stats["ingests"] < MIN_INGESTS or stats["queries"] < MIN_QUERIES):
        time.sleep(0.5)  # a loaded machine: run on until the load really happened (at most 3x)
    stop.set()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors, "\n".join(errors[:3])
    windows = [f"{who!r} got {key} v{v} during [{t0:.4f}, {t1:.4f}]: not committed for them then"
               for who, key, v, t0, t1 in seen if not committed_during(history.get(key, {}), who, key, v, t0, t1)]
    assert not windows, f"{len(windows)} of {len(seen)} returned chunks outside the committed version:\n" \
        + "\n".join(windows[:5])
    records = check_state(kb)
    assert set(records) == set(committed)
    for key, res in committed.items():
        assert records[key].doc_version == res.doc_version and records[key].n_chunks == res.n_chunks
    assert stats["ingests"] >= MIN_INGESTS and stats["queries"] >= MIN_QUERIES, stats  # the load really ran
    print(f"{time.perf_counter() - t0:.1f}s: {dict(stats)}; {len(records)} documents, {kb.count_chunks()} chunks")


def test_two_threads_reingesting_the_same_document_at_once(kb):
    """Injects: two threads re-ingesting the same source key with different content, held by the
    fault hook so both have stored their chunks before either commits (a barrier at
    ``after_upsert``; it times out and lets them go on if the write path serialises them).
    Expects: the committed version's chunks all stored (count == n_chunks), one version only."""
    kb.ingest_text("# Tour\n\n" + "Version zero of the tour notes. " * 50, "tour.md", "office", "global")
    barrier = threading.Barrier(2, timeout=5)

    def hook(stage):
        if stage == "after_upsert" and threading.current_thread().name in ("A", "B"):
            try:
                barrier.wait()
            except threading.BrokenBarrierError:
                pass

    kb.fault_hook = hook
    errors = []

    def run(name):
        try:
            kb.ingest_text("# Tour\n\n" + f"Version {name} of the tour notes. " * 60, "tour.md", "office", "global")
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,), name=n) for n in "AB"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    kb.fault_hook = None
    assert not errors
    rec = kb.raw.get("office/tour.md", OWNER)
    assert kb.count_chunks("office/tour.md") == rec.n_chunks > 0
    assert kb.rp.retrieve_knowledge_base("tour notes", "x", floor=-1.0).chunks
    check_state(kb)


# -- several processes ------------------------------------------------------------------------------

WRITER = textwrap.dedent('''
    import json, sys
    from adiyan.config import load_settings
    from adiyan.factory import open_kb
    from adiyan.models import load_embedder
    from adiyan.types import OWNER
    s = load_settings(environ={}, overrides={"paths.data_dir": sys.argv[1]})
    kb = open_kb(s, embedder=load_embedder("minilm"))
    kb.ingest_text("# One\\n\\nThe first document of process A. Marker PROC-A-ONE.", "one.md", "alice", "private")
    def hook(stage):
        if stage == "after_upsert":
            print("PAUSED", flush=True)
            sys.stdin.readline()  # held mid-write: new chunks stored, pending marker present, not committed
    kb.fault_hook = hook
    kb.ingest_text("# Two\\n\\nThe second document of process A. Marker PROC-A-TWO.", "two.md", "alice", "global")
    kb.fault_hook = None
    print(json.dumps({"chunks": kb.count_chunks(), "docs": [d["source"] for d in kb.list_documents(OWNER)]}), flush=True)
    kb.store.close()
''')

HOLDER = textwrap.dedent('''
    import sys
    from adiyan.store import EdgeStore
    store = EdgeStore(sys.argv[1])
    print("HOLDING", store.count(sys.argv[2]), flush=True)
    sys.stdin.readline()
    store.close()
''')

READER = textwrap.dedent('''
    import json, sys
    from adiyan.config import load_settings
    from adiyan.factory import open_kb, open_retriever
    from adiyan.models import load_embedder
    s = load_settings(environ={}, overrides={"paths.data_dir": sys.argv[1]})
    kb = open_kb(s, embedder=load_embedder("minilm"))
    out = {q: [(c.source, c.chunk_index, round(c.score, 5)) for c in open_retriever(s, kb).retrieve_knowledge_base(q, "bob", top_k=6, floor=-1.0).chunks]
           for q in json.loads(sys.argv[2])}
    print(json.dumps(out), flush=True)
    kb.store.close()
''')


def _spawn(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)})


def _wait_for(proc: subprocess.Popen, token: str, timeout: float = 300) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith(token):
            return line
        if not line and proc.poll() is not None:
            raise AssertionError(f"child exited {proc.returncode} before {token}: {proc.stderr.read()[-2000:]}")
    raise AssertionError(f"child did not print {token} within {timeout}s")


def _open_fails(make_settings, minilm, data_dir) -> BaseException:
    s = make_settings(paths__data_dir=str(data_dir))
    store = open_store(s)
    try:
        with pytest.raises(Exception) as err:
            open_kb(s, embedder=minilm, store=store)
        return err.value
    finally:
        store.close()


def test_second_process_is_refused_while_the_first_writes(make_settings, minilm, tmp_path):
    """Injects: process A holds a knowledge base open and is paused in the middle of an ingest (new
    chunks stored, pending marker present, not committed); this process then opens the same data
    directory. Expects: the open is refused before repair() can undo A's write (A's pending marker
    survives); A then completes; afterwards one opener sees both of A's documents complete."""
    data_dir = tmp_path / "shared"
    a = _spawn(WRITER, str(data_dir))
    try:
        _wait_for(a, "PAUSED")
        pending = list((data_dir / "raw" / "pending").iterdir())
        assert len(pending) == 1
        err = _open_fails(make_settings, minilm, data_dir)
        assert "lock" in str(err).lower() or "WouldBlock" in str(err) or "in use" in str(err).lower(), err
        assert list((data_dir / "raw" / "pending").iterdir()) == pending  # B did not run repair()
        out, stderr = a.communicate("go\n", timeout=300)
        assert a.returncode == 0, stderr[-2000:]
        summary = json.loads(out.strip().splitlines()[-1])
        assert summary["docs"] == ["alice/one.md", "alice/two.md"]
    finally:
        if a.poll() is None:
            a.kill()
            a.wait()
    s = make_settings(paths__data_dir=str(data_dir))
    kb = open_kb(s, embedder=minilm)
    kb.rp = open_retriever(s, kb)  # the six read paths over this KB
    try:
        records = check_state(kb)
        assert sorted(records) == ["alice/one.md", "alice/two.md"]
        assert kb.count_chunks() == summary["chunks"]
        assert "PROC-A-TWO" in kb.get_document_text("alice/two.md", "bob")
        assert "PROC-A-ONE" in kb.get_document_text("alice/one.md", "alice")
        with pytest.raises(DocumentNotFound):
            kb.get_document_text("alice/one.md", "bob")
        print(f"second opener refused with {type(err).__name__}: {err}")
    finally:
        kb.store.close()


def _closed_kb_with_docs(make_settings, minilm, data_dir) -> None:
    s = make_settings(paths__data_dir=str(data_dir))
    kb = open_kb(s, embedder=minilm)
    kb.rp = open_retriever(s, kb)  # the six read paths over this KB
    for i, q in enumerate(QUERIES):
        kb.ingest_text(doc_text(OWNERS[i % 3], ["private", "global"][i % 2], 0, i, 1), f"doc{i}.md",
                       OWNERS[i % 3], ["private", "global"][i % 2])
    kb.finish_ingest()
    kb.store.close()


def _held_data_dir(make_settings, minilm, tmp_path):
    """A closed knowledge base with documents, then held open by a child process (HOLDING printed)."""
    data_dir = tmp_path / "d"
    _closed_kb_with_docs(make_settings, minilm, data_dir)
    s = make_settings(paths__data_dir=str(data_dir))
    holder = _spawn(HOLDER, str(data_dir), s.store.collection_prefix + "knowledge_base")
    try:
        _wait_for(holder, "HOLDING", timeout=120)
    except BaseException:
        holder.kill()
        raise
    return data_dir, s, holder


def test_holder_killed_releases_the_data_dir(make_settings, minilm, tmp_path):
    """Injects: SIGKILL of a process holding the data directory open. Expects the lock gone with
    the process (the next opener succeeds) and the data intact."""
    data_dir, s, holder = _held_data_dir(make_settings, minilm, tmp_path)
    try:
        _open_fails(make_settings, minilm, data_dir)
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=60)
    finally:
        if holder.poll() is None:
            holder.kill()
    kb = open_kb(s, embedder=minilm)
    kb.rp = open_retriever(s, kb)  # the six read paths over this KB
    try:
        assert len(check_state(kb)) == len(QUERIES)
    finally:
        kb.store.close()


def test_second_process_gets_a_clear_error(make_settings, minilm, tmp_path):
    """Injects: a second opener while another process holds the data directory. Expects a
    StoreError that names the directory and says another process has it open."""
    from adiyan.store import StoreError

    data_dir, _, holder = _held_data_dir(make_settings, minilm, tmp_path)
    try:
        err = _open_fails(make_settings, minilm, data_dir)
    finally:
        holder.communicate("done\n", timeout=60)
    assert isinstance(err, StoreError), type(err)
    assert str(data_dir) in str(err) and "another process" in str(err), err


def test_reader_processes_on_their_own_copies_agree(make_settings, minilm, tmp_path):
    """Injects: two processes reading at the same time, each from its own copy of a closed data
    directory (the supported multi-process read pattern under the single-writer rule).
    Expects: both answer exactly as the original does in this process."""
    data_dir = tmp_path / "orig"
    _closed_kb_with_docs(make_settings, minilm, data_dir)
    copies = []
    for i in range(2):
        dst = tmp_path / f"copy{i}"
        shutil.copytree(data_dir, dst)
        copies.append(dst)
    procs = [_spawn(READER, str(c), json.dumps(QUERIES)) for c in copies]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
        outs.append(json.loads(out.strip().splitlines()[-1]))
    s = make_settings(paths__data_dir=str(data_dir))
    kb = open_kb(s, embedder=minilm)
    kb.rp = open_retriever(s, kb)  # the six read paths over this KB
    try:
        mine = {q: [[c.source, c.chunk_index, round(c.score, 5)] for c in
                    kb.rp.retrieve_knowledge_base(q, "bob", top_k=6, floor=-1.0).chunks] for q in QUERIES}
    finally:
        kb.store.close()
    assert outs[0] == outs[1] == mine
    assert all(src.startswith("bob/") or kb.raw.get(src, OWNER).visibility == "global"
               for rows in mine.values() for src, _, _ in rows)
