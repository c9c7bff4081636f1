"""Files that hold other files: ``.zip`` archives (not DOCX/PPTX/XLSX) and ``.eml`` e-mails.

``parse_document`` refuses a ``.zip`` (code ``container``) and reads an ``.eml``'s own text;
``expand`` returns the documents inside, for the knowledge base to ingest one by one.

Zip bombs are stopped twice. From the central directory, before anything is inflated: the
member count, the total declared uncompressed size and each member's ratio of declared to
compressed size (for members over ``RATIO_FLOOR``; a small file cannot amplify much and the
total caps it). While inflating: every member is inflated with a bounded decompressor that stops
one byte past the size the central directory declared, so a header that lies about a member's
size is caught, not believed; the CRC is checked too. Member names are validated as keys
(``names.check_name``: no '..' component, not absolute, no drive letter, no backslash, no NUL,
read from the raw central directory, since ``zipfile`` cuts a name at a NUL); a name twice, an
encrypted member or a symbolic link is refused by name. ``__MACOSX/`` and ``.DS_Store`` entries
(Finder metadata, never a user's document) are skipped, and so are directories.

Nesting: a zip or e-mail inside the container is opened and its members come back as
``inner.zip/member`` / ``mail.eml/attachment``, counted against the same limits; an e-mail
member is also returned itself, since its own text is a document. Archives nest one level: a
zip inside the archive (directly, or attached to an e-mail in it) is expanded, a zip inside that
one is refused by name (``nested_archive``). E-mails nest up to ``MAX_MAILS`` deep (forwards of
forwards): MIME cannot amplify its size, and the count and size limits still apply. No returned
member needs expanding again: call ``parse_document`` on each (with its full name), never
``expand``.
"""

from __future__ import annotations

import io
import stat
import struct
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import PurePosixPath

from ..config import IngestConfig
from .mail import attachments, read_message
from .names import name_problem
from .report import ParseError

RATIO_FLOOR = 1 << 20  # members smaller than 1 MiB are not ratio-checked
MAX_ZIPS = 2  # the archive and one archive inside it
MAX_MAILS = 5  # attached messages, forwards of forwards
_OOXML_MAIN = ("word/document.xml", "ppt/presentation.xml", "xl/workbook.xml")
_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")  # zipfile's structFileHeader: 30 bytes
_SKIPPED_DIRS = ("__MACOSX/",)
_SKIPPED_FILES = (".DS_Store",)


@dataclass(frozen=True)
class Member:
    name: str  # path inside the container, '/'-separated, validated (no '..', not absolute, no NUL)
    data: bytes


def is_container(filename: str, data: bytes) -> bool:
    """True for a ``.zip`` archive that is not an Office Open XML package, and for any ``.eml``."""
    extension = PurePosixPath(filename).suffix.lower()
    if extension == ".eml":
        return True
    return extension == ".zip" and data[:4] in (b"PK\x03\x04", b"PK\x05\x06") and not is_ooxml(data)


def is_ooxml(data: bytes) -> bool:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as package:
            names = set(package.namelist())
    except zipfile.BadZipFile:
        return False
    return "[Content_Types].xml" in names and any(main in names for main in _OOXML_MAIN)


def expand(data: bytes, filename: str, ingest: IngestConfig) -> list[Member]:
    """The documents inside ``filename``; raises ParseError naming the container and the member."""
    extension = PurePosixPath(filename).suffix.lower()
    return _Expansion(filename, ingest).members(data, filename, prefix="", zips=int(extension == ".zip"),
                                                mails=int(extension == ".eml"))


