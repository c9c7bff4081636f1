"""The agent section of a run report: single-shot vs agent side by side, then every question's trace.

Written for ``eval.mode=agent`` runs (``agent_traces.jsonl`` beside ``metrics.json``): per step the
tool, its arguments, where the action came from (the model, a default after an unusable reply,
an override by policy), a summary of the observation and the scratchpad as the next decision
prompt showed it. Like the rest of the report it is static HTML (no scripts): traces fold with
``<details>``. Empty when the run has no traces.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from jinja2 import Environment
from markupsafe import Markup

TRACES_FILE = "agent_traces.jsonl"  # written by adiyan.eval.agent_eval (a layer above: not imported)


def _fmt(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else repr(round(v, 4))
    return str(v)


TEMPLATE = """<h2 id="agent">Agent ({{ traces|length }} questions, {{ fmt(agent.repeats) }} run(s) each, max {{ fmt(agent.max_steps) }} steps)</h2>
<h3>Single-shot vs agent</h3>
<table><tr><th>metric</th><th>single-shot</th><th>agent</th></tr>
{% for group, agroup in pairs %}{% for k in (metrics.get(agroup) or {}) %}<tr><td>{{ group }}.{{ k }}</td><td class="num">{{ fmt((metrics.get(group) or {}).get(k)) }}</td><td class="num">{{ fmt(metrics[agroup][k]) }}</td></tr>
{% endfor %}{% endfor %}</table>
<h3>Traces</h3>
<p>Per step: the tool and its arguments, where the action came from (model, fallback after an unusable reply, override by policy), a summary of what the tool returned (raw output is never kept) and the scratchpad the next decision prompt showed. The first run of each question; latency over every run.</p>
{% for t in traces %}{% set r = t.runs[0] %}<details class="fail" id="trace-{{ t.id }}"><summary><b>{{ t.id }}</b> ({{ t.kind }}, as {{ t.requester }}) · {{ r.n_steps }} step(s) · {{ r.stopped_reason }}{% if r.refused %} · <span class="miss">refused</span>{% endif %} · answer from {{ r.answer_source }}{% if not r.grounded %} · <span class="miss">not grounded</span>{% endif %} · latency {{ t.latency_s|map("round", 2)|join(" / ") }} s</summary>
<p><b>Question:</b> {{ t.question }}</p>
<p><b>Answer:</b></p><pre>{{ r.answer }}</pre>{% if r.refused %}<p class="miss"><b>Refused:</b> {{ r.refused }}</p>{% endif %}
<table><tr><th>step</th><th>tool</th><th>arguments</th><th>action</th><th>observation</th><th>scratchpad after compaction</th></tr>
{% for s in r.steps %}<tr><td class="num">{{ s.step }}</td><td><code>{{ s.tool }}</code></td><td><code>{{ args(s.args) }}</code></td><td>{{ s.action_source }}{% if s.note %}<br><small>{{ s.note }}</small>{% endif %}{% if not s.authorized %}<br><span class="miss">not authorized</span>{% endif %}</td><td>{{ s.summary or s.error or "—" }}</td><td>{% if s.scratchpad is defined %}<details><summary>{{ s.scratchpad_tokens }} tokens{% if s.scratchpad_trimmed %}, cut to its budget{% endif %}</summary><pre>{{ s.scratchpad }}</pre></details>{% else %}—{% endif %}</td></tr>
{% endfor %}</table></details>
{% endfor %}"""

_env = Environment(autoescape=True, keep_trailing_newline=True)
_env.globals.update(fmt=_fmt, args=lambda a: json.dumps(a or {}, ensure_ascii=False))


def read_traces(run_dir: Path) -> list[dict]:
    path = Path(run_dir) / TRACES_FILE
    if not path.is_file():
        return []
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: {e}") from e
    return out


def agent_section(run_dir: Path, metrics: dict) -> Markup:
    """The agent section for ``report.html`` (``metrics`` is metrics.json's "metrics"); empty without traces."""
    traces = read_traces(run_dir)
    if not traces:
        return Markup("")
    pairs = [("answer", "agent_answer"), ("ragas", "agent_ragas"), ("claims", "agent_claims")]
    return Markup(_env.from_string(TEMPLATE).render(traces=traces, metrics=metrics, pairs=pairs,
                                                    agent=metrics.get("agent") or {}))
