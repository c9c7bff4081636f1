"""EPUB 2 and 3 books: each document of the reading order (the OPF spine) is a chapter unit.

An EPUB is a zip: ``META-INF/container.xml`` names the package document (OPF), whose manifest
lists the files and whose spine gives the reading order. Each spine document (XHTML, or HTML in
old EPUB 2 files) is converted to Markdown by Docling's HTML backend, as an ``.html`` upload is,
and becomes one ``chapter`` unit titled by its table-of-contents entry (the EPUB 3 navigation
document, else the EPUB 2 NCX) or, failing that, its first heading. Chapters are joined by a
blank line and each unit records its length, so the knowledge base's book pages
(``adiyan/kb/pages.py``) split the text back into chapters exactly.

Refused, naming the reason: a zip that is not an EPUB (no ``META-INF/container.xml``, or no
package document where it points), a spine entry missing from the archive, DRM (spine documents
listed as encrypted in ``META-INF/encryption.xml``; font obfuscation is not DRM and is read), and
an archive that unpacks to more than ``UNPACKED_RATIO`` times the upload size limit.
Chapters with no text (a cover picture, a blank page) are units with the warning ``empty_chapter``.
"""

from __future__ import annotations

import io
import posixpath
import re
import zipfile
from urllib.parse import unquote, urldefrag

from lxml import etree

from .docling_convert import TIER, flow_markdown
from .report import ExtractionReport, ParseError
from .textcodec import decode_text

UNPACKED_RATIO = 10  # an EPUB may unpack to at most this many times the upload size limit
_HTML_TYPES = ("application/xhtml+xml", "text/html")
# Font obfuscation (IDPF, Adobe) scrambles fonts only; anything else listed in encryption.xml is DRM.
_FONT_OBFUSCATION = ("http://www.idpf.org/2008/embedding", "http://ns.adobe.com/pdf/enc#RC")
_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, recover=True)
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)


def _local(tag) -> str:
    return etree.QName(tag).localname if isinstance(tag, str) else ""


def _xml(package: zipfile.ZipFile, name: str, filename: str, what: str):
    try:
        return etree.fromstring(package.read(name), _PARSER)
    except KeyError as exc:
        raise ParseError(filename, "unreadable_epub", f"not a valid EPUB: {what} {name!r} is missing") from exc
    except etree.XMLSyntaxError as exc:
        raise ParseError(filename, "unreadable_epub", f"not a valid EPUB: {what} {name!r} is not XML ({exc})") from exc


def _resolve(base: str, href: str) -> str:
    path = unquote(urldefrag(href)[0])
    return posixpath.normpath(posixpath.join(posixpath.dirname(base), path)) if path else ""


def _toc_titles(package: zipfile.ZipFile, opf_name: str, manifest: dict, spine_toc: str | None,
                filename: str) -> dict[str, str]:
    """{archive path of a document: its first table-of-contents title}, from the EPUB 3 nav, else the NCX."""
    titles: dict[str, str] = {}
    nav = next((item for item in manifest.values() if "nav" in item["properties"]), None)
    if nav is not None and nav["path"] in package.namelist():
        root = _xml(package, nav["path"], filename, "the navigation document")
        for element in root.iter():
            if _local(element.tag) == "nav" and "toc" in (element.get("{http://www.idpf.org/2007/ops}type") or ""):
                for link in element.iter():
                    if _local(link.tag) == "a" and link.get("href"):
                        text = " ".join("".join(link.itertext()).split())
                        titles.setdefault(_resolve(nav["path"], link.get("href")), text)
    ncx = manifest.get(spine_toc) if spine_toc else None
    if not titles and ncx is not None and ncx["path"] in package.namelist():
        root = _xml(package, ncx["path"], filename, "the NCX table of contents")
        for point in root.iter():
            if _local(point.tag) != "navPoint":
                continue
            label = next((el for el in point.iter() if _local(el.tag) == "text"), None)
            content = next((el for el in point if _local(el.tag) == "content"), None)
            if label is not None and content is not None and content.get("src"):
                titles.setdefault(_resolve(ncx["path"], content.get("src")), " ".join("".join(label.itertext()).split()))
    return {k: v for k, v in titles.items() if v}