class _Expansion:
    """One expansion's running totals, shared by nested containers."""

    def __init__(self, filename: str, ingest: IngestConfig):
        self.filename = filename
        self.ingest = ingest
        self.count = 0
        self.total = 0

    def fail(self, code: str, reason: str):
        return ParseError(self.filename, code, reason)

    def members(self, data: bytes, name: str, prefix: str, zips: int, mails: int) -> list[Member]:
        """``zips`` and ``mails``: how many archives and e-mails enclose these members, this one included."""
        extension = PurePosixPath(name).suffix.lower()
        where = f"member {prefix.rstrip('/')!r}" if prefix else "it"
        if extension == ".eml":
            try:
                inner = attachments(read_message(data, name))
            except ParseError as exc:
                if not prefix:
                    raise
                raise self.fail("unreadable_archive", f"{where}: {exc.reason}") from exc
            self._account([(n, len(blob)) for n, blob in inner], prefix)
        elif extension == ".zip":
            if is_ooxml(data):
                raise self.fail("container", f"{where} is an Office document (DOCX, PPTX or XLSX) named .zip; "
                                "give it its real extension")
            inner = self._zip(data, prefix)
            if not inner and not prefix:
                raise self.fail("empty_archive", "the archive holds no files")
        else:
            raise self.fail("container", f"{where} is not a .zip archive or an .eml e-mail")
        out = []
        for member_name, blob in inner:
            path = prefix + member_name
            if (problem := name_problem(member_name)) is not None:
                raise self.fail("unsafe_member", f"member {path!r} refused: {problem}")
            if not is_container(member_name, blob):
                out.append(Member(path, blob))
                continue
            mail = PurePosixPath(member_name).suffix.lower() == ".eml"
            if (not mail and zips >= MAX_ZIPS) or (mail and mails >= MAX_MAILS):
                kind = f"an e-mail nested {MAX_MAILS + 1} deep" if mail else "an archive inside an archive inside an archive"
                raise self.fail("nested_archive", f"member {path!r} is {kind}; only one archive inside another "
                                f"(and e-mails {MAX_MAILS} deep) are expanded: extract it and ingest it on its own")
            if mail:
                out.append(Member(path, blob))  # the e-mail's own text is a document too
            out.extend(self.members(blob, member_name, path + "/", zips + (not mail), mails + mail))
        return out

    def _account(self, sizes: list[tuple[str, int]], prefix: str) -> None:
        """Count members and declared bytes against the limits, before reading any of them."""
        self.count += len(sizes)
        if self.count > self.ingest.archive_max_members:
            raise self.fail("archive_limit", f"it holds more than {self.ingest.archive_max_members} members in all "
                            "(ingest.archive_max_members)")
        self.total += sum(size for _, size in sizes)
        if self.total > self.ingest.archive_max_total_bytes:
            raise self.fail("archive_limit", "its members would inflate to more than "
                            f"{self.ingest.archive_max_total_bytes:,} bytes (ingest.archive_max_total_bytes); "
                            f"the headers declare {self.total:,}")

    def _zip(self, data: bytes, prefix: str) -> list[tuple[str, bytes]]:
        try:
            archive = zipfile.ZipFile(io.BytesIO(data))
            infos = archive.infolist()
        except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, struct.error) as exc:
            raise self.fail("unreadable_archive", f"{prefix or 'it'}: not a readable zip archive: {exc}") from exc
        files = [i for i in infos if not i.orig_filename.endswith("/") and not _skipped(i.orig_filename)]
        seen = set()
        for info in files:
            path = prefix + info.orig_filename
            if (problem := name_problem(info.orig_filename)) is not None:
                raise self.fail("unsafe_member", f"member {path!r} refused: {problem}")
            if info.orig_filename in seen:
                raise self.fail("unsafe_member", f"member {path!r} appears twice in the archive")
            seen.add(info.orig_filename)
            if info.flag_bits & 0x1:
                raise self.fail("unreadable_archive", f"member {path!r} is encrypted; give an unencrypted archive")
            if stat.S_ISLNK(info.external_attr >> 16):
                raise self.fail("unsafe_member", f"member {path!r} is a symbolic link, not a document")
            self._check_ratio(path, info.file_size, info.compress_size, "declares")
        self._account([(i.orig_filename, i.file_size) for i in files], prefix)
        return [(info.orig_filename, self._inflate(archive, data, info, prefix + info.orig_filename))
                for info in files]

    def _check_ratio(self, path: str, size: int, compressed: int, verb: str) -> None:
        ratio = size / max(compressed, 1)
        if size > RATIO_FLOOR and ratio > self.ingest.archive_max_ratio:
            raise self.fail("archive_limit", f"member {path!r} {verb} a compression ratio of {ratio:,.0f} "
                            f"({size:,} bytes from {compressed:,}), over ingest.archive_max_ratio "
                            f"{self.ingest.archive_max_ratio:g}: refused as a likely zip bomb")

    def _inflate(self, archive: zipfile.ZipFile, data: bytes, info: zipfile.ZipInfo, path: str) -> bytes:
        """The member's bytes, never more than its declared size plus one (which proves a lie)."""
        declared = info.file_size
        try:
            if info.compress_type in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                out = _bounded_inflate(_raw(data, info), info.compress_type, declared + 1)
            else:  # bzip2, lzma: zipfile itself stops at the declared size and checks the CRC
                with archive.open(info) as stream:
                    out = stream.read(declared + 1)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, struct.error) as exc:
            raise self.fail("unreadable_archive", f"member {path!r} cannot be inflated: {exc}") from exc
        if len(out) > declared:
            raise self.fail("archive_limit", f"member {path!r} inflates beyond the {declared:,} bytes its "
                            "header declares: the archive lies about its sizes (a zip bomb?)")
        if len(out) < declared or zlib.crc32(out) != info.CRC:
            raise self.fail("unreadable_archive", f"member {path!r} is corrupt (its size or CRC does not match "
                            "the central directory)")
        self._check_ratio(path, len(out), info.compress_size, "has")
        return out


def _skipped(name: str) -> bool:
    return name.startswith(_SKIPPED_DIRS) or PurePosixPath(name).name in _SKIPPED_FILES


def _raw(data: bytes, info: zipfile.ZipInfo) -> bytes:
    """The member's compressed bytes, located through its local header."""
    header = _LOCAL_HEADER.unpack_from(data, info.header_offset)
    if header[0] != b"PK\x03\x04":
        raise zipfile.BadZipFile("bad local file header")
    start = info.header_offset + _LOCAL_HEADER.size + header[10] + header[11]
    raw = data[start:start + info.compress_size]
    if len(raw) < info.compress_size:
        raise zipfile.BadZipFile("the member's data is cut short")
    return raw


def _bounded_inflate(raw: bytes, method: int, limit: int) -> bytes:
    """Inflate at most ``limit`` bytes of output, whatever the stream would produce."""
    if method == zipfile.ZIP_STORED:
        return raw[:limit]
    inflater = zlib.decompressobj(-15)
    out = bytearray()
    pending = raw
    while len(out) < limit:
        chunk = inflater.decompress(pending, limit - len(out))
        out += chunk
        pending = inflater.unconsumed_tail
        if inflater.eof or (not chunk and not pending):
            break
    return bytes(out)
