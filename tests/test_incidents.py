"""The five incidents, replayed through production code over authored variants (evalsets/incidents/).

For every incident: the replay holds on minilm with the counts checked by hand against the data
files, and a second test breaks the production safeguard the after relies on (the access filter,
structural chunking, recency, the parser's warnings, the router's refusal) and shows the
principle no longer holds, so a "holds" can be false. Monkeypatches here only remove a
safeguard; everything else is the real pipeline on the real model.
"""

from __future__ import annotations

import numpy as np
import pytest

import adiyan.kb
import adiyan.kb.signals
import adiyan.memory
import adiyan.retrieval.memory_rank
from adiyan.agent import TIERS
from adiyan.eval import incidents as I
from adiyan.eval.incidents import IncidentResult, format_table, incident_metrics, replay_all, summary
from adiyan.eval.incidents import permissions as incident5
from adiyan.eval.incidents import slides as incident4
from adiyan.eval.regression import check, load_cases
from adiyan.ingest.report import ExtractionReport
from adiyan.retrieval.floor import load_floors


@pytest.fixture
def settings(make_settings):
    """As the default configuration runs minilm: no floor applies (conftest turns calibrated floors
    off; the default run does not apply minilm's either, its J 0.186 < 0.2). No floor is injected."""
    return make_settings()


# -- 5. permission gap (the real router) ---------------------------------------------------------


def test_permission_gap_holds_with_the_real_router(settings):
    r = I.permission_gap(settings, None)
    assert r.holds is True and r.variants_text == "3/3 variants"
    # production refuses the before, so the verdict is a replica's, not "holds" (issue 44.7)
    assert r.basis == "replica" and r.status == "demonstrated on a replica" and "Agent refuses" in r.basis_note
    d = r.details
    assert [x["refused"] for x in d["production_refusals"]] == [True, True]
    assert "default_tier_fallback" in d["production_refusals"][0]["error"]  # named, through load_settings
    assert "general_reasoning" in d["production_refusals"][1]["error"]  # the tier table handed to the agent
    # permission_gap.yaml: 3 general messages; the seed's guest tier cannot run them
    assert d["gap_before"] == 3 and d["silent_before"] == 0 and d["gap_after"] == 0
    # 12 messages x 3 tiers; guest may not run document_request (3) nor memory_question (3)
    assert (d["ran_after"], d["refused_after"], d["silent_after"]) == (30, 6, 0)
    assert d["not_as_specified"] == []


def test_permission_gap_fails_when_a_refusal_is_swallowed(settings, monkeypatch):
    monkeypatch.setattr("adiyan.agent.routing.authorize", lambda *a, **k: None)  # the safeguard, removed
    r = I.permission_gap(settings, None)
    assert r.holds is False
    assert r.violated == 6  # guest ran the 6 document and memory requests it may not run
    assert r.not_reproduced == 3  # and with nothing refused, the before shows no gap either


def test_permission_gap_fails_when_production_accepts_the_seeds_configuration(settings, monkeypatch):
    class Accepting:  # test double for control flow: an Agent that takes any configuration
        def __init__(self, *a, **k):
            pass

    monkeypatch.setattr(incident5, "Agent", Accepting)
    r = I.permission_gap(settings, None)
    assert r.holds is False and r.status == "FAILS" and r.violated == 2
    assert [x["refused"] for x in r.details["production_refusals"]] == [False, False]


def test_permission_gap_before_fails_if_the_setting_is_ignored(settings, monkeypatch):
    monkeypatch.setattr(incident5, "tier_table", lambda default_tier_fallback=True: dict(TIERS))
    r = I.permission_gap(settings, None)
    # the router's before shows no gap, and the "seed's" table handed to the agent is the full one: accepted
    assert r.holds is False and r.variants_text == "0/4 variants, 3 not reproduced, 1 violated"


# -- 2. unscoped search (the KB search with the access filter off) --------------------------------


def test_unscoped_search_holds(settings, minilm):
    r = I.unscoped_search(settings, minilm)
    assert r.holds is True and r.variants_text == "3/3 variants"
    assert r.basis == "replica" and r.status == "demonstrated on a replica"  # production refuses the before
    d = r.details
    # with the filter off only the two search paths without a per-document check leak: 3 probes each
    assert d["before_leaking_paths"] == ["retrieve_knowledge_base", "find_source_document"]
    assert d["leaks_before"] == 6 and d["leaks_after"] == 0 and d["owners_retrieve"] == 3
    assert d["migration_ok"] and d["legacy_visible_to_owner_before_migration"] == 0


