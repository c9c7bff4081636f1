"""Authored evalsets: a manifest of documents (with owner and visibility) and a question file.

Format (see evalsets/README.md): ``manifest.yaml`` lists ``documents`` (``file``, ``owner``,
``visibility``) and names the ``questions`` JSONL file, whose rows hold ``id``, ``question``,
``gold_answer``, ``gold_sources`` (file names), ``answer_keywords`` and ``kind``. Gold sources
are turned into source keys (``<owner>/<filename>``) using the manifest's owners.

Graded relevance: a row may add ``gold_grades`` ({file name: grade}, integers >= 1, each a file of
its ``gold_sources``; a gold source it does not name has grade 1). nDCG uses the grades as gains;
hit rate, MRR and recall count every gold source (grade > 0). A BEIR folder's qrels keep their
grades this way (:func:`materialize_beir`).
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

from .arrow import cached_dataset, json_column
from .beir import load_beir

REQUIRED_KEYS = {"id", "question", "gold_answer", "gold_sources", "answer_keywords", "kind"}
KINDS = {"lookup", "paraphrase", "exact_token", "multi_hop", "unanswerable", "private"}


# the columns of Evalset.to_dataset()
QUESTION_COLUMNS = {"id": "string", "question": "string", "gold_answer": "string", "gold_sources": "list<string>",
                    "answer_keywords": "list<string>", "kind": "string", "requester": "string", "extra": "string",
                    "gold_grades": "string"}


class EvalsetError(ValueError):
    pass


@dataclass
class EvalDocument:
    path: Path
    filename: str
    owner: str
    visibility: str
    beir_id: str | None = None  # the passage id of a materialised BEIR corpus (its file name is encoded)

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
    gold_grades: dict[str, int] = field(default_factory=dict)  # source key -> grade (> 1 only matters; default 1)

    @property
    def answerable(self) -> bool:
        return bool(self.gold_sources)

    def relevance(self) -> dict[str, int]:
        """{source key: grade} of every gold source (grade 1 unless ``gold_grades`` says otherwise):
        the qrels nDCG is computed over."""
        return {s: int(self.gold_grades.get(s, 1)) for s in self.gold_sources}


@dataclass
class Evalset:
    name: str
    root: Path
    documents: list[EvalDocument]
    questions: list[EvalQuestion]
    description: str = ""
    beir: dict | None = None  # a materialised BEIR folder: {"name", "split", "docs", "queries"}

    @property
    def relevance(self) -> dict:
        """Which relevance the set's questions carry: ``{"kind": "graded" | "binary", "grades": [...],
        "from": ...}`` (graded when some gold source has a grade other than 1)."""
        grades = sorted({g for q in self.questions for g in q.relevance().values()})
        kind = "graded" if any(g != 1 for g in grades) else "binary"
        src = (f"qrels/{self.beir['split']}.tsv of BEIR {self.beir['name']}" if self.beir
               else "gold_sources" + (" + gold_grades" if kind == "graded" else ""))
        return {"kind": kind, "grades": grades, "from": src}

    def content_hash(self) -> str:
        """sha256 over the manifest, the questions and every document's bytes."""
        h = hashlib.sha256()
        for p in [self.root / "manifest.yaml", self.root / self._questions_file] + [d.path for d in self.documents]:
            h.update(str(p.relative_to(self.root)).encode())
            h.update(b"\x00")
            h.update(p.read_bytes())
        return h.hexdigest()

    _questions_file: str = "questions.jsonl"

    def to_dataset(self, cache_dir=None):
        """One row per question as a ``datasets.Dataset`` (Arrow, memory-mapped), cached under
        ``cache_dir`` (default ``$ADIYAN_DATASET_CACHE`` or ``~/.cache/adiyan/datasets``) by
        :meth:`content_hash` (its ``_fingerprint`` derives from that hash alone): editing any file of
        the set builds a new one. Columns: the question file's fields (``gold_sources`` as source keys),
        ``requester`` and ``extra`` (the other keys of a row, as a JSON string)."""
        return cached_dataset(f"evalset-{re.sub(r'[^A-Za-z0-9_.-]+', '_', self.name)}", self.content_hash(),
                              lambda: [{**{k: getattr(q, k) for k in QUESTION_COLUMNS if k not in ("extra", "gold_grades")},
                                        "extra": json_column(q.extra), "gold_grades": json_column(q.gold_grades)}
                                       for q in self.questions],
                              columns=QUESTION_COLUMNS, cache_dir=cache_dir)

    def to_pandas(self):
        import pandas as pd  # heavy: pandas loads only when a notebook asks for a frame

        return pd.DataFrame([{**q.__dict__, "extra": q.extra} for q in self.questions])


