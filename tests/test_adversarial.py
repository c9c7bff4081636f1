"""Adversarial input through ``kb.ingest_document(bytes, name, owner, visibility)``.

Every malformed file is generated here: zero-byte and truncated PDFs, zips that are not
DOCX/PPTX, a deck of 2,000 empty slides, shape groups nested 50 and 300 levels deep,
non-UTF-8 and mixed encodings, files past the size limit, and hostile names (``..``, ``/``,
``\\``, NUL, drive letters, over-long names).

Each refusal must be an ``IngestError`` whose message starts with the file name (as given, or
its ``repr`` when the knowledge base quotes it) and says why, and must change nothing: the
chunk count, the document list, the raw blobs and the pending markers stay as they were, and
the documents ingested before (including an earlier version under the same name) stay fully
readable on all six read paths.

Unicode look-alikes (``／`` U+FF0F fullwidth solidus, ``∕`` U+2215, ``⁄`` U+2044, ``‥`` U+2025,
``．`` U+FF0E) are the documented exception: they are not path separators or dots, so the
name is accepted as a key, stored verbatim (never NFKC-normalised, which would turn ``／``
into ``/``), readable only under exactly that key, and it never becomes a path: blobs are
content-addressed, so no file or directory under (or beside) the data directory carries the
name.

Marked ``reliability`` except the pure checks on the name and message helpers.
"""

from __future__ import annotations

import io
import os
import re
import time
import unicodedata
import zipfile
from pathlib import Path

import pytest

from adiyan.config import load_settings
from adiyan.factory import open_kb, open_retriever
from adiyan.kb import DocumentNotFound, IngestError
from adiyan.store import open_store
from adiyan.types import OWNER
from tests.test_parse import build_pdf as pdf_from_objects

MAX_BYTES = 3_000_000
BASE_TEXT = ("# Field guide\n\nThe Julian Alps Weekend costs 450 euros per person. Marker BASELINE-4417 "
             "identifies the baseline document.\n")
NOTES_V1 = "# Notes\n\nAlice's notes, version one. Marker NOTES-V1-2209.\n"


# -- generated files ------------------------------------------------------------------------------