def _check_size(package: zipfile.ZipFile, filename: str, max_bytes: int) -> None:
    unpacked = sum(info.file_size for info in package.infolist())
    if unpacked > UNPACKED_RATIO * max_bytes:
        raise ParseError(filename, "archive_limit", f"the EPUB unpacks to {unpacked} bytes, over {UNPACKED_RATIO} "
                         f"times the size limit of {max_bytes}")


def _encrypted(package: zipfile.ZipFile, filename: str) -> set[str]:
    if "META-INF/encryption.xml" not in package.namelist():
        return set()
    root = _xml(package, "META-INF/encryption.xml", filename, "the encryption list")
    out = set()
    for data in root.iter():
        if _local(data.tag) != "EncryptedData":
            continue
        method = next((el.get("Algorithm") for el in data.iter() if _local(el.tag) == "EncryptionMethod"), None)
        ref = next((el.get("URI") for el in data.iter() if _local(el.tag) == "CipherReference"), None)
        if ref and method not in _FONT_OBFUSCATION:
            out.add(posixpath.normpath(unquote(ref)))
    return out


def epub_to_markdown(data: bytes, filename: str, report: ExtractionReport, max_bytes: int) -> str:
    try:
        package = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as exc:
        raise ParseError(filename, "not_a_zip", f"not a valid .epub (corrupt zip: {exc})") from exc
    with package:
        _check_size(package, filename, max_bytes)
        if "META-INF/container.xml" not in package.namelist():
            raise ParseError(filename, "unreadable_epub", "not an EPUB: the zip has no META-INF/container.xml")
        container = _xml(package, "META-INF/container.xml", filename, "the container")
        rootfile = next((el.get("full-path") for el in container.iter() if _local(el.tag) == "rootfile"), None)
        if not rootfile:
            raise ParseError(filename, "unreadable_epub", "not a valid EPUB: META-INF/container.xml names no package document")
        opf = _xml(package, rootfile, filename, "the package document")
        manifest = {}
        for item in opf.iter():
            if _local(item.tag) == "item" and item.get("id") and item.get("href"):
                manifest[item.get("id")] = {"path": _resolve(rootfile, item.get("href")),
                                            "type": item.get("media-type", ""),
                                            "properties": (item.get("properties") or "").split()}
        spine = next((el for el in opf.iter() if _local(el.tag) == "spine"), None)
        if spine is None:
            raise ParseError(filename, "unreadable_epub", f"not a valid EPUB: {rootfile} has no spine (reading order)")
        order = [manifest.get(ref.get("idref")) for ref in spine if _local(ref.tag) == "itemref"]
        documents = [item for item in order if item is not None and item["type"] in _HTML_TYPES]
        locked = _encrypted(package, filename) & {d["path"] for d in documents}
        if locked:
            raise ParseError(filename, "encrypted_epub", f"the EPUB is DRM-protected: {len(locked)} of its "
                             f"{len(documents)} chapters are encrypted (META-INF/encryption.xml); remove the DRM "
                             "with the tool it was bought with, or export the book without it")
        titles = _toc_titles(package, rootfile, manifest, spine.get("toc"), filename)
        texts = []
        for number, item in enumerate(documents, start=1):
            try:
                raw = package.read(item["path"])
            except KeyError as exc:
                raise ParseError(filename, "unreadable_epub", f"not a valid EPUB: chapter {number} "
                                 f"({item['path']}) is in the spine but not in the archive") from exc
            where = f"{filename} ({item['path']})"
            # Re-encoded as UTF-8 behind a BOM, which outranks any charset declaration in Docling's HTML parser.
            html = "\ufeff" + decode_text(raw, where, declared_by="xml" if raw.lstrip().startswith(b"<?xml") else "html").text
            text = flow_markdown(html.encode("utf-8"), ".html", where, report)
            title = titles.get(item["path"]) or next(iter(_HEADING.findall(text)), None)
            report.add_unit(number, "chapter", TIER, text, title=title)
            if not text:
                report.warn("empty_chapter", number, f"chapter {number} of {filename} ({item['path']}) has no text")
            else:
                texts.append(text)
    if not documents:
        report.warn("empty_chapter", None, f"{filename}: its spine lists no XHTML documents")
    return "\n\n".join(texts)
