"""Does an encrypted PDF open without a password? (PDF 32000-1 §7.6.3, ISO 32000-2 §7.6.4)

A PDF with only an owner password (printing or copying restricted) has an empty *user*
password: every viewer opens it, and so does Docling (docling-parse decrypts with qpdf). Only a
PDF whose user password is not empty needs a password to be read. For the standard security
handler's revisions 2-5 the check is the spec's own: compute the /U entry from the empty
password and compare (MD5 and RC4, or SHA-256 for revision 5). Revision 6 (AES-256) hashes with
AES rounds, which the standard library lacks: it answers "unknown", and the caller lets Docling
try and words a failure as "needs a password or is damaged".
"""

from __future__ import annotations

import hashlib
import re
import struct
from dataclasses import dataclass

_PAD = bytes.fromhex("28BF4E5E4E758A4164004E56FFFA01082E2E00B6D0683E802F0CA9FE6453697A")
_ENCRYPT_REF = re.compile(rb"/Encrypt\s*(\d+)\s+(\d+)\s+R")
_ENCRYPT_INLINE = re.compile(rb"/Encrypt\s*(?=<<)")
_ID = re.compile(rb"/ID\s*\[\s*")


@dataclass(frozen=True)
class Security:
    """The entries of an encryption dictionary that decide whether the empty password opens it."""

    filter: str
    revision: int
    key_bits: int
    owner: bytes  # /O
    user: bytes  # /U
    permissions: int  # /P, as a signed 32-bit integer
    file_id: bytes  # first element of the trailer's /ID
    encrypt_metadata: bool

    def restrictions(self) -> list[str]:
        """What the owner forbade (PDF permission bits 3, 5, 6, 4), in words."""
        bits = {3: "printing", 5: "copying text", 6: "annotating", 4: "editing"}
        return [what for bit, what in bits.items() if not self.permissions & (1 << (bit - 1))]


def is_encrypted(data: bytes) -> bool:
    return bool(_ENCRYPT_REF.search(data) or _ENCRYPT_INLINE.search(data))


def read_security(data: bytes) -> Security | None:
    """The last trailer's encryption dictionary, or None when there is none or it cannot be read."""
    refs = list(_ENCRYPT_REF.finditer(data))
    if refs:
        number, generation = refs[-1].group(1), refs[-1].group(2)
        obj = list(re.finditer(rb"(?<!\d)" + number + rb"\s+" + generation + rb"\s+obj\s*(?=<<)", data))
        if not obj:
            return None
        body = _dictionary(data, obj[-1].end())
    else:
        inline = list(_ENCRYPT_INLINE.finditer(data))
        if not inline:
            return None
        body = _dictionary(data, inline[-1].end())
    ids = list(_ID.finditer(data))
    if body is None:
        return None
    try:
        file_id = _string(data, ids[-1].end())[0] if ids else b""
        return Security(
            filter=_name(body, b"Filter") or "",
            revision=int(_number(body, b"R") or 0),
            key_bits=int(_number(body, b"Length") or 40),
            owner=_string(body, _value_at(body, b"O"))[0],
            user=_string(body, _value_at(body, b"U"))[0],
            permissions=struct.unpack("<i", struct.pack("<I", int(_number(body, b"P") or 0) & 0xFFFFFFFF))[0],
            file_id=file_id,
            encrypt_metadata=re.search(rb"/EncryptMetadata\s+false", body) is None)
    except (ValueError, IndexError, TypeError):
        return None


