"""The research agent: a capped ReAct loop over the knowledge base's read paths and memory.

Shape of one run (``Agent.run``):

1. **Route and authorize.** ``route_request`` sends the message to a route (``kb_question``,
   ``document_request``, ``memory_question``, ``general``) with simple rules; each route needs
   one capability, and a requester whose permission tier lacks it gets an ``AuthorizationError``
   that is logged (WARNING, logger ``adiyan.agent``), recorded in the trace and raised to the
   caller. Nothing is dropped silently (the seed's fifth incident: a permission gap silently
   dropped every message). The default tier includes the general-reasoning fallback, and that
   is checked when the tier table is built.
2. **Decide.** The decision prompt is the question, the *rendered scratchpad* and the tools the
   tier may use. It never contains raw tool output. The model's reply is parsed tolerantly
   (``Action: name`` / ``Action Input: {json}``, JSON objects, ``name(arg=...)``, ``Final
   Answer:``); when it cannot be parsed, a deterministic default action is taken instead
   (e.g. ``search_kb(question)`` first, then ``finish``) and the trace says so.
3. **Authorize the tool, run it** under the caller's identity: tools are closures bound to the
   requester id and owner flag; no tool parameter names an identity, and argument keys the tool
   does not declare are dropped (and listed in the trace), so the model can never widen access.
4. **Compact.** ``compact`` turns the raw tool output into scratchpad entries: findings (the
   sentences of the top chunks most similar to the question, with source and chunk index),
   documents checked, leads, open questions and a one-line summary of the action. It is
   extractive and deterministic (embedding similarity with the KB's embedder, or word overlap).
5. **Trace** the step: tool, arguments, latencies, decision tokens, parse status, scratchpad size.

The loop stops on ``finish`` or after ``settings.agent.max_steps`` steps; then the answer is
generated from the scratchpad's findings with grounded generation (``generation.answer_question``).
Under strict grounding a knowledge answer needs evidence: a ``finish`` before any tool call is
replaced by the default action, and a model's final answer whose figures (numbers, codes) do not
all occur in the findings is replaced by grounded generation over the findings.
"""

from __future__ import annotations

import ast
import json
import logging
import re
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .generation import NO_CONTEXT_ANSWER, answer_question, approx_tokens
from .kb import DocumentNotFound, RetrievalResult, RetrievedChunk
from .models.base import ChatMessage

log = logging.getLogger("adiyan.agent")

# -- capabilities, tiers, requesters ------------------------------------------------------------

KB_READ = "kb.read"  # search the KB, find a document, list documents
KB_READ_FULL_TEXT = "kb.read_full_text"  # read a whole document's text
MEMORY_READ = "memory.read"  # search the requester's own conversation memory
GENERAL_REASONING = "general_reasoning"  # answer without documents (the fallback route)
CAPABILITIES = (KB_READ, KB_READ_FULL_TEXT, MEMORY_READ, GENERAL_REASONING)


@dataclass(frozen=True)
class Tier:
    """A permission tier: the capabilities it grants and whether it is the owner role."""

    name: str
    capabilities: frozenset
    is_owner: bool = False

    def __post_init__(self):
        object.__setattr__(self, "capabilities", frozenset(self.capabilities))
        unknown = self.capabilities - set(CAPABILITIES)
        if unknown:
            raise ValueError(f"tier {self.name!r}: unknown capabilities {sorted(unknown)}; known: {CAPABILITIES}")

    def allows(self, capability: str | None) -> bool:
        return capability is None or capability in self.capabilities


TIERS: dict[str, Tier] = {
    "guest": Tier("guest", frozenset({KB_READ, GENERAL_REASONING})),
    "member": Tier("member", frozenset({KB_READ, KB_READ_FULL_TEXT, MEMORY_READ, GENERAL_REASONING})),
    "owner": Tier("owner", frozenset(CAPABILITIES), is_owner=True),
}
DEFAULT_TIER = "guest"


def check_tiers(tiers: Mapping[str, Tier], default: str) -> None:
    """A tier table is usable only if its default tier exists and includes the general fallback."""
    if default not in tiers:
        raise ValueError(f"default tier {default!r} is not in the tier table {sorted(tiers)}")
    if GENERAL_REASONING not in tiers[default].capabilities:
        raise ValueError(f"default tier {default!r} lacks {GENERAL_REASONING!r}: requests it cannot route "
                         "would have nowhere to go (the seed's silently dropped messages)")


check_tiers(TIERS, DEFAULT_TIER)


def get_tier(tier: "str | Tier", tiers: Mapping[str, Tier] = TIERS) -> Tier:
    if isinstance(tier, Tier):
        return tier
    if tier not in tiers:
        raise ValueError(f"unknown permission tier {tier!r}; tiers: {', '.join(tiers)}")
    return tiers[tier]


def tier_for(requester_id: str | None, assignments: Mapping[str, str] | None = None, *,
             default: str = DEFAULT_TIER, tiers: Mapping[str, Tier] = TIERS) -> Tier:
    """Map a requester to its tier: an explicit assignment, else the default tier."""
    name = (assignments or {}).get(requester_id or "", default)
    return get_tier(name, tiers)


@dataclass(frozen=True)
class Requester:
    id: str | None
    tier: Tier

    @property
    def is_owner(self) -> bool:
        return self.tier.is_owner


