"""Query transformation before retrieval (``retrieval.query_transform``).

- ``none``: the question as asked.
- ``split``: a question that asks several things ("What does X cost and which hotel is on day
  2?") is cut at question marks, semicolons and at "and" / "also" before a question word; the
  whole question and each part are retrieved and the rankings fused by reciprocal rank
  (``retrieval.rrf_k``), so splitting can add what one part finds without losing the whole
  question's ranking. A question with one part is retrieved as is.
- ``hyde``: Hypothetical Document Embeddings (Gao et al., "Precise Zero-Shot Dense Retrieval
  without Relevance Labels", ACL 2023, https://arxiv.org/abs/2212.10496): the LLM writes a
  short passage that would answer the question and that passage is what is searched. The
  passage is cached by prompt hash. With the embedded 135M model the passages are poor: a
  stronger ``llm`` shows what the method can do.
- ``history_rules`` / ``history_llm``: a follow-up in a conversation ("and how much does it
  cost?", "what about the Julian Alps Weekend?") is rewritten into a standalone question before
  embedding, from the previous turns (``Retriever.retrieve(..., history=[{"role", "content"}])``).
  The rules resolve a pronoun to the newest entity (a product code or a capitalised name) of the
  previous exchange, swap the entity of the previous question for an elliptical "what about X?",
  and otherwise prefix the previous question; the LLM variant asks the model for the standalone
  question as ``{"question": ...}`` under :data:`REWRITE_SCHEMA` through
  :func:`adiyan.models.structured.chat_json` (a grammar, ``response_format`` or Ollama ``format``;
  every reply validated and counted in the LLM's structured counters). A reply that is not
  schema-valid (only possible when the backend cannot constrain, ``structured: none``) is read
  as free text, its first line, as before; an empty one falls back to the message and is
  counted. Cached by prompt hash and structured mode.

The pipeline (:mod:`adiyan.retrieval.pipeline`) searches every transformed query under the
requester's access filter, so the access policy holds whatever the transformation produces.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..models.base import ChatMessage
from ..models.structured import chat_json, structured_mode

QUESTION_WORDS = r"(?:what|which|who|whom|whose|when|where|why|how|is|are|does|do|did|can|could|should|will|would)"
_SPLIT = re.compile(r"\?\s+|;\s+|,?\s+(?:and|also|and also)\s+(?=" + QUESTION_WORDS + r"\b)", re.IGNORECASE)
HYDE_PROMPT = ("Write a short factual passage, two or three sentences, from a company's documents that answers "
               "the question. Do not say you are unsure.\n\nQuestion: {question}\n\nPassage:")


def split_question(question: str) -> list[str]:
    """The parts of a multi-part question (each at least three words), or ``[question]``."""
    parts = [p.strip(" ?;,.") for p in _SPLIT.split(question.strip())]
    parts = [p + "?" for p in parts if len(p.split()) >= 3]
    return parts if len(parts) > 1 else [question]


@dataclass(frozen=True)
class TransformOutcome:
    queries: list[str]  # what is searched, in order (the question itself first when kept)
    failed: str | None = None  # why the transformation fell back to the question, if it did


def hyde_passage(question: str, llm, cache=None, *, max_tokens: int = 96) -> str:
    """The LLM's hypothetical answer passage for ``question`` ("" when the model wrote nothing).

    Cached by prompt hash when ``cache`` is given; an empty generation is not cached, so the
    next run asks again instead of replaying a failure.
    """
    prompt = HYDE_PROMPT.format(question=question)
    key = None
    if cache is not None:
        key = cache.key({"llm": llm.id, "hyde": prompt, "max_tokens": max_tokens})
        hit = cache.get(key)
        if hit is not None and hit.get("text"):
            return hit["text"]
    text = llm.chat([ChatMessage("user", prompt)], max_tokens=max_tokens, temperature=0.0).text.strip()
    if cache is not None and text:
        cache.put(key, {"text": text})
    return text


def transform_query(question: str, mode: str, *, llm=None, cache=None, history=None) -> TransformOutcome:
    """The queries to search for ``question`` under ``mode`` (none | split | hyde | history_*)."""
    if mode in HISTORY_MODES:
        if history is None:
            raise ValueError(f"retrieval.query_transform={mode} needs the conversation history (history=[])")
        if mode == "history_rules":
            rewritten = rewrite_followup(question, history)
            narrowed = fragment_query(question, history)
            # a fragment ("And for a group?") is also searched without the previous subject, so what
            # narrows it (the group discount) can rank beside the subject's own chunks (fused)
            return TransformOutcome([rewritten] + ([narrowed] if narrowed and narrowed != rewritten else []))
        if llm is None:
            raise ValueError("retrieval.query_transform=history_llm needs an LLM (llm.name)")
        text = llm_rewrite(question, history, llm, cache)
        if not text:
            return TransformOutcome([question], failed="history_llm: the LLM wrote nothing; searched the message")
        return TransformOutcome([text])
    if mode == "none":
        return TransformOutcome([question])
    if mode == "split":
        parts = split_question(question)
        return TransformOutcome(parts if parts == [question] else [question, *parts])
    if mode == "hyde":
        if llm is None:
            raise ValueError("retrieval.query_transform=hyde needs an LLM (llm.name)")
        passage = hyde_passage(question, llm, cache)
        if not passage:  # counted by the pipeline and reported, never relabelled as a HyDE search
            return TransformOutcome([question], failed="hyde: the LLM wrote an empty passage; searched the question")
        return TransformOutcome([passage])
    raise ValueError(f"retrieval.query_transform: unknown mode {mode!r} (none | split | hyde | history_rules | history_llm)")


def transformed_queries(question: str, mode: str, *, llm=None, cache=None, history=None) -> list[str]:
    return transform_query(question, mode, llm=llm, cache=cache, history=history).queries


# -- the history transformation: a follow-up rewritten into a standalone question -------------------
HISTORY_MODES = ("history_rules", "history_llm")
_CODE = re.compile(r"\b[A-Z]{2}-[A-Z]{2,4}-\d{1,3}\b")
_WORD = re.compile(r"[A-Za-zÀ-ž][\wÀ-ž'’.-]*")
# capitalised words that start questions or stand for the speaker, never an entity
_NOT_ENTITY = {"I", "I'm", "I've", "I'd", "I'll", "Im", "A", "An", "The", "And", "But", "So", "Or", "If", "Is", "Are",
               "Do", "Does", "Did", "Can", "Could", "Will", "Would", "Should", "May", "What", "Which", "Who", "Whom",
               "Whose", "When", "Where", "Why", "How", "Tell", "Please", "Yes", "No", "OK", "Ok", "Thanks", "Thank",
               "My", "Our", "We", "You", "Your", "It", "Its", "This", "That", "There", "They", "Just", "Also", "Hi",
               "Hello", "Good", "Update", "Change", "In", "On", "At", "For", "With", "From", "To", "Be", "Explain",
               "Always", "Never", "Every", "Ask", "Give", "Let", "Let's", "Now"}
_CONNECTOR = {"of", "am", "de", "di", "del", "von", "van", "la", "le"}
_PRONOUN = re.compile(r"\b(?:(?:that|this|the same|those|these)\s+(?:tour|trip|trek|hut|hotel|voucher|form|one|place|"
                      r"route|code|guide|weekend|discount)|its|it|them|they|their|there|that|this|one|he|she|him|her)\b",
                      re.IGNORECASE)
_EXISTENTIAL = re.compile(r"\b(?:is|are|was|were|be)\s+there\b|\bthere\s+(?:is|are|was|were)\b", re.IGNORECASE)
_ELLIPSIS = re.compile(r"^\s*(?:(?:and|but|so)\s+)?(?:what|how)\s+about\s+(?P<x>.+?)\s*[?.!]*\s*$", re.IGNORECASE)
# a verbless fragment that narrows the previous question: "And for a group?", "What about in winter?"
_FRAGMENT = re.compile(r"^\s*(?:(?:and|but|so|also|ok|okay)\b[\s,]*|(?:and\s+)?(?:what|how)\s+about\s+)"
                       r"(?P<x>(?:for|with|in|on|at|during|by|without|after|before|from|per|under|over)\b"
                       r"[^?.!]{0,60})\s*[?.!]*\s*$", re.IGNORECASE)
_PLACEHOLDER_QUESTION = re.compile(r"^\s*(?:<[^>]*>|\.\.\.|…|standalone question|question)?\s*$", re.IGNORECASE)
_LEADING = re.compile(r"^\s*(?:and|but|so|also|ok|okay)\b[\s,]*", re.IGNORECASE)
LLM_REWRITE_PROMPT = (
    "Rewrite the user's last message as one standalone question that can be understood without the "
    "conversation. Replace pronouns with what they refer to and keep names, codes and numbers. Reply with one "
    "JSON object whose \"question\" is the standalone question.\n\nConversation:\n{history}\n\n"
    "Last message: {message}\n\nStandalone question as JSON:")
REWRITE_MAX_TOKENS = 128
# the rewrite's reply; maxLength keeps a grammar-held reply closed within REWRITE_MAX_TOKENS
REWRITE_SCHEMA = {"type": "object",
                  "properties": {"question": {"type": "string", "minLength": 1, "maxLength": REWRITE_MAX_TOKENS - 16}},
                  "required": ["question"], "additionalProperties": False}


def entities(text: str) -> list[str]:
    """Capitalised names and product codes in ``text``: names of several words, then codes, then
    single capitalised words (weak: never substituted for a pronoun), each group in order."""
    codes = _CODE.findall(text)
    multi, single = [], []
    for sentence in re.split(r"(?<=[.?!])\s+", text):
        words = [(m.group().rstrip(".,;:!?'’"), m.start()) for m in _WORD.finditer(sentence)]
        run: list[str] = []
        for i, (w, _) in enumerate(words + [("", -1)]):
            cap = bool(w) and w[0].isupper() and w not in _NOT_ENTITY and not _CODE.fullmatch(w)
            if cap or (run and w.lower() in _CONNECTOR and i + 1 < len(words) and words[i + 1][0][:1].isupper()):
                run.append(w)
                continue
            if run:
                (multi if len(run) > 1 else single).append(" ".join(run))
            run = []
    return list(dict.fromkeys(multi + codes + single))


def _previous(history) -> tuple[str | None, str | None]:
    """The previous user message and the assistant's reply after it (either may be None)."""
    turns = [t for t in history if t.get("content")]
    user = reply = None
    for t in reversed(turns):
        if t.get("role") == "assistant" and user is None and reply is None:
            reply = t["content"]
        elif t.get("role") == "user":
            user = t["content"]
            break
    return user, reply


