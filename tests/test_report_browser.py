"""The HTML reports in a real browser: Playwright driving Debian's chromium (no browser download).

The pages are built by real runs: two retrieval-only ``run_eval`` runs of adiyan_basic (dense k 4, then
BM25 k 1 so that some gold sources are missed), ``compare_runs`` between them and the index. The
browser opens the second run's report, the index and the comparison from file:// (as a person
opens them offline) and checks: no console error or uncaught exception, a failed question folds
open to its retrieved context, the index's columns sort and its filter hides runs, ticking two
runs yields the comparison link, and the headline columns fit without a horizontal scroll.
Screenshots go to reports/ci-screenshots/ (CI keeps them as artefacts).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import MODEL_DIR, ROOT

pytestmark = [pytest.mark.slow, pytest.mark.browser]

CHROMIUM = Path("/usr/bin/chromium")
SHOTS = ROOT / "reports" / "ci-screenshots"
EVALSET = ROOT / "evalsets" / "adiyan_basic"

try:
    from playwright.sync_api import sync_playwright
except ImportError:  # pragma: no cover - requirements.txt pins it
    sync_playwright = None


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> Path:
    from adiyan.config import load_settings
    from adiyan.eval.compare import compare_runs
    from adiyan.eval.runner import run_eval
    from adiyan.report.index import write_index

    tmp = tmp_path_factory.mktemp("browser")
    base = {"paths.data_dir": str(tmp / "data"), "paths.reports_dir": str(tmp / "reports"),
            "paths.cache_dir": str(tmp / "cache"), "paths.models_dir": str(MODEL_DIR),
            "retrieval.use_calibrated_floors": False, "eval.evalset": str(EVALSET), "eval.generate": False,
            "eval.judge": None, "eval.incidents": False}
    run_eval(load_settings(None, base, environ={}), progress=False, run_id="20261204-010000-k4")
    run_eval(load_settings(None, {**base, "retrieval.kb_top_k": 1, "retrieval.mode": "bm25"}, environ={}), progress=False,
             run_id="20261204-010100-k1")
    root = tmp / "reports"
    compare_runs(root / "20261204-010000-k4", root / "20261204-010100-k1", root / "compare")
    write_index(root)
    return root


@pytest.fixture(scope="module")
def browser():
    if sync_playwright is None:
        pytest.skip("playwright is not installed (requirements.txt pins it)")
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} not found: install Debian's chromium (apt-get install chromium; .ci/run does)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser):
    """A page that records every console error and uncaught exception; none may happen."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = ctx.new_page()
    pg.errors = []
    pg.on("console", lambda msg: pg.errors.append(f"console {msg.type}: {msg.text}") if msg.type == "error" else None)
    pg.on("pageerror", lambda exc: pg.errors.append(f"uncaught: {exc}"))
    # offline: any request leaving file:// is an error
    pg.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:")
             else (pg.errors.append(f"network: {route.request.url}"), route.abort()))
    yield pg
    ctx.close()


def _shot(pg, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    png = SHOTS / f"{name}.png"
    pg.screenshot(path=str(png), full_page=True)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_report_opens_on_its_summary_and_a_failure_opens_to_its_context(reports, page):
    page.goto((reports / "20261204-010100-k1" / "report.html").as_uri())
    assert page.locator("h2").first.inner_text() == "Summary"
    assert page.locator("table.headline tr.hl").count() >= 4
    # the previous run on the same data is linked, and nDCG@10's delta is the two runs' difference,
    # called better or worse by its direction (higher is better)
    assert page.locator("p.lede a").inner_text() == "20261204-010000-k4"
    a, b = (json.loads((reports / r / "metrics.json").read_text())["metrics"]["retrieval"]["ndcg@10"]
            for r in ("20261204-010000-k4", "20261204-010100-k1"))
    cell = page.locator("table.headline tr.hl", has_text="ndcg@10").locator("td.delta")
    assert float(cell.inner_text().replace("±", "")) == pytest.approx(b - a, abs=5e-4)
    expected = "better" if b > a else "worse" if b < a else "same"
    if expected != "same" and "no difference shown" in cell.get_attribute("title"):
        expected = "neutral"  # coloured only when its paired test is significant after Holm
    assert cell.get_attribute("class").split()[-1] == expected
    fail = page.locator("details.fail").first
    assert "gold missed" in fail.locator("summary").inner_text()
    context = fail.locator("ol.ctx li pre").first
    assert not context.is_visible()
    fail.locator("summary").click()
    assert context.is_visible() and len(context.inner_text()) > 20  # the chunk the question was given
    _shot(page, "report")
    assert page.errors == []


def _column(page, table, header: str) -> list[str]:
    idx = [h.inner_text().replace("\n", " ") for h in table.locator("thead th").all()].index(header)
    return [r.locator("td").nth(idx).inner_text() for r in table.locator("tbody tr").all() if r.is_visible()]


def test_index_sorts_filters_and_links_the_comparison(reports, page):
    page.goto((reports / "index.html").as_uri())
    table = page.locator("table.runs").first
    # headline columns fit: no horizontal scroll until "all columns" is asked for
    scroll = page.locator("div.scroll").first
    assert scroll.evaluate("e => e.scrollWidth <= e.clientWidth")
    assert table.locator("th.run").evaluate("e => getComputedStyle(e).position") == "sticky"
    # sort: newest first as written; a click on ndcg@10 sorts ascending, a second descending
    runs = lambda: [r.strip().splitlines()[0] for r in _column(page, table, "run")]  # the id; its date below
    assert runs()[0] == "20261204-010100-k1"
    header = table.locator("thead th", has_text="ndcg@10")
    header.click()
    asc = [float(v) for v in _column(page, table, "retrieval ndcg@10")]
    assert asc == sorted(asc) and header.get_attribute("aria-sort") == "ascending"
    first_asc = runs()
    header.click()
    desc = [float(v) for v in _column(page, table, "retrieval ndcg@10")]
    assert desc == sorted(desc, reverse=True) and header.get_attribute("aria-sort") == "descending"
    if len(set(asc)) > 1:
        assert runs() == first_asc[::-1]
    # a run without the column (hit_rate@4: the k 1 run has hit_rate@1) sorts last both ways
    k4 = table.locator("thead th", has_text="hit_rate@4")
    k4.click()
    assert runs()[-1] == "20261204-010100-k1"
    k4.click()
    assert runs()[-1] == "20261204-010100-k1"
    # filter: only the run with the non-default setting
    page.fill("#run-filter", "kb_top_k=1")
    assert runs() == ["20261204-010100-k1"]
    assert page.inner_text("#filter-count") == "1 of 2 runs"
    page.fill("#run-filter", "")
    # all columns: more columns, the run column stays frozen while the table scrolls
    page.click("button.more-cols")
    assert table.locator("thead th").nth(table.locator("thead th").count() - 1).is_visible()
    # tick two runs: the command and the comparison link appear
    link = page.locator("#compare-link")
    assert not link.is_visible()
    for box in page.locator("input.pick").all():
        box.check()
    assert page.inner_text("#compare-cmd").startswith("invoke compare 2026120")
    assert link.is_visible()
    assert link.get_attribute("href") == "compare/20261204-010000-k4__20261204-010100-k1/index.html"
    _shot(page, "index")
    link.click()
    page.wait_for_load_state()
    assert page.url.endswith("compare/20261204-010000-k4__20261204-010100-k1/index.html")
    assert "20261204-010100-k1" in page.inner_text("body")
    _shot(page, "compare")
    assert page.errors == []

