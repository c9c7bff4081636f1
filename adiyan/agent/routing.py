"""Routing: the rule-based classifier that sends a message to a route, and the route's check.

Each route needs one capability (``policy``); ``route_request`` classifies and authorizes in one
step. Rules only (regular expressions), so routing is cheap, deterministic and testable
without a model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .policy import GENERAL_REASONING, KB_READ, KB_READ_FULL_TEXT, MEMORY_READ, Requester, authorize


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
