"""The agent's tools: specs, the registry bound to the caller's identity, and tool results.

``build_tools`` returns closures over the requester id and owner flag, so no tool parameter
ever names an identity; each spec names the capability it needs (``policy``). The search tools
go through the retrieval pipeline, the document tools through the KB's read paths.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..types import Requester, RetrievalResult
from .policy import KB_READ, KB_READ_FULL_TEXT, MEMORY_READ


class ToolError(ValueError):
    """A tool could not run with these arguments (bad source, no memory...): becomes an observation."""


@dataclass(frozen=True)
class ToolSpec:
    name: str
    params: tuple[str, ...]
    capability: str | None
    description: str
    fn: Callable[..., Any]

    def signature(self) -> str:
        return self.name + " {" + ", ".join(f'"{p}": string' for p in self.params) + "}"


@dataclass
class DocumentText:
    source: str
    text: str
    truncated: bool
    total_chars: int


@dataclass
class ToolFailure:
    error: str


def build_tools(kb, memory, requester: Requester | str | None, *, retriever, read_max_chars: int = 4000,
                memory_k: int = 5) -> dict[str, ToolSpec]:
    """The tool registry, every tool bound to the caller's identity (no tool takes an identity).

    The search tools go through ``retriever`` (the pipeline every entry point uses), so the
    agent honours every retrieval setting; the document tools read the KB under the same policy.
    """
    who = Requester.of(requester)

    def resolve(source: str) -> str:
        source = (source or "").strip().strip("'\"`")
        if not source:
            raise ToolError("no document source given")
        if "/" in source:
            return source
        # A bare file name: resolve it among the documents *this requester* may list.
        matches = [d["source"] for d in kb.list_documents(who) if d.get("filename") == source]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            raise ToolError(f"file name {source!r} is ambiguous: {', '.join(matches)}")
        return source  # let the KB say "no document" (hidden == missing)

    def search_kb(query: str) -> RetrievalResult:
        return retriever.retrieve_knowledge_base(query, who)

    def search_document(source: str, query: str) -> RetrievalResult:
        return retriever.search_within_document(resolve(source), query, who)

    def find_document(query: str) -> dict | None:
        return retriever.find_source_document(query, who)

    def read_document(source: str) -> DocumentText:
        src = resolve(source)
        text = kb.get_document_text(src, who)
        cut = text[:read_max_chars]
        return DocumentText(src, cut, len(text) > read_max_chars, len(text))

    def list_documents() -> list[dict]:
        return kb.list_documents(who)

    def search_memory(query: str):
        if memory is None:
            raise ToolError("no conversation memory is configured")
        if not who.id:
            raise ToolError("memory is per requester and this requester is anonymous")
        return list(memory.search(query, user_id=who.id, k=memory_k))

    def finish(answer: str) -> str:
        return answer

    specs = [
        ToolSpec("search_kb", ("query",), KB_READ, "search every document you may read", search_kb),
        ToolSpec("search_document", ("source", "query"), KB_READ, "search inside one document", search_document),
        ToolSpec("find_document", ("query",), KB_READ, "find the document that best matches", find_document),
        ToolSpec("read_document", ("source",), KB_READ_FULL_TEXT, "read a document's text", read_document),
        ToolSpec("list_documents", (), KB_READ, "list the documents you may read", list_documents),
        ToolSpec("search_memory", ("query",), MEMORY_READ, "search your earlier conversation", search_memory),
        ToolSpec("finish", ("answer",), None, "give the final answer", finish),
    ]
    return {s.name: s for s in specs}


TOOL_ALIASES = {
    "search": "search_kb", "kb_search": "search_kb", "searchkb": "search_kb", "retrieve": "search_kb",
    "retrieve_knowledge_base": "search_kb", "search_knowledge_base": "search_kb", "knowledge_base": "search_kb",
    "search_within_document": "search_document", "search_doc": "search_document",
    "find_source_document": "find_document", "find_source": "find_document", "find_doc": "find_document",
    "get_document_text": "read_document", "read": "read_document", "read_doc": "read_document",
    "get_document": "read_document", "open_document": "read_document",
    "list_docs": "list_documents", "list": "list_documents", "get_documents": "list_documents",
    "memory": "search_memory", "search_memories": "search_memory", "memory_search": "search_memory",
    "final_answer": "finish", "answer": "finish", "final": "finish", "done": "finish", "respond": "finish",
}