class AuthorizationError(PermissionError):
    """A request or tool call needs a capability the requester's tier lacks.

    Raised to the caller and logged; never swallowed. ``steps`` holds the trace up to the
    refusal when the agent raised it.
    """

    def __init__(self, requester_id: str | None, tier: str, route: str, capability: str, tool: str | None = None):
        self.requester_id = requester_id
        self.tier = tier
        self.route = route
        self.capability = capability
        self.tool = tool
        self.steps: list[StepTrace] = []
        what = f"route {route!r}" + (f" (tool {tool!r})" if tool else "")
        super().__init__(f"requester {requester_id!r} with tier {tier!r} may not use {what}: "
                         f"missing capability {capability!r}")


def authorize(requester: Requester, capability: str | None, *, route: str, tool: str | None = None) -> None:
    """Raise (and log at WARNING) an AuthorizationError when the tier lacks ``capability``."""
    if requester.tier.allows(capability):
        return
    err = AuthorizationError(requester.id, requester.tier.name, route, capability, tool)
    log.warning("authorization refused: %s", err,
                extra={"requester_id": requester.id, "tier": requester.tier.name, "route": route,
                       "capability": capability, "tool": tool})
    raise err


# -- routes -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Route:
    name: str
    capability: str
    description: str


ROUTES: dict[str, Route] = {
    "kb_question": Route("kb_question", KB_READ, "a question the documents should answer"),
    "document_request": Route("document_request", KB_READ_FULL_TEXT, "asks for a whole document's text"),
    "memory_question": Route("memory_question", MEMORY_READ, "about the requester's earlier conversation"),
    "general": Route("general", GENERAL_REASONING, "small talk or a task needing no documents (the fallback)"),
}

_MEMORY_RE = re.compile(
    r"\b(remember|remind me|recall|last time|earlier (?:today|this week|conversation)|"
    r"(?:did|have) i (?:tell|told|say|said|mention|ask|asked)|i (?:told|said|mentioned|asked) (?:you|earlier)|"
    r"you told me|we (?:discussed|talked|spoke)|previous (?:conversation|chat|session)|my preferences?)\b", re.I)
_DOCUMENT_RE = re.compile(
    r"\b(full text|whole (?:document|file|text)|entire (?:document|file|text)|complete (?:document|file|text)|"
    r"send me (?:the|that|this) (?:file|document|doc|pdf)|(?:read|open|show|print) (?:me )?(?:the|that|this) "
    r"(?:whole |entire |full )?(?:file|document|doc))\b", re.I)
_GENERAL_RE = re.compile(
    r"^\s*(hi|hello|hey|thanks|thank you|good (?:morning|afternoon|evening)|bye)\b|"
    r"\b(who are you|what can you do|how are you|tell me a joke|write (?:me )?(?:a |an )?(?:poem|haiku|story|joke)|"
    r"translate\b|rephrase|summari[sz]e this sentence)|^\s*[\d\s.+\-*/()=?]+$", re.I)
_QUESTION_RE = re.compile(
    r"\?\s*$|^\s*(what|which|who|whom|whose|when|where|why|how|is|are|was|were|do|does|did|can|could|"
    r"should|will|would|list|find|tell me|explain|describe|give me)\b", re.I)
_KB_CUE_RE = re.compile(r"\b(document|documents|file|files|report|policy|price|cost|costs|fee|schedule|"
                        r"according to|in the (?:docs|knowledge base))\b", re.I)


def classify_request(message: str) -> str:
    """The rule-based router (first rule that matches wins):

    1. memory cues ("remember", "did I tell you", "we discussed", "last time") -> memory_question
    2. whole-document cues ("full text", "send me the file", "show the whole document") -> document_request
    3. small talk and document-free tasks (greetings, "who are you", "write a poem",
       "translate", bare arithmetic) -> general
    4. a question (ends with "?", starts with a question word) or a KB cue ("document",
       "policy", "price", "cost"...) -> kb_question
    5. anything else -> general, the fallback every default tier can use
    """
    text = (message or "").strip()
    if not text:
        return "general"
    if _MEMORY_RE.search(text):
        return "memory_question"
    if _DOCUMENT_RE.search(text):
        return "document_request"
    if _GENERAL_RE.search(text):
        return "general"
    if _QUESTION_RE.search(text) or _KB_CUE_RE.search(text):
        return "kb_question"
    return "general"


def route_request(message: str, requester: Requester) -> str:
    """Route ``message`` and check the requester may use the route; AuthorizationError if not."""
    route = classify_request(message)
    authorize(requester, ROUTES[route].capability, route=route)
    return route


# -- the scratchpad -----------------------------------------------------------------------------


@dataclass
class Finding:
    text: str
    source: str
    chunk_index: int | None = None  # None: not a KB chunk (full text, memory)
    score: float = 0.0  # relevance to the question, for ordering and trimming
    step: int = 0

    def cite(self) -> str:
        return self.source if self.chunk_index is None else f"{self.source}#{self.chunk_index}"


