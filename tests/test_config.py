"""The typed config: the seed's defaults, the override layers, and clear errors."""

import json

import pytest

from adiyan.config import ConfigError, Settings, load_settings, parse_set
from adiyan.factory import score_floor


def test_seed_defaults_are_written_once_here():
    s = Settings()
    assert s.retrieval.kb_top_k == 4
    assert s.retrieval.doc_top_k == 5
    assert score_floor(s, "nomic-embed-text") == 0.55
    # the design: headings first for authored Markdown, recursive for converted formats (issue 14)
    assert (s.chunking.size, s.chunking.overlap, s.chunking.strategy) == (800, 100, "auto")
    assert s.memory.half_life_days == 14
    assert (s.memory.overfetch_factor, s.memory.overfetch_min) == (3, 10)
    assert s.agent.max_steps == 10
    assert s.generation.context_budget_tokens == 2500
    # the offline default answerer quotes (issue 25.2, docs/answerer.md); smollm2 stays by name
    assert (s.embedder.name, s.llm.name, s.store.engine) == ("minilm", "extractive", "edge")


def test_layers_file_then_env_then_set(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("retrieval:\n  kb_top_k: 6\n  rrf_k: 30\nchunking:\n  size: 500\n")
    env = {"ADIYAN_RETRIEVAL__KB_TOP_K": "7", "ADIYAN_EMBEDDER__NAME": "mpnet", "PATH": "/bin"}
    s = load_settings(f, parse_set(["retrieval.kb_top_k=8"]), environ=env)
    assert s.retrieval.kb_top_k == 8  # --set beats env beats file
    assert s.retrieval.rrf_k == 30  # file value kept where nothing overrides it
    assert s.chunking.size == 500
    assert s.embedder.name == "mpnet"
    s2 = load_settings(f, environ=env)
    assert s2.retrieval.kb_top_k == 7


def test_env_values_are_typed():
    s = load_settings(environ={"ADIYAN_STORE__EXACT": "true", "ADIYAN_MEMORY__HALF_LIFE_DAYS": "3.5"})
    assert s.store.exact is True and s.memory.half_life_days == 3.5


@pytest.mark.parametrize("env,needle", [
    ({"ADIYAN_RETRIEVAL__KB_TOPK": "3"}, "unknown key 'retrieval.kb_topk'"),
    ({"ADIYAN_NOPE__X": "3"}, "unknown section 'nope'"),
    ({"ADIYAN_RETRIEVAL__KB_TOP_K": "0"}, "retrieval.kb_top_k"),
    ({"ADIYAN_STORE__ENGINE": "sqlite"}, "store.engine"),
])
def test_bad_values_name_the_source_and_key(env, needle):
    with pytest.raises(ConfigError) as err:
        load_settings(environ=env)
    assert needle in str(err.value)
    assert "env" in str(err.value) or "configuration" in str(err.value)


def test_bad_file_is_named(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("retrieval: [1, 2\n")
    with pytest.raises(ConfigError, match="bad.yaml: not valid YAML"):
        load_settings(f, environ={})
    with pytest.raises(ConfigError, match="missing.yaml: config file not found"):
        load_settings(tmp_path / "missing.yaml", environ={})


def test_hash_is_stable_and_sensitive():
    a, b = Settings(), load_settings(environ={})
    assert a.config_hash() == b.config_hash()
    assert len(a.config_hash()) == 64
    c = a.with_overrides({"retrieval.kb_top_k": 5})
    assert c.config_hash() != a.config_hash()
    # the hash is of the canonical JSON, so it can be recomputed from a saved config
    import hashlib
    canon = json.dumps(a.to_dict(), sort_keys=True, separators=(",", ":"))
    assert hashlib.sha256(canon.encode()).hexdigest() == a.config_hash()


def test_score_floor_per_embedder():
    s = load_settings(environ={}, overrides={"retrieval.score_floors.minilm": 0.3,
                                             "retrieval.use_calibrated_floors": False})
    assert score_floor(s, "minilm") == 0.3
    assert score_floor(s, "nomic-embed-text") == 0.55
    assert score_floor(s, "mpnet") == 0.0


def test_calibrated_floors_are_used_unless_configured(tmp_path, monkeypatch):
    import adiyan.retrieval.floor as fl

    f = tmp_path / "floors.yaml"
    f.write_text("mpnet: {floor: 0.21, youden_j: 0.5}\n")  # J >= retrieval.floor_min_j: applied
    monkeypatch.setattr(fl, "FLOORS_FILE", f)
    s = load_settings(environ={})
    assert score_floor(s, "mpnet") == 0.21  # measured
    assert score_floor(s, "nomic-embed-text") == 0.55  # configured wins
    assert score_floor(s, "unknown") == 0.0
    assert score_floor(s.with_overrides({"retrieval.use_calibrated_floors": False}), "mpnet") == 0.0


def test_a_preset_sits_under_the_file_env_and_set(tmp_path, monkeypatch):
    from adiyan import config as config_module

    (tmp_path / "fast.yaml").write_text("retrieval:\n  kb_top_k: 9\n  mode: hybrid\n", encoding="utf-8")
    monkeypatch.setattr(config_module, "PRESETS_DIR", tmp_path)  # a preset folder of the test's own
    s = load_settings(None, preset="fast", environ={})
    assert (s.retrieval.kb_top_k, s.retrieval.mode) == (9, "hybrid")
    user = tmp_path / "user.yaml"
    user.write_text("retrieval:\n  kb_top_k: 3\n", encoding="utf-8")
    s = load_settings(user, preset="fast", environ={})
    assert (s.retrieval.kb_top_k, s.retrieval.mode) == (3, "hybrid")  # the file wins, the rest of the preset stays
    s = load_settings(None, {"retrieval.mode": "dense"}, environ={"ADIYAN_PRESET": "fast"})
    assert (s.retrieval.kb_top_k, s.retrieval.mode) == (9, "dense")
    with pytest.raises(ConfigError, match=r"unknown preset 'nope'; shipped presets: fast"):
        load_settings(None, preset="nope", environ={})


def test_every_shipped_preset_is_applied_whole():
    """Each shipped preset resolves with every one of its values in force (none dropped or renamed),
    and changes the defaults (a preset equal to the defaults would describe nothing)."""
    from adiyan.config import preset_overrides, presets

    assert "nomic-hybrid" in presets()
    for name in presets():
        s = load_settings(None, preset=name, environ={}).to_dict()
        base = Settings().to_dict()
        flat = preset_overrides(name)
        def at(d, key):  # a dotted key, through mappings of user-named keys too (memory.signal_weights.bm25)
            for part in key.split("."):
                d = (d or {}).get(part)
            return d

        for key, value in flat.items():
            assert at(s, key) == value, (name, key)
        assert any(at(base, k) != v for k, v in flat.items()), name
