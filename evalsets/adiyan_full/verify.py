"""Check the adiyan_full evalset: loader, answer keywords, ids, kinds, private documents, OCR slide.

    .venv/bin/python evalsets/adiyan_full/verify.py            # text checks (seconds)
    .venv/bin/python evalsets/adiyan_full/verify.py --rebuild  # also: build.py is deterministic

Text is extracted independently of the adiyan ingest code: Markdown as-is, HTML with the tags
stripped, DOCX paragraphs and table cells with python-docx, PPTX text frames and table cells
with python-pptx plus the recorded text of the image-only slide (src/promo_slide.txt).
Exits non-zero and lists every problem if a check fails.
"""

from __future__ import annotations

import collections
import html
import json
import re
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # the repository root, for `adiyan`

from adiyan.eval.evalset import KINDS, load_evalset  # noqa: E402

MAX_BYTES = 200_000
IMAGE_TEXT = (HERE / "src" / "promo_slide.txt").read_text(encoding="utf-8")


def html_text(raw: str) -> str:
    raw = re.sub(r"(?is)<(script|style)\b.*?</\1>", " ", raw)
    return html.unescape(re.sub(r"(?s)<[^>]+>", " ", raw))


def docx_text(path: Path) -> str:
    from docx import Document

    doc = Document(str(path))
    parts = [p.text for p in doc.paragraphs]
    for table in doc.tables:
        for row in table.rows:
            parts.extend(cell.text for cell in row.cells)
    return "\n".join(parts)


def pptx_text(path: Path) -> tuple[str, list[int]]:
    """Text of every text frame and table; also the numbers of slides with no text at all."""
    from pptx import Presentation

    parts, textless = [], []
    for n, slide in enumerate(Presentation(str(path)).slides, start=1):
        before = len(parts)
        for shape in slide.shapes:
            if shape.has_text_frame and shape.text_frame.text.strip():
                parts.append(shape.text_frame.text)
            if getattr(shape, "has_table", False) and shape.has_table:
                parts.extend(c.text for row in shape.table.rows for c in row.cells)
        if len(parts) == before:
            textless.append(n)
    return "\n".join(parts), textless


