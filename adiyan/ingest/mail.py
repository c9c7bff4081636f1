"""E-mail (``.eml``, RFC 5322 / MIME) with the standard library's ``email`` package.

The document is the headers a reader searches by (From, To, Cc, Date, Subject), the names of
the attachments, and the text body: text/plain when the message has one, else text/html
converted by Docling. Attachments are not part of that text; ``attachments`` returns them for
``containers.expand``, so each is ingested as its own document. An attachment is a part whose
Content-Disposition says so, an attached message, or a named part outside a multipart/related
(Apple Mail sends attachments "inline"); parts of a multipart/related with a Content-ID are what
the HTML body shows inline (signature logos) and are not attachments.
"""

from __future__ import annotations

import codecs
import html
import mimetypes
import re
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from pathlib import PurePosixPath

from .docling_convert import TIER as DOCLING, flow_document_to_markdown
from .report import ExtractionReport, ParseError
from .textcodec import decode_text

HEADERS = ("From", "To", "Cc", "Date", "Subject")
TIER = "email"
_WIDE_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE, codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)


def read_message(data: bytes, filename: str) -> EmailMessage:
    """The parsed message; ParseError when it has none of the headers an e-mail has."""
    if data.startswith(_WIDE_BOMS) or b"\x00" in data[:200]:  # saved as UTF-16 text; MIME itself is ASCII-based
        data = decode_text(data, filename).text.encode("utf-8")
    message = BytesParser(policy=policy.default).parsebytes(data)
    if not any(message.get(h) for h in ("From", "To", "Subject", "Date", "Message-ID")):
        raise ParseError(filename, "unreadable_document", "not an e-mail: it has no From, To, Subject, Date or "
                         "Message-ID header")
    return message


def email_to_markdown(data: bytes, filename: str, report: ExtractionReport) -> str:
    """Headers, an ``Attachments:`` line when there are any, a blank line, the body; one unit."""
    message = read_message(data, filename)
    lines = [f"{h}: {value}" for h in HEADERS if (value := _header(message, h))]
    names = [name for name, _ in attachments(message)]
    if names:
        lines.append("Attachments: " + ", ".join(names))
    body, tier = _body(message, filename, report)
    if not body:
        report.warn("no_body", 1, f"{filename} has no text/plain or text/html body (encrypted, or attachments only)")
    text = "\n".join(lines) + ("\n\n" + body if body else "")
    report.add_unit(1, "document", tier, text, chars=len(text.strip()))
    return text


def _header(message: EmailMessage, name: str) -> str:
    try:
        value = str(message.get(name) or "")
    except Exception:  # noqa: BLE001 - a header the policy cannot parse: keep its raw text rather than lose it
        value = next((str(v) for k, v in message.raw_items() if k.lower() == name.lower()), "")
    return " ".join(value.split())


def _body(message: EmailMessage, filename: str, report: ExtractionReport) -> tuple[str, str]:
    part = message.get_body(preferencelist=("plain", "html"))
    if part is None:
        return "", TIER
    text = _part_text(part, filename, report)
    if part.get_content_subtype() != "html":
        return text.strip(), TIER
    scratch = ExtractionReport(filename, "html", DOCLING)
    try:
        converted = flow_document_to_markdown(("\ufeff" + text).encode("utf-8"), ".html", filename, scratch)
    except ParseError as exc:
        report.warn("docling_failed", None, f"{filename}: the HTML body: {exc.reason}; tags stripped instead")
        return _strip_tags(text), TIER
    report.warnings.extend(scratch.warnings)
    return converted, DOCLING


def _part_text(part: EmailMessage, filename: str, report: ExtractionReport) -> str:
    """The part's text in its declared charset, else detected; the report records which."""
    payload = part.get_payload(decode=True) or b""
    charset = part.get_content_charset()
    if charset:
        try:
            text = payload.decode(codecs.lookup(charset).name)
            report.decoded(codecs.lookup(charset).name, 1.0, "mime")
            return text
        except (LookupError, UnicodeDecodeError):
            pass  # a wrong or unknown declaration: detect instead, and say so in the report
    decoded = decode_text(payload, filename, html=part.get_content_subtype() == "html")
    report.decoded(decoded.encoding, decoded.confidence, decoded.source)
    return decoded.text


def _strip_tags(markup: str) -> str:
    markup = re.sub(r"(?is)<(script|style)\b.*?</\1>", " ", markup)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", markup)).split())


def attachments(message: EmailMessage) -> list[tuple[str, bytes]]:
    """(name, bytes) of every attachment, names made unique with `` (2)``; attached e-mails as .eml."""
    found: list[tuple[str, bytes]] = []
    _collect(message, found, related=False)
    seen: dict[str, int] = {}
    out = []
    for name, data in found:
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            path = PurePosixPath(name)
            name = f"{path.stem} ({seen[name]}){path.suffix}"
        out.append((name, data))
    return out


def _collect(part: EmailMessage, found: list, related: bool) -> None:
    if part.get_content_type() == "message/rfc822":
        inner = part.get_payload()[0]
        name = part.get_filename() or _subject_name(inner, len(found) + 1)
        found.append((name if name.lower().endswith(".eml") else name + ".eml", inner.as_bytes(policy=policy.default)))
        return
    if part.is_multipart():
        for sub in part.iter_parts():
            _collect(sub, found, related or part.get_content_subtype() == "related")
        return
    if related and part["Content-ID"]:
        return  # a picture the HTML body shows (cid:...), whatever its Content-Disposition says
    name = part.get_filename()
    if part.get_content_disposition() == "attachment" or (name and not related):
        if not name:
            name = f"attachment-{len(found) + 1}{mimetypes.guess_extension(part.get_content_type()) or '.bin'}"
        found.append((name, part.get_payload(decode=True) or b""))


def _subject_name(message: EmailMessage, number: int) -> str:
    subject = re.sub(r"[^\w\- ]+", "", _header(message, "Subject"))[:60].strip()
    return f"{subject or f'attached message {number}'}.eml"
