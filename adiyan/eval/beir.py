"""BEIR-format retrieval data sets: load from a folder, or fetch the public zip into a cache.

The BEIR layout (Thakur et al., 2021, https://github.com/beir-cellar/beir) is::

    <name>/corpus.jsonl      one {"_id", "title", "text"} per line
    <name>/queries.jsonl     one {"_id", "text"} per line
    <name>/qrels/<split>.tsv "query-id<TAB>corpus-id<TAB>score" with a header line

Only queries judged in the chosen split are kept, as BEIR's own loader does: a query without
qrels cannot be scored and would only dilute the mean. Relevance grades are kept as they are
(NFCorpus, TREC-COVID and others grade 0/1/2): nDCG uses them as gains.

Format variants of real downloads are read: CRLF line endings (the official zips use them), a
UTF-8 byte-order mark, ids in double quotes, scores written as ``1.0``, a qrels file without its
header line, and TREC-style qrels (``query-id iteration corpus-id score``, whitespace-separated).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .arrow import cached_dataset

BEIR_URL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/{name}.zip"

Qrels = dict[str, dict[str, int]]
Run = dict[str, dict[str, float]]


class BeirFormatError(FileNotFoundError):
    """A BEIR folder is missing a file or a file is not in the expected format."""


@dataclass
class BeirData:
    corpus: dict[str, dict[str, str]]  # doc id -> {"title", "text"}
    queries: dict[str, str]  # query id -> text (only queries with qrels in the split)
    qrels: Qrels  # query id -> {doc id: relevance}
    split: str = "test"
    path: str = ""

    def doc_ids(self) -> list[str]:
        return list(self.corpus)

    def doc_texts(self, ids: list[str] | None = None) -> list[str]:
        """``title + " " + text`` per document, the text BEIR's dense baselines embed."""
        return [doc_text(self.corpus[i]) for i in (self.doc_ids() if ids is None else ids)]

    def stats(self) -> dict:
        return {"docs": len(self.corpus), "queries": len(self.queries),
                "qrels": sum(len(v) for v in self.qrels.values()), "split": self.split}


def doc_text(doc: dict) -> str:
    """Title and body joined by a space and stripped, as in BEIR's SentenceBERT wrapper."""
    return (doc.get("title", "") + " " + doc.get("text", "")).strip()


def _need(path: Path, what: str) -> Path:
    if not path.is_file():
        raise BeirFormatError(f"BEIR data: missing {what} file {path} (expected the BEIR layout: "
                              "corpus.jsonl, queries.jsonl, qrels/<split>.tsv)")
    return path


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    with path.open(encoding="utf-8-sig") as fh:  # utf-8-sig: a byte-order mark is dropped, not parsed
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise BeirFormatError(f"{path}:{n}: not valid JSON: {exc}") from None
            if "_id" not in row:
                raise BeirFormatError(f"{path}:{n}: row has no '_id'")
            rows.append(row)
    return rows


def _unquote(cell: str) -> str:
    cell = cell.strip()
    if len(cell) >= 2 and cell[0] == cell[-1] and cell[0] in "\"'":
        cell = cell[1:-1].strip()
    return cell


def _grade(cell: str, path: Path, n: int) -> int:
    """A relevance score as an int: ``2``, ``"1"``, ``1.0`` (a fractional grade is an error)."""
    text = _unquote(cell)
    try:
        value = float(text)
    except ValueError:
        raise BeirFormatError(f"{path}:{n}: relevance score {cell!r} is not a number") from None
    if value != int(value):
        raise BeirFormatError(f"{path}:{n}: relevance score {cell!r} is not a whole number (grades are integers)")
    return int(value)


