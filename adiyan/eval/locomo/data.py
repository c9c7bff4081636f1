"""The LoCoMo file (snap-research, ACL 2024): conversations, their dated sessions, questions.

``locomo8.json`` (``../shared/datasets/locomo/``) is a JSON list of samples, each with
``sample_id``, ``conversation`` (``speaker_a``, ``speaker_b``, ``session_<n>`` turn lists and
``session_<n>_date_time`` strings such as ``"1:56 pm on 8 May, 2023"``) and ``qa`` (``question``,
``answer`` - or ``adversarial_answer`` for category 5 - ``evidence``: dialog ids ``D<session>:<turn>``,
``category`` 1-5 as in LoCoMo's ``task_eval/evaluation.py``).

Every turn becomes a :class:`Turn` with its text as all paths see it (``"<speaker>: <text>"``,
plus ``" [shares <blip_caption>]"`` for an image turn, as LoCoMo's RAG baselines render images)
and its time: the session's date-time (LoCoMo gives no zone: read as UTC) plus one second per
turn, so the turns of a session keep their order. A session date without turns (the file
lists some) is ignored. Anything malformed raises :class:`LocomoError` naming the file and where.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from ..evalset import EvalsetError

CATEGORIES = {1: "multi_hop", 2: "temporal", 3: "open_domain", 4: "single_hop", 5: "adversarial"}
_SESSION = re.compile(r"^session_(\d+)$")
_DIA = re.compile(r"^D(\d+):(\d+)$")
DATE_FORMAT = "%I:%M %p on %d %B, %Y"  # "1:56 pm on 8 May, 2023"


class LocomoError(EvalsetError):
    """A LoCoMo file that cannot be used; the message names the file and the reason."""


@dataclass(frozen=True)
class Turn:
    dia_id: str  # D<session>:<turn>
    session: int
    speaker: str
    text: str  # as every path sees it: "<speaker>: <text>[ [shares <caption>]]"
    at: str  # UTC ISO-8601


@dataclass(frozen=True)
class Question:
    qid: str  # <sample_id>.q<n>, n from 1 in file order
    conversation: str
    question: str
    answer: str  # the reference answer (category 5: empty; its adversarial_answer is kept apart)
    evidence: tuple[str, ...]
    category: int  # LoCoMo's 1-5; 0 for another benchmark's question (its category_label names it)
    adversarial_answer: str | None = None
    category_label: str | None = None  # LongMemEval's question_type

    @property
    def category_name(self) -> str:
        return self.category_label or CATEGORIES[self.category]


@dataclass
class Conversation:
    id: str  # sample_id
    speakers: tuple[str, str]
    turns: list[Turn]
    questions: list[Question]
    session_times: dict[int, str] = field(default_factory=dict)
    asked_at: str | None = None  # when the questions are asked (LongMemEval's question_date); None: the last turn

    @property
    def user(self) -> str:
        """The memory / knowledge-base user this conversation is stored under."""
        return f"locomo-{self.id}"

    @property
    def end(self) -> str:
        """When the questions are asked: ``asked_at``, else the time of the last turn."""
        return self.asked_at or self.turns[-1].at


@dataclass
class LocomoSet:
    path: Path
    conversations: list[Conversation]
    sha256: str

    @property
    def name(self) -> str:
        return self.path.stem

    def content_hash(self) -> str:
        return self.sha256

    def questions(self) -> list[Question]:
        return [q for c in self.conversations for q in c.questions]

    def turns(self) -> list[Turn]:
        return [t for c in self.conversations for t in c.turns]

    def select(self, only: list[str] | None) -> "LocomoSet":
        """The conversations named in ``only`` (sample ids), in file order; all when None."""
        if not only:
            return self
        known = [c.id for c in self.conversations]
        missing = [x for x in only if x not in known]
        if missing:
            raise LocomoError(f"{self.path}: no conversation {', '.join(missing)} (it has {', '.join(known)})")
        conv = [c for c in self.conversations if c.id in set(only)]
        return LocomoSet(self.path, conv, hashlib.sha256((self.sha256 + "|" + ",".join(c.id for c in conv))
                                                         .encode()).hexdigest())


def parse_session_time(text: str) -> datetime:
    """``"1:56 pm on 8 May, 2023"`` as a UTC datetime (LoCoMo's times carry no zone)."""
    return datetime.strptime(" ".join(str(text).split()), DATE_FORMAT).replace(tzinfo=timezone.utc)


def is_locomo_file(path) -> bool:
    """Whether ``eval.evalset`` names a LoCoMo file: a ``.json`` file (a directory is an authored set)."""
    p = Path(path)
    return p.suffix.lower() == ".json" and not p.is_dir()


def _turn_text(t: dict) -> str:
    text = f"{t['speaker']}: {t['text']}"
    cap = t.get("blip_caption")
    return f"{text} [shares {cap}]" if cap else text


def _conversation(path: Path, n: int, s) -> Conversation:
    where = f"{path}: sample {n}"
    if not isinstance(s, dict) or not isinstance(s.get("conversation"), dict) or not isinstance(s.get("qa"), list):
        raise LocomoError(f"{where}: needs a 'conversation' object and a 'qa' list (LoCoMo's layout)")
    sid = str(s.get("sample_id") or f"conv-{n}")
    where = f"{path}: sample {sid}"
    conv = s["conversation"]
    sessions = sorted(int(m.group(1)) for k in conv if (m := _SESSION.match(k)))
    if not sessions:
        raise LocomoError(f"{where}: no session_<n> turn lists")
    turns, times = [], {}
    for sn in sessions:
        key = f"session_{sn}"
        raw = conv[key]
        if not isinstance(raw, list):
            raise LocomoError(f"{where}: {key} must be a list of turns")
        if not raw:
            continue
        dt_text = conv.get(f"{key}_date_time")
        if not dt_text:
            raise LocomoError(f"{where}: {key} has turns but no {key}_date_time")
        try:
            start = parse_session_time(dt_text)
        except ValueError:
            raise LocomoError(f"{where}: {key}_date_time {dt_text!r} is not like '1:56 pm on 8 May, 2023'") from None
        times[sn] = start.isoformat()
        for i, t in enumerate(raw):
            if not isinstance(t, dict) or not all(isinstance(t.get(k), str) for k in ("speaker", "dia_id", "text")):
                raise LocomoError(f"{where}: {key} turn {i + 1} needs string 'speaker', 'dia_id' and 'text'")
            m = _DIA.match(t["dia_id"])
            if not m or int(m.group(1)) != sn:
                raise LocomoError(f"{where}: {key} turn {i + 1} has dialog id {t['dia_id']!r}, expected D{sn}:<turn>")
            turns.append(Turn(t["dia_id"], sn, t["speaker"], _turn_text(t), (start + timedelta(seconds=i)).isoformat()))
    ids = [t.dia_id for t in turns]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})
        raise LocomoError(f"{where}: dialog ids repeated: {', '.join(dup[:5])}")
    if [t.at for t in turns] != sorted(t.at for t in turns):
        raise LocomoError(f"{where}: session times go backwards; sessions must be in time order")
    qs = []
    for j, q in enumerate(s["qa"], 1):
        if not isinstance(q, dict) or not isinstance(q.get("question"), str) or q.get("category") not in CATEGORIES:
            raise LocomoError(f"{where}: qa {j} needs a 'question' string and a 'category' in 1..5")
        ev = q.get("evidence", [])
        if not isinstance(ev, list) or not all(isinstance(e, str) for e in ev):
            raise LocomoError(f"{where}: qa {j} 'evidence' must be a list of dialog ids")
        if q["category"] != 5 and "answer" not in q:
            raise LocomoError(f"{where}: qa {j} (category {q['category']}) has no 'answer'")
        qs.append(Question(f"{sid}.q{j}", sid, q["question"], "" if q.get("answer") is None else str(q["answer"]),
                           tuple(ev), int(q["category"]), q.get("adversarial_answer")))
    return Conversation(sid, (str(conv.get("speaker_a", "")), str(conv.get("speaker_b", ""))), turns, qs, times)


