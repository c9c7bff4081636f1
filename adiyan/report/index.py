"""``reports/index.html``: every run, grouped so that only like runs are compared.

Runs are grouped by evalset and dataset hash: a run on ``adiyan_basic`` (1.0) is never "better"
than one on ``adiyan_full`` (0.95), and a changed evalset (another hash) is another group. Best
values are marked within a group only, in the metric registry's direction (an unregistered or
neutral metric is never best, nor is a metric an uncalibrated judge scored). Each run shows the
settings that differ from today's defaults (``adiyan.config``), computed from the config the run
saved (``paths.*`` left out: where files go is not what was measured). Two runs can be picked
with checkboxes: a small inline script (the page's only script; no network) shows the
``invoke compare A B`` command and links the comparison page when ``reports/compare/`` has it.

Each group's table shows the run (a frozen first column, its pick box inside), the date, the
headline metrics, the settings and warnings without a horizontal scroll; the other columns
(models, config hash, every other metric) are one click away ("all columns"), scrolling under
the frozen run column. Every column sorts on a click on its header; one box filters the runs of
every group by text (run id, setting, model, warning). The same inline script does all of it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import quote

import yaml
from jinja2 import Environment
from markupsafe import Markup, escape

from ..config import Settings
from .. import metrics as M
from . import CSS, _direction, _load_run, _n_of, _num, _parse_time, _plot_trend, _short, fmt, judged_unreliable
from .summary import _headline_names

IGNORED_PREFIXES = ("paths.",)  # where files go, not what was measured

INDEX_CSS = """
.group{margin-top:2em}.diff code{background:#eef3fb;border-radius:3px;padding:0 3px;margin:1px;display:inline-block}
.defaults{color:#777}#compare-box{position:sticky;top:0;background:#fffbe6;border:1px solid #e6d98c;padding:.5em 1em;margin:1em 0}
#compare-cmd{font-size:1.05em}.scroll{overflow-x:auto;max-width:100%}
table.runs{margin:.3em 0;font-size:12.5px}table.runs td,table.runs th{padding:3px 4px}table.runs .date{color:#666;margin-left:1.6em}table.runs th{cursor:pointer;user-select:none}table.runs th[aria-sort=ascending]::after{content:" \\25B2"}
table.runs th[aria-sort=descending]::after{content:" \\25BC"}
table.runs .run{position:sticky;left:0;background:#fff;z-index:1;max-width:11em;box-shadow:1px 0 0 #ddd}table.runs th.run{background:#f3f3f3}
table.runs thead th:not(.run){max-width:7.5em;overflow-wrap:normal;word-break:normal}table.runs td.diff{max-width:15em}
table.runs td.diff code{overflow-wrap:normal}table.runs td.warn{max-width:11em}td.warn .badge{white-space:normal;overflow-wrap:normal;display:inline-block}table.runs td.date{white-space:nowrap}
#filter-box{margin:1em 0}#run-filter{width:22em;padding:2px 4px}.more-cols{margin:.2em 0 .6em;font-size:12px}
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
  function key(td){var t=(td?td.textContent:'').trim(), v=parseFloat(t);
    return t===''||t==='\u2014'?null:(isNaN(v)||!/^[-+]?[0-9.]/.test(t)?t.toLowerCase():v);}
  document.querySelectorAll('table.runs').forEach(function(table){
    var heads=table.tHead.rows[0].cells;
    Array.prototype.forEach.call(heads,function(th,col){
      th.title='click to sort';
      th.addEventListener('click',function(){
        var asc=th.getAttribute('aria-sort')!=='ascending', body=table.tBodies[0];
        Array.prototype.forEach.call(heads,function(h){h.removeAttribute('aria-sort');});
        th.setAttribute('aria-sort',asc?'ascending':'descending');
        var rows=Array.prototype.slice.call(body.rows);
        rows.sort(function(a,b){var x=key(a.cells[col]),y=key(b.cells[col]);
          if(x===null||y===null){return x===y?0:(x===null?1:-1);}
          if(typeof x!==typeof y){x=String(x);y=String(y);}
          return (x<y?-1:x>y?1:0)*(asc?1:-1);});
        rows.forEach(function(r){body.appendChild(r);});
      });
    });
  });
  document.querySelectorAll('button.more-cols').forEach(function(b){
    b.addEventListener('click',function(){var t=document.getElementById(b.getAttribute('data-table'));
      var all=t.classList.toggle('compact')===false; b.textContent=all?'headline columns only':b.getAttribute('data-label');});
  });
  var filter=document.getElementById('run-filter'), count=document.getElementById('filter-count');
  filter.addEventListener('input',function(){
    var words=filter.value.toLowerCase().split(/\s+/).filter(Boolean), shown=0, total=0;
    document.querySelectorAll('div.group').forEach(function(g){
      var any=false;
      g.querySelectorAll('table.runs tbody tr').forEach(function(r){
        var text=r.textContent.toLowerCase(), ok=words.every(function(w){return text.indexOf(w)>=0;});
        r.hidden=!ok; total++; if(ok){shown++;any=true;}
      });
      g.hidden=!any;
    });
    count.textContent=words.length?shown+' of '+total+' runs':'';
  });
})();
"""

INDEX_TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Evaluation runs</title><style>{{ css }}{{ index_css }}
{% for g in groups %}#runs-{{ loop.index }}.compact tr>:nth-child(n+{{ g.first_hidden }}){display:none}
{% endfor %}</style></head><body>
<h1>Evaluation runs ({{ n_runs }})</h1>
<p>Runs are grouped by evalset and dataset hash; the best value per column is marked <b>within a group only</b>, in the metric registry's direction. An unreliable judge's metrics are struck, badged and never best; a judged mean shows its sample size. "settings" lists what differs from the defaults (<code>paths.*</code> left out).</p>
<div id="compare-box" data-comparisons="{{ comparisons }}"><b>Compare two runs:</b> tick two boxes below. <code id="compare-cmd">pick two runs</code> <a id="compare-link" hidden></a></div>
<div id="filter-box"><label>Filter runs <input id="run-filter" type="search" placeholder="run id, setting, model, warning"></label> <span id="filter-count"></span> · click a column's header to sort</div>
{% for g in groups %}<div class="group" id="group-{{ loop.index }}">
<h2>{{ g.name }} <small>dataset hash <code title="{{ g.hash }}">{{ short(g.hash) }}</code> · {{ g.rows|length }} run(s)</small></h2>
<div class="scroll"><table class="runs compact" id="runs-{{ loop.index }}"><thead><tr><th class="run">run</th>{% for grp, n in g.head_cols %}<th>{{ grp|wbr }}<br>{{ n|wbr }}</th>{% endfor %}<th>settings</th><th>warnings</th><th>embedder</th><th>llm</th><th>config</th>{% for grp, n in g.more_cols %}<th>{{ grp|wbr }}<br>{{ n|wbr }}</th>{% endfor %}</tr></thead><tbody>
{% for r in g.rows %}<tr><td class="run"><input type="checkbox" class="pick" data-run="{{ r.run_id }}" aria-label="pick {{ r.run_id }}"> <a href="{{ r.href }}">{{ r.run_id }}</a><br><small class="date" title="{{ r.created_at }}">{{ r.date[0] }} {{ r.date[1] }}</small></td>{% for c in r.head_cells %}{{ cell(c) }}{% endfor %}<td class="diff">{% for d in r.diff %}<code>{{ d|wbr }}</code> {% else %}<span class="defaults">defaults</span>{% endfor %}</td><td class="warn">{% for w in r.warnings %}<span class="badge" title="{{ w.message }}">{{ w.name|wbr }}</span> {% endfor %}</td><td>{{ r.embedder }}</td><td>{{ r.llm }}</td><td><code>{{ r.config }}</code></td>{% for c in r.more_cells %}{{ cell(c) }}{% endfor %}</tr>
{% endfor %}</tbody></table></div>
<button type="button" class="more-cols" data-table="runs-{{ loop.index }}" data-label="all {{ g.n_cols }} columns">all {{ g.n_cols }} columns</button>
{% if g.trend %}<h3>Retrieval metrics across the runs of {{ g.name }}</h3>
{{ g.trend }}
{% endif %}</div>
{% endfor %}{% if broken %}<h2>Skipped run directories</h2>
<ul>{% for name, reason in broken %}<li><code>{{ name }}</code>: {{ reason }}</li>{% endfor %}</ul>
{% endif %}<script>{{ js }}</script>
</body></html>
"""

_env = Environment(autoescape=True, keep_trailing_newline=True)
# a metric name may wrap after _ . @ / (hit_rate@<wbr>4), never inside a word
_env.filters["wbr"] = lambda name: Markup(re.sub(r"([_.@/=])", r"\1<wbr>", str(escape(name))))
_env.globals.update(short=_short, css=Markup(CSS), index_css=Markup(INDEX_CSS), js=Markup(COMPARE_JS))
_CELL = _env.from_string('{% if c.unreliable %}<td class="num"><span class="unreliable">{{ c.text }}</span> '
                         '<span class="badge">unreliable judge</span></td>{% else %}<td class="num{% if c.best %} best'
                         '{% endif %}">{{ c.text }}</td>{% endif %}')
_env.globals["cell"] = lambda c: Markup(_CELL.render(c=c))


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
                     "warnings": [w for w in m.get("warnings") or [] if isinstance(w, dict) and "name" in w],
                     "date": _short_date(m.get("created_at"))})
    return cols, rows


