"""Cache and index keys that cannot collide (issue 23 item 5).

An embedder's ``identity`` carries where it runs and its exact weights, and every key that stores
vectors (the embedding cache, the evaluation index, a collection's same-model rule) is keyed by it;
the user-facing ``id`` (what floors and regression cases are looked up by) stays the model's name.
The evaluation index's key is derived from every setting its build reads. The Ollama servers here
are loopback peers of ours (tests/servers.py) answering /api/embed and /api/tags in the format
Ollama documents: test doubles for the transport, the official ``ollama`` client really runs.
"""

from __future__ import annotations

import hashlib
import json
import typing

import numpy as np
import pytest

from adiyan.cache import CachedEmbedder, EmbeddingCache
from adiyan.config import Settings, load_settings
from adiyan.eval import harness
from adiyan.models import ModelError, load_embedder
from adiyan.models import registry
from servers import HTTPPeer, json_reply

TEXTS = ["The refund window is 14 days.", "Bring rain gear and sturdy boots for every hike."]


def _vector(seed: str, text: str, dim: int = 32) -> list[float]:
    """A deterministic vector per (server, text): two servers' vectors for one text differ."""
    rng = np.random.default_rng(int(hashlib.sha256(f"{seed}\x00{text}".encode()).hexdigest()[:8], 16))
    return [float(x) for x in rng.normal(size=dim)]


def _ollama(seed: str, digest: str | None):
    """An Ollama serving ``nomic-embed-text`` with weights ``digest`` (None: /api/tags not served)."""

    def handle(method: str, path: str, body: bytes):
        if path == "/api/tags" and digest is not None:
            return json_reply({"models": [{"name": "nomic-embed-text:latest", "model": "nomic-embed-text:latest",
                                           "modified_at": "2025-01-01T00:00:00Z", "size": 274302450,
                                           "digest": digest, "details": {"format": "gguf", "family": "nomic-bert"}}]})
        if path == "/api/embed":
            req = json.loads(body)
            inputs = req["input"] if isinstance(req["input"], list) else [req["input"]]
            return json_reply({"model": req["model"], "embeddings": [_vector(seed, t) for t in inputs]})
        return json_reply({"error": "not found"}, 404)

    return HTTPPeer(handle)


def test_two_runtimes_of_one_model_name_never_share_cached_vectors(tmp_path):
    """Same name, same floor; different weights, different cache rows, index keys and collections.
    Before issue 23 both were ``nomic-embed-text``: the second server was served the first's vectors."""
    with _ollama("a", "sha256:0a109f422b47e3a30ba2b10eca18548e944e8a23073ee3f3e947efcf3c45e59f") as a, \
            _ollama("b", "sha256:970aa74c0a90ef7482477cf803618e776e173c007bf957f635f1015bfcfef0e6") as b, \
            _ollama("c", None) as c:
        ea = load_embedder("nomic-embed-text", url=a.base)
        eb = load_embedder("nomic-embed-text", url=b.base)
        ec = load_embedder("nomic-embed-text", url=c.base)
        assert ea.id == eb.id == ec.id == "nomic-embed-text"  # floors and regression cases are found by name
        assert ea.identity == "nomic-embed-text|ollama|ollama digest:0a109f422b47e3a3"
        assert ec.identity == f"nomic-embed-text|ollama {c.base}|model nomic-embed-text, digest not reported"
        assert len({ea.identity, eb.identity, ec.identity}) == 3
        cache = EmbeddingCache(tmp_path / "embeddings.sqlite")
        first = CachedEmbedder(ea, cache).embed(TEXTS)
        second = CachedEmbedder(eb, cache)
        got = second.embed(TEXTS)
        assert (second.stats.hits, second.stats.misses) == (0, 2)  # nothing of server a's was served
        want = np.asarray([_vector("b", "search_document: " + t) for t in TEXTS], dtype=np.float32)
        np.testing.assert_allclose(got, want / np.linalg.norm(want, axis=1, keepdims=True), atol=1e-6)
        assert not np.allclose(got, first)
        s = load_settings(None, {"embedder.name": "nomic-embed-text"}, environ={})
        assert harness.index_key(s, "h", ea) != harness.index_key(s, "h", eb)
        assert ea.describe()["weights"] == "ollama digest:0a109f422b47e3a3"  # what metrics.json records


def test_a_collection_refuses_another_runtime_of_the_same_model_name(make_settings):
    from adiyan.factory import open_kb
    from adiyan.store.base import EmbedderMismatchError

    with _ollama("a", "sha256:" + "1" * 64) as a, _ollama("b", "sha256:" + "2" * 64) as b:
        s = make_settings(**{"embedder.name": "nomic-embed-text", "embedder.url": a.base})
        open_kb(s, progress=False).close()
        with pytest.raises(EmbedderMismatchError, match="ollama digest:11111111"):
            open_kb(s.with_overrides({"embedder.url": b.base}), progress=False)


