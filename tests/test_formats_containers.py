"""Containers of issue 13: .zip archives and .eml e-mails (``adiyan.ingest.containers``).

Archives and e-mails are built here with known words in every member. A zip bomb is stopped
from the central directory (member count, total size, compression ratio) and, when the central
directory lies about a size, while inflating; a member name that could escape is refused by
name. The e-mail's own text is its headers and body; its attachments are documents of their own.
"""

from __future__ import annotations

import io
import stat
import struct
import zipfile
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime

import pytest

from adiyan.config import IngestConfig
from adiyan.ingest import ParseError, parse_document
from adiyan.ingest.containers import RATIO_FLOOR, Member, expand, is_container
from tests.test_formats_office import docx_bytes
from tests.test_parse import assert_refused, build_pdf, text_pdf_objects, word_recall

LIMITS = IngestConfig()
MEMBER_TEXT = {
    "notes/alpha.txt": "Alpha notes mention the kookaburra colony at dawn",
    "notes/beta.md": "# Beta\n\nThe platypus survey counted nine burrows",
    "table.csv": "species;count\nwombat;14\nbilby;3\n",
}


def zip_of(members: dict, *, method=zipfile.ZIP_DEFLATED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", method) as archive:
        for name, data in members.items():
            info = name if isinstance(name, zipfile.ZipInfo) else zipfile.ZipInfo(name)
            info.compress_type = method
            archive.writestr(info, data.encode() if isinstance(data, str) else data)
    return out.getvalue()


def patch_headers(data: bytes, name: bytes, *, size: int | None = None, flags: int | None = None,
                  new_name: bytes | None = None) -> bytes:
    """Rewrite a member's local header and central-directory entry: declared size, flags, name bytes."""
    out = bytearray(data)
    for signature, size_at, flag_at, name_at in ((b"PK\x03\x04", 22, 6, 30), (b"PK\x01\x02", 24, 8, 46)):
        start = 0
        while (start := out.find(signature, start)) != -1:
            name_len = struct.unpack_from("<H", out, start + name_at - (4 if signature == b"PK\x03\x04" else 18))[0]
            if bytes(out[start + name_at:start + name_at + name_len]) == name:
                if size is not None:
                    struct.pack_into("<I", out, start + size_at, size)
                if flags is not None:
                    struct.pack_into("<H", out, start + flag_at, flags)
                if new_name is not None:
                    out[start + name_at:start + name_at + name_len] = new_name
            start += 4
    return bytes(out)


def assert_expand_refused(data: bytes, filename: str, code: str, match: str, **limits) -> ParseError:
    with pytest.raises(ParseError) as info:
        expand(data, filename, IngestConfig(**limits))
    error = info.value
    assert str(error).startswith(f"{filename}: ") and error.code == code, str(error)
    assert match in error.reason, error.reason
    return error


# ----------------------------------------------------------------------------- archives


def test_zip_members_are_documents_with_their_paths():
    data = zip_of({**MEMBER_TEXT, "notes/": "", "__MACOSX/notes/._alpha.txt": "junk", "notes/.DS_Store": "junk"})
    members = expand(data, "bundle.zip", LIMITS)
    assert [m.name for m in members] == ["notes/alpha.txt", "notes/beta.md", "table.csv"]
    for member in members:
        parsed = parse_document(member.data, member.name)  # a member's name is a valid document key
        assert word_recall(parsed.text, MEMBER_TEXT[member.name]) == 1.0, (member.name, parsed.text)


def test_stored_members_are_read_too():
    assert [m.data for m in expand(zip_of(MEMBER_TEXT, method=zipfile.ZIP_STORED), "s.zip", LIMITS)] == \
        [v.encode() for v in MEMBER_TEXT.values()]


def test_a_zip_is_a_container_and_parse_document_says_to_expand_it():
    data = zip_of(MEMBER_TEXT)
    assert is_container("bundle.zip", data) and is_container("mail.eml", b"From: a@b.c\n\nhi")
    assert not is_container("report.docx", docx_bytes(comments=False))
    assert_refused(data, "bundle.zip", "container", match=r"expand it \(adiyan.ingest.containers.expand\)")


def test_an_office_document_named_zip_is_not_an_archive():
    data = docx_bytes(comments=False)
    assert not is_container("report.zip", data)
    assert_refused(data, "report.zip", "content_mismatch", match="Office document")
    assert_expand_refused(data, "report.zip", "container", "Office document")


def test_broken_and_empty_archives_are_refused():
    assert_refused(b"just text", "bundle.zip", "not_a_zip")
    assert_expand_refused(b"PK\x03\x04" + b"\x00" * 100, "bundle.zip", "unreadable_archive", "not a readable zip")
    assert_expand_refused(zip_of({"empty/": ""}), "bundle.zip", "empty_archive", "holds no files")


@pytest.mark.parametrize("name", ["../evil.txt", "docs/../../evil.txt", "/etc/evil.txt", "C:/evil.txt",
                                  "docs\\evil.txt", "docs/./evil.txt", "docs//evil.txt"])
def test_member_names_that_escape_are_refused_by_name(name):
    error = assert_expand_refused(zip_of({"fine.txt": "ok", name: "payload"}), "bundle.zip", "unsafe_member",
                                  f"member {name!r} refused")
    print(error)


def test_a_member_name_with_a_nul_is_refused_though_zipfile_would_cut_it():
    data = patch_headers(zip_of({"fine.txt": "ok", "evilX.txt": "payload"}), b"evilX.txt", new_name=b"evil\x00.txt")
    assert zipfile.ZipFile(io.BytesIO(data)).namelist() == ["fine.txt", "evil"]  # what zipfile would have used
    assert_expand_refused(data, "bundle.zip", "unsafe_member", "NUL byte")


def test_duplicate_encrypted_and_symlink_members_are_refused_by_name():
    with pytest.warns(UserWarning, match="Duplicate name"):
        twice = zip_of({"a.txt": "one", zipfile.ZipInfo("a.txt"): "two"})
    assert_expand_refused(twice, "bundle.zip", "unsafe_member", "member 'a.txt' appears twice")
    locked = patch_headers(zip_of({"a.txt": "secret"}), b"a.txt", flags=0x1)
    assert_expand_refused(locked, "bundle.zip", "unreadable_archive", "member 'a.txt' is encrypted")
    link = zipfile.ZipInfo("passwd.txt")
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    assert_expand_refused(zip_of({link: "/etc/passwd"}), "bundle.zip", "unsafe_member", "symbolic link")


def test_too_many_members_are_refused_before_inflating():
    assert_expand_refused(zip_of({f"{i}.txt": "x" for i in range(4)}), "bundle.zip", "archive_limit",
                          "more than 3 members in all (ingest.archive_max_members)", archive_max_members=3)
    assert len(expand(zip_of({f"{i}.txt": "x" for i in range(3)}), "bundle.zip", IngestConfig(archive_max_members=3))) == 3


def test_total_uncompressed_size_is_capped():
    members = {"a.txt": "a" * 600, "b.txt": "b" * 600}
    assert_expand_refused(zip_of(members), "bundle.zip", "archive_limit",
                          "more than 1,000 bytes (ingest.archive_max_total_bytes); the headers declare 1,200",
                          archive_max_total_bytes=1000)
    assert len(expand(zip_of(members), "bundle.zip", IngestConfig(archive_max_total_bytes=1200))) == 2


def test_a_zip_bomb_member_is_refused_by_its_compression_ratio():
    bomb = zip_of({"readme.txt": "fine", "zeros.txt": b"\x00" * (4 * RATIO_FLOOR)})
    info = zipfile.ZipFile(io.BytesIO(bomb)).getinfo("zeros.txt")
    print(f"ratio {info.file_size / info.compress_size:.0f}")  # deflate tops out near 1,030
    assert_expand_refused(bomb, "bundle.zip", "archive_limit", "member 'zeros.txt' declares a compression ratio of")
    # Under the floor a file may compress arbitrarily well: 1 MiB of zeros passes.
    assert len(expand(zip_of({"z.txt": b"\x00" * RATIO_FLOOR}), "b.zip", LIMITS)[0].data) == RATIO_FLOOR


def test_a_central_directory_that_lies_about_a_size_is_caught_while_inflating():
    """The headers say 100 bytes (so every central-directory check passes); the data inflates to 8 MiB."""
    honest = zip_of({"readme.txt": "fine", "bomb.txt": b"\x00" * (8 << 20)})
    lying = patch_headers(honest, b"bomb.txt", size=100)
    assert zipfile.ZipFile(io.BytesIO(lying)).getinfo("bomb.txt").file_size == 100
    assert_expand_refused(lying, "bundle.zip", "archive_limit",
                          "member 'bomb.txt' inflates beyond the 100 bytes its header declares")
    # A header claiming more than the data holds is caught as corrupt, not padded.
    short = patch_headers(zip_of({"a.txt": "short text"}), b"a.txt", size=5000)
    assert_expand_refused(short, "bundle.zip", "unreadable_archive", "member 'a.txt' is corrupt")


def test_one_level_of_nesting_is_expanded_and_counted_against_the_same_limits():
    inner = zip_of({"deep/alpha.txt": MEMBER_TEXT["notes/alpha.txt"]})
    outer = zip_of({"inner.zip": inner, "top.txt": "Top level text about echidnas", "mail.eml": email_bytes()})
    members = expand(outer, "outer.zip", LIMITS)
    assert [m.name for m in members] == ["inner.zip/deep/alpha.txt", "top.txt", "mail.eml",
                                         "mail.eml/field-notes.txt", "mail.eml/counts.csv", "mail.eml/report.pdf",
                                         "mail.eml/Forwarded survey.eml"]
    assert members[0].data == MEMBER_TEXT["notes/alpha.txt"].encode()
    # outer 3 + inner 1 + mail 4 + forwarded 0 = 8 members counted
    assert_expand_refused(outer, "outer.zip", "archive_limit", "more than 7 members", archive_max_members=7)
    assert len(expand(outer, "outer.zip", IngestConfig(archive_max_members=8))) == 7


def test_an_archive_two_levels_down_is_refused_by_name():
    deepest = zip_of({"x.txt": "too deep"})
    outer = zip_of({"inner.zip": zip_of({"deeper.zip": deepest}), "ok.txt": "fine"})
    assert_expand_refused(outer, "outer.zip", "nested_archive",
                          "member 'inner.zip/deeper.zip' is an archive inside an archive inside an archive")
    # Through e-mails too: outer.zip > mail.eml > Forwarded survey.eml > more.zip > deeper.zip.
    via_mail = zip_of({"mail.eml": email_bytes(forward_zip=zip_of({"deeper.zip": deepest}))})
    assert_expand_refused(via_mail, "outer.zip", "nested_archive", "'mail.eml/Forwarded survey.eml/more.zip/deeper.zip'")
    one_level = expand(zip_of({"mail.eml": email_bytes(forward_zip=deepest)}), "outer.zip", LIMITS)
    assert one_level[-1] == Member("mail.eml/Forwarded survey.eml/more.zip/x.txt", b"too deep")


# ----------------------------------------------------------------------------- e-mail

BODY_PLAIN = "Dear team, the numbat census found twenty-three adults near Dryandra. Regards, Élodie"
ATTACHED_TEXT = "Field notes: quoll tracks beside the creek"


def email_bytes(*, html_only: bool = False, body: bool = True, forward_zip: bytes | None = None) -> bytes:
    """An e-mail with four attachments: a text file, a CSV, a PDF and a forwarded message
    (which carries ``forward_zip`` as ``more.zip`` when given)."""
    message = EmailMessage()
    message["From"] = "Élodie Martin <elodie@example.org>"
    message["To"] = "Survey Team <team@example.org>"
    message["Cc"] = "archive@example.org"
    message["Date"] = format_datetime(datetime(2024, 3, 5, 9, 30, tzinfo=UTC))
    message["Subject"] = "Numbat census résultats"
    if body and html_only:
        message.set_content(f"<html><body><p>{BODY_PLAIN}</p></body></html>", subtype="html", charset="utf-8")
    elif body:
        message.set_content(BODY_PLAIN, charset="iso-8859-1", cte="quoted-printable")
        message.add_alternative(f"<p>{BODY_PLAIN} htmlonlyword</p>", subtype="html")
    message.add_attachment(ATTACHED_TEXT.encode(), maintype="text", subtype="plain", filename="field-notes.txt")
    message.add_attachment(b"site;adults\nDryandra;23\n", maintype="text", subtype="csv", filename="counts.csv")
    message.add_attachment(build_pdf(text_pdf_objects(b"Census report PDF")), maintype="application",
                           subtype="pdf", filename="report.pdf")
    forwarded = EmailMessage()
    forwarded["From"] = "ranger@example.org"
    forwarded["Subject"] = "Forwarded survey"
    forwarded.set_content("The forwarded message mentions a chuditch.")
    if forward_zip is not None:
        forwarded.add_attachment(forward_zip, maintype="application", subtype="zip", filename="more.zip")
    message.add_attachment(forwarded)
    return message.as_bytes()


def test_email_text_is_headers_and_body_without_the_attachments():
    parsed = parse_document(email_bytes(), "census.eml")
    print(parsed.text)
    assert word_recall(parsed.text, "From Élodie Martin elodie example org To Survey Team Cc archive Subject "
                       "Numbat census résultats Date 2024 " + BODY_PLAIN) == 1.0
    assert parsed.text.startswith("From: Élodie Martin <elodie@example.org>\nTo: Survey Team <team@example.org>")
    assert "Attachments: field-notes.txt, counts.csv, report.pdf, Forwarded survey.eml" in parsed.text
    assert "htmlonlyword" not in parsed.text  # text/plain is preferred over the HTML alternative
    assert "quoll" not in parsed.text and "Census report" not in parsed.text  # attachments are their own documents
    report = parsed.report
    assert [(u.kind, u.tier) for u in report.units] == [("document", "email")]
    assert (report.encoding, report.encoding_source) == ("iso8859-1", "mime")


def test_html_only_email_body_is_converted_by_docling():
    parsed = parse_document(email_bytes(html_only=True), "census.eml")
    assert word_recall(parsed.text, BODY_PLAIN) == 1.0 and "<p>" not in parsed.text
    assert [u.tier for u in parsed.report.units] == ["docling"]


def test_email_attachments_come_out_as_members_that_parse():
    members = expand(email_bytes(), "census.eml", LIMITS)
    assert [m.name for m in members] == ["field-notes.txt", "counts.csv", "report.pdf", "Forwarded survey.eml"]
    texts = {m.name: parse_document(m.data, m.name).text for m in members}
    assert word_recall(texts["field-notes.txt"], ATTACHED_TEXT) == 1.0
    assert "Dryandra" in texts["counts.csv"] and texts["report.pdf"] == "Census report PDF"
    assert "chuditch" in texts["Forwarded survey.eml"] and "Subject: Forwarded survey" in texts["Forwarded survey.eml"]


def test_inline_images_of_an_html_body_are_not_attachments():
    message = EmailMessage()
    message["From"], message["Subject"] = "a@example.org", "Logo"
    message.set_content("Plain body about bandicoots")
    message.add_alternative('<p>HTML body <img src="cid:logo"></p>', subtype="html")
    html_part = message.get_payload()[1]
    html_part.add_related(b"\x89PNG\r\n\x1a\nfake", maintype="image", subtype="png", cid="<logo>", filename="logo.png")
    html_part.add_related(b"GIF89a", maintype="image", subtype="gif", cid="<line>", filename="line.gif",
                          disposition="inline")
    message.add_attachment(b"real attachment", maintype="text", subtype="plain", filename="real.txt")
    assert [m.name for m in expand(message.as_bytes(), "logo.eml", LIMITS)] == ["real.txt"]


def test_duplicate_attachment_names_are_made_unique_and_unsafe_ones_refused():
    message = EmailMessage()
    message["From"], message["Subject"] = "a@example.org", "Twice"
    message.set_content("body")
    for text in ("first", "second"):
        message.add_attachment(text.encode(), maintype="text", subtype="plain", filename="notes.txt")
    assert [(m.name, m.data) for m in expand(message.as_bytes(), "twice.eml", LIMITS)] == \
        [("notes.txt", b"first"), ("notes (2).txt", b"second")]
    message.add_attachment(b"x", maintype="text", subtype="plain", filename="../../etc/passwd.txt")
    assert_expand_refused(message.as_bytes(), "twice.eml", "unsafe_member", "member '../../etc/passwd.txt' refused")


def test_email_without_a_body_keeps_its_headers_and_says_so():
    parsed = parse_document(email_bytes(body=False), "bare.eml")
    assert parsed.text.startswith("From: ") and "Subject: Numbat census résultats" in parsed.text
    assert [w.code for w in parsed.report.warnings] == ["no_body"]


def test_email_saved_as_utf16_is_read():
    text = email_bytes().decode("ascii")
    parsed = parse_document(text.encode("utf-16-le"), "wide.eml")  # no byte-order mark, as real ones come
    assert word_recall(parsed.text, BODY_PLAIN) == 1.0


def test_text_that_is_not_an_email_is_refused():
    assert_refused(b"just a note, no headers at all", "note.eml", "unreadable_document", match="not an e-mail")


def test_members_are_frozen_values():
    member = Member("a.txt", b"x")
    with pytest.raises(AttributeError):
        member.name = "b.txt"