def test_unscoped_search_fails_without_the_access_filter(settings, minilm, monkeypatch):
    # the engine query's filter, removed (KnowledgeBase.search lives in adiyan.kb.signals)
    monkeypatch.setattr(adiyan.kb.signals, "access_filter", lambda *a, **k: None)
    r = I.unscoped_search(settings, minilm)
    assert r.holds is False and r.violated == 4  # the 3 probes, and the migrated legacy chunk shows to others
    assert r.details["leaks_after"] >= 6 and r.details["legacy_visible_to_other"] == 1


def test_unscoped_search_before_fails_if_the_setting_is_ignored(settings, minilm, monkeypatch):
    search = adiyan.kb.KnowledgeBase.search

    def scoped_always(self, *a, unscoped=False, **k):
        return search(self, *a, unscoped=False, **k)

    monkeypatch.setattr(adiyan.kb.KnowledgeBase, "search", scoped_always)
    r = I.unscoped_search(settings, minilm)
    assert r.holds is False and r.details["leaks_before"] == 0 and r.not_reproduced == 3


# -- 4. image-only slide (the parser with OCR off) ------------------------------------------------


def test_image_only_slides_hold(settings):
    r = I.image_only_slide(settings, None)
    # slide 5's picture holds no text: OCR cannot change it, so it is checked but not a test
    assert r.holds is True and r.variants_text == "4/4 variants, 1 not a test"
    slides = {(s["deck"].rsplit("/", 1)[-1], s["slide"]): s for s in r.details["slides"]}
    assert all(s["before"]["chars"] == 0 and s["before"]["warnings"] == ["empty_slide"] for s in slides.values())
    assert slides[("sales_deck.pptx", 4)]["after"]["tier"] == "ocr:rapidocr"
    assert "SNOW-24" in slides[("sales_deck.pptx", 4)]["after"]["text"]
    assert slides[("image_only_slides.pptx", 5)]["after"]["warnings"] == ["empty_slide"]  # no text to find


def test_image_only_slides_fail_when_empty_slides_go_unnamed(settings, monkeypatch):
    monkeypatch.setattr(ExtractionReport, "warn", lambda self, code, unit, message: None)  # warnings, removed
    r = I.image_only_slide(settings, None)
    assert r.holds is False and r.violated == 5 and r.details["silent_before"] == 5  # slide 5 too: it is silent


def test_image_only_slides_before_shows_nothing_if_ocr_none_is_ignored(settings, monkeypatch):
    parse_cached = incident4.parse_cached

    def ocr_always_on(data, filename, ingest, cache=None):  # the before's ingest.ocr=none, ignored
        return parse_cached(data, filename, ingest.model_copy(update={"ocr": "rapidocr"}), cache)

    monkeypatch.setattr(incident4, "parse_cached", ocr_always_on)
    r = I.image_only_slide(settings, None)
    # only the slide whose picture holds no text is still lost before; it cannot discriminate, so
    # nothing is held and the principle is not shown (it held here before issue 23: "1/5 variants")
    assert r.variants_text == "0/4 variants, 4 not reproduced, 1 not a test" and r.details["lost_before"] == 1
    assert r.holds is False


def test_a_variant_that_is_not_a_test_never_carries_the_verdict():
    from adiyan.eval.incidents.common import HELD, NOT_A_TEST, NOT_REPRODUCED, VIOLATED, classify, counts, verdict

    assert classify(True, True, discriminating=False) == NOT_A_TEST
    assert classify(True, False, discriminating=False) == VIOLATED  # a broken defence is never hidden
    assert verdict([NOT_A_TEST, NOT_REPRODUCED]) is False and verdict([NOT_A_TEST]) is False
    assert verdict([HELD, NOT_A_TEST]) is True and verdict([HELD, NOT_A_TEST, VIOLATED]) is False
    r = IncidentResult(4, "x", "", "", "m", False, "", **counts([NOT_A_TEST, NOT_REPRODUCED]))
    assert r.variants_text == "0/1 variants, 1 not reproduced, 1 not a test" and r.variants_share == 0.0


# -- 1. chunk dilution (the knowledge base, heading-blind vs structural) ---------------------------