def load_locomo(path) -> LocomoSet:
    """The LoCoMo file at ``path``, checked (see the module docstring)."""
    path = Path(path)
    if not path.is_file():
        raise LocomoError(f"{path}: LoCoMo file not found")
    data = path.read_bytes()
    try:
        samples = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise LocomoError(f"{path}: not valid JSON ({exc})") from None
    if is_longmemeval(samples):
        return load_longmemeval(path, samples, data)
    if not isinstance(samples, list) or not samples:
        raise LocomoError(f"{path}: a LoCoMo file is a non-empty JSON list of conversations")
    convs = [_conversation(path, n, s) for n, s in enumerate(samples, 1)]
    ids = [c.id for c in convs]
    if len(set(ids)) != len(ids):
        raise LocomoError(f"{path}: sample ids repeated")
    return LocomoSet(path, convs, hashlib.sha256(data).hexdigest())


# ------------------------------------------------------------------------------- LongMemEval
#
# LongMemEval (Wu et al., ICLR 2025) read into the LoCoMo structures, so the same memory paths score it.
#
# LongMemEval is not in ``../shared/datasets/`` (checked 7 December 2026); this loader reads its published
# format (``longmemeval_s.json`` / ``_m`` / ``_oracle``, the cleaned release included) so that a copy
# placed there runs through :func:`adiyan.eval.locomo.run.evaluate` unchanged. The file is a JSON list of
# instances with ``question_id``, ``question_type``, ``question``, ``answer``, ``question_date``,
# ``haystack_session_ids``, ``haystack_dates``, ``haystack_sessions`` (each a list of ``{"role",
# "content"[, "has_answer": true]}`` turns) and ``answer_session_ids``.
#
# Each instance has its own history, so each becomes one :class:`Conversation` (its own memory user,
# ``locomo-<question_id>``) holding one question:
#
# - session ``i`` of the haystack (1-based, file order) and turn ``j`` get the dialog id ``D<i>:<j>``; the
#   turn's text is ``"<role>: <content>"``; its time is the session's date (``"2023/05/20 (Sat) 02:21"``,
#   read as UTC) plus ``j`` seconds;
# - the question's **evidence** is the turns marked ``has_answer`` (LongMemEval's turn-level recall);
#   an abstention question (``question_id`` ending ``_abs``) has none and counts 1, as in LoCoMo;
# - it is asked at ``question_date`` (:attr:`Conversation.asked_at`), not at the last turn;
# - its category is the ``question_type`` (``single-session-user``, ..., ``knowledge-update``), kept as a
#   label: LoCoMo's per-category tables (categories 1-5) hold LoCoMo's only, ``all`` holds these too.
#
# Malformed input raises :class:`LocomoError` naming the file, the instance and the reason.

