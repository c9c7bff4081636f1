"""An LLM judge held to account: cached, validated, timed out, and every failure counted.

``Judge`` wraps any adiyan LLM (``llm.chat(messages, max_tokens=, temperature=)``, ``llm.id``)
and answers one question at a time: ``judge.ask(prompt, schema)`` sends the prompt, pulls a
JSON object out of the reply (tolerating code fences and leading or trailing prose), validates
it against a small pydantic model and returns a :class:`JudgeResult` whose ``value`` is the
validated model or ``None``. The status is one of

- ``ok``               a JSON object that validates against the schema;
- ``invalid_json``     no JSON object could be decoded from the reply (prose, truncated JSON...);
- ``schema_mismatch``  JSON was decoded but none of it validates against the schema;
- ``timeout``          the call did not return within ``timeout_s``;
- ``error``            the LLM call raised (server down, context overflow, ...).

A failed judgement is never a number: ``value`` is ``None``, ``judge.stats`` counts it under
its status and ``judge.failures`` lists it as ``(metric, sample_id, status, raw_excerpt)``.
For every ``ask``, exactly one of ``ok / invalid_json / schema_mismatch / timeout / error`` is
incremented, so they always sum to ``calls``; ``cached`` counts how many of those ``calls``
were answered from disk, and ``llm_calls`` how many times the model was really called
(including retries).

Timeouts. Each LLM call runs in a daemon worker thread and the judge waits at most
``timeout_s`` for it. A call cannot be interrupted (llama.cpp generation in-process has no
cancel; a blocking HTTP read neither), so a timed-out call is *abandoned*: its thread runs on
in the background, its eventual answer is discarded, the timeout is counted, and the judge
moves on to the next prompt. An in-process llama.cpp model holds a lock while it generates,
so the next call could not start before the abandoned generation ends (bounded by
``max_tokens``); to keep one timeout from cascading into the next call's deadline, the judge
first waits up to ``settle_s`` (default: ``timeout_s``) for abandoned calls to finish, once per
abandoned call, outside any deadline, then gives up on them and goes on (a remote server that
hangs costs at most one extra ``settle_s``). ``stats.abandoned`` counts abandoned calls;
:meth:`Judge.abandoned_running` says how many are still running.

Cache. Results are cached in a :class:`~adiyan.cache.CallCache` under a key made from the
judge's model id, the schema's name and JSON schema, the system prompt, the prompt,
``max_tokens`` and ``temperature``. Failures are cached too, *with their status*: they are
never stored or replayed as successes. A cached failure is replayed as the same failure
(counted again, listed again, ``cached=True``) unless ``retry_cached_failures`` is ``True``
(retry every failed status) or a set of statuses to retry (e.g. ``{"timeout", "error"}``
after a server outage), in which case the model is asked again.

Calibration. :func:`make_calibration_pairs` turns an evalset into labelled pairs: the gold
answer (label ``correct``) and a corrupted copy (a number changed, a name swapped or a
statement negated; label ``corrupted``), each with a context that supports the gold answer.
:func:`calibrate` asks the judge "is this answer supported by the context?" for every pair
and reports the agreement with the labels. A failed judgement counts as a disagreement in
``agreement`` (the headline figure; ``agreement_valid`` leaves failures out) and is listed.
``Calibration.reliable`` is ``agreement >= reliable_threshold`` (default 0.8): metrics from a
judge below it are to be shown as unreliable.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import random
import re
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Collection, Iterable, Literal, Mapping, NamedTuple, Sequence, Type

from pydantic import BaseModel, ConfigDict, StrictBool, ValidationError

STATUSES = ("ok", "invalid_json", "schema_mismatch", "timeout", "error")
FAILED_STATUSES = frozenset(STATUSES[1:])
Status = Literal["ok", "invalid_json", "schema_mismatch", "timeout", "error"]

DEFAULT_SYSTEM_PROMPT = ("You are a strict evaluator. Follow the instructions exactly and reply with one "
                         "JSON object only, no other text.")
RETRY_SUFFIX = "\n\nReply with a single JSON object that matches the schema, and nothing else."
EXCERPT_CHARS = 300
DEFAULT_RELIABLE_THRESHOLD = 0.8

# metric / sample id of the judgement being asked, so that calls made deep inside a metric
# library (which knows nothing of our ids) are still attributed in the failure list.
_SCOPE: contextvars.ContextVar[tuple[str | None, str | None]] = contextvars.ContextVar(
    "adiyan_judge_scope", default=(None, None))


class JudgeFailure(NamedTuple):
    metric: str | None
    sample_id: str | None
    status: str
    raw: str  # excerpt of the judge's reply, or the error message


@dataclass
class JudgeResult:
    value: BaseModel | None
    status: Status
    raw: str
    cached: bool
    error: str = ""  # validation / exception message for failures
    attempts: int = 0  # LLM calls made for this result (0 when cached)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class JudgeStats:
    calls: int = 0  # asks
    cached: int = 0  # asks answered from the on-disk cache
    ok: int = 0
    invalid_json: int = 0
    schema_mismatch: int = 0
    timeout: int = 0
    error: int = 0
    llm_calls: int = 0  # real model calls, retries included
    retries: int = 0  # re-asks after a failed attempt
    abandoned: int = 0  # timed-out calls left running in the background

    @property
    def failed(self) -> int:
        return self.invalid_json + self.schema_mismatch + self.timeout + self.error

    def add(self, status: str, *, cached: bool) -> None:
        self.calls += 1
        self.cached += int(cached)
        setattr(self, status, getattr(self, status) + 1)

    def as_dict(self) -> dict:
        return {**asdict(self), "failed": self.failed}


class JudgeCallFailed(RuntimeError):
    """Raised by adapters (e.g. the ragas one) when a judgement failed; carries the result."""

    def __init__(self, result: JudgeResult):
        self.result = result
        super().__init__(f"judge call failed: {result.status}: {result.error or _excerpt(result.raw, 120)}")


class _Timeout(Exception):
    pass


def _excerpt(text: str, n: int = EXCERPT_CHARS) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= n else text[: n - 1] + "…"


# ---------------------------------------------------------------- JSON extraction

_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n?(.*?)```", re.S)


def json_candidates(text: str) -> list[Any]:
    """Every JSON value a reply plausibly holds, most specific first.

    The whole reply; then the contents of ```json fences```; then each top-level ``{...}`` /
    ``[...]`` found by scanning (so leading prose like "Sure! Here it is:" and trailing
    remarks are skipped). Nothing is repaired: truncated or single-quoted JSON yields nothing.
    """
    text = (text or "").strip()
    out: list[Any] = []
    dec = json.JSONDecoder()
    try:
        out.append(json.loads(text))
    except ValueError:
        pass
    for block in _FENCE.findall(text):
        try:
            out.append(json.loads(block.strip()))
        except ValueError:
            pass
    i = 0
    while i < len(text):
        if text[i] in "{[":
            try:
                value, end = dec.raw_decode(text, i)
            except ValueError:
                i += 1
                continue
            out.append(value)
            i = end
        else:
            i += 1
    return out


def parse_reply(raw: str, schema: Type[BaseModel]) -> tuple[BaseModel | None, Status, str]:
    """(validated value, status, error message) for one reply; the first candidate that
    validates wins."""
    cands = json_candidates(raw)
    if not cands:
        return None, "invalid_json", "no JSON object found in the reply"
    first_error = ""
    for c in cands:
        if not isinstance(c, dict):
            first_error = first_error or f"expected a JSON object, got {type(c).__name__}"
            continue
        try:
            return schema.model_validate(c), "ok", ""
        except ValidationError as exc:
            first_error = first_error or "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in exc.errors()[:5])
    return None, "schema_mismatch", first_error


def _schema_fingerprint(schema: Type[BaseModel]) -> str:
    canon = json.dumps(schema.model_json_schema(), sort_keys=True)
    return hashlib.sha256(canon.encode()).hexdigest()[:16]


# ---------------------------------------------------------------- the judge

class Judge:
    """Any adiyan LLM as a judge: see the module docstring for the contract."""

    def __init__(self, llm, cache, *, timeout_s: float | None = 120.0, max_retries: int = 1,
                 max_tokens: int = 512, temperature: float = 0.0,
                 system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
                 retry_cached_failures: bool | Collection[str] = False, settle_s: float | None = None):
        if timeout_s is not None and timeout_s <= 0:
            raise ValueError("timeout_s must be > 0 (or None for no deadline)")
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        self.llm = llm
        self.cache = cache
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.system_prompt = system_prompt
        self.settle_s = timeout_s if settle_s is None else settle_s
        if retry_cached_failures is True:
            self._retry_cached = set(FAILED_STATUSES)
        elif not retry_cached_failures:
            self._retry_cached = set()
        else:
            unknown = set(retry_cached_failures) - FAILED_STATUSES
            if unknown:
                raise ValueError(f"retry_cached_failures: unknown statuses {sorted(unknown)}")
            self._retry_cached = set(retry_cached_failures)
        self.stats = JudgeStats()
        self.by_metric: dict[str, JudgeStats] = {}
        self.failures: list[JudgeFailure] = []  # final failures of asks
        self.retried: list[JudgeFailure] = []  # failed attempts that were retried
        self._lock = threading.Lock()
        self._abandoned: list[threading.Thread] = []  # every abandoned call
        self._to_settle: list[threading.Thread] = []  # abandoned calls not yet waited for

    @property
    def id(self) -> str:
        return str(getattr(self.llm, "id", type(self.llm).__name__))

    def describe(self) -> dict:
        return {"id": self.id, "timeout_s": self.timeout_s, "settle_s": self.settle_s,
                "max_retries": self.max_retries,
                "max_tokens": self.max_tokens, "temperature": self.temperature,
                "retry_cached_failures": sorted(self._retry_cached)}

    @contextlib.contextmanager
    def scope(self, metric: str | None = None, sample_id: str | None = None):
        """Attribute the judgements asked inside this block to ``metric`` / ``sample_id``."""
        token = _SCOPE.set((metric, None if sample_id is None else str(sample_id)))
        try:
            yield
        finally:
            _SCOPE.reset(token)

    def abandoned_running(self) -> int:
        with self._lock:
            self._abandoned = [t for t in self._abandoned if t.is_alive()]
            return len(self._abandoned)

    def stats_dict(self) -> dict:
        return {**self.stats.as_dict(), "by_metric": {m: s.as_dict() for m, s in self.by_metric.items()},
                "abandoned_running": self.abandoned_running()}

    def cache_key(self, prompt: str, schema: Type[BaseModel]) -> str:
        return self.cache.key({"kind": "judge", "judge": self.id, "schema": schema.__name__,
                               "schema_sha": _schema_fingerprint(schema), "system": self.system_prompt,
                               "prompt": prompt, "max_tokens": self.max_tokens,
                               "temperature": self.temperature})

    def ask(self, prompt: str, schema: Type[BaseModel], *, metric: str | None = None,
            sample_id: str | None = None) -> JudgeResult:
        scope_metric, scope_sample = _SCOPE.get()
        metric = metric if metric is not None else scope_metric
        sample_id = sample_id if sample_id is not None else scope_sample
        key = self.cache_key(prompt, schema)
        hit = self.cache.get(key)
        result = None
        if hit is not None and not (hit.get("status") in self._retry_cached):
            result = self._from_cache(hit, schema)
        if result is None:
            result = self._ask_llm(prompt, schema, metric, sample_id)
            self.cache.put(key, {"status": result.status, "raw": result.raw, "error": result.error,
                                 "value": result.value.model_dump(mode="json") if result.value is not None
                                 else None, "judge": self.id, "schema": schema.__name__,
                                 "at": time.time()})
        self._record(result, metric, sample_id)
        return result

    # -- internals

    def _from_cache(self, hit: dict, schema: Type[BaseModel]) -> JudgeResult | None:
        status = hit.get("status")
        raw = hit.get("raw") or ""
        if status == "ok":
            try:
                return JudgeResult(schema.model_validate(hit["value"]), "ok", raw, True)
            except (ValidationError, KeyError, TypeError):
                return None  # stale entry (schema changed under the same name): ask again
        if status in FAILED_STATUSES:
            return JudgeResult(None, status, raw, True, hit.get("error") or "")
        return None

    def _record(self, result: JudgeResult, metric: str | None, sample_id: str | None) -> None:
        with self._lock:
            self.stats.add(result.status, cached=result.cached)
            if metric is not None:
                self.by_metric.setdefault(metric, JudgeStats()).add(result.status, cached=result.cached)
            if result.status != "ok":
                self.failures.append(JudgeFailure(metric, sample_id, result.status,
                                                  _excerpt(result.raw or result.error)))

    def _messages(self, prompt: str) -> list[dict]:
        msgs = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return msgs + [{"role": "user", "content": prompt}]

    def _ask_llm(self, prompt: str, schema, metric, sample_id) -> JudgeResult:
        attempts = 0
        while True:
            attempts += 1
            with self._lock:
                self.stats.llm_calls += 1
                if metric is not None:
                    self.by_metric.setdefault(metric, JudgeStats()).llm_calls += 1
            text = prompt if attempts == 1 else prompt + RETRY_SUFFIX
            raw, error = "", ""
            try:
                raw = self._call_with_deadline(self._messages(text))
                value, status, error = parse_reply(raw, schema)
            except _Timeout:
                value, status, error = None, "timeout", f"no reply within {self.timeout_s}s (call abandoned)"
            except Exception as exc:  # noqa: BLE001 - any model failure is a counted judge error
                value, status, error = None, "error", f"{type(exc).__name__}: {exc}"
            result = JudgeResult(value, status, raw, False, error, attempts)
            if status == "ok" or attempts > self.max_retries:
                return result
            with self._lock:
                self.stats.retries += 1
                self.retried.append(JudgeFailure(metric, sample_id, status, _excerpt(raw or error)))

    def _settle(self) -> None:
        """Wait, at most ``settle_s`` in all and once per abandoned call, for abandoned calls to
        finish before a new call starts (see the module docstring)."""
        with self._lock:
            pending, self._to_settle = self._to_settle, []
        if not pending or not self.settle_s:
            return
        deadline = time.monotonic() + self.settle_s
        for worker in pending:
            worker.join(max(0.0, deadline - time.monotonic()))

    def _call_with_deadline(self, messages: list[dict]) -> str:
        self._settle()
        if self.timeout_s is None:
            return self.llm.chat(messages, max_tokens=self.max_tokens, temperature=self.temperature).text
        box: dict[str, Any] = {}
        done = threading.Event()

        def run():
            try:
                box["text"] = self.llm.chat(messages, max_tokens=self.max_tokens,
                                            temperature=self.temperature).text
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
                box["exc"] = exc
            finally:
                done.set()

        worker = threading.Thread(target=run, name="adiyan-judge-call", daemon=True)
        worker.start()
        if not done.wait(self.timeout_s):
            with self._lock:
                self.stats.abandoned += 1
                self._abandoned.append(worker)
                self._to_settle.append(worker)
            raise _Timeout()
        if "exc" in box:
            raise box["exc"]
        return box.get("text") or ""


def judge_from_settings(settings, *, cache=None, **judge_kwargs) -> Judge | None:
    """The judge named by ``settings.eval.judge`` (None when no judge is configured).

    The name is an LLM name as in ``llm.name`` (``smollm2``, ``ollama:NAME``,
    ``openai-compatible:URL``, ``gguf:PATH``); ``eval.judge_url`` is the server URL. Optional
    settings read when present: ``eval.judge_model``, ``eval.judge_timeout_s`` (default
    ``llm.timeout_s``), ``eval.judge_max_tokens``. Judgements are cached in
    ``<cache_dir>/calls.sqlite`` under the ``judge`` namespace.
    """
    from ..cache import CallCache
    from ..models import load_llm

    ev = settings.eval
    if not ev.judge:
        return None
    timeout_s = getattr(ev, "judge_timeout_s", None) or settings.llm.timeout_s
    llm = load_llm(ev.judge, url=ev.judge_url, model=getattr(ev, "judge_model", None),
                   context_size=settings.llm.context_size, temperature=0.0,
                   max_tokens=getattr(ev, "judge_max_tokens", None) or 512, seed=settings.llm.seed,
                   timeout_s=timeout_s, api_key_env=settings.llm.api_key_env)
    cache = cache or CallCache(Path(settings.paths.cache_dir) / "calls.sqlite", "judge")
    judge_kwargs.setdefault("timeout_s", timeout_s)
    judge_kwargs.setdefault("max_tokens", getattr(ev, "judge_max_tokens", None) or 512)
    return Judge(llm, cache, **judge_kwargs)


# ---------------------------------------------------------------- calibration

Label = Literal["correct", "corrupted"]


@dataclass
class CalibrationPair:
    id: str
    question: str
    context: str
    answer: str
    label: Label
    corruption: str = ""  # for corrupted pairs: "number: 450 -> 900", "name: A -> B", "negation: ..."


@dataclass
class Calibration:
    agreement: float | None  # matches / n; a failed judgement counts as a disagreement
    n: int
    per_label: dict[str, dict[str, int]]  # label -> {n, agree, disagree, failed}
    failures: list[JudgeFailure]
    reliable_threshold: float = DEFAULT_RELIABLE_THRESHOLD
    judge: str = ""
    per_corruption: dict[str, dict[str, int]] = field(default_factory=dict)
    verdicts: list[dict] = field(default_factory=list)  # per pair: id, label, supported|None, status

    @property
    def n_failed(self) -> int:
        return sum(v["failed"] for v in self.per_label.values())

    @property
    def agreement_valid(self) -> float | None:
        """Agreement over the pairs the judge answered validly (failures left out)."""
        valid = self.n - self.n_failed
        agree = sum(v["agree"] for v in self.per_label.values())
        return round(agree / valid, 6) if valid else None

    @property
    def reliable(self) -> bool:
        return self.agreement is not None and self.agreement >= self.reliable_threshold

    def as_dict(self) -> dict:
        return {"judge": self.judge, "agreement": self.agreement, "agreement_valid": self.agreement_valid,
                "n": self.n, "n_failed": self.n_failed, "reliable": self.reliable,
                "reliable_threshold": self.reliable_threshold, "per_label": self.per_label,
                "per_corruption": self.per_corruption,
                "failures": [f._asdict() for f in self.failures], "verdicts": self.verdicts}


class SupportVerdict(BaseModel):
    """The calibration question's answer: strict true/false, no "yes" or 1."""

    model_config = ConfigDict(extra="ignore")
    supported: StrictBool