def opens_without_password(security: Security) -> bool | None:
    """True when the empty user password authenticates, False when it does not, None when unknown."""
    if security.filter != "Standard":
        return None  # a public-key or third-party handler: only its software can tell
    r = security.revision
    if r in (2, 3, 4):
        n = 5 if r == 2 else max(5, min(16, security.key_bits // 8))
        h = hashlib.md5(_PAD + security.owner[:32] + struct.pack("<i", security.permissions) + security.file_id)
        if r >= 4 and not security.encrypt_metadata:
            h.update(b"\xff\xff\xff\xff")
        key = h.digest()
        if r >= 3:
            for _ in range(50):
                key = hashlib.md5(key[:n]).digest()
        key = key[:n]
        if r == 2:
            return _rc4(key, _PAD) == security.user[:32]
        check = _rc4(key, hashlib.md5(_PAD + security.file_id).digest())
        for i in range(1, 20):
            check = _rc4(bytes(b ^ i for b in key), check)
        return check == security.user[:16]
    if r == 5:  # Adobe's extension level 3: SHA-256 of the password and the validation salt
        return hashlib.sha256(security.user[32:40]).digest() == security.user[:32]
    return None


def _rc4(key: bytes, data: bytes) -> bytes:
    s = list(range(256))
    j = 0
    for i in range(256):
        j = (j + s[i] + key[i % len(key)]) % 256
        s[i], s[j] = s[j], s[i]
    out = bytearray()
    i = j = 0
    for byte in data:
        i = (i + 1) % 256
        j = (j + s[i]) % 256
        s[i], s[j] = s[j], s[i]
        out.append(byte ^ s[(s[i] + s[j]) % 256])
    return bytes(out)


def _dictionary(data: bytes, start: int) -> bytes | None:
    """The ``<< ... >>`` starting at ``start``, nested dictionaries and strings included."""
    depth, i, end = 0, start, min(len(data), start + 65536)
    while i < end:
        if data.startswith(b"<<", i):
            depth, i = depth + 1, i + 2
        elif data.startswith(b">>", i):
            depth, i = depth - 1, i + 2
            if depth == 0:
                return data[start:i]
        elif data[i:i + 1] == b"(":
            i = _string(data, i)[1]
        elif data[i:i + 1] == b"<":
            i = data.index(b">", i) + 1
        else:
            i += 1
    return None


def _value_at(body: bytes, key: bytes) -> int:
    found = re.search(rb"/" + key + rb"(?![A-Za-z0-9])\s*", body)
    if found is None:
        raise ValueError(f"no /{key.decode()}")
    return found.end()


def _number(body: bytes, key: bytes) -> str | None:
    found = re.search(rb"/" + key + rb"(?![A-Za-z0-9])\s*(-?\d+)", body)
    return found.group(1).decode() if found else None


def _name(body: bytes, key: bytes) -> str | None:
    found = re.search(rb"/" + key + rb"(?![A-Za-z0-9])\s*/([A-Za-z0-9.+_-]+)", body)
    return found.group(1).decode() if found else None


_ESCAPES = {ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t", ord("b"): b"\b", ord("f"): b"\f"}


def _string(data: bytes, i: int) -> tuple[bytes, int]:
    """A PDF string (literal ``(...)`` or hex ``<...>``) at ``i``: its bytes and the index after it."""
    if data[i:i + 1] == b"<":
        end = data.index(b">", i)
        digits = re.sub(rb"\s", b"", data[i + 1:end])
        return bytes.fromhex((digits + b"0" * (len(digits) % 2)).decode("ascii")), end + 1
    if data[i:i + 1] != b"(":
        raise ValueError("not a string")
    out, depth, i = bytearray(), 1, i + 1
    while depth:
        c = data[i]
        if c == 0x5C:  # backslash
            nxt = data[i + 1]
            if nxt in _ESCAPES:
                out += _ESCAPES[nxt]
                i += 2
            elif 0x30 <= nxt <= 0x37:
                digits = re.match(rb"[0-7]{1,3}", data[i + 1:i + 4]).group()
                out.append(int(digits, 8) & 0xFF)
                i += 1 + len(digits)
            elif nxt in (0x0D, 0x0A):  # a line continuation
                i += 3 if data[i + 1:i + 3] == b"\r\n" else 2
            else:
                out.append(nxt)
                i += 2
            continue
        depth += {0x28: 1, 0x29: -1}.get(c, 0)
        if depth:
            out.append(c)
        i += 1
    return bytes(out), i
