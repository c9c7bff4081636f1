"""Tests for adiyan.report: the run page and the cross-run index.

All run directories below are hand-made fixtures (metrics.json / questions.jsonl written here),
not the output of a real evaluation run.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from adiyan.report import write_run_report
from adiyan.report.index import write_index

EXTERNAL_REF = re.compile(r"""(?:\b(?:src|href)\s*=\s*["']?\s*|url\(\s*["']?\s*)https?://""", re.I)
XSS = "<script>alert(1)</script>"


def _metrics(run_id, created_at, hit_rate, mrr, extra_groups=None):
    groups = {"retrieval": {"hit_rate@4": hit_rate, "mrr@4": mrr},
              "answer": {"keyword_recall": 0.5, "abstain_rate_unanswerable": 1.0, "latency_p50_s": None}}
    groups.update(extra_groups or {})
    return {"run_id": run_id, "created_at": created_at, "config_hash": "3fa2c1" + "0" * 58,
            "config": {"retrieval": {"top_k": 4}, "note": XSS},
            "models": {"embedder": {"id": "minilm", "dim": 384, "normalized": True},
                       "llm": {"id": "smollm2-135m-instruct", "context_size": 2048}},
            "dataset": {"name": "adiyan_basic", "hash": "ab12" * 16, "n_documents": 5,
                        "n_questions": 5, "n_chunks": 42},
            "metrics": groups,
            "timings": {"ingest_s": 3.2, "retrieve_s": 0.4, "generate_s": 55.0, "total_s": 60.1},
            "cache": {"hits": 10, "misses": 42}}


def _chunk(source, idx, score, text):
    return {"source": source, "chunk_index": idx, "score": score, "text": text}


QUESTIONS = [
    {"id": "q01", "question": "PASSING question about the price list?", "kind": "lookup",
     "gold_answer": "12 EUR", "gold_sources": ["adiyan-office/price_list.md"],
     "retrieved": [_chunk("adiyan-office/price_list.md", 2, 0.61, "PASSING chunk: coffee costs 12 EUR")],
     "hit": True, "reciprocal_rank": 1.0, "answer": "12 EUR", "keyword_hit": True, "latency_s": 3.1},
    {"id": "q02", "question": "FAILING question about opening hours?", "kind": "lookup",
     "gold_answer": "9 to 17", "gold_sources": ["adiyan-office/hours.md"],
     "retrieved": [_chunk("adiyan-office/price_list.md", 0, 0.33, "MISSED chunk about prices"),
                   _chunk("adiyan-office/menu.md", 1, 0.21, "second MISSED chunk")],
     "hit": False, "reciprocal_rank": 0.0, "answer": "I do not know", "keyword_hit": False, "latency_s": 2.0},
    {"id": "q03", "question": "KEYWORD-FAIL question: who signs invoices?", "kind": "multi_hop",
     "gold_answer": "Mira", "gold_sources": ["adiyan-office/people.md"],
     "retrieved": [_chunk("adiyan-office/menu.md", 4, 0.4, "x"), _chunk("adiyan-office/people.md", 3, 0.38, "Mira signs")],
     "hit": True, "reciprocal_rank": 0.5, "answer": "Bob", "keyword_hit": False, "latency_s": 2.5},
    {"id": "q04", "question": "UNANSWERABLE question about Mars?", "kind": "unanswerable",
     "gold_answer": None, "gold_sources": [],
     "retrieved": [_chunk("adiyan-office/menu.md", 0, 0.12, "UNANSWERABLE chunk")],
     "hit": None, "reciprocal_rank": None, "answer": "I cannot answer", "keyword_hit": None, "latency_s": 1.0},
    {"id": "q05", "question": f"Injected {XSS} question", "kind": "lookup",
     "gold_answer": "none", "gold_sources": ["adiyan-office/hours.md"],
     "retrieved": [_chunk("adiyan-office/hours.md", 7, 0.5, f"chunk with {XSS} in it")],
     "hit": False, "reciprocal_rank": 0.0, "answer": XSS, "keyword_hit": False, "latency_s": 1.5},
]


def _write_run(d: Path, metrics: dict, questions=QUESTIONS):
    d.mkdir(parents=True)
    (d / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
    (d / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions), encoding="utf-8")
    (d / "config.yaml").write_text("retrieval:\n  top_k: 4\n", encoding="utf-8")


@pytest.fixture
def reports(tmp_path: Path) -> Path:
    """Two runs (old: worse hit rate, better MRR; new: better hit rate, extra group), one broken dir, one non-run dir."""
    root = tmp_path / "reports"
    _write_run(root / "20261201-090000-aaaaaa",
               _metrics("20261201-090000-aaaaaa", "2026-12-01T09:00:00+00:00", 0.75, 0.8))
    _write_run(root / "20261202-124501-3fa2c1",
               _metrics("20261202-124501-3fa2c1", "2026-12-02T12:45:01+00:00", 0.875, 0.71,
                        {"regression": {"hit_rate@4_delta": 0.125}}))
    (root / "broken-run").mkdir()
    (root / "broken-run" / "metrics.json").write_text("{not json", encoding="utf-8")
    (root / "notes").mkdir()  # no metrics.json: not a run, silently ignored
    return root


@pytest.fixture
def run_html(reports: Path) -> str:
    return write_run_report(reports / "20261202-124501-3fa2c1").read_text(encoding="utf-8")


def _section(html: str, start: str, end: str) -> str:
    i = html.index(start)
    return html[i:html.index(end, i)]


def test_metric_values_formatted_as_in_source(run_html):
    metrics = _section(run_html, "<h2>Metrics</h2>", '<h2 id="run">')
    assert '<td>keyword_recall<span class="human" title="RAGChecker meta-evaluation' in metrics  # vs humans
    metrics = re.sub(r'<span class="human"[^>]*>[^<]*</span>', "", metrics)  # the values, as the run wrote them
    for name, value in [("hit_rate@4", "0.875"), ("mrr@4", "0.71"), ("keyword_recall", "0.5"),
                        ("abstain_rate_unanswerable", "1.0"), ("hit_rate@4_delta", "0.125")]:
        assert f'<td>{name}</td><td class="num">{value}</td>' in metrics
    assert '<td>latency_p50_s</td><td class="num">—</td>' in metrics  # null shown, not crashed
    assert "<h3>regression</h3>" in metrics  # unknown groups rendered generically


def test_header_timings_and_links(run_html):
    assert "20261202-124501-3fa2c1" in run_html and "2026-12-02T12:45:01+00:00" in run_html
    assert ">3fa2c1000000<" in run_html  # short config hash
    assert "smollm2-135m-instruct" in run_html and "n_chunks=42" in run_html
    assert '<th>generate_s</th><td class="num">55.0</td>' in run_html
    assert '<th>cache misses</th><td class="num">42</td>' in run_html
    assert 'href="config.yaml"' in run_html and 'href="metrics.json"' in run_html


def test_failures_section_lists_only_failing_questions(run_html):
    failures = _section(run_html, '<h2 id="failures">Failures', "<h2>Plots</h2>")
    assert '<h2 id="failures">Failures (3)</h2>' in failures
    assert "FAILING question about opening hours?" in failures
    assert "MISSED chunk about prices" in failures and "second MISSED chunk" in failures
    assert '<details class="fail" id="fail-q02">' in failures and "adiyan-office/hours.md" in failures  # folds open
    assert "KEYWORD-FAIL question" in failures  # hit but wrong answer still counts
    assert "PASSING question" not in failures and "PASSING chunk" not in failures
    assert "UNANSWERABLE" not in failures  # nulls are not failures
    # passing questions still appear in the full table
    assert "PASSING question about the price list?" in _section(run_html, "<h2>All questions</h2>", "<h2>Timings")


def test_user_text_is_escaped(run_html, reports):
    index = write_index(reports).read_text(encoding="utf-8").replace("<wbr>", "")  # break hints aside
    for html in (run_html, index):
        assert XSS not in html and "alert(1)</script>" not in html  # escaped (the index has one script: its own)
    assert f"Injected {XSS.replace('<', '&lt;').replace('>', '&gt;')} question" in run_html


def test_svg_count_and_prolog_stripped(run_html, reports):
    assert len(re.findall(r"<svg\b", run_html)) == 4  # kinds, recall against k, top-1 scores, RR per question
    index = write_index(reports).read_text(encoding="utf-8").replace("<wbr>", "")  # break hints aside
    assert len(re.findall(r"<svg\b", index)) == 1  # trend plot only with 2+ runs
    for html in (run_html, index):
        assert "<?xml" not in html and "<!DOCTYPE svg" not in html and "<metadata>" not in html


def test_index_without_trend_for_single_run(tmp_path):
    _write_run(tmp_path / "only", _metrics("only", "2026-12-01T09:00:00+00:00", 0.5, 0.5))
    assert "<svg" not in write_index(tmp_path).read_text(encoding="utf-8")


def test_no_external_references(run_html, reports):
    index = write_index(reports).read_text(encoding="utf-8").replace("<wbr>", "")  # break hints aside
    assert EXTERNAL_REF.search('<a href="https://x">') and EXTERNAL_REF.search("url( 'http://x')")  # regex sanity
    for html in (run_html, index):
        assert not EXTERNAL_REF.search(html), EXTERNAL_REF.search(html)


def test_index_rows_best_and_broken(reports):
    index = write_index(reports).read_text(encoding="utf-8").replace("<wbr>", "")  # break hints aside
    new, old = index.index(">20261202-124501-3fa2c1</a>"), index.index(">20261201-090000-aaaaaa</a>")
    assert new < old  # newest first
    assert 'href="20261202-124501-3fa2c1/report.html"' in index
    assert '<td class="num best">0.875</td>' in index and '<td class="num">0.75</td>' in index
    assert '<td class="num best">0.8</td>' in index and '<td class="num">0.71</td>' in index  # per column
    assert "regression<br>hit_rate@4_delta" in index  # union of columns
    old_row = index[old:index.index("</tr>", old)]
    assert '<td class="num"></td>' in old_row  # missing metric left blank
    skipped = index[index.index("Skipped run directories"):]
    assert "<code>broken-run</code>: JSONDecodeError" in skipped
    assert "notes" not in index


def test_output_is_byte_identical(reports):
    run = reports / "20261202-124501-3fa2c1"
    first = (write_run_report(run).read_bytes(), write_index(reports).read_bytes())
    second = (write_run_report(run).read_bytes(), write_index(reports).read_bytes())
    assert first == second
    # and across processes (fresh matplotlib state, no shared id counters)
    code = ("import sys; from pathlib import Path; from adiyan.report import write_run_report; from adiyan.report.index import write_index;"
            "write_run_report(Path(sys.argv[1])); write_index(Path(sys.argv[2]))")
    repo_root = Path(__file__).resolve().parents[1]  # works before `pip install -e .` too
    subprocess.run([sys.executable, "-c", code, str(run), str(reports)], check=True, cwd=repo_root)
    assert ((run / "report.html").read_bytes(), (reports / "index.html").read_bytes()) == first


def test_incidents_table_names_each_verdicts_basis(tmp_path):
    """A run that replayed the incidents shows them with their basis (issue 44.7): the incidents.json
    records below are as_dict() of real IncidentResults (a production-configuration one and a replica)."""
    from adiyan.eval.incidents import IncidentResult, as_dict

    d = tmp_path / "20261207-120000-abcdef"
    _write_run(d, _metrics("20261207-120000-abcdef", "2026-12-07T12:00:00+00:00", 0.9, 0.8))
    stale = IncidentResult(3, "stale fact", "", "break-even gap 0.23-4.10 d", "minilm", True, "", variants_held=7,
                           variants=7)
    gap = IncidentResult(5, "permission gap", "", "3/3 gap", "router", True, "", variants_held=3, variants=3,
                         basis="replica", basis_note="the Agent refuses agent.default_tier_fallback=false")
    (d / "incidents.json").write_text(json.dumps([as_dict(stale), as_dict(gap)]), encoding="utf-8")
    html = write_run_report(d).read_text(encoding="utf-8")
    section = html[html.index('id="incidents"'):html.index("<h2>Metrics</h2>")]
    row3 = section[section.index('id="incident-3"'):section.index('id="incident-5"')]
    row5 = section[section.index('id="incident-5"'):]
    assert "<td>holds</td>" in row3 and "production configuration" in row3 and "replica" not in row3
    assert "<td>demonstrated on a replica</td>" in row5 and "<td>holds</td>" not in row5
    assert "the Agent refuses" in row5
    # a run without incidents.json has no such section
    d2 = tmp_path / "20261207-120001-abcdef"
    _write_run(d2, _metrics("20261207-120001-abcdef", "2026-12-07T12:00:01+00:00", 0.9, 0.8))
    assert 'id="incidents"' not in write_run_report(d2).read_text(encoding="utf-8")
