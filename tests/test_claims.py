"""The claim checker and claim-level scoring (issue 39): claims split from a hand-made answer, the
committed checker on hand-made supported / unsupported pairs, the RAGTruth-format loader on a
hand-made folder with F1 computed by hand, the int8 weights' round trip, and the judge skipped
when its (cached) calibration failed."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from adiyan.eval import claims as C
from adiyan.eval import hallucination as H
from adiyan.models.checker import CHECKER_DIR, ClaimChecker, dequantize, file_sha256, quantize, windows


# ---------------------------------------------------------------- claims


def test_claims_split_from_a_hand_made_answer():
    answer = ("The tour costs 450 euros per person [1]. It leaves Lisbon on 3 May 2024, and it returns to Porto on "
              "10 May 2024 [2]. I don't know the guide's name. Groups of 10 or more get 5% off; children under 12 "
              "travel free.")
    assert C.split_claims(answer) == [
        "The tour costs 450 euros per person.",  # the citation marker goes, the number stays whole
        "It leaves Lisbon on 3 May 2024",  # ", and" + a clause with its own verb: two claims
        "it returns to Porto on 10 May 2024.",
        "Groups of 10 or more get 5% off",  # "; " splits; the abstaining sentence is no claim
        "children under 12 travel free.",
    ]
    spans = C.claim_spans(answer)
    assert answer[spans[0][0]:spans[0][1]] == "The tour costs 450 euros per person [1]."


def test_an_abstention_has_no_claims_and_no_faithfulness():
    assert C.split_claims("I don't know.") == []
    assert C.split_claims("The provided passages do not mention the founding year.") == []
    # a short answer that says something is one claim, whole
    assert C.split_claims("Yes [2].") == ["Yes."]
    assert C.split_claims("450 euros") == ["450 euros"]


def test_windows_cover_a_long_passage_with_half_overlap():
    words = [f"w{i}" for i in range(400)]
    wins = windows(" ".join(words), words=150)
    assert [w.split()[0] for w in wins] == ["w0", "w75", "w150", "w225", "w300"]
    assert wins[-1].split()[-1] == "w399"  # nothing at the end is left out
    assert windows("a short passage") == ["a short passage"]


def test_int8_weights_round_trip_within_half_a_step_per_row():
    rng = np.random.default_rng(0)
    state = {"m": rng.normal(size=(8, 16)).astype(np.float32), "b": rng.normal(size=16).astype(np.float32)}
    back = dequantize(quantize(state))
    step = np.abs(state["m"]).max(axis=1, keepdims=True) / 127
    assert np.all(np.abs(back["m"] - state["m"]) <= step / 2 + 1e-7)  # rounding: at most half a step per row
    assert np.allclose(back["b"], state["b"], atol=2e-3)  # float16 vectors


# ---------------------------------------------------------------- the committed checker


@pytest.fixture(scope="module")
def checker():
    return ClaimChecker.load()


def test_the_committed_weights_are_the_ones_the_card_names():
    card = json.loads((CHECKER_DIR / "card.json").read_text())
    assert file_sha256(CHECKER_DIR / "weights.npz") == card["weights_sha256"]
    assert (CHECKER_DIR / "weights.npz").stat().st_size <= 30 * 2**20  # committed once, int8
    assert card["command"].startswith("adiyan checker train")


PASSAGE = ("Refunds. A booking cancelled at least 30 days before departure is refunded in full. Between 7 and 29 "
           "days before departure, half of the price is refunded. Later cancellations are not refunded. The "
           "Douro valley tour costs 450 euros per person and includes lunch at the Quinta do Crasto.")


@pytest.mark.parametrize("claim,supported", [
    ("A booking cancelled 30 days before departure is refunded in full.", True),
    ("The Douro valley tour costs 450 euros per person.", True),
    ("The Douro valley tour costs 950 euros per person.", False),  # a number changed
    pytest.param("Cancellations made later than 7 days before departure are refunded in full.", False,  # polarity
                 marks=pytest.mark.xfail(strict=True, reason="a known weakness: the checker misses polarity flips "
                                         "(62% of its synthetic polarity conflicts caught, card.json)")),
    ("The tour includes a private wine tasting with the winemaker.", False),  # baseless addition
])
def test_hand_made_pairs_are_scored_the_right_way(checker, claim, supported):
    p = checker.support([claim], [PASSAGE])[0].probability  # the encoder and its numbers rule
    assert (p >= C.SUPPORT_THRESHOLD) is supported, (claim, p)


def test_claim_scores_of_a_faithful_and_an_unfaithful_answer(checker):
    good = C.answer_claim_scores(checker, "The Douro valley tour costs 450 euros per person [1].", [PASSAGE],
                                 gold="The tour costs 450 euros per person.")
    bad = C.answer_claim_scores(checker, "The Douro valley tour costs 950 euros per person and includes a "
                                "helicopter flight.", [PASSAGE], gold="The tour costs 450 euros per person.")
    assert good["claim_faithfulness"] == 1.0 and good["claim_hallucination"] == 0.0
    assert bad["claim_hallucination"] == 1.0 and bad["claim_faithfulness"] < 1.0
    assert good["claim_precision"] == 1.0 and good["claim_recall"] == 1.0 and good["claim_f1"] == 1.0
    assert bad["claim_precision"] == 0.0
    assert good["claims"][0]["span"] and good["claims"][0]["supported"] is True


# ---------------------------------------------------------------- the RAGTruth-format loader


def _ragtruth(folder, rows, sources):
    folder.mkdir()
    (folder / "source_info.jsonl").write_text("\n".join(json.dumps(s) for s in sources) + "\n")
    (folder / "response.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return folder


def test_ragtruth_format_loader_and_figures_by_hand(tmp_path):
    src = "The museum opens at nine. Tickets cost twelve euros. The garden closes in winter."
    data2txt = {"name": "Cafe Sol", "attributes": {"WiFi": "no", "OutdoorSeating": True}}
    r_ok = "The museum opens at nine."  # every content word in the source
    r_bad = "The museum opens at nine. Visitors receive complimentary audio guides."  # 2nd sentence: 0/4 words
    r_d2t = "Cafe Sol offers outdoor seating but no WiFi."
    rows = [{"id": "1", "source_id": "s1", "response": r_ok, "labels": []},
            {"id": "2", "source_id": "s1", "response": r_bad,
             "labels": [{"start": 26, "end": len(r_bad), "text": r_bad[26:], "label_type": "Evident Baseless Info"}]},
            {"id": "3", "source_id": "s2", "response": r_d2t, "labels": []}]
    sources = [{"source_id": "s1", "task_type": "Summary", "source_info": src},
               {"source_id": "s2", "task_type": "Data2txt", "source_info": data2txt}]
    items = H.load_ragtruth(_ragtruth(tmp_path / "rt", rows, sources))
    assert [r.hallucinated for r in items] == [False, True, False]
    assert items[2].source == "name: Cafe Sol.\nattributes WiFi: no.\nattributes OutdoorSeating: True."
    res = H.evaluate(items, H.lexical_scorer(), 0.5, resamples=50)
    # by hand: response 2's second sentence shares none of "visitors receive complimentary audio guides";
    # response 3: content words cafe, sol, offer, outdoor, seat, wifi; the written-out JSON holds
    # cafe, sol, wifi ("OutdoorSeating" is one word there): 3/6 = 0.5, not under the 0.5 threshold;
    # responses 1 and 3 are not flagged, 2 is: TP 1, FP 0, FN 0
    assert res["overall"]["precision"] == 1.0 and res["overall"]["recall"] == 1.0 and res["overall"]["f1"] == 1.0
    assert res["overall"]["auroc"] == 1.0
    # span F1 over characters: flagged = the second sentence (26..end), gold the same span
    assert res["overall"]["span_f1"] == 1.0
    assert res["Summary"]["n"] == 2 and res["Data2txt"]["n"] == 1


def test_span_f1_counts_characters(tmp_path):
    item = H.LabelledResponse("1", "s", "QA", "source", "x" * 100, spans=[(0, 40)])
    scored = [H.Scored(0.1, [(20, 60)])]  # 20 chars shared, 20 extra, 20 missed: P = R = 0.5
    f = H.figures([item], scored, 0.5)
    assert f["span_f1"] == 0.5 and f["f1"] == 1.0


def test_a_bad_ragtruth_folder_is_named(tmp_path):
    with pytest.raises(H.HallucinationSetError, match="folder not found"):
        H.load_ragtruth(tmp_path / "missing")
    folder = _ragtruth(tmp_path / "rt", [{"id": "1", "source_id": "nope", "response": "x", "labels": []}],
                       [{"source_id": "s1", "task_type": "QA", "source_info": {"question": "q", "passages": "p"}}])
    with pytest.raises(H.HallucinationSetError, match="names source nope"):
        H.load_ragtruth(folder)


def test_auroc_by_hand():
    assert H.auroc([1, 0, 1, 0], [0.9, 0.1, 0.4, 0.6]) == 0.75  # 3 of 4 (pos, neg) pairs ordered
    assert H.auroc([1, 0], [0.5, 0.5]) == 0.5  # a tie counts half


# ---------------------------------------------------------------- the judge, skipped when unreliable


class CoinJudgeLLM:
    """Test double (control flow): a seeded coin for every verdict; counts its calls."""

    id = "coin-judge"
    calls = 0

    def __init__(self):
        self.rng = random.Random(7)

    def chat(self, messages, **kw):
        from adiyan.models.base import Completion
        CoinJudgeLLM.calls += 1
        return Completion(text=json.dumps({"supported": self.rng.random() < 0.5}))


def test_the_judge_is_skipped_when_its_cached_calibration_failed(make_settings, monkeypatch, tmp_path):
    import adiyan.eval.scorers as S
    from adiyan.cache import CallCache
    from adiyan.eval.judge import Judge
    from adiyan.eval.judge.calibration import CalibrationPair

    pairs = [CalibrationPair(f"p{i}", "How much?", "It costs 450 euros.", "450 euros" if i % 2 else "900 euros",
                             "correct" if i % 2 else "corrupted_fact") for i in range(12)]
    monkeypatch.setattr(S, "evalset_calibration_pairs", lambda *a, **kw: pairs)
    monkeypatch.setattr(S, "judge_from_settings", lambda s: Judge(CoinJudgeLLM(), CallCache(tmp_path / "j.sqlite", "judge"),
                                                                  timeout_s=None, max_retries=0))
    monkeypatch.setattr(S, "score_llm", lambda *a, **kw: pytest.fail("an unreliable judge must not score"))
    s = make_settings(**{"eval.judge_calibration_early_stop": True})
    rows = [{"id": "q1", "question": "How much?", "answer": "450 euros", "hit": True, "gold_answer": "450 euros",
             "gold_sources": ["a.md"], "retrieved": [{"source": "a.md", "text": "It costs 450 euros."}]}]
    first = S.judged(s, None, rows, None, False, {})
    calls_first = CoinJudgeLLM.calls
    assert first["skipped"] is True and first["calibration"]["reliable"] is False
    assert first["summary"]["sample"]["n_scored"] == 0 and first["per_row"] == []
    assert 0 < calls_first <= 12
    second = S.judged(s, None, rows, None, False, {})
    assert second["calibration"]["reused"] is True and second["skipped"] is True
    assert CoinJudgeLLM.calls == calls_first  # the cached failed calibration: no judge call at all