CALIBRATION_PROMPT = """Decide whether the answer is supported by the context: every fact the answer states must be stated in the context. An answer that changes a number, a name or a negation is NOT supported.

Context:
{context}

Question: {question}

Answer: {answer}

Is this answer supported by the context? Reply with JSON only: {{"supported": true}} or {{"supported": false}}"""


def calibration_prompt(pair: CalibrationPair) -> str:
    return CALIBRATION_PROMPT.format(context=pair.context.strip(), question=pair.question.strip(),
                                     answer=pair.answer.strip())


def calibrate(judge: Judge, pairs: Sequence[CalibrationPair], *,
              reliable_threshold: float = DEFAULT_RELIABLE_THRESHOLD, metric: str = "calibration",
              progress: bool = False) -> Calibration:
    """Score the judge on labelled pairs: agreement = fraction of pairs whose verdict matches
    the label (``supported`` for ``correct``, not supported for ``corrupted``); failed
    judgements count as disagreements and are listed."""
    per_label = {lab: {"n": 0, "agree": 0, "disagree": 0, "failed": 0} for lab in ("correct", "corrupted")}
    per_corruption: dict[str, dict[str, int]] = {}
    failures: list[JudgeFailure] = []
    verdicts = []
    agree_total = 0
    from tqdm.auto import tqdm

    for pair in tqdm(pairs, desc="judge calibration", unit="pair", disable=not progress, leave=False):
        if pair.label not in per_label:
            raise ValueError(f"pair {pair.id}: label must be correct|corrupted, got {pair.label!r}")
        res = judge.ask(calibration_prompt(pair), SupportVerdict, metric=metric, sample_id=pair.id)
        bucket = per_label[pair.label]
        bucket["n"] += 1
        kind = pair.corruption.split(":", 1)[0] if pair.corruption else "none"
        cb = per_corruption.setdefault(kind, {"n": 0, "agree": 0, "disagree": 0, "failed": 0})
        cb["n"] += 1
        supported = None
        if res.value is None:
            bucket["failed"] += 1
            cb["failed"] += 1
            failures.append(JudgeFailure(metric, pair.id, res.status, _excerpt(res.raw or res.error)))
        else:
            supported = bool(res.value.supported)
            agrees = supported == (pair.label == "correct")
            agree_total += int(agrees)
            key = "agree" if agrees else "disagree"
            bucket[key] += 1
            cb[key] += 1
        verdicts.append({"id": pair.id, "label": pair.label, "supported": supported, "status": res.status,
                         "cached": res.cached})
    n = len(pairs)
    return Calibration(round(agree_total / n, 6) if n else None, n, per_label, failures,
                       reliable_threshold, judge.id, per_corruption, verdicts)


