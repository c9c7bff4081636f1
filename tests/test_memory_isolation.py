"""Memory isolation between users on every read path (issue 43.2), real mem0 and minilm: two users in one
collection, each asked with the other's own words; leaks counted per path must be 0, and the count is shown
to catch a path that skips the user scope (the lexical index built over every user's memories)."""

from datetime import datetime, timedelta, timezone

import os

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from adiyan.agent.tools import build_tools
from adiyan.context import assemble
from adiyan.eval.locomo.paths import CandidateMemory
from adiyan.memory import Memory

NOW = datetime(2025, 6, 1, 12, tzinfo=timezone.utc)
ALICE = ["My bank PIN is 4321 and my locker code is 9988.", "I am allergic to peanuts and shellfish.",
         "My sister Ines lives in Braga.", "The alarm code for my flat is 7310."]
BOB = ["I prefer window seats on trains.", "My dog Bolt loves the beach."]


def _paths(mem, settings, asker: str):
    """Every memory read path the package has, each as (name, question -> texts it returned)."""
    tool = build_tools(None, mem, asker, retriever=None, memory_k=10)["search_memory"]
    cm = CandidateMemory(mem, depth=20)
    return {
        "search (hybrid)": lambda q: [h.text for h in mem.search(q, user_id=asker, k=10, now=NOW)],
        "search (no recency)": lambda q: [h.text for h in mem.search(q, user_id=asker, k=10, recency=False, now=NOW)],
        "lexical index": lambda q: [mem.lexical_scores(q, asker)[1][i].text for i in mem.lexical_scores(q, asker)[0]],
        "list (all)": lambda q: [r.text for r in mem.all(asker)],
        "three-part context": lambda q: [h.text for h in assemble(settings, q, memory=mem, user_id=asker,
                                                                  now=NOW).facts],
        "agent memory tool": lambda q: [h.text for h in tool.fn(q)],
        "LoCoMo candidate replay": lambda q: [h.text for h in cm.search(q, user_id=asker, k=10, now=NOW)],
    }


def _leaks(mem, settings) -> dict[str, int]:
    """Per path: how many of the other user's memories came back, over every (asker, other user's text)."""
    out = {}
    for asker, other in (("bob", ALICE), ("alice", BOB)):
        for name, path in _paths(mem, settings, asker).items():
            out[name] = out.get(name, 0) + sum(t in other for q in other for t in path(q))
    return out


@pytest.fixture
def shared(make_settings, minilm):
    settings = make_settings(**{"memory.search": "hybrid"})
    mem = Memory.from_settings(settings, embedder=minilm)
    for i, t in enumerate(ALICE):
        mem.add(t, user_id="alice", created_at=NOW - timedelta(days=10 + i))
    for i, t in enumerate(BOB):
        mem.add(t, user_id="bob", created_at=NOW - timedelta(days=3 + i))
    yield mem, settings
    mem.close()


def test_no_read_path_returns_another_users_memory(shared):
    mem, settings = shared
    leaks = _leaks(mem, settings)
    assert set(leaks) == {"search (hybrid)", "search (no recency)", "lexical index", "list (all)",
                          "three-part context", "agent memory tool", "LoCoMo candidate replay"}
    assert leaks == dict.fromkeys(leaks, 0)
    # the paths do answer their own user: bob finds his dog, alice her PIN
    assert "My dog Bolt loves the beach." in [h.text for h in mem.search("my dog", user_id="bob", now=NOW)]
    assert ALICE[0] in [h.text for h in mem.search("bank PIN", user_id="alice", now=NOW)]


def test_the_count_catches_a_path_that_skips_the_user_scope(shared, monkeypatch):
    """A test double for control flow: the lexical index built over every user's memories, as a bug would.
    The leak count, which is 0 above, then counts the other user's memories on the paths that use it."""
    mem, settings = shared
    real_all = Memory.all

    def everyone(self, user_id, kind="conversation"):
        return real_all(self, "alice", kind) + real_all(self, "bob", kind)

    monkeypatch.setattr(Memory, "all", everyone)
    mem._lexical_index.clear()
    leaks = _leaks(mem, settings)
    assert leaks["lexical index"] > 0 and leaks["search (hybrid)"] > 0 and leaks["list (all)"] > 0
    assert leaks["agent memory tool"] > 0 and leaks["LoCoMo candidate replay"] > 0


USER_IDS = st.text(alphabet=st.sampled_from("abAB019%&=._@- é"), min_size=1, max_size=10)


@pytest.fixture(scope="module")
def one_memory(tmp_path_factory, minilm):
    from adiyan.config import load_settings

    tmp = tmp_path_factory.mktemp("mem")
    s = load_settings(None, {"paths.data_dir": str(tmp / "data"), "paths.cache_dir": str(tmp / "cache"),
                             "memory.search": "hybrid"}, environ={})
    mem = Memory.from_settings(s, embedder=minilm)
    yield mem, s
    mem.close()


@given(a=USER_IDS, b=USER_IDS, secret=st.integers(1000, 9999))
@settings(max_examples=int(os.environ.get("ADIYAN_PROPERTY_EXAMPLES", "20")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_no_user_id_reads_another_users_memory(one_memory, a, b, secret):
    """Generated user ids (symbols mem0's scope keys escape, spaces, case, accents) in one shared memory:
    one user's memory is never returned to another on any read path, and ids with whitespace (which mem0
    trims, so "a " would be "a") are refused rather than merged."""
    mem, s = one_memory
    spaced = [u for u in (a, b) if any(c.isspace() for c in u)]
    if spaced:
        with pytest.raises(ValueError, match="contains whitespace|non-empty"):
            mem.add("x", user_id=spaced[0], created_at=NOW)
        with pytest.raises(ValueError, match="contains whitespace|non-empty"):
            mem.search("x", user_id=spaced[0], now=NOW)
        return
    assume(a != b)
    text = f"The vault code of {a!r} is {secret}."
    mid = mem.add(text, user_id=a, created_at=NOW)
    mem.add(f"Unrelated note {secret + 1}.", user_id=b, created_at=NOW)
    for name, path in _paths(mem, s, b).items():
        assert text not in path(text), (name, a, b)
    assert mid in {r.id for r in mem.all(a)} and mid not in {r.id for r in mem.all(b)}
    assert mem.delete(mid, user_id=b) is False and mid in {r.id for r in mem.all(a)}
