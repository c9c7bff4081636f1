"""HTML reports for evaluation runs: one page per run (the index of runs is adiyan/report/index.py).

A run page opens on its summary (adiyan/report/summary.py: the headline metrics with their 95%
intervals and the deltas against the previous run on the same data and the baseline), then its
warnings, then the failing questions worst first (leaks, gold missed, wrong abstentions, missed
keywords), each folding open to its retrieved context, then plots and the full tables.

Pages must open offline (air-gapped review, archived artefacts), so everything is inline:
CSS in a <style> block, plots as matplotlib SVG, no scripts, fonts or images by URL.
Output is byte-for-byte reproducible so reports can be diffed and committed.
"""
from __future__ import annotations

import io
import json
import math
import os
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from jinja2 import Environment  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
from markupsafe import Markup  # noqa: E402

from .. import metrics as M  # noqa: E402
from .agent import agent_section  # noqa: E402
from .repeats import repeats_section  # noqa: E402
from .summary import failures as failing_questions  # noqa: E402
from .summary import fmt, recall_at, summary_section  # noqa: E402
from .summary import num as _num  # noqa: E402
from .summary import parse_time as _parse_time  # noqa: E402

COLORS = {"hit": "#1b9e77", "miss": "#d95f02", "n/a": "#9e9e9e"}
_RC = {"svg.hashsalt": "adiyan", "text.parse_math": False, "font.size": 9}  # parse_math: ids may hold "$"

# ---------------------------------------------------------------- helpers


def _svg(fig, rc: dict | None = None) -> Markup:
    """Serialise a figure to inline SVG: no XML prolog/DOCTYPE, no metadata (it carries a date and URLs)."""
    buf = io.StringIO()
    with plt.rc_context(_RC if rc is None else rc):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"\s*<metadata>.*?</metadata>", "", text, flags=re.S)
    return Markup(text)


def _figure(width: float, height: float):
    """New figure; call inside plt.rc_context(_RC) so fonts and salt apply."""
    return plt.subplots(figsize=(width, height))


def _mean(values) -> float:
    vals = [float(v) for v in values if v is not None]
    return sum(vals) / len(vals) if vals else math.nan


def _status(q: dict) -> str:
    return "n/a" if q.get("hit") is None else ("hit" if q["hit"] else "miss")


def _top_score(q: dict) -> float | None:
    retrieved = q.get("retrieved") or []
    return _num(retrieved[0].get("score")) if retrieved else None


def _short(h, n: int = 12) -> str:
    return str(h)[:n] if h else "—"


def judged_unreliable(groups: dict, group: str, name: str) -> bool:
    """A metric an LLM judged (the registry's ``judged`` flag) in a run whose judge was not
    calibrated reliable (``ragas_llm.judge_reliable`` is not 1): shown struck with a badge,
    never "best", never tested. An unregistered metric is not judged."""
    try:
        judged = M.is_judged(group, name)
    except M.UnregisteredMetric:
        return False
    return judged and _num((groups.get("ragas_llm") or {}).get("judge_reliable")) != 1.0


def _n_of(groups: dict, group: str, name: str):
    """The sample size printed beside a judged mean (``{name}.n``), or None."""
    return (groups.get(group) or {}).get(f"{name}.n")


def human_badge(group: str, name: str) -> Markup:
    """Beside a metric: its measured correlation with human labels (overall aspect, Pearson x 100
    with its 95% interval; every aspect in the tooltip) from the registry's side table
    (adiyan/human_correlation.yaml, written by ``adiyan meta-eval``), or why it was not
    measured. Nothing for a metric the table does not list (not an answer metric)."""
    entry = M.human_correlation(group, name)
    if entry.get("status") == "measured":
        o = entry["overall"]
        tip = "; ".join(f"{a}: Pearson {entry[a]['pearson']} {entry[a]['pearson_ci']}, Spearman {entry[a]['spearman']} "
                        f"{entry[a]['spearman_ci']}" for a in ("correctness", "completeness", "overall"))
        return Markup('<span class="human" title="{}">vs humans: Pearson r ×100 = {} [{}, {}]</span>').format(
            f"RAGChecker meta-evaluation, {entry.get('n_instances')} instances: {tip}", o["pearson"], *o["pearson_ci"])
    if entry.get("groups"):  # listed for this group, not measured: say why
        return Markup('<span class="human" title="{}">vs humans: not measured</span>').format(entry.get("why", ""))
    return Markup("")