# -- making pairs from an evalset

_NUM = re.compile(r"(?<![\w\-.,:])(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)(?![\w\-]|[.,:]\d)")
_TIME = re.compile(r"\b([01]?\d|2[0-3]):([0-5]\d)\b")
_CAPWORD = r"[A-Z][a-z]+(?:-[A-Z][a-z]+)*"
_CAPSEQ = re.compile(rf"{_CAPWORD}(?:[ \t]+{_CAPWORD})*")
_NAME_STOP = {"The", "If", "On", "In", "At", "Each", "Your", "You", "Children", "Refunds", "Form", "Dietary",
              "Guests", "A", "An", "All", "Flights", "Prices", "This", "When", "Our", "We", "It", "They",
              "There", "For", "From", "After", "Before", "During", "Yes", "No"}
_CALENDAR = {"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday", "January",
             "February", "March", "April", "May", "June", "July", "August", "September", "October",
             "November", "December"}
_THIRD_PERSON = {"costs": "cost", "guides": "guide", "receives": "receive", "gets": "get", "includes": "include",
                 "applies": "apply", "pays": "pay", "stays": "stay", "says": "say", "covers": "cover",
                 "needs": "need", "offers": "offer", "requires": "require", "takes": "take", "runs": "run",
                 "leads": "lead", "starts": "start", "ends": "end", "opens": "open", "closes": "close"}