@dataclass
class Scratchpad:
    findings: list[Finding] = field(default_factory=list)
    documents_checked: list[str] = field(default_factory=list)
    open_questions: list[str] = field(default_factory=list)
    leads: list[str] = field(default_factory=list)  # documents found or listed but not yet checked
    history: list[str] = field(default_factory=list)  # one compacted line per tool call

    def copy(self) -> "Scratchpad":
        return Scratchpad([replace(f) for f in self.findings], list(self.documents_checked),
                          list(self.open_questions), list(self.leads), list(self.history))

    def best_findings(self) -> list[Finding]:
        return sorted(self.findings, key=lambda f: (-f.score, f.step))

    def render(self, budget_tokens: int, count: Callable[[str], int] = approx_tokens) -> str:
        """The scratchpad as text of at most ``budget_tokens`` (by ``count``).

        Lines are admitted by priority: findings (most relevant first), open questions, the
        latest actions, documents checked, leads; then printed in a fixed section order.
        """
        budget = max(1, int(budget_tokens))
        if not (self.findings or self.documents_checked or self.open_questions or self.leads or self.history):
            return "(empty: nothing found yet)"
        candidates: list[tuple[str, str]] = []  # (section, line) in priority order
        for f in self.best_findings():
            candidates.append(("Findings", f"- [{f.cite()}] {f.text}"))
        for q in self.open_questions[-5:]:
            candidates.append(("Open questions", f"- {q}"))
        for i in range(len(self.history) - 1, -1, -1):
            candidates.append(("Actions so far", f"{i + 1}. {self.history[i]}"))
        if self.documents_checked:
            candidates.append(("Documents checked", ", ".join(self.documents_checked[-12:])))
        unread = [s for s in self.leads if s not in self.documents_checked]
        if unread:
            candidates.append(("Leads (not yet checked)", ", ".join(unread[:12])))
        order = ["Findings", "Open questions", "Documents checked", "Leads (not yet checked)", "Actions so far"]
        chosen: dict[str, list[str]] = {k: [] for k in order}
        used = 0
        for section, line in candidates:
            cost = count(line) + (0 if chosen[section] else count(section + ":") + 1)
            if used + cost > budget:
                continue
            chosen[section].append(line)
            used += cost
        chosen["Actions so far"].sort(key=lambda s: int(s.split(".", 1)[0]))
        out = "\n".join(f"{k}:\n" + "\n".join(v) for k, v in ((k, chosen[k]) for k in order) if v)
        if not out:
            out = candidates[0][1] if candidates else ""
        while out and count(out) > budget:  # hard cut: the budget is a promise
            out = out[: max(0, min(len(out) - 1, budget * 4 - 2))].rstrip() + "…"
            if len(out) <= 1:
                break
        return out

    def to_dict(self) -> dict:
        return asdict(self)


# -- tools --------------------------------------------------------------------------------------


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


def build_tools(kb, memory, requester_id: str | None, is_owner: bool, *, read_max_chars: int = 4000,
                memory_k: int = 5) -> dict[str, ToolSpec]:
    """The tool registry, every tool bound to the caller's identity (no tool takes an identity)."""

    def resolve(source: str) -> str:
        source = (source or "").strip().strip("'\"`")
        if not source:
            raise ToolError("no document source given")
        if "/" in source:
            return source
        # A bare file name: resolve it among the documents *this requester* may list.
        matches = [d["source"] for d in kb.list_documents(requester_id, is_owner) if d.get("filename") == source]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            raise ToolError(f"file name {source!r} is ambiguous: {', '.join(matches)}")
        return source  # let the KB say "no document" (hidden == missing)

    def search_kb(query: str) -> RetrievalResult:
        return kb.retrieve_knowledge_base(query, requester_id, is_owner)

    def search_document(source: str, query: str) -> RetrievalResult:
        return kb.search_within_document(resolve(source), query, requester_id, is_owner)

    def find_document(query: str) -> dict | None:
        return kb.find_source_document(query, requester_id, is_owner)

    def read_document(source: str) -> DocumentText:
        src = resolve(source)
        text = kb.get_document_text(src, requester_id, is_owner)
        cut = text[:read_max_chars]
        return DocumentText(src, cut, len(text) > read_max_chars, len(text))

    def list_documents() -> list[dict]:
        return kb.list_documents(requester_id, is_owner)

    def search_memory(query: str):
        if memory is None:
            raise ToolError("no conversation memory is configured")
        if not requester_id:
            raise ToolError("memory is per requester and this requester is anonymous")
        return list(memory.search(query, user_id=requester_id, k=memory_k))

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
_PRIMARY = {"search_kb": "query", "search_document": "query", "find_document": "query", "read_document": "source",
            "search_memory": "query", "finish": "answer"}
_ARG_ALIASES = {"q": "query", "search": "query", "text": "query", "question": "query", "keywords": "query",
                "document": "source", "doc": "source", "file": "source", "filename": "source",
                "source_filename": "source", "final_answer": "answer", "response": "answer"}


# -- parsing the model's action -----------------------------------------------------------------


@dataclass
class ParsedAction:
    tool: str | None
    args: dict
    ok: bool
    error: str | None = None
    ignored_args: list[str] = field(default_factory=list)


def _norm_tool(name: str) -> str:
    name = re.sub(r"[`*\"'\[\]<>]", "", name or "").strip().lower()
    name = re.sub(r"[\s\-.]+", "_", name).strip("_:")
    return name


def _lookup_tool(name: str, tools: Mapping[str, ToolSpec]) -> str | None:
    first = re.match(r"[\s`*\"'\[<]*([A-Za-z_][\w\-.]*)", name or "")
    for cand in (name, first.group(1) if first else ""):
        n = _norm_tool(cand)
        if not n:
            continue
        if n in tools:
            return n
        if n in TOOL_ALIASES and TOOL_ALIASES[n] in tools:
            return TOOL_ALIASES[n]
        squashed = n.replace("_", "")
        for t in tools:
            if t.replace("_", "") == squashed:
                return t
    return None


