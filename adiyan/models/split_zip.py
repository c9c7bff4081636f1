"""Read one entry of a zip cut into fixed-size parts, some of them missing, and extract it verified.

A split zip's offsets count from the start of part 1, so an absolute offset maps to
``(part = offset // part_size + 1, position = offset % part_size)``. As long as the central
directory (in the last part) and the entry's local header and data lie in the parts given, the
entry is found and inflated from those parts alone, streamed in blocks, without ever joining
them on disk.

:func:`extract_split_zip_member` takes the parts, the part size and the expected size/sha256 as
parameters (tests run it on a small synthetic split zip); the extracted file is checked against
the zip's CRC32 and the expected size and sha256 before it is renamed into place, and the
verified digest is remembered in a ``<name>.sha256`` sidecar (:func:`verified_copy`).
:mod:`adiyan.models.nomic_gguf` applies it to the nomic-embed-text GGUF in the GPT4All parts.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from tqdm.auto import tqdm

# One exception type for every model asset of the package (a RuntimeError subclass), so
# callers that catch adiyan.models.ModelAssetError also catch the errors raised here.
from .base import ModelAssetError

__all__ = ["BLOCK_SIZE", "ModelAssetError", "ZipMember", "extract_split_zip_member", "locate_member",
           "verified_copy"]

#: Streaming block: bounds memory whatever the size of the entry.
BLOCK_SIZE = 8 * 1024 * 1024

_EOCD_SIG = b"PK\x05\x06"
_ZIP64_LOCATOR_SIG = b"PK\x06\x07"
_ZIP64_EOCD_SIG = b"PK\x06\x06"
_CDIR_SIG = b"PK\x01\x02"
_LOCAL_SIG = b"PK\x03\x04"
_EOCD_LEN = 22
_ZIP64_LOCATOR_LEN = 20
_MAX_COMMENT = 0xFFFF


# --------------------------------------------------------------------------- split-zip reading


class _SplitParts:
    """Random access to a zip cut into fixed-size parts, addressed by absolute offsets.

    Offsets count from the start of part 1; parts before the first one given are simply
    absent, and reading from them raises :class:`ModelAssetError`.
    """

    def __init__(self, parts: Mapping[int, Path | str], part_size: int) -> None:
        if not parts:
            raise ModelAssetError("no split-zip parts given")
        if part_size <= 0:
            raise ModelAssetError(f"part size must be positive, got {part_size}")
        self.part_size = part_size
        self.parts = {int(n): Path(p) for n, p in parts.items()}
        numbers = sorted(self.parts)
        self.first, self.last = numbers[0], numbers[-1]
        if numbers != list(range(self.first, self.last + 1)):
            gaps = sorted(set(range(self.first, self.last + 1)) - set(numbers))
            raise ModelAssetError(f"split-zip parts are not contiguous: missing part(s) {gaps}")
        for n in numbers:
            path = self.parts[n]
            if not path.is_file():
                raise ModelAssetError(f"split-zip part {n} not found: {path}")
            size = path.stat().st_size
            if n != self.last and size != part_size:
                raise ModelAssetError(
                    f"split-zip part {n} ({path}) has {size} bytes, expected {part_size}"
                )
            if n == self.last and not 0 < size <= part_size:
                raise ModelAssetError(
                    f"last split-zip part {n} ({path}) has {size} bytes, expected 1..{part_size}"
                )
        self.last_size = self.parts[self.last].stat().st_size
        #: Absolute offset one past the last byte of the archive.
        self.end = (self.last - 1) * part_size + self.last_size
        #: Absolute offset of the first byte we hold.
        self.start = (self.first - 1) * part_size
        self._handles: dict[int, BinaryIO] = {}

    def close(self) -> None:
        for fh in self._handles.values():
            fh.close()
        self._handles.clear()

    def __enter__(self) -> _SplitParts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def locate(self, offset: int) -> tuple[int, int]:
        """Map an absolute offset to ``(part number, position in part)``."""
        return offset // self.part_size + 1, offset % self.part_size

    def _handle(self, number: int) -> BinaryIO:
        fh = self._handles.get(number)
        if fh is None:
            fh = open(self.parts[number], "rb")  # noqa: SIM115 - closed in close()
            self._handles[number] = fh
        return fh

    def iter_range(self, offset: int, length: int, block: int = BLOCK_SIZE) -> Iterator[bytes]:
        """Yield the bytes ``[offset, offset + length)`` in blocks of at most ``block`` bytes."""
        if offset < 0 or length < 0:
            raise ModelAssetError(f"invalid range: offset {offset}, length {length}")
        if offset < self.start:
            part, pos = self.locate(offset)
            raise ModelAssetError(
                f"offset {offset} lies in part {part} (position {pos}); only parts "
                f"{self.first}-{self.last} are available"
            )
        if offset + length > self.end:
            raise ModelAssetError(
                f"range {offset}+{length} runs past the end of the archive ({self.end} bytes "
                f"counted from part 1); parts truncated?"
            )
        remaining = length
        while remaining:
            part, pos = self.locate(offset)
            fh = self._handle(part)
            n = min(block, remaining, self.part_size - pos)
            fh.seek(pos)
            data = fh.read(n)
            if len(data) != n:
                raise ModelAssetError(
                    f"short read from part {part} at {pos}: wanted {n} bytes, got {len(data)}"
                )
            yield data
            offset += n
            remaining -= n

    def read(self, offset: int, length: int) -> bytes:
        return b"".join(self.iter_range(offset, length))


@dataclass(frozen=True)
class ZipMember:
    """What the central directory says about one entry (offsets absolute, from part 1)."""

    name: str
    method: int
    flags: int
    crc32: int
    compressed_size: int
    uncompressed_size: int
    local_header_offset: int


def _find_eocd(sp: _SplitParts) -> tuple[int, bytes]:
    """Find the end-of-central-directory record at the tail of the last part."""
    tail_len = min(sp.last_size, _EOCD_LEN + _MAX_COMMENT)
    tail_start = sp.end - tail_len
    tail = sp.read(tail_start, tail_len)
    idx = tail.rfind(_EOCD_SIG)
    while idx != -1:
        rec = tail[idx:]
        if len(rec) >= _EOCD_LEN:
            (comment_len,) = struct.unpack_from("<H", rec, 20)
            if idx + _EOCD_LEN + comment_len == len(tail):
                return tail_start + idx, rec[:_EOCD_LEN]
        idx = tail.rfind(_EOCD_SIG, 0, idx)
    raise ModelAssetError(
        f"no zip end-of-central-directory record in the last part ({sp.parts[sp.last]}); "
        "is it really the last part of the split zip?"
    )


def _central_directory(sp: _SplitParts) -> tuple[int, int, int]:
    """Return ``(entry count, central directory offset, central directory size)``, ZIP64-aware."""
    eocd_off, eocd = _find_eocd(sp)
    (_sig, _disk, _cd_disk, _n_here, n_total, cd_size, cd_off, _clen) = struct.unpack(
        "<4sHHHHIIH", eocd
    )
    needs64 = n_total == 0xFFFF or cd_size == 0xFFFFFFFF or cd_off == 0xFFFFFFFF
    loc_off = eocd_off - _ZIP64_LOCATOR_LEN
    if loc_off >= sp.start:
        loc = sp.read(loc_off, _ZIP64_LOCATOR_LEN)
        if loc[:4] == _ZIP64_LOCATOR_SIG:
            _s, _d, z64_off, _ndisks = struct.unpack("<4sIQI", loc)
            rec = sp.read(z64_off, 56)
            if rec[:4] != _ZIP64_EOCD_SIG:
                raise ModelAssetError(f"bad ZIP64 end-of-central-directory record at {z64_off}")
            (_s, _rsize, _vm, _vn, _d1, _d2, _nh, n_total, cd_size, cd_off) = struct.unpack(
                "<4sQHHIIQQQQ", rec
            )
            return n_total, cd_off, cd_size
    if needs64:
        raise ModelAssetError("zip needs ZIP64 fields but has no ZIP64 end-of-central-directory")
    return n_total, cd_off, cd_size


def _iter_central_directory(sp: _SplitParts) -> Iterator[ZipMember]:
    n_total, cd_off, cd_size = _central_directory(sp)
    buf = b""
    pos = 0
    stream = sp.iter_range(cd_off, cd_size, block=1024 * 1024)

    def need(n: int) -> bytes:
        nonlocal buf, pos
        while len(buf) - pos < n:
            try:
                buf = buf[pos:] + next(stream)
                pos = 0
            except StopIteration:
                raise ModelAssetError("central directory ends in the middle of an entry") from None
        out = buf[pos : pos + n]
        pos += n
        return out

    for _ in range(n_total):
        head = need(46)
        if head[:4] != _CDIR_SIG:
            raise ModelAssetError("corrupt central directory (bad entry signature)")
        (
            _sig, _vm, _vn, flags, method, _t, _d, crc, csize, usize,
            nlen, xlen, clen, _disk, _ia, _ea, lho,
        ) = struct.unpack("<4sHHHHHHIIIHHHHHII", head)
        raw_name = need(nlen)
        extra = need(xlen)
        need(clen)
        name = raw_name.decode("utf-8" if flags & 0x800 else "cp437", errors="replace")
        if 0xFFFFFFFF in (csize, usize, lho):
            usize, csize, lho = _apply_zip64_extra(extra, usize, csize, lho)
        yield ZipMember(name, method, flags, crc, csize, usize, lho)


def _apply_zip64_extra(extra: bytes, usize: int, csize: int, lho: int) -> tuple[int, int, int]:
    """Replace 0xFFFFFFFF sizes/offset with the values in the ZIP64 extra field (id 0x0001)."""
    i = 0
    while i + 4 <= len(extra):
        tag, size = struct.unpack_from("<HH", extra, i)
        body = extra[i + 4 : i + 4 + size]
        if tag == 0x0001:
            j = 0
            vals = []
            for field in (usize, csize, lho):
                if field == 0xFFFFFFFF:
                    (v,) = struct.unpack_from("<Q", body, j)
                    vals.append(v)
                    j += 8
                else:
                    vals.append(field)
            return vals[0], vals[1], vals[2]
        i += 4 + size
    raise ModelAssetError("entry needs ZIP64 sizes but has no ZIP64 extra field")


def _name_matches(name: str, suffix: str) -> bool:
    """True if ``suffix`` is ``name`` or a trailing run of its path components."""
    suffix = suffix.lstrip("/")
    return name == suffix or name.endswith("/" + suffix)


def _find_member(sp: _SplitParts, name_suffix: str) -> ZipMember:
    found = [m for m in _iter_central_directory(sp) if _name_matches(m.name, name_suffix)]
    if not found:
        raise ModelAssetError(
            f"no entry ending in {name_suffix!r} in the split zip's central directory"
        )
    if len(found) > 1:
        raise ModelAssetError(
            f"{len(found)} entries end in {name_suffix!r}: " + ", ".join(m.name for m in found)
        )
    return found[0]


def locate_member(
    parts: Mapping[int, Path | str], *, part_size: int, name_suffix: str
) -> ZipMember:
    """Find the single entry whose path ends with ``name_suffix`` in the split zip's central directory."""
    with _SplitParts(parts, part_size) as sp:
        return _find_member(sp, name_suffix)