LME_DATE_FORMAT = "%Y/%m/%d (%a) %H:%M"  # "2023/05/20 (Sat) 02:21"
QUESTION_TYPES = ("single-session-user", "single-session-assistant", "single-session-preference",
                  "multi-session", "knowledge-update", "temporal-reasoning")
LME_REQUIRED = ("question_id", "question", "haystack_sessions", "haystack_dates")


def is_longmemeval(samples) -> bool:
    """Whether parsed JSON looks like LongMemEval (a list of instances with a haystack), not LoCoMo."""
    return isinstance(samples, list) and bool(samples) and isinstance(samples[0], dict) \
        and "haystack_sessions" in samples[0] and "question_id" in samples[0]


def parse_lme_date(text: str) -> datetime:
    """``"2023/05/20 (Sat) 02:21"`` as a UTC datetime (LongMemEval's dates carry no zone)."""
    return datetime.strptime(" ".join(str(text).split()), LME_DATE_FORMAT).replace(tzinfo=timezone.utc)


def _lme_instance(path: Path, n: int, s) -> Conversation:
    where = f"{path}: instance {n}"
    if not isinstance(s, dict) or any(k not in s for k in LME_REQUIRED):
        raise LocomoError(f"{where}: a LongMemEval instance needs {', '.join(LME_REQUIRED)}")
    qid = str(s["question_id"])
    where = f"{path}: instance {qid}"
    sessions, dates = s["haystack_sessions"], s["haystack_dates"]
    if not isinstance(sessions, list) or not isinstance(dates, list) or len(sessions) != len(dates):
        raise LocomoError(f"{where}: haystack_sessions and haystack_dates must be lists of the same length")
    qtype = str(s.get("question_type", ""))
    if qtype not in QUESTION_TYPES:
        raise LocomoError(f"{where}: question_type {qtype!r} is not one of {', '.join(QUESTION_TYPES)}")
    turns, times, evidence = [], {}, []
    for i, (sess, date) in enumerate(zip(sessions, dates), 1):
        if not isinstance(sess, list):
            raise LocomoError(f"{where}: haystack session {i} must be a list of turns")
        try:
            start = parse_lme_date(date)
        except ValueError:
            raise LocomoError(f"{where}: haystack date {date!r} is not like '2023/05/20 (Sat) 02:21'") from None
        times[i] = start.isoformat()
        for j, t in enumerate(sess, 1):
            if not isinstance(t, dict) or t.get("role") not in ("user", "assistant") \
                    or not isinstance(t.get("content"), str):
                raise LocomoError(f"{where}: session {i} turn {j} needs role user|assistant and a content string")
            dia = f"D{i}:{j}"
            turns.append(Turn(dia, i, t["role"], f"{t['role']}: {t['content']}",
                              (start + timedelta(seconds=j)).isoformat()))
            if t.get("has_answer") is True:
                evidence.append(dia)
    if not turns:
        raise LocomoError(f"{where}: the haystack has no turns")
    order = sorted(range(len(turns)), key=lambda k: (turns[k].at, k))  # the file sorts sessions by time (_s, _m)
    turns = [turns[k] for k in order]
    try:
        asked = parse_lme_date(s.get("question_date", "")).isoformat()
    except ValueError:
        raise LocomoError(f"{where}: question_date {s.get('question_date')!r} is not like "
                          f"'2023/05/20 (Sat) 02:21'") from None
    q = Question(f"{qid}.q1", qid, str(s["question"]), str(s.get("answer", "")), tuple(evidence), 0,
                 category_label=qtype + ("_abstention" if qid.endswith("_abs") else ""))
    return Conversation(qid, ("user", "assistant"), turns, [q], times, asked_at=asked)


def load_longmemeval(path, samples: list, data: bytes) -> LocomoSet:
    """The LongMemEval instances ``samples`` (parsed from ``data``, the bytes of ``path``) as a LocomoSet."""
    path = Path(path)
    convs = [_lme_instance(path, n, s) for n, s in enumerate(samples, 1)]
    ids = [c.id for c in convs]
    if len(set(ids)) != len(ids):
        raise LocomoError(f"{path}: question ids repeated")
    return LocomoSet(path, convs, hashlib.sha256(data).hexdigest())
