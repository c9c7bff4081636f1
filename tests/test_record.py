"""The run record every job writes through (adiyan/eval/record.py): the folder's files, their
order and the envelope at the head of metrics.json."""

from __future__ import annotations

import json
import re

from adiyan.config import load_settings
from adiyan.eval.record import RunRecord, new_run_id
from tests.test_report import QUESTIONS, _metrics


def _settings(tmp_path):
    return load_settings(None, {"paths.reports_dir": str(tmp_path / "reports")}, environ={})


def test_a_record_writes_the_run_and_the_index(tmp_path):
    s = _settings(tmp_path)
    rec = RunRecord.for_settings(s, "20261205-120000-abcdef")
    assert (rec.dir / "config.yaml").read_text(encoding="utf-8") == s.to_yaml()  # at the start, before any result
    head = rec.envelope(s)
    assert list(head) == ["run_id", "created_at", "adiyan_version", "python", "config_hash", "config"]
    assert head["run_id"] == "20261205-120000-abcdef" and head["config_hash"] == s.config_hash()
    metrics = {**_metrics("x", "2026-12-05T12:00:00+00:00", 0.75, 0.5), **head}
    out = rec.finish(metrics, QUESTIONS, parquet=True, section=lambda d: (d / "extra.txt").write_text("section"))
    assert out == rec.dir
    assert sorted(p.name for p in rec.dir.iterdir()) == ["config.yaml", "extra.txt", "metrics.json",
                                                        "per_question.parquet", "questions.jsonl", "report.html"]
    assert json.loads((rec.dir / "metrics.json").read_text())["run_id"] == "20261205-120000-abcdef"
    rows = [json.loads(x) for x in (rec.dir / "questions.jsonl").read_text().splitlines()]
    assert rows == QUESTIONS
    assert "Reciprocal rank per question" in (rec.dir / "report.html").read_text()  # per-question plots
    assert "20261205-120000-abcdef" in (tmp_path / "reports" / "index.html").read_text()


def test_rows_written_after_the_report_leave_its_per_question_plots_out(tmp_path):
    """LoCoMo's rows are not question rows: its page is written before questions.jsonl."""
    rec = RunRecord.start(tmp_path / "reports", "r1")  # no settings: no config.yaml (the LlamaIndex adapter)
    head = rec.envelope(config_hash="c" * 64, config={"llamaindex": {"k": 4}})
    assert head["config"] == {"llamaindex": {"k": 4}} and "python" in head
    rec.finish({**_metrics("r1", "2026-12-05T12:00:00+00:00", 0.75, 0.5), **head}, QUESTIONS, rows_in_report=False)
    assert not (rec.dir / "config.yaml").exists() and (rec.dir / "questions.jsonl").is_file()
    assert not (rec.dir / "per_question.parquet").exists()
    assert "Reciprocal rank per question" not in (rec.dir / "report.html").read_text()


def test_run_ids():
    s = load_settings(None, {}, environ={})
    assert re.fullmatch(rf"\d{{8}}-\d{{6}}-{s.config_hash()[:6]}", new_run_id(s))
    assert re.fullmatch(r"\d{8}-\d{6}-llamaindex", new_run_id(suffix="llamaindex"))
