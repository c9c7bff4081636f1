"""Recency re-ranking: newer statements outrank older ones of similar similarity.

The seed's rule, usable on memories and on knowledge-base chunks alike:

* weight = 0.5 ** (age_days / half_life_days): a statement one half-life old counts half;
* over-fetch max(factor * k, minimum) candidates by similarity (3 * k, at least 10), so a newer
  statement just outside the plain top k can still move up;
* final score = similarity * weight, best first; ties keep the input (similarity) order.

Ages are measured from timezone-aware timestamps (ISO-8601 strings or datetimes) to ``now``;
a timestamp in the future counts as age 0, never as a bonus.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Callable, Iterable, TypeVar

T = TypeVar("T")

SECONDS_PER_DAY = 86_400.0


def parse_timestamp(value: str | datetime) -> datetime:
    """A timezone-aware datetime from an ISO-8601 string or a datetime; naive values are refused.

    A naive time has no defined age (UTC? local? the server's?), so it is an error rather than a guess.
    """
    if isinstance(value, datetime):
        dt = value
    elif isinstance(value, str):
        text = value.strip()
        if text.endswith(("Z", "z")):  # fromisoformat accepts "Z" only from Python 3.11; be explicit
            text = text[:-1] + "+00:00"
        try:
            dt = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(f"timestamp {value!r} is not ISO-8601") from None
    else:
        raise TypeError(f"timestamp must be an ISO-8601 string or a datetime, got {type(value).__name__}")
    if dt.tzinfo is None or dt.tzinfo.utcoffset(dt) is None:
        raise ValueError(f"timestamp {value!r} has no timezone; use e.g. 2025-01-31T12:00:00+00:00")
    return dt


def to_utc_iso(value: str | datetime) -> str:
    """The canonical stored form of a timestamp: ISO-8601 in UTC."""
    return parse_timestamp(value).astimezone(timezone.utc).isoformat()


def age_days(timestamp: str | datetime, now: str | datetime) -> float:
    """Days from ``timestamp`` to ``now``; 0.0 for a timestamp in the future."""
    delta = (parse_timestamp(now) - parse_timestamp(timestamp)).total_seconds() / SECONDS_PER_DAY
    return max(0.0, delta)


def recency_weight(age_days: float, half_life_days: float) -> float:
    """0.5 ** (age_days / half_life_days); 1.0 at age 0 (negative ages clamp to 0)."""
    if not half_life_days > 0:
        raise ValueError(f"half_life_days must be > 0, got {half_life_days!r}")
    return 0.5 ** (max(0.0, float(age_days)) / float(half_life_days))


def overfetch_size(k: int, factor: int = 3, minimum: int = 10) -> int:
    """How many candidates to fetch before re-ranking to k: max(factor * k, minimum)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k!r}")
    if factor < 1 or minimum < 1:
        raise ValueError(f"factor and minimum must be >= 1, got {factor!r}, {minimum!r}")
    return max(factor * k, minimum)


def _default_timestamp(item: Any) -> Any:
    return item["created_at"] if isinstance(item, dict) else item.created_at


def _default_score(item: Any) -> float:
    return item["score"] if isinstance(item, dict) else item.score


def rerank_by_recency(
    items: Iterable[T],
    *,
    now: str | datetime,
    half_life_days: float,
    k: int | None,
    timestamp: Callable[[T], str | datetime] = _default_timestamp,
    score: Callable[[T], float] = _default_score,
) -> list[tuple[T, float, float, float]]:
    """Re-rank ``items`` by similarity * recency weight; the best ``k`` (all when k is None).

    Returns ``(item, final_score, weight, age_days)`` tuples, best first. The sort is stable:
    items with equal final scores keep their input order. ``timestamp`` and ``score`` read an
    item's creation time and similarity (defaults: ``created_at`` and ``score``, as key or attribute).
    """
    if k is not None and k < 0:
        raise ValueError(f"k must be >= 0 or None, got {k!r}")
    if not half_life_days > 0:
        raise ValueError(f"half_life_days must be > 0, got {half_life_days!r}")
    now_dt = parse_timestamp(now)
    scored = []
    for item in items:
        age = age_days(timestamp(item), now_dt)
        weight = recency_weight(age, half_life_days)
        scored.append((item, float(score(item)) * weight, weight, age))
    scored.sort(key=lambda row: row[1], reverse=True)  # list.sort is stable, reverse included
    return scored if k is None else scored[:k]
