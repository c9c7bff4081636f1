"""Original bytes of every ingested document, so "send me that file back" works.

Blobs are content-addressed (``files/<sha[:2]>/<sha256>``): a file name is a key in the SQLite
index, never a path on disk. The index row of a source key is its committed version: the
knowledge base writes it only after the new chunks are stored, in one transaction, so a crash
leaves either the old row or the new one, never half of each.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..cache import connect_wal
from ..types import Requester

SCHEMA = """
CREATE TABLE IF NOT EXISTS documents (
    source_key     TEXT PRIMARY KEY,
    filename       TEXT NOT NULL,
    owner_identity TEXT NOT NULL,
    visibility     TEXT NOT NULL,
    sha256         TEXT NOT NULL,
    size           INTEGER NOT NULL,
    ingested_at    TEXT NOT NULL,
    doc_version    TEXT NOT NULL,
    n_chunks       INTEGER NOT NULL,
    text_sha256    TEXT NOT NULL,
    report         TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS documents_owner ON documents(owner_identity);
CREATE INDEX IF NOT EXISTS documents_visibility ON documents(visibility);
"""


@dataclass
class DocumentRecord:
    source_key: str
    filename: str
    owner_identity: str
    visibility: str
    sha256: str
    size: int
    ingested_at: str
    doc_version: str
    n_chunks: int
    text_sha256: str
    report: dict

    def public(self) -> dict:
        return {"source": self.source_key, "filename": self.filename, "owner_identity": self.owner_identity,
                "visibility": self.visibility, "sha256": self.sha256, "size": self.size,
                "ingested_at": self.ingested_at, "chunks": self.n_chunks}


BLOB_WRITERS = 8  # threads writing one batch's blobs (fsync releases the GIL)
_COLS = "source_key, filename, owner_identity, visibility, sha256, size, ingested_at, doc_version, n_chunks, text_sha256, report"


def _row(r) -> DocumentRecord:
    return DocumentRecord(*r[:10], json.loads(r[10]))


class RawStore:
    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        (self.root / "files").mkdir(parents=True, exist_ok=True)
        self.db_path = self.root / "documents.sqlite"
        self._local = threading.local()
        with self._conn() as c:
            c.executescript(SCHEMA)

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect_wal(self.db_path)
            self._local.conn = conn
        return conn

    def _blob(self, sha: str, kind: str = "") -> Path:
        return self.root / "files" / sha[:2] / (sha + kind)

    def put_blob(self, data: bytes, kind: str = "") -> str:
        """Store bytes under their sha256 (atomic: temp file, fsync, rename); return the hash."""
        sha = hashlib.sha256(data).hexdigest()
        path = self._blob(sha, kind)
        if path.is_file() and path.stat().st_size == len(data):
            return sha
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
        return sha

    def put_blobs(self, items: Sequence[tuple[bytes, str]]) -> list[str]:
        """``put_blob`` for several blobs, written and fsynced concurrently: the file system's journal
        then commits many fsyncs at once (one after another, each waits for its own commit; at a
        million one-chunk documents that wait was most of the write path). Hashes in order; any
        failure is raised, as one ``put_blob``'s would be."""
        if len(items) <= 1:
            return [self.put_blob(data, kind) for data, kind in items]
        with ThreadPoolExecutor(max_workers=min(BLOB_WRITERS, len(items))) as pool:
            return list(pool.map(lambda item: self.put_blob(*item), items))

    def read_blob(self, sha: str, kind: str = "") -> bytes:
        return self._blob(sha, kind).read_bytes()

    def commit(self, rec: DocumentRecord) -> None:
        self.commit_many([rec])

    def commit_many(self, records: Sequence[DocumentRecord], remove: Sequence[str] = ()) -> None:
        """Commit index rows (and remove the rows of ``remove``) in one transaction: all of it or none."""
        if not records and not remove:
            return
        conn = self._conn()
        with conn:
            conn.executemany("DELETE FROM documents WHERE source_key = ?", [(k,) for k in remove])
            conn.executemany(f"INSERT OR REPLACE INTO documents ({_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                             [(rec.source_key, rec.filename, rec.owner_identity, rec.visibility, rec.sha256,
                               rec.size, rec.ingested_at, rec.doc_version, rec.n_chunks, rec.text_sha256,
                               json.dumps(rec.report)) for rec in records])

    def get(self, source_key: str, requester: Requester | str | None = None) -> DocumentRecord | None:
        """The record, or None when it does not exist *or* the requester may not see it."""
        who = Requester.of(requester)
        sql = f"SELECT {_COLS} FROM documents WHERE source_key = ?"
        args: list = [source_key]
        if not who.is_owner:
            sql += " AND (visibility = 'global' OR owner_identity = ?)"
            args.append(who.id if who.id is not None else "\x00")
        r = self._conn().execute(sql, args).fetchone()
        return _row(r) if r else None

    def list(self, requester: Requester | str | None = None) -> list[DocumentRecord]:
        who = Requester.of(requester)
        sql = f"SELECT {_COLS} FROM documents"
        args: list = []
        if not who.is_owner:
            sql += " WHERE visibility = 'global' OR owner_identity = ?"
            args.append(who.id if who.id is not None else "\x00")
        return [_row(r) for r in self._conn().execute(sql + " ORDER BY source_key", args)]

    def committed(self, source_keys) -> dict[str, tuple[str, str, str]]:
        """{key: (doc_version, visibility, owner_identity)} of the committed rows among ``source_keys``,
        read in one statement per 500 keys (one statement is one consistent snapshot: the knowledge
        base's read gate uses it so a search shows exactly the committed version of each document)."""
        keys = list(dict.fromkeys(source_keys))
        out: dict[str, tuple[str, str, str]] = {}
        conn = self._conn()
        for i in range(0, len(keys), 500):
            part = keys[i: i + 500]
            out.update((r[0], (r[1], r[2], r[3])) for r in conn.execute(
                "SELECT source_key, doc_version, visibility, owner_identity FROM documents WHERE source_key IN "
                f"({','.join('?' * len(part))})", part))
        return out

    def under(self, prefix: str) -> list[DocumentRecord]:
        """Every record whose key starts with ``prefix`` (a container's members: ``<key>/``)."""
        sql = f"SELECT {_COLS} FROM documents WHERE substr(source_key, 1, ?) = ? ORDER BY source_key"
        return [_row(r) for r in self._conn().execute(sql, (len(prefix), prefix))]

    def all_versions(self) -> dict[str, str]:
        return dict(self._conn().execute("SELECT source_key, doc_version FROM documents"))

    def set_visibility(self, source_key: str, visibility: str, owner_identity: str) -> None:
        conn = self._conn()
        with conn:
            conn.execute("UPDATE documents SET visibility = ?, owner_identity = ? WHERE source_key = ?",
                         (visibility, owner_identity, source_key))