def test_chunk_dilution_is_checked_without_a_floor_in_the_default_configuration(settings, minilm):
    """No floor applies to minilm by default: the principle is checked on rank and margin, and the
    regression case is checked (before issue 23 it was n/a and the case unchecked)."""
    r = I.chunk_dilution(settings, minilm)
    assert r.details["floor"] == 0 and r.holds is True and r.variants_text == "6/6 variants, 1 n/a"
    rows = {v["id"]: v for v in r.details["variants"]}
    assert rows["seed_notes"]["status"] == "n/a" and rows["seed_notes"]["na_reason"].startswith("503 tokens, past minilm")
    for v in (v for v in rows.values() if v["status"] != "n/a"):
        assert max(v["before_tokens"], v["after_tokens"], v["question_tokens"]) <= 256
        assert v["before_chunks"] == 1 and v["after_chunks"] == 5  # five sections, five chunks
        assert v["before_score"] < v["after_score"] and v["before_margin"] < v["after_margin"]
        assert v["after_rank"] == 1 and v["after_margin"] > 0
        # the margin is the fact's cosine minus the best cosine of a chunk without the fact
        assert v["after_margin"] == pytest.approx(v["after_score"] - v["after_best_unrelated"], abs=2e-4)
    results = {c.id: c for c in check({"incidents": incident_metrics([r])}, "minilm", "adiyan_full")}
    assert results["chunk-dilution-structural"].status == "pass" and results["chunk-dilution-rank"].status == "pass"
    assert results["chunk-dilution-floor"].status == "n/a"  # the seed's form: only where a floor applies


def test_chunk_dilution_fails_without_structural_chunking(settings, minilm, monkeypatch):
    chunk_text = adiyan.kb.chunk_text

    def heading_blind(text, cfg, **kw):  # structural chunking, removed: one chunk per file
        if cfg.strategy == "markdown":
            cfg = cfg.model_copy(update={"strategy": "fixed", "size": len(text) + 1, "overlap": 0})
        return chunk_text(text, cfg, **kw)

    monkeypatch.setattr(adiyan.kb, "chunk_text", heading_blind)
    r = I.chunk_dilution(settings, minilm)
    assert r.holds is False and r.violated == 6 and r.metrics["margin_gain_min"] == 0
    failed = {c.id: c.status for c in check({"incidents": incident_metrics([r])}, "minilm", "adiyan_full")}
    assert failed["chunk-dilution-structural"] == "fail"  # invoke eval (and CI) exit non-zero


@pytest.mark.slow
def test_chunk_dilution_under_minilms_xquad_floor(make_settings, minilm):
    """minilm's XQuAD-calibrated floor (not applied by default, J < 0.2), forced on: the rank/margin
    principle still holds, but in the seed's form one structural chunk falls under it too
    (allergy, cosine 0.332 when measured): 5/6, which is what a floor with J 0.186 does."""
    floor = load_floors()["minilm"]["floor"]
    r = I.chunk_dilution(make_settings(**{"retrieval.score_floors.minilm": floor}), minilm)
    assert r.details["floor"] == floor and r.holds is True
    rows = {v["id"]: v for v in r.details["variants"] if v["status"] != "n/a"}
    assert all(not v["before_kept"] for v in rows.values())  # every heading-blind file under it
    assert [k for k, v in rows.items() if not v["after_kept"]] == ["allergy"]
    assert rows["allergy"]["after_score"] < floor and r.metrics["floor_variants_held"] == pytest.approx(5 / 6)


# -- 3. stale fact (the real memory, with and without recency) -------------------------------------


