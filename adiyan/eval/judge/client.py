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

Cache. Successful results are cached in a :class:`~adiyan.cache.CallCache` under a key made
from the judge's model id, the schema's name and JSON schema, the system prompt, the prompt,
``max_tokens`` and ``temperature``. Successes are cached, and so are the failures a temperature-0
judge would repeat word for word: a reply that is not JSON or does not fit the schema (after the
retries), and a prompt longer than the model's context window. Those are a property of the model
and the prompt, not of the moment; replaying them saved ~40 s of a warm ``invoke eval`` (issue 27)
and they are still counted and listed as failures in every run that replays them
(``cached``). A transient failure (a timeout, a transport or server error) is never cached: it is
asked again on the next run, so a server outage or a slow first call is never replayed from the
cache forever; at a temperature above 0 no failure is cached. A failure entry written by an older
version, or one this rule would not cache, is asked again.

Calibration of the judge on labelled pairs is in ``calibration`` (the scoring) and ``pairs``
(making labelled pairs from an evalset).
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import hashlib
import json
import re
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any, Literal, NamedTuple, Type

from pydantic import BaseModel, ValidationError

from ...cache import CallCache, call_cache
from ...models import load_llm
from ...models.structured import chat_json, preload_validator, structured_mode

STATUSES = ("ok", "invalid_json", "schema_mismatch", "timeout", "error")
FAILED_STATUSES = frozenset(STATUSES[1:])
Status = Literal["ok", "invalid_json", "schema_mismatch", "timeout", "error"]

DEFAULT_SYSTEM_PROMPT = ("You are a strict evaluator. Follow the instructions exactly and reply with one "
                         "JSON object only, no other text.")
RETRY_SUFFIX = "\n\nReply with a single JSON object that matches the schema, and nothing else."
EXCERPT_CHARS = 300

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


def verdict_schema(schema: Type[BaseModel]) -> dict:
    """The JSON schema the judge's reply is held to (pydantic's, objects closed to other keys)."""
    def close(node):
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node:
                node.setdefault("additionalProperties", False)
            for v in node.values():
                close(v)
        elif isinstance(node, list):
            for v in node:
                close(v)
        return node
    return close(schema.model_json_schema())


def _schema_fingerprint(schema: Type[BaseModel]) -> str:
    canon = json.dumps(schema.model_json_schema(), sort_keys=True)
    return hashlib.sha256(canon.encode()).hexdigest()[:16]


# ---------------------------------------------------------------- the judge

# failures a temperature-0 judge repeats for the same prompt, so they are cached like successes
REPLAYABLE_STATUSES = frozenset({"invalid_json", "schema_mismatch"})
# errors that are a property of the prompt, not of the moment (llama.cpp's context overflow)
DETERMINISTIC_ERROR_MARKERS = ("exceed context window",)