# --------------------------------------------------------------------------- extraction


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(BLOCK_SIZE):
            h.update(block)
    return h.hexdigest()


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _cached_ok(path: Path, expected_size: int, expected_sha256: str) -> bool:
    """True if ``path`` has the expected size and sha256.

    The verified digest is cached in ``<name>.sha256`` keyed by size and mtime, so a
    270 MB file is hashed once, not on every start of the workbench.
    """
    try:
        st = path.stat()
    except FileNotFoundError:
        return False
    if st.st_size != expected_size:
        return False
    side = _sidecar(path)
    try:
        meta = json.loads(side.read_text())
        if (
            meta.get("size") == st.st_size
            and meta.get("mtime_ns") == st.st_mtime_ns
            and meta.get("sha256") == expected_sha256.lower()
        ):
            return True
    except (OSError, ValueError, AttributeError):
        pass
    if _sha256_file(path) != expected_sha256.lower():
        return False
    _write_sidecar(path, expected_sha256)
    return True


def _write_sidecar(path: Path, sha256: str) -> None:
    st = path.stat()
    side = _sidecar(path)
    tmp = side.with_name(side.name + f".tmp{os.getpid()}")
    tmp.write_text(
        json.dumps({"sha256": sha256.lower(), "size": st.st_size, "mtime_ns": st.st_mtime_ns})
        + "\n"
    )
    os.replace(tmp, side)