def rewrite_followup(message: str, history) -> str:
    """``message`` as a standalone question, by rules, given the earlier ``history`` turns.

    Earlier user turns are first rewritten the same way (oldest first), so a chain of follow-ups
    resolves against its first named subject. An empty history returns the message unchanged.
    """
    resolved: list[dict] = []
    base = None  # the last question a fragment narrows: the last user turn that was no fragment, resolved
    for t in history:
        if t.get("role") == "user" and t.get("content"):
            resolved.append({"role": "user", "content": _rewrite_one(t["content"], resolved, base)})
            if not _is_fragment(t["content"]):
                base = resolved[-1]["content"]
        elif t.get("content"):
            resolved.append({"role": t.get("role", "assistant"), "content": t["content"]})
    return _rewrite_one(message, resolved, base)


def fragment_query(message: str, history) -> str | None:
    """For a fragment follow-up, the question it narrows (resolved, as ``rewrite_followup`` resolves
    it) without its named subject (names of several words and product codes), narrowed by the
    fragment: "How much does the Julian Alps Weekend cost?" + "And for a group?" -> "How much does
    it cost for a group?". None for any other message."""
    frag = _fragment(message)
    if not frag:
        return None
    turns = list(history)
    idx = next((i for i in range(len(turns) - 1, -1, -1) if turns[i].get("role") == "user"
                and turns[i].get("content") and not _is_fragment(turns[i]["content"])), None)
    if idx is None:
        return None
    frame = rewrite_followup(turns[idx]["content"], turns[:idx]).strip().rstrip("?.! ")
    for e in entities(frame):
        if " " in e or _CODE.fullmatch(e):
            frame = re.sub(r"(?:\bthe\s+)?" + re.escape(e) + r"(?:'s)?", "it", frame, flags=re.IGNORECASE)
    return f"{' '.join(frame.split())} {frag.group('x').strip()}?"