def _changed(section: str, name: str, default):
    """A valid value other than ``default`` for a field, from its type."""
    field = type(getattr(Settings(), section)).model_fields[name]
    ann = field.annotation
    args = [a for a in typing.get_args(ann) if a is not type(None)]
    if typing.get_origin(ann) is typing.Literal:
        return next(v for v in typing.get_args(ann) if v != default)
    if typing.get_origin(ann) is list:  # embedder.extra: a list of model names
        return [] if default else ["mpnet"]
    if ann is bool:
        return not default
    if int in args or ann is int:
        return 64 if default is None else default + 1
    if float in args or ann is float:
        return 1.5 if default is None else default + 0.5
    if str in args or ann is str:
        return "http://127.0.0.1:1" if default is None else f"{default}-changed"
    raise AssertionError(f"{section}.{name}: no rule for a changed {ann}; add one to tests/test_keys.py")


def test_the_index_key_changes_with_every_setting_the_build_reads():
    """Every ingest / chunking / embedder / store field gives a new evaluation-index key, except the
    per-query engine knobs (one index serves every ef). Before issue 23 the key listed 12 knobs by
    hand: ingest.book_min_pages, the archive limits, embedder.url and others shared an index."""
    base = load_settings(None, {}, environ={})
    key = harness.index_key(base, "h", "minilm|x|y")
    checked = 0
    for section in harness.BUILD_SECTIONS:
        for name, default in getattr(base, section).model_dump().items():
            dotted = f"{section}.{name}"
            other = base.with_overrides({dotted: _changed(section, name, default)})
            if dotted in harness.QUERY_TIME:
                assert harness.index_key(other, "h", "minilm|x|y") == key, dotted
            else:
                assert harness.index_key(other, "h", "minilm|x|y") != key, f"{dotted} does not change the index key"
                checked += 1
    assert checked >= 28 and set(harness.QUERY_TIME) == {"store.hnsw_ef", "store.exact",
                                                         "store.quantization_oversampling"}
    assert harness.index_key(base, "h", "minilm|x|z") != key  # the weights


class _Recording:
    """Test double for control flow only: stands in for llama.cpp's embedder and records its arguments."""

    def __init__(self, model_id, path, **kwargs):
        self.id, self.kwargs = model_id, kwargs


def test_the_loaded_model_memo_tells_thread_counts_apart(monkeypatch, tmp_path):
    monkeypatch.setattr(registry, "LlamaCppEmbedder", _Recording)
    monkeypatch.setattr(registry.assets, "nomic_gguf_path", lambda models_dir, progress=True: tmp_path / "x.gguf")
    monkeypatch.setattr(registry, "_loaded", {})
    one = load_embedder("nomic-embed-text", models_dir=tmp_path, threads=1)
    two = load_embedder("nomic-embed-text", models_dir=tmp_path, threads=2)
    assert (one.kwargs["threads"], two.kwargs["threads"]) == (1, 2)
    assert load_embedder("nomic-embed-text", models_dir=tmp_path, threads=2) is two


def test_a_cut_not_narrower_than_the_model_is_refused_by_name(minilm):
    from adiyan.models.embedders import SentenceTransformerEmbedder

    for dim in (384, 512):
        with pytest.raises(ModelError, match=rf"embedder.truncate_dim={dim} is not narrower than the model's 384"):
            SentenceTransformerEmbedder("minilm", minilm.path, truncate_dim=dim)
    with _ollama("a", None) as a:
        with pytest.raises(ModelError, match="embedder.truncate_dim=32 is not narrower than the model's 32"):
            load_embedder("ollama:nomic-embed-text", url=a.base, truncate_dim=32)
        assert load_embedder("ollama:nomic-embed-text", url=a.base, truncate_dim=16).dim == 16


@pytest.mark.slow  # loads nomic-embed-text in-process (and assembles its GGUF once per checkout)
def test_gguf_inputs_past_the_window_are_counted_and_remembered(nomic, tmp_path):
    """llama.cpp cuts an input longer than n_ctx to its head; each cut text is counted in the
    embedder's stats (what metrics.json records under cache.embeddings), also when served from the cache."""
    from adiyan.models.embedders import LlamaCppEmbedder

    assert nomic.identity == "nomic-embed-text|llama.cpp n_ctx=2048|sha256:f7af6f66802f4df8"
    small = LlamaCppEmbedder("nomic-embed-text", nomic.path, prefixes=nomic.prefixes, n_ctx=64,
                             weights_sha256="f7af6f66802f4df86eda10fe9bbcfc75c39562bed48ef6ace719a251cf1c2fdb")
    long = " ".join(["The guide counts the guests at every stop and reports delays by phone."] * 12)
    assert small.count_tokens(small.prefix("document") + long) > 64 > small.count_tokens(TEXTS[0])
    cache = EmbeddingCache(tmp_path / "e.sqlite")
    first = CachedEmbedder(small, cache)
    first.embed([TEXTS[0], long, long])
    assert first.stats.as_dict()["truncated"] == 1 and small.truncated_inputs == 1
    again = CachedEmbedder(small, cache)
    again.embed([long, TEXTS[1]])
    assert (again.stats.hits, again.stats.truncated) == (1, 1)  # the cached row was a cut input's
    assert small.truncated_inputs == 1  # TEXTS[1] fits: nothing more was cut
