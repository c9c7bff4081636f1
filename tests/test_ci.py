"""CI exercises the optional system tools: .ci/run installs LibreOffice and tesseract before the
tests, and makes the tests that need them fail rather than skip when a tool is missing."""

from pathlib import Path

CI = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text(encoding="utf-8")


def test_ci_installs_libreoffice_and_tesseract_before_the_tests():
    tests_at = CI.index("invoke test --all")
    # tesseract-ocr (and chromium, for the browser tests) are installed in one apt pass when missing
    for needle in ("ADIYAN_INSTALL_LIBREOFFICE=1 bash scripts/install.sh", 'missing="$missing tesseract-ocr"',
                   'missing="$missing chromium"', "apt-get install -y -q --no-install-recommends $missing",
                   "export CI_REQUIRE_SYSTEM_TOOLS=1"):
        assert needle in CI and CI.index(needle) < tests_at, needle
    # every stage reports its time: tesseract, install, tests, eval
    assert CI.count('; stage "') + CI.count('\nstage "') >= 4


def test_ci_makes_a_missing_data_set_a_failure():
    """Issue 44.4: the tests that need ../shared/datasets skip on a user's machine without it, and fail
    under CI, which exports CI_REQUIRE_DATA=1 before the tests."""
    from tests.conftest import data_skip_is_a_failure

    assert "export CI_REQUIRE_DATA=1" in CI and CI.index("export CI_REQUIRE_DATA=1") < CI.index("invoke test --all")
    reason = "../shared/datasets/scifact not present"
    assert data_skip_is_a_failure(reason, {"CI_REQUIRE_DATA": "1"})
    assert not data_skip_is_a_failure(reason, {})  # a user without the data: a skip
    assert not data_skip_is_a_failure("playwright is not installed", {"CI_REQUIRE_DATA": "1"})


def test_ci_re_runs_the_default_budget_of_regressions_after_invoke_eval():
    """Issue 44.1: CI re-checks the committed figures (benchmarks/verify.py's default budget), after
    `invoke eval` so that eval-retrieval reuses the evaluation index; the default budget holds the
    headline retrieval figures and fits CI's time (the checker's files are slow, with their reason)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import verify

    assert CI.index(".venv/bin/invoke eval;") < CI.index(".venv/bin/invoke bench --verify;")
    default = [r for r in verify.load_all() if r.budget == "default"]
    assert {"eval-retrieval", "scifact-reference", "latency-scifact"} <= {r.name for r in default}
    assert sum(r.seconds or 0 for r in default) < 15 * 60