def _corrupt(member: ZipMember, detail: str) -> ModelAssetError:
    """Error for data that break while inflating, before the CRC32/sha256 can even be compared."""
    return ModelAssetError(
        f"{member.name}: corrupt data, integrity check failed (cannot match CRC32 "
        f"{member.crc32:08x} / expected sha256): {detail}"
    )


def _inflate_to(
    sp: _SplitParts,
    member: ZipMember,
    data_offset: int,
    out,
    bar,
) -> tuple[int, int, str]:
    """Stream the member's data to ``out``; return ``(size, crc32, sha256)`` of what was written."""
    crc = 0
    size = 0
    sha = hashlib.sha256()

    def emit(chunk: bytes) -> None:
        nonlocal crc, size
        if not chunk:
            return
        out.write(chunk)
        crc = zlib.crc32(chunk, crc)
        sha.update(chunk)
        size += len(chunk)
        if size > member.uncompressed_size:
            raise _corrupt(
                member,
                f"size mismatch: expected {member.uncompressed_size} bytes, "
                f"got more (stopped at {size})",
            )
        if bar is not None:
            bar.update(len(chunk))

    blocks = sp.iter_range(data_offset, member.compressed_size)
    if member.method == 0:  # stored
        for block in blocks:
            emit(block)
    else:
        d = zlib.decompressobj(-15)  # raw deflate: zip entries carry no zlib header
        try:
            for block in blocks:
                data = block
                while data and not d.eof:
                    # max_length bounds the output per call: memory stays ~BLOCK_SIZE.
                    emit(d.decompress(data, BLOCK_SIZE))
                    data = d.unconsumed_tail
                if d.eof and (data or d.unused_data):
                    raise _corrupt(
                        member,
                        f"deflate stream ends before its compressed size "
                        f"({member.compressed_size} bytes)",
                    )
            emit(d.flush())
        except zlib.error as exc:
            raise _corrupt(member, f"invalid deflate data ({exc})") from exc
        if not d.eof:
            raise _corrupt(
                member,
                f"deflate stream is truncated (no end marker after "
                f"{member.compressed_size} compressed bytes)",
            )
    return size, crc, sha.hexdigest()