def _balanced_object(text: str) -> str | None:
    start = text.find("{")
    while start != -1:
        depth, in_str, esc = 0, None, False
        for i in range(start, len(text)):
            c = text[i]
            if in_str:
                if esc:
                    esc = False
                elif c == "\\":
                    esc = True
                elif c == in_str:
                    in_str = None
            elif c in "\"'":
                in_str = c
            elif c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    return text[start: i + 1]
        start = text.find("{", start + 1)
    return None


def _loads_object(blob: str) -> dict | None:
    for attempt in (blob, re.sub(r",\s*([}\]])", r"\1", blob)):
        try:
            val = json.loads(attempt)
            if isinstance(val, dict):
                return val
        except (ValueError, TypeError):
            pass
        try:
            val = ast.literal_eval(attempt)
            if isinstance(val, dict):
                return val
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            pass
    return None


def _call_args(inner: str) -> dict:
    """Arguments of an inline call ``name(query="x")`` or ``name("x")``."""
    inner = inner.strip()
    if not inner:
        return {}
    kw = dict((k, a or b) for k, a, b in
              re.findall(r"(\w+)\s*[=:]\s*(?:\"([^\"]*)\"|'([^']*)')", inner))
    if kw:
        return kw
    return {"_": inner.strip().strip("\"'")}


_ACTION_LINE = re.compile(r"(?im)^[\s>*_`#\-]*action\s*(?:\d+\s*)?[*_`]*\s*:\s*[*_`]*\s*(.*)$")
_INPUT_AT = re.compile(r"(?is)action[\s*_`]*input[\s*_`]*(?:\d+\s*)?:\s*")
_FINAL_AT = re.compile(r"(?is)final[\s_]*answer[\s*_`]*:\s*(.+)")
_PLACEHOLDER = re.compile(r"^\s*(<[^>]*>|\.\.\.|…|string|your (?:query|answer)[^\n]*|query|answer)\s*$", re.I)


def parse_action(text: str, tools: Mapping[str, ToolSpec], *, question: str = "") -> ParsedAction:
    """Parse a model's reply into a tool call; tolerant to the noise small models produce."""
    raw = (text or "").strip()
    if not raw:
        return ParsedAction(None, {}, False, "empty reply")
    body = re.sub(r"```[a-zA-Z]*", "", raw)
    tool_name, args, inline = None, None, None
    m = _ACTION_LINE.search(body)
    if m:
        line = m.group(1).strip()
        call = re.match(r"^([A-Za-z_][\w \-.`*]*?)\s*\((.*)\)", line)
        if call:
            tool_name, inline = call.group(1), _call_args(call.group(2))
        else:
            tool_name = re.split(r"[{\n]", line, 1)[0]
            tool_name = re.sub(r"\s+(with|using)\b.*$", "", tool_name.strip(), flags=re.I)
        mi = _INPUT_AT.search(body, m.end()) or _INPUT_AT.search(body)
        rest = body[mi.end():] if mi else line[len(tool_name or ""):]
        blob = _balanced_object(rest)
        if blob is not None:
            args = _loads_object(blob)
        if args is None and inline:
            args = inline
        if args is None and mi:
            first = rest.strip().split("\n", 1)[0].strip().strip("\"'`")
            if first:
                args = {"_": first}
    else:
        blob = _balanced_object(body)
        obj = _loads_object(blob) if blob else None
        if obj:
            for k in ("action", "tool", "name", "function"):
                if isinstance(obj.get(k), str):
                    tool_name = obj[k]
                    break
            for k in ("action_input", "input", "args", "arguments", "parameters", "tool_input"):
                if k in obj:
                    v = obj[k]
                    args = v if isinstance(v, dict) else {"_": str(v)}
                    break
        if tool_name is None:
            fm = _FINAL_AT.search(body)
            if fm:
                tool_name, args = "finish", {"answer": fm.group(1).strip()}
    if tool_name is None:
        return ParsedAction(None, {}, False, "no 'Action:' line or action object found")
    tool = _lookup_tool(tool_name, tools)
    if tool is None:
        return ParsedAction(None, {}, False, f"unknown tool {tool_name.strip()[:60]!r}")
    spec = tools[tool]
    args = dict(args or {})
    clean, ignored = {}, []
    for k, v in args.items():
        key = "_" if k == "_" else _ARG_ALIASES.get(str(k).strip().lower(), str(k).strip().lower())
        if key == "_":
            key = _PRIMARY.get(tool, spec.params[0] if spec.params else "_")
        if key not in spec.params:
            ignored.append(str(k))  # e.g. requester_id / is_owner: identities are never arguments
            continue
        if isinstance(v, (list, tuple)):
            v = " ".join(map(str, v))
        clean[key] = "" if v is None else str(v).strip()
    for p in spec.params:
        if not clean.get(p) or _PLACEHOLDER.match(clean[p]):
            if p == "query" and question:
                clean[p] = question  # a search with no usable query searches for the question
                continue
            return ParsedAction(tool, clean, False, f"{tool}: missing or placeholder argument {p!r}", ignored)
    return ParsedAction(tool, clean, True, None, ignored)


