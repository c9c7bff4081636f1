"""Legacy Office files (.doc, .ppt, .xls, .rtf) through LibreOffice, when it is installed.

``soffice --headless --convert-to docx|pptx|xlsx`` writes the modern format into a temporary
directory, which is then parsed like an upload of that format; every unit's tier says so
(``libreoffice+docling``, ``libreoffice+python-pptx``...). Each conversion gets its own
throw-away LibreOffice profile, so concurrent conversions do not fight over a lock, seeded with
settings that keep an uploaded file from running macros or fetching linked content (the same
keys Docling's own LibreOffice calls set), and runs in its own process group, killed whole on a
timeout. Without ``soffice`` on PATH the file is
refused with the packages to install (Debian; ``ADIYAN_INSTALL_LIBREOFFICE=1 bash
scripts/install.sh`` does it).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from .report import ParseError

TARGETS = {".doc": "docx", ".rtf": "docx", ".ppt": "pptx", ".xls": "xlsx"}
PACKAGES = "libreoffice-writer-nogui libreoffice-calc-nogui libreoffice-impress-nogui"
TIMEOUT_S = 180
# (registry path, property, value): macros off at the highest security level; links never updated on load.
_HARDENING = (("org.openoffice.Office.Common/Security/Scripting", "MacroSecurityLevel", "3"),
              ("org.openoffice.Office.Common/Security/Scripting", "DisableMacrosExecution", "true"),
              ("org.openoffice.Office.Writer/Content/Update", "Link", "0"),
              ("org.openoffice.Office.Calc/Content/Update", "Link", "0"))


def soffice() -> str | None:
    return shutil.which("soffice") or shutil.which("libreoffice")


def convert(data: bytes, filename: str, extension: str) -> bytes:
    """The document converted to the modern format of ``TARGETS[extension]``; ParseError otherwise."""
    target = TARGETS[extension]
    binary = soffice()
    if binary is None:
        raise ParseError(filename, "converter_missing",
                         f"a legacy {extension} file is read by converting it with LibreOffice, and soffice is "
                         f"not on PATH; install it (Debian: apt-get install {PACKAGES}, or "
                         "ADIYAN_INSTALL_LIBREOFFICE=1 bash scripts/install.sh) or save the file as "
                         f".{target}")
    with tempfile.TemporaryDirectory(prefix="adiyan-soffice-") as tmp:
        work = Path(tmp)
        source = work / f"document{extension}"
        source.write_bytes(data)
        (work / "profile" / "user").mkdir(parents=True)
        (work / "profile" / "user" / "registrymodifications.xcu").write_text(_registry(), encoding="utf-8")
        command = [binary, "--headless", "--norestore", "--nolockcheck", "--nodefault",
                   f"-env:UserInstallation={(work / 'profile').as_uri()}",
                   "--convert-to", target, "--outdir", str(work / "out"), str(source)]
        stderr = _run(command, filename)
        converted = work / "out" / f"document.{target}"
        if not converted.is_file() or converted.stat().st_size == 0:
            raise ParseError(filename, "conversion_failed", f"LibreOffice could not convert it to .{target}"
                             + (f": {stderr}" if stderr else " (it wrote no file)"))
        return converted.read_bytes()


def _registry() -> str:
    items = "".join(f' <item oor:path="/{path}"><prop oor:name="{name}" oor:op="fuse"><value>{value}</value>'
                    "</prop></item>\n" for path, name, value in _HARDENING)
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<oor:items xmlns:oor="http://openoffice.org/2001/registry" '
            'xmlns:xs="http://www.w3.org/2001/XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">\n'
            f"{items}</oor:items>\n")


def _run(command: list[str], filename: str) -> str:
    """Run soffice in its own process group; the last lines of its stderr, or ParseError on a timeout."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        _, err = process.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # soffice forks soffice.bin: the group goes, not just the parent
        process.communicate()
        raise ParseError(filename, "conversion_failed", f"LibreOffice did not finish converting it in {TIMEOUT_S} s")
    lines = [line for line in err.decode("utf-8", "replace").splitlines() if "javaldx" not in line]
    return " ".join(lines[-3:]).strip()
