"""No visibility window on re-ingest: a writer flips one document's content and visibility 200
times while readers hammer all six read paths as other requesters, in threads and in processes.

Every version ``i`` of ``alice/flip.md`` carries ``FLIP-<i>-<visibility>`` in each chunk; even
versions are global, odd ones private. The writer records when each commit happened (the write
path's fault hook at ``after_upsert`` / ``after_commit``, just before and after the raw store's
transaction); every read records its own start and end (``time.monotonic``, one clock for all
processes on Linux). Asserted at every read:

- **no leak**: a private version's marker (or the document itself, on the paths that only name
  it) never reaches a requester other than alice;
- **no mixed versions**: one result never holds markers of two versions;
- **no stale version**: a version shown was the committed one at some instant of the read (its
  commit began before the read ended, and its successor's commit had not ended before the read
  began); this is what the old write path (commit, then delete the old chunks) broke: a read
  starting after a global -> private commit still got the old global chunks;
- **no gap**: a requester is told the document does not exist only while a private version is
  committed.

Processes: the embedded engine admits one process per data directory (tests/test_concurrency.py),
so the host process that owns the knowledge base runs the writer and answers read requests from
reader processes over a Unix socket (all six paths, each request on its own server thread); the
reader processes also read the raw store's SQLite directly (the record, its text and bytes, the
listing: what the three whole-document paths read), concurrently with the writer's commits.

Marked ``reliability`` (CI runs it). Takes ~2 minutes on 2 cores.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import re
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.reliability

FLIPS = 200
OWNER, NAME = "alice", "flip.md"
KEY = f"{OWNER}/{NAME}"
REQUESTERS = ["bob", None, "carol", "alice"]
PATHS = ["retrieve", "within", "find", "text", "bytes", "list"]
QUERY = "Julian Alps weekend tour budget"
_MARK = re.compile(r"FLIP-(\d{3})-(global|private)")


def vis_of(i: int) -> str:
    return "global" if i % 2 == 0 else "private"


def version_text(i: int) -> str:
    """About three chunks (800 characters); a marker every ~110 characters, so in every chunk."""
    para = f"FLIP-{i:03d}-{vis_of(i)}: the Julian Alps weekend tour notes, revision {i}; budget and hotels. "
    return f"# Flip {i}\n\n" + "\n\n".join(para * 3 for _ in range(6)) + "\n"


SHA_TO_VERSION = {hashlib.sha256(version_text(i).encode()).hexdigest(): i for i in range(FLIPS + 1)}


def _settings(data_dir):
    from adiyan.config import load_settings
    from tests.conftest import MODEL_DIR

    return load_settings(None, {"paths.data_dir": str(data_dir), "paths.models_dir": str(MODEL_DIR),
                                "retrieval.use_calibrated_floors": False}, environ={})


def open_flip_kb(data_dir, embedder=None):
    """A knowledge base with three global background documents and version 0 of the flipped one."""
    from adiyan.factory import open_kb, open_retriever
    from adiyan.models import load_embedder
    from tests.conftest import MODEL_DIR

    s = _settings(data_dir)
    kb = open_kb(s, embedder=embedder or load_embedder("minilm", models_dir=MODEL_DIR))
    kb.rp = open_retriever(s, kb)
    for j in range(3):
        kb.ingest_text(f"# Background {j}\n\n" + f"Julian Alps weekend tour, background document {j}. " * 12,
                       f"background{j}.md", "office", "global")
    kb.ingest_text(version_text(0), NAME, OWNER, vis_of(0))
    return kb


def read(kb, path: str, requester) -> dict:
    """One read of ``path`` as ``requester``: the versions its result shows, whether the document
    was hidden (DocumentNotFound) and whether the path named it."""
    from adiyan.kb import DocumentNotFound

    texts, named, hidden = [], False, False
    try:
        if path == "retrieve":
            chunks = kb.rp.retrieve_knowledge_base(QUERY, requester, top_k=8, floor=-1.0).chunks
            texts = [c.text for c in chunks if c.source == KEY]
            named = bool(texts)
        elif path == "within":
            chunks = kb.rp.search_within_document(KEY, QUERY, requester, top_k=8, floor=-1.0).chunks
            assert all(c.source == KEY for c in chunks)
            texts, named = [c.text for c in chunks], True
        elif path == "find":
            found = kb.rp.find_source_document(QUERY, requester, floor=-1.0)
            named = bool(found) and found["source"] == KEY
        elif path == "text":
            texts, named = [kb.get_document_text(KEY, requester)], True
        elif path == "bytes":
            texts, named = [kb.get_document(KEY, requester).decode()], True
        elif path == "list":
            rows = [d for d in kb.list_documents(requester) if d["source"] == KEY]
            named = bool(rows)
            texts = [f"FLIP-{SHA_TO_VERSION[r['sha256']]:03d}-{r['visibility']}" for r in rows]
    except DocumentNotFound:
        hidden = True
    versions = set()
    for t in texts:
        versions |= {(int(m.group(1)), m.group(2)) for m in _MARK.finditer(t)}
    return {"versions": sorted(versions), "hidden": hidden, "named": named}


def check(obs: dict, windows: dict[int, tuple[float, float]]) -> list[str]:
    """Every way ``obs`` (a read with its path, requester, start t0 and end t1) can be wrong."""
    who, t0, t1 = obs["requester"], obs["t0"], obs["t1"]
    other = who != OWNER
    bad = []
    versions = [tuple(v) for v in obs["versions"]]

    def current_during(i: int) -> bool:  # version i was the committed one at some instant of [t0, t1]
        start = windows.get(i, (None, None))[0]
        nxt = windows.get(i + 1)
        return start is not None and start <= t1 and (nxt is None or t0 <= nxt[1])

    def some_current(vis: str) -> bool:
        return any(vis_of(i) == vis and current_during(i) for i in windows)

    if len({i for i, _ in versions}) > 1:
        bad.append(f"mixed versions {versions}")
    for i, vis in versions:
        if vis != vis_of(i):
            bad.append(f"version {i} labelled {vis}")
        if other and vis == "private":
            bad.append(f"LEAK: private version {i} shown to {who!r}")
        if not current_during(i):
            bad.append(f"stale: version {i} was not the committed version at any instant of the read")
    if other and obs["named"] and not versions and not some_current("global"):
        bad.append(f"LEAK: the document named to {who!r} while only private versions were committed")
    if obs["hidden"] and (not other or not some_current("private")):
        bad.append(f"gap: {who!r} told the document does not exist while a version they may read was committed")
    return [f"{obs['path']} as {who!r} [{t0:.4f}, {t1:.4f}]: {b}" for b in bad]


class Timeline:
    """Commit windows of each version, from the write path's fault hook (called in the writer's thread)."""

    def __init__(self):
        self.windows: dict[int, tuple[float, float]] = {0: (0.0, 0.0)}
        self._start = 0.0

    def hook(self, stage: str) -> None:
        if stage == "after_upsert":
            self._start = time.monotonic()
        elif stage == "after_commit":
            self._end = time.monotonic()

    def flip(self, kb, i: int) -> None:
        self._end = None
        res = kb.ingest_text(version_text(i), NAME, OWNER, vis_of(i))
        assert res.changed and self._end is not None
        self.windows[i] = (self._start, self._end)


def run_readers(kb, stop: threading.Event, n_threads: int, out: list, errors: list) -> list[threading.Thread]:
    def reader(r: int):
        n = 0
        try:
            while not stop.is_set():
                path, who = PATHS[n % len(PATHS)], REQUESTERS[(n // len(PATHS) + r) % len(REQUESTERS)]
                t0 = time.monotonic()
                got = read(kb, path, who)
                out.append({**got, "path": path, "requester": who, "t0": t0, "t1": time.monotonic()})
                n += 1
        except BaseException as exc:  # noqa: BLE001 - every failure is a test failure
            errors.append(f"reader {r}: {type(exc).__name__}: {exc}")
    threads = [threading.Thread(target=reader, args=(r,), name=f"reader-{r}") for r in range(n_threads)]
    for t in threads:
        t.start()
    return threads


def assert_clean(observations: list[dict], windows) -> None:
    problems = [p for o in observations for p in check(o, windows)]
    assert not problems, f"{len(problems)} bad reads of {len(observations)}:\n" + "\n".join(problems[:10])
    by_path = Counter(o["path"] for o in observations)
    assert set(by_path) == set(PATHS) and min(by_path.values()) >= 20, by_path
    # the readers really saw the flips: many versions, global ones by others, private ones by alice
    seen_other = {i for o in observations if o["requester"] != OWNER for i, _ in o["versions"]}
    seen_owner = {i for o in observations if o["requester"] == OWNER for i, _ in o["versions"]}
    assert len(seen_other) >= 20 and any(i % 2 for i in seen_owner), (sorted(seen_other)[:30], len(seen_owner))
    assert any(o["hidden"] for o in observations)  # and private versions were really hidden from others


def test_flips_with_reader_threads(make_settings, minilm, tmp_path):
    """Injects: 200 re-ingests of one document alternating global and private (new content each
    time) while 3 reader threads read the six paths as bob, anonymous, carol and alice. Expects:
    no leak, no mixed versions, no stale version, no gap, at any read."""
    kb = open_flip_kb(tmp_path / "d", minilm)
    timeline = Timeline()
    kb.fault_hook = timeline.hook
    stop, observations, errors = threading.Event(), [], []
    threads = run_readers(kb, stop, 3, observations, errors)
    try:
        for i in range(1, FLIPS + 1):
            timeline.flip(kb, i)
            if i % 50 == 0:
                kb.finish_ingest()  # BM25 statistics and HNSW under the readers too
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)
        kb.store.close()
    assert not errors, errors[:3]
    assert_clean(observations, timeline.windows)
    print(f"{len(observations)} reads: {dict(Counter(o['path'] for o in observations))}")


# -- processes -------------------------------------------------------------------------------------

AUTH = b"adiyan-visibility-window"


def _host(data_dir: str, sock: str, n_readers: int, result: str) -> None:
    """The process that owns the data directory: the writer, and a server thread per reader process."""
    from multiprocessing.connection import Listener

    kb = open_flip_kb(data_dir)
    timeline = Timeline()
    kb.fault_hook = timeline.hook
    errors: list[str] = []

    def serve(conn):
        try:
            while True:
                req = conn.recv()
                if req is None:
                    break
                conn.send(read(kb, req[0], req[1]))
        except EOFError:
            pass
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            errors.append(f"server: {type(exc).__name__}: {exc}")
            conn.send({"error": str(exc)})

    listener = Listener(sock, family="AF_UNIX", authkey=AUTH)
    servers = []
    for _ in range(n_readers):
        t = threading.Thread(target=serve, args=(listener.accept(),))
        t.start()
        servers.append(t)
    for i in range(1, FLIPS + 1):
        timeline.flip(kb, i)
    Path(data_dir, "writer-done").write_text("done")
    for t in servers:
        t.join(timeout=300)
    listener.close()
    kb.store.close()
    Path(result).write_text(json.dumps({"windows": timeline.windows, "errors": errors}))


def _raw_read(raw, path: str, requester) -> dict:
    """What the three whole-document paths read, straight from the raw store's SQLite."""
    if path == "list":
        rows = [r for r in raw.list(requester) if r.source_key == KEY]
        return {"versions": sorted({(SHA_TO_VERSION[r.sha256], r.visibility) for r in rows}), "hidden": False,
                "named": bool(rows)}
    rec = raw.get(KEY, requester)
    if rec is None:
        return {"versions": [], "hidden": True, "named": False}
    text = raw.read_blob(rec.text_sha256, ".md").decode() if path == "text" else raw.read_blob(rec.sha256).decode()
    return {"versions": sorted({(int(m.group(1)), m.group(2)) for m in _MARK.finditer(text)}), "hidden": False,
            "named": True}