@pytest.mark.slow
def test_stale_fact_holds(settings, minilm):
    r = I.stale_fact(settings, minilm)
    assert r.holds is True and r.variants_text == "7/7 variants"
    rows = {v["id"]: v for v in r.details["variants"]}
    assert rows["colour"]["stale_similarity"] > rows["colour"]["correction_similarity"]
    assert r.details["negation_closer"] == 7
    # the run's own pair, computed with its embedder (issue 23: 0.91 / 0.36 were written into every run)
    pair = r.details["measured_pair"]
    assert pair["embedder"] == "minilm" and pair["terms"] == rows["colour"]["negation"]
    t, neg, other = minilm.embed(list(pair["terms"]), None)
    assert pair["cos_negation"] == pytest.approx(float(t @ neg / (np.linalg.norm(t) * np.linalg.norm(neg))), abs=1e-4)
    assert pair["cos_unrelated"] == pytest.approx(float(t @ other / (np.linalg.norm(t) * np.linalg.norm(other))),
                                                  abs=1e-4)
    assert not [k for k in r.details if k.startswith("project_")]  # no other model's figure written as this run's
    assert r.details["seed_constants"]["cos_teal_not_teal"] == 0.86 and "constant" in r.details["seed_constants"]["source"]
    assert r.basis == "production configuration" and r.status == "holds"
    # issue 44.7: the margin and break-even gap come from the scores measured (the configured search without
    # time: the hybrid fusion by default), not from the dates
    col = rows["colour"]
    ratio = 2 ** (29 / 14)
    assert col["margin"] == pytest.approx(col["correction_base"] * ratio - col["stale_base"], abs=1e-3)
    assert col["break_even_gap_days"] == pytest.approx(
        14 * np.log2(col["stale_base"] / col["correction_base"]), abs=1e-2)
    assert col["margin_days"] == pytest.approx(29 - col["break_even_gap_days"], abs=1e-3)
    assert r.metrics["margin_days_min"] == min(v["margin_days"] for v in rows.values())
    grid = r.details["gap_grid_days"]
    assert grid["29"] == 7 and grid["0.5"] < 7  # a half-day gap is too short for some variants here
    # each grid cell agrees with the break-even gaps: the correction is first exactly where gap > g*
    for gap, first in grid.items():
        assert first == sum(float(gap) > v["break_even_gap_days"] for v in rows.values()), gap
    # issue 43: recency decays only a superseded statement; every correction was found to supersede its
    # statement, by the pair's cosine (computed here by hand) over the threshold that applies
    specs = {v["id"]: v for v in I.stale.load_spec("stale_fact.yaml")["variants"]}
    for vid, row in rows.items():
        a, b = minilm.embed([specs[vid]["stale"], specs[vid]["correction"]], "document")
        cos = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
        need = 0.7 if row["change_cue"] else 0.8
        assert row["pair_cosine"] == pytest.approx(cos, abs=1e-4) and row["supersede_threshold"] == need
        assert row["detected"] and row["detection_margin"] == pytest.approx(cos - need, abs=1e-4)
    assert r.metrics["detection_margin_min"] == min(v["detection_margin"] for v in rows.values()) > 0


def test_stale_fact_with_the_seeds_memory_holds_by_decaying_everything(settings, minilm):
    """The seed's rule (dense search, every memory decayed by its age) still holds, and reports no detection."""
    r = I.stale_fact(settings.with_overrides({"memory.search": "dense", "memory.recency_scope": "all"}), minilm)
    assert r.holds is True and r.variants_text == "7/7 variants" and "detection_margin_min" not in r.metrics
    rows = {v["id"]: v for v in r.details["variants"]}
    assert all(v["stale_base"] == v["stale_similarity"] for v in rows.values())  # dense: the base is the cosine


def test_stale_fact_margin_by_hand():
    """The seed's pair, 0.781 (stale) vs 0.725 (correction), 14-day half-life: the correction wins once it
    is 14 * log2(0.781 / 0.725) = 1.503 days newer, so a 29-day gap leaves 27.497 days to spare; the stale
    text would need 0.725 * 2 ** (29 / 14) - 0.781 = 2.2662 more similarity."""
    m = I.stale.margins(0.781, 0.725, 29, 14)
    assert m["break_even_gap_days"] == pytest.approx(1.503, abs=1e-3) and m["margin"] == pytest.approx(2.2662, abs=1e-4)
    assert m["margin_days"] == pytest.approx(27.497, abs=1e-3)
    assert I.stale.margins(0.5, -0.1, 29, 14)["break_even_gap_days"] is None  # no gap lets it win
    assert I.stale.gap_grid([(0.781, 0.725)], 14, gaps=(1, 1.4, 1.6, 2)) == {"1": 0, "1.4": 0, "1.6": 1, "2": 1}
    assert I.stale.margins(0.70, 0.72, 29, 14)["break_even_gap_days"] == 0.0  # the correction is closer already


