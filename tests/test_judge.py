"""The judge wrapper: invalid output, timeouts and errors are counted and listed, never scored;
results are cached by prompt hash (failures with their status); calibration on labelled pairs."""

from __future__ import annotations

import json
import threading
import time

import pytest

from adiyan.cache import CallCache
from adiyan.eval.evalset import load_evalset
from adiyan.eval.judge import (
    RETRY_SUFFIX,
    CalibrationPair,
    Judge,
    JudgeFailure,
    SupportVerdict,
    calibrate,
    calibration_prompt,
    evalset_calibration_pairs,
    judged_metric_flags,
    make_calibration_pairs,
    parse_reply,
)
from adiyan.models.base import Completion, ModelError

from tests.conftest import ROOT


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


def test_invalid_json_and_timeout_are_counted_reported_and_cached(tmp_path):
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

    # a second run on the same cache: no LLM call at all, the same outcomes, failures included
    llm2 = ScriptedLLM([])
    judge2 = new_judge(llm2, tmp_path)
    again = [judge2.ask(p, SupportVerdict, metric="faithfulness", sample_id=q)
             for p, q in [("prompt one", "q01"), ("prompt two", "q02"), ("prompt three", "q03")]]
    assert llm2.calls == 0
    assert [r.status for r in again] == ["invalid_json", "timeout", "ok"]
    assert all(r.cached for r in again)
    assert again[0].value is None and again[1].value is None and again[2].value.supported is False
    s2 = judge2.stats
    assert (s2.calls, s2.cached, s2.ok, s2.invalid_json, s2.timeout, s2.llm_calls) == (3, 3, 1, 1, 1, 0)
    assert [f.status for f in judge2.failures] == ["invalid_json", "timeout"]


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


def test_cached_failures_are_retried_only_when_configured(tmp_path):
    judge = new_judge(ScriptedLLM(["not json"]), tmp_path)
    assert judge.ask("p", SupportVerdict).status == "invalid_json"
    replay = new_judge(ScriptedLLM([]), tmp_path)  # default: replay the cached failure
    assert replay.ask("p", SupportVerdict).status == "invalid_json"
    llm = ScriptedLLM(['{"supported": true}'])
    retry = new_judge(llm, tmp_path, retry_cached_failures={"invalid_json", "timeout"})
    res = retry.ask("p", SupportVerdict)
    assert (res.status, res.cached, llm.calls) == ("ok", False, 1)
    after = new_judge(ScriptedLLM([]), tmp_path)  # the success replaced the failure on disk
    assert after.ask("p", SupportVerdict).value.supported is True


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
    CalibrationPair("p1:corrupted", "How much is the tour?", "The tour costs 450 euros.", "It costs 900 euros.",
                    "corrupted", "number: 450 -> 900"),
    CalibrationPair("p2:correct", "Who guides it?", "Anna guides the tour.", "Anna guides it.", "correct"),
    CalibrationPair("p2:corrupted", "Who guides it?", "Anna guides the tour.", "Anna does not guide it.",
                    "corrupted", "negation: 'guides'"),
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
    assert cal.per_label["corrupted"] == {"n": 2, "agree": 1, "disagree": 1, "failed": 0}
    assert cal.per_corruption["negation"]["disagree"] == 1
    assert cal.reliable_threshold == 0.8 and cal.reliable is False
    flags = judged_metric_flags(cal, ["faithfulness"])["faithfulness"]
    assert flags["judge_agreement"] == 0.75 and flags["reliable"] is False and "UNRELIABLE" in flags["note"]
    lenient = calibrate(new_judge(ScriptedLLM([]), tmp_path), HAND_PAIRS, reliable_threshold=0.7)
    assert lenient.agreement == 0.75 and lenient.reliable is True  # all four from the cache


def test_calibration_counts_a_failed_judgement_as_disagreement(tmp_path):
    llm = AnswerKeyedLLM({"It costs 450 euros.": '{"supported": true}', "It costs 900 euros.": "no idea",
                          "Anna guides it.": '{"supported": true}', "Anna does not guide it.": '{"supported": false}'})
    cal = calibrate(new_judge(llm, tmp_path), HAND_PAIRS)
    assert cal.agreement == 0.75 and cal.agreement_valid == 1.0 and cal.n_failed == 1
    assert cal.failures == [JudgeFailure("calibration", "p1:corrupted", "invalid_json", "no idea")]
    assert [v["supported"] for v in cal.verdicts] == [True, None, True, False]
    d = cal.as_dict()
    assert json.loads(json.dumps(d))["n_failed"] == 1


def test_calibration_prompt_asks_for_supported_json():
    p = calibration_prompt(HAND_PAIRS[0])
    assert "The tour costs 450 euros." in p and "Answer: It costs 450 euros.\n" in p
    assert '{"supported": true}' in p and '{"supported": false}' in p


def test_calibration_pairs_from_the_evalset():
    es = load_evalset(ROOT / "evalsets" / "adiyan_basic")
    pairs = evalset_calibration_pairs(es, seed=0)
    answerable = [q for q in es.questions if q.gold_sources]
    assert len(pairs) == 2 * len(answerable)  # every answerable question got a corruption
    assert pairs == evalset_calibration_pairs(es, seed=0)  # deterministic for a seed
    assert [p.answer for p in pairs] != [p.answer for p in evalset_calibration_pairs(es, seed=1)]
    gold = {q.id: q for q in es.questions}
    for correct, corrupted in zip(pairs[::2], pairs[1::2]):
        qid = correct.id.split(":")[0]
        assert (correct.label, corrupted.label) == ("correct", "corrupted")
        assert correct.answer == gold[qid].gold_answer and corrupted.answer != correct.answer
        assert correct.context == corrupted.context and corrupted.corruption
        kind, change = corrupted.corruption.split(": ", 1)
        assert kind in {"number", "name", "negation"}
        if kind in {"number", "name"}:
            new = change.split(" -> ")[1]
            assert new in corrupted.answer and new not in correct.context
        assert len(correct.context) <= 1300
    # the gold answer's key facts are in its context: the correct answer is supported
    for p in pairs[::2]:
        for kw in gold[p.id.split(":")[0]].answer_keywords:
            assert kw in p.context, (p.id, kw)


def test_make_calibration_pairs_on_dicts_and_parallel_contexts():
    qs = [{"id": "a", "question": "Price?", "gold_answer": "The Julian Alps Weekend costs 450 euros."},
          {"id": "b", "question": "Founded?", "gold_answer": "The documents do not say.", "gold_sources": []}]
    pairs = make_calibration_pairs(qs, ["The Julian Alps Weekend costs 450 euros.", "anything"], seed=3)
    assert [p.id for p in pairs] == ["a:correct", "a:corrupted"]  # unanswerable b is skipped
    with pytest.raises(ValueError):
        make_calibration_pairs(qs, ["only one"], seed=0)


def test_judge_from_settings(make_settings, tmp_path):
    from adiyan.eval.judge import judge_from_settings

    assert judge_from_settings(make_settings(**{"eval.judge": None})) is None  # no LLM-judged metrics
    settings = make_settings(**{"eval.judge": "smollm2"})
    judge = judge_from_settings(settings)
    assert judge.id == "smollm2-135m-instruct-q4_1"
    assert judge.timeout_s == (getattr(settings.eval, "judge_timeout_s", None) or settings.llm.timeout_s)
    assert judge.cache.path == tmp_path / "cache" / "calls.sqlite" and judge.cache.namespace == "judge"