# a tail that asks or refers is a question of its own ("So by when should I pay for it?"), no fragment
_NOT_FRAGMENT_TAIL = re.compile(r"\b(what|when|where|who|whom|whose|which|why|how|it|its|they|them|their|this|that|"
                                r"should|shall|do|does|did|is|are|was|were|can|could|will|would|i|we|you|my|our)\b",
                                re.IGNORECASE)


def _fragment(message: str):
    m = _FRAGMENT.match(message)
    if not m or entities(message) or _NOT_FRAGMENT_TAIL.search(m.group("x")):
        return None
    return m


def _is_fragment(message: str) -> bool:
    return _fragment(message) is not None


def _rewrite_one(message: str, history: list[dict], base: str | None = None) -> str:
    prev, reply = _previous(history)
    if prev is None:
        return message
    frag = _fragment(message)
    if frag:
        # "And for a group?": the question it narrows, asked for that ("And for a child of 8?" after
        # it narrows the same question again, not the group's)
        q = base or prev
        return f"{q.strip().rstrip('?.! ')} {frag.group('x').strip()}?"
    m = _ELLIPSIS.match(message)
    if m:  # "what about X?": the previous question with X in place of its subject
        x = re.sub(r"^(?:the)\s+", "", m.group("x").strip(), flags=re.IGNORECASE)
        subject = next(iter(entities(prev)), None)
        return prev.replace(subject, x, 1) if subject else f"{prev} {x}"
    own = entities(message)
    text = _EXISTENTIAL.sub(lambda mm: mm.group().replace("there", "thére"), message)  # shield "is there"
    pron = _PRONOUN.search(text)
    connector = bool(_LEADING.match(message))
    if pron is None and (own or not connector):
        return message
    strong = [e for src in (reply, prev) if src for e in entities(src) if " " in e or _CODE.fullmatch(e)]
    referent = strong[0] if strong else None
    body = _LEADING.sub("", message)
    word = pron.group() if pron is not None else ""
    noun = word.split()[-1].lower() if " " in word else None
    if noun and noun != "one" and referent and noun not in referent.lower():
        referent = None  # "that voucher" does not name the tour of the previous turn: keep the question
    if pron is not None and referent and not own:
        sub = f"{referent}'s" if word.lower() == "its" else (f"at {referent}" if word.lower() == "there" else referent)
        body = _LEADING.sub("", text[: pron.start()] + sub + text[pron.end():]).replace("thére", "there")
        return body[:1].upper() + body[1:]
    return f"{prev.rstrip()} {body}"  # no referent to put in: the previous question carries the subject


