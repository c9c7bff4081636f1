"""The embedding cache: a repeated text is served from disk without calling the model."""

import numpy as np

from adiyan.cache import CachedEmbedder, EmbeddingCache, embedding_key


class CountingEmbedder:
    """Test double for control flow only: wraps the real minilm and counts texts sent to it."""

    def __init__(self, inner):
        self.inner, self.calls, self.texts = inner, 0, 0
        self.id, self.dim, self.normalized = inner.id, inner.dim, inner.normalized

    def prefix(self, kind):
        return self.inner.prefix(kind)

    def embed(self, texts, kind="document"):
        self.calls += 1
        self.texts += len(texts)
        return self.inner.embed(texts, kind)


def test_repeated_text_costs_one_lookup(minilm, tmp_path):
    spy = CountingEmbedder(minilm)
    cached = CachedEmbedder(spy, EmbeddingCache(tmp_path / "e.sqlite"))
    first = cached.embed(["alpha beta", "gamma delta", "alpha beta"])
    assert (spy.calls, spy.texts) == (1, 2)  # the duplicate inside one call is embedded once
    assert (cached.stats.hits, cached.stats.misses) == (1, 2)
    again = cached.embed(["gamma delta", "alpha beta"])
    assert (spy.calls, spy.texts) == (1, 2)  # no model call at all
    assert (cached.stats.hits, cached.stats.misses) == (3, 2)
    np.testing.assert_array_equal(again[1], first[0])  # bit for bit
    # persisted: a new process (new wrapper, same file) also hits
    cached2 = CachedEmbedder(CountingEmbedder(minilm), EmbeddingCache(tmp_path / "e.sqlite"))
    cached2.embed(["alpha beta"])
    assert cached2.inner.calls == 0 and cached2.stats.hits == 1


def test_key_separates_model_prefix_and_text():
    k = embedding_key("nomic-embed-text", "search_query: ", "teal")
    assert k != embedding_key("nomic-embed-text", "search_document: ", "teal")
    assert k != embedding_key("minilm", "search_query: ", "teal")
    assert k != embedding_key("nomic-embed-text", "", "search_query: teal")  # no ambiguity by concatenation
    assert len(k) == 64


def test_query_and_document_prefixes_are_cached_apart(nomic, tmp_path):
    cached = CachedEmbedder(nomic, EmbeddingCache(tmp_path / "e.sqlite"))
    q = cached.embed(["teal"], "query")
    d = cached.embed(["teal"], "document")
    assert cached.stats.misses == 2
    assert not np.array_equal(q, d)


class FailingAfter(CountingEmbedder):
    """Test double for control flow only: the real minilm, raising on call number ``fail_on``."""

    def __init__(self, inner, fail_on):
        super().__init__(inner)
        self.fail_on = fail_on

    def embed(self, texts, kind="document"):
        if self.calls + 1 == self.fail_on:
            raise RuntimeError("killed mid-encode")
        return super().embed(texts, kind)


def test_a_crash_mid_encode_keeps_the_finished_slices(minilm, tmp_path, monkeypatch):
    monkeypatch.setattr(CachedEmbedder, "SLICE", 4)
    texts = [f"passage number {i} about topic {i % 3}" for i in range(10)]  # slices of 4, 4, 2
    crashing = CachedEmbedder(FailingAfter(minilm, fail_on=3), EmbeddingCache(tmp_path / "e.sqlite"))
    try:
        crashing.embed(texts)
    except RuntimeError:
        pass
    else:
        raise AssertionError("the double should have raised on the third slice")
    resumed = CachedEmbedder(CountingEmbedder(minilm), EmbeddingCache(tmp_path / "e.sqlite"))
    vecs = resumed.embed(texts)
    assert resumed.inner.texts == 2  # only the slice that never finished is embedded again
    assert (resumed.stats.hits, resumed.stats.misses) == (8, 2)
    np.testing.assert_allclose(vecs, minilm.embed(texts), atol=1e-5)


