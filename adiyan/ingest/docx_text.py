"""DOCX: what Docling needs removed first, and python-docx as the tier below Docling.

Docling 2.143's Word backend calls ``lxml.etree.QName(node)`` on every child of the body, a
table row or a run, and an XML comment or processing instruction is such a child: its ``tag``
is the factory function ``etree.Comment`` (a Cython function), so lxml raises "Invalid input tag
of type <class '_cython_3_2_9.cython_function_or_method'>" and the whole document is lost; a
comment inside a table row instead empties the table's cells without a word. Real files carry
such comments (Unstructured's ``tables-with-incomplete-rows.docx`` and ``contains-pictures.docx``
have ``<!-- ... -->`` between body blocks). Word ignores them, so they are stripped from every
XML part before Docling sees the package. No lxml or Docling version changes this: lxml has
raised on a non-string tag since 2.x, and 2.143 is the newest Docling.

Whenever Docling still fails or returns nothing, ``docx_markdown`` reads the body with
python-docx: paragraphs (headings by style), tables as Markdown, content controls and text
boxes included, in document order.
"""

from __future__ import annotations

import io
import re
import zipfile

from docx import Document
from lxml import etree

from .docling_convert import flow_document_to_markdown
from .pptx_text import _table_markdown
from .report import ExtractionReport, ParseError

TIER = "python-docx"
_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_STRIPPER = etree.XMLParser(resolve_entities=False, remove_comments=True, remove_pis=True, no_network=True)
# A comment, or a processing instruction other than the <?xml ...?> declaration.
_NON_ELEMENT = re.compile(rb"<!--|<\?(?!xml[\s?])")
_HEADING = re.compile(r"^(?:Heading|heading)\s*(\d)$")


def strip_xml_comments(data: bytes) -> tuple[bytes, int]:
    """The package with comments and processing instructions removed from its XML parts.

    Returns the (possibly unchanged) bytes and how many parts were rewritten; a part lxml cannot
    parse is left as it is, for the converter to report.
    """
    with zipfile.ZipFile(io.BytesIO(data)) as package:
        infos = package.infolist()
        parts = {i.filename: package.read(i) for i in infos}
    dirty = [name for name, body in parts.items()
             if name.endswith((".xml", ".rels")) and _NON_ELEMENT.search(body, 5)]
    cleaned = 0
    for name in dirty:
        try:
            root = etree.fromstring(parts[name], _STRIPPER)
        except etree.XMLSyntaxError:
            continue
        parts[name] = etree.tostring(root, xml_declaration=True, encoding="UTF-8", standalone=True)
        cleaned += 1
    if not cleaned:
        return data, 0
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as package:
        for info in infos:
            package.writestr(info, parts[info.filename], compress_type=zipfile.ZIP_DEFLATED)
    return out.getvalue(), cleaned


def docx_to_markdown(data: bytes, filename: str, report: ExtractionReport) -> str:
    """Docling on the comment-free package; python-docx when Docling fails or finds no text."""
    data, _ = strip_xml_comments(data)
    try:
        text = flow_document_to_markdown(data, ".docx", filename, report)
        if text:
            return text
        failure = "Docling found no text"
        report.units.clear()
    except ParseError as exc:
        failure = exc.reason
    try:
        text = docx_markdown(data, filename)
    except ParseError as exc:
        raise ParseError(filename, "unreadable_document", f"{failure}; {exc.reason}") from exc
    if text:
        report.warn("docling_failed", None, f"{filename}: {failure}; read with python-docx instead")
    report.add_unit(1, "document", TIER, text)
    return text


def docx_markdown(data: bytes, filename: str) -> str:
    """The body's text as Markdown, read with python-docx; ParseError if it cannot open the file."""
    try:
        body = Document(io.BytesIO(data)).element.body
    except Exception as exc:  # noqa: BLE001 - python-docx raises many types for a broken package
        raise ParseError(filename, "unreadable_document", f"python-docx could not open it: {exc}") from exc
    return "\n\n".join(block for block in _blocks(body) if block.strip())


def _blocks(container):
    for child in container.iterchildren(f"{_W}p", f"{_W}tbl", f"{_W}sdt"):
        if child.tag == f"{_W}p":
            yield _paragraph(child)
        elif child.tag == f"{_W}tbl":
            yield _table(child)
        else:  # a content control: its blocks sit in w:sdtContent
            for content in child.iterchildren(f"{_W}sdtContent"):
                yield from _blocks(content)


def _paragraph(p) -> str:
    text = _text(p)
    style = p.find(f"{_W}pPr/{_W}pStyle")
    level = _HEADING.match(style.get(f"{_W}val", "")) if style is not None else None
    return f"{'#' * int(level.group(1))} {text}" if level and text else text


def _text(element) -> str:
    """Runs' text, tabs and breaks of ``element`` (text boxes inside it included)."""
    out = []
    for node in element.iter(f"{_W}t", f"{_W}tab", f"{_W}br", f"{_W}cr", f"{_W}p"):
        if node.tag == f"{_W}t":
            out.append(node.text or "")
        elif node.tag == f"{_W}tab":
            out.append("\t")
        elif node is not element:  # a break, or a paragraph nested in a text box
            out.append("\n")
    return "".join(out).strip()


def _table(tbl) -> str:
    """Rows of this table (also those wrapped in content controls); a nested table stays in its cell."""
    rows = [[_text(tc) for tc in tr.iter(f"{_W}tc") if _nearest(tc, "tr") is tr]
            for tr in tbl.iter(f"{_W}tr") if _nearest(tr, "tbl") is tbl]
    return _table_markdown(rows)


def _nearest(element, local: str):
    """The closest ancestor of ``element`` named ``w:<local>``."""
    node = element.getparent()
    while node is not None and node.tag != f"{_W}{local}":
        node = node.getparent()
    return node
