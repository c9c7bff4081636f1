"""On-disk caches keyed by content hash, so a sweep pays only for what changed.

The embedding cache maps sha256(embedder identity, prefix, text) to a float32 row in SQLite; the
identity is the model's id, where it runs and its exact weights (adiyan/models/embedders.py), so
two runtimes of one model name never share rows (for a Matryoshka-cut model, the full-width row
under the full model's identity: every width shares one encode). A
``CachedEmbedder`` wraps any embedder: texts already seen cost one look-up, the rest go to the
model in slices of ``CachedEmbedder.SLICE`` texts, each slice written to the cache as soon as it
is embedded (a crash mid-encode loses at most one slice: the next run resumes where it stopped),
and hits / misses are counted for the run's report, with the texts whose input the model cut to
its window (``truncated``: remembered in the cache, so a text served from it is counted too).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from .types import Kind


SQLITE_TIMEOUT = 60.0  # seconds a connection waits for another process's lock


def connect_wal(path: str | Path, *, timeout: float = SQLITE_TIMEOUT) -> sqlite3.Connection:
    """A SQLite connection in WAL mode, safe when several processes open one new file at once.

    The busy timeout covers reads and writes but not the switch into WAL: while another process
    holds a file that is not in WAL mode yet (opening or switching it itself), ``PRAGMA
    journal_mode=WAL`` fails at once with "database is locked" (measured: 4 processes creating one
    file together, 14 of 100 tries; two Ray sweep points creating one fresh cache failed CI this
    way). So the switch is retried until ``timeout``; on a file already in WAL mode it is a no-op.
    """
    conn = sqlite3.connect(path, timeout=timeout)
    deadline, delay = time.monotonic() + timeout, 0.005
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return conn
        except sqlite3.OperationalError as exc:
            busy = (getattr(exc, "sqlite_errorcode", 0) & 0xFF) == sqlite3.SQLITE_BUSY  # any extended BUSY code
            if not busy or time.monotonic() >= deadline:
                conn.close()
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.25)


def embedder_identity(embedder) -> str:
    """Where the embedder runs and its exact weights (its ``identity``, adiyan/models/embedders.py): what
    caches, evaluation indexes and collections are keyed by. A test double without one: its id."""
    return getattr(embedder, "identity", None) or embedder.id


def embedding_key(embedder_id: str, prefix: str, text: str) -> str:
    h = hashlib.sha256()
    for part in (embedder_id, prefix, text):
        h.update(part.encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0

    def as_dict(self) -> dict:
        total = self.hits + self.misses
        return {"hits": self.hits, "misses": self.misses,
                "hit_rate": round(self.hits / total, 4) if total else None}


class EmbeddingCache:
    """SQLite key-value store of embedding rows; safe to share between threads and processes."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        with self._conn() as c:
            c.execute("CREATE TABLE IF NOT EXISTS embeddings (key TEXT PRIMARY KEY, dim INTEGER NOT NULL, "
                      "vec BLOB NOT NULL)")
            c.execute("CREATE TABLE IF NOT EXISTS truncated (key TEXT PRIMARY KEY)")  # rows of cut inputs

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect_wal(self.path)
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
        return conn

    def get_many(self, keys: Sequence[str]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        conn = self._conn()
        uniq = list(dict.fromkeys(keys))
        for i in range(0, len(uniq), 500):
            chunk = uniq[i : i + 500]
            rows = conn.execute(
                f"SELECT key, dim, vec FROM embeddings WHERE key IN ({','.join('?' * len(chunk))})", chunk)
            for key, dim, blob in rows:
                out[key] = np.frombuffer(blob, dtype=np.float32, count=dim).copy()
        return out

    def put_many(self, items: dict[str, np.ndarray]) -> None:
        if not items:
            return
        conn = self._conn()
        with conn:
            conn.executemany("INSERT OR REPLACE INTO embeddings (key, dim, vec) VALUES (?, ?, ?)",
                             [(k, int(v.shape[0]), np.asarray(v, np.float32).tobytes()) for k, v in items.items()])

    def __len__(self) -> int:
        return int(self._conn().execute("SELECT COUNT(*) FROM embeddings").fetchone()[0])

    def forget(self, keys: Sequence[str]) -> int:
        """Drop these rows (a deleted memory's text must not stay recoverable from its vector, nor its
        membership from its key); returns how many were held."""
        conn = self._conn()
        gone = 0
        uniq = list(dict.fromkeys(keys))
        conn.execute("PRAGMA secure_delete=ON")  # the freed pages are zeroed, not left with the vector
        with conn:
            for i in range(0, len(uniq), 500):
                chunk = uniq[i : i + 500]
                marks = ",".join("?" * len(chunk))
                gone += conn.execute(f"DELETE FROM embeddings WHERE key IN ({marks})", chunk).rowcount
                conn.execute(f"DELETE FROM truncated WHERE key IN ({marks})", chunk)
        if gone:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # and the write-ahead log no longer holds it
        return gone

    def mark_truncated(self, keys: Sequence[str]) -> None:
        """Remember that these rows were embedded from inputs cut to the model's window."""
        if keys:
            conn = self._conn()
            with conn:
                conn.executemany("INSERT OR IGNORE INTO truncated (key) VALUES (?)", [(k,) for k in keys])

    def truncated_among(self, keys: Sequence[str]) -> set[str]:
        out: set[str] = set()
        uniq = list(dict.fromkeys(keys))
        for i in range(0, len(uniq), 500):
            chunk = uniq[i : i + 500]
            out.update(k for (k,) in self._conn().execute(
                f"SELECT key FROM truncated WHERE key IN ({','.join('?' * len(chunk))})", chunk))
        return out


@dataclass
class EmbedStats(CacheStats):
    """An embedder's cache hits and misses, and the distinct texts whose input the model cut to its
    window (``truncated``: they were embedded from their head only)."""

    truncated: int = 0

    def as_dict(self) -> dict:
        return {**super().as_dict(), "truncated": self.truncated}


def forget_texts(embedders, texts) -> None:
    """Drop the cached rows of ``texts`` under every task prefix of each :class:`CachedEmbedder` in
    ``embedders`` (a deleted text must not stay recoverable from its vector; a bare model keeps no rows)."""
    texts = list(dict.fromkeys(texts))
    for emb in {id(e): e for e in embedders if e is not None}.values() if texts else ():
        forget = getattr(emb, "forget", None)
        if forget is not None:
            for task in ("document", "query", None):
                forget(texts, task)


class CachedEmbedder:
    """Any embedder, behind the embedding cache. Same interface as the embedder it wraps."""

    SLICE = 64  # texts per model call between cache writes
    PROGRESS_MIN = 256  # misses from which a progress bar is shown (when ``progress``)

    def __init__(self, inner, cache: EmbeddingCache, *, progress: bool = False):
        self.inner = inner
        self.cache = cache
        self.progress = progress
        self.stats = EmbedStats()
        self._truncated: set[str] = set()  # keys of this wrapper's texts whose input was cut
        self.id = inner.id
        self.identity = embedder_identity(inner)
        self.dim = inner.dim
        self.normalized = inner.normalized
        # a Matryoshka-cut model caches its full-width rows under the full model's identity and cuts on
        # the way out, so every width of one model shares one encode (embedders without embed_full: as is)
        self._full = bool(getattr(inner, "truncate_dim", None)) and hasattr(inner, "embed_full")
        self._key_id = (getattr(inner, "full_identity", None) or inner.full_id) if self._full else self.identity

    def prefix(self, kind: Kind | None) -> str:
        return self.inner.prefix(kind)

    def input_window(self) -> int | None:
        return getattr(self.inner, "input_window", lambda: None)()

    def count_tokens(self, text: str) -> int | None:
        return getattr(self.inner, "count_tokens", lambda t: None)(text)

    def describe(self) -> dict:
        return self.inner.describe()

    def embed(self, texts: Sequence[str], kind: Kind | None = "document") -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not one string")
        pre = self.prefix(kind)
        keys = [embedding_key(self._key_id, pre, t) for t in texts]
        found = self.cache.get_many(keys)
        todo: dict[str, str] = {}
        for k, t in zip(keys, texts):
            if k not in found and k not in todo:
                todo[k] = t
        self.stats.hits += len(texts) - len(todo)
        self.stats.misses += len(todo)
        if todo:
            found.update(self._embed_misses(todo, kind))
        if len(todo) < len(keys):  # rows from the cache: were their inputs cut when they were embedded?
            self._truncated.update(self.cache.truncated_among([k for k in keys if k not in todo]))
        self.stats.truncated = len(self._truncated)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        rows = np.stack([found[k] for k in keys]).astype(np.float32)
        return self.inner.cut(rows) if self._full else rows

    def keys_of(self, texts: Sequence[str], kind: Kind | None = "document") -> list[str]:
        """The cache keys these texts are (or would be) held under."""
        pre = self.prefix(kind)
        return [embedding_key(self._key_id, pre, t) for t in texts]

    def forget(self, texts: Sequence[str], kind: Kind | None = "document") -> int:
        """Drop the cached rows of these texts (see :meth:`EmbeddingCache.forget`); returns how many were held."""
        keys = self.keys_of(texts, kind)
        self._truncated.difference_update(keys)
        return self.cache.forget(keys)

    def _embed_misses(self, todo: dict[str, str], kind: Kind | None) -> dict[str, np.ndarray]:
        """Embed the misses slice by slice, committing each slice to the cache before the next."""
        items = list(todo.items())
        bar = None
        if self.progress and len(items) >= self.PROGRESS_MIN:
            from tqdm import tqdm  # third-party, optional UI: only for long encodes

            bar = tqdm(total=len(items), desc=f"embed {self.id}", unit="text", leave=False)
        out: dict[str, np.ndarray] = {}
        try:
            for i in range(0, len(items), self.SLICE):
                part = items[i : i + self.SLICE]
                texts = [t for _, t in part]
                vecs = self.inner.embed_full(texts, kind) if self._full else self.inner.embed(texts, kind)
                fresh = {k: v for (k, _), v in zip(part, vecs)}
                take = getattr(self.inner, "take_truncated", None)
                cut = take() if take is not None else None
                if cut:
                    self.cache.mark_truncated([k for (k, _), c in zip(part, cut) if c])
                    self._truncated.update(k for (k, _), c in zip(part, cut) if c)
                self.cache.put_many(fresh)
                out.update(fresh)
                if bar is not None:
                    bar.update(len(part))
        finally:
            if bar is not None:
                bar.close()
        return out


class CallCache:
    """JSON results of expensive deterministic calls (LLM answers, judge verdicts) by prompt hash."""

    def __init__(self, path: str | Path, namespace: str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.namespace = namespace
        self.stats = CacheStats()
        self._local = threading.local()
        with self._conn() as c:
            c.execute("CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, value TEXT NOT NULL)")

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect_wal(self.path)
            self._local.conn = conn
        return conn

    def key(self, payload: object) -> str:
        canon = json.dumps(payload, sort_keys=True, ensure_ascii=False, default=str)
        return hashlib.sha256(f"{self.namespace}\x00{canon}".encode("utf-8")).hexdigest()

    def get(self, key: str):
        row = self._conn().execute("SELECT value FROM calls WHERE key = ?", (key,)).fetchone()
        if row is None:
            self.stats.misses += 1
            return None
        self.stats.hits += 1
        return json.loads(row[0])

    def put(self, key: str, value: object) -> None:
        conn = self._conn()
        with conn:
            conn.execute("INSERT OR REPLACE INTO calls (key, value) VALUES (?, ?)", (key, json.dumps(value)))


CALLS_FILE = "calls.sqlite"  # answers, judge verdicts, calibrations, query transformations
PARSED_FILE = "parsed.sqlite"  # parsed documents


def call_cache(settings, namespace: str, file: str = CALLS_FILE) -> CallCache:
    """The call cache of ``namespace`` in ``settings.paths.cache_dir`` (``calls.sqlite`` unless
    ``file`` says otherwise): the one place a job builds it, so every entry point shares one file."""
    return CallCache(Path(settings.paths.cache_dir) / file, namespace)