# ---------------------------------------------------------------- run plots


def _plot_rr(questions: list[dict]) -> Markup:
    """Per-question reciprocal rank, coloured by hit / miss: shows which questions drag MRR down."""
    with plt.rc_context(_RC):
        fig, ax = _figure(max(6.0, min(16.0, 0.35 * len(questions) + 2)), 3.0)
        ids = [str(q.get("id", i)) for i, q in enumerate(questions)]
        rr = [_num(q.get("reciprocal_rank")) or 0.0 for q in questions]
        ax.bar(range(len(ids)), rr, color=[COLORS[_status(q)] for q in questions])
        zero = [i for i, v in enumerate(rr) if v == 0.0]  # a zero-height bar is invisible: mark it
        ax.scatter(zero, [0.0] * len(zero), marker="x", clip_on=False, zorder=3,
                   color=[COLORS[_status(questions[i])] for i in zero])
        ax.set_xticks(range(len(ids)), ids, rotation=90)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("reciprocal rank")
        handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLORS.values()]
        ax.legend(handles, list(COLORS), loc="upper right", fontsize=8)
        return _svg(fig)


def _plot_scores(questions: list[dict]) -> Markup:
    """Top-1 retrieval score of hits vs misses: tells whether a score threshold separates them."""
    with plt.rc_context(_RC):
        fig, ax = _figure(6.0, 3.0)
        series = {k: [s for q in questions if _status(q) == k and (s := _top_score(q)) is not None]
                  for k in COLORS}
        series = {k: v for k, v in series.items() if v}
        if series:
            allv = [s for v in series.values() for s in v]
            lo, hi = min(allv), max(allv)
            bins = [lo + (hi - lo) * i / 12 for i in range(13)] if hi > lo else [lo - 0.05, hi + 0.05]
            ax.hist(list(series.values()), bins=bins, color=[COLORS[k] for k in series],
                    label=list(series))
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "no retrieval scores", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel("top-1 score")
        ax.set_ylabel("questions")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        return _svg(fig)


def _plot_kinds(questions: list[dict]) -> Markup:
    """Mean hit rate and keyword hit per question kind: which kinds of question the pipeline fails."""
    with plt.rc_context(_RC):
        kinds = sorted({str(q.get("kind") or "—") for q in questions})
        fig, ax = _figure(max(5.0, 1.2 * len(kinds) + 2), 3.0)
        for off, key, label, color in ((-0.2, "hit", "hit rate", "#7570b3"),
                                       (0.2, "keyword_hit", "keyword hit", "#e7298a")):
            means = [_mean(q.get(key) for q in questions if str(q.get("kind") or "—") == k)
                     for k in kinds]
            bars = ax.bar([i + off for i in range(len(kinds))], [0.0 if math.isnan(v) else v for v in means],
                          width=0.4, label=label, color=color)
            ax.bar_label(bars, ["n/a" if math.isnan(v) else f"{v:.2f}" for v in means], fontsize=7)
        ax.set_xticks(range(len(kinds)), kinds)
        ax.set_ylabel("mean over questions")
        ax.set_ylim(0, 1.12)
        ax.legend(fontsize=8, loc="upper right")
        return _svg(fig)


