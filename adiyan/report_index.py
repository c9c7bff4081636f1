"""``reports/index.html``: every run, grouped so that only like runs are compared.

Runs are grouped by evalset and dataset hash: a run on ``adiyan_basic`` (1.0) is never "better"
than one on ``adiyan_full`` (0.95), and a changed evalset (another hash) is another group. Best
values are marked within a group only, in the metric registry's direction (an unregistered or
neutral metric is never best, nor is a metric an uncalibrated judge scored). Each run shows the
settings that differ from today's defaults (``adiyan.config``), computed from the config the run
saved (``paths.*`` left out: where files go is not what was measured). Two runs can be picked
with checkboxes: a small inline script (the page's only script; no network) shows the
``invoke compare A B`` command and links the comparison page when ``reports/compare/`` has it.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

import yaml
from jinja2 import Environment
from markupsafe import Markup

from .config import Settings
from .eval import metrics as M
from .report import CSS, _direction, _load_run, _n_of, _num, _parse_time, _plot_trend, _short, fmt, judged_unreliable

IGNORED_PREFIXES = ("paths.",)  # where files go, not what was measured

INDEX_CSS = """
.group{margin-top:2em}.diff code{background:#eef3fb;border-radius:3px;padding:0 3px;margin:1px;display:inline-block}
.defaults{color:#777}#compare-box{position:sticky;top:0;background:#fffbe6;border:1px solid #e6d98c;padding:.5em 1em;margin:1em 0}
#compare-cmd{font-size:1.05em}.scroll{overflow-x:auto}
"""

# The only script: reads the picked checkboxes and the known comparisons, writes text and one href.
COMPARE_JS = """
(function(){
  var box=document.getElementById('compare-box'), known=JSON.parse(box.getAttribute('data-comparisons'));
  var cmd=document.getElementById('compare-cmd'), link=document.getElementById('compare-link'), picked=[];
  function show(){
    if(picked.length<2){cmd.textContent='pick two runs ('+picked.length+' picked)';link.hidden=true;return;}
    cmd.textContent='invoke compare '+picked[0]+' '+picked[1];
    var hit=known.filter(function(c){return c.a===picked[0]&&c.b===picked[1]||c.a===picked[1]&&c.b===picked[0];})[0];
    link.hidden=!hit; if(hit){link.setAttribute('href',hit.href);link.textContent='open the comparison '+hit.a+' \\u2192 '+hit.b;}
  }
  document.querySelectorAll('input.pick').forEach(function(el){
    el.addEventListener('change',function(){
      var id=el.getAttribute('data-run');
      picked=picked.filter(function(x){return x!==id;});
      if(el.checked){picked.push(id);}
      while(picked.length>2){var old=picked.shift();document.querySelector('input.pick[data-run="'+CSS.escape(old)+'"]').checked=false;}
      show();
    });
  });
  show();
})();
"""

INDEX_TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Evaluation runs</title><style>{{ css }}{{ index_css }}</style></head><body>
<h1>Evaluation runs ({{ n_runs }})</h1>
<p>Runs are grouped by evalset and dataset hash; the best value per column is marked <b>within a group only</b>, in the metric registry's direction. An unreliable judge's metrics are struck, badged and never best; a judged mean shows its sample size. "settings" lists what differs from the defaults (<code>paths.*</code> left out).</p>
<div id="compare-box" data-comparisons="{{ comparisons }}"><b>Compare two runs:</b> tick two boxes below. <code id="compare-cmd">pick two runs</code> <a id="compare-link" hidden></a></div>
{% for g in groups %}<div class="group" id="group-{{ loop.index }}">
<h2>{{ g.name }} <small>dataset hash <code title="{{ g.hash }}">{{ short(g.hash) }}</code> · {{ g.rows|length }} run(s)</small></h2>
<div class="scroll"><table><tr><th>pick</th><th>run</th><th>date</th><th>embedder</th><th>llm</th><th>settings</th><th>config</th><th>warnings</th>{% for grp, n in g.cols %}<th>{{ grp }}<br>{{ n }}</th>{% endfor %}</tr>
{% for r in g.rows %}<tr><td><input type="checkbox" class="pick" data-run="{{ r.run_id }}" aria-label="pick {{ r.run_id }}"></td><td><a href="{{ r.href }}">{{ r.run_id }}</a></td><td>{{ r.created_at }}</td><td>{{ r.embedder }}</td><td>{{ r.llm }}</td><td class="diff">{% for d in r.diff %}<code>{{ d }}</code> {% else %}<span class="defaults">defaults</span>{% endfor %}</td><td><code>{{ r.config }}</code></td><td>{% for w in r.warnings %}<span class="badge" title="{{ w.message }}">{{ w.name }}</span> {% endfor %}</td>{% for c in r.cells %}{% if c.unreliable %}<td class="num"><span class="unreliable">{{ c.text }}</span> <span class="badge">unreliable judge</span></td>{% else %}<td class="num{% if c.best %} best{% endif %}">{{ c.text }}</td>{% endif %}{% endfor %}</tr>
{% endfor %}</table></div>
{% if g.trend %}<h3>Retrieval metrics across the runs of {{ g.name }}</h3>
{{ g.trend }}
{% endif %}</div>
{% endfor %}{% if broken %}<h2>Skipped run directories</h2>
<ul>{% for name, reason in broken %}<li><code>{{ name }}</code>: {{ reason }}</li>{% endfor %}</ul>
{% endif %}<script>{{ js }}</script>
</body></html>
"""

_env = Environment(autoescape=True, keep_trailing_newline=True)
_env.globals.update(short=_short, css=Markup(CSS), index_css=Markup(INDEX_CSS), js=Markup(COMPARE_JS))


def flatten(d: dict, prefix: str = "") -> dict:
    """Dotted keys of a nested config (``retrieval.mode``; ``retrieval.score_floors.minilm``)."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _shown(v) -> str:
    return "null" if v is None else (str(v).lower() if isinstance(v, bool) else str(v))


def settings_diff(config: dict, defaults: dict | None = None) -> list[str]:
    """``key=value`` for every setting of ``config`` that differs from the defaults (or that the
    defaults no longer have), sorted; ``paths.*`` left out."""
    base = flatten(defaults if defaults is not None else Settings().to_dict())
    mine = flatten(config or {})
    return [f"{k}={_shown(v)}" for k, v in sorted(mine.items())
            if not k.startswith(IGNORED_PREFIXES) and (k not in base or base[k] != v)]


def _run_config(run_dir: Path, m: dict) -> dict:
    """The config the run saved: metrics.json's copy, else config.yaml."""
    if isinstance(m.get("config"), dict):
        return m["config"]
    p = run_dir / "config.yaml"
    if p.exists():
        loaded = yaml.safe_load(p.read_text(encoding="utf-8"))
        return loaded if isinstance(loaded, dict) else {}
    return {}


def known_comparisons(reports_dir: Path) -> list[dict]:
    """The comparisons ``adiyan compare`` wrote (reports/compare/A__B/compare.json), for the widget."""
    out = []
    for c in sorted((Path(reports_dir) / "compare").glob("*/compare.json")):
        try:
            r = json.loads(c.read_text(encoding="utf-8"))
            out.append({"a": str(r["a"]["run_id"]), "b": str(r["b"]["run_id"]),
                        "href": f"compare/{quote(c.parent.name)}/index.html"})
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a half-written comparison is simply not linked
    return out


def _group_rows(runs: list[dict], defaults: dict) -> tuple[list, list]:
    """Columns and rows of one group, best marked within it."""
    # a judged mean's sample size is shown in its cell, not as a column of its own
    cols = list(dict.fromkeys((g, n) for m in reversed(runs) for g, vals in m["metrics"].items()
                              for n in vals if not (n.endswith(".n") and n[:-2] in vals)))
    best = {}
    for g, n in cols:
        d = _direction(g, n)
        vals = [v for m in runs if (v := _num(m["metrics"].get(g, {}).get(n))) is not None
                and not judged_unreliable(m["metrics"], g, n)]
        if len(vals) >= 2 and d != M.NEUTRAL:
            best[(g, n)] = max(vals) if d == M.HIGHER else min(vals)

    def model(m, role):
        x = (m.get("models") or {}).get(role)
        return x.get("id", "—") if isinstance(x, dict) else (x or "—")

    rows = []
    for m in runs:
        cells = []
        for g, n in cols:
            v = m["metrics"].get(g, {}).get(n)
            size = _n_of(m["metrics"], g, n)
            bad = v is not None and judged_unreliable(m["metrics"], g, n)
            cells.append({"text": ("" if v is None else fmt(v)) + (f" (n={size})" if v is not None and size is not None
                                                                  else ""),
                          "unreliable": bad, "best": not bad and (g, n) in best and _num(v) == best[(g, n)]})
        rows.append({"run_id": m["run_id"], "href": f"{quote(m['_dir'])}/report.html",
                     "created_at": m.get("created_at") or "—", "embedder": model(m, "embedder"),
                     "llm": model(m, "llm"), "config": _short(m.get("config_hash")), "cells": cells,
                     "diff": settings_diff(m["_config"], defaults),
                     "warnings": [w for w in m.get("warnings") or [] if isinstance(w, dict) and "name" in w]})
    return cols, rows


def write_index(reports_dir: Path) -> Path:
    """Write reports_dir/index.html: runs grouped by (evalset, dataset hash), newest first within a
    group, best per group; broken runs listed, not fatal."""
    reports_dir = Path(reports_dir)
    runs, broken = [], []
    for d in sorted(p for p in reports_dir.iterdir() if p.is_dir()):
        if not (d / "metrics.json").exists():
            continue
        try:
            m = _load_run(d / "metrics.json")
            m["_config"] = _run_config(d, m)
        except (OSError, ValueError, yaml.YAMLError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            broken.append((d.name, f"{type(e).__name__}: {e}"))
            continue
        m["_dir"] = d.name
        runs.append(m)
    runs.sort(key=lambda m: (_parse_time(m.get("created_at")), str(m["run_id"])), reverse=True)
    by_key: dict[tuple, list] = {}
    for m in runs:  # groups in order of their newest run
        ds = m.get("dataset") if isinstance(m.get("dataset"), dict) else {}
        by_key.setdefault((str(ds.get("name", "—")), str(ds.get("hash") or "")), []).append(m)
    defaults = Settings().to_dict()
    groups = []
    for (name, h), members in by_key.items():
        cols, rows = _group_rows(members, defaults)
        groups.append({"name": name, "hash": h or None, "cols": cols, "rows": rows,
                       "trend": _plot_trend(members) if len(members) >= 2 else None})
    html = _env.from_string(INDEX_TEMPLATE).render(
        groups=groups, n_runs=len(runs), broken=broken,
        comparisons=json.dumps(known_comparisons(reports_dir), sort_keys=True))
    out = reports_dir / "index.html"
    out.write_text(html, encoding="utf-8")
    return out
