"""The meta-evaluation's page (``reports/meta_eval/index.html``, offline: inline CSS and SVG) and its
plain-text summary: metric x aspect, Pearson / Spearman x 100 with 95% intervals, beside the
inter-annotator agreement, RAGChecker's recomputed row and the published references."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import matplotlib.pyplot as plt
from jinja2 import Environment
from markupsafe import Markup

from ..report import _RC, CSS, _svg
from .hallucination import hallucination_lines
from .meta_eval_method import ASPECTS
from .perturbations import battery_lines

KIND_COLORS = {"reference": "#d95f02", "offline": "#1b9e77", "embedding": "#7570b3", "diagnostic": "#9e9e9e",
               "judged": "#e7298a", "checker": "#1f78b4"}


def _f(v) -> str:
    return "—" if v is None else f"{v:.2f}"


def cell_text(c: Mapping | None) -> str:
    """``P 49.66 [39.05, 57.97] · S 46.95 [37.40, 55.25]``, or "—"."""
    if not c or c.get("pearson") is None:
        return "—"
    p, s = c.get("pearson_ci") or [None, None], c.get("spearman_ci") or [None, None]
    return f"P {_f(c['pearson'])} [{_f(p[0])}, {_f(p[1])}] · S {_f(c['spearman'])} [{_f(s[0])}, {_f(s[1])}]"


def table_rows(result: Mapping) -> list[dict]:
    """The page's rows in order: human vs human, RAGChecker, then every metric."""
    human = {"metric": "human vs human", "kind": "reference", "status": "measured",
             "note": "annotator 1 against annotator 2", "aspects": {a: result["human_agreement"][a] for a in ASPECTS}}
    return [human, result["ragchecker"], *result["rows"]]


def summary_lines(result: Mapping) -> list[str]:
    check = result["ragchecker"]["check"]
    lines = [f"meta-eval on {result['dataset']['name']} ({result['dataset']['n_instances']} instances, "
             f"{result['dataset']['n_labels']} labels); Pearson / Spearman x 100 [95% bootstrap, "
             f"{result['n_bootstrap']} resamples over instances, seed {result['seed']}]",
             f"RAGChecker's row reproduced within ±{check['tolerance']}: {'yes' if check['passed'] else 'NO'} "
             + "; ".join(f"{a} {v['measured'][0]} / {v['measured'][1]} (published {v['published'][0]} / "
                         f"{v['published'][1]})" for a, v in check["aspects"].items())]
    width = max(len(r["metric"]) for r in table_rows(result))
    lines.append(f"  {'metric':<{width}}  " + "  ".join(f"{a:<48}" for a in ASPECTS))
    for r in table_rows(result):
        if r["status"] not in ("measured",) or r.get("struck"):
            why = r.get("why") or next((c.get("why") for c in r["aspects"].values() if c.get("why")), "")
            mark = f"[WIRING ONLY] {cell_text(r['aspects'].get('overall'))} overall; " if r.get("struck") else ""
            lines.append(f"  {r['metric']:<{width}}  {mark}{r['status'].replace('_', ' ')}: {why}")
            continue
        lines.append(f"  {r['metric']:<{width}}  " + "  ".join(f"{cell_text(r['aspects'][a]):<48}" for a in ASPECTS))
    if result.get("hallucination"):
        lines += hallucination_lines(result["hallucination"])
    if result.get("perturbations"):
        lines += battery_lines(result["perturbations"])
    judge = result.get("judge")
    if judge:
        for name, cal in judge["calibration"].items():
            lines.append(f"  judge {judge['id']} on {name.replace('_', ' ')}: agreement {_f(cal['agreement'])} "
                         f"[95% CI {_f(cal['ci95_low'])}-{_f(cal['ci95_high'])}] on {cal['n']} pairs")
        lines.append(f"  judge reliable: {judge['reliable']} ({judge['rule']})")
    return lines