def llm_rewrite(message: str, history, llm, cache=None, *, max_tokens: int = REWRITE_MAX_TOKENS,
                turns: int = 6) -> str:
    """The LLM's standalone version of ``message`` ("" when it wrote nothing usable), through the
    structured layer (see the module docstring), cached by prompt hash and structured mode."""
    lines = [f"{'User' if t.get('role') == 'user' else 'Assistant'}: {t['content']}"
             for t in list(history)[-turns:] if t.get("content")]
    if not lines:
        return message
    prompt = LLM_REWRITE_PROMPT.format(history="\n".join(lines), message=message)
    key = None
    if cache is not None:
        key = cache.key({"llm": llm.id, "history_rewrite": prompt, "max_tokens": max_tokens,
                         "structured": structured_mode(llm), "schema": REWRITE_SCHEMA})
        hit = cache.get(key)
        if hit is not None and hit.get("text"):
            return hit["text"]
    reply = chat_json(llm, [ChatMessage("user", prompt)], REWRITE_SCHEMA, name="history_rewrite",
                      max_tokens=max_tokens, temperature=0.0)
    if reply.ok:
        text = reply.value["question"].strip()
    else:  # free text (counted as a parse failure by chat_json): its first line, as before structured calls
        text = (reply.text or "").strip()
        text = text.splitlines()[0].strip().strip('"') if text else ""
    if _PLACEHOLDER_QUESTION.match(text):
        text = ""  # the prompt's wording echoed back is no rewrite
    if cache is not None and text:
        cache.put(key, {"text": text})
    return text
