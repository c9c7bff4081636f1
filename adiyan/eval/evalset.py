"""Authored evalsets: a manifest of documents (with owner and visibility) and a question file.

Format (see evalsets/README.md): ``manifest.yaml`` lists ``documents`` (``file``, ``owner``,
``visibility``) and names the ``questions`` JSONL file, whose rows hold ``id``, ``question``,
``gold_answer``, ``gold_sources`` (file names), ``answer_keywords`` and ``kind``. Gold sources
are turned into source keys (``<owner>/<filename>``) using the manifest's owners.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .beir import load_beir

REQUIRED_KEYS = {"id", "question", "gold_answer", "gold_sources", "answer_keywords", "kind"}
KINDS = {"lookup", "paraphrase", "exact_token", "multi_hop", "unanswerable", "private"}


class EvalsetError(ValueError):
    pass


@dataclass
class EvalDocument:
    path: Path
    filename: str
    owner: str
    visibility: str

    @property
    def source_key(self) -> str:
        return f"{self.owner}/{self.filename}"


@dataclass
class EvalQuestion:
    id: str
    question: str
    gold_answer: str
    gold_sources: list[str]  # source keys
    answer_keywords: list[str]
    kind: str
    requester: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def answerable(self) -> bool:
        return bool(self.gold_sources)


@dataclass
class Evalset:
    name: str
    root: Path
    documents: list[EvalDocument]
    questions: list[EvalQuestion]
    description: str = ""

    def content_hash(self) -> str:
        """sha256 over the manifest, the questions and every document's bytes."""
        h = hashlib.sha256()
        for p in [self.root / "manifest.yaml", self.root / self._questions_file] + [d.path for d in self.documents]:
            h.update(str(p.relative_to(self.root)).encode())
            h.update(b"\x00")
            h.update(p.read_bytes())
        return h.hexdigest()

    _questions_file: str = "questions.jsonl"

    def to_pandas(self):
        import pandas as pd  # heavy: pandas loads only when a notebook asks for a frame

        return pd.DataFrame([{**q.__dict__, "extra": q.extra} for q in self.questions])


def beir_cache_root() -> Path:
    """Where BEIR folders are turned into evalsets (``$ADIYAN_EVALSET_CACHE`` or ``~/.cache/adiyan/evalsets``)."""
    return Path(os.environ.get("ADIYAN_EVALSET_CACHE") or Path.home() / ".cache" / "adiyan" / "evalsets")


def materialize_beir(beir_dir: str | Path, out_root: str | Path | None = None, *, split: str = "test") -> Path:
    """A BEIR folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``) as an evalset folder.

    Every passage becomes ``docs/<id>.md`` (``# title`` and the text), global, owned by
    ``adiyan-office``; every query with qrels becomes a ``lookup`` question whose gold sources are
    its relevant passages; the gold answer comes from a ``qa.jsonl`` beside the BEIR folder when
    there is one (ClapNQ and XQuAD in ../shared/datasets have it). Written once per content hash
    of the source files under ``out_root`` (default :func:`beir_cache_root`), never into the
    repository, so the chunking and retrieval code runs on a QA set exactly as on an authored set.
    """
    src = Path(beir_dir)
    files = [src / "corpus.jsonl", src / "queries.jsonl", src / "qrels" / f"{split}.tsv"]
    qa_path = src.parent / "qa.jsonl"
    h = hashlib.sha256()
    for f in files + ([qa_path] if qa_path.is_file() else []):
        if f.is_file():
            h.update(f.read_bytes())
    name = f"{src.parent.name if src.name == 'beir' else src.name}-{split}"
    out = Path(out_root or beir_cache_root()) / f"{name}-{h.hexdigest()[:10]}"
    if (out / "manifest.yaml").is_file():
        return out
    data = load_beir(src, split)
    answers = {}
    if qa_path.is_file():
        for line in qa_path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            answers[str(row["id"])] = (row.get("answers") or [""])[0]
    tmp = out.with_name(out.name + ".tmp")
    (tmp / "docs").mkdir(parents=True, exist_ok=True)
    fname = {}
    for did, doc in data.corpus.items():
        fname[did] = re.sub(r"[^A-Za-z0-9_.-]", "_", did) + ".md"
        text = (f"# {doc['title']}\n\n" if doc["title"] else "") + doc["text"] + "\n"
        (tmp / "docs" / fname[did]).write_text(text, encoding="utf-8")
    with open(tmp / "questions.jsonl", "w", encoding="utf-8") as f:
        for qid, text in data.queries.items():
            gold = sorted(fname[d] for d, rel in data.qrels[qid].items() if rel > 0 and d in fname)
            f.write(json.dumps({"id": qid, "question": text, "gold_answer": answers.get(qid, ""),
                                "gold_sources": gold, "answer_keywords": [], "kind": "lookup"}) + "\n")
    manifest = {"name": name, "description": f"{src} ({split}) as an evalset: {len(data.corpus)} passages, "
                f"{len(data.queries)} questions", "questions": "questions.jsonl",
                "documents": [{"file": f"docs/{fname[d]}", "owner": "adiyan-office", "visibility": "global"}
                              for d in data.corpus]}
    (tmp / "manifest.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False), encoding="utf-8")
    shutil.rmtree(out, ignore_errors=True)
    tmp.replace(out)
    return out


def load_evalset(root: str | Path) -> Evalset:
    """An evalset folder (``manifest.yaml``), or a BEIR folder, turned into one by :func:`materialize_beir`."""
    root = Path(root)
    if not (root / "manifest.yaml").is_file() and (root / "corpus.jsonl").is_file():
        root = materialize_beir(root)
    mpath = root / "manifest.yaml"
    if not mpath.is_file():
        raise EvalsetError(f"{mpath}: no manifest.yaml (an evalset is a folder with manifest.yaml)")
    manifest = yaml.safe_load(mpath.read_text(encoding="utf-8")) or {}
    docs = []
    for i, d in enumerate(manifest.get("documents") or []):
        p = root / d["file"]
        if not p.is_file():
            raise EvalsetError(f"{mpath}: documents[{i}] file {d['file']!r} does not exist")
        docs.append(EvalDocument(p, p.name, d.get("owner", "adiyan-office"), d.get("visibility", "global")))
    owner_of = {d.filename: d.owner for d in docs}
    qfile = manifest.get("questions", "questions.jsonl")
    qpath = root / qfile
    questions = []
    for n, line in enumerate(qpath.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise EvalsetError(f"{qpath}:{n}: not valid JSON: {exc}") from None
        missing = REQUIRED_KEYS - row.keys()
        if missing:
            raise EvalsetError(f"{qpath}:{n}: missing keys {sorted(missing)}")
        unknown = [s for s in row["gold_sources"] if s not in owner_of]
        if unknown:
            raise EvalsetError(f"{qpath}:{n}: gold source(s) {unknown} are not documents of the manifest")
        extra = {k: v for k, v in row.items() if k not in REQUIRED_KEYS | {"requester"}}
        questions.append(EvalQuestion(row["id"], row["question"], row["gold_answer"],
                                      [f"{owner_of[s]}/{s}" for s in row["gold_sources"]],
                                      list(row["answer_keywords"]), row["kind"], row.get("requester"), extra))
    ids = [q.id for q in questions]
    if len(set(ids)) != len(ids):
        raise EvalsetError(f"{qpath}: duplicate question ids")
    es = Evalset(manifest.get("name", root.name), root, docs, questions, manifest.get("description", ""))
    es._questions_file = qfile
    return es