_NEGATIONS = [
    (r"\b(is|are|was|were)\b(?! not\b)", r"\1 not"),
    (r"\bcan\b(?! not\b)", "cannot"),
    (r"\b(may|will|must|should|could|would)\b(?! not\b)", r"\1 not"),
    (r"\b(" + "|".join(_THIRD_PERSON) + r")\b", lambda m: "does not " + _THIRD_PERSON[m.group(1)]),
    (r"\b(receive|get|include|pay|stay|need|cost|apply|take)\b", r"do not \1"),
]


def _fmt_like(original: str, value: float) -> str:
    if "," in original:
        return f"{int(round(value)):,}"
    if "." in original:
        decimals = len(original.split(".", 1)[1])
        return f"{value:.{decimals}f}"
    s = str(int(round(value)))
    return s.zfill(len(original)) if original.startswith("0") else s


def _corrupt_number(answer: str, context: str, rng: random.Random) -> tuple[str, str] | None:
    times = list(_TIME.finditer(answer))
    nums = [m for m in _NUM.finditer(answer) if not any(t.start() <= m.start() < t.end() for t in times)]
    spans = [("time", m) for m in times] + [("num", m) for m in nums]
    rng.shuffle(spans)
    for kind, m in spans:
        if kind == "time":
            h, mm = int(m.group(1)), m.group(2)
            for dh in rng.sample([2, 3, -2, 4, -3, 5], 6):
                new = f"{(h + dh) % 24:0{len(m.group(1))}d}:{mm}"
                if new not in context and new not in answer:
                    return answer[: m.start()] + new + answer[m.end():], f"number: {m.group(0)} -> {new}"
            continue
        tok = m.group(1)
        val = float(tok.replace(",", ""))
        factors = [2, 3, 0.5, 1.5, 4, 10]
        rng.shuffle(factors)
        for f in factors:
            newv = val * f if val else rng.choice([3, 5, 7])
            new = _fmt_like(tok, newv)
            if new != tok and new not in context and new.replace(",", "") not in context.replace(",", ""):
                return answer[: m.start(1)] + new + answer[m.end(1):], f"number: {tok} -> {new}"
    return None


