"""Recency re-ranking: hand-computed weights, the over-fetch rule, ordering and timestamp handling."""

from datetime import datetime, timedelta, timezone

import pytest

from adiyan.retrieval.recency import (
    age_days,
    overfetch_size,
    parse_timestamp,
    recency_weight,
    rerank_by_recency,
    to_utc_iso,
)

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=timezone.utc)


def days_ago(d: float) -> str:
    return (NOW - timedelta(days=d)).isoformat()


@pytest.mark.parametrize("age, expected", [(0, 1.0), (14, 0.5), (28, 0.25), (7, 0.7071067811865476),
                                           (1, 0.9516951530106196), (30, 0.22643091606597668)])
def test_weight_halves_every_half_life(age, expected):
    assert recency_weight(age, 14) == pytest.approx(expected, abs=1e-12)


def test_weight_clamps_negative_age_and_rejects_bad_half_life():
    assert recency_weight(-3, 14) == 1.0
    with pytest.raises(ValueError, match="half_life_days"):
        recency_weight(1, 0)


@pytest.mark.parametrize("k, expected", [(1, 10), (2, 10), (3, 10), (4, 12), (5, 15), (10, 30)])
def test_overfetch_is_three_k_at_least_ten(k, expected):
    assert overfetch_size(k) == expected


def test_overfetch_rejects_zero_k():
    with pytest.raises(ValueError):
        overfetch_size(0)
    assert overfetch_size(2, factor=5, minimum=1) == 10


def test_rerank_scores_are_similarity_times_weight():
    items = [{"id": "old", "score": 0.8, "created_at": days_ago(14)},
             {"id": "new", "score": 0.5, "created_at": days_ago(0)}]
    out = rerank_by_recency(items, now=NOW, half_life_days=14, k=2)
    assert [it["id"] for it, *_ in out] == ["new", "old"]
    new, old = out
    assert new[1:] == pytest.approx((0.5, 1.0, 0.0))
    assert old[1:] == pytest.approx((0.4, 0.5, 14.0))  # 0.8 x 0.5


def test_rerank_keeps_top_k_and_all_when_k_is_none():
    items = [{"score": s, "created_at": days_ago(0)} for s in (0.1, 0.9, 0.5)]
    assert [it["score"] for it, *_ in rerank_by_recency(items, now=NOW, half_life_days=14, k=2)] == [0.9, 0.5]
    assert len(rerank_by_recency(items, now=NOW, half_life_days=14, k=None)) == 3
    assert rerank_by_recency([], now=NOW, half_life_days=14, k=3) == []


def test_ties_keep_input_order():
    items = [{"id": i, "score": 0.5, "created_at": days_ago(2)} for i in "abcde"]
    out = rerank_by_recency(items, now=NOW, half_life_days=14, k=None)
    assert [it["id"] for it, *_ in out] == list("abcde")


def test_future_timestamps_count_as_age_zero():
    items = [{"id": "future", "score": 0.5, "created_at": (NOW + timedelta(days=3)).isoformat()},
             {"id": "now", "score": 0.5, "created_at": NOW}]
    out = rerank_by_recency(items, now=NOW, half_life_days=14, k=None)
    assert [(it["id"], w, a) for it, _, w, a in out] == [("future", 1.0, 0.0), ("now", 1.0, 0.0)]


def test_custom_accessors_and_objects():
    class Hit:
        def __init__(self, sim, when):
            self.sim, self.when = sim, when

    hits = [Hit(0.9, days_ago(28)), Hit(0.3, days_ago(0))]
    out = rerank_by_recency(hits, now=NOW, half_life_days=14, k=1, timestamp=lambda h: h.when, score=lambda h: h.sim)
    assert out[0][0] is hits[1] and out[0][1] == pytest.approx(0.3)


def test_timestamps_iso_strings_and_datetimes_any_offset():
    assert age_days("2025-06-01T12:00:00Z", NOW) == 0.0
    assert age_days("2025-06-01T14:00:00+02:00", NOW) == 0.0  # same instant
    assert age_days(datetime(2025, 5, 31, 12, tzinfo=timezone.utc), NOW.isoformat()) == pytest.approx(1.0)
    assert age_days("2025-05-31T00:00:00+00:00", NOW) == pytest.approx(1.5)
    assert to_utc_iso("2025-06-01T14:00:00+02:00") == "2025-06-01T12:00:00+00:00"


@pytest.mark.parametrize("bad", ["2025-06-01T12:00:00", datetime(2025, 6, 1), "yesterday"])
def test_naive_or_unparseable_timestamps_are_refused(bad):
    with pytest.raises(ValueError):
        parse_timestamp(bad)
    with pytest.raises(ValueError):
        rerank_by_recency([{"score": 1.0, "created_at": bad}], now=NOW, half_life_days=14, k=1)