# -- compaction ---------------------------------------------------------------------------------

_SENT_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")
_WORD = re.compile(r"[a-z0-9]+(?:[-'][a-z0-9]+)*")
_STOP = frozenset("a an the of to in on at for and or is are was were be been do does did how what which who whom "
                  "when where why much many per with by from this that these those it its i you we they me my "
                  "your our can could should would will shall may might about as into than then there their".split())
_FIGURE = re.compile(r"\b[\w-]*\d[\w.,-]*\b")


def _content_words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


def split_sentences(text: str) -> list[str]:
    """Sentences of a chunk; a markdown heading is prefixed to the sentences under it."""
    out, heading = [], ""
    for line in (text or "").splitlines():
        s = line.strip()
        if not s:
            continue
        if s.startswith("#"):
            heading = s.lstrip("#").strip()
            continue
        s = re.sub(r"^([-*+]|\d+[.)])\s+", "", s)
        for sent in _SENT_SPLIT.split(s):
            sent = sent.strip()
            if len(sent) < 3:
                continue
            if heading and not (_content_words(heading) <= _content_words(sent)):
                sent = f"{heading}: {sent}"
            out.append(sent)
    return out


def sentence_scores(question: str, sentences: Sequence[str], embedder=None) -> list[float]:
    """Similarity of each sentence to the question: cosine with ``embedder``, else word overlap."""
    if not sentences:
        return []
    if embedder is not None and question:
        q = np.asarray(embedder.embed([question], "query"), dtype=np.float32)[0]
        m = np.asarray(embedder.embed(list(sentences), "document"), dtype=np.float32)
        return [float(x) for x in m @ q]
    qw = _content_words(question)
    return [len(qw & _content_words(s)) / (len(qw) or 1) for s in sentences]


def _add_finding(pad: Scratchpad, f: Finding) -> bool:
    key = re.sub(r"\W+", " ", f.text.lower()).strip()
    for old in pad.findings:
        if re.sub(r"\W+", " ", old.text.lower()).strip() == key:
            old.score = max(old.score, f.score)
            return False
    pad.findings.append(f)
    return True


def _extract(question: str, sentences: list[str], embedder, per_unit: int, min_score: float) -> list[tuple[str, float]]:
    scores = sentence_scores(question, sentences, embedder)
    ranked = sorted(zip(sentences, scores), key=lambda t: -t[1])
    return [(s, sc) for i, (s, sc) in enumerate(ranked[:per_unit]) if i == 0 or sc >= min_score]


def _short(args: Mapping) -> str:
    return json.dumps({k: (v if len(str(v)) <= 60 else str(v)[:57] + "...") for k, v in args.items()},
                      ensure_ascii=False)


def compact(scratchpad: Scratchpad, tool_name: str, args: Mapping, raw_output: Any, *, question: str = "",
            embedder=None, step: int = 0, top_chunks: int = 3, per_chunk: int = 2, min_score: float = 0.2,
            chunk_ratio: float = 0.8) -> Scratchpad:
    """Fold one tool's raw output into a new scratchpad (the input is not modified).

    Extractive and deterministic: from the top ``top_chunks`` chunks (the best one, and the
    others scoring at least ``chunk_ratio`` of its score), or the document text, or the memory
    hits, keep the ``per_chunk`` sentences most similar to the question (the best one
    always, the others if they score at least ``min_score``), with source and chunk index. Raw
    output is never copied whole; an empty or failed call becomes an open question.
    """
    pad = scratchpad.copy()
    q = question or str(args.get("query", ""))
    call = f"{tool_name} {_short(args)}"
    if isinstance(raw_output, ToolFailure):
        pad.open_questions.append(f"{tool_name} failed: {raw_output.error}")
        pad.history.append(f"{call} -> failed: {raw_output.error}")
        return pad
    if tool_name in ("search_kb", "search_document") and isinstance(raw_output, RetrievalResult):
        # the best chunk, and the next ones only if they score close to it
        chunks = [c for i, c in enumerate(raw_output.chunks[:top_chunks])
                  if i == 0 or c.score >= chunk_ratio * raw_output.chunks[0].score]
        added = 0
        for ch in chunks:
            for sent, sc in _extract(q, split_sentences(ch.text), embedder, per_chunk, min_score):
                added += _add_finding(pad, Finding(sent, ch.source, ch.chunk_index,
                                                   round(0.5 * sc + 0.5 * ch.score, 4), step))
            if ch.source not in pad.documents_checked:
                pad.documents_checked.append(ch.source)
        if not raw_output.chunks:
            pad.open_questions.append(f"nothing for {args.get('query', '')!r}: {raw_output.empty_reason}")
            pad.history.append(f"{call} -> no results ({raw_output.empty_reason})")
        else:
            srcs = ", ".join(dict.fromkeys(c.source for c in chunks))
            pad.history.append(f"{call} -> {len(raw_output.chunks)} chunk(s), {len(chunks)} relevant "
                               f"({srcs}); {added} new finding(s)")
        return pad
    if tool_name == "find_document":
        if not raw_output:
            pad.open_questions.append(f"no document matches {args.get('query', '')!r}")
            pad.history.append(f"{call} -> no document")
        else:
            src = raw_output["source"]
            if src not in pad.leads:
                pad.leads.append(src)
            pad.history.append(f"{call} -> {src} (score {raw_output.get('score', 0):.2f})")
        return pad
    if tool_name == "read_document" and isinstance(raw_output, DocumentText):
        added = 0
        for sent, sc in _extract(q, split_sentences(raw_output.text), embedder, per_chunk + 2, min_score):
            added += _add_finding(pad, Finding(sent, raw_output.source, None, round(sc, 4), step))
        if raw_output.source not in pad.documents_checked:
            pad.documents_checked.append(raw_output.source)
        note = f", first {len(raw_output.text)} of {raw_output.total_chars} chars" if raw_output.truncated else ""
        pad.history.append(f"{call} -> read {raw_output.source}{note}; {added} new finding(s)")
        return pad
    if tool_name == "list_documents":
        names = [d.get("source", "") for d in (raw_output or [])]
        for s in names:
            if s and s not in pad.leads:
                pad.leads.append(s)
        if not names:
            pad.open_questions.append("no document is visible to this requester")
        pad.history.append(f"{call} -> {len(names)} document(s)")
        return pad
    if tool_name == "search_memory":
        hits = list(raw_output or [])
        added = 0
        for h in hits[:top_chunks]:
            text = (h.get("text") if isinstance(h, dict) else getattr(h, "text", "")) or ""
            h_score = (h.get("score") if isinstance(h, dict) else getattr(h, "score", 0.0)) or 0.0
            for sent, sc in _extract(q, split_sentences(text), embedder, per_chunk, min_score):
                added += _add_finding(pad, Finding(sent, "memory", None,
                                                   round(0.5 * sc + 0.5 * float(h_score), 4), step))
        if not hits:
            pad.open_questions.append(f"memory has nothing for {args.get('query', '')!r}")
        pad.history.append(f"{call} -> {len(hits)} memory hit(s); {added} new finding(s)")
        return pad
    pad.history.append(f"{call} -> done")
    return pad