def read_qrels(path: str | os.PathLike) -> Qrels:
    """A BEIR qrels TSV as {query id: {doc id: relevance grade}}.

    ``query-id<TAB>corpus-id<TAB>score`` with BEIR's header line (optional), or TREC's
    ``query-id iteration corpus-id score`` (four whitespace-separated columns). CRLF or LF, with or
    without a byte-order mark, ids bare or in quotes; a repeated (query, doc) pair keeps its last grade.
    """
    path = _need(Path(path), "qrels")
    qrels: Qrels = {}
    text = path.read_bytes().decode("utf-8-sig")
    for n, raw in enumerate(text.splitlines(), 1):  # splitlines: \n, \r\n and \r alike
        line = raw.strip()
        if not line:
            continue
        cells = line.split("\t") if "\t" in line else line.split()
        cells = [_unquote(c) for c in cells]
        if n == 1 or not qrels:
            if [c.lower() for c in cells[:2]] == ["query-id", "corpus-id"] or \
                    [c.lower() for c in cells[:2]] in (["query_id", "corpus_id"], ["qid", "docid"]):
                continue  # the header
        if len(cells) == 3:
            qid, did, score = cells
        elif len(cells) == 4 and "\t" not in line:
            qid, _, did, score = cells  # TREC: query-id, iteration (ignored), corpus-id, score
        else:
            raise BeirFormatError(f"{path}:{n}: expected 'query-id<TAB>corpus-id<TAB>score' (or TREC's four "
                                  f"columns), got {raw!r}")
        if not qid or not did:
            raise BeirFormatError(f"{path}:{n}: empty query or corpus id in {raw!r}")
        qrels.setdefault(qid, {})[did] = _grade(score, path, n)
    if not qrels:
        raise BeirFormatError(f"{path}: no judgements (expected the header 'query-id\\tcorpus-id\\tscore' "
                              "and one line per judgement)")
    return qrels


def load_beir(path: str | os.PathLike, split: str = "test") -> BeirData:
    """Load a BEIR folder; keeps only the queries that have qrels in ``split``."""
    root = Path(path)
    if not root.is_dir():
        raise BeirFormatError(f"BEIR data: {root} is not a folder (pass the data set's folder, "
                              "e.g. ../shared/datasets/scifact, or use download_beir(name, cache_dir))")
    corpus_path = _need(root / "corpus.jsonl", "corpus")
    queries_path = _need(root / "queries.jsonl", "queries")
    qrels = read_qrels(root / "qrels" / f"{split}.tsv")
    corpus = {_unquote(str(r["_id"])): {"title": r.get("title") or "", "text": r.get("text") or ""}
              for r in _read_jsonl(corpus_path)}
    all_queries = {_unquote(str(r["_id"])): r.get("text") or "" for r in _read_jsonl(queries_path)}
    missing = sorted(set(qrels) - set(all_queries))
    if missing:
        raise BeirFormatError(f"{root}: {len(missing)} query ids in qrels/{split}.tsv are not in "
                              f"queries.jsonl, e.g. {missing[:3]}")
    queries = {qid: all_queries[qid] for qid in all_queries if qid in qrels}
    return BeirData(corpus=corpus, queries=queries, qrels=qrels, split=split, path=str(root))


def _files_hash(files: list[Path]) -> str:
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\x00" + f.read_bytes())
    return h.hexdigest()


def load_beir_dataset(path: str | os.PathLike, split: str = "test", *, cache_dir=None):
    """A BEIR folder as a ``datasets.DatasetDict`` of ``corpus`` (``_id``, ``title``, ``text``),
    ``queries`` (``_id``, ``text``: only the queries judged in ``split``, as :func:`load_beir`)
    and ``qrels`` (``query-id``, ``corpus-id``, ``score``): Arrow, memory-mapped, each cached
    by the sha256 of the three files (``adiyan.eval.arrow.cached_dataset``)."""
    import datasets  # heavy: datasets (~1-7 s), only when a Dataset is asked for

    root = Path(path)
    files = [_need(root / "corpus.jsonl", "corpus"), _need(root / "queries.jsonl", "queries"),
             _need(root / "qrels" / f"{split}.tsv", "qrels")]
    key = _files_hash(files)
    data: list[BeirData] = []

    def beir() -> BeirData:  # parsed once, and only when a part is not cached yet
        if not data:
            data.append(load_beir(root, split))
        return data[0]

    name = f"beir-{root.parent.name if root.name == 'beir' else root.name}-{split}"
    return datasets.DatasetDict({
        "corpus": cached_dataset(f"{name}-corpus", key, lambda: [{"_id": i, **d} for i, d in beir().corpus.items()],
                                 columns={"_id": "string", "title": "string", "text": "string"}, cache_dir=cache_dir),
        "queries": cached_dataset(f"{name}-queries", key,
                                  lambda: [{"_id": i, "text": t} for i, t in beir().queries.items()],
                                  columns={"_id": "string", "text": "string"}, cache_dir=cache_dir),
        "qrels": cached_dataset(f"{name}-qrels", key, lambda: [{"query-id": q, "corpus-id": d, "score": r}
                                                               for q, rel in beir().qrels.items()
                                                               for d, r in rel.items()],
                                columns={"query-id": "string", "corpus-id": "string", "score": "int64"},
                                cache_dir=cache_dir)})