def build_pdf(text: str = "Hello adversary") -> bytes:
    """A small, well-formed one-page PDF with a text layer (test_parse's builder)."""
    stream = b"BT /F1 24 Tf 72 720 Td (%s) Tj ET" % text.encode("latin-1")
    return pdf_from_objects([b"<< /Type /Catalog /Pages 2 0 R >>",
                             b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
                             b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
                             b"/Resources << /Font << /F1 5 0 R >> >> >>",
                             b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream),
                             b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"])


def zip_of(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
    return buf.getvalue()


_SLIDE_CT = "application/vnd.openxmlformats-officedocument.presentationml.slide+xml"
_SLIDE_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/slide"
_TEXTBOX = ('<p:sp><p:nvSpPr><p:cNvPr id="{id}" name="TextBox {id}"/><p:cNvSpPr txBox="1"/><p:nvPr/></p:nvSpPr>'
            '<p:spPr><a:xfrm><a:off x="914400" y="914400"/><a:ext cx="3657600" cy="914400"/></a:xfrm>'
            '<a:prstGeom prst="rect"><a:avLst/></a:prstGeom></p:spPr><p:txBody><a:bodyPr/><a:lstStyle/>'
            '<a:p><a:r><a:rPr lang="en-US"/><a:t>{text}</a:t></a:r></a:p></p:txBody></p:sp>')
_GROUP_OPEN = ('<p:grpSp><p:nvGrpSpPr><p:cNvPr id="{id}" name="Group {id}"/><p:cNvGrpSpPr/><p:nvPr/></p:nvGrpSpPr>'
               '<p:grpSpPr><a:xfrm><a:off x="0" y="0"/><a:ext cx="0" cy="0"/><a:chOff x="0" y="0"/>'
               '<a:chExt cx="0" cy="0"/></a:xfrm></p:grpSpPr>')


def _base_deck() -> dict[str, bytes]:
    from pptx import Presentation

    prs = Presentation()
    prs.slides.add_slide(prs.slide_layouts[6])  # blank layout: no placeholders, no text
    buf = io.BytesIO()
    prs.save(buf)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as z:
        return {n: z.read(n) for n in z.namelist()}


def build_deck(slide_trees: list[str]) -> bytes:
    """A .pptx whose slides have the given ``<p:spTree>`` contents (after the group properties).

    Built at the zip level from python-pptx's one-slide blank deck: python-pptx's own
    ``add_slide`` is quadratic and needs 15-30 s for 2,000 slides; cloning the part takes < 1 s.
    """
    parts = _base_deck()
    blank = parts.pop("ppt/slides/slide1.xml").decode()
    rels = parts.pop("ppt/slides/_rels/slide1.xml.rels")
    head, tail_rest = re.match(r"(?s)(.*?<p:grpSpPr(?:/>|>.*?</p:grpSpPr>)).*?</p:spTree>(.*)", blank).groups()
    ct = parts["[Content_Types].xml"].decode()
    ct = re.sub(r'<Override PartName="/ppt/slides/slide1\.xml"[^>]*/>', "", ct)
    ct = ct.replace("</Types>", "".join(f'<Override PartName="/ppt/slides/slide{i}.xml" ContentType="{_SLIDE_CT}"/>'
                                        for i in range(1, len(slide_trees) + 1)) + "</Types>")
    parts["[Content_Types].xml"] = ct.encode()
    prels = parts["ppt/_rels/presentation.xml.rels"].decode()
    prels = re.sub(r'<Relationship [^>]*Target="slides/slide1\.xml"[^>]*/>', "", prels)
    prels = prels.replace("</Relationships>", "".join(
        f'<Relationship Id="rIdS{i}" Type="{_SLIDE_REL}" Target="slides/slide{i}.xml"/>'
        for i in range(1, len(slide_trees) + 1)) + "</Relationships>")
    parts["ppt/_rels/presentation.xml.rels"] = prels.encode()
    pres = parts["ppt/presentation.xml"].decode()
    ids = "".join(f'<p:sldId id="{255 + i}" r:id="rIdS{i}"/>' for i in range(1, len(slide_trees) + 1))
    pres = re.sub(r"<p:sldIdLst>.*?</p:sldIdLst>", f"<p:sldIdLst>{ids}</p:sldIdLst>", pres, flags=re.S)
    parts["ppt/presentation.xml"] = pres.encode()
    for i, tree in enumerate(slide_trees, start=1):
        parts[f"ppt/slides/slide{i}.xml"] = (head + tree + "</p:spTree>" + tail_rest).encode()
        parts[f"ppt/slides/_rels/slide{i}.xml.rels"] = rels
    return zip_of(parts)


def textbox(text: str, shape_id: int = 2) -> str:
    return _TEXTBOX.format(id=shape_id, text=text)


def nested_groups(depth: int, text: str) -> str:
    return "".join(_GROUP_OPEN.format(id=10 + i) for i in range(depth)) + textbox(text, 9) + "</p:grpSp>" * depth


# -- the knowledge base under attack ---------------------------------------------------------------


@pytest.fixture(scope="module")
def kb(tmp_path_factory, minilm):
    root = tmp_path_factory.mktemp("adversarial")
    s = load_settings(environ={}, overrides={"paths.data_dir": str(root / "data"), "ingest.max_bytes": MAX_BYTES})
    kb = open_kb(s, embedder=minilm)
    kb.rp = open_retriever(s, kb)  # the six read paths over this KB
    kb.ingest_document(BASE_TEXT.encode(), "guide.md", "office", "global")
    kb.ingest_document(NOTES_V1.encode(), "notes.md", "alice", "private")
    kb.finish_ingest()
    kb.root = root  # for the tests that look at the file system
    yield kb
    kb.store.close()


def snapshot(kb) -> dict:
    raw_root = kb.raw.root
    return {
        "chunks": kb.count_chunks(),
        "documents": kb.list_documents(OWNER),
        "blobs": sorted(str(p.relative_to(raw_root)) for p in (raw_root / "files").rglob("*") if p.is_file()),
        "pending": sorted(p.name for p in kb.pending_dir.iterdir()),
    }


def assert_readable(kb) -> None:
    """The documents ingested before the attack answer on all six read paths, unchanged."""
    for key, marker, requester in (("office/guide.md", "BASELINE-4417", "bob"),
                                   ("alice/notes.md", "NOTES-V1-2209", "alice")):
        hits = kb.rp.retrieve_knowledge_base(marker, requester, top_k=10, floor=-1.0).chunks
        assert any(marker in c.text for c in hits), key
        within = kb.rp.search_within_document(key, marker, requester, floor=-1.0).chunks
        assert within and all(c.source == key for c in within)
        assert kb.rp.find_source_document(marker, requester, floor=-1.0) is not None
        assert marker in kb.get_document_text(key, requester)
        assert marker.encode() in kb.get_document(key, requester)
        assert key in {d["source"] for d in kb.list_documents(requester)}
        assert kb.extraction_report(key, requester)["total_chars"] > 0
        assert kb.count_chunks(key) == kb.raw.get(key, OWNER).n_chunks


def starts_with_name(message: str, filename: str) -> bool:
    """The message names the file first: as given (parser) or quoted with repr (knowledge base);
    names over 255 bytes are quoted shortened to 40 characters."""
    return any(message.startswith(p) for p in (f"{filename}: ", f"{filename!r}: ", f"{filename[:40]!r}..."))


def test_starts_with_name_helper():
    """Pure check of the message helper (no injection)."""
    assert starts_with_name("a.pdf: empty file (0 bytes)", "a.pdf")
    assert starts_with_name("'../b.md': file name refused: the name has a '..' path component", "../b.md")
    assert not starts_with_name("empty file: a.pdf", "a.pdf")


# (id, bytes, file name, owner, reason the message must contain)
def _cases():
    pdf = build_pdf()
    empty_deck_zip = zip_of({"hello.txt": b"not an office document"})
    yield "zero-byte-pdf", b"", "empty.pdf", "office", "empty file (0 bytes)"
    yield "truncated-pdf-half", pdf[: len(pdf) // 2], "half.pdf", "office", "truncated PDF"
    yield "truncated-pdf-header-only", b"%PDF-1.7\n", "header.pdf", "office", "truncated PDF"
    yield "truncated-pdf-tail", pdf[:-40], "tail.pdf", "alice", "truncated PDF"
    yield "pdf-named-docx", pdf, "letter.docx", "office", "not a zip package; the content looks like PDF"
    yield "zip-not-a-docx", empty_deck_zip, "letter.docx", "office", "the package has no word/document.xml"
    yield "zip-not-a-pptx", empty_deck_zip, "deck.pptx", "office", "the package has no ppt/presentation.xml"
    yield "corrupt-zip-docx", b"PK\x03\x04" + os.urandom(600), "broken.docx", "office", "not a valid .docx"
    yield "truncated-zip-pptx", build_deck([textbox("Hello")])[:900], "cut.pptx", "office", "not a valid .pptx"
    # latin-1/cp1252 and UTF-16 with a BOM are read since issue 13 (tests/test_formats_text.py); what no
    # encoding reads plausibly, malformed UTF-8 and mixed encodings are still refused.
    yield "undetectable-bytes", bytes(range(128, 256)) * 8, "menu.md", "office", "could not be detected with confidence"
    yield "undetectable-same-name", (bytes(range(200, 256)) + bytes(range(128, 200))) * 8, "notes.md", "alice", \
        "not valid UTF-8"
    yield "mixed-utf8-latin1", "Grüße aus Ljubljana. ".encode() + "Grüße".encode("latin-1"), "mixed.txt", \
        "office", "not valid UTF-8"
    yield "utf16-bom-broken", b"\xff\xfe" + "Hello".encode("utf-16-le") + b"\x00\xd8", "wide.txt", "office", \
        "byte-order mark but is not valid utf-16-le"
    yield "overlong-utf8-slash", b"safe text \xc0\xaf etc", "overlong.md", "office", "not valid UTF-8"
    yield "utf8-surrogate", b"surrogate \xed\xa0\x80 here", "surrogate.md", "office", "not valid UTF-8"
    yield "html-bad-shift-jis", b'<html><head><meta charset="shift_jis"></head><body>\x81\x20</body></html>', \
        "page.html", "office", "declares charset shift_jis but is not valid"
    yield "html-unknown-charset", b'<html><head><meta charset="x-klingon"></head><body>hi</body></html>', \
        "klingon.html", "office", "declares an unknown charset"
    yield "past-size-limit", b"# Big\n\n" + b"a" * MAX_BYTES, "big.md", "office", f"over the limit of {MAX_BYTES}"
    yield "past-size-limit-same-name", b"x" * (MAX_BYTES + 1), "notes.md", "alice", f"over the limit of {MAX_BYTES}"
    yield "zero-byte-same-name", b"", "notes.md", "alice", "empty file (0 bytes)"
    yield "whitespace-only", b" \n\t \n", "blank.md", "office", "no text"
    yield "unsupported-extension", b"MZ\x90\x00", "setup.exe", "office", "unsupported file type .exe"
    yield "no-extension", b"hello", "README", "office", "unsupported file type (no extension)"
    # a name may be a relative path ("sub/dir.md" is a key); what could address another place is refused
    for name, why in (("../../etc/passwd.md", "'..' path component"), ("sub/../../x.md", "'..' path component"),
                      ("/etc/passwd.md", "absolute path"), ("..\\..\\boot.md", "'\\'"), ("a\\b.md", "'\\'"),
                      ("sub//dir.md", "empty path component"), ("sub/./dir.md", "'.' path component")):
        yield f"name-path-{name}", b"# x\n\nharmless", name, "office", why
    yield "name-nul", b"# x\n\nharmless", "evil\x00.md", "office", "NUL byte"
    yield "name-dotdot", b"# x\n\nharmless", "..", "office", "'..' path component"
    yield "name-dot", b"# x\n\nharmless", ".", "office", "'.' path component"
    yield "name-drive", b"# x\n\nharmless", "C:boot.md", "office", "absolute (drive) path"
    yield "name-empty", b"# x\n\nharmless", "", "office", "empty file name"
    yield "name-blank", b"# x\n\nharmless", "   ", "office", "empty file name"
    yield "name-too-long", b"# x\n\nharmless", "n" * 300 + ".md", "office", "longer than 255 bytes"
    yield "owner-with-slash", b"# x\n\nharmless", "ok.md", "../alice", "invalid owner identity"
    yield "owner-empty", b"# x\n\nharmless", "ok.md", "", "invalid owner identity"


CASES = [pytest.param(*c[1:], id=c[0]) for c in _cases()]


@pytest.mark.reliability
@pytest.mark.parametrize("data,filename,owner,reason", CASES)
def test_malformed_input_is_refused_and_changes_nothing(kb, data, filename, owner, reason):
    """Injects: one malformed file or hostile name (see the case id) through ingest_document.
    Expects: IngestError naming the file first and saying why; store, raw files and the earlier
    documents (also an earlier version under the same name) untouched."""
    before = snapshot(kb)
    with pytest.raises(IngestError) as err:
        kb.ingest_document(data, filename, owner, "private")
    msg = str(err.value)
    assert starts_with_name(msg, filename), msg[:200]
    assert reason in msg, msg[:300]
    assert snapshot(kb) == before
    assert_readable(kb)


@pytest.mark.reliability
def test_bad_visibility_is_refused(kb):
    """Injects: a visibility outside private/global. Expects a named refusal, nothing stored."""
    before = snapshot(kb)
    with pytest.raises(IngestError, match=r"^'memo\.md': visibility must be one of"):
        kb.ingest_document(b"# Memo\n\nhello", "memo.md", "office", "public")
    assert snapshot(kb) == before


@pytest.mark.reliability
def test_file_past_the_size_limit_is_refused_before_it_is_read(kb, tmp_path):
    """Injects: a path to a sparse file one byte past ingest.max_bytes. Expects the size refusal
    from stat() (the file is never read into memory), nothing stored."""
    big = tmp_path / "huge.md"
    with open(big, "wb") as f:
        f.truncate(MAX_BYTES + 1)
    before = snapshot(kb)
    with pytest.raises(IngestError) as err:
        kb.ingest_document(big, "huge.md", "office", "global")
    assert str(err.value).startswith("'huge.md': file is 3000001 bytes, over the limit of 3000000")
    assert snapshot(kb) == before


@pytest.mark.reliability
def test_deck_of_2000_empty_slides_is_a_no_text_error(kb):
    """Injects: a .pptx of 2,000 slides without any shape. Expects the deck-level "no text"
    error naming the file, with a named empty_slide warning per slide in its reason; nothing stored."""
    data = build_deck([""] * 2000)
    before = snapshot(kb)
    t0 = time.perf_counter()
    with pytest.raises(IngestError) as err:
        kb.ingest_document(data, "empty_deck.pptx", "office", "global")
    seconds = time.perf_counter() - t0
    msg = str(err.value)
    assert msg.startswith("empty_deck.pptx: no text could be extracted"), msg[:200]
    assert "slide 1 of empty_deck.pptx yielded no text" in msg
    assert err.value.__cause__.code == "no_text"
    assert_slide_warnings(err.value, 2000)
    assert snapshot(kb) == before
    assert_readable(kb)
    print(f"2,000 empty slides refused in {seconds:.2f}s; message {len(msg)} chars")


@pytest.mark.reliability
def test_no_text_error_message_stays_readable(kb):
    """Injects: the 2,000-empty-slide deck. Expects an error message a person can read (< 2,000 chars),
    with the per-slide detail left to the warnings."""
    with pytest.raises(IngestError) as err:
        kb.ingest_document(build_deck([""] * 2000), "empty_deck.pptx", "office", "global")
    assert len(str(err.value)) < 2000, len(str(err.value))
    assert_slide_warnings(err.value, 2000)  # the detail stays reachable


def assert_slide_warnings(err: IngestError, n: int) -> None:
    """A named empty_slide warning per slide, on the report the parse error carries."""
    report = getattr(err.__cause__, "report", None)
    assert report is not None, "the no_text error must carry its extraction report"
    assert [(w.code, w.unit) for w in report.warnings] == [("empty_slide", i) for i in range(1, n + 1)]


@pytest.mark.reliability
def test_deck_of_2000_empty_slides_and_one_text_slide_is_ingested_with_a_warning_per_slide(kb):
    """Injects: 2,000 empty slides and one slide with a text box. Expects success, the text of
    that slide stored, and exactly 2,000 named empty_slide warnings (slides 1..2000)."""
    data = build_deck([""] * 2000 + [textbox("Only slide with words: the Bohinj lake tour PEAK-2001.")])
    before = snapshot(kb)
    t0 = time.perf_counter()
    res = kb.ingest_document(data, "sparse_deck.pptx", "office", "global")
    seconds = time.perf_counter() - t0
    try:
        warnings = res.report["warnings"]
        assert [w["code"] for w in warnings] == ["empty_slide"] * 2000
        assert [w["unit"] for w in warnings] == list(range(1, 2001))
        assert len(res.report["units"]) == 2001
        assert "PEAK-2001" in kb.get_document_text("office/sparse_deck.pptx", "bob")
        assert kb.count_chunks() == before["chunks"] + res.n_chunks
        assert_readable(kb)
    finally:  # leave the shared knowledge base as it was for the other tests
        _remove(kb, "office/sparse_deck.pptx")
    assert snapshot(kb)["chunks"] == before["chunks"]
    print(f"2,001-slide deck ingested in {seconds:.2f}s")


@pytest.mark.reliability
def test_shape_groups_nested_50_levels_are_read(kb):
    """Injects: a slide whose only text box sits inside 50 nested group shapes.
    Expects the text extracted (the group walk recurses), no warning."""
    data = build_deck([nested_groups(50, "Deep inside fifty groups: marker DEEP-50.")])
    res = kb.ingest_document(data, "nested50.pptx", "office", "global")
    try:
        assert res.report["warnings"] == []
        assert "DEEP-50" in kb.get_document_text("office/nested50.pptx", "bob")
    finally:
        _remove(kb, "office/nested50.pptx")


@pytest.mark.reliability
def test_shape_groups_nested_300_levels_are_refused_by_name(kb):
    """Injects: 300 nested group shapes (past libxml2's 256-level depth limit, which also bounds
    the recursion of the group walk). Expects a named refusal, nothing stored."""
    data = build_deck([nested_groups(300, "Too deep.")])
    before = snapshot(kb)
    with pytest.raises(IngestError) as err:
        kb.ingest_document(data, "nested300.pptx", "office", "global")
    msg = str(err.value)
    assert msg.startswith("nested300.pptx: python-pptx could not open the deck"), msg[:300]
    assert "depth" in msg.lower()
    assert snapshot(kb) == before
    assert_readable(kb)


LOOKALIKES = ["report／2024.md",  # U+FF0F fullwidth solidus
              "‥／‥／etc／passwd.md",  # U+2025 two dot leader + fullwidth solidus
              "a∕b.md",  # U+2215 division slash
              "a⁄b.md",  # U+2044 fraction slash
              "．．／secrets.md",  # U+FF0E fullwidth full stop
              "ｃ：boot.md"]  # fullwidth c and colon: not a drive letter


def test_lookalike_names_pass_the_name_check_and_must_never_be_nfkc_folded():
    """Pure check (no knowledge base, nothing injected): look-alikes are not separators, so the
    name check accepts them; NFKC folds four of them into other names: three it refuses
    (``‥／‥／etc／passwd.md`` becomes ``../../etc/passwd.md``) and one that is another document's
    key (``report／2024.md`` becomes ``report/2024.md``), which is why a key is never normalised."""
    from adiyan.kb import validate_filename

    refused, other_keys = 0, []
    for name in LOOKALIKES:
        assert validate_filename(name) == name
        folded = unicodedata.normalize("NFKC", name)
        if folded == name:
            continue
        try:
            validate_filename(folded)
            other_keys.append(folded)
        except IngestError:
            refused += 1
    assert refused == 3 and other_keys == ["report/2024.md"]
    assert unicodedata.normalize("NFKC", "‥／‥／etc／passwd.md") == "../../etc/passwd.md"


@pytest.mark.reliability
def test_unicode_lookalike_names_are_keys_never_paths(kb):
    """Injects: names with fullwidth solidus, division / fraction slash, two-dot leader, fullwidth
    full stops and colon. Expects: accepted, stored under exactly ``owner/<name>`` (no
    normalisation), readable only by that exact key (the NFKC form is not found), and no file or
    directory in or beside the data directory carries any part of the name."""
    root: Path = kb.root
    outside_before = sorted(p.name for p in root.parent.iterdir())
    before = snapshot(kb)
    added = []
    try:
        for i, name in enumerate(LOOKALIKES):
            res = kb.ingest_document(f"# Look-alike {i}\n\nMarker LOOK-{i}-ALIKE.\n".encode(), name, "office", "global")
            key = f"office/{name}"
            added.append(key)
            assert res.source == key and res.changed
            assert f"LOOK-{i}-ALIKE" in kb.get_document_text(key, "bob")
            assert kb.get_document(key, "bob").startswith(f"# Look-alike {i}".encode())
            assert key in {d["source"] for d in kb.list_documents("bob")}
            folded = "office/" + unicodedata.normalize("NFKC", name)
            if folded != key:  # U+2215 and U+2044 have no compatibility form
                with pytest.raises(DocumentNotFound):
                    kb.get_document_text(folded, "bob")
            hits = kb.rp.search_within_document(key, f"LOOK-{i}-ALIKE", "bob", floor=-1.0).chunks
            assert hits and {c.source for c in hits} == {key}
        assert kb.count_chunks() == before["chunks"] + sum(kb.count_chunks(k) for k in added)
        suspicious = set("／∕⁄‥．ｃ：")
        for p in root.rglob("*"):
            assert not (set(p.name) & suspicious), f"a look-alike name became a path: {p}"
        assert sorted(p.name for p in root.parent.iterdir()) == outside_before
        assert not Path("/etc/passwd.md").exists()
        assert_readable(kb)
    finally:
        for key in added:
            _remove(kb, key)
    assert snapshot(kb)["chunks"] == before["chunks"]


@pytest.mark.reliability
def test_relative_and_dotted_names_are_keys_never_paths(kb):
    """Injects: names that are relative paths or have '..' inside a component (``Co..md``,
    ``..hidden.md``, ``sub/dir/../x`` is refused elsewhere). Expects: each stored under exactly
    ``owner/<name>`` and readable by it, and no file or folder in or beside the data directory
    named after any part of it (blobs are stored by content hash)."""
    root: Path = kb.root
    outside_before = sorted(p.name for p in root.parent.iterdir())
    names = ["Harris, Forbes & Co..md", "..hidden.md", "a..b.md", "sub/dir/notes.md", "etc/passwd.md"]
    added = []
    try:
        for i, name in enumerate(names):
            res = kb.ingest_document(f"# Dotted {i}\n\nMarker DOTTED-{i}-NAME.\n".encode(), name, "office", "global")
            key = f"office/{name}"
            added.append(key)
            assert res.source == key and res.changed
            assert f"DOTTED-{i}-NAME" in kb.get_document_text(key, "bob")
            assert key in {d["source"] for d in kb.list_documents("bob")}
        for p in root.rglob("*"):
            assert not any(part in p.name for part in ("Harris", "hidden", "a..b", "passwd", "notes.md")), p
        assert sorted(p.name for p in root.parent.iterdir()) == outside_before
        assert_readable(kb)
    finally:
        for key in added:
            _remove(kb, key)


def _remove(kb, key: str) -> None:
    """Test clean-up: the knowledge base has no delete verb, so remove a document's chunks and
    index row directly (its content-addressed blobs stay; they are harmless)."""
    from adiyan.store import Cond, Filter

    kb.store.delete(kb.collection, Filter(must=(Cond("source_filename", key),)))
    conn = kb.raw._conn()
    with conn:
        conn.execute("DELETE FROM documents WHERE source_key = ?", (key,))