def _plot_repeats(block: dict) -> Markup | None:
    """System and judge SD per metric with their bootstrap 95% intervals (eval.repeats): which
    part of a metric's spread a better generator could remove, and which a better judge."""
    rows = [(name, d) for name, d in (block.get("metrics") or {}).items() if d.get("system_var") is not None]
    if not rows:
        return None
    with plt.rc_context(_RC):
        fig, ax = _figure(6.5, 0.35 * len(rows) + 1.2)
        ys = list(range(len(rows)))
        for off, key, label, color in ((-0.2, "system", "system (answers differ)", "#7570b3"),
                                       (0.2, "judge", "judge (same answer, other verdict)", "#d95f02")):
            sd = [math.sqrt(d[f"{key}_var"]) if d.get(f"{key}_var") is not None else 0.0 for _, d in rows]
            ci = [d.get(f"{key}_var_ci95") or [d.get(f"{key}_var") or 0.0] * 2 for _, d in rows]
            err = [[max(0.0, s - math.sqrt(max(c[0], 0.0))) for s, c in zip(sd, ci)],
                   [max(0.0, math.sqrt(max(c[1], 0.0)) - s) for s, c in zip(sd, ci)]]
            ax.barh([y + off for y in ys], sd, height=0.4, xerr=err, label=label, color=color,
                    error_kw={"elinewidth": 0.8, "capsize": 2})
        ax.set_yticks(ys, [name for name, _ in rows])
        ax.invert_yaxis()
        ax.set_xlabel("SD of one question's score (bars: 95% bootstrap interval)")
        ax.legend(fontsize=8, loc="lower right")
        return _svg(fig)


def _plot_recall_at_k(questions: list[dict], k_max: int = 10) -> Markup | None:
    """Hit rate and recall of the gold sources against the depth cut, 1..10: where a larger k stops paying."""
    answerable = [q for q in questions if recall_at(q, 1) is not None]
    if not answerable:
        return None
    ks = list(range(1, k_max + 1))
    with plt.rc_context(_RC):
        fig, ax = _figure(6.0, 3.0)
        recall = [_mean(recall_at(q, k) for q in answerable) for k in ks]
        hit = [_mean(float(recall_at(q, k) > 0) for q in answerable) for k in ks]
        ax.plot(ks, hit, marker="o", label="hit rate@k", color="#7570b3")
        ax.plot(ks, recall, marker="s", label="recall@k", color="#1b9e77")
        ax.set_xticks(ks)
        ax.set_xlabel("k (distinct sources)")
        ax.set_ylim(0, 1.05)
        ax.set_ylabel(f"mean over {len(answerable)} questions")
        ax.legend(fontsize=8, loc="lower right")
        return _svg(fig)


def _plot_trend(runs: list[dict]) -> Markup:
    """Each retrieval metric across runs, oldest to newest: regressions show as drops."""
    with plt.rc_context(_RC):
        chron = list(reversed(runs))
        names = list(dict.fromkeys(n for r in chron for n in r["metrics"].get("retrieval", {})))
        fig, ax = _figure(max(6.0, min(16.0, 0.8 * len(chron) + 3)), 3.2)
        x = range(len(chron))
        for n in names:
            y = [_num(r["metrics"].get("retrieval", {}).get(n)) for r in chron]
            ax.plot(x, [math.nan if v is None else v for v in y], marker="o", label=n)
        ax.set_xticks(x, [r["run_id"] for r in chron], rotation=30, ha="right")
        ax.set_ylabel("retrieval metric")
        if names:
            ax.legend(fontsize=8)
        return _svg(fig)


