"""The record of a run: ``reports/<run-id>/`` and the runs index, written one way by every job.

``invoke eval`` on a question set (:mod:`.runner`), a conversation set (:mod:`.conversations`),
LoCoMo (:mod:`.locomo.run`) and the LlamaIndex adapter (:mod:`adiyan.integrations.llamaindex`)
each open a :class:`RunRecord` and write through it (``testset validate``,
:mod:`adiyan.testset.validate`, opens one for its folder too: config.yaml and the envelope, with its
own validate.json / validate.md instead of a run report):

- ``config.yaml``: the settings, written when the run starts (a run that dies is still explained);
- ``metrics.json``: the envelope (:meth:`RunRecord.envelope`: run id, creation time, adiyan and
  Python versions, config hash, config) followed by what the job measured;
- ``questions.jsonl``: one row per question (or turn), and ``per_question.parquet``: the same rows
  as flat columns (:func:`adiyan.eval.arrow.write_per_question`) for jobs on question sets;
- ``report.html`` (:func:`adiyan.report.write_run_report`, with a job's own section when it has
  one) and ``reports/index.html`` (every run);
- a job's other files (``incidents.json``, ``judge.json``, agent traces) beside them, in :attr:`dir`.

The report, the index, ``invoke compare`` and the browser tests read these files by name.
"""

from __future__ import annotations

import json
import platform
import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable

from .. import __version__
from ..report import write_run_report
from ..report.index import write_index
from .arrow import write_per_question


def new_run_id(settings=None, *, suffix: str | None = None) -> str:
    """``YYYYmmdd-HHMMSS-<first 6 of the config hash>`` (UTC), or ``-<suffix>`` without settings."""
    return datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-") + (
        suffix if suffix is not None else settings.config_hash()[:6])


def _dumps(obj, **kw) -> str:
    return json.dumps(obj, ensure_ascii=False, default=str, **kw)


@dataclass
class RunRecord:
    """One run's folder under ``reports_dir`` (see the module docstring for what it holds)."""

    run_id: str
    dir: Path
    reports_dir: Path

    @classmethod
    def start(cls, reports_dir: str | Path, run_id: str, *, settings=None) -> "RunRecord":
        """Create ``reports_dir/run_id/`` and, given the run's ``settings``, its ``config.yaml``."""
        reports_dir = Path(reports_dir)
        run_dir = reports_dir / run_id
        run_dir.mkdir(parents=True, exist_ok=True)
        if settings is not None:
            (run_dir / "config.yaml").write_text(settings.to_yaml(), encoding="utf-8")
        return cls(run_id, run_dir, reports_dir)

    @classmethod
    def for_settings(cls, settings, run_id: str | None = None) -> "RunRecord":
        """The record of a run of ``settings``: in ``paths.reports_dir``, a new run id unless given."""
        return cls.start(settings.paths.reports_dir, run_id or new_run_id(settings), settings=settings)

    def discard(self) -> None:
        """Remove the folder of a run that failed on a user error before producing anything (it holds
        config.yaml at most), so a typo leaves no stray run behind."""
        if self.dir.is_dir() and {p.name for p in self.dir.iterdir()} <= {"config.yaml"}:
            shutil.rmtree(self.dir, ignore_errors=True)

    def envelope(self, settings=None, *, config_hash: str | None = None, config: dict | None = None) -> dict:
        """The head of metrics.json: run id, creation time (UTC), adiyan and Python versions, the
        config hash and config (of ``settings``, or as given by a job without settings)."""
        return {"run_id": self.run_id, "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "adiyan_version": __version__, "python": platform.python_version(),
                "config_hash": settings.config_hash() if settings is not None else config_hash,
                "config": settings.to_dict() if settings is not None else config}

    def write_questions(self, rows: Iterable[dict], *, parquet: bool = False) -> None:
        """questions.jsonl (one JSON object per row) and, with ``parquet``, per_question.parquet."""
        rows = list(rows)
        with open(self.dir / "questions.jsonl", "w", encoding="utf-8") as f:
            for r in rows:
                f.write(_dumps(r) + "\n")
        if parquet:  # the same rows, flat columns (pandas / datasets)
            write_per_question(rows, self.dir / "per_question.parquet")

    def finish(self, metrics: dict, rows: Iterable[dict] | None = None, *, parquet: bool = False,
               section: Callable[[Path], None] | None = None, rows_in_report: bool = True) -> Path:
        """Write the run: questions (and parquet), metrics.json, report.html (then ``section(dir)``
        adds the job's own part), the runs index. ``rows_in_report=False`` writes the questions
        after the report, for rows whose per-question plots do not apply (LoCoMo). The run folder."""
        if rows is not None and rows_in_report:
            self.write_questions(rows, parquet=parquet)
        (self.dir / "metrics.json").write_text(_dumps(metrics, indent=2), encoding="utf-8")
        write_run_report(self.dir)
        if rows is not None and not rows_in_report:
            self.write_questions(rows, parquet=parquet)
        if section is not None:
            section(self.dir)
        write_index(self.reports_dir)
        return self.dir
