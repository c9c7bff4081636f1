"""MkDocs hook: links from a page to files of the repository outside docs/ (source files,
evalsets/*/README.md, the README). They work on GitHub as written; in the built site there is no
such page, so each is checked to exist in the repository (a missing one is a warning, which
--strict turns into a failed build) and rendered as its text with the path in code."""

from __future__ import annotations

import logging
import re
from pathlib import Path

log = logging.getLogger("mkdocs.hooks.repo_links")
LINK = re.compile(r"(?<!!)\[([^\]]+)\]\((\.\./[^)#\s]+)(#[^)\s]*)?\)")


def on_page_markdown(markdown, page, config, files):
    docs = Path(config["docs_dir"]).resolve()
    repo = docs.parent
    here = (docs / page.file.src_path).parent

    def swap(m):
        target = (here / m.group(2)).resolve()
        if docs in target.parents or target == docs:
            return m.group(0)  # a page of the site: MkDocs checks it
        if repo not in target.parents or not target.exists():
            log.warning("%s: link to %s, which is not in the repository", page.file.src_path, m.group(2))
            return m.group(0)
        rel = target.relative_to(repo).as_posix()
        text = m.group(1)
        return text if rel in text else f"{text} (`{rel}`)"

    return LINK.sub(swap, markdown)
