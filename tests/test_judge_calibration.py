"""Judge calibration held to a confidence interval: the labelled pairs (four labels over every
question kind of the evalset), the Wilson interval, and who gets called reliable: a coin never,
a judge that knows the labels with 40 pairs always, one right on 36 of 40 not."""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections import Counter
from html.parser import HTMLParser

import pytest

from adiyan.eval.evalset import load_evalset
from adiyan.eval.judge import (
    LABELS,
    Judge,
    calibrate,
    calibration_prompt,
    evalset_calibration_pairs,
    make_calibration_pairs,
    wilson_interval,
)
from adiyan.ingest.parse import parse_document
from adiyan.models.base import Completion

from tests.conftest import ROOT

Z = 1.959963984540054


class DictCache:
    """Test double for control flow only: the judge's call cache in memory (thousands of asks)."""

    def __init__(self):
        self.data = {}

    def key(self, payload):
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()

    def get(self, key):
        return self.data.get(key)

    def put(self, key, value):
        self.data[key] = value


class CoinLLM:
    """Test double: a judge answering at random (a seeded coin), whatever it is asked."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.id = f"coin-{seed}"

    def chat(self, messages, *, max_tokens=None, temperature=None):
        return Completion(text=json.dumps({"supported": self.rng.random() < 0.5}))


class OracleLLM:
    """Test double: a judge that knows every pair's label (and may be told to get some wrong)."""

    def __init__(self, pairs, wrong: int = 0):
        self.id = f"oracle-wrong-{wrong}"
        self.truth = {calibration_prompt(p): p.label == "correct" for p in pairs}
        self.flip = {calibration_prompt(p) for p in pairs[:wrong]}

    def chat(self, messages, *, max_tokens=None, temperature=None):
        prompt = messages[-1]["content"]
        return Completion(text=json.dumps({"supported": self.truth[prompt] != (prompt in self.flip)}))


def _judge(llm) -> Judge:
    return Judge(llm, DictCache(), timeout_s=None, max_retries=0)


class _Text(HTMLParser):
    """HTML to text with a blank line after every block (the test's stand-in for the parser's HTML tier)."""

    def __init__(self):
        super().__init__()
        self.out = []

    def handle_data(self, data):
        self.out.append(data)

    def handle_endtag(self, tag):
        if tag in {"p", "li", "h1", "h2", "h3", "tr", "table", "div", "section"}:
            self.out.append("\n\n")


def _full_doc_texts(es) -> dict[str, str]:
    """adiyan_full's document texts (the run takes them from the KB; here, quicker): Markdown as
    is, DOCX from the Markdown sources build.py writes them from, PPTX through the real parser
    without OCR, HTML by tag stripping."""
    texts = {}
    for d in es.documents:
        if d.filename.endswith(".md"):
            texts[d.source_key] = d.path.read_text(encoding="utf-8")
        elif d.filename.endswith(".docx"):
            texts[d.source_key] = (es.root / "src" / d.filename.replace(".docx", ".md")).read_text(encoding="utf-8")
        elif d.filename.endswith(".html"):
            p = _Text()
            p.feed(d.path.read_text(encoding="utf-8"))
            texts[d.source_key] = re.sub(r"\n\s*\n\s*", "\n\n", "".join(p.out))
        else:
            texts[d.source_key] = parse_document(d.path.read_bytes(), d.filename, ocr="none").text
    return texts


@pytest.fixture(scope="module")
def full_pairs():
    es = load_evalset(ROOT / "evalsets" / "adiyan_full")
    texts = _full_doc_texts(es)
    return es, texts, evalset_calibration_pairs(es, seed=0, n_pairs=40, doc_texts=texts)


# ------------------------------------------------------------------------------- the interval

