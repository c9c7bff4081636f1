"""Time in a question: its dates matched against when a memory was said (``memory.question_dates``), and
whether it asks about the past (``memory.past_tense_history``).

"What movie did Joanna watch on 1 May, 2022?" asks about one day; the memory that answers it was
said in the session of 2 May ("I watched The Lord of the Rings last night"). Embedding and BM25
scores do not read dates, so such a question ranks every movie Joanna ever mentioned alike. With
``memory.question_dates`` on, the question's date becomes a window of session time, and a memory
said inside it ranks above the memories said outside it (:data:`DATE_TIER` is added to its score: a
tier over every memory when scores lie in [0, 1], as a relevant memory's do); the order within each
tier is unchanged.

What is read (English, absolute dates only; the first match decides):

* a day: "on 1 May, 2022", "May 3, 2023", "October 13th 2023" -> that day;
* a month: "in July 2023", "during the last week of August 2023" -> that calendar month;
* a year: "in 2022", "during 2023" -> that year.

The window runs from the start of that day, month or year to its end plus :data:`REPORT_LAG_DAYS`
(people tell of an event in a later session: "last week", "yesterday"). A relative date ("last
week", "the first time") is not read: its meaning depends on when the question is asked, which a
stored question does not say.

A window that holds every candidate (or none) changes nothing. Chosen on LoCoMo's dev split with the
rule stated in docs/locomo.md; measured there on the six held-out conversations.

**The past tense** (:func:`asks_about_past`): a correction replaces what was true for a question about
now ("Where do I live?"), not for one about then ("When did Jolene lose her progress?", "Where did I
live in 2020?", "Where has Melanie camped?"): the earlier statement answers it. With
``memory.past_tense_history`` on, a question in the past tense (did, was, were, had, used to) or the present
perfect (has / have and a past participle) is ranked without supersession.
"""

from __future__ import annotations

import calendar
import re
from datetime import datetime, timedelta, timezone

REPORT_LAG_DAYS = 7  # a memory said up to a week after the asked-about time still tells of it
# added to the score of a memory said inside the window: a tier over every memory outside it whose score is at
# most 1 above the inside one's, i.e. over all of them when scores lie in [0, 1] (a relevant memory's fused
# score; a cosine below 0 can fall under an outside memory's)
DATE_TIER = 1.0

_MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_name) if m}
_M = "|".join(_MONTHS)
_DAY_FIRST = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_M}),?\s*(\d{{4}})\b", re.IGNORECASE)
_MONTH_FIRST = re.compile(rf"\b({_M})\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", re.IGNORECASE)
_MONTH_YEAR = re.compile(rf"\b({_M}),?\s+(\d{{4}})\b", re.IGNORECASE)
_YEAR = re.compile(r"\b(?:in|of|during|since)\s+((?:19|20)\d\d)\b", re.IGNORECASE)
_PAST = re.compile(r"\b(?:did|didn't|was|wasn't|were|weren't|had|hadn't|used to)\b", re.IGNORECASE)
# the present perfect asks about experience up to now ("Where has Melanie camped?", "What books have you read?"):
# has / have, up to three words, then a past participle (-ed or a common irregular one)
_PARTICIPLES = ("been done gone made seen taken given had got gotten met read won bought taught written begun run "
                "found kept left lost felt brought built sent spent held heard thought told said known grown drawn")
_PERFECT = re.compile(r"\b(?:has|have|hasn't|haven't|'ve)\s+(?:[\w'-]+\s+){0,3}?(?:\w+ed|"
                      + "|".join(_PARTICIPLES.split()) + r")\b", re.IGNORECASE)


def question_window(question: str, lag_days: float = REPORT_LAG_DAYS) -> tuple[datetime, datetime] | None:
    """(start, end) in UTC of the session time a question's absolute date points at, end exclusive and
    ``lag_days`` past the date's own end; None when the question names no date this module reads."""
    span = _date_span(question)
    if span is None:
        return None
    start, end = span
    return start, end + timedelta(days=lag_days)


def _date_span(text: str) -> tuple[datetime, datetime] | None:
    for pattern, order in ((_DAY_FIRST, (3, 2, 1)), (_MONTH_FIRST, (3, 1, 2))):
        for m in pattern.finditer(text):
            year, month, day = int(m[order[0]]), _MONTHS[m[order[1]].lower()], int(m[order[2]])
            try:
                start = datetime(year, month, day, tzinfo=timezone.utc)
            except ValueError:  # "31 February": not a day; try the next match, then the month
                continue
            return start, start + timedelta(days=1)
    m = _MONTH_YEAR.search(text)
    if m:
        year, month = int(m[2]), _MONTHS[m[1].lower()]
        return (datetime(year, month, 1, tzinfo=timezone.utc),
                datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=timezone.utc))
    m = _YEAR.search(text)
    if m:
        year = int(m[1])
        return datetime(year, 1, 1, tzinfo=timezone.utc), datetime(year + 1, 1, 1, tzinfo=timezone.utc)
    return None


def inside(window: tuple[datetime, datetime], when: datetime) -> bool:
    """Whether ``when`` (timezone-aware) falls in ``window`` (start inclusive, end exclusive)."""
    return window[0] <= when < window[1]


def asks_about_past(question: str) -> bool:
    """Whether ``question`` asks about the past: the past tense (did, was, were, had, used to) or the present
    perfect (has / have with a past participle); English."""
    return _PAST.search(question) is not None or _PERFECT.search(question) is not None
