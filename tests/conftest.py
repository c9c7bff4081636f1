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


@pytest.fixture
def make_settings(tmp_path):
    """Settings whose data, reports and caches live in tmp_path; unpacked model files are shared."""
    from adiyan.config import load_settings

    def make(**overrides):
        base = {
            "paths.data_dir": str(tmp_path / "data"),
            "paths.reports_dir": str(tmp_path / "reports"),
            "paths.cache_dir": str(tmp_path / "cache"),
            "paths.models_dir": str(MODEL_DIR),
            # tests state their floors; measured floors (adiyan/models/floors.yaml) change over time
            "retrieval.use_calibrated_floors": False,
        }
        base.update({k.replace("__", "."): v for k, v in overrides.items()})
        return load_settings(None, base, environ={})

    return make


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