# ---------------------------------------------------------------- templates

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em auto;max-width:1200px;padding:0 1em;color:#222}
h1{font-size:1.5em}h2{border-bottom:1px solid #ccc;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums}
.best{background:#c8f0c8;font-weight:bold}.miss{color:#b34700}.hit{color:#137a5a}
.fail{border:1px solid #ddd;padding:.5em 1em;margin:.8em 0;border-radius:4px}
.unreliable{color:#999;text-decoration:line-through}.badge{background:#fde2e1;color:#8a1c14;border-radius:3px;padding:0 4px;font-size:11px;white-space:nowrap}
.human{color:#555;font-size:11px;margin-left:.4em}.warnings li{margin:.3em 0}.warnings b{color:#8a1c14}
table.headline th[scope=row]{font-weight:normal;background:#fafafa}td.big{font-size:1.15em;font-weight:bold}
.delta.better{color:#137a5a;font-weight:bold}.delta.worse{color:#b3261e;font-weight:bold}.delta.neutral,.delta.same{color:#777}
b.worse{color:#b3261e}.lede{color:#444}tr.grey td{color:#777}.counts{margin:.4em 0 1em}
details.fail>summary{cursor:pointer;list-style-position:outside;margin-left:1em}details.fail[open]>summary{margin-bottom:.5em}
.reason{background:#fde2e1;color:#8a1c14;border-radius:3px;padding:0 5px;margin-left:.3em;font-size:12px;white-space:nowrap}
.reason.leak{background:#b3261e;color:#fff}ol.ctx{padding-left:1.5em}ol.ctx li{margin:.4em 0}
pre{white-space:pre-wrap;background:#f7f7f7;padding:.5em;margin:.3em 0}
svg{max-width:100%;height:auto}code{font-size:.95em}
ul.claims{list-style:none;padding-left:.5em}ul.claims li{margin:.35em 0}.claim{border-radius:3px;padding:1px 4px}
.claim.ok{background:#e3f6ea;color:#0b5e3f}.claim.no{background:#fde2e1;color:#8a1c14}.span{color:#555;font-size:12px}
"""

RUN_TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Run {{ m.run_id }}</title><style>{{ css }}</style></head><body>
<h1>Run {{ m.run_id }}</h1>
{{ summary }}
{% if m.warnings %}<h2 id="warnings">Warnings ({{ m.warnings|length }})</h2>
<ul class="warnings">{% for w in m.warnings %}<li id="warning-{{ w.name }}"><b>{{ w.name }}</b>: {{ w.message }}{% if w.doc %} (<a href="{{ doc_href(w.doc) }}">what it means</a>){% endif %}{% if w.detail %}<br><small>{{ w.detail }}</small>{% endif %}</li>
{% endfor %}</ul>
{% endif %}
<h2 id="failures">Failures ({{ failures|length }})</h2>
{% if failures %}<p>Worst first: private leaks, gold sources missed, wrong abstentions, answers missing their keywords. Open one for its answer and the context it was given.</p>{% endif %}
{% for q in failures %}<details class="fail" id="fail-{{ q.id }}"><summary><b>{{ q.id }}</b> <small>({{ q.kind }}{% if q.requester %}, as {{ q.requester }}{% endif %})</small>{% for r in q.reason_keys %} <span class="reason {{ r }}">{{ q.reasons[loop.index0] }}</span>{% endfor %} · {{ q.question }}</summary>
<p><b>Question:</b> {{ q.question }} <small>(hit={{ fmt(q.hit) }}, keyword_hit={{ fmt(q.keyword_hit) }}{% if q.abstained is not none %}, abstained={{ fmt(q.abstained) }}{% endif %})</small></p>
<p><b>Gold answer:</b> {{ q.gold_answer }}</p>
<p><b>Gold sources:</b> {{ (q.gold_sources or [])|join(", ") }}</p>
{% if q.leaked_private %}<p class="miss"><b>Leaked private chunks:</b> {{ q.leaked_private|join(", ") }}</p>{% endif %}
<p><b>Generated answer:</b></p><pre>{{ q.answer }}</pre>
{% if q.claim_verdicts %}<p><b>Its claims, checked against the retrieved context:</b></p>{{ claims(q) }}{% endif %}
<p><b>Retrieved context:</b></p>
<ol class="ctx">{% for c in q.retrieved or [] %}<li><b>{{ c.source }}</b> #{{ c.chunk_index }} · score {{ fmt(c.score) }}{% if c.source in (q.gold_sources or []) %} · <span class="hit">gold</span>{% endif %}<pre>{{ c.text }}</pre></li>
{% else %}<li>nothing retrieved{% if q.empty_reason %}: {{ q.empty_reason }}{% endif %}</li>{% endfor %}</ol></details>
{% else %}<p>No failing questions.</p>{% endfor %}
<h2>Plots</h2>
{% if plots %}{% for title, svg in plots %}<h3>{{ title }}</h3>
{{ svg }}
{% endfor %}{% else %}<p>No questions recorded.</p>{% endif %}

{% if incidents %}<h2 id="incidents">Incidents replayed</h2>
<p>Each of the seed's five incidents, its before and after run through the code this run used. <b>Production configuration</b>: both halves are settings production runs. <b>Replica</b>: production refuses the before, so it is rebuilt for the replay and the verdict reads "demonstrated on a replica".</p>
<table><tr><th>#</th><th>incident</th><th>verdict</th><th>basis</th><th>variants</th><th>measured here</th></tr>
{% for r in incidents %}<tr id="incident-{{ r.number }}"><td>{{ r.number }}</td><td>{{ r.name }}</td><td>{{ r.status }}</td><td>{{ r.basis or "production configuration" }}{% if r.basis_note %}<br><small>{{ r.basis_note }}</small>{% endif %}</td><td>{{ r.variants_text }}</td><td><small>{{ r.measured }}</small></td></tr>
{% endfor %}</table>
{% endif %}<h2>Metrics</h2>
{% for group, vals in (m.metrics or {}).items() %}<h3>{{ group }}</h3>
<table><tr><th>metric</th><th>value</th></tr>
{% for k, v in vals.items() %}{% set n = n_of(m.metrics, group, k) %}{% if unreliable(m.metrics, group, k) %}<tr><td>{{ k }} <span class="badge">unreliable judge</span>{{ human(group, k) }}</td><td class="num"><span class="unreliable">{{ fmt(v) }}</span>{% if n is not none %} (n={{ n }}){% endif %}</td></tr>
{% elif n is not none %}<tr><td>{{ k }}{{ human(group, k) }}</td><td class="num">{{ fmt(v) }} (n={{ n }})</td></tr>
{% else %}<tr><td>{{ k }}{{ human(group, k) }}</td><td class="num">{{ fmt(v) }}</td></tr>
{% endif %}{% endfor %}</table>
{% endfor %}{% if m.floor %}<h3>score floor</h3>
<p>{{ m.floor.reason }}{% if m.floor.calibration %}. Calibrated on <b>{{ m.floor.calibration.evalset }}</b> (hash <code>{{ m.floor.calibration.evalset_hash }}</code>, {{ m.floor.calibration.split or "all questions" }}, rule {{ m.floor.calibration.rule }}: J {{ fmt(m.floor.calibration.youden_j) }}, TPR {{ fmt(m.floor.calibration.tpr) }}, FPR {{ fmt(m.floor.calibration.fpr) }}, n {{ m.floor.calibration.n_relevant }} relevant / {{ m.floor.calibration.n_irrelevant }} irrelevant){% endif %}.{% if m.floor.effect and m.floor.effect.measured %} On this run's top {{ m.floor.effect.k }} without a floor, the floor {{ "removes" if m.floor.applied else "would remove (not applied)" }} {{ m.metrics.floor.relevant_below_floor }} of {{ m.metrics.floor.relevant_top_k }} relevant and {{ m.metrics.floor.irrelevant_below_floor }} of {{ m.metrics.floor.irrelevant_top_k }} irrelevant chunks.{% endif %}</p>
{% endif %}{% if m.not_applicable %}<h3 id="not-applicable">Checks that do not apply to this run</h3>
<p>Not run and not counted, each listed once:</p>
<ul>{% for x in m.not_applicable %}<li>{{ x.what }}: {{ x.why }}</li>
{% endfor %}</ul>
{% endif %}
{{ repeats }}<h2 id="run">Run details</h2>
<table>
<tr><th>date</th><td>{{ m.created_at or "—" }}</td></tr>
<tr><th>config hash</th><td><code title="{{ m.config_hash }}">{{ short(m.config_hash) }}</code></td></tr>
{% for role, model in (m.models or {}).items() %}<tr><th>{{ role }}</th><td>{% if model is mapping %}<b>{{ model.id }}</b>{% for k, v in model.items() if k != "id" %} · {{ k }}={{ fmt(v) }}{% endfor %}{% else %}{{ model }}{% endif %}</td></tr>
{% endfor %}<tr><th>dataset</th><td><b>{{ ds.name }}</b> · hash <code title="{{ ds.hash }}">{{ short(ds.hash) }}</code>{% for k, v in ds.items() if k not in ("name", "hash") %} · {{ k }}={{ fmt(v) }}{% endfor %}</td></tr>
{% for part, e in (m.engines or {}).items() if e is mapping %}<tr><th>Qdrant: {{ part }}</th><td><b>{{ e.engine }}</b> · {{ e.where }}{% if e.used is defined and not e.used %} (not used by this run){% endif %}</td></tr>
{% endfor %}{% if m.engines %}<tr><th>one Qdrant engine</th><td>{{ "yes" if m.engines.shared else "no: mem0 has no provider for the embedded engine; store.engine=server shares one" }}</td></tr>
{% endif %}<tr><th>files</th><td>{% if has_config %}<a href="config.yaml">config.yaml</a>{% else %}config.yaml (not written){% endif %} · <a href="metrics.json">metrics.json</a></td></tr>
</table>

<h2>All questions</h2>
<table><tr><th>id</th><th>kind</th><th>question</th><th>hit</th><th>RR</th><th>keyword hit</th><th>claims supported</th><th>top-1 source</th><th>top-1 score</th>{% if cols.retrieve %}<th>retrieve ms</th>{% endif %}{% if cols.answer %}<th>answer ms</th>{% endif %}</tr>
{% for q in questions %}<tr><td>{{ q.id }}</td><td>{{ q.kind }}</td><td>{{ q.question }}</td><td class="{{ status(q) }}">{{ fmt(q.hit) }}</td><td class="num">{{ fmt(q.reciprocal_rank) }}</td><td>{{ fmt(q.keyword_hit) }}</td><td class="num">{% if q.claim_verdicts %}{{ q.claim_verdicts|selectattr("supported")|list|length }} of {{ q.claim_verdicts|length }}{% else %}—{% endif %}</td><td>{{ (q.retrieved or [{}])[0].source }}</td><td class="num">{{ fmt(top(q)) }}</td>{% if cols.retrieve %}<td class="num">{{ ms(q.retrieve_s) }}</td>{% endif %}{% if cols.answer %}<td class="num">{{ ms(q.answer_s) }}</td>{% endif %}</tr>
{% endfor %}</table>
{% if cols.answer %}<p><small>answer ms: the wall time of each answer in this run; an answer served from the answer cache costs a look-up.</small></p>{% endif %}
{% if questions|selectattr("claim_verdicts")|list %}<h2 id="claims">Answers, claim by claim</h2>
<p>Each answer split into claims, each checked against the retrieved context by the trained claim checker: <span class="claim ok">supported</span> or <span class="claim no">not supported</span>, with the checker's P(supported) and the passage window that supports it best. Abstentions have no claims.</p>
{% for q in questions if q.claim_verdicts %}<details class="fail" id="claims-{{ q.id }}"><summary><b>{{ q.id }}</b> · {{ q.claim_verdicts|selectattr("supported")|list|length }} of {{ q.claim_verdicts|length }} supported · {{ q.question }}</summary>
{{ claims(q) }}</details>
{% endfor %}{% endif %}

{{ agent }}<h2>Timings and cache</h2>
<table>{% for k, v in (m.timings or {}).items() %}<tr><th>{{ k }}</th><td class="num">{{ fmt(v) }}</td></tr>
{% endfor %}{% for k, v in (m.cache or {}).items() %}<tr><th>cache {{ k }}</th><td class="num">{{ fmt(v) }}</td></tr>
{% endfor %}</table>
<details><summary>Resolved config</summary><pre>{{ config_json }}</pre></details>
</body></html>
"""

_env = Environment(autoescape=True, keep_trailing_newline=True)
CLAIMS_TEMPLATE = """<ul class="claims">{% for c in q.claim_verdicts %}<li><span class="claim {{ 'ok' if c.supported else 'no' }}">{{ c.claim }}</span> <small>P(supported) {{ "%.2f"|format(c.support) }}</small>{% if c.span %}<br><span class="span">{{ "best support" if c.supported else "closest passage" }}: {{ c.span[:400] }}{% if c.span|length > 400 %} …{% endif %}</span>{% endif %}</li>
{% endfor %}</ul>"""


def _claims(q: dict) -> Markup:
    return Markup(_env.from_string(CLAIMS_TEMPLATE).render(q=q))


_env.globals.update(fmt=fmt, short=_short, status=_status, top=_top_score, css=Markup(CSS),
                    unreliable=judged_unreliable, n_of=_n_of, human=human_badge, claims=_claims)


# ---------------------------------------------------------------- public API


def _read_questions(path: Path) -> list[dict]:
    if not path.exists():
        return []
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: {e}") from e
    return rows


def _doc_href(doc: str, run_dir: Path) -> str:
    """A docs path (``docs/reference/warnings.md#name``) as a link from the run folder: relative to the
    repository's docs when they are there, else the path as written."""
    path, _, anchor = doc.partition("#")
    target = Path(__file__).resolve().parents[2] / path
    if not target.is_file():
        return doc
    rel = Path(os.path.relpath(target, run_dir.resolve()))
    return rel.as_posix() + (f"#{anchor}" if anchor else "")


def write_run_report(run_dir: Path) -> Path:
    """Write run_dir/report.html: everything needed to judge one run, failures first-class."""
    run_dir = Path(run_dir)
    m = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    questions = _read_questions(run_dir / "questions.jsonl")
    failures = failing_questions(questions)
    plots = []
    if questions:
        plots = [("Hit rate and keyword hit by question kind", _plot_kinds(questions)),
                 ("Top-1 retrieval score: hits vs misses", _plot_scores(questions)),
                 ("Reciprocal rank per question", _plot_rr(questions))]
        if (rk := _plot_recall_at_k(questions)) is not None:
            plots.insert(1, ("Hit rate and recall against k", rk))
    inc_path = run_dir / "incidents.json"  # written when the run replayed the incidents
    incidents = json.loads(inc_path.read_text(encoding="utf-8")) if inc_path.exists() else []
    html = _env.from_string(RUN_TEMPLATE).render(
        m=m, ds=m.get("dataset") or {}, questions=questions, failures=failures, plots=plots, incidents=incidents,
        summary=summary_section(run_dir, m, questions, failures),
        has_config=(run_dir / "config.yaml").exists(),
        doc_href=lambda doc: _doc_href(doc, run_dir),
        cols={"retrieve": any(isinstance(q.get("retrieve_s"), (int, float)) for q in questions),  # only columns
              "answer": any(isinstance(q.get("answer_s"), (int, float)) for q in questions)},  # with values
        ms=lambda s: "—" if not isinstance(s, (int, float)) else f"{s * 1000:.1f}",
        config_json=json.dumps(m.get("config", {}), indent=2, ensure_ascii=False),
        agent=agent_section(run_dir, m.get("metrics") or {}),  # eval.mode=agent: traces
        repeats=repeats_section(m, _plot_repeats(m["repeats"]) if m.get("repeats") else None))  # eval.repeats
    out = run_dir / "report.html"
    out.write_text(html, encoding="utf-8")
    return out


def _load_run(path: Path) -> dict:
    """Parse and sanity-check one metrics.json; raises with a readable reason when unusable."""
    m = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(m, dict):
        raise ValueError("metrics.json is not a JSON object")
    if not isinstance(m.get("metrics", {}), dict) or not all(
            isinstance(g, dict) for g in m.get("metrics", {}).values()):
        raise ValueError("'metrics' is not a dict of metric groups")
    m.setdefault("run_id", path.parent.name)
    m.setdefault("metrics", {})
    return m


def _direction(group: str, name: str) -> str:
    """The registry's direction; an unregistered metric (an old run's) has none: no "best"."""
    try:
        return M.direction(group, name)
    except M.UnregisteredMetric:
        return M.NEUTRAL