class Judge:
    """Any adiyan LLM as a judge: see the module docstring for the contract."""

    def __init__(self, llm, cache, *, timeout_s: float | None = 120.0, max_retries: int = 1,
                 max_tokens: int = 512, temperature: float = 0.0,
                 system_prompt: str | None = DEFAULT_SYSTEM_PROMPT, settle_s: float | None = None,
                 seed: int | None = None):
        if timeout_s is not None and timeout_s <= 0:
            raise ValueError("timeout_s must be > 0 (or None for no deadline)")
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        preload_validator()  # outside any deadline (adiyan.models.structured)
        self.llm = llm
        self.cache = cache
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.system_prompt = system_prompt
        # a judging's own seed (eval.judge_repeats): part of the cache key, so judging the same
        # answer again under another seed asks the model again instead of replaying the first
        # verdict; None (a single judging) leaves the key as it always was
        self.seed = seed
        self.settle_s = timeout_s if settle_s is None else settle_s
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
        return {"id": self.id, "structured": structured_mode(self.llm), "timeout_s": self.timeout_s,
                "settle_s": self.settle_s,
                "max_retries": self.max_retries,
                "max_tokens": self.max_tokens, "temperature": self.temperature,
                **({"seed": self.seed} if self.seed is not None else {}),
                "caches": "successes" + (", and failures it would repeat" if self._replayable("invalid_json", "")
                                         else " only")}

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
        key = {"kind": "judge", "judge": self.id, "schema": schema.__name__,
               "schema_sha": _schema_fingerprint(schema), "system": self.system_prompt,
               "prompt": prompt, "max_tokens": self.max_tokens,
               "temperature": self.temperature, "structured": structured_mode(self.llm)}
        if self.seed is not None:  # a repeated judging (eval.judge_repeats): its seed is its identity
            key["seed"] = self.seed
        return self.cache.key(key)

    def ask(self, prompt: str, schema: Type[BaseModel], *, metric: str | None = None,
            sample_id: str | None = None) -> JudgeResult:
        scope_metric, scope_sample = _SCOPE.get()
        metric = metric if metric is not None else scope_metric
        sample_id = sample_id if sample_id is not None else scope_sample
        key = self.cache_key(prompt, schema)
        hit = self.cache.get(key)
        result = self._from_cache(hit, schema) if hit is not None else None
        if result is None:
            result = self._ask_llm(prompt, schema, metric, sample_id)
            # stored under the mechanism the call really used: a server that refused json_schema
            # was answered under json_object, and later asks (which start there) find it
            key = self.cache_key(prompt, schema)
            if result.status == "ok":
                self.cache.put(key, {"status": "ok", "raw": result.raw, "error": "",
                                     "value": result.value.model_dump(mode="json"), "judge": self.id,
                                     "schema": schema.__name__, "at": time.time()})
            elif self._replayable(result.status, result.error):  # the model would say it again
                self.cache.put(key, {"status": result.status, "raw": result.raw, "error": result.error,
                                     "value": None, "judge": self.id, "schema": schema.__name__,
                                     "replayable": True, "at": time.time()})
        self._record(result, metric, sample_id)
        return result

    # -- internals

    def _from_cache(self, hit: dict, schema: Type[BaseModel]) -> JudgeResult | None:
        """A cached success; None (ask the model) for anything else, e.g. a failure an older
        version cached, or a success whose schema changed under the same name."""
        if hit.get("status") != "ok":
            if hit.get("replayable") and self._replayable(hit.get("status"), hit.get("error") or ""):
                return JudgeResult(None, hit["status"], hit.get("raw") or "", True, hit.get("error") or "")
            return None
        try:
            return JudgeResult(schema.model_validate(hit["value"]), "ok", hit.get("raw") or "", True)
        except (ValidationError, KeyError, TypeError):
            return None

    def _replayable(self, status: str | None, error: str) -> bool:
        """A failure a temperature-0 judge repeats for the same prompt (see the module docstring)."""
        if self.temperature not in (0, 0.0, None):
            return False
        return status in REPLAYABLE_STATUSES or (
            status == "error" and any(m in error for m in DETERMINISTIC_ERROR_MARKERS))

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
                raw = self._call_with_deadline(self._messages(text), schema)
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

    def _call(self, messages: list[dict], schema: Type[BaseModel]) -> str:
        """The verdict through the schema (adiyan.models.structured: grammar, response_format or
        format; free text on a backend that cannot constrain); parsed by ``parse_reply`` either way."""
        return chat_json(self.llm, messages, verdict_schema(schema), name=schema.__name__,
                         max_tokens=self.max_tokens, temperature=self.temperature).text

    def _call_with_deadline(self, messages: list[dict], schema: Type[BaseModel]) -> str:
        self._settle()
        if self.timeout_s is None:
            return self._call(messages, schema)
        box: dict[str, Any] = {}
        done = threading.Event()

        def run():
            try:
                box["text"] = self._call(messages, schema)
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
            _join_at_exit(worker)
            raise _Timeout()
        if "exc" in box:
            raise box["exc"]
        return box.get("text") or ""


_AT_EXIT: list[threading.Thread] = []
EXIT_JOIN_S = 300.0  # at most this long in all, at interpreter exit, for abandoned calls to end


def _join_at_exit(worker: threading.Thread) -> None:
    """An abandoned call may still be generating inside the in-process model when the program
    ends; a daemon thread left in C code while the interpreter tears the model down crashed
    ``invoke eval`` at exit (status 245 after a run whose judge timed out under load, 4 Dec
    2026). So the program waits for abandoned calls (bounded by ``EXIT_JOIN_S``) before exiting."""
    with _EXIT_LOCK:
        if not _AT_EXIT:
            atexit.register(_join_abandoned)
        _AT_EXIT.append(worker)


def _join_abandoned() -> None:
    deadline = time.monotonic() + EXIT_JOIN_S
    for worker in list(_AT_EXIT):
        worker.join(max(0.0, deadline - time.monotonic()))


_EXIT_LOCK = threading.Lock()


def judge_from_settings(settings, *, cache=None, **judge_kwargs) -> Judge | None:
    """The judge named by ``settings.eval.judge`` (None when no judge is configured).

    The name is an LLM name as in ``llm.name`` (``smollm2``, ``ollama:NAME``,
    ``openai-compatible:URL``, ``gguf:PATH``); ``eval.judge_url`` is the server URL. Optional
    settings read when present: ``eval.judge_model``, ``eval.judge_timeout_s`` (default
    ``llm.timeout_s``), ``eval.judge_max_tokens``. Judgements are cached in
    ``<cache_dir>/calls.sqlite`` under the ``judge`` namespace.
    """
    ev = settings.eval
    if not ev.judge:
        return None
    timeout_s = getattr(ev, "judge_timeout_s", None) or settings.llm.timeout_s
    seed = judge_kwargs.get("seed")  # a repeated judging's seed (eval.judge_repeats), else llm.seed
    llm = load_llm(ev.judge, url=ev.judge_url, model=getattr(ev, "judge_model", None),
                   context_size=settings.llm.context_size, temperature=0.0,
                   max_tokens=getattr(ev, "judge_max_tokens", None) or 512,
                   seed=settings.llm.seed if seed is None else seed,
                   timeout_s=timeout_s, api_key_env=settings.llm.api_key_env, structured=settings.llm.structured,
                   models_dir=settings.paths.models_dir)  # a packaged tier (qwen2.5-coder-*) is joined there
    cache = cache or call_cache(settings, "judge")
    judge_kwargs.setdefault("timeout_s", timeout_s)
    judge_kwargs.setdefault("max_tokens", getattr(ev, "judge_max_tokens", None) or 512)
    return Judge(llm, cache, **judge_kwargs)
