"""The judge wrapper: invalid output, timeouts and errors are counted and listed, never scored;
successes are cached by prompt hash, and so are the failures a temperature-0 judge would repeat
(invalid JSON, schema mismatch, a prompt over the context window); transient failures (timeouts,
server errors) are asked again on the next run; calibration on
labelled pairs (more in test_judge_calibration.py)."""

from __future__ import annotations

import json
import threading
import time

import pytest

from adiyan.cache import CallCache
from adiyan.eval.judge import (
    RETRY_SUFFIX,
    CalibrationPair,
    Judge,
    JudgeFailure,
    SupportVerdict,
    calibrate,
    calibration_prompt,
    judged_metric_flags,
    parse_reply,
)
from adiyan.models.base import Completion, ModelError


class ScriptedLLM:
    """Test double for control flow only (not a model): replays a script of replies, one per
    call; ``("sleep", s, text)`` sleeps ``s`` seconds first, ``("raise", exc)`` raises. Calls
    beyond the script fail the test."""

    def __init__(self, script, model_id="scripted-judge"):
        self.script = list(script)
        self.id = model_id
        self.context_size = 4096
        self.calls = 0
        self.prompts: list[str] = []
        self._lock = threading.Lock()

    def chat(self, messages, *, max_tokens=None, temperature=None):
        with self._lock:
            self.calls += 1
            self.prompts.append(messages[-1]["content"])
            assert self.script, "the judge called the LLM more often than scripted"
            step = self.script.pop(0)
        if isinstance(step, tuple) and step[0] == "sleep":
            time.sleep(step[1])
            return Completion(text=step[2])
        if isinstance(step, tuple) and step[0] == "raise":
            raise step[1]
        return Completion(text=step)


def new_judge(llm, tmp_path, **kw):
    kw.setdefault("timeout_s", 0.5)
    kw.setdefault("max_retries", 0)
    return Judge(llm, CallCache(tmp_path / "calls.sqlite", "judge"), **kw)


def test_invalid_json_and_timeout_are_counted_reported_and_not_cached(tmp_path):
    llm = ScriptedLLM([
        "Sure, the answer is supported!",                 # no JSON at all
        ("sleep", 3.0, '{"supported": true}'),            # replies after the deadline
        'Here you go:\n```json\n{"supported": false}\n```',  # valid, inside prose and a fence
    ])
    judge = new_judge(llm, tmp_path)
    with judge.scope("faithfulness", "q01"):
        r1 = judge.ask("prompt one", SupportVerdict)
    t0 = time.perf_counter()
    r2 = judge.ask("prompt two", SupportVerdict, metric="faithfulness", sample_id="q02")
    assert time.perf_counter() - t0 < 2.0  # the judge did not wait for the sleeping call
    r3 = judge.ask("prompt three", SupportVerdict, metric="faithfulness", sample_id="q03")

    assert (r1.status, r2.status, r3.status) == ("invalid_json", "timeout", "ok")
    assert r1.value is None and r2.value is None  # a failure is never a number
    assert r3.value == SupportVerdict(supported=False) and not r3.cached
    s = judge.stats
    assert (s.calls, s.ok, s.invalid_json, s.timeout, s.schema_mismatch, s.error) == (3, 1, 1, 1, 0, 0)
    assert (s.cached, s.llm_calls, s.abandoned) == (0, 3, 1)
    assert judge.by_metric["faithfulness"].failed == 2
    assert [f[:3] for f in judge.failures] == [("faithfulness", "q01", "invalid_json"),
                                                ("faithfulness", "q02", "timeout")]
    assert judge.failures[0].raw == "Sure, the answer is supported!"
    assert "abandoned" in judge.failures[1].raw
    assert all(isinstance(f, JudgeFailure) for f in judge.failures)

    # the next run on the same cache: the timeout is asked again (and now answered); the success
    # and the invalid JSON (what a temperature-0 judge says again) come from disk without a call,
    # the replayed failure still counted and listed as a failure
    llm2 = ScriptedLLM(['{"supported": false}'])
    judge2 = new_judge(llm2, tmp_path)
    again = [judge2.ask(p, SupportVerdict, metric="faithfulness", sample_id=q)
             for p, q in [("prompt one", "q01"), ("prompt two", "q02"), ("prompt three", "q03")]]
    assert llm2.calls == 1 and llm2.prompts == ["prompt two"]
    assert [r.status for r in again] == ["invalid_json", "ok", "ok"] and [r.cached for r in again] == [True, False, True]
    assert again[0].value is None and again[0].raw == "Sure, the answer is supported!"
    assert [r.value.supported for r in again[1:]] == [False, False]
    assert [f[:3] for f in judge2.failures] == [("faithfulness", "q01", "invalid_json")]
    assert (judge2.stats.failed, judge2.stats.cached, judge2.stats.invalid_json) == (1, 2, 1)