@pytest.mark.slow
def test_stale_fact_fails_without_recency_reranking(settings, minilm, monkeypatch):
    # a test double for control flow: the recency weight removed from the production ranking
    monkeypatch.setattr(adiyan.retrieval.memory_rank, "recency_weight", lambda age, half_life: 1.0)
    r = I.stale_fact(settings.with_overrides({"memory.search": "dense"}), minilm)
    assert r.holds is False and r.violated == 7
    r = I.stale_fact(settings, minilm)  # hybrid search alone puts 2 corrections first (they repeat the words)
    assert r.holds is False and r.violated == 5


# -- the verdict, the table and the metrics -------------------------------------------------------


def _result(number, holds, **counts):
    return IncidentResult(number, I.NAMES[number], "", "", "m", holds, "", **counts)


def test_verdict_table_and_metrics():
    results = [_result(1, True, variants_held=6, variants=6, variants_na=1),
               _result(2, False, variants_held=2, variants=3, violated=1),
               _result(3, None, variants_na=7),
               _result(4, True, variants_held=3, variants=7, not_reproduced=4)]
    assert [r.variants_text for r in results] == ["6/6 variants, 1 n/a", "2/3 variants, 1 violated", "n/a (7 variants)",
                                                  "3/7 variants, 4 not reproduced"]
    line, status = summary(results)
    assert status == 1 and ("2/4 principles hold in the production configuration, 1 FAIL (unscoped search), "
                            "1 n/a (stale fact)") in line
    assert "1 6/6 variants" in line
    m = incident_metrics(results)
    assert m["principles_holding_share"] == pytest.approx(2 / 3)  # n/a is left out, not counted as held
    assert m["1_chunk_dilution_variants_held"] == 1.0 and m["4_image-only_slide_variants_held"] == pytest.approx(3 / 7)
    assert "3_stale_fact_holds" not in m and "3_stale_fact_variants_held" not in m
    assert "6/6 variants" in format_table(results) and "FAILS" in format_table(results)
    assert summary(results[:1])[1] == 0 and summary([results[0], results[2]])[1] == 0  # n/a does not fail
    replica = _result(5, True, variants_held=3, variants=3)
    replica.basis = "replica"
    line, status = summary([results[0], replica])
    assert status == 0 and line.startswith("1/2 principles hold in the production configuration, 1 demonstrated "
                                           "on a replica of a before production refuses to run (permission gap)")
    assert "demonstrated on a replica" in format_table([replica]) and "holds" not in format_table([replica])


# -- whole replays ------------------------------------------------------------------------------


@pytest.mark.slow
def test_replay_on_minilm_holds_everywhere(settings):
    results = replay_all(settings, progress=False)
    print(format_table(results))
    assert [r.number for r in results] == [1, 2, 3, 4, 5]
    assert all(r.holds for r in results), summary(results)[0]


@pytest.mark.slow
def test_replay_on_nomic_beside_the_seeds_figures(make_settings):
    """nomic-embed-text, the seed's model (it ran it through Ollama; here in-process)."""
    results = {r.number: r for r in replay_all(make_settings(**{"embedder.name": "nomic-embed-text"}), progress=False)}
    print(format_table(list(results.values())))
    d1 = results[1].details
    assert d1["floor"] == 0.55 and d1["input_window"] == 2048
    rows = {v["id"]: v for v in d1["variants"]}
    # the seed's own ~500-token file falls under 0.55 (seed: 0.496) and structural chunks lift it
    assert rows["seed_notes"]["floor_status"] == "held" and rows["seed_notes"]["before_score"] < 0.55
    # structural chunking keeps every fact above the floor; the ~220-token files dilute less than
    # the seed's: only some fall under 0.55 before (3/7 when measured), the rest are not reproduced
    assert all(v["after_kept"] for v in rows.values()) and 1 / 7 <= results[1].metrics["floor_variants_held"] < 1
    # without the floor: every margin widens and every fact ranks first after (some did not before)
    assert results[1].holds and results[1].variants_text == "7/7 variants"
    assert all(v["after_rank"] == 1 for v in rows.values()) and any(v["before_rank"] > 1 for v in rows.values())
    teal = next(v for v in results[3].details["variants"] if v["id"] == "colour")
    assert teal["cos_negation"] == pytest.approx(0.91, abs=0.05)  # this project's measurement, not the seed's 0.86
    assert teal["cos_unrelated"] == pytest.approx(0.36, abs=0.05)  # "bicycle"; the seed's unrelated word: 0.39
    assert all(r.holds for r in results.values()), summary(list(results.values()))[0]
