"""The README tour's pages in a real browser (Playwright on Debian's chromium, 1280 px wide): the run
report, the index, a comparison and a sweep index, each built by the production code on adiyan_basic
(two `invoke eval` runs, dense then hybrid, answered by the default extractive answerer and checked by
the claim checker; `invoke compare` between them; a two-point top-k sweep of notebooks/retrieval.ipynb).

On every page: no header breaks inside a word (a name may wrap after ``_ . @ / =``), no raw Python
dict, no table column without a single value, no unlabeled Pearson figure; and a colour says
"better", "worse" or "best" only where a paired test, Holm-adjusted, is significant (issue 41).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import MODEL_DIR, ROOT
from tests.test_report_browser import _shot, browser  # noqa: F401 - the shared chromium fixture

pytestmark = [pytest.mark.slow, pytest.mark.browser]

EVALSET = ROOT / "evalsets" / "adiyan_basic"

# Words in header cells whose letters sit on more than one line; each run of letters up to a
# separator (_ . @ / =) counts as a word, so "hit_rate@4" may wrap after "_" but "retriev|al" is caught.
PAGE_CHECK = r"""
() => {
  const out = {midword: [], rawdict: [], emptycols: [], pearson: []};
  for (const th of document.querySelectorAll('th')) {
    const walker = document.createTreeWalker(th, NodeFilter.SHOW_TEXT);
    let n;
    while ((n = walker.nextNode())) {
      const t = n.textContent; const re = /[^\s_.@\/=]+[_.@\/=]?/g; let m;
      while ((m = re.exec(t))) {
        const r = document.createRange(); r.setStart(n, m.index); r.setEnd(n, m.index + m[0].length);
        const tops = new Set([...r.getClientRects()].map(x => Math.round(x.top)));
        if (tops.size > 1) out.midword.push(m[0]);
      }
    }
  }
  const text = document.body.innerText;
  out.rawdict = (text.match(/\{'[^}]{0,60}/g) || []).slice(0, 5);
  out.pearson = (text.match(/(?<!Pearson )\br ?= ?-?\d[^\n]{0,20}/g) || []).slice(0, 5);
  for (const table of document.querySelectorAll('table')) {
    if (table.offsetParent === null) continue;  // a hidden table is not read
    const rows = [...table.rows].filter(r => r.offsetParent !== null);
    if (rows.length < 2) continue;
    const heads = [...rows[0].cells];
    heads.forEach((h, i) => {
      if (h.offsetParent === null) return;
      const vals = rows.slice(1).map(r => r.cells[i] ? r.cells[i].innerText.trim() : '');
      if (vals.every(v => v === '' || v === '—')) out.emptycols.push(h.innerText.trim() || `column ${i + 1}`);
    });
  }
  return out;
}
"""


@pytest.fixture(scope="module")
def tour(tmp_path_factory) -> dict:
    from adiyan.config import load_settings
    from adiyan.eval.compare import compare_runs
    from adiyan.eval.runner import run_eval
    from adiyan.report.index import write_index
    from adiyan.sweeps import SweepSpec, run_sweep

    tmp = tmp_path_factory.mktemp("tour")
    base = {"paths.data_dir": str(tmp / "data"), "paths.reports_dir": str(tmp / "reports"),
            "paths.cache_dir": str(tmp / "cache"), "paths.models_dir": str(MODEL_DIR),
            "eval.evalset": str(EVALSET), "eval.judge": None, "eval.incidents": False}
    a = run_eval(load_settings(None, base, environ={}), progress=False, run_id="20261207-010000-dense")
    b = run_eval(load_settings(None, {**base, "retrieval.mode": "hybrid"}, environ={}), progress=False,
                 run_id="20261207-010100-hybrid")
    root = tmp / "reports"
    cmp_dir, _ = compare_runs(a, b, root / "compare")
    write_index(root)
    spec = SweepSpec.from_dict({
        "name": "topk_tour", "notebook": str(ROOT / "notebooks" / "retrieval.ipynb"),
        "grid": {"retrieval.kb_top_k": [2, 4]}, "baseline": {"retrieval.kb_top_k": 4}, "answer_questions": 4,
        "overrides": {k: v for k, v in base.items()},
        "metrics": ["retrieval.hit_rate@k", "retrieval.mrr@k", "retrieval.ndcg@10", "context_tokens", "retrieve_ms"],
        "paired": ["hit", "reciprocal_rank", "retrieval.ndcg@10"]}, source="test")
    res = run_sweep(spec, out_dir=root / "sweeps" / "topk_tour", cwd=ROOT, progress=False)
    return {"report": b / "report.html", "index": root / "index.html", "compare": cmp_dir / "index.html",
            "sweep": res.index}


def _open(browser, path: Path):
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = ctx.new_page()
    pg.goto(path.as_uri())
    return ctx, pg


@pytest.mark.parametrize("name", ["report", "index", "compare", "sweep"])
def test_every_tour_page_reads_cleanly_at_1280_px(tour, browser, name):
    ctx, pg = _open(browser, tour[name])
    try:
        found = pg.evaluate(PAGE_CHECK)
        assert found["midword"] == [], f"{name}: header words broken across lines: {found['midword']}"
        assert found["rawdict"] == [], f"{name}: raw Python dicts on the page: {found['rawdict']}"
        assert found["emptycols"] == [], f"{name}: columns without a value: {found['emptycols']}"
        assert found["pearson"] == [], f"{name}: a correlation without its label: {found['pearson']}"
        _shot(pg, f"tour-{name}")
    finally:
        ctx.close()


def _holm_p(text: str) -> float:
    m = re.search(r"Holm p (\d\.\d+)", text)
    assert m, f"a coloured value without its Holm-adjusted p: {text!r}"
    return float(m.group(1))


def test_colour_follows_the_holm_adjusted_test(tour, browser):
    # the run report's summary: the deltas against the previous run (dense) of the hybrid run
    ctx, pg = _open(browser, tour["report"])
    try:
        cells = pg.locator("table.headline td.delta")
        assert cells.count() >= 4
        for i in range(cells.count()):
            c = cells.nth(i)
            cls, title = c.get_attribute("class").split()[-1], c.get_attribute("title")
            if cls in ("better", "worse") and "privacy" not in c.locator("xpath=..").inner_text():
                assert _holm_p(title) < 0.05
            if "no difference shown" in title:
                assert cls == "neutral"
    finally:
        ctx.close()
    # the comparison: a metric is coloured only with a significant adjusted test
    ctx, pg = _open(browser, tour["compare"])
    try:
        coloured = pg.locator("td.better, td.worse")
        for i in range(coloured.count()):
            row = coloured.nth(i).locator("xpath=..").inner_text()
            assert _holm_p(row) < 0.05, row
        assert pg.locator("text=no difference shown").count() > 0  # dense vs hybrid on 16 questions
    finally:
        ctx.close()
    # the sweep index: a cell is marked best only for a metric whose verdict is a significant test;
    # retrieve_ms is a timing and is never best
    ctx, pg = _open(browser, tour["sweep"])
    try:
        verdicts = {r.locator("td").nth(0).inner_text(): r.locator("td").nth(4).inner_text()
                    for r in pg.locator("h2:has-text('Best point per metric') + p + table tr").all()[1:]}
        assert verdicts["retrieve_ms"].startswith("a timing")
        best_cols = pg.evaluate("""() => { const t = document.querySelector('table.points') ||
            [...document.querySelectorAll('table')].find(x => x.rows[0] && x.rows[0].innerText.includes('status'));
            const heads = [...t.rows[0].cells].map(c => c.innerText.trim());
            return [...t.querySelectorAll('td.best')].map(td => heads[td.cellIndex]); }""")
        for metric in best_cols:
            assert verdicts[metric].startswith("best:"), (metric, verdicts[metric])
    finally:
        ctx.close()
