"""The documentation: the configuration reference is the settings model's (never stale), the site
builds with every page and link checked, and the README stays a front door."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from adiyan import config_reference
from adiyan.config import Settings

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference" / "configuration.md"


def test_committed_configuration_reference_is_not_stale():
    assert REFERENCE.read_text(encoding="utf-8") == config_reference.render(), (
        "docs/reference/configuration.md is stale: run `python -m adiyan.config_reference` (or `invoke docs`)")


def test_reference_lists_every_setting_with_its_default_and_comment():
    text = config_reference.render()
    defaults = Settings().to_dict()
    for section, keys in defaults.items():
        if not isinstance(keys, dict):
            assert f"| `{section}` |" in text
            continue
        for key in keys:
            row = next((line for line in text.splitlines() if line.startswith(f"| `{section}.{key}` |")), None)
            assert row is not None, f"{section}.{key} missing"
            assert f"ADIYAN_{section.upper()}__{key.upper()}" in row
    row = lambda k: next(line for line in text.splitlines() if line.startswith(f"| `{k}` |"))
    # default, bound and the source comment, read from adiyan/config.py
    assert "| `4` | ≥ 1 | retrieve_knowledge_base" in row("retrieval.kb_top_k")
    assert 'one of "dense", "bm25", "hybrid" | `"dense"`' in row("retrieval.mode")
    assert "int or None" in row("agent.scratchpad_budget_tokens")
    assert "0.55 was measured by the seed for nomic-embed-text" in row("retrieval.score_floors")
    assert "The three-part context of a conversation turn" in text  # a section's docstring


def test_check_mode_fails_on_a_stale_page(tmp_path, capsys):
    page = tmp_path / "configuration.md"
    page.write_text(config_reference.render().replace("| `4` |", "| `5` |", 1), encoding="utf-8")
    assert config_reference.main(["--check", "--out", str(page)]) == 1
    assert "stale" in capsys.readouterr().err
    assert config_reference.main(["--out", str(page)]) == 0
    assert config_reference.main(["--check", "--out", str(page)]) == 0


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None,
                    reason="mkdocs not installed (requirements.txt pins it; scripts/install.sh installs it)")
def test_site_builds_strict_and_catches_a_broken_link(tmp_path):
    # the real docs build with every link and anchor checked ...
    site = tmp_path / "site"
    run = lambda cfg, d: subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(cfg),
                                         "-d", str(d)], cwd=ROOT, capture_output=True, text=True,
                                        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})
    ok = run(ROOT / "mkdocs.yml", site)
    assert ok.returncode == 0, ok.stderr
    assert (site / "reference" / "configuration" / "index.html").is_file()
    # ... and a copy with one broken anchor and one link to a missing repository file fails
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", copy / "docs")
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    (copy / "README.md").write_text("x", encoding="utf-8")
    page = copy / "docs" / "howto" / "sweeps.md"
    page.write_text(page.read_text(encoding="utf-8") + "\n[x](../benchmarks.md#no-such-anchor) "
                    "[y](../../adiyan/no_such_module.py)\n", encoding="utf-8")
    bad = run(copy / "mkdocs.yml", tmp_path / "bad")
    assert bad.returncode != 0
    assert "no-such-anchor" in bad.stderr and "no_such_module.py" in bad.stderr


def test_readme_is_a_front_door():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    for command in ("bash scripts/install.sh && .venv/bin/invoke eval", "bash scripts/install.sh && .venv/bin/invoke test"):
        assert f"```bash\n{command}\n```" in readme
    assert readme.count("<!-- regression-headline -->") == 1  # the headline figures, generated (test_regressions)
    # every relative link of the README points at a file that exists
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme):
        if not target.startswith(("http://", "https://")):
            assert (ROOT / target).exists(), target
