"""A sweep's pages: ``index.html`` (points, best per metric, frontier, metric-versus-parameter plots,
paired tests) and each executed notebook as HTML, all self-contained (inline CSS and SVG, no
scripts), rendered with the run reports' helpers (:mod:`adiyan.report`: CSS, number format,
SVG serialisation, the jinja environment). Directions ("lower is better", best, the Pareto
front) come from the metric registry through :class:`adiyan.sweeps.gather.Gathered`.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import nbformat
from markupsafe import Markup, escape

from .. import report
from .. import metrics as M
from .gather import Gathered, best_points, is_num, pareto_front
from .spec import SweepSpec, canon

NB_CSS = """
.jp-Cell{margin:.6em 0}.jp-InputArea-editor,.highlight{background:#f7f7f7;padding:.3em .5em;border-radius:3px;overflow-x:auto}
.jp-InputPrompt,.jp-OutputPrompt{display:none}.jp-OutputArea-output pre{white-space:pre-wrap;margin:.2em 0}
.jp-RenderedText[data-mime-type="application/vnd.jupyter.stderr"] pre{background:#fff4f4}
.jp-OutputArea-output img{max-width:100%}table.dataframe{font-size:12px}
"""
_RC = {"svg.hashsalt": "adiyan-sweep", "text.parse_math": False, "font.size": 8}


def html_exporter():
    """nbconvert's basic HTML exporter (body only, no CDN scripts); make one and reuse it."""
    from nbconvert import HTMLExporter  # heavy: only the runner converts executed notebooks

    return HTMLExporter(template_name="basic")


def notebook_html(nb_path: str | os.PathLike, html_path: str | os.PathLike, title: str = "", _exporter=None) -> Path:
    """The executed notebook as one self-contained HTML page (nbconvert's body, no CDN scripts)."""
    nb = nbformat.read(str(nb_path), as_version=4)
    body, _ = (_exporter or html_exporter()).from_notebook_node(nb)
    page = (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
            f"<style>{report.CSS}{NB_CSS}</style></head><body>\n<p><a href=\"../../index.html\">sweep index</a> · "
            f'<a href="notebook.ipynb">notebook.ipynb</a> · <a href="config.yaml">config.yaml</a> · '
            f'<a href="params.json">params.json</a></p>\n{body}\n</body></html>\n')
    out = Path(html_path)
    out.write_text(page, encoding="utf-8")
    return out


def _direction_note(direction: str) -> str:
    return {M.LOWER: "lower is better", M.HIGHER: "higher is better"}.get(direction, "no better direction")


def _plot_metric_vs_param(ok, axis: str, metrics: list[str], others: list[str], g: Gathered) -> Markup:
    import matplotlib.pyplot as plt  # heavy: only pages with plots (adiyan.report selected Agg)

    vals = list(dict.fromkeys(ok[axis].tolist()))
    numeric = all(is_num(v) for v in vals)
    order = sorted(vals, key=lambda v: (v is None, v if numeric else str(v)))
    pos = {canon(v): i for i, v in enumerate(order)}
    n = len(metrics)
    cols = min(3, n)
    rows_n = math.ceil(n / cols)
    with plt.rc_context(_RC):
        fig, axes = plt.subplots(rows_n, cols, figsize=(3.6 * cols, 2.6 * rows_n), squeeze=False)
        groups = list(ok.groupby(others, dropna=False, sort=True)) if others else [((), ok)]
        for i, metric in enumerate(metrics):
            ax = axes[i // cols][i % cols]
            for key, grp in groups:
                grp = grp[grp[metric].map(is_num)] if metric in grp else grp.iloc[0:0]
                if grp.empty:
                    continue
                grp = grp.assign(_x=grp[axis].map(lambda v: v if numeric else pos[canon(v)])).sort_values("_x")
                lab = ", ".join(f"{o.split('.')[-1]}={v}" for o, v in
                                zip(others, key if isinstance(key, tuple) else (key,))) if others else None
                ax.plot(grp["_x"], grp[metric].astype(float), marker="o", label=lab)
            if numeric:
                xs = [float(v) for v in vals]
                if min(xs) > 0 and max(xs) / min(xs) >= 16:
                    ax.set_xscale("log", base=2)
                    ax.set_xticks(xs, [str(v) for v in vals])
            else:
                ax.set_xticks(range(len(order)), [str(v) for v in order], rotation=20, ha="right")
            ax.set_title(metric + (" (lower is better)" if g.direction(metric) == M.LOWER else ""), fontsize=8)
            ax.set_xlabel(axis.split(".")[-1])
            if others and i == 0 and len(groups) > 1:
                ax.legend(fontsize=6)
        for j in range(n, rows_n * cols):
            axes[j // cols][j % cols].axis("off")
        fig.tight_layout()
        return report._svg(fig, _RC)


def _plot_frontier(ok, x: str, y: str, x_dir: str, y_dir: str, baseline_id: str | None):
    """The points on (x, y) and, when both axes have a direction, the Pareto front."""
    import matplotlib.pyplot as plt  # heavy: only pages with plots (adiyan.report selected Agg)

    ok = ok[ok[x].map(is_num) & ok[y].map(is_num)]
    xs, ys = ok[x].astype(float).tolist(), ok[y].astype(float).tolist()
    directed = M.NEUTRAL not in (x_dir, y_dir)
    front = pareto_front(xs, ys, x_lower=x_dir == M.LOWER, y_lower=y_dir == M.LOWER) if directed else []
    with plt.rc_context(_RC):
        fig, ax = plt.subplots(figsize=(6.5, 4.0))
        ax.scatter(xs, ys, color="#9e9e9e", zorder=2, label="point")
        if front:
            ax.plot([xs[i] for i in front], [ys[i] for i in front], color="#d95f02", marker="o", zorder=3,
                    label="Pareto front")
        for i, (_, r) in enumerate(ok.iterrows()):
            ax.annotate(str(r["label"])[:40], (xs[i], ys[i]), fontsize=6, xytext=(3, 3), textcoords="offset points")
            if r["point_id"] == baseline_id:
                ax.scatter([xs[i]], [ys[i]], s=120, facecolors="none", edgecolors="#1b9e77", zorder=4,
                           label="baseline")
        ax.set_xlabel(f"{x} ({_direction_note(x_dir)})")
        ax.set_ylabel(f"{y} ({_direction_note(y_dir)})")
        ax.legend(fontsize=7)
        fig.tight_layout()
        svg = report._svg(fig, _RC)
    return svg, [ok.iloc[i]["point_id"] for i in front], directed


INDEX_TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Sweep {{ spec.name }}</title><style>{{ css }}</style></head><body>
<h1>Sweep <code>{{ spec.name }}</code></h1>
<p>{{ spec.description }}</p>
<table>
<tr><th>notebook</th><td><code>{{ notebook }}</code></td></tr>
<tr><th>spec</th><td><code>{{ spec.source }}</code></td></tr>
<tr><th>grid</th><td><code>{{ grid }}</code></td></tr>
<tr><th>fixed overrides</th><td><code>{{ overrides }}</code></td></tr>
<tr><th>points</th><td>{{ counts }}</td></tr>
<tr><th>this invocation</th><td>engine {{ engine }}, jobs {{ jobs }}; ran {{ session.ran|length }}, reused {{ session.reused|length }} finished point(s), failed {{ session.failed|length }}; wall {{ fmt(session.wall_s) }} s</td></tr>
<tr><th>files</th><td><a href="runs.parquet">runs.parquet</a> · <a href="per_question.parquet">per_question.parquet</a> · <a href="significance.json">significance.json</a> · <a href="sweep.json">sweep.json</a></td></tr>
</table>

<h2>Points</h2>
<table><tr><th>point</th>{% for c in param_cols %}<th>{{ c }}</th>{% endfor %}<th>status</th>{% for m in metric_cols %}<th>{{ m }}</th>{% endfor %}<th>wall s</th><th>files</th></tr>
{% for r in rows %}<tr><td><code>{{ r.point_id }}</code>{% if r.point_id == baseline %} <b>(baseline)</b>{% endif %}</td>{% for c in param_cols %}<td>{{ fmt(r[c]) }}</td>{% endfor %}<td>{{ r.status }}</td>{% for m in metric_cols %}{% if unreliable(r, m) %}<td class="num"><span class="unreliable">{{ fmt(r.get(m)) }}</span> <span class="badge">unreliable judge</span></td>{% else %}<td class="num{% if m in best and r.point_id in best[m].crowned and best[m].points|length < n_ok %} best{% endif %}">{{ fmt(r.get(m)) }}</td>{% endif %}{% endfor %}<td class="num">{{ fmt(r.get("point_wall_s")) }}</td><td><a href="{{ r.html }}">html</a> · <a href="{{ r.notebook }}">ipynb</a> · <a href="{{ r.config }}">config</a></td></tr>
{% endfor %}</table>

<h2>Scored like a run: metrics, the regression cases{% if incident_rows %}, incident 3{% endif %}</h2>
{% if unscored %}<p class="worse" id="unscored"><b>Scored like nothing:</b> {{ unscored|join("; ") }}. Each point over an evalset should record its metrics and the regression cases (adiyan/experiments/scoring.py).</p>{% endif %}
{% if scored_rows %}<p>Each point scored as <code>invoke eval</code> scores a run (adiyan/experiments/scoring.py): RAGAS's non-LLM metrics (ID-based context precision / recall over the point's top-k sources; string similarity, ROUGE-L and exact match over its answers, by the configured LLM through the answer cache), the LLM-judged ones by <code>eval.judge</code> after its calibration (struck when the judge is not calibrated reliable), and every regression case of {{ cases_file }}.{% if answer_note %} {{ answer_note }}{% endif %}</p>
<table><tr><th>point</th><th>answered / questions</th><th>judge</th>{% for m in ragas_cols %}<th>{{ m }}</th>{% endfor %}</tr>
{% for r, sc in scored_rows %}<tr><td>{{ r.label }}</td><td class="num">{{ sc.answered_questions }} / {{ sc.questions }}</td><td>{% if sc.judge %}{{ sc.judge }}{% if sc.judge_calibration %}, agreement {{ fmt(sc.judge_calibration.agreement) }} on {{ sc.judge_calibration.n }} pairs: {% if sc.judge_calibration.reliable %}reliable{% else %}<b>unreliable</b>{% endif %}{% endif %}{% else %}none{% if sc.not_applicable %} (n/a){% endif %}{% endif %}</td>{% for m in ragas_cols %}{% if judged_unreliable(r, m) %}<td class="num"><span class="unreliable">{{ fmt(r.get(m)) }}</span> <span class="badge">unreliable judge</span></td>{% else %}<td class="num">{{ fmt(r.get(m)) }}</td>{% endif %}{% endfor %}</tr>
{% endfor %}</table>
{% for note in na_notes %}<p>Not applicable: {{ note }}.</p>{% endfor %}
<h3>Regression cases per point</h3>
<table class="grid"><tr><th>case</th><th>metric</th>{% for r, sc in scored_rows %}<th>{{ r.label }}</th>{% endfor %}</tr>
{% for case in cases %}<tr><td><code>{{ case.id }}</code></td><td><code>{{ case.metric }}</code></td>{% for r, sc in scored_rows %}{% set c = case_grid[(case.id, r.point_id)] %}<td style="background:{{ colours[c.status] }}" title="{{ c.reason }}">{% if c.status == "pass" %}pass{% elif c.status == "fail" %}<b>fail</b>{% elif c.status == "not_checked" %}not checked{% elif c.status == "n/a" %}does not apply{% else %}—{% endif %}{% if c.value is not none and c.status not in ("not_checked", "n/a") %} ({{ fmt(c.value) }}){% endif %}{% if c.reason %}<br><small>{{ c.reason }}</small>{% endif %}</td>{% endfor %}</tr>
{% endfor %}</table>
{% if incident_rows %}<h3 id="incident-3">Incident 3 (stale fact) at each point</h3>
<p>Replayed through the real memory with the point's <code>memory.*</code> settings (the half-life decides it). Break-even gap: how many days newer the correction must be to come first (worst variant); margin: the replay's 29-day gap minus that, days to spare (&lt; 0: the stale statement wins). Then how many variants put the correction first when it is that many days newer.</p>
<table><tr><th>point</th><th>verdict</th><th>variants</th><th>break-even gap, days (max)</th><th>margin, days (min)</th>{% for gap in incident_gaps %}<th>{{ gap }} d</th>{% endfor %}</tr>
{% for r, inc in incident_rows %}<tr><td>{{ r.label }}</td><td>{% if inc.status == "FAILS" %}<b class="worse">FAILS</b>{% else %}{{ inc.status }}{% endif %}</td><td>{{ inc.variants_text }}</td><td class="num">{{ fmt(inc.metrics.break_even_gap_max_days) }}</td><td class="num">{{ fmt(inc.metrics.margin_days_min) }}</td>{% for gap in incident_gaps %}<td class="num">{{ (inc.details.gap_grid_days or {}).get(gap, "—") }}</td>{% endfor %}</tr>
{% endfor %}</table>{% endif %}
{% else %}<p>No point of this sweep recorded a score (no regression cases): every experiment of the project scores its points (adiyan/experiments/scoring.py); a notebook of your own should too.</p>{% endif %}

<h2>Best point per metric</h2>
<p>Directions are those of the metric registry (adiyan.metrics); counts and sizes have none. A point is called best, and highlighted, only when its paired test against the baseline is significant after the Holm adjustment (the tests below); otherwise the highest value is shown in grey with "no difference shown". Timings are measured once per point and metrics without per-question scores cannot be tested: neither is ranked. A metric an LLM judged counts only from points whose judge is calibrated reliable: an unreliable judge's values are struck, never best, left out of the plots and of the paired tests.</p>
<table><tr><th>metric</th><th>direction</th><th>highest value</th><th>point</th><th>verdict</th></tr>
{% for m, b in best_rows %}<tr{% if b.verdict and b.verdict != "significant" %} class="grey"{% endif %}><td>{{ m }}</td><td>{{ b.direction }}</td><td class="num">{{ fmt(b.value) }}</td><td>{{ b.label }}</td><td>{% if b.verdict == "significant" %}<b>best</b>: {% endif %}{{ b.note }}</td></tr>
{% endfor %}</table>

{% if frontier %}<h2>Frontier: {{ frontier.y }} versus {{ frontier.x }}</h2>
{% if frontier.directed %}<p>Pareto-optimal points (no other point is better on both): {{ frontier.front|join(", ") }}</p>
{% else %}<p>No Pareto front: {{ frontier.neutral|join(" and ") }} has no better direction in the metric registry.</p>
{% endif %}{{ frontier.svg }}
{% endif %}
<h2>Metrics versus parameters</h2>
{% for axis, svg in param_plots %}<h3>{{ axis }}</h3>
{{ svg }}
{% else %}<p>Only one point: nothing varies.</p>{% endfor %}

<h2>Paired tests against the baseline</h2>
<p>Baseline: <b>{{ sig.baseline_label or "—" }}</b> (<code>{{ sig.baseline or "—" }}</code>). {{ sig.test }}. Per-question scores are in per_question.parquet.</p>
{% for metric, rows_ in sig.metrics.items() %}<h3>{{ metric }}</h3>
<table><tr><th>point</th><th>n</th><th>baseline</th><th>point</th><th>delta</th><th>win / tie / loss</th><th>p</th><th>p (Holm)</th><th>verdict</th></tr>
{% for pid, s in rows_.items() %}<tr><td>{{ s.label }}</td><td class="num">{{ s.n }}</td><td class="num">{{ fmt(s.baseline_mean) }}</td><td class="num">{{ fmt(s.mean) }}</td><td class="num">{{ "%+.4f"|format(s.delta) }}</td><td>{{ s.win }} / {{ s.tie }} / {{ s.loss }}</td><td class="num">{{ fmt(s.p_value) }}</td><td class="num">{{ fmt(s.p_holm) }}</td><td>{% if s.significant %}<b>significant</b>{% else %}no difference shown{% endif %}</td></tr>
{% endfor %}</table>
{% else %}<p>No per-question scores to test (or a single point).</p>{% endfor %}
{% for metric, ex in (sig.excluded or {}).items() %}<p><b>{{ metric }}</b> not tested against {{ ex|map(attribute="point")|join(", ") }}: {{ ex[0].why }}.</p>
{% endfor %}
{% if failures %}<h2>Failed points</h2>
<ul>{% for pid, err in failures %}<li><code>{{ pid }}</code>: <a href="points/{{ pid }}/notebook.html">notebook</a><pre>{{ err }}</pre></li>{% endfor %}</ul>
{% endif %}</body></html>
"""


COLOURS = {"pass": "#d9f2d9", "fail": "#f8c8c8", "not_checked": "#eeeeee", "n/a": "#f6f6f6", "missing": "#ffffff"}
_RAGAS_PREFIXES = ("ragas.", "ragas_llm.", "answer.", "claims.")


def _scored_view(g: Gathered, rows: list[dict], spec: SweepSpec) -> dict:
    """What the "scored like a run" section shows: per point its RAGAS columns, and the
    regression grid (rows: cases, columns: points; pass / fail / not checked with the reason)."""
    scored_rows = [(r, g.scored[r["point_id"]]) for r in rows if r["point_id"] in g.scored]
    ragas_cols = [c for c in g.metric_cols if c.startswith(_RAGAS_PREFIXES)
                  and not c.endswith((".n", ".failed", "judge_agreement_ci_low", "judge_agreement_ci_high",
                                      "judge_calibration_pairs"))]
    cases, grid = {}, {}
    for r, sc in scored_rows:
        for case in sc.get("regression") or []:
            cases.setdefault(case["id"], case)
            grid[(case["id"], r["point_id"])] = case
    missing = {"status": "missing", "value": None, "reason": "not recorded for this point"}
    for cid in cases:
        for r, _ in scored_rows:
            grid.setdefault((cid, r["point_id"]), missing)
    ns = {(sc.get("answered_questions"), sc.get("questions")) for _, sc in scored_rows}
    answer_note = ""
    if spec.answer_questions is not None:
        answer_note = (f"Answers for the string metrics: a seeded sample of n = {spec.answer_questions} questions "
                       "per point (the same questions at every point; answer_questions in the spec).")
    elif ns and all(a == 0 for a, _ in ns):
        answer_note = "No answers at these points (eval.generate off or no reference answers): no string metrics."
    na_notes = list(dict.fromkeys(sc["not_applicable"] for _, sc in scored_rows
                                  if isinstance(sc.get("not_applicable"), str)))
    incident_rows = [(r, sc["incident"]) for r, sc in scored_rows if sc.get("incident")]
    gaps = list(dict.fromkeys(k for _, inc in incident_rows for k in (inc.get("details") or {}).get("gap_grid_days") or {}))
    return {"unscored": g.unscored(), "incident_rows": incident_rows, "incident_gaps": gaps, "scored_rows": scored_rows, "ragas_cols": ragas_cols, "cases": list(cases.values()), "case_grid": grid,
            "judged_unreliable": lambda r, m: g.unreliable(r, m),  # struck even when the judge gave no value
            "colours": COLOURS, "answer_note": answer_note, "na_notes": na_notes,
            "cases_file": spec.regression_cases or "evalsets/regression.yaml"}


def write_index(spec: SweepSpec, g: Gathered, sig: dict, out: Path, *, engine: str, jobs: int,
                session: dict) -> Path:
    """``out/index.html`` for the gathered sweep."""
    runs = g.runs
    ok = runs[runs["status"] == "ok"] if "status" in runs else runs.iloc[0:0]
    shown_metrics = [m for m in (spec.metrics or g.metric_cols) if m in runs.columns]
    numeric_metrics = [m for m in shown_metrics if ok[m].map(is_num).any()] if not ok.empty else []
    best = best_points(g, numeric_metrics, sig)
    # plots and the frontier see only values a reliable judge gave (or no judge at all)
    ok = ok.copy()
    for m in numeric_metrics:
        if g.judged(m):
            ok[m] = g.reliable_values(ok, m)
    numeric_metrics = [m for m in numeric_metrics if ok[m].map(is_num).any()]
    best_rows = []
    for m, b in best.items():
        tie = len(b["points"]) > 1
        best_rows.append((m, {"direction": _direction_note(b["direction"]), "value": b["value"],
                              "label": "all points (tie)" if tie and len(b["points"]) == b["n_ok"] else
                              "; ".join(b["labels"]) + (" (tie)" if tie else ""),
                              "verdict": b.get("verdict"), "note": b.get("note", "")}))
    varied = [c for c in g.param_cols if c in ok and ok[c].map(canon).nunique() > 1]
    plot_metrics = numeric_metrics[:12]
    param_plots = []
    for axis in varied:
        others = [c for c in varied if c != axis]
        if plot_metrics:
            param_plots.append((axis, _plot_metric_vs_param(ok, axis, plot_metrics, others, g)))
    frontier = None
    if spec.frontier and len(ok) >= 1:
        x, y = spec.frontier.get("x"), spec.frontier.get("y")
        if x in ok and y in ok:
            x_dir, y_dir = g.direction(x), g.direction(y)
            svg, front, directed = _plot_frontier(ok, x, y, x_dir, y_dir, sig.get("baseline"))
            labels = [ok.loc[ok["point_id"] == pid, "label"].iloc[0] for pid in front]
            frontier = {"x": x, "y": y, "svg": svg, "front": labels, "directed": directed,
                        "neutral": [a for a, d in ((x, x_dir), (y, y_dir)) if d == M.NEUTRAL]}
    counts = runs["status"].value_counts().to_dict() if "status" in runs else {}
    rows = runs.astype(object).where(runs.notna(), None).to_dict("records")
    failures = [(r["point_id"], r.get("error") or "") for r in rows if r.get("status") == "failed"]
    scored = _scored_view(g, rows, spec)
    html = report._env.from_string(INDEX_TEMPLATE).render(**scored,
        spec=spec, notebook=str(spec.notebook), grid=canon(spec.grid), overrides=canon(spec.overrides),
        counts=", ".join(f"{v} {k}" for k, v in counts.items()), engine=engine, jobs=jobs, session=session,
        rows=rows, param_cols=g.param_cols, metric_cols=shown_metrics, best=best, best_rows=best_rows,
        unreliable=lambda r, m: r.get(m) is not None and g.unreliable(r, m),
        param_plots=param_plots, frontier=frontier, n_ok=len(ok), sig=sig, baseline=sig.get("baseline"),
        failures=failures)
    p = out / "index.html"
    p.write_text(html, encoding="utf-8")
    return p
