"""Shared fixtures. Real models and real data throughout; test doubles only where a test says so."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "datasets"
# Model files are unpacked once per checkout (mpnet, nomic GGUF): tests share that cache.
MODEL_DIR = ROOT / ".cache" / "adiyan" / "models"


# Content-addressed caches that every test of one session shares: a parse is keyed by the file's
# bytes and every parser setting (adiyan/ingest/parse.py `parse_cache_fields`), an embedding row by
# the embedder's identity, prefix and text (adiyan/cache.py `embedding_key`), so a row one test wrote
# is the row any other would compute. Everything else (data dir: Qdrant, raw files, evalset indexes;
# reports; calls.sqlite: answers, judge verdicts; mem0) stays per test. A test that counts its own
# cache misses, or that tests the cache or resumption itself, is marked ``private_cache``.
# ADIYAN_TEST_SHARED_CACHE=0 turns the sharing off (to measure what it saves).
SHARED_CACHE_FILES = ("parsed.sqlite", "embeddings.sqlite")
SHARE = os.environ.get("ADIYAN_TEST_SHARED_CACHE", "1") != "0"


@pytest.fixture(scope="session")
def shared_cache_dir(tmp_path_factory):
    """One session's parse and embedding caches (parsed.sqlite, embeddings.sqlite)."""
    return tmp_path_factory.mktemp("shared-cache")


@pytest.fixture
def make_settings(tmp_path, request, shared_cache_dir):
    """Settings whose data, reports and caches live in tmp_path; unpacked model files are shared, and so
    (unless the test is marked ``private_cache`` or overrides ``paths.cache_dir``) are the session's
    content-addressed parse and embedding caches: tmp_path/cache/{parsed,embeddings}.sqlite link there."""
    from adiyan.config import load_settings

    share = SHARE and request.node.get_closest_marker("private_cache") is None

    def make(**overrides):
        cache = tmp_path / "cache"
        base = {
            "paths.data_dir": str(tmp_path / "data"),
            "paths.reports_dir": str(tmp_path / "reports"),
            "paths.cache_dir": str(cache),
            "paths.models_dir": str(MODEL_DIR),
            # tests state their floors; measured floors (adiyan/models/floors.yaml) change over time
            "retrieval.use_calibrated_floors": False,
        }
        base.update({k.replace("__", "."): v for k, v in overrides.items()})
        if share and base["paths.cache_dir"] == str(cache):
            cache.mkdir(parents=True, exist_ok=True)
            for name in SHARED_CACHE_FILES:
                link = cache / name
                if not link.is_symlink() and not link.exists():  # SQLite follows the link (WAL beside the target)
                    link.symlink_to(shared_cache_dir / name)
        return load_settings(None, base, environ={})

    return make


# What the session computed rather than read from a cache: documents parsed (Docling, OCR, ...) through
# the parse cache, and texts embedded (and model calls) behind the embedding cache. Printed at the end.
COUNTS = {"parses": 0, "embedded_texts": 0, "embed_slices": 0}


@pytest.fixture(scope="session", autouse=True)
def _count_computed():
    from adiyan import cache as cache_module
    from adiyan.ingest import parse as parse_module

    parse_document, embed_misses = parse_module.parse_document, cache_module.CachedEmbedder._embed_misses

    def counted_parse(*args, **kwargs):
        COUNTS["parses"] += 1
        return parse_document(*args, **kwargs)

    def counted_embed(self, todo, kind):
        COUNTS["embedded_texts"] += len(todo)
        COUNTS["embed_slices"] += -(-len(todo) // self.SLICE)
        return embed_misses(self, todo, kind)

    parse_module.parse_document, cache_module.CachedEmbedder._embed_misses = counted_parse, counted_embed
    yield
    parse_module.parse_document, cache_module.CachedEmbedder._embed_misses = parse_document, embed_misses


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(
        f"computed, not cached (shared parse/embedding cache {'on' if SHARE else 'off'}): "
        f"{COUNTS['parses']} parses, {COUNTS['embedded_texts']} texts embedded in {COUNTS['embed_slices']} slices")


@pytest.fixture(scope="session")
def minilm():
    from adiyan.models import load_embedder

    return load_embedder("minilm", models_dir=MODEL_DIR)


@pytest.fixture(scope="session")
def mpnet():
    from adiyan.models import load_embedder

    return load_embedder("mpnet", models_dir=MODEL_DIR)


@pytest.fixture(scope="session")
def nomic():
    from adiyan.models import load_embedder

    return load_embedder("nomic-embed-text", models_dir=MODEL_DIR, progress=False)


@pytest.fixture(scope="session")
def smollm2():
    from adiyan.models import load_llm

    return load_llm("smollm2")


# Issue 44.4: under CI (.ci/run exports CI_REQUIRE_DATA=1) a test that needs ../shared/datasets
# fails when the data is missing instead of skipping silently, as the soffice / tesseract tests do.
_DATA_SKIP_MARKERS = ("shared/datasets", "shared" + os.sep + "datasets")


def data_skip_is_a_failure(reason: str, environ=os.environ) -> bool:
    return environ.get("CI_REQUIRE_DATA") == "1" and any(m in reason for m in _DATA_SKIP_MARKERS)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and isinstance(report.longrepr, tuple):
        reason = str(report.longrepr[2])
        if data_skip_is_a_failure(reason):
            report.outcome = "failed"
            report.longrepr = f"CI_REQUIRE_DATA=1: a data set this test needs is missing ({reason})"


@pytest.fixture
def memory_factory(make_settings):
    """``make(embedder, **overrides)``: a :class:`adiyan.memory.Memory` opened from ``make_settings(**overrides)``
    (its data in tmp_path); every memory it opened is closed after the test."""
    from adiyan.memory import Memory  # mem0 loads only for the tests that open a memory

    opened = []

    def make(embedder, **overrides):
        mem = Memory.from_settings(make_settings(**overrides), embedder=embedder)
        opened.append(mem)
        return mem

    yield make
    for mem in opened:
        mem.close()