class FailsOnceLLM(ScriptedLLM):
    """Test double for control flow only: the first call fails the way ``failure`` says
    (``timeout``: answers after the deadline; ``invalid_json``: prose; ``error``: raises),
    every later call answers ``{"supported": true}``."""

    def __init__(self, failure: str):
        first = {"timeout": ("sleep", 1.5, '{"supported": true}'), "invalid_json": "I think it is supported.",
                 "error": ("raise", ModelError("server at http://judge failed: 503"))}[failure]
        super().__init__([first] + ['{"supported": true}'] * 5)


@pytest.mark.parametrize("failure,temperature", [("timeout", 0.0), ("error", 0.0), ("invalid_json", 0.7)])
def test_a_failed_judge_call_is_retried_on_the_next_run_not_replayed(tmp_path, failure, temperature):
    """Transient failures at any temperature, and every failure of a sampling judge."""
    llm = FailsOnceLLM(failure)
    first = new_judge(llm, tmp_path, timeout_s=0.5, settle_s=0, temperature=temperature)
    assert first.ask("p", SupportVerdict, metric="faithfulness", sample_id="q1").status == failure
    assert first.stats.failed == 1 and first.failures[0].status == failure
    # the next run (a new judge on the same cache, the same model): asked again, answered
    second = new_judge(llm, tmp_path, timeout_s=5.0, temperature=temperature)
    res = second.ask("p", SupportVerdict, metric="faithfulness", sample_id="q1")
    assert (res.status, res.cached, res.value.supported) == ("ok", False, True)
    assert llm.calls == 2 and second.failures == []
    # and the run after that replays the success from disk without calling the model
    third = new_judge(llm, tmp_path, temperature=temperature)
    assert third.ask("p", SupportVerdict).cached is True and llm.calls == 2


@pytest.mark.parametrize("reply", ["I think it is supported.", '{"verdict": "yes"}',
                                   ("raise", ValueError("Requested tokens (2323) exceed context window of 2048"))])
def test_a_failure_a_temperature_0_judge_would_repeat_is_replayed_and_still_counted(tmp_path, reply):
    """Invalid JSON, a schema mismatch and a context overflow: the same prompt gets the same
    failure from a temperature-0 model, so the next run replays it instead of waiting for it."""
    llm = ScriptedLLM([reply])  # one reply only: a second call would fail the test
    first = new_judge(llm, tmp_path)
    r1 = first.ask("p", SupportVerdict, metric="faithfulness", sample_id="q1")
    assert r1.status in ("invalid_json", "schema_mismatch", "error") and not r1.cached
    second = new_judge(llm, tmp_path)
    r2 = second.ask("p", SupportVerdict, metric="faithfulness", sample_id="q1")
    assert (r2.status, r2.cached, r2.value, r2.error) == (r1.status, True, None, r1.error) and llm.calls == 1
    assert second.stats.failed == 1 and [f.status for f in second.failures] == [r1.status]
    assert second.by_metric["faithfulness"].failed == 1
    assert "failures it would repeat" in second.describe()["caches"]


def test_a_failure_cached_by_an_older_version_is_asked_again(tmp_path):
    judge = new_judge(ScriptedLLM(['{"supported": false}']), tmp_path)
    key = judge.cache_key("p", SupportVerdict)
    judge.cache.put(key, {"status": "timeout", "raw": "", "error": "no reply within 60s", "value": None})
    res = judge.ask("p", SupportVerdict)
    assert (res.status, res.cached, res.value.supported) == ("ok", False, False)
    assert judge.cache.get(key)["status"] == "ok"  # the success replaced the old failure


class LockedScriptedLLM(ScriptedLLM):
    """Test double for control flow only: like the in-process llama.cpp model, one generation
    at a time behind a lock."""

    def __init__(self, script):
        super().__init__(script)
        self.model_lock = threading.Lock()

    def chat(self, messages, **kw):
        with self.model_lock:
            return super().chat(messages, **kw)


@pytest.mark.parametrize("settle_s,second", [(3.0, "ok"), (0, "timeout")])
def test_a_timed_out_call_on_a_locked_model_does_not_cascade(tmp_path, settle_s, second):
    llm = LockedScriptedLLM([("sleep", 2.0, '{"supported": true}'), ("sleep", 0.5, '{"supported": true}')])
    judge = new_judge(llm, tmp_path, timeout_s=1.0, settle_s=settle_s)
    assert judge.ask("slow", SupportVerdict).status == "timeout"
    # with settle_s the judge lets the abandoned generation finish (outside any deadline) before
    # the next call; without it, the next call's deadline is eaten by the wait for the lock
    assert judge.ask("next", SupportVerdict).status == second
    assert judge.stats.abandoned == (1 if second == "ok" else 2)


