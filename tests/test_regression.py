"""Regression checking: pass, fail and not-checked are told apart."""

from adiyan.eval.regression import check, load_cases

CASES = [
    {"id": "a", "metric": "retrieval.hit_rate@4", "per_embedder": {"minilm": {"measured": 0.9, "floor": 0.8}}},
    {"id": "b", "metric": "privacy.private_chunks_leaked", "per_embedder": {"*": {"measured": 0, "max": 0}}},
    {"id": "c", "metric": "incidents.chunk_dilution_after", "per_embedder": {"nomic-embed-text": {"floor": 0.55}}},
    {"id": "d", "metric": "ocr.hit_rate", "evalset": "adiyan_full", "per_embedder": {"*": {"floor": 0.5}}},
]


def test_pass_fail_and_not_checked():
    metrics = {"retrieval": {"hit_rate@4": 0.79}, "privacy": {"private_chunks_leaked": 0}}
    r = {x.id: x for x in check(metrics, "minilm", "adiyan_basic", CASES)}
    assert r["a"].status == "fail" and "below floor 0.8" in r["a"].reason
    assert r["b"].status == "pass"
    assert r["c"].status == "not_checked" and "no entry for embedder minilm" in r["c"].reason
    assert r["d"].status == "not_checked" and "adiyan_full" in r["d"].reason
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