def _names(text: str) -> list[str]:
    """Capitalised word sequences that look like names (a lone capitalised word opening a
    sentence, or a leading article / pronoun, is not a name)."""
    out = []
    for m in _CAPSEQ.finditer(text):
        words = m.group(0).split()
        at_start = m.start() == 0 or re.search(r"(?:[.!?:]\s*|\n\s*(?:[-*#|>]+\s*)?)$", text[: m.start()]) is not None
        if at_start:
            if words[0] in _NAME_STOP:
                words = words[1:]
            elif len(words) == 1:
                continue
        if words and not (len(words) == 1 and (words[0] in _NAME_STOP or words[0] in _CALENDAR)):
            out.append(" ".join(words))
    return list(dict.fromkeys(out))


def _corrupt_name(answer: str, context: str, pool: Sequence[str], rng: random.Random) -> tuple[str, str] | None:
    names = _names(answer)
    rng.shuffle(names)
    for name in names:
        cands = [p for p in pool if p != name and p not in context and name not in p and p not in name]
        if not cands:
            continue
        # prefer a name of the same length in words (a tour for a tour, a person for a person)
        best = min(abs(len(c.split()) - len(name.split())) for c in cands)
        new = rng.choice(sorted(c for c in cands if abs(len(c.split()) - len(name.split())) == best))
        return answer.replace(name, new), f"name: {name} -> {new}"
    return None


