"""Containers in the knowledge base's batch path and ``adiyan ingest``: archives and e-mails whose
members become documents keyed under them; a member that fails fails alone, by name; a re-ingested
container loses the members it no longer has, with the same visibility guarantees as a re-ingest;
and ``adiyan ingest DIR`` keys every file by its path under DIR. Files are generated here."""

import io
import zipfile
from email.message import EmailMessage

import pytest

from adiyan.cli import main as cli
from adiyan.factory import open_kb, open_retriever
from adiyan.kb import DocumentNotFound, IngestError, IngestResult
from adiyan.store import open_store
from adiyan.types import OWNER
from tests.conftest import MODEL_DIR


def archive(members: dict[str, str | bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, body in members.items():
            z.writestr(name, body)
    return buf.getvalue()


def note(word: str) -> str:
    return f"# {word}\n\n" + f"The {word} notes of the Julian Alps office, marker {word.upper()}-77. " * 6


def email(subject: str, body: str, attachments: dict[str, str]) -> bytes:
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = "mira@example.org", "office@example.org", subject
    msg.set_content(body)
    for name, text in attachments.items():
        msg.add_attachment(text.encode(), maintype="text", subtype="plain", filename=name)
    return msg.as_bytes()


@pytest.fixture
def kb(make_settings, minilm):
    s = make_settings()
    store = open_store(s)
    kb = open_kb(s, embedder=minilm, store=store)
    kb.rp = open_retriever(s, kb)
    yield kb
    store.close()


def _paths(kb, key, requester) -> dict:
    """What the six read paths show of ``key`` to ``requester``."""
    word = key.rsplit("/", 1)[-1].split(".")[0]
    out = {"listed": key in {d["source"] for d in kb.list_documents(requester)},
           "retrieved": any(c.source == key for c in kb.rp.retrieve_knowledge_base(
               f"{word} notes", requester, top_k=20, floor=-1.0).chunks)}
    found = kb.rp.find_source_document(f"{word} notes marker {word.upper()}-77", requester, floor=-1.0)
    out["found"] = bool(found) and found["source"] == key
    for name, call in (("within", lambda: kb.rp.search_within_document(key, "notes", requester, floor=-1.0).chunks),
                       ("text", lambda: kb.get_document_text(key, requester)),
                       ("bytes", lambda: kb.get_document(key, requester))):
        try:
            out[name] = bool(call())
        except DocumentNotFound:
            out[name] = False
    return out


SHOWN = {"listed": True, "retrieved": True, "found": True, "within": True, "text": True, "bytes": True}
GONE = dict.fromkeys(SHOWN, False)


def test_archive_members_are_documents_and_a_bad_member_fails_alone(kb):
    data = archive({"docs/kayak.txt": note("kayak"), "docs/wine.md": note("wine"), "broken.pdf": b"%PDF-1.7\n"})
    res = kb.ingest_many([(data, "archive.zip", "alice", "private")])
    summary = res[0]
    assert isinstance(summary, IngestResult) and summary.source == "alice/archive.zip"
    by_key = {r.source: r for r in summary.members}
    assert set(by_key) == {"alice/archive.zip/docs/kayak.txt", "alice/archive.zip/docs/wine.md",
                           "alice/archive.zip/broken.pdf"}
    bad = by_key["alice/archive.zip/broken.pdf"]
    assert isinstance(bad, IngestError) and "truncated PDF" in str(bad) and "broken.pdf" in str(bad)
    assert summary.n_chunks == sum(r.n_chunks for r in summary.members if isinstance(r, IngestResult)) > 0
    assert [d["source"] for d in kb.list_documents("alice")] == ["alice/archive.zip/docs/kayak.txt",
                                                               "alice/archive.zip/docs/wine.md"]
    assert _paths(kb, "alice/archive.zip/docs/kayak.txt", "alice") == SHOWN
    assert _paths(kb, "alice/archive.zip/docs/kayak.txt", "bob") == GONE  # members keep the item's visibility
    assert kb.extraction_report("alice/archive.zip/docs/wine.md", "alice")["container"] == "alice/archive.zip"


def test_reingested_archive_removes_the_members_it_no_longer_has(kb):
    v1 = archive({"a/kayak.txt": note("kayak"), "a/wine.txt": note("wine"), "c/hotel.txt": note("hotel")})
    v2 = archive({"a/kayak.txt": note("kayak"), "a/wine.txt": note("wine") + "Revised.\n"})
    kb.ingest_many([(v1, "archive.zip", "office", "global")])
    gone = "office/archive.zip/c/hotel.txt"
    assert _paths(kb, gone, "bob") == SHOWN
    checked = []

    def hook(stage):  # control flow only: read between the removal's commit and its chunk deletion
        if stage == "after_remove_commit":
            assert kb.count_chunks(gone) > 0
            assert _paths(kb, gone, "bob") == GONE and _paths(kb, gone, "office") == GONE
            checked.append(stage)

    kb.fault_hook = hook
    res = kb.ingest_many([(v2, "archive.zip", "office", "global")])[0]
    kb.fault_hook = None
    assert checked == ["after_remove_commit"]
    assert res.removed == [gone] and res.changed
    assert {r.source: r.changed for r in res.members} == {"office/archive.zip/a/kayak.txt": False,
                                                         "office/archive.zip/a/wine.txt": True}
    assert _paths(kb, gone, "bob") == GONE and kb.count_chunks(gone) == 0
    assert "Revised." in kb.get_document_text("office/archive.zip/a/wine.txt", "bob")
    assert not list(kb.pending_dir.iterdir())


def test_email_is_a_document_and_its_attachments_too(kb):
    mail = email("Invoice for the kayak weekend", "Dear office, the kayak weekend invoice is attached. Marker MAILBODY-5.",
                 {"invoice.txt": note("invoice"), "route.txt": note("route")})
    res = kb.ingest_many([(mail, "mail.eml", "alice", "private")])[0]
    assert isinstance(res, IngestResult) and res.source == "alice/mail.eml" and res.changed
    assert sorted(r.source for r in res.members) == ["alice/mail.eml/invoice.txt", "alice/mail.eml/route.txt"]
    own = kb.get_document_text("alice/mail.eml", "alice")
    assert "Invoice for the kayak weekend" in own and "MAILBODY-5" in own  # headers and body
    assert "INVOICE-77" in kb.get_document_text("alice/mail.eml/invoice.txt", "alice")
    # the same message again without one attachment: that attachment is removed, the rest stays
    mail2 = email("Invoice for the kayak weekend", "Dear office, the kayak weekend invoice is attached. Marker MAILBODY-5.",
                  {"invoice.txt": note("invoice")})
    res2 = kb.ingest_many([(mail2, "mail.eml", "alice", "private")])[0]
    assert res2.removed == ["alice/mail.eml/route.txt"]
    assert [d["source"] for d in kb.list_documents("alice")] == ["alice/mail.eml", "alice/mail.eml/invoice.txt"]


def test_a_refused_container_changes_nothing(kb):
    kb.ingest_many([(archive({"kayak.txt": note("kayak")}), "archive.zip", "office", "global")])
    before = (kb.count_chunks(), kb.list_documents(OWNER))
    res = kb.ingest_many([(archive({"../escape.txt": note("escape")}), "archive.zip", "office", "global")])[0]
    assert isinstance(res, IngestError) and res.source == "office/archive.zip"
    assert str(res).startswith("'office/archive.zip': container refused, nothing of it changed") and ".." in str(res)
    assert (kb.count_chunks(), kb.list_documents(OWNER)) == before


def test_adiyan_ingest_keys_by_relative_path_and_expands_containers(tmp_path, capsys):
    root = tmp_path / "docs"
    (root / "a").mkdir(parents=True)
    (root / "b").mkdir()
    (root / "a" / "notes.txt").write_text(note("kayak"))
    (root / "b" / "notes.txt").write_text(note("wine"))
    (root / "b" / "empty.md").write_text("")
    (root / "archive.zip").write_bytes(archive({"docs/hotel.txt": note("hotel")}))
    (root / "mail.eml").write_bytes(email("Route", "The route is attached.", {"route.txt": note("route")}))
    sets = ["--set", f"paths.data_dir={tmp_path / 'data'}", "--set", f"paths.cache_dir={tmp_path / 'cache'}",
            "--set", f"paths.models_dir={MODEL_DIR}"]
    code = cli([*sets, "ingest", str(root), "--owner", "alice", "--quiet"])
    out = capsys.readouterr().out
    assert code == 1  # empty.md failed
    for key in ("alice/a/notes.txt", "alice/b/notes.txt", "alice/archive.zip/docs/hotel.txt", "alice/mail.eml",
                "alice/mail.eml/route.txt"):
        assert f"stored    {key}  chunks=" in out, out
    assert "FAILED    alice/b/empty.md: b/empty.md: " in out, out
    assert "ingested 5 document(s) (5 stored, 0 unchanged), 1 failed" in out, out
    # the archive without its member: removed, and said so; an unchanged file is said to be unchanged
    (root / "archive.zip").write_bytes(archive({"docs/spa.txt": note("spa")}))
    code = cli([*sets, "ingest", str(root), "--owner", "alice", "--quiet"])
    out = capsys.readouterr().out
    assert "unchanged alice/a/notes.txt" in out and "stored    alice/archive.zip/docs/spa.txt" in out, out
    assert "removed   alice/archive.zip/docs/hotel.txt  (no longer in alice/archive.zip)" in out, out
    assert "ingested 5 document(s) (1 stored, 4 unchanged), 1 failed, 1 removed" in out, out
    # a single file argument keeps its bare name
    assert cli([*sets, "ingest", str(root / "a" / "notes.txt"), "--owner", "bob", "--quiet"]) == 0
    assert "stored    bob/notes.txt  chunks=" in capsys.readouterr().out