def extract(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix == ".md":
        return path.read_text(encoding="utf-8")
    if suffix == ".html":
        return html_text(path.read_text(encoding="utf-8"))
    if suffix == ".docx":
        return docx_text(path)
    if suffix == ".pptx":
        return pptx_text(path)[0] + "\n" + IMAGE_TEXT
    raise ValueError(f"no extractor for {path.name}")


def word_in(keyword: str, text: str) -> bool:
    return re.search(r"(?<!\w)" + re.escape(keyword.lower()) + r"(?!\w)", text.lower()) is not None


def main() -> int:
    problems: list[str] = []
    es = load_evalset(HERE)  # validates keys, gold sources and id uniqueness
    docs = {d.filename: d for d in es.documents}
    texts = {name: extract(d.path) for name, d in docs.items()}
    deck = next(d for d in es.documents if d.filename.endswith(".pptx"))
    deck_frames, textless = pptx_text(deck.path)
    rows = [json.loads(line) for line in (HERE / "questions.jsonl").read_text(encoding="utf-8").splitlines()
            if line.strip()]

    ids = [r["id"] for r in rows]
    dupes = [i for i, c in collections.Counter(ids).items() if c > 1]
    if dupes:
        problems.append(f"duplicate ids: {dupes}")
    if len(rows) < 40:
        problems.append(f"only {len(rows)} questions (need >= 40)")
    if textless != [4]:
        problems.append(f"slides without text frames are {textless}; expected exactly [4] (the picture slide)")

    private_docs = {n for n, d in docs.items() if d.visibility == "private"}
    global_text = "\n".join(t for n, t in texts.items() if n not in private_docs)
    for r in rows:
        rid, kind, gold, kws = r["id"], r["kind"], r["gold_sources"], r["answer_keywords"]
        if kind not in KINDS:
            problems.append(f"{rid}: unknown kind {kind!r}")
        if not r["question"].strip() or not r["gold_answer"].strip():
            problems.append(f"{rid}: empty question or gold answer")
        if kind == "unanswerable":
            if gold or kws:
                problems.append(f"{rid}: unanswerable but has gold sources or keywords")
        elif not gold or not kws:
            problems.append(f"{rid}: answerable kind {kind} without gold sources or keywords")
        if kind == "multi_hop" and len(gold) != 2:
            problems.append(f"{rid}: multi_hop needs two gold sources, has {gold}")
        for kw in kws:
            if not any(kw.lower() in texts[s].lower() for s in gold):
                problems.append(f"{rid}: keyword {kw!r} is in none of its gold sources {gold}")
            if kw.lower() not in r["gold_answer"].lower():
                problems.append(f"{rid}: keyword {kw!r} is not in its own gold answer")
        # who may see the gold sources
        requester = r.get("requester")
        for s in gold:
            d = docs[s]
            if d.visibility == "private" and d.owner != requester:
                problems.append(f"{rid}: gold source {s} is private to {d.owner}, requester is {requester}")
        if kind == "private":
            if not all(s in private_docs for s in gold):
                problems.append(f"{rid}: private question with a global gold source")
            for kw in kws:
                if kw.lower() in global_text.lower():
                    problems.append(f"{rid}: private keyword {kw!r} also occurs in a global document")
        if "probe_private" in r:
            target = r["probe_private"]
            if target not in private_docs:
                problems.append(f"{rid}: probe_private {target!r} is not a private document")
            elif docs[target].owner == requester:
                problems.append(f"{rid}: probe asked by the owner of {target}")
            if kind != "unanswerable":
                problems.append(f"{rid}: probe must be kind unanswerable")
        if r.get("needs_ocr"):
            if gold != [deck.filename]:
                problems.append(f"{rid}: needs_ocr question must have the deck as its only gold source")
            for kw in kws:
                if kw.lower() not in IMAGE_TEXT.lower():
                    problems.append(f"{rid}: OCR keyword {kw!r} is not in the rendered image text")
                if word_in(kw, deck_frames):
                    problems.append(f"{rid}: OCR keyword {kw!r} is also in the deck's text frames")

    for d in es.documents:
        size = d.path.stat().st_size
        if size >= MAX_BYTES:
            problems.append(f"{d.filename}: {size} bytes (limit {MAX_BYTES})")

    if "--rebuild" in sys.argv:
        import importlib.util

        spec = importlib.util.spec_from_file_location("adiyan_full_build", HERE / "build.py")
        build = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(build)
        with tempfile.TemporaryDirectory() as tmp:
            build.DOCS = Path(tmp)
            build.main()
            for f in sorted(Path(tmp).iterdir()):
                if f.read_bytes() != (HERE / "docs" / f.name).read_bytes():
                    problems.append(f"rebuild of {f.name} differs from docs/{f.name}")

    # summary
    by_kind = collections.Counter(r["kind"] for r in rows)
    fmt = {d.filename: d.path.suffix.lstrip(".") for d in es.documents}
    by_format = collections.Counter(fmt[s] for r in rows for s in r["gold_sources"])
    print(f"{es.name}: {len(es.documents)} documents, {len(rows)} questions")
    print("per kind:", dict(sorted(by_kind.items())))
    print("  needs_ocr:", sum(bool(r.get("needs_ocr")) for r in rows),
          " probe_private:", sum("probe_private" in r for r in rows),
          " book (field_guide_book.md):", sum("field_guide_book.md" in r["gold_sources"] for r in rows))
    print("gold-source references per format:", dict(sorted(by_format.items())))
    for d in es.documents:
        print(f"  {d.filename:<22} {d.owner:<14} {d.visibility:<8} {d.path.stat().st_size:>8,} bytes"
              f"  {len(texts[d.filename]):>6,} chars")
    if problems:
        print(f"\nFAILED: {len(problems)} problem(s)")
        for p in problems:
            print("  -", p)
        return 1
    print("\nOK: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