def test_wilson_interval_by_hand():
    # n successes of n: the lower bound is n / (n + z^2)
    assert wilson_interval(40, 40)[0] == pytest.approx(40 / (40 + Z * Z))  # 0.9124
    assert wilson_interval(6, 6)[0] == pytest.approx(6 / (6 + Z * Z))  # 0.6097: 6 pairs can never clear 0.8
    # 20 of 40: centre 0.5, half-width z * sqrt(0.25/40 + z^2/6400) / (1 + z^2/40)
    half = Z * (0.25 / 40 + Z * Z / 6400) ** 0.5 / (1 + Z * Z / 40)
    lo, hi = wilson_interval(20, 40)
    assert (lo, hi) == (pytest.approx(0.5 - half), pytest.approx(0.5 + half)) and lo == pytest.approx(0.352, abs=1e-3)
    assert wilson_interval(0, 0) == (None, None)
    with pytest.raises(ValueError):
        wilson_interval(5, 4)


def test_wilson_interval_matches_scipy():
    stats = pytest.importorskip("scipy.stats")
    for k, n in [(0, 40), (13, 40), (36, 40), (37, 40), (40, 40), (3, 4)]:
        ci = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
        assert wilson_interval(k, n) == (pytest.approx(ci.low, abs=1e-9), pytest.approx(ci.high, abs=1e-9))


# ------------------------------------------------------------------------------- who is reliable

@pytest.mark.slow  # 12 s of the default suite on an idle machine (CI runs it)
def test_a_coin_is_never_called_reliable_though_the_old_rule_often_did(full_pairs):
    _, _, pairs = full_pairs
    old_rule_reliable = 0
    for seed in range(200):
        cal = calibrate(_judge(CoinLLM(seed)), pairs, reliable_threshold=0.8)
        assert cal.n == 40 and not cal.reliable, (seed, cal.agreement, cal.ci95)
        assert cal.ci95[0] < 0.8
        # the old rule: the point estimate on the first 6 pairs reaching 0.8
        six = calibrate(_judge(CoinLLM(seed)), pairs[:6], reliable_threshold=0.8)
        assert not six.reliable  # 6 pairs cannot make anyone reliable (6/6 -> lower bound 0.61)
        old_rule_reliable += six.agreement >= 0.8
    # a coin reaches 5 or 6 of 6 with probability 7/64 = 11%: the old rule called ~22 of 200 reliable
    assert 8 <= old_rule_reliable <= 40


def test_a_judge_that_knows_the_labels_is_reliable_with_40_pairs(full_pairs):
    _, _, pairs = full_pairs
    cal = calibrate(_judge(OracleLLM(pairs)), pairs, reliable_threshold=0.8)
    assert (cal.n, cal.agreement, cal.n_failed) == (40, 1.0, 0)
    assert cal.ci95[0] == pytest.approx(40 / (40 + Z * Z), abs=1e-6) and cal.reliable
    assert all(v["agree"] == v["n"] for v in cal.per_label.values())
    assert cal.as_dict()["reliable"] is True and "clears" in cal.as_dict()["why"]
    # right on 37 of 40 clears the line (lower bound 0.801); 36 of 40 (0.9) does not (0.769)
    assert calibrate(_judge(OracleLLM(pairs, wrong=3)), pairs).reliable
    nine_tenths = calibrate(_judge(OracleLLM(pairs, wrong=4)), pairs)
    assert nine_tenths.agreement == 0.9 and not nine_tenths.reliable and "is under" in nine_tenths.why()


def test_a_judge_answering_one_way_every_time_agrees_on_half(full_pairs):
    """Half the pairs are correct, so always-yes and always-no both sit at 0.5."""
    _, _, pairs = full_pairs

    class Always:
        def __init__(self, v):
            self.v, self.id = v, f"always-{v}"

        def chat(self, messages, **kw):
            return Completion(text=json.dumps({"supported": self.v}))

    assert [calibrate(_judge(Always(v)), pairs).agreement for v in (True, False)] == [0.5, 0.5]


# ------------------------------------------------------------------------------- the pairs

