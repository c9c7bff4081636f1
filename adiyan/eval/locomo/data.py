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
    category: int
    adversarial_answer: str | None = None

    @property
    def category_name(self) -> str:
        return CATEGORIES[self.category]


@dataclass
class Conversation:
    id: str  # sample_id
    speakers: tuple[str, str]
    turns: list[Turn]
    questions: list[Question]
    session_times: dict[int, str] = field(default_factory=dict)

    @property
    def user(self) -> str:
        """The memory / knowledge-base user this conversation is stored under."""
        return f"locomo-{self.id}"

    @property
    def end(self) -> str:
        """When the questions are asked: the time of the last turn."""
        return self.turns[-1].at


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
    if not isinstance(samples, list) or not samples:
        raise LocomoError(f"{path}: a LoCoMo file is a non-empty JSON list of conversations")
    convs = [_conversation(path, n, s) for n, s in enumerate(samples, 1)]
    ids = [c.id for c in convs]
    if len(set(ids)) != len(ids):
        raise LocomoError(f"{path}: sample ids repeated")
    return LocomoSet(path, convs, hashlib.sha256(data).hexdigest())
