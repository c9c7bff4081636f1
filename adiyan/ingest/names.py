"""Document names are keys, never paths: one check for uploaded file names and container members.

A name is a relative, '/'-separated key such as ``report.pdf`` or ``docs/2024/report.pdf``
(archive members and the knowledge base's relative-path keys have folders). What could address
another place is refused: an empty name or component, a '.' or '..' component (``Co..md`` is a
name, not a traversal), an absolute path, a drive letter, a backslash, a NUL byte.
"""

from __future__ import annotations

import re

from .report import ParseError

_DRIVE = re.compile(r"^[A-Za-z]:")


def name_problem(name: object) -> str | None:
    """Why ``name`` is not a safe relative key, or None when it is."""
    if not isinstance(name, str) or not name.strip():
        return "the name is empty"
    if "\x00" in name:
        return "the name contains a NUL byte"
    if "\\" in name:
        return "the name contains a '\\'; give a '/'-separated relative name such as docs/report.pdf"
    if name.startswith("/"):
        return "the name is an absolute path; give a relative name such as report.pdf"
    if _DRIVE.match(name):
        return "the name is an absolute (drive) path; give a relative name such as report.pdf"
    for part in name.split("/"):
        if part == "":
            return "the name has an empty path component (a '//' or a trailing '/')"
        if part in (".", ".."):
            return f"the name has a {part!r} path component"
    return None


def check_name(name: str, where: str | None = None) -> None:
    """Raise ParseError(code ``unsafe_name``) naming ``where`` (default: the name itself) and the reason."""
    problem = name_problem(name)
    if problem is not None:
        raise ParseError(where if where is not None else str(name), "unsafe_name", problem)