def _corrupt_negation(answer: str, context: str, rng: random.Random) -> tuple[str, str] | None:
    for pattern, repl in _NEGATIONS:
        m = re.search(pattern, answer)
        if m:
            new = re.sub(pattern, repl, answer, count=1)
            if new != answer:
                return new, f"negation: {m.group(0)!r}"
    return None


def _q(q, attr: str, default=None):
    return q.get(attr, default) if isinstance(q, Mapping) else getattr(q, attr, default)


def make_calibration_pairs(questions: Sequence, contexts: Mapping[str, str] | Sequence[str], seed: int = 0,
                           ) -> list[CalibrationPair]:
    """Labelled pairs from an evalset: per answerable question, the gold answer as ``correct``
    and a corrupted copy as ``corrupted``.

    ``questions`` are :class:`~adiyan.eval.evalset.EvalQuestion` objects or dicts with ``id``,
    ``question``, ``gold_answer`` (and optionally ``gold_sources``); ``contexts`` maps question
    id to a context that supports the gold answer, or is a sequence parallel to ``questions``.
    Questions without a context or with no gold sources (unanswerable) are skipped. The
    corruption is chosen per question in a seeded random order among: change a number (or a
    time) to one the context does not contain; swap a name for another name from the evalset's gold answers
    that this context does not contain; negate the first verb phrase. Deterministic for a seed.
    """
    rng = random.Random(seed)
    if isinstance(contexts, Mapping):
        ctx_of = {str(_q(q, "id")): contexts.get(str(_q(q, "id"))) for q in questions}
    else:
        if len(contexts) != len(questions):
            raise ValueError("contexts must be a mapping id -> text or parallel to questions")
        ctx_of = {str(_q(q, "id")): c for q, c in zip(questions, contexts)}
    pool = []  # names seen in the evalset's gold answers: swap material of the same kind
    for q in questions:
        pool.extend(_names(_q(q, "gold_answer", "") or ""))
    pool = list(dict.fromkeys(pool))
    pairs: list[CalibrationPair] = []
    for q in questions:
        qid, question, gold = str(_q(q, "id")), _q(q, "question", ""), _q(q, "gold_answer", "")
        context = ctx_of.get(qid)
        sources = _q(q, "gold_sources", None)
        if not context or not gold or (sources is not None and not sources):
            continue
        strategies = ["number", "name", "negation"]
        rng.shuffle(strategies)
        corrupted = None
        for s in strategies:
            if s == "number":
                corrupted = _corrupt_number(gold, context, rng)
            elif s == "name":
                corrupted = _corrupt_name(gold, context, pool, rng)
            else:
                corrupted = _corrupt_negation(gold, context, rng)
            if corrupted:
                break
        if not corrupted:
            continue
        pairs.append(CalibrationPair(f"{qid}:correct", question, context, gold, "correct"))
        pairs.append(CalibrationPair(f"{qid}:corrupted", question, context, corrupted[0], "corrupted",
                                     corrupted[1]))
    return pairs


