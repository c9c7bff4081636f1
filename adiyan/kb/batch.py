"""A batch of items as the documents the knowledge base ingests: keys, containers, duplicates.

An item is bytes with a name, or a path (read here, within ``ingest.max_bytes``). Its key is
``<owner>/<name>`` where the name may be a relative path (``adiyan ingest DIR`` names files by
their path under DIR). A container (:func:`adiyan.ingest.containers.is_container`: a ``.zip``
that is not an Office package, an ``.eml``) is expanded and each member becomes a document of
its own, keyed under the container's key (``alice/archive.zip/docs/a.txt``,
``alice/mail.eml/invoice.pdf``); an e-mail is also a document itself (headers and body), a zip
is not. ``expand`` opens one nested level itself (``archive.zip/inner.zip/a.txt``,
``archive.zip/mail.eml`` and ``archive.zip/mail.eml/invoice.pdf``) and enforces the limits, so
its members are ingested as they come. Two documents of one batch with the same key are
refused by name: the second never replaces the first silently.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from ..config import IngestConfig
from ..ingest.containers import expand, is_container
from ..ingest.parse import ParseError
from .policy import IngestError, source_key, validate_filename


@dataclass
class IngestItem:
    """One item of a batch: bytes (with a filename) or a path; the filename may be a relative path."""

    data: bytes | str | os.PathLike
    filename: str | None = None
    owner: str = ""
    visibility: str = "private"
    ingested_at: str | None = None


@dataclass
class BatchDocument:
    """One document to ingest: item ``item`` itself, or a member of it (``container`` set)."""

    item: int
    key: str
    name: str  # the name under the owner (file name or relative path): the record's filename
    data: bytes
    owner: str
    visibility: str
    ingested_at: str | None
    container: str | None = None  # key of the container it was expanded from


@dataclass
class BatchError:
    """A document (or a whole item) that cannot be ingested; ``container`` set for a member."""

    item: int
    error: IngestError
    container: str | None = None


@dataclass
class ContainerDone:
    """Item ``item`` was a container and is fully expanded: ``members`` are the keys of all its members."""

    item: int
    key: str
    members: set[str] = field(default_factory=set)
    is_document: bool = False  # an e-mail is a document itself; an archive is not


def basename(name: str) -> str:
    """The last component: what the parser sees (it decides the format by the extension)."""
    return name.rsplit("/", 1)[-1]


def read_item(item: IngestItem, ingest: IngestConfig) -> tuple[bytes, str]:
    """(bytes, name) of an item; a path is read only when it is within the size limit."""
    if isinstance(item.data, (bytes, bytearray)):
        if item.filename is None:
            raise IngestError("ingest_document(bytes) needs a filename")
        return bytes(item.data), item.filename
    path = Path(item.data)
    name = item.filename or path.name
    validate_filename(name)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise IngestError(f"{name!r}: cannot read: {exc.strerror}", source=_key_or_none(item.owner, name)) from None
    if size > ingest.max_bytes:
        raise IngestError(f"{name!r}: file is {size} bytes, over the limit of {ingest.max_bytes}",
                          source=_key_or_none(item.owner, name))
    return path.read_bytes(), name


def _key_or_none(owner: str, name: str) -> str | None:
    try:
        return source_key(owner, name)
    except IngestError:
        return None


def plan_batch(items: list[IngestItem], ingest: IngestConfig) -> Iterator[BatchDocument | BatchError | ContainerDone]:
    """The documents of a batch in order, one item at a time (only one item's bytes are read ahead)."""
    seen: dict[str, str] = {}  # key -> what first claimed it, for the duplicate message

    def claim(i: int, key: str, container: str | None) -> BatchError | None:
        first = seen.get(key)
        if first is not None:
            return BatchError(i, IngestError(f"{key!r}: same key as {first} earlier in this batch; refused so that "
                                             f"neither replaces the other silently", source=key), container)
        seen[key] = f"item {i + 1}" if container is None else f"a member of {container!r}"
        return None

    for i, item in enumerate(items):
        try:
            data, name = read_item(item, ingest)
            key = source_key(item.owner, name)
        except IngestError as exc:
            yield BatchError(i, exc)
            continue
        dup = claim(i, key, None)
        if dup is not None:
            yield dup
            continue
        if not is_container(basename(name), data):
            yield BatchDocument(i, key, name, data, item.owner, item.visibility, item.ingested_at)
            continue
        try:
            members = expand(data, basename(name), ingest)
        except ParseError as exc:  # a bomb, an escaping name, a broken archive: the container fails whole
            yield BatchError(i, IngestError(f"{key!r}: container refused, nothing of it changed: {exc}", source=key))
            continue
        done = ContainerDone(i, key, is_document=basename(name).lower().endswith(".eml"))
        if done.is_document:  # the e-mail itself: headers and body
            yield BatchDocument(i, key, name, data, item.owner, item.visibility, item.ingested_at)
        for m in members:  # already flat: containers.expand opens one nested level itself
            mname = f"{name}/{m.name}"
            try:
                mkey = source_key(item.owner, mname)  # defence in depth: containers.py validated the name
            except IngestError as exc:
                yield BatchError(i, exc, key)
                continue
            done.members.add(mkey)
            dup = claim(i, mkey, key)
            if dup is not None:
                yield dup
                continue
            yield BatchDocument(i, mkey, mname, m.data, item.owner, item.visibility, item.ingested_at, key)
        yield done