# Bumped when the passage id -> file name mapping changes, so a cached materialisation is redone.
BEIR_NAMING = b"beir-names-v3: percent-encoded, beir_id kept, grades kept, beir source recorded"
_SAFE_ID = re.compile(r"[A-Za-z0-9_-]")
MAX_ID_NAME = 200  # bytes of an encoded id before it is shortened (a file name may have 255)


def beir_file_name(doc_id: str) -> str:
    """A safe, injective file name for a BEIR passage id: ``<encoded id>.md``.

    Every character outside ``[A-Za-z0-9_-]`` becomes ``%XX`` per UTF-8 byte (``%`` and ``.``
    included), so distinct ids give distinct names, no name has a '/', a backslash, a NUL or a
    '.' before its extension, and ids that are already plain (SciFact's numbers, ClapNQ's hex)
    keep their names. An id whose encoding is longer than 200 bytes (or empty) is shortened to
    a prefix, ``~`` (which no encoding contains) and 16 hex digits of its sha256. The original id
    is kept in the manifest (``beir_id``) and used to map results back.
    """
    enc = "".join(ch if _SAFE_ID.fullmatch(ch) else "".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))
                  for ch in doc_id)
    if not enc or len(enc) > MAX_ID_NAME:
        enc = enc[:120] + "~" + hashlib.sha256(doc_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return enc + ".md"


def beir_ids(es: "Evalset") -> dict[str, str]:
    """{source key: BEIR passage id} of a materialised BEIR evalset (documents without one map to
    their file name without ``.md``)."""
    return {d.source_key: d.beir_id if d.beir_id is not None else d.filename.removesuffix(".md") for d in es.documents}


def beir_cache_root() -> Path:
    """Where BEIR folders are turned into evalsets (``$ADIYAN_EVALSET_CACHE`` or ``~/.cache/adiyan/evalsets``)."""
    return Path(os.environ.get("ADIYAN_EVALSET_CACHE") or Path.home() / ".cache" / "adiyan" / "evalsets")


def materialize_beir(beir_dir: str | Path, out_root: str | Path | None = None, *, split: str = "test") -> Path:
    """A BEIR folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``) as an evalset folder.

    Every passage becomes ``docs/<name>.md`` (:func:`beir_file_name`: safe and injective; the id
    itself is the document's ``beir_id`` in the manifest) with ``# title`` and the text, global, owned by
    ``adiyan-office``; every query with qrels becomes a ``lookup`` question whose gold sources are
    its relevant passages (grade > 0), their grades in ``gold_grades`` when any is not 1; the
    manifest's ``beir`` block names the data set, its split and counts; the gold answer comes from a ``qa.jsonl`` beside the BEIR folder when
    there is one (ClapNQ and XQuAD in ../shared/datasets have it). Written once per content hash
    of the source files under ``out_root`` (default :func:`beir_cache_root`), never into the
    repository, so the chunking and retrieval code runs on a QA set exactly as on an authored set.
    """
    src = Path(beir_dir)
    files = [src / "corpus.jsonl", src / "queries.jsonl", src / "qrels" / f"{split}.tsv"]
    qa_path = src.parent / "qa.jsonl"
    h = hashlib.sha256(BEIR_NAMING)
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
    fname, taken = {}, {}
    for did, doc in data.corpus.items():
        fname[did] = beir_file_name(did)
        if fname[did] in taken:  # only a sha256 prefix collision of two over-long ids could do this
            raise EvalsetError(f"{src}: passage ids {taken[fname[did]]!r} and {did!r} map to one file name")
        taken[fname[did]] = did
        text = (f"# {doc['title']}\n\n" if doc["title"] else "") + doc["text"] + "\n"
        (tmp / "docs" / fname[did]).write_text(text, encoding="utf-8")
    with open(tmp / "questions.jsonl", "w", encoding="utf-8") as f:
        for qid, text in data.queries.items():
            rels = {fname[d]: rel for d, rel in data.qrels[qid].items() if rel > 0 and d in fname}
            row = {"id": qid, "question": text, "gold_answer": answers.get(qid, ""),
                   "gold_sources": sorted(rels), "answer_keywords": [], "kind": "lookup"}
            if any(r != 1 for r in rels.values()):
                row["gold_grades"] = dict(sorted(rels.items()))
            f.write(json.dumps(row) + "\n")
    manifest = {"name": name, "description": f"{src} ({split}) as an evalset: {len(data.corpus)} passages, "
                f"{len(data.queries)} questions", "questions": "questions.jsonl",
                "beir": {"name": src.parent.name if src.name == "beir" else src.name, "split": split,
                         "docs": len(data.corpus), "queries": len(data.queries)},
                "documents": [{"file": f"docs/{fname[d]}", "owner": "adiyan-office", "visibility": "global",
                               "beir_id": d} for d in data.corpus]}
    (tmp / "manifest.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False), encoding="utf-8")
    shutil.rmtree(out, ignore_errors=True)
    tmp.replace(out)
    return out


def check_evalset_path(path: str | Path) -> None:
    """One clear error for an ``eval.evalset`` that cannot be an evalset, before a run starts: a
    missing path, a file that is not a LoCoMo ``.json``, an unreadable folder, a folder that is
    neither an authored set (``manifest.yaml``) nor a BEIR folder (``corpus.jsonl``)."""
    p = Path(path)
    if not p.exists():
        raise EvalsetError(f"{p}: not found (eval.evalset names an evalset folder with manifest.yaml, a BEIR "
                           "folder with corpus.jsonl, or a LoCoMo .json file)")
    if p.is_file():
        if p.suffix.lower() == ".json":
            return
        raise EvalsetError(f"{p}: a file, not an evalset (an evalset is a folder with manifest.yaml; a LoCoMo set "
                           "is a .json file)")
    if not os.access(p, os.R_OK | os.X_OK):
        raise EvalsetError(f"{p}: folder not readable (permission denied)")
    found = [f for f in ("manifest.yaml", "corpus.jsonl") if (p / f).is_file()]
    if not found:
        raise EvalsetError(f"{p}: not an evalset folder: no manifest.yaml (an authored set) or corpus.jsonl (a BEIR "
                           f"folder); to make an evalset from documents: adiyan testset generate {p} --out "
                           "evalsets/NAME")
    if not os.access(p / found[0], os.R_OK):
        raise EvalsetError(f"{p / found[0]}: not readable (permission denied)")


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
        docs.append(EvalDocument(p, p.name, d.get("owner", "adiyan-office"), d.get("visibility", "global"),
                                 None if d.get("beir_id") is None else str(d["beir_id"])))
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
        extra = {k: v for k, v in row.items() if k not in REQUIRED_KEYS | {"requester", "gold_grades"}}
        grades = _gold_grades(row, qpath, n)
        questions.append(EvalQuestion(row["id"], row["question"], row["gold_answer"],
                                      [f"{owner_of[s]}/{s}" for s in row["gold_sources"]],
                                      list(row["answer_keywords"]), row["kind"], row.get("requester"), extra,
                                      {f"{owner_of[s]}/{s}": g for s, g in grades.items()}))
    ids = [q.id for q in questions]
    if len(set(ids)) != len(ids):
        raise EvalsetError(f"{qpath}: duplicate question ids")
    es = Evalset(manifest.get("name", root.name), root, docs, questions, manifest.get("description", ""),
                 manifest.get("beir"))
    es._questions_file = qfile
    return es


def _gold_grades(row: dict, qpath: Path, n: int) -> dict[str, int]:
    """A row's ``gold_grades``, checked: a mapping of its gold sources to integer grades >= 1."""
    grades = row.get("gold_grades")
    if grades is None:
        return {}
    if not isinstance(grades, dict):
        raise EvalsetError(f"{qpath}:{n}: gold_grades must map gold source file names to grades, got {grades!r}")
    for name, g in grades.items():
        if name not in row["gold_sources"]:
            raise EvalsetError(f"{qpath}:{n}: gold_grades names {name!r}, which is not one of its gold_sources")
        if isinstance(g, bool) or not isinstance(g, int) or g < 1:
            raise EvalsetError(f"{qpath}:{n}: gold_grades[{name!r}] = {g!r}: a grade is an integer >= 1 "
                               "(a document of grade 0 is not a gold source)")
    return dict(grades)


# -- conversation evalsets (manifest ``kind: conversations``; evalsets/conversations/README.md) ----
TURN_KINDS = {"opener", "pronoun", "ellipsis", "fragment", "statement", "memory", "correction", "coaching", "doc_memory"}
_TURN_KEYS = {"at", "kind", "message", "standalone", "reply", "gold_sources", "answer_keywords", "remember", "recall",
              "stale"}


@dataclass
class ConversationTurn:
    at: str  # ISO-8601 with a timezone: when the user wrote the message
    message: str
    kind: str
    gold_sources: list[str]  # source keys
    answer_keywords: list[str]
    remember: list[dict]  # facts the user states in this turn: {"id", "text", "kind": conversation | coaching}
    recall: list[str]  # fact ids that must reach the context of this turn
    stale: list[str]  # fact ids superseded by a later one: must not reach it
    standalone: str | None = None  # the hand-written standalone question (reference only)
    reply: str | None = None  # the assistant's reply kept in the history (authored, not generated)


@dataclass
class EvalConversation:
    id: str
    user: str
    topic: str
    turns: list[ConversationTurn]


@dataclass
class ConversationSet:
    """Multi-turn conversations over the documents of another evalset (``documents_from``)."""

    name: str
    root: Path
    documents: Evalset  # the knowledge base: its index is shared with that evalset
    conversations: list[EvalConversation]
    description: str = ""
    version: int = 1

    def content_hash(self) -> str:
        h = hashlib.sha256(self.documents.content_hash().encode())
        for p in sorted(self.root.glob("*.yaml")):
            h.update(p.name.encode() + b"\x00" + p.read_bytes())
        return h.hexdigest()

    def turns(self):
        return [(c, i, t) for c in self.conversations for i, t in enumerate(c.turns)]


def incidents_apply(path: str | Path, setting: bool | str) -> tuple[bool, str | None]:
    """Whether a run on the evalset at ``path`` replays the five incidents, and why not when it does not.

    The incidents replay the Adiyan assistant's own history (``evalsets/incidents/``), not the evalset's
    documents: they belong to runs on the project's evalsets, whose manifest says ``incidents: true``.
    ``eval.incidents``: ``auto`` (the default) follows the manifest, ``true`` replays them on any run,
    ``false`` on none."""
    if setting is True or setting is False:
        return setting, None if setting else "eval.incidents=false"
    mpath = Path(path) / "manifest.yaml"
    declared = mpath.is_file() and bool((yaml.safe_load(mpath.read_text(encoding="utf-8")) or {}).get("incidents"))
    if declared:
        return True, None
    return False, (f"they replay the Adiyan assistant's own history, and {Path(path).name} is not one of its evalsets "
                   "(no `incidents: true` in its manifest); --set eval.incidents=true replays them on any run")


def is_conversation_set(root: str | Path) -> bool:
    mpath = Path(root) / "manifest.yaml"
    return mpath.is_file() and (yaml.safe_load(mpath.read_text(encoding="utf-8")) or {}).get("kind") == "conversations"


def load_conversation_set(root: str | Path) -> ConversationSet:
    """A conversation evalset, checked: unique ids, timezone-aware non-decreasing turn times, gold
    sources in the documents' manifest, every recalled or stale fact stated in an earlier (or the
    same) turn, and every stale fact older than some recalled fact of the same turn."""
    from datetime import datetime  # noqa: PLC0415 - stdlib; keeps this additive block self-contained

    root = Path(root)
    mpath = root / "manifest.yaml"
    manifest = yaml.safe_load(mpath.read_text(encoding="utf-8")) or {}
    if manifest.get("kind") != "conversations":
        raise EvalsetError(f"{mpath}: not a conversation evalset (kind: conversations)")
    docs = load_evalset(root / manifest.get("documents_from", "."))
    owner_of = {d.filename: d.owner for d in docs.documents}
    cpath = root / manifest.get("conversations", "conversations.yaml")
    try:
        raw = yaml.safe_load(cpath.read_text(encoding="utf-8")) or []
    except yaml.YAMLError as exc:
        raise EvalsetError(f"{cpath}: not valid YAML: {exc}") from None
    convs, seen_ids, fact_ids = [], set(), set()
    for c in raw:
        cid = c.get("id")
        where = f"{cpath}: conversation {cid!r}"
        if not cid or cid in seen_ids or not c.get("user") or len(c.get("turns") or []) < 1:
            raise EvalsetError(f"{where}: needs a unique id, a user and turns")
        seen_ids.add(cid)
        turns, stated, last = [], {}, None
        for n, t in enumerate(c["turns"], 1):
            tw = f"{where} turn {n}"
            unknown = set(t) - _TURN_KEYS
            if unknown or not t.get("message") or t.get("kind") not in TURN_KINDS:
                raise EvalsetError(f"{tw}: needs message and a kind in {sorted(TURN_KINDS)}; unknown keys {sorted(unknown)}")
            try:
                at = datetime.fromisoformat(str(t["at"]))
            except (KeyError, ValueError):
                raise EvalsetError(f"{tw}: 'at' must be an ISO-8601 time") from None
            if at.tzinfo is None or (last is not None and at < last):
                raise EvalsetError(f"{tw}: 'at' {t['at']} needs a timezone and must not go back in time")
            last = at
            bad = [s for s in t.get("gold_sources") or [] if s not in owner_of]
            if bad:
                raise EvalsetError(f"{tw}: gold source(s) {bad} are not documents of {docs.root}")
            for f in t.get("remember") or []:
                if f.get("id") in fact_ids or not f.get("text") or f.get("kind", "conversation") not in ("conversation", "coaching"):
                    raise EvalsetError(f"{tw}: fact {f.get('id')!r} needs a unique id, a text and kind conversation|coaching")
                fact_ids.add(f["id"])
                stated[f["id"]] = at
            missing = [i for i in (t.get("recall") or []) + (t.get("stale") or []) if i not in stated]
            if missing:
                raise EvalsetError(f"{tw}: recall/stale fact(s) {missing} were not stated before this turn")
            if t.get("stale") and not any(stated[s] < stated[r] for s in t["stale"] for r in t.get("recall") or []):
                raise EvalsetError(f"{tw}: a stale fact must be older than a fact recalled in its place")
            turns.append(ConversationTurn(str(t["at"]), t["message"], t["kind"],
                                          [f"{owner_of[s]}/{s}" for s in t.get("gold_sources") or []],
                                          list(t.get("answer_keywords") or []),
                                          [{"kind": "conversation", **f} for f in t.get("remember") or []],
                                          list(t.get("recall") or []), list(t.get("stale") or []),
                                          t.get("standalone"), t.get("reply")))
        convs.append(EvalConversation(cid, str(c["user"]), c.get("topic", ""), turns))
    return ConversationSet(manifest.get("name", root.name), root, docs, convs, manifest.get("description", ""),
                           int(manifest.get("version", 1)))