def _content_tokens(text: str) -> set[str]:
    return {t for t in re.findall(r"[a-z0-9][a-z0-9\-,]*", text.lower()) if len(t) > 2 or t.isdigit()}


def support_passage(document: str, answer: str, max_chars: int = 1200) -> str:
    """The paragraphs of ``document`` that best cover ``answer`` (lexical overlap, numbers and
    codes weigh double), in document order, within ``max_chars``: a compact context for a
    small judge."""
    paras = [p.strip() for p in re.split(r"\n\s*\n|\n(?=[-*|#] )", document) if p.strip()]
    target = _content_tokens(answer)

    def score(p: str) -> float:
        toks = _content_tokens(p)
        return sum(2.0 if any(ch.isdigit() for ch in t) else 1.0 for t in target & toks)

    ranked = sorted(range(len(paras)), key=lambda i: (-score(paras[i]), i))
    chosen, size = [], 0
    for i in ranked:
        if score(paras[i]) <= 0 or size + len(paras[i]) > max_chars and chosen:
            break
        chosen.append(i)
        size += len(paras[i]) + 2
    return "\n\n".join(paras[i] for i in sorted(chosen))


def evalset_calibration_pairs(evalset, seed: int = 0, *, max_context_chars: int = 1200,
                              doc_texts: Mapping[str, str] | None = None) -> list[CalibrationPair]:
    """:func:`make_calibration_pairs` on an :class:`~adiyan.eval.evalset.Evalset`, each
    context being the support passage of the question's gold documents. ``doc_texts`` maps
    source keys to extracted text (needed for DOCX, PPTX, ...); by default files are read as
    UTF-8 text, which only suits Markdown and plain text."""
    docs = dict(doc_texts) if doc_texts is not None else {
        d.source_key: d.path.read_text(encoding="utf-8") for d in evalset.documents}
    contexts = {}
    for q in evalset.questions:
        if not q.gold_sources:
            continue
        per = max(200, max_context_chars // len(q.gold_sources))
        contexts[q.id] = "\n\n".join(support_passage(docs[s], q.gold_answer, per) for s in q.gold_sources
                                     if s in docs)
    return make_calibration_pairs(evalset.questions, contexts, seed)


def judged_metric_flags(calibration: Calibration | None, metrics: Iterable[str]) -> dict[str, dict]:
    """For a report: the judge's agreement beside every LLM-judged metric, and whether the
    metric is to be marked unreliable (no calibration counts as unknown, never reliable)."""
    out = {}
    for m in metrics:
        if calibration is None:
            out[m] = {"judge_agreement": None, "reliable": None, "reliable_threshold": None,
                      "note": "judge not calibrated"}
        else:
            out[m] = {"judge_agreement": calibration.agreement, "reliable": calibration.reliable,
                      "reliable_threshold": calibration.reliable_threshold,
                      "note": "" if calibration.reliable else
                      f"UNRELIABLE: judge agreement {calibration.agreement} < {calibration.reliable_threshold}"}
    return out


def count_statuses(results: Iterable[JudgeResult]) -> Counter:
    return Counter(r.status for r in results)
