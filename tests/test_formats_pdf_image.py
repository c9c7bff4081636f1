"""Encrypted PDFs and the image formats of issue 13 (BMP, TIFF, WEBP) and issue 23 (HEIC/HEIF).

The PDFs are encrypted here with the standard security handler's RC4 algorithms (PDF 32000-1
§7.6.3: revision 2, 40-bit, and revision 3, 128-bit), an owner password always and a user
password or not. The page's text is inside the encrypted content stream, so reading it back
proves the file was decrypted, not merely accepted. Real-world check done once by hand:
Unstructured's example-docs/pdf/copy-protected.pdf (revision 4, AES) opens, password.pdf
(revision 3, a user password) is refused.
"""

from __future__ import annotations

import hashlib
import io
import re
import struct

import pytest

from adiyan.ingest import ParseError, parse_document
from adiyan.ingest.docling_convert import _convert
from adiyan.ingest.pdf_security import opens_without_password, read_security
from tests.test_parse import (
    assert_refused,
    build_pdf,
    image_bytes,
    render_text,
    text_pdf_objects,
    word_recall,
)

PAD = bytes.fromhex("28BF4E5E4E758A4164004E56FFFA01082E2E00B6D0683E802F0CA9FE6453697A")
SECRET_TEXT = b"Quokka ledger 4711 Rottnest"
FILE_ID = b"\x33" * 16
NO_PRINT_NO_COPY = -3904  # P: bits 3 (print), 4 (modify), 5 (copy) and 6 (annotate) cleared


def rc4(key: bytes, data: bytes) -> bytes:
    s, j = list(range(256)), 0
    for i in range(256):
        j = (j + s[i] + key[i % len(key)]) % 256
        s[i], s[j] = s[j], s[i]
    out, i, j = bytearray(), 0, 0
    for byte in data:
        i = (i + 1) % 256
        j = (j + s[i]) % 256
        s[i], s[j] = s[j], s[i]
        out.append(byte ^ s[(s[i] + s[j]) % 256])
    return bytes(out)


def encrypted_pdf(user: bytes, revision: int, owner: bytes = b"owner-secret", permissions: int = NO_PRINT_NO_COPY) -> bytes:
    """test_parse's one-page PDF with its content stream RC4-encrypted (algorithms 2, 3, 4/5 of the spec)."""
    n = 5 if revision == 2 else 16

    def pad(password: bytes) -> bytes:
        return (password + PAD)[:32]

    digest = hashlib.md5(pad(owner)).digest()
    for _ in range(50 if revision >= 3 else 0):
        digest = hashlib.md5(digest[:n]).digest()
    owner_entry = rc4(digest[:n], pad(user))
    for i in range(1, 20 if revision >= 3 else 1):
        owner_entry = rc4(bytes(b ^ i for b in digest[:n]), owner_entry)
    key = hashlib.md5(pad(user) + owner_entry + struct.pack("<i", permissions) + FILE_ID).digest()
    for _ in range(50 if revision >= 3 else 0):
        key = hashlib.md5(key[:n]).digest()
    key = key[:n]
    if revision == 2:
        user_entry = rc4(key, PAD)
    else:
        user_entry = rc4(key, hashlib.md5(PAD + FILE_ID).digest())
        for i in range(1, 20):
            user_entry = rc4(bytes(b ^ i for b in key), user_entry)
        user_entry += b"\x00" * 16
    objects = text_pdf_objects(SECRET_TEXT)
    stream = re.match(rb"<< /Length \d+ >>\nstream\n(.*)\nendstream", objects[3], re.S).group(1)
    object_key = hashlib.md5(key + struct.pack("<i", 4)[:3] + b"\x00\x00").digest()[:min(n + 5, 16)]
    sealed = rc4(object_key, stream)
    objects[3] = b"<< /Length %d >>\nstream\n%s\nendstream" % (len(sealed), sealed)
    version, bits = (1, 40) if revision == 2 else (2, 128)
    objects.append(b"<< /Filter /Standard /V %d /R %d /Length %d /O <%s> /U <%s> /P %d >>"
                   % (version, revision, bits, owner_entry.hex().encode(), user_entry.hex().encode(), permissions))
    file_id = b"<%s>" % FILE_ID.hex().encode()
    return build_pdf(objects, b"/Encrypt 6 0 R /ID [%s %s] " % (file_id, file_id))


@pytest.mark.parametrize("revision", [2, 3])
def test_a_pdf_with_only_an_owner_password_is_read(revision):
    data = encrypted_pdf(user=b"", revision=revision)
    assert SECRET_TEXT not in data  # the text is only readable after decryption
    parsed = parse_document(data, "protected.pdf")
    assert parsed.text == SECRET_TEXT.decode()
    assert [u.tier for u in parsed.report.units] == ["docling"]
    warning, = parsed.report.warnings
    assert warning.code == "copy_protected"
    assert "restricts printing, copying text" in warning.message


@pytest.mark.parametrize("revision", [2, 3])
def test_a_pdf_that_needs_a_user_password_is_refused(revision):
    data = encrypted_pdf(user=b"secret", revision=revision)
    assert opens_without_password(read_security(data)) is False
    assert_refused(data, "locked.pdf", "encrypted_pdf", match="needs a password to open")


