"""The run index groups like runs, marks best within a group only, shows each run's settings diff
and offers a two-run comparison. Three run folders in the real format (metrics.json with the
resolved config as ``invoke eval`` saves it, config.yaml, report.html absent): two on
adiyan_full with different retrieval settings, one on adiyan_basic whose 1.0 hit rate must not
be "best" over adiyan_full's runs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from adiyan.config import load_settings
from adiyan.report.index import settings_diff, write_index

FULL = {"name": "adiyan_full", "hash": "0458" * 16, "n_questions": 48}
BASIC = {"name": "adiyan_basic", "hash": "ab12" * 16, "n_questions": 16}


def _run(root: Path, run_id: str, day: int, dataset: dict, overrides: dict, hit: float, mrr: float,
         latency: float) -> None:
    s = load_settings(None, overrides, environ={})  # the resolved config, as the runner saves it
    d = root / run_id
    d.mkdir(parents=True)
    m = {"run_id": run_id, "created_at": f"2026-12-0{day}T10:00:00+00:00", "config_hash": s.config_hash(),
         "config": s.to_dict(), "models": {"embedder": {"id": "all-minilm-l6-v2"}, "llm": {"id": "smollm2"}},
         "dataset": dataset, "warnings": [],
         "metrics": {"retrieval": {"hit_rate@4": hit, "mrr@4": mrr}, "agent": {"latency_p50_s": latency}}}
    (d / "metrics.json").write_text(json.dumps(m), encoding="utf-8")
    (d / "config.yaml").write_text(s.to_yaml(), encoding="utf-8")


@pytest.fixture
def reports(tmp_path: Path) -> Path:
    _run(tmp_path, "run-full-dense", 1, FULL, {"eval.evalset": "evalsets/adiyan_full"}, 0.95, 0.80, 2.0)
    _run(tmp_path, "run-full-hybrid", 2, FULL, {"eval.evalset": "evalsets/adiyan_full", "retrieval.mode": "hybrid",
                                                "retrieval.kb_top_k": 8}, 0.90, 0.85, 3.0)
    _run(tmp_path, "run-basic", 3, BASIC, {"eval.evalset": "evalsets/adiyan_basic",
                                           "paths.reports_dir": "elsewhere"}, 1.0, 1.0, 1.0)
    # a comparison adiyan compare wrote earlier, for the widget to link
    cmp = tmp_path / "compare" / "run-full-dense__run-full-hybrid"
    cmp.mkdir(parents=True)
    (cmp / "compare.json").write_text(json.dumps({"a": {"run_id": "run-full-dense"},
                                                  "b": {"run_id": "run-full-hybrid"}}), encoding="utf-8")
    return tmp_path


def _group(html: str, name: str) -> str:
    start = html.index(f"<h2>{name} <small>")
    return html[start:html.index("</div>", start)]


def _row(html: str, run_id: str) -> str:
    i = html.index(f">{run_id}</a>")
    return html[html.rindex("<tr>", 0, i):html.index("</tr>", i)]


def test_best_is_marked_within_a_group_only(reports):
    html = write_index(reports).read_text(encoding="utf-8").replace("<wbr>", "")  # break hints aside
    full, basic = _group(html, "adiyan_full"), _group(html, "adiyan_basic")
    assert "2 run(s)" in full and "1 run(s)" in basic
    assert "run-basic" not in full and "run-full-dense" not in basic
    # hit rate: higher is better (registry); adiyan_basic's 1.0 is not compared with adiyan_full
    assert '<td class="num best">0.95</td>' in _row(html, "run-full-dense")
    assert '<td class="num">0.9</td>' in _row(html, "run-full-hybrid")
    assert '<td class="num best">0.85</td>' in _row(html, "run-full-hybrid")  # mrr: the other run's best
    # latency: lower is better, by the registry's direction, not by a guess from the name
    assert '<td class="num best">2.0</td>' in _row(html, "run-full-dense")
    assert "best" not in _row(html, "run-basic")  # alone in its group: nothing to be best against
    assert html.count('class="num best"') == 3


def test_settings_diff_shows_exactly_the_changed_keys(reports):
    html = write_index(reports).read_text(encoding="utf-8").replace("<wbr>", "")  # break hints aside
    diff = lambda run: re.findall(r"<code>([^<]*)</code>", _row(html, run).split('class="diff">')[1].split("</td>")[0])
    assert diff("run-full-hybrid") == ["retrieval.kb_top_k=8", "retrieval.mode=hybrid"]
    assert diff("run-full-dense") == []  # the default evalset is adiyan_full
    assert 'class="defaults">defaults<' in _row(html, "run-full-dense")
    assert diff("run-basic") == ["eval.evalset=evalsets/adiyan_basic"]  # paths.* left out


def test_settings_diff_names_keys_the_defaults_no_longer_have():
    assert settings_diff({"retrieval": {"mode": "dense", "top_k": 4}, "seed": 1}) == ["retrieval.top_k=4", "seed=1"]


def test_compare_widget_offers_the_command_and_links_a_known_comparison(reports):
    html = write_index(reports).read_text(encoding="utf-8").replace("<wbr>", "")  # break hints aside
    assert html.count('<input type="checkbox" class="pick"') == 3
    assert 'data-run="run-full-hybrid"' in html
    assert html.count("<script>") == 1 and "'invoke compare '+picked[0]+' '+picked[1]" in html
    box = re.search(r'<div id="compare-box" data-comparisons="([^"]*)"', html).group(1)
    known = json.loads(box.replace("&#34;", '"').replace("&quot;", '"'))
    assert known == [{"a": "run-full-dense", "b": "run-full-hybrid",
                      "href": "compare/run-full-dense__run-full-hybrid/index.html"}]
    assert not re.search(r"(src|href)=\"https?:", html)  # opens offline


def test_saved_config_yaml_is_used_when_metrics_json_has_none(reports):
    m = json.loads((reports / "run-full-hybrid" / "metrics.json").read_text())
    del m["config"]
    (reports / "run-full-hybrid" / "metrics.json").write_text(json.dumps(m))
    assert yaml.safe_load((reports / "run-full-hybrid" / "config.yaml").read_text())["retrieval"]["mode"] == "hybrid"
    html = write_index(reports).read_text(encoding="utf-8").replace("<wbr>", "")  # break hints aside
    assert "<code>retrieval.mode=hybrid</code>" in _row(html, "run-full-hybrid")