def test_every_matryoshka_width_shares_one_encode(minilm, tmp_path):
    """A truncated model caches the full-width row under the full model's id: once the full width is
    cached, a 128-d embedder over the same texts makes no model call, and equals the cut by hand."""
    from adiyan.models.embedders import SentenceTransformerEmbedder

    narrow = SentenceTransformerEmbedder("minilm", minilm.path, truncate_dim=128)
    assert (narrow.id, narrow.full_id, narrow.dim) == ("minilm@128", "minilm", 128)
    texts = ["the ibex came back in 1978", "a refund needs the booking code"]
    wide = CachedEmbedder(minilm, EmbeddingCache(tmp_path / "e.sqlite"))
    full = wide.embed(texts, "document")
    spy = CountingEmbedder(narrow)
    spy.truncate_dim, spy.full_id, spy.cut = 128, "minilm", narrow.cut  # the double forwards the Matryoshka API
    spy.full_identity = narrow.full_identity  # and the model's identity (runtime, weights): the cache's key
    spy.embed_full = lambda t, kind="document": (_ for _ in ()).throw(AssertionError("model called"))
    cut = CachedEmbedder(spy, EmbeddingCache(tmp_path / "e.sqlite")).embed(texts, "document")
    assert cut.shape == (2, 128) and spy.calls == 0
    by_hand = full[:, :128] / np.linalg.norm(full[:, :128], axis=1, keepdims=True)
    np.testing.assert_allclose(cut, by_hand, atol=1e-6)
    np.testing.assert_allclose(narrow.embed(texts, "document"), by_hand, atol=1e-5)  # the uncached model agrees


def test_call_caches_are_built_by_one_factory(tmp_path):
    """Every job's call cache comes from ``call_cache(settings, namespace)``: one file per cache
    dir, namespaces apart (an answer and a judge verdict of the same payload never collide), and
    no module of the package builds a ``CallCache`` by hand (it would drift from the shared file)."""
    import ast
    from pathlib import Path

    import adiyan
    from adiyan.cache import call_cache
    from adiyan.config import load_settings

    s = load_settings(None, {"paths.cache_dir": str(tmp_path)}, environ={})
    answers, verdicts = call_cache(s, "answer"), call_cache(s, "judge")
    assert answers.path == verdicts.path == tmp_path / "calls.sqlite"
    assert answers.key({"q": 1}) != verdicts.key({"q": 1})
    answers.put(answers.key({"q": 1}), "an answer")
    assert call_cache(s, "answer").get(answers.key({"q": 1})) == "an answer"  # a later job reads it
    assert verdicts.get(verdicts.key({"q": 1})) is None
    pkg = Path(adiyan.__file__).parent
    by_hand = [f"{p.relative_to(pkg)}:{n.lineno}" for p in sorted(pkg.rglob("*.py")) if p.name != "cache.py"
               for n in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
               if isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", None)) == "CallCache"]
    assert not by_hand, f"CallCache built by hand (use adiyan.cache.call_cache): {by_hand}"



def test_a_cache_file_another_connection_holds_opens_once_it_is_released(tmp_path):
    """Two Ray sweep points creating one fresh cache failed CI with "database is locked": SQLite's
    busy timeout does not cover the switch into WAL mode while another connection holds the file's
    write lock (it fails at once, to avoid a deadlock). Made deterministic here: a connection holds
    the write lock of a file not yet in WAL mode. The plain pragma fails at once despite its
    60 s timeout; connect_wal waits until the holder commits; a holder that never lets go still
    ends in the error, after connect_wal's timeout."""
    import sqlite3
    import threading
    import time

    import pytest

    from adiyan.cache import connect_wal

    path = tmp_path / "fresh.sqlite"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")  # the write lock, as another process creating the file holds it
    plain = sqlite3.connect(path, timeout=60)
    t0 = time.perf_counter()
    with pytest.raises(sqlite3.OperationalError, match="database is locked"):
        plain.execute("PRAGMA journal_mode=WAL")
    assert time.perf_counter() - t0 < 5  # at once: the 60 s busy timeout was not used
    plain.close()

    t0 = time.perf_counter()
    with pytest.raises(sqlite3.OperationalError, match="database is locked"):
        connect_wal(path, timeout=0.5)  # still held: the error, after the timeout
    assert time.perf_counter() - t0 >= 0.5

    threading.Timer(0.5, holder.execute, ("COMMIT",)).start()
    t0 = time.perf_counter()
    conn = connect_wal(path, timeout=60)
    assert time.perf_counter() - t0 >= 0.4  # it waited for the holder
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    holder.close()