# -- traces and results -------------------------------------------------------------------------


@dataclass
class StepTrace:
    step: int
    tool: str
    args: dict
    action_source: str  # "model" | "fallback" (unparseable reply) | "override" (policy) | "route"
    parse_ok: bool
    parse_error: str | None = None
    note: str | None = None
    ignored_args: list[str] = field(default_factory=list)
    authorized: bool = True
    error: str | None = None
    latency_s: float = 0.0  # the whole step
    decision_latency_s: float = 0.0
    tool_latency_s: float = 0.0
    compaction_latency_s: float = 0.0
    prompt_tokens: int | None = None  # of the decision call
    completion_tokens: int | None = None
    decision_text: str = ""  # the model's reply (its own words; never tool output)
    observation_chars: int = 0  # size of the raw tool output (its content is not kept)
    scratchpad_tokens: int = 0  # size of the full scratchpad after compaction
    n_findings: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class AgentResult:
    answer: str
    steps: list[StepTrace]
    scratchpad: Scratchpad
    stopped_reason: str  # "finished" | "max_steps"
    route: str = ""
    answer_source: str = ""  # "model" | "scratchpad" | "general_reasoning" | "no_evidence"
    synthesis: dict = field(default_factory=dict)
    requester_id: str | None = None
    tier: str = ""

    def to_dict(self) -> dict:
        return {"answer": self.answer, "stopped_reason": self.stopped_reason, "route": self.route,
                "answer_source": self.answer_source, "requester_id": self.requester_id, "tier": self.tier,
                "synthesis": self.synthesis, "steps": [s.to_dict() for s in self.steps],
                "scratchpad": self.scratchpad.to_dict()}


# -- the agent ----------------------------------------------------------------------------------

DECISION_SYSTEM = (
    "You are a research agent. You answer the user's question by calling one tool per step. "
    "You only see your scratchpad of notes from earlier steps.\n\nTools:\n{tools}\n\n"
    "Reply with exactly two lines:\nAction: <tool name>\nAction Input: <JSON object with the tool's arguments>\n"
    "Call finish with the answer once the scratchpad's findings answer the question."
)
GENERAL_SYSTEM = ("You are a helpful assistant. Answer briefly. You have no documents for this message, "
                  "so do not claim facts from any document.")
_KB_TOOLS = ("search_kb", "search_document", "find_document", "read_document", "list_documents", "search_memory")


def _call_key(tool: str, args: Mapping) -> str:
    return tool + json.dumps(dict(args), sort_keys=True)


@dataclass
class _Action:
    tool: str
    args: dict
    source: str
    parse: ParsedAction | None = None
    note: str | None = None


