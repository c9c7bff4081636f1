"""Parameter sweeps: one parameterised notebook, executed once per point of a grid.

``invoke sweep NAME`` (``python -m adiyan.sweeps NAME``) reads ``sweeps/NAME.yaml``::

    notebook: notebooks/retrieval.ipynb
    description: top-k on the authored evalset, retrieval only
    engine: persistent          # or papermill (a fresh kernel per point)
    jobs: 1                     # points executed at once (one kernel each)
    parameters: {}              # fixed notebook parameters
    overrides:                  # fixed settings overrides (every point)
      eval.generate: false
    grid:                       # a mapping (the product of its lists) or a list of mappings
      retrieval.kb_top_k: [1, 2, 4, 8]
    baseline: {retrieval.kb_top_k: 4}   # the point the others are tested against
    frontier: {x: context_tokens, y: hit_rate}

A grid key with a dot (``retrieval.kb_top_k``) is a settings override, merged into the
notebook's ``overrides`` parameter; a key without one (``dataset``) is a notebook parameter.
Each point gets ``reports/sweeps/NAME/points/<point-id>/``: the executed notebook
(``notebook.ipynb``) and its HTML, ``params.json``, ``config.yaml`` (the resolved settings),
``point.json`` (metrics and per-question scores, written by the notebook through
:func:`adiyan.experiments.common.record`) and, written last, ``COMPLETE.json``. A point is
finished when that marker is there and its fingerprint (notebook code, parameters) matches, so
a sweep killed midway and started again runs only the rest. Afterwards ``runs.parquet`` (one
row per point: parameters and metrics), ``per_question.parquet`` (point, question, metric,
value) and ``index.html`` (metric-versus-parameter plots, a quality-versus-cost frontier, the
best point per metric, paired randomization tests against the baseline) are written beside
them. Which direction of a metric is better comes from the metric registry
(:mod:`adiyan.metrics`); a metric it does not declare stops the report, naming it.

Paying only for what changed: embeddings are cached by content hash, parsed documents by (file
bytes, parser settings, parser code), and each evalset's index lives in a data directory of its
own per (evalset, embedder, chunking, store knobs) (:func:`adiyan.eval.harness.open_index`), so
a sweep over top-k, ef or half-life embeds and indexes nothing twice.

Every point over an evalset is scored like a run (:mod:`adiyan.experiments.scoring`: RAGAS,
the judge, the regression cases; ``answer_questions: N`` in a spec answers a seeded sample) and
the page shows RAGAS per point and the regression cases as a grid. ``--executor ray`` runs the
points as Ray tasks (:mod:`~adiyan.sweeps.ray_engine`), with the same markers and resume.

Modules: :mod:`~adiyan.sweeps.spec` (spec, grid, point ids, fingerprints, markers),
:mod:`~adiyan.sweeps.engines` (kernels), :mod:`~adiyan.sweeps.ray_engine` (points as Ray tasks), :mod:`~adiyan.sweeps.run` (execution, resume, failures,
outputs), :mod:`~adiyan.sweeps.gather` (the table, paired tests, Pareto, best),
:mod:`~adiyan.sweeps.html` (pages), :mod:`~adiyan.sweeps.cli`. The experiments the notebooks
call are in :mod:`adiyan.experiments`, a layer below. (``gather``, the function, is not
re-exported here: the name is the submodule's.)
"""

from .gather import Gathered, best_points, pareto_front, read_point, significance
from .run import SweepResult, run_sweep, write_outputs
from .spec import (FAILED, MARKER, Point, SweepError, SweepSpec, baseline_point, default_out_dir, estimate, expand,
                   expand_grid, is_complete, load_spec, mark_complete, point_fingerprint, point_id)

__all__ = ["FAILED", "MARKER", "Gathered", "Point", "SweepError", "SweepResult", "SweepSpec", "baseline_point",
           "best_points", "default_out_dir", "estimate", "expand", "expand_grid", "is_complete", "load_spec", "mark_complete",
           "pareto_front", "point_fingerprint", "point_id", "read_point", "run_sweep", "significance",
           "write_outputs"]