def test_retry_rescues_an_invalid_reply_and_the_failed_attempt_is_kept(tmp_path):
    llm = ScriptedLLM(["{'supported': True}", '{"supported": true}'])  # single quotes are not JSON
    judge = new_judge(llm, tmp_path, max_retries=1)
    res = judge.ask("p", SupportVerdict, metric="m", sample_id="s")
    assert res.status == "ok" and res.attempts == 2
    assert llm.prompts[1].endswith(RETRY_SUFFIX)
    assert (judge.stats.ok, judge.stats.retries, judge.stats.llm_calls, judge.stats.failed) == (1, 1, 2, 0)
    assert judge.failures == [] and [f.status for f in judge.retried] == ["invalid_json"]


def test_llm_errors_and_schema_mismatch_are_counted(tmp_path):
    llm = ScriptedLLM([("raise", ModelError("server at http://x failed: connection refused")),
                       '{"supported": "yes"}', '[true]'])
    judge = new_judge(llm, tmp_path)
    a, b, c = (judge.ask(p, SupportVerdict, sample_id=p) for p in ("a", "b", "c"))
    assert (a.status, b.status, c.status) == ("error", "schema_mismatch", "schema_mismatch")
    assert "connection refused" in a.error and "supported" in b.error
    assert (judge.stats.error, judge.stats.schema_mismatch, judge.stats.ok) == (1, 2, 0)
    assert [f.sample_id for f in judge.failures] == ["a", "b", "c"]


def test_parse_reply_tolerates_fences_and_prose_but_repairs_nothing():
    ok = ['{"supported": true}', '```json\n{"supported": true}\n```', 'Answer:\n{"supported": true}\nDone.',
          '{"type": "object", "properties": {}} then {"supported": true}']  # an echoed schema is skipped
    for raw in ok:
        value, status, _ = parse_reply(raw, SupportVerdict)
        assert status == "ok" and value.supported is True, raw
    for raw, want in [('{"supported": tru', "invalid_json"), ("supported: true", "invalid_json"),
                      ("", "invalid_json"), ('{"supported": 1}', "schema_mismatch"), ('{"x": 1}', "schema_mismatch")]:
        value, status, _ = parse_reply(raw, SupportVerdict)
        assert (value, status) == (None, want), raw


def test_cache_key_includes_model_and_schema(tmp_path):
    from pydantic import BaseModel

    class Other(BaseModel):
        supported: bool

    j1 = new_judge(ScriptedLLM([], "judge-a"), tmp_path)
    j2 = new_judge(ScriptedLLM([], "judge-b"), tmp_path)
    assert j1.cache_key("p", SupportVerdict) != j2.cache_key("p", SupportVerdict)
    assert j1.cache_key("p", SupportVerdict) != j1.cache_key("p", Other)
    assert j1.cache_key("p", SupportVerdict) == new_judge(ScriptedLLM([], "judge-a"), tmp_path).cache_key(
        "p", SupportVerdict)


HAND_PAIRS = [
    CalibrationPair("p1:correct", "How much is the tour?", "The tour costs 450 euros.", "It costs 450 euros.",
                    "correct"),
    CalibrationPair("p1:corrupted_fact", "How much is the tour?", "The tour costs 450 euros.", "It costs 900 euros.",
                    "corrupted_fact", "number: 450 -> 900"),
    CalibrationPair("p2:correct", "Who guides it?", "Anna guides the tour.", "Anna guides it.", "correct"),
    CalibrationPair("p2:corrupted_fact", "Who guides it?", "Anna guides the tour.", "Anna does not guide it.",
                    "corrupted_fact", "negation: 'guides'"),
]


class AnswerKeyedLLM(ScriptedLLM):
    """Test double for control flow only: answers by the pair's answer text in the prompt."""

    def __init__(self, verdicts: dict[str, str]):
        super().__init__([])
        self.verdicts = verdicts

    def chat(self, messages, *, max_tokens=None, temperature=None):
        self.calls += 1
        prompt = messages[-1]["content"]
        for answer, reply in self.verdicts.items():
            if f"Answer: {answer}\n" in prompt:
                return Completion(text=reply)
        raise AssertionError("unexpected prompt")


