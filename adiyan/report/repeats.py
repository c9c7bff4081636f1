"""The repeat section of a run report (``eval.repeats`` > 1 or ``eval.judge_repeats`` > 1): per
metric, the spread across repeats split into the system's part (answers differ between repeats)
and the judge's part (verdicts differ on the same answer), with their bootstrap 95% intervals over
questions, and the SD of one run's value that ``invoke compare`` uses to call a difference
"within repeat noise". The split is computed by adiyan.eval.repeats (a layer above: this module
reads metrics.json only). Empty for a run without repeats."""

from __future__ import annotations

import math

from jinja2 import Environment
from markupsafe import Markup


def _fmt(v, digits: int = 4) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.{digits}f}"
    return str(v)


def _sd_ci(ci) -> str:
    """A variance interval as an SD interval (square roots of its ends)."""
    if not ci:
        return "—"
    return f"[{math.sqrt(max(ci[0], 0.0)):.4f}, {math.sqrt(max(ci[1], 0.0)):.4f}]"


TEMPLATE = """<h2 id="repeats">Where the variance comes from ({{ r.repeats }} repeats × {{ r.judge_repeats }} judging(s))</h2>
<p>Every question was answered {{ r.repeats }} times (answer seeds {{ r.answer_seeds|join(', ') }}, llm temperature
{{ fmt(r.llm_temperature, 2) }}){% if r.judge_seeds %} and each answer judged {{ r.judge_repeats }} times (judge temperature
{{ fmt(r.judge_temperature, 2) }}, seeds {{ r.judge_seeds|map('join', '/')|join(', ') }}){% endif %}. Per metric and question: the
judge's variance is the variance across judgings of the same answer; the system's is the variance of the per-repeat means
across repeats less the judge's share of it (judge variance / judgings), averaged over questions and floored at 0 once.
Intervals: bootstrap over questions ({{ r.bootstrap.resamples }} resamples, seed {{ r.bootstrap.seed }}), shown as SDs.
<b>Run SD</b> = sqrt((system + judge variance) / n): how far one run's value moves on a rerun with these questions;
<code>invoke compare</code> flags a difference below {{ r.noise_factor }} × the runs' pooled run SD as within repeat noise.</p>
{% for n in r.notes %}<p class="note">{{ n }}</p>{% endfor %}
<table><tr><th>metric</th><th>n</th><th>per-repeat values</th><th>system SD [95% CI]</th><th>judge SD [95% CI]</th><th>run SD</th></tr>
{% for name, d in r.metrics.items() %}<tr><td>{{ name }}</td><td class="num">{{ d.n_questions }}{% if d.n_incomplete %} ({{ d.n_incomplete }} incomplete: left out){% endif %}</td>
<td class="num">{{ d.repeat_means|map('fmtv')|join(', ') }}</td>
<td class="num">{% if d.system_var is not none %}{{ fmt(d.system_sd) }} {{ sdci(d.system_var_ci95) }}{% else %}—{% endif %}</td>
<td class="num">{% if not d.judged %}not judged{% elif d.judge_var is none %}n/a (judged once: in the system part){% else %}{{ fmt(d.judge_sd) }} {{ sdci(d.judge_var_ci95) }}{% endif %}</td>
<td class="num">{{ fmt(d.sd_run) }}</td></tr>
{% endfor %}</table>
{% if plot %}<h3>System and judge SD per metric</h3>
{{ plot }}{% endif %}
"""

_env = Environment(autoescape=True)
_env.filters["fmtv"] = lambda v: _fmt(v)


def repeats_section(m: dict, plot: Markup | None = None) -> Markup:
    r = m.get("repeats")
    if not r:
        return Markup("")
    return Markup(_env.from_string(TEMPLATE).render(r=r, fmt=_fmt, sdci=_sd_ci, plot=plot))
