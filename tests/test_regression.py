"""Regression checking: pass, fail and not-checked are told apart; a privacy probe its owner cannot
retrieve fails the run."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from adiyan.eval.evalset import EvalDocument, EvalQuestion
from adiyan.eval.harness import question_rows, retrieval_metrics
from adiyan.eval.regression import check, load_cases, mark_not_replayed, not_applicable, regression_group
from adiyan.types import RetrievalResult, RetrievedChunk

CASES = [
    {"id": "a", "metric": "retrieval.hit_rate@4", "per_embedder": {"minilm": {"measured": 0.9, "floor": 0.8}}},
    {"id": "b", "metric": "privacy.private_chunks_leaked", "per_embedder": {"*": {"measured": 0, "max": 0}}},
    {"id": "c", "metric": "incidents.chunk_dilution_after", "per_embedder": {"nomic-embed-text": {"floor": 0.55}}},
    {"id": "d", "metric": "ocr.hit_rate", "evalset": "adiyan_full", "per_embedder": {"*": {"floor": 0.5}}},
]


def test_pass_fail_not_checked_and_does_not_apply():
    metrics = {"retrieval": {"hit_rate@4": 0.79}, "privacy": {"private_chunks_leaked": 0}}
    r = {x.id: x for x in check(metrics, "minilm", "adiyan_basic", CASES)}
    assert r["a"].status == "fail" and "below floor 0.8" in r["a"].reason
    assert r["b"].status == "pass"
    assert r["c"].status == "n/a" and r["c"].reason == "no floor for embedder minilm (measured for nomic-embed-text)"
    assert r["d"].status == "n/a" and r["d"].reason == "a case for evalset adiyan_full"
    # not a metric: the regression group has no None rows for cases that do not apply, and they are listed once
    assert regression_group(list(r.values())) == {"a": 0.0, "b": 1.0}
    assert not_applicable(list(r.values()), "why not") == [
        {"what": "the five incidents", "why": "why not"},
        {"what": "regression case c", "why": "no floor for embedder minilm (measured for nomic-embed-text)"},
        {"what": "regression case d", "why": "a case for evalset adiyan_full"}]
    # a group the run has, missing the case's metric, is a gap to look at, not "does not apply"
    gap = check({"retrieval": {}}, "minilm", "adiyan_basic", CASES[:1])[0]
    assert gap.status == "not_checked" and gap.reason == "the run did not produce this metric"
    # the group is absent altogether: does not apply, and a job that replays no incidents says so
    res = mark_not_replayed(check({}, "minilm", "x", [{"id": "i", "metric": "incidents.principles_holding_share",
                                                        "per_embedder": {"*": {"floor": 1.0}}}]), "not replayed")
    assert (res[0].status, res[0].reason) == ("n/a", "not replayed")
    # applies_if: a probe check on a set without probes does not apply; with probes it is checked
    probe = {"id": "p", "metric": "privacy.probes_owner_retrieved", "applies_if": "privacy.probe_questions",
             "per_embedder": {"*": {"floor": 1.0}}}
    res = check({"privacy": {"probe_questions": 0}}, "minilm", "x", [probe])[0]
    assert (res.status, res.reason) == ("n/a", "nothing to check: privacy.probe_questions = 0")
    res = check({"privacy": {"probe_questions": 2, "probes_owner_retrieved": 0.5}}, "minilm", "x", [probe])[0]
    assert res.status == "fail"
    metrics["retrieval"]["hit_rate@4"] = 0.8
    metrics["privacy"]["private_chunks_leaked"] = 1
    r = {x.id: x for x in check(metrics, "minilm", "adiyan_basic", CASES)}
    assert r["a"].status == "pass" and r["b"].status == "fail"


def test_the_seeds_case_is_recorded():
    cases = {c["id"]: c for c in load_cases()}
    case = cases["chunk-dilution-structural"]  # now the share of authored variants held (incident 1)
    seed = case["per_embedder"]["nomic-embed-text"]
    assert case["metric"] == "incidents.1_chunk_dilution_variants_held"
    assert (seed["seed_before"], seed["seed_after"], seed["seed_floor"]) == (0.496, 0.665, 0.55)


# -- privacy probes must be able to fail: the owner retrieves what the outsider must not --------


class _ByRequester:
    """Fixed rankings per (question, requester): a stand-in for the engine, control flow only."""

    config = SimpleNamespace(kb_top_k=4)

    def __init__(self, rankings):
        self.rankings = rankings

    def depth(self, k):
        return 10

    def retrieve(self, question, requester):
        chunks = [RetrievedChunk(src, 0, 0.5, "", {"visibility": vis, "owner_identity": src.split("/")[0]})
                  for src, vis in self.rankings.get((question, requester), [])]
        return RetrievalResult(question, chunks, 0.0)


def _probe_metrics(owner_sees_it: bool) -> dict:
    docs = [EvalDocument(Path("x"), "salary.md", "alice", "private"), EvalDocument(Path("y"), "faq.md", "shared", "global")]
    qs = [EvalQuestion("p1", "what is alice's salary?", "", [], [], "unanswerable", "bob",
                       {"probe_private": "salary.md"})]
    rankings = {("what is alice's salary?", "bob"): [("shared/faq.md", "global")],  # the outsider: no leak
                ("what is alice's salary?", "alice"): [("alice/salary.md", "private")] if owner_sees_it
                else [("shared/faq.md", "global")]}
    index = SimpleNamespace(evalset=SimpleNamespace(documents=docs, questions=qs))
    return retrieval_metrics(question_rows(index, _ByRequester(rankings)), 4)


def test_a_probe_its_owner_cannot_retrieve_fails_the_regression():
    case = {c["id"]: c for c in load_cases()}["privacy-probes-owner-retrieved"]
    assert case["metric"] == "privacy.probes_owner_retrieved" and case["per_embedder"]["*"]["floor"] == 1.0
    good, blind = _probe_metrics(True), _probe_metrics(False)
    # no leak either way: probes_leaked alone cannot tell a working filter from a blind search
    assert good["privacy"]["probes_leaked"] == blind["privacy"]["probes_leaked"] == 0
    assert good["privacy"]["probes_owner_retrieved"] == 1.0 and blind["privacy"]["probes_owner_retrieved"] == 0.0
    assert next(r for r in check(good, "minilm", "adiyan_full", [case])).status == "pass"
    assert next(r for r in check(blind, "minilm", "adiyan_full", [case])).status == "fail"


def test_the_incidents_apply_to_the_projects_own_evalsets_only(tmp_path):
    from adiyan.eval.evalset import incidents_apply

    root = Path(__file__).resolve().parents[1] / "evalsets"
    for name in ("adiyan_full", "adiyan_basic", "conversations"):
        assert incidents_apply(root / name, "auto") == (True, None)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "manifest.yaml").write_text("name: mine\ndocuments: []\n")
    replay, why = incidents_apply(mine, "auto")
    assert not replay and "mine is not one of its evalsets" in why and "eval.incidents=true" in why
    assert incidents_apply(mine, True) == (True, None)
    assert incidents_apply(root / "adiyan_full", False) == (False, "eval.incidents=false")
    assert incidents_apply(tmp_path / "locomo8.json", "auto")[0] is False  # a LoCoMo file: no manifest


def test_a_floor_with_a_rule_is_the_rule_applied_to_its_measured_value():
    """A floor set from the measured value and the evalset's spread (issue 44.6): measured minus one
    standard error of the mean over the case's n questions, rounded up to a value the set can take.
    hit@4 on adiyan_full: 0.95 of 40 -> 0.9155 -> 37/40 = 0.925 (the old floor 0.85 let 4 questions
    regress unseen); OCR: 1.0 of 3 -> 1.0 (the old 0.66 let one of three go)."""
    import math

    ruled = [(c, e) for c in load_cases() if c.get("floor_rule") for e in c["per_embedder"].values()]
    assert len(ruled) >= 4
    for case, e in ruled:
        m, n = e["measured"], e["n"]
        expected = math.ceil(round((m - math.sqrt(m * (1 - m) / n)) * n, 9)) / n
        assert e["floor"] == expected, (case["id"], e)
    hit = {c["id"]: c for c in load_cases()}["adiyan-full-hit-rate"]["per_embedder"]["minilm"]
    assert hit["floor"] == 0.925 and hit["floor"] > (hit["measured"] * hit["n"] - 2) / hit["n"]  # two flips trip it


def test_every_kind_of_run_gates_on_a_failed_case(tmp_path):
    """Conversation and LoCoMo runs write their regression cases like a question-set run, and run_eval
    raises RegressionFailed on a failed one after the files are written (hand-made metrics.json)."""
    import json

    from adiyan.eval.runner import RegressionFailed, _gate

    case = {"id": "incidents-variants-stale-fact", "metric": "incidents.3_stale_fact_variants_held", "value": 0.14,
            "floor": 1.0, "max": None, "measured": 1.0, "status": "fail", "reason": "0.14 below floor 1.0"}
    (tmp_path / "metrics.json").write_text(json.dumps({"regression": [case]}), encoding="utf-8")
    with pytest.raises(RegressionFailed, match="incidents-variants-stale-fact: 0.14 below floor 1.0"):
        _gate(tmp_path)
    case["status"] = "pass"
    (tmp_path / "metrics.json").write_text(json.dumps({"regression": [case]}), encoding="utf-8")
    assert _gate(tmp_path) == tmp_path