def test_calibration_three_of_four_is_unreliable_at_0_8(tmp_path):
    llm = AnswerKeyedLLM({
        "It costs 450 euros.": '{"supported": true}',       # right
        "It costs 900 euros.": '{"supported": false}',      # right
        "Anna guides it.": '{"supported": true}',           # right
        "Anna does not guide it.": '{"supported": true}',   # wrong: fooled by the negation
    })
    cal = calibrate(new_judge(llm, tmp_path), HAND_PAIRS)
    assert cal.agreement == 0.75 and cal.n == 4 and cal.n_failed == 0
    assert cal.per_label["correct"] == {"n": 2, "agree": 2, "disagree": 0, "failed": 0}
    assert cal.per_label["corrupted_fact"] == {"n": 2, "agree": 1, "disagree": 1, "failed": 0}
    assert cal.per_corruption["negation"]["disagree"] == 1
    # 3 of 4: Wilson 95% interval 0.301-0.954, so not even a 0.7 line is cleared
    assert cal.ci95 == (pytest.approx(0.300642, abs=1e-6), pytest.approx(0.954413, abs=1e-6))
    assert cal.reliable_threshold == 0.8 and cal.reliable is False
    flags = judged_metric_flags(cal, ["faithfulness"])["faithfulness"]
    assert flags["judge_agreement"] == 0.75 and flags["reliable"] is False and "UNRELIABLE" in flags["note"]
    assert calibrate(new_judge(ScriptedLLM([]), tmp_path), HAND_PAIRS, reliable_threshold=0.7).reliable is False
    lenient = calibrate(new_judge(ScriptedLLM([]), tmp_path), HAND_PAIRS, reliable_threshold=0.3)
    assert lenient.agreement == 0.75 and lenient.reliable is True  # all four from the cache


def test_calibration_counts_a_failed_judgement_as_disagreement(tmp_path):
    llm = AnswerKeyedLLM({"It costs 450 euros.": '{"supported": true}', "It costs 900 euros.": "no idea",
                          "Anna guides it.": '{"supported": true}', "Anna does not guide it.": '{"supported": false}'})
    cal = calibrate(new_judge(llm, tmp_path), HAND_PAIRS)
    assert cal.agreement == 0.75 and cal.agreement_valid == 1.0 and cal.n_failed == 1
    assert cal.failures == [JudgeFailure("calibration", "p1:corrupted_fact", "invalid_json", "no idea")]
    assert [v["supported"] for v in cal.verdicts] == [True, None, True, False]
    d = cal.as_dict()
    assert json.loads(json.dumps(d))["n_failed"] == 1


def test_calibration_prompt_asks_for_supported_json():
    p = calibration_prompt(HAND_PAIRS[0])
    assert "The tour costs 450 euros." in p and "Answer: It costs 450 euros.\n" in p
    assert '{"supported": true}' in p and '{"supported": false}' in p


def test_judge_from_settings(make_settings, tmp_path):
    from adiyan.eval.judge import judge_from_settings

    assert judge_from_settings(make_settings(**{"eval.judge": None})) is None  # no LLM-judged metrics
    settings = make_settings(**{"eval.judge": "smollm2"})
    judge = judge_from_settings(settings)
    assert judge.id == "smollm2-135m-instruct-q4_1"
    assert judge.timeout_s == (getattr(settings.eval, "judge_timeout_s", None) or settings.llm.timeout_s)
    assert judge.cache.path == tmp_path / "cache" / "calls.sqlite" and judge.cache.namespace == "judge"


def test_the_program_waits_for_an_abandoned_call_before_it_exits(tmp_path):
    """A timed-out call left generating in a daemon thread while the interpreter exits crashed
    `invoke eval` (status 245); the judge now joins abandoned calls at exit. Here the abandoned
    call writes a file when it ends: without the join the process exits first and it never does."""
    import subprocess
    import sys
    import textwrap
    marker = tmp_path / "finished"
    script = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from adiyan.cache import CallCache
        from adiyan.eval.judge import Judge, SupportVerdict
        from adiyan.models.base import Completion

        class SlowLLM:  # test double for control flow only
            id = "slow"
            context_size = 4096
            def chat(self, messages, *, max_tokens=None, temperature=None):
                time.sleep(1.5)
                Path({str(marker)!r}).write_text("done")
                return Completion(text='{{"supported": true}}')

        judge = Judge(SlowLLM(), CallCache(Path({str(tmp_path / 'calls.sqlite')!r}), "judge"),
                      timeout_s=0.2, max_retries=0, settle_s=0)
        assert judge.ask("p", SupportVerdict).status == "timeout"
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert marker.read_text() == "done"
