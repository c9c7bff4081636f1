"""Source keys and the access policy: what a document is called, who may read it, and which of
its chunks a read may return (the committed version's, see :func:`committed_only`).

A document is keyed ``<owner>/<name>``, where ``name`` is a file name or a relative path of
validated components (``a/notes.txt``; a container's member ``mail.eml/invoice.pdf``). A key is
a key, never a path: nothing is ever written to a path built from it (the raw store keeps blobs
by content hash), so the checks here only have to make keys unambiguous and impossible to read
as somewhere else: no empty, ``.`` or ``..`` component, no NUL, no backslash, no drive letter,
nothing absolute, bounded lengths. ``Co..md`` is a fine name: ``..`` only matters as a whole
component. Keys are never Unicode-normalised (NFKC folds look-alikes such as ``‥／`` into
``../``), so a look-alike is simply another key.
"""

from __future__ import annotations

from ..ingest.names import name_problem
from ..store.base import Cond, Filter
from ..types import Requester

VISIBILITIES = ("private", "global")
MAX_COMPONENT_BYTES = 255  # what common file systems allow for one name
MAX_NAME_BYTES = 1024  # a whole relative name
MAX_DEPTH = 32  # components in a relative name


class IngestError(ValueError):
    """A document could not be ingested; the message names the file and the reason.

    ``source`` is the key it would have had, when it got that far (a batch names failed
    container members by it)."""

    def __init__(self, message: str, source: str | None = None):
        super().__init__(message)
        self.source = source


def _shown(name: str) -> str:
    return f"{name[:40]!r}..." if len(name.encode("utf-8", "surrogatepass")) > MAX_COMPONENT_BYTES else repr(name)


def validate_filename(filename: str) -> str:
    """A file name or a '/'-separated relative name of validated components; returned unchanged.

    The component rules are the parser's (:func:`adiyan.ingest.names.name_problem`, one check for
    uploaded names and container members); here come the length limits of a key.
    """
    if not isinstance(filename, str) or not filename.strip():
        raise IngestError(f"{filename!r}: empty file name")
    shown = _shown(filename)
    problem = name_problem(filename)
    if problem is not None:
        raise IngestError(f"{shown}: file name refused: {problem}")
    if len(filename.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        raise IngestError(f"{shown}: relative name longer than {MAX_NAME_BYTES} bytes")
    parts = filename.split("/")
    if len(parts) > MAX_DEPTH:
        raise IngestError(f"{shown}: relative name deeper than {MAX_DEPTH} folders")
    for part in parts:
        if not part.strip():
            raise IngestError(f"{shown}: path component {part!r} is blank")
        if len(part.encode("utf-8", "surrogatepass")) > MAX_COMPONENT_BYTES:
            raise IngestError(f"{shown}: file name longer than {MAX_COMPONENT_BYTES} bytes")
    return filename


def source_key(owner_identity: str, filename: str) -> str:
    """``<owner>/<name>``; the owner is one component (no '/', NUL, surrounding blanks)."""
    if not owner_identity or not isinstance(owner_identity, str) or "/" in owner_identity \
            or "\x00" in owner_identity or owner_identity.strip() != owner_identity:
        raise IngestError(f"{filename!r}: invalid owner identity {owner_identity!r}")
    return f"{owner_identity}/{validate_filename(filename)}"


def access_filter(requester: Requester | str | None) -> Filter | None:
    """None (no restriction) for the owner role; otherwise global or the requester's own."""
    who = Requester.of(requester)
    if who.is_owner:
        return None
    should = [Cond("visibility", "global")]
    if who.id:
        should.append(Cond("owner_identity", who.id))
    return Filter(should=tuple(should))


def committed_only(hits: list, committed) -> tuple[list, int]:
    """The hits a read may return, and how many it may not.

    A chunk may be returned only when its source's committed record (``committed(keys)`` →
    ``{key: (doc_version, visibility, owner)}``, read in one SQLite statement, so one snapshot)
    names exactly the chunk's ``(doc_version, visibility, owner_identity)``. So a read never
    shows a version that is not committed yet (stored before its commit), one that was replaced
    (until its chunks are deleted, or after a crash until the next open repairs it), or a
    document that was removed; every chunk of a source in one result is of one version; and a
    chunk is never visible beyond what the committed record allows, whatever its payload says.
    Chunks written before versions existed (no ``doc_version``, no record: the seed's legacy
    chunks, see ``migrate_private``) are judged by their payload alone, as before.
    """
    records = committed({h.payload.get("source_filename") for h in hits})
    kept, stale = [], 0
    for h in hits:
        p = h.payload
        rec = records.get(p.get("source_filename"))
        if rec is None:
            ok = not p.get("doc_version")
        else:
            ok = rec == (p.get("doc_version"), p.get("visibility"), p.get("owner_identity"))
        if ok:
            kept.append(h)
        else:
            stale += 1
    return kept, stale


def visible_to(payload: dict, requester: Requester | str | None) -> bool:
    """The access filter of :func:`access_filter`, applied to one chunk's payload."""
    who = Requester.of(requester)
    return who.is_owner or payload.get("visibility") == "global" or (
        bool(who.id) and payload.get("owner_identity") == who.id)