def _short_date(s) -> tuple[str, str]:
    """2026-12-02T12:45:01+00:00 -> (2026-12-02, 12:45), shown on two lines (the full stamp in the title)."""
    s = str(s or "—")
    return (s[:10], s[11:16]) if len(s) >= 16 and s[10:11] == "T" else (s, "")


def _split_columns(cols: list, rows: list) -> tuple[list, list]:
    """Headline metric columns first (shown without scrolling), the rest behind "all columns";
    each row's cells split the same way."""
    present: dict[str, dict] = {}
    for g, n in cols:
        present.setdefault(g, {})[n] = None
    head = [c for c in _headline_names(present) if c in cols]
    # runs of one group may cut at different k (hit_rate@4, hit_rate@1): every k is a headline column
    at_k = [c for c in cols if c[0] == "retrieval" and c[1].split("@")[0] in ("hit_rate", "mrr") and "@" in c[1]
            and c[1] != "mrr@10" and c not in head]
    head = sorted(head + at_k, key=lambda c: (head.index(c) if c in head else
                                             next(i for i, h in enumerate(head) if h[1].split("@")[0] == c[1].split("@")[0]),
                                             c[1]))
    where = {c: i for i, c in enumerate(cols)}
    more = [c for c in cols if c not in head]
    for r in rows:
        r["head_cells"] = [r["cells"][where[c]] for c in head]
        r["more_cells"] = [r["cells"][where[c]] for c in more]
    return head, more


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
        head, more = _split_columns(cols, rows)
        # run, date, headline metrics, settings, warnings are shown; embedder, llm, config and the rest fold
        groups.append({"name": name, "hash": h or None, "cols": cols, "rows": rows, "head_cols": head,
                       "more_cols": more, "first_hidden": 1 + len(head) + 2 + 1, "n_cols": 1 + len(cols) + 5,
                       "trend": _plot_trend(members) if len(members) >= 2 else None})
    html = _env.from_string(INDEX_TEMPLATE).render(
        groups=groups, n_runs=len(runs), broken=broken,
        comparisons=json.dumps(known_comparisons(reports_dir), sort_keys=True))
    out = reports_dir / "index.html"
    out.write_text(html, encoding="utf-8")
    return out
