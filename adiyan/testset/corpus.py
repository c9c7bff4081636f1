"""The generator's view of a corpus: documents parsed and chunked through the knowledge base's path.

A document goes through exactly what ``adiyan ingest`` / ``invoke eval`` do to it: the batch plan
(:func:`adiyan.kb.batch.plan_batch`: size limit, key validation, duplicate keys refused, containers
recognised), the parser behind the parse cache (:func:`adiyan.ingest.parse.parse_cached`) and the
configured chunker (:func:`adiyan.chunking.chunk_text`, with the parser's ``authored_markdown``), so
the chunks a question is asked about are the chunks the knowledge base stores. Container members
(.zip, .eml attachments) are listed as skipped: an evalset's gold sources name manifest documents.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..chunking import chunk_text
from ..eval.evalset import EvalsetError
from ..factory import parse_cache
from ..ingest.parse import ParseError, parse_cached
from ..kb.batch import BatchDocument, BatchError, ContainerDone, IngestItem, plan_batch
from ..kb.pages import unit_spans
from ..kb.policy import VISIBILITIES, IngestError

DEFAULT_OWNER = "adiyan-office"


@dataclass
class CorpusChunk:
    file: str  # the document's file name (the evalset's gold source)
    index: int  # chunk_index in the knowledge base
    text: str  # the stored chunk text (markdown: heading path, blank line, body)
    body: str
    start: int
    end: int
    page: int | None = None  # the parser's page / slide unit holding the chunk's start, when it has units


@dataclass
class CorpusDocument:
    path: Path
    file: str
    owner: str
    visibility: str
    text: str
    chunks: list[CorpusChunk] = field(default_factory=list)
    title: str = ""

    @property
    def source_key(self) -> str:
        return f"{self.owner}/{self.file}"


@dataclass
class Corpus:
    documents: list[CorpusDocument]
    skipped: list[dict]  # {"file", "reason"}: documents the ingest path refused or the generator cannot use
    chunking: dict

    def chunks(self):
        return [(d, c) for d in self.documents for c in d.chunks]


def _flat_name(rel: str, taken: dict[str, str]) -> str:
    """The document's file name in the evalset (evalset gold sources are base names): its base name,
    or ``<parent>__<name>`` when another file of the folder already has that base name."""
    parts = rel.split("/")
    name = parts[-1]
    if name in taken and taken[name] != rel:
        name = "__".join(parts[-2:]) if len(parts) > 1 else name
    if name in taken and taken[name] != rel:
        name = "__".join(parts)
    taken[name] = rel
    return name


def list_documents(docs: str | Path, *, owner: str = DEFAULT_OWNER, visibility: str = "global",
                   private: list[str] | None = None, exclude: list[str] | None = None,
                   skip_under: str | Path | None = None) -> list[tuple[Path, str, str, str]]:
    """(path, file name, owner, visibility) of every document under ``docs``.

    ``docs`` is an evalset folder (its manifest's documents, owners and visibilities), a folder
    (every file under it, recursively, sorted; ``owner`` / ``visibility`` for all of them) or one
    file. ``private``: ``GLOB=OWNER`` rules (matched against the path under the folder and the file
    name) that make matching documents private to OWNER. ``exclude``: globs of files to leave out.
    """
    root = Path(docs)
    if not root.exists():
        raise EvalsetError(f"{root}: no such file or folder")
    if visibility not in VISIBILITIES:
        raise EvalsetError(f"--visibility {visibility!r}: must be one of {VISIBILITIES}")
    rules = []
    for r in private or []:
        glob, sep, who = r.partition("=")
        if not sep or not glob or not who:
            raise EvalsetError(f"--private {r!r}: expected GLOB=OWNER, e.g. 'notes/*.md=guide-mira'")
        rules.append((glob, who))
    out = []
    if (root / "manifest.yaml").is_file():
        manifest = yaml.safe_load((root / "manifest.yaml").read_text(encoding="utf-8")) or {}
        if manifest.get("kind") == "conversations":
            raise EvalsetError(f"{root}: a conversation evalset has no documents of its own (use its documents_from)")
        for i, d in enumerate(manifest.get("documents") or []):
            p = root / d["file"]
            if not p.is_file():
                raise EvalsetError(f"{root / 'manifest.yaml'}: documents[{i}] file {d['file']!r} does not exist")
            out.append((p, p.name, d.get("owner", DEFAULT_OWNER), d.get("visibility", "global"), p.name))
    elif root.is_file():
        out.append((root, root.name, owner, visibility, root.name))
    else:
        taken: dict[str, str] = {}
        files = sorted(p for p in root.rglob("*") if p.is_file() and not any(x.startswith(".") for x in
                                                                             p.relative_to(root).parts))
        skip = Path(skip_under).resolve() if skip_under else None
        for p in files:
            rel = p.relative_to(root).as_posix()
            if skip is not None and (skip == p.resolve() or skip in p.resolve().parents
                                     or Path(str(skip) + ".tmp") in p.resolve().parents):
                continue
            if any(fnmatch.fnmatch(rel, g) or fnmatch.fnmatch(p.name, g) for g in exclude or []):
                continue
            out.append((p, _flat_name(rel, taken), owner, visibility, rel))
    res = []
    for p, name, own, vis, rel in out:
        for glob, who in rules:
            if fnmatch.fnmatch(rel, glob) or fnmatch.fnmatch(name, glob):
                own, vis = who, "private"
        res.append((p, name, own, vis))
    if not res:
        raise EvalsetError(f"{root}: no documents")
    return res


def _page_of(text: str, report: dict) -> list[tuple[int, int]] | None:
    for kind in ("page", "slide"):
        spans = unit_spans(text, report, kind)
        if spans:
            return [(start, int(u["unit"])) for u, start, _ in spans]
    return None


def _title(text: str, file: str) -> str:
    for line in text.splitlines()[:20]:
        s = line.strip()
        if s.startswith("#"):
            return s.lstrip("#").strip()
    return Path(file).stem.replace("_", " ").replace("-", " ")


def load_corpus(settings, documents: list[tuple[Path, str, str, str]], *, embedder=None) -> Corpus:
    """Parse and chunk ``documents`` (from :func:`list_documents`) as the knowledge base would."""
    items = [IngestItem(p, name, owner, vis) for p, name, owner, vis in documents]
    cache = parse_cache(settings)
    out, skipped = [], []
    for ev in plan_batch(items, settings.ingest):
        if isinstance(ev, ContainerDone):
            continue
        if isinstance(ev, BatchError):
            skipped.append({"file": items[ev.item].filename, "reason": str(ev.error)})
            continue
        assert isinstance(ev, BatchDocument)
        if ev.container is not None:
            skipped.append({"file": ev.name, "reason": "a member of a container: an evalset's gold sources are "
                                                       "manifest documents, so the generator does not ask about it"})
            continue
        try:
            text, report = parse_cached(ev.data, ev.name, settings.ingest, cache)
        except (ParseError, IngestError) as exc:
            skipped.append({"file": ev.name, "reason": f"parse failed: {exc}"})
            continue
        if not text or not text.strip():
            skipped.append({"file": ev.name, "reason": "no text to ingest (empty document)"})
            continue
        try:
            chunks = chunk_text(text, settings.chunking, embedder=embedder,
                                authored_markdown=bool(report.get("authored_markdown")))
        except Exception as exc:  # noqa: BLE001 - the ingest path refuses such a document the same way
            skipped.append({"file": ev.name, "reason": f"chunking failed: {type(exc).__name__}: {exc}"})
            continue
        pages = _page_of(text, report)
        doc = CorpusDocument(Path(items[ev.item].data), ev.name, ev.owner, ev.visibility, text, title=_title(text, ev.name))
        for c in chunks:
            page = None
            if pages:
                page = max((n for start, n in pages if start <= c.start), default=pages[0][1])
            doc.chunks.append(CorpusChunk(ev.name, c.index, c.text, c.body, c.start, c.end, page))
        out.append(doc)
    return Corpus(out, skipped, settings.chunking.model_dump(mode="json"))