def _reader(data_dir: str, sock: str, r: int, result: str) -> None:
    from multiprocessing.connection import Client

    from adiyan.ingest.rawstore import RawStore

    deadline = time.monotonic() + 600
    while not Path(sock).exists():
        time.sleep(0.05)
    conn = Client(sock, family="AF_UNIX", authkey=AUTH)
    raw = RawStore(Path(data_dir) / "raw")
    out, n = [], 0
    while not Path(data_dir, "writer-done").exists() and time.monotonic() < deadline:
        path, who = PATHS[n % len(PATHS)], REQUESTERS[(n // len(PATHS) + r) % len(REQUESTERS)]
        t0 = time.monotonic()
        conn.send((path, who))
        got = conn.recv()
        out.append({**got, "path": path, "requester": who, "t0": t0, "t1": time.monotonic(), "via": "host"})
        if path in ("text", "bytes", "list"):
            t0 = time.monotonic()
            got = _raw_read(raw, path, who)
            out.append({**got, "path": path, "requester": who, "t0": t0, "t1": time.monotonic(), "via": "sqlite"})
        n += 1
    conn.send(None)
    conn.close()
    Path(result).write_text(json.dumps(out))


def test_flips_with_reader_processes(tmp_path):
    """Injects: the same 200 flips in a host process, read by 2 reader processes through the host
    (all six paths) and straight from the raw store's SQLite (the whole-document paths). Expects:
    no leak, no mixed versions, no stale version, no gap, at any read of any process."""
    ctx = mp.get_context("spawn")
    data_dir, sock = tmp_path / "d", str(tmp_path / "kb.sock")
    host = ctx.Process(target=_host, args=(str(data_dir), sock, 2, str(tmp_path / "host.json")))
    host.start()
    readers = [ctx.Process(target=_reader, args=(str(data_dir), sock, r, str(tmp_path / f"reader{r}.json")))
               for r in range(2)]
    for p in readers:
        p.start()
    for p in [host, *readers]:
        p.join(timeout=900)
    for p in [host, *readers]:
        if p.is_alive():
            p.kill()
    assert host.exitcode == 0 and all(p.exitcode == 0 for p in readers), [p.exitcode for p in [host, *readers]]
    result = json.loads((tmp_path / "host.json").read_text())
    assert not result["errors"], result["errors"][:3]
    windows = {int(i): tuple(w) for i, w in result["windows"].items()}
    assert len(windows) == FLIPS + 1
    observations = [o for r in range(2) for o in json.loads((tmp_path / f"reader{r}.json").read_text())]
    assert not [o for o in observations if "error" in o]
    assert_clean(observations, windows)
    assert sum(o["via"] == "sqlite" for o in observations) >= 50
    print(f"{len(observations)} reads: {dict(Counter((o['via'], o['path']) for o in observations))}")
