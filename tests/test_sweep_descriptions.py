"""Every sweep in sweeps/ runs what it says (issue 44.9): a sweep whose description or header names
the embedded generative model sets it (the default LLM is the extractive answerer, so a sweep that
only *says* SmolLM2 runs extractive, and the agent then takes only default actions); a point that
needs a generative model (HyDE, the agent) names one; every knob the grid sweeps is named in the
description."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

SWEEPS = sorted((Path(__file__).resolve().parents[1] / "sweeps").glob("*.yaml"))
NEEDS_GENERATIVE = {("retrieval.query_transform", "hyde"), ("eval.mode", "agent")}
# how a description names a knob when its key's words are not used as they are
SYNONYMS = {"embedder.truncate_dim": "width", "store.quantization": "int8", "hnsw.m": "m,",
            "retrieval.kb_top_k": "top-k", "chunking.strategy": "chunking", "chunking.chunk_size": "chunking",
            "chunking.chunk_overlap": "chunking", "chunking.size": "chunking", "chunking.overlap": "chunking",
            "retrieval.mode": "dense", "dataset": "scifact"}


def _points(spec: dict) -> list[dict]:
    """Each grid entry's settings merged over the overrides (lists kept: any of their values runs)."""
    grid = spec.get("grid") or {}
    entries = grid if isinstance(grid, list) else [grid]
    return [{**(spec.get("overrides") or {}), **e} for e in entries]


def _llm(point: dict) -> str:
    return str(point.get("llm.name", "extractive"))


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.stem)
def test_a_sweep_runs_the_model_it_names(path):
    spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    header = "".join(line for line in path.read_text(encoding="utf-8").splitlines(True) if line.startswith("#"))
    says = f"{spec.get('description', '')} {header}".lower()
    points = _points(spec)
    if "smollm2" in spec.get("description", "").lower() or "embedded smollm2 by default" in says:
        assert any(_llm(p) == "smollm2" for p in points), f"{path.name} describes SmolLM2 but runs {_llm(points[0])}"
    for p in points:
        for key, value in NEEDS_GENERATIVE:
            values = p.get(key) if isinstance(p.get(key), list) else [p.get(key)]
            if value in values:
                assert _llm(p) != "extractive", f"{path.name}: {key}={value} needs a generative model"


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.stem)
def test_every_swept_knob_is_named_in_the_description(path):
    spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    desc = spec.get("description", "").lower().replace("-", "_").replace(" ", "_")
    grid = spec.get("grid") or {}
    swept = {k for e in (grid if isinstance(grid, list) else [grid]) for k, v in e.items() if isinstance(v, list)}
    for key in swept:
        words = [w for w in key.split(".")[-1].split("_") if len(w) >= 4] or [key.split(".")[-1]]
        named = any(w in desc for w in words) or SYNONYMS.get(key, "\0").replace("-", "_") in desc
        assert named, f"{path.name}: the grid sweeps {key}, which the description does not name"