def test_forty_pairs_over_every_question_kind_and_four_labels(full_pairs):
    es, texts, pairs = full_pairs
    assert len(pairs) == 40 and len({p.id for p in pairs}) == 40
    labels = Counter(p.label for p in pairs)
    assert labels == {"correct": 20, "corrupted_fact": 7, "unsupported_addition": 7, "wrong_source": 6}
    assert set(labels) == set(LABELS)
    kinds = Counter(p.kind for p in pairs)
    assert set(kinds) == {q.kind for q in es.questions}  # lookup ... unanswerable, private
    for label in LABELS:  # each label is spread over kinds, not drawn from one
        assert len({p.kind for p in pairs if p.label == label}) >= min(5, labels[label])
    assert pairs == evalset_calibration_pairs(es, seed=0, n_pairs=40, doc_texts=texts)  # deterministic
    assert pairs != evalset_calibration_pairs(es, seed=1, n_pairs=40, doc_texts=texts)


def test_each_label_means_what_it_says(full_pairs):
    es, _, pairs = full_pairs
    gold = {q.id: q for q in es.questions}
    for p in pairs:
        q = gold[p.id.split(":")[0]]
        kws = [k.lower() for k in q.answer_keywords]
        if p.label == "correct":  # the gold answer, and its key facts are in the context
            assert p.answer == q.gold_answer and all(k in p.context.lower() for k in kws), p.id
        elif p.label == "wrong_source":  # the gold answer beside a context that does not state it
            assert p.answer == q.gold_answer and not any(k in p.context.lower() for k in kws), p.id
            assert p.context not in {c.context for c in pairs if c.id == f"{q.id}:correct"}
        elif p.label == "unsupported_addition":  # the gold answer (or abstention) plus another fact
            assert p.answer.startswith(q.gold_answer.rstrip(".")) and len(p.answer) > len(q.gold_answer), p.id
            added = p.answer[len(q.gold_answer):]
            donor = gold[p.corruption.split("from ", 1)[1]]
            assert donor.id != q.id and not set(donor.gold_sources) & set(q.gold_sources)
            assert not any(k.lower() in p.context.lower() for k in donor.answer_keywords), p.id
            assert added.strip() and added.strip() in donor.gold_answer
        else:  # a number, name or negation changed; the new value is not in the context
            kind, change = p.corruption.split(": ", 1)
            assert kind in {"number", "name", "negation"} and p.answer != q.gold_answer
            if kind in {"number", "name"}:
                new = change.split(" -> ")[1]
                assert new in p.answer and new not in p.context, p.id
        assert len(p.context) <= 1300


def test_make_calibration_pairs_on_dicts_and_parallel_contexts():
    qs = [{"id": "a", "question": "Price?", "gold_answer": "The Julian Alps Weekend costs 450 euros.",
           "kind": "lookup"},
          {"id": "b", "question": "Who guides the Carpathian Villages tour?", "kind": "lookup",
           "gold_answer": "Bogdan Zhelyazkov guides the Carpathian Villages tour."},
          {"id": "c", "question": "Founded?", "gold_answer": "The documents do not say.", "gold_sources": [],
           "kind": "unanswerable"}]
    ctx = ["The Julian Alps Weekend costs 450 euros.", "Bogdan Zhelyazkov guides the Carpathian Villages tour.",
           "anything"]
    pairs = make_calibration_pairs(qs, ctx, seed=3)
    by_id = {p.id: p for p in pairs}
    assert {"a:correct", "a:corrupted_fact", "a:unsupported_addition", "a:wrong_source", "b:correct"} <= set(by_id)
    assert by_id["a:wrong_source"].context == ctx[1]  # b's context does not state a's price
    assert by_id["a:unsupported_addition"].answer == qs[0]["gold_answer"] + " " + qs[1]["gold_answer"]
    assert not any(p.id.startswith("c:") and p.label == "correct" for p in pairs)  # no clean "correct" abstention
    with pytest.raises(ValueError):
        make_calibration_pairs(qs, ["only one"], seed=0)