class Agent:
    """A ReAct agent answering as ``requester_id`` within the permissions of ``tier``."""

    def __init__(self, llm, kb, memory=None, settings=None, tier: "str | Tier" = DEFAULT_TIER,
                 requester_id: str | None = None, *, compactor: Callable[..., Scratchpad] = compact,
                 decision_max_tokens: int = 64, read_max_chars: int = 4000, synthesis_ratio: float = 0.75,
                 tiers: Mapping[str, Tier] = TIERS):
        self.llm = llm
        self.kb = kb
        self.memory = memory
        self.settings = settings if settings is not None else kb.settings
        self.requester = Requester(requester_id, get_tier(tier, tiers))
        self.compactor = compactor
        self.decision_max_tokens = decision_max_tokens
        self.synthesis_ratio = synthesis_ratio
        self.tools = build_tools(kb, memory, requester_id, self.requester.is_owner, read_max_chars=read_max_chars)
        self.last_steps: list[StepTrace] = []

    # the tools shown to the model: those the tier may use (memory only when there is one)
    def visible_tools(self) -> list[ToolSpec]:
        return [t for t in self.tools.values() if self.requester.tier.allows(t.capability)
                and not (t.name == "search_memory" and self.memory is None)]

    def _scratchpad_budget(self, fixed_prompt: str) -> int:
        ctx = int(getattr(self.llm, "context_size", 2048) or 2048)
        room = int((ctx - self.decision_max_tokens) * 0.8) - approx_tokens(fixed_prompt)
        return max(64, min(self.settings.generation.context_budget_tokens, room))

    def decision_messages(self, question: str, pad: Scratchpad, step: int, max_steps: int) -> list[ChatMessage]:
        tools = "\n".join(f"- {t.signature()}: {t.description}" for t in self.visible_tools())
        system = DECISION_SYSTEM.format(tools=tools)
        head = f"Question: {question}\n\nScratchpad:\n"
        tail = f"\n\nStep {step} of {max_steps}. What is the next action?"
        budget = self._scratchpad_budget(system + head + tail)
        return [ChatMessage("system", system), ChatMessage("user", head + pad.render(budget) + tail)]

    def default_action(self, route: str, question: str, pad: Scratchpad, done_calls: set[str]) -> _Action:
        """The deterministic action taken when the model's reply is unusable: the route's plan
        (e.g. search_kb(question)), skipping calls already made; then finish."""
        allows = self.requester.tier.allows

        def fresh(tool: str, args: dict) -> bool:
            return _call_key(tool, args) not in done_calls

        if route == "memory_question" and allows(MEMORY_READ) and fresh("search_memory", {"query": question}):
            return _Action("search_memory", {"query": question}, "fallback")
        if route == "document_request" and allows(KB_READ_FULL_TEXT):
            if fresh("find_document", {"query": question}):
                return _Action("find_document", {"query": question}, "fallback")
            unread = [s for s in pad.leads if s not in pad.documents_checked and fresh("read_document", {"source": s})]
            if unread:
                return _Action("read_document", {"source": unread[0]}, "fallback")
        if route != "general" and allows(KB_READ) and fresh("search_kb", {"query": question}):
            return _Action("search_kb", {"query": question}, "fallback")
        return _Action("finish", {"answer": ""}, "fallback")

    def _decide(self, question, route, pad, step, max_steps, called, done_calls, tr: StepTrace) -> _Action:
        messages = self.decision_messages(question, pad, step, max_steps)
        t0 = time.perf_counter()
        out = self.llm.chat(messages, max_tokens=self.decision_max_tokens, temperature=self.settings.llm.temperature)
        tr.decision_latency_s = time.perf_counter() - t0
        tr.prompt_tokens = out.prompt_tokens if out.prompt_tokens is not None else \
            sum(approx_tokens(m.content) for m in messages)
        tr.completion_tokens = out.completion_tokens if out.completion_tokens is not None else approx_tokens(out.text)
        tr.decision_text = (out.text or "")[:600]
        parsed = parse_action(out.text, self.tools, question=question)
        tr.parse_ok, tr.parse_error, tr.ignored_args = parsed.ok, parsed.error, parsed.ignored_args
        if not parsed.ok:
            act = self.default_action(route, question, pad, done_calls)
            act.parse = parsed
            act.note = f"unparseable reply ({parsed.error}): default action"
            return act
        act = _Action(parsed.tool, parsed.args, "model", parsed)
        strict = self.settings.generation.strict_grounding
        if act.tool == "finish" and route != "general" and strict and not (called & set(_KB_TOOLS)):
            alt = self.default_action(route, question, pad, done_calls)
            if alt.tool != "finish":
                alt.source, alt.note = "override", "finish before any evidence under strict grounding: default action"
                return alt
        if act.tool != "finish" and _call_key(act.tool, act.args) in done_calls:
            alt = self.default_action(route, question, pad, done_calls)
            alt.source, alt.note = "override", "repeated an earlier call: default action"
            return alt
        return act

    def _refuse(self, err: AuthorizationError, steps: list[StepTrace], tr: StepTrace) -> AuthorizationError:
        tr.authorized, tr.error = False, str(err)
        steps.append(tr)
        err.steps = list(steps)
        self.last_steps = list(steps)
        return err

    def run(self, question: str) -> AgentResult:
        max_steps = self.settings.agent.max_steps
        steps: list[StepTrace] = []
        self.last_steps = steps
        try:
            route = route_request(question, self.requester)
        except AuthorizationError as err:
            route = classify_request(question)
            raise self._refuse(err, steps, StepTrace(0, f"route:{route}", {}, "route", True)) from None
        pad = Scratchpad()
        called: set[str] = set()
        done_calls: set[str] = set()
        stopped, final = "max_steps", None
        for step in range(1, max_steps + 1):
            t_step = time.perf_counter()
            tr = StepTrace(step, "", {}, "model", True)
            act = self._decide(question, route, pad, step, max_steps, called, done_calls, tr)
            tr.tool, tr.args, tr.action_source, tr.note = act.tool, dict(act.args), act.source, act.note
            spec = self.tools[act.tool]
            try:
                authorize(self.requester, spec.capability, route=route, tool=spec.name)
            except AuthorizationError as err:
                tr.latency_s = time.perf_counter() - t_step
                raise self._refuse(err, steps, tr) from None
            if act.tool == "finish":
                tr.latency_s = time.perf_counter() - t_step
                tr.scratchpad_tokens, tr.n_findings = approx_tokens(pad.render(10**9)), len(pad.findings)
                steps.append(tr)
                log.info("agent step %d: finish (%s)", step, act.source)
                final = self._final_answer_traced(question, route, pad, steps,
                                                  act.args.get("answer", "") if act.source == "model" else "")
                stopped = "finished"
                break
            t0 = time.perf_counter()
            try:
                raw = spec.fn(**{p: act.args[p] for p in spec.params})
            except (DocumentNotFound, ToolError) as exc:
                raw = ToolFailure(f"{type(exc).__name__}: {exc}")
                tr.error = raw.error
            tr.tool_latency_s = time.perf_counter() - t0
            tr.observation_chars = len(repr(raw))
            called.add(act.tool)
            done_calls.add(_call_key(act.tool, act.args))
            t0 = time.perf_counter()
            pad = self.compactor(pad, act.tool, dict(act.args), raw, question=question,
                                 embedder=getattr(self.kb, "embedder", None), step=step)
            tr.compaction_latency_s = time.perf_counter() - t0
            tr.scratchpad_tokens, tr.n_findings = approx_tokens(pad.render(10**9)), len(pad.findings)
            tr.latency_s = time.perf_counter() - t_step
            steps.append(tr)
            log.info("agent step %d: %s %s (%s) %.2fs, %d finding(s)", step, act.tool, _short(act.args),
                     act.source, tr.latency_s, tr.n_findings)
        if final is None:
            final = self._final_answer_traced(question, route, pad, steps, "")
        answer, source, synthesis = final
        return AgentResult(answer, steps, pad, stopped, route, source, synthesis, self.requester.id,
                           self.requester.tier.name)

    # -- the final answer ------------------------------------------------------------------------
    def _final_answer_traced(self, question, route, pad, steps, model_answer):
        try:
            return self._final_answer(question, route, pad, model_answer)
        except AuthorizationError as err:  # the general-reasoning fallback is itself a capability
            tr = StepTrace(len(steps) + 1, err.tool or "final_answer", {}, "fallback", True)
            raise self._refuse(err, steps, tr) from None

    def _grounded(self, answer: str, pad: Scratchpad) -> bool:
        if not pad.findings:
            return False
        evidence = " ".join(f.text for f in pad.findings).lower()
        figures = [f.strip(".,").lower() for f in _FIGURE.findall(answer)]
        if any(f and f not in evidence for f in figures):
            return False
        return bool(figures) or len(_content_words(answer) & _content_words(evidence)) >= 2

    def _final_answer(self, question: str, route: str, pad: Scratchpad, model_answer: str):
        strict = self.settings.generation.strict_grounding
        model_answer = (model_answer or "").strip()
        if model_answer and (route == "general" or not strict or self._grounded(model_answer, pad)):
            return model_answer, "model", {}
        t0 = time.perf_counter()
        if pad.findings:
            chunks = self._finding_chunks(pad)
            ans = answer_question(self.llm, question, chunks, self.settings)
            text = ans.text.strip() or pad.best_findings()[0].text
            return text, "scratchpad", {"kind": "grounded_generation", "latency_s": time.perf_counter() - t0,
                                         "prompt_tokens": ans.prompt_tokens,
                                         "completion_tokens": ans.completion_tokens, "used": ans.used,
                                         "rejected_model_answer": model_answer or None}
        if route == "general" or not strict:
            authorize(self.requester, GENERAL_REASONING, route=route, tool="general_reasoning")
            out = self.llm.chat([ChatMessage("system", GENERAL_SYSTEM), ChatMessage("user", question)],
                                temperature=self.settings.llm.temperature)
            text = (out.text or "").strip() or NO_CONTEXT_ANSWER
            return text, "general_reasoning", {"kind": "general_reasoning", "latency_s": time.perf_counter() - t0,
                                                "prompt_tokens": out.prompt_tokens,
                                                "completion_tokens": out.completion_tokens}
        return NO_CONTEXT_ANSWER, "no_evidence", {"kind": "no_evidence",
                                                  "rejected_model_answer": model_answer or None}

    def _finding_chunks(self, pad: Scratchpad) -> list[RetrievedChunk]:
        """Findings scoring at least ``synthesis_ratio`` of the best, grouped by (source, chunk) into
        RetrievedChunk blocks, best first, within the context budget."""
        ranked = pad.best_findings()
        top = ranked[0].score if ranked else 0.0
        groups: dict[tuple, list[Finding]] = {}
        for f in ranked:
            if top > 0 and f.score < self.synthesis_ratio * top:
                break  # small models answer best from a few strong findings
            groups.setdefault((f.source, f.chunk_index), []).append(f)
        ctx = int(getattr(self.llm, "context_size", 2048) or 2048)
        budget = min(self.settings.generation.context_budget_tokens, max(64, int(ctx * 0.6)))
        chunks, used = [], 0
        for (src, idx), fs in groups.items():
            text = " ".join(f.text for f in fs)
            n = approx_tokens(text) + 8
            if chunks and used + n > budget:
                break
            chunks.append(RetrievedChunk(src, -1 if idx is None else idx, max(f.score for f in fs), text))
            used += n
        return chunks