def load_qa_dataset(path: str | os.PathLike, *, cache_dir=None):
    """A QA file (``qa.jsonl`` of ClapNQ / XQuAD in ../shared/datasets: ``id``, ``question``,
    ``answers``, ``gold_passage_ids``, ``gold_passages``) as a cached, memory-mapped Dataset;
    a line that is not JSON or lacks ``id`` / ``question`` is an error naming the file and line."""
    path = Path(path)
    if not path.is_file():
        raise BeirFormatError(f"QA data: {path} does not exist")

    def rows() -> list[dict]:
        out = []
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as exc:
                raise BeirFormatError(f"{path}:{n}: not valid JSON: {exc}") from None
            if "id" not in r or "question" not in r:
                raise BeirFormatError(f"{path}:{n}: a QA row needs 'id' and 'question'")
            out.append({"id": str(r["id"]), "question": r["question"],
                        **{k: [str(x) for x in r.get(k) or []] for k in ("answers", "gold_passage_ids", "gold_passages")}})
        return out

    return cached_dataset(f"qa-{path.parent.name}", _files_hash([path]), rows, cache_dir=cache_dir,
                          columns={"id": "string", "question": "string", "answers": "list<string>",
                                   "gold_passage_ids": "list<string>", "gold_passages": "list<string>"})


def download_beir(name: str, cache_dir: str | os.PathLike, *, url: str | None = None,
                  timeout: float = 120.0) -> Path:
    """Fetch BEIR's public zip for ``name`` into ``cache_dir/<name>`` once; returns that folder.

    The folder has the same layout as ``../shared/datasets/<name>``, so ``load_beir`` reads
    either. Nothing is fetched when the folder already holds a corpus.
    """
    dest = Path(cache_dir) / name
    if (dest / "corpus.jsonl").is_file() and (dest / "queries.jsonl").is_file():
        return dest
    Path(cache_dir).mkdir(parents=True, exist_ok=True)
    src = url or BEIR_URL.format(name=name)
    with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
        zpath = Path(tmp) / f"{name}.zip"
        with urllib.request.urlopen(src, timeout=timeout) as resp, zpath.open("wb") as out:  # noqa: S310
            shutil.copyfileobj(resp, out, 1 << 20)
        with zipfile.ZipFile(zpath) as zf:
            base = Path(tmp).resolve()
            for member in zf.namelist():
                if not str((base / member).resolve()).startswith(str(base)):
                    raise BeirFormatError(f"{src}: unsafe path {member!r} in zip")
            zf.extractall(tmp)
        found = [p.parent for p in Path(tmp).rglob("corpus.jsonl")]
        if not found:
            raise BeirFormatError(f"{src}: the zip holds no corpus.jsonl")
        shutil.rmtree(dest, ignore_errors=True)
        shutil.move(str(found[0]), str(dest))
    return dest


def resolve_beir(name: str, datasets_dir: str | os.PathLike | None, cache_dir: str | os.PathLike) -> Path:
    """``datasets_dir/<name>`` when present (offline), else the downloaded copy in ``cache_dir``."""
    if datasets_dir is not None and (Path(datasets_dir) / name / "corpus.jsonl").is_file():
        return Path(datasets_dir) / name
    return download_beir(name, Path(cache_dir) / "beir")