def test_the_password_check_agrees_with_docling_on_both_kinds():
    """Our check says "opens" exactly when Docling (qpdf) can read the page: the spec is followed, not guessed."""
    for revision in (2, 3):
        for user in (b"", b"secret"):
            data = encrypted_pdf(user=user, revision=revision)
            try:
                _convert(data, ".pdf", "x.pdf", "unreadable_pdf")
                docling_reads = True
            except ParseError:
                docling_reads = False
            security = read_security(data)
            assert (security.revision, security.filter) == (revision, "Standard")
            assert opens_without_password(security) is docling_reads is (user == b"")


def test_an_encryption_our_check_cannot_verify_is_left_to_docling_and_refused_if_it_fails():
    """Revision 6 (AES-256) hashes with AES, which the standard library lacks: Docling decides."""
    junk = "aa" * 48
    objects = text_pdf_objects(b"never readable") + [
        b"<< /Filter /Standard /V 5 /R 6 /Length 256 /O <%s> /U <%s> /OE <%s> /UE <%s> /Perms <%s> /P -4 >>"
        % (junk.encode(), junk.encode(), b"bb" * 32, b"cc" * 32, b"dd" * 16)]
    data = build_pdf(objects, b"/Encrypt 6 0 R /ID [<%s> <%s>] " % (b"33" * 16, b"33" * 16))
    assert opens_without_password(read_security(data)) is None
    assert_refused(data, "aes.pdf", "encrypted_pdf", match=r"revision 6 of the Standard handler\) that could not be "
                   "opened without a password")


def test_literal_string_entries_are_read_like_hex_ones():
    data = encrypted_pdf(user=b"", revision=3)
    security = read_security(data)
    literal = data.replace(b"/O <%s>" % security.owner.hex().encode(),
                           b"/O (%s)" % re.sub(rb"([()\\])", rb"\\\1", security.owner))
    assert literal != data and read_security(literal).owner == security.owner
    assert parse_document(literal, "literal.pdf").text == SECRET_TEXT.decode()


# ----------------------------------------------------------------------------- images

WORDS = "INVOICE TOTAL 4711 EUROS"


@pytest.mark.parametrize(("filename", "fmt", "options"), [
    ("scan.bmp", "BMP", {}), ("scan.tif", "TIFF", {"compression": "tiff_lzw"}), ("scan.webp", "WEBP", {"lossless": True}),
    ("photo.webp", "WEBP", {"quality": 60}), ("scan.png", "PNG", {}), ("photo.jpg", "JPEG", {"quality": 70}),
])
def test_images_are_read_by_ocr(filename, fmt, options):
    parsed = parse_document(image_bytes(render_text(WORDS), fmt, **options), filename)
    recall = word_recall(parsed.text, WORDS)
    print(f"{filename}: {parsed.text!r} recall {recall:.2f}")
    assert recall == 1.0
    assert [(u.kind, u.tier) for u in parsed.report.units] == [("image", "ocr:rapidocr")]


@pytest.mark.parametrize(("filename", "data", "found"), [
    ("scan.bmp", image_bytes(render_text("x"), "PNG"), "PNG"),
    ("scan.webp", image_bytes(render_text("x"), "JPEG"), "JPEG"),
    ("scan.webp", b"RIFF\x00\x00\x00\x00WAVEfmt ", "WEBP signature"),
])
def test_image_content_must_match_its_extension(filename, data, found):
    assert_refused(data, filename, "content_mismatch", match=found)


def test_gif_is_not_an_accepted_type():
    """Animated GIFs would OCR every frame; not asked for, so refused by name rather than half-supported."""
    assert_refused(image_bytes(render_text("x"), "GIF"), "anim.gif", "unsupported_extension", match="supported: ")


# ----------------------------------------------------------------------------- HEIC / HEIF (issue 23)


def heic_bytes(image, **options) -> bytes:
    """HEIC as an iPhone saves it: HEVC in an ISO base media file (pillow-heif's libheif + x265 encoder)."""
    from pillow_heif import from_pillow  # test-only: the encoder ships in the same wheel as the decoder

    out = io.BytesIO()
    from_pillow(image).save(out, format="HEIF", **options)
    return out.getvalue()


@pytest.mark.parametrize(("filename", "options"), [("IMG_0001.HEIC", {"quality": 80}), ("scan.heif", {"quality": -1})])
def test_heic_photos_are_read_by_ocr(filename, options):
    data = heic_bytes(render_text(WORDS), **options)
    assert data[4:12] == b"ftypheic"
    parsed = parse_document(data, filename)
    recall = word_recall(parsed.text, WORDS)
    print(f"{filename}: {len(data)} bytes, {parsed.text!r} recall {recall:.2f}")
    assert recall == 1.0
    assert parsed.report.format == "image"
    assert [(u.kind, u.tier) for u in parsed.report.units] == [("image", "ocr:rapidocr")]


def test_heic_content_must_be_heif():
    mp4 = b"\x00\x00\x00\x18ftypmp42\x00\x00\x00\x00mp42isom" + b"\x00" * 64
    assert_refused(mp4, "clip.heic", "content_mismatch", match="ISO media \\(MP4 or QuickTime video\\)")
    assert_refused(image_bytes(render_text("x"), "JPEG"), "photo.heic", "content_mismatch", match="JPEG")
    assert_refused(b"\x00\x00\x00\x18ftypheic" + b"\x00" * 64, "broken.heic", "unreadable_image")