def plot(result: Mapping) -> Markup:
    """Pearson with its 95% interval per metric, one panel per aspect; dashed: human vs human."""
    rows = [r for r in [result["ragchecker"], *result["rows"]] if r["status"] == "measured"]
    with plt.rc_context(_RC):
        fig, axes = plt.subplots(1, len(ASPECTS), figsize=(11, 0.32 * len(rows) + 1.6), sharey=True)
        ys = list(range(len(rows)))[::-1]
        for ax, aspect in zip(axes, ASPECTS):
            for y, r in zip(ys, rows):
                c = r["aspects"][aspect]
                if c.get("pearson") is None:
                    continue
                lo, hi = c["pearson_ci"]
                color = "#bbbbbb" if r.get("struck") else KIND_COLORS.get(r["kind"], "#333333")
                ax.errorbar([c["pearson"]], [y], xerr=[[c["pearson"] - lo], [hi - c["pearson"]]], fmt="o",
                            color=color, capsize=2, markersize=4)
            h = result["human_agreement"][aspect]["pearson"]
            ax.axvline(h, color="#444444", linestyle="--", linewidth=1)
            ax.axvline(0, color="#999999", linewidth=0.6)
            ax.set_title(f"{aspect} (dashed: human vs human {h:.1f})", fontsize=9)
            ax.set_xlabel("Pearson x 100 (95% interval)")
            ax.set_xlim(min(-10, *(r["aspects"][aspect]["pearson_ci"][0] or 0 for r in rows)) - 5, 100)
        axes[0].set_yticks(ys, [r["metric"] + (" (wiring)" if r.get("struck") else "") for r in rows])
        fig.tight_layout()
        return _svg(fig)


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Meta-evaluation: answer metrics against human labels</title><style>{{ css }}
td.na{color:#777}.kind{color:#777;font-size:11px}</style></head><body>
<h1>Answer metrics against human labels</h1>
<p>RAGChecker's meta-evaluation set ({{ r.dataset.n_instances }} instances, two RAG responses each, {{ r.dataset.n_labels }} human labels per aspect; sources {{ r.dataset.sources|join(", ") }}).
Per metric: delta = m(model2) − m(model1) per instance, NaN → median, min-max scaled to [−2, 2], repeated for both annotators; Pearson (P) and Spearman (S) × 100 against the labels, with 95% percentile bootstrap intervals over instances ({{ r.n_bootstrap }} resamples, seed {{ r.seed }}).
Data: <code>{{ r.dataset.path }}</code>, sha256 {% for f, h in r.dataset.sha256.items() %}{{ f }} <code>{{ h[:12] }}</code>{% if not loop.last %}, {% endif %}{% endfor %}.</p>
<p><b>Check of the method</b>: RAGChecker's row recomputed from its file {{ "matches" if r.ragchecker.check.passed else "DOES NOT match" }} the published figures within ±{{ r.ragchecker.check.tolerance }}
({% for a, v in r.ragchecker.check.aspects.items() %}{{ a }} {{ v.measured[0] }} / {{ v.measured[1] }} vs {{ v.published[0] }} / {{ v.published[1] }}{% if not loop.last %}; {% endif %}{% endfor %}); human vs human {{ "matches" if r.human_agreement.check.passed else "DOES NOT match" }} too.</p>
<h2>Correlation with human labels</h2>
<table><tr><th>metric</th>{% for a in aspects %}<th>{{ a }}</th>{% endfor %}<th>what it is</th></tr>
{% for row in rows %}<tr><td>{{ row.metric }} <span class="kind">{{ row.kind }}</span>{% if row.struck %} <span class="badge">unreliable judge: wiring only</span>{% endif %}</td>
{% if row.status == "measured" %}{% for a in aspects %}<td class="num{{ ' unreliable' if row.struck else '' }}">{{ cell(row.aspects[a]) }}{% if row.aspects[a].why %} <span class="kind">{{ row.aspects[a].why }}</span>{% endif %}</td>{% endfor %}
{% else %}<td class="na" colspan="{{ aspects|length }}">{{ row.status|replace("_", " ") }}: {{ row.why or (row.aspects.values()|map(attribute="why")|select|first) }}</td>{% endif %}
<td>{{ row.note }}{% if row.why and row.status == "measured" %} {{ row.why }}{% endif %}</td></tr>
{% endfor %}</table>
<h2>Plot</h2>
{{ plot }}
<h2>Published references</h2>
<table><tr><th>row</th>{% for a in aspects %}<th>{{ a }} (P / S)</th>{% endfor %}<th>source</th></tr>
{% for key in ("human", "ragchecker") %}{% set p = r.published[key] %}<tr><td>{{ p.label }}</td>{% for a in aspects %}<td class="num">{{ p.figures[a].pearson }} / {{ p.figures[a].spearman }}</td>{% endfor %}<td>{{ p.source }}</td></tr>
{% endfor %}{% set t = r.published.table_2_other_rows %}<tr><td>{{ t.rows|join(", ") }}</td><td class="na" colspan="{{ aspects|length }}">{{ t.status|replace("_", " ") }}</td><td>{{ t.paper }}: {{ t.why }}</td></tr>
</table>
{% if r.hallucination %}{% set h = r.hallucination %}<h2 id="hallucination">The claim checker against people's hallucination labels</h2>
<p>{{ h.responses }} responses of <code>{{ h.data }}</code> (RAGTruth's format; {{ h.labels }}). A response's score is its weakest claim's support; it is flagged below the threshold. The lexical baseline (each claim's share of content words found in the source, threshold {{ h.lexical.threshold }} fixed in advance) is measured in the same run. Span F1 counts characters of the flagged claims against the labelled spans. Intervals: 95% bootstrap over sources.</p>
<table><tr><th>detector</th><th>task</th><th>responses</th><th>hallucinated</th><th>AUROC</th><th>precision</th><th>recall</th><th>F1</th><th>span F1</th></tr>
{% for name in ("checker", "lexical") %}{% set d = h[name] %}{% for task in ("overall", "QA", "Summary", "Data2txt") %}{% if d[task] %}{% set f = d[task] %}<tr><td>{{ name }}{% if name == "checker" %} <span class="kind">{{ d.identity }}, threshold {{ d.threshold }}</span>{% endif %}</td><td>{{ task }}</td><td class="num">{{ f.n }}</td><td class="num">{{ f.hallucinated }}</td>
<td class="num">{{ f.auroc }}{% if task == "overall" %} [{{ d.overall.ci95.auroc[0] }}, {{ d.overall.ci95.auroc[1] }}]{% endif %}</td><td class="num">{{ f.precision }}</td><td class="num">{{ f.recall }}</td>
<td class="num">{{ f.f1 }}{% if task == "overall" %} [{{ d.overall.ci95.f1[0] }}, {{ d.overall.ci95.f1[1] }}]{% endif %}</td><td class="num">{{ f.span_f1 }}</td></tr>{% endif %}{% endfor %}{% endfor %}
</table>{% endif %}
{% if r.perturbations %}{% set b = r.perturbations %}<h2 id="perturbations">The metrics under attack</h2>
<p>{{ b['items'] }} correct ClapNQ answers, each perturbed by every family that applies; per metric, the share of perturbations that move it the right way (strictly worse, or within {{ b.same_tolerance }} where it should not move: marked =). "—": the metric cannot see that perturbation (not a test of it). {{ b.judged }}.</p>
{% set names = b.families.values()|first %}<table><tr><th>family</th><th>n</th>{% for m in names.metrics %}<th>{{ m }}</th>{% endfor %}</tr>
{% for fam, e in b.families.items() %}<tr><td>{{ fam|replace("_", " ") }}</td><td class="num">{{ e.n }}</td>{% for m, v in e.metrics.items() %}<td class="num">{% if v.rate is none %}—{% else %}{{ "%.2f"|format(v.rate) }}{% if v.expect == "same" %} ={% endif %}{% endif %}</td>{% endfor %}</tr>
{% endfor %}</table>{% endif %}
{% if r.judge %}<h2>The judge: {{ r.judge.id }}</h2>
<table><tr><th>calibration set</th><th>agreement</th><th>95% Wilson interval</th><th>pairs</th><th>failed</th><th>clears {{ r.judge.calibration.authored.reliable_threshold }}?</th></tr>
{% for name, c in r.judge.calibration.items() %}<tr><td>{{ name|replace("_", " ") }}</td><td class="num">{{ c.agreement }}</td><td class="num">{{ c.ci95_low }} – {{ c.ci95_high }}</td><td class="num">{{ c.n }}</td><td class="num">{{ c.n_failed }}</td><td>{{ "yes" if c.reliable else "no" }}</td></tr>
{% endfor %}</table>
<p>Reliable: <b>{{ r.judge.reliable }}</b> ({{ r.judge.rule }}). Judged metrics scored on {{ r.judge.sample.n }} instance(s).</p>
{% endif %}</body></html>
"""

_env = Environment(autoescape=True, keep_trailing_newline=True)


def write_report(result: Mapping, out_dir: str | Path) -> Path:
    """``out_dir/index.html``; the same result gives the same bytes."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    html = _env.from_string(PAGE).render(r=result, rows=table_rows(result), aspects=ASPECTS, cell=cell_text,
                                         plot=plot(result), css=Markup(CSS))
    path = out / "index.html"
    path.write_text(html, encoding="utf-8")
    return path

