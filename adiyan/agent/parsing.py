"""Parsing the model's reply into a tool call, tolerant to the noise small models produce.

``parse_action`` accepts ``Action: name`` / ``Action Input: {json}``, JSON action objects,
inline calls ``name(arg=...)`` and ``Final Answer:``; tool and argument names are resolved
through aliases, and argument keys the tool does not declare are dropped and reported (the
model can never pass an identity). Pure functions over text and the tool registry.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Mapping

from .tools import TOOL_ALIASES, ToolSpec

_PRIMARY = {"search_kb": "query", "search_document": "query", "find_document": "query", "read_document": "source",
            "search_memory": "query", "finish": "answer"}
_ARG_ALIASES = {"q": "query", "search": "query", "text": "query", "question": "query", "keywords": "query",
                "document": "source", "doc": "source", "file": "source", "filename": "source",
                "source_filename": "source", "final_answer": "answer", "response": "answer"}


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
        if obj and isinstance(obj.get("action"), dict):  # the structured shape {"action": {...}}
            obj = obj["action"]
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


# -- structured actions (issue 25): the reply held to a JSON schema by the backend ----------------

ACTION_OVERHEAD_TOKENS = 48  # the JSON around the arguments, whitespace included


def action_schema(tools, *, max_tokens: int = 160) -> dict:
    """The JSON schema of one action over ``tools`` (the tier's visible tools, in order):
    ``{"action": {"tool": <one tool's name>, "args": <that tool's arguments>}}``. One alternative
    per tool, so a tool name outside the tier cannot be written and each tool's arguments are its
    own (every argument a non-empty string, no other key: the model can never pass an identity).
    The root is an object (OpenAI's structured outputs refuse a root ``anyOf``).

    The arguments' ``maxLength`` keeps the whole action within ``max_tokens`` (a character can be
    a token: digits are), so a grammar-held reply is closed before the token limit cuts it."""
    alternatives = []
    for t in tools:
        room = max(16, (max_tokens - ACTION_OVERHEAD_TOKENS) // max(1, len(t.params)))
        props = {p: {"type": "string", "minLength": 1, "maxLength": room} for p in t.params}
        alternatives.append({"type": "object",
                             "properties": {"tool": {"type": "string", "enum": [t.name]},
                                            "args": {"type": "object", "properties": props,
                                                     "required": list(t.params), "additionalProperties": False}},
                             "required": ["tool", "args"], "additionalProperties": False})
    return {"type": "object", "properties": {"action": {"anyOf": alternatives}}, "required": ["action"],
            "additionalProperties": False}


def parse_structured_action(value: dict, tools: Mapping[str, ToolSpec], *, question: str = "") -> ParsedAction:
    """A schema-valid action object (see :func:`action_schema`) as a ParsedAction; placeholders
    (``<query>``, ``...``) are refused as in :func:`parse_action`, and an empty or placeholder
    query searches for the question."""
    action = value.get("action") if isinstance(value, dict) else None
    tool = action.get("tool") if isinstance(action, dict) else None
    if tool not in tools:
        return ParsedAction(None, {}, False, f"unknown tool {str(tool)[:60]!r}")
    spec = tools[tool]
    args = {k: str(v).strip() for k, v in (action.get("args") or {}).items() if k in spec.params}
    ignored = [str(k) for k in (action.get("args") or {}) if k not in spec.params]
    for p in spec.params:
        if not args.get(p) or _PLACEHOLDER.match(args[p]):
            if p == "query" and question:
                args[p] = question
                continue
            return ParsedAction(tool, args, False, f"{tool}: missing or placeholder argument {p!r}", ignored)
    return ParsedAction(tool, args, True, None, ignored)