def extract_split_zip_member(
    dest: Path | str,
    *,
    parts: Mapping[int, Path | str],
    part_size: int,
    name_suffix: str,
    expected_size: int,
    expected_sha256: str,
    progress: bool = True,
    reuse_existing: bool = True,
) -> Path:
    """Extract one entry of a split zip to ``dest``, verified, atomically; reuse a verified ``dest``.

    ``parts`` maps part numbers (1-based) to files; earlier parts may be absent as long as
    the entry and the central directory lie in the parts given. ``name_suffix`` matches
    whole trailing path components of the entry name. A ``dest`` that already has the
    expected size and sha256 is returned as is (unless ``reuse_existing`` is false). The data are streamed in
    ~8 MiB blocks and checked against the zip's CRC32, ``expected_size`` and
    ``expected_sha256``; only then is the temp file renamed onto ``dest``, so a crash or
    a mismatch never leaves a half-written or wrong model behind.
    """
    dest = Path(dest)
    expected_sha256 = expected_sha256.lower()
    if reuse_existing and _cached_ok(dest, expected_size, expected_sha256):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)

    with _SplitParts(parts, part_size) as sp:
        member = _find_member(sp, name_suffix)
        if member.flags & 0x1:
            raise ModelAssetError(f"{member.name} is encrypted")
        if member.method not in (0, 8):
            raise ModelAssetError(
                f"{member.name}: unsupported compression method {member.method} (need 0 or 8)"
            )
        if member.uncompressed_size != expected_size:
            raise ModelAssetError(
                f"{member.name}: size mismatch: expected {expected_size} bytes, the zip "
                f"declares {member.uncompressed_size}"
            )

        lh = sp.read(member.local_header_offset, 30)
        if lh[:4] != _LOCAL_SIG:
            part, pos = sp.locate(member.local_header_offset)
            raise ModelAssetError(
                f"{member.name}: no local file header at offset {member.local_header_offset} "
                f"(part {part}, position {pos}): wrong part size or wrong parts?"
            )
        nlen, xlen = struct.unpack_from("<HH", lh, 26)
        data_offset = member.local_header_offset + 30 + nlen + xlen

        bar = None
        if progress:
            bar = tqdm(
                total=member.uncompressed_size,
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                desc=f"extracting {dest.name}",
            )
        fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "wb") as out:
                size, crc, sha = _inflate_to(sp, member, data_offset, out, bar)
                out.flush()
                os.fsync(out.fileno())
            problems = []
            if size != expected_size:
                problems.append(f"size mismatch: expected {expected_size} bytes, got {size}")
            if crc != member.crc32:
                problems.append(f"CRC32 mismatch: expected {member.crc32:08x}, got {crc:08x}")
            if sha != expected_sha256:
                problems.append(f"sha256 mismatch: expected {expected_sha256}, got {sha}")
            if problems:
                raise ModelAssetError(f"{member.name}: " + "; ".join(problems))
            os.replace(tmp, dest)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        finally:
            if bar is not None:
                bar.close()
    _write_sidecar(dest, expected_sha256)
    return dest


def verified_copy(path: Path | str, expected_size: int, expected_sha256: str) -> bool:
    """True if ``path`` exists with the expected size and sha256 (hashed once, then the sidecar)."""
    return _cached_ok(Path(path), expected_size, expected_sha256)
