"""The summary a run report opens on, and the failures it lists first.

- **Headline metrics** with a 95% interval: a percentile bootstrap (2,000 resamples, seed 0, so
  the page is reproducible byte for byte) over the per-question values in ``questions.jsonl``.
  An interval is shown only when the mean of those values *is* the figure the run reported
  (nDCG@10 and Recall@10 are recomputed here from each question's source ranking, binary
  relevance, as ranx does); otherwise the cell says so instead of showing an interval for
  another number.
- **Deltas** against the previous run of the same evalset (same dataset name and hash, the
  newest created before this one, in the same reports folder) and against the evalset's
  baseline when one is set: ``reports/baselines.yaml`` maps an evalset name to a run id, e.g.
  ``adiyan_full: 20261203-101500-3fa2c1``. Better / worse comes from the metric registry's
  direction; an unreliable judge's metrics are never called either.
- **Failures**, worst first: private leaks, gold sources missed, wrong abstentions (declined an
  answerable question, answered an unanswerable one), answers missing their keywords.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import yaml
from jinja2 import Environment
from markupsafe import Markup

from .. import metrics as M
from ..stats import fisher_randomization_p, holm

BASELINES_FILE = "baselines.yaml"  # in the reports folder: {evalset name: run id}
BOOTSTRAP = 2000
IR_DEPTH = 10


def fmt(v) -> str:
    """Show numbers as the run wrote them (0.875 stays "0.875"), long floats cut to 4 places."""
    if v is None:
        return "—"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else repr(round(v, 4))
    if isinstance(v, dict):  # a nested record (cache statistics, a model's settings): key=value, not a Python dict
        return ", ".join(f"{k}={fmt(x)}" for k, x in v.items()) or "—"
    if isinstance(v, (list, tuple)):
        return ", ".join(fmt(x) for x in v) or "—"
    return str(v)


def num(v) -> float | None:
    """Numeric value for plotting/ranking, or None (bools and nulls are not numbers here)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return None if math.isnan(v) else float(v)


def parse_time(s) -> datetime:
    """created_at as an aware datetime (naive taken as UTC); unparsable sorts oldest."""
    try:
        t = datetime.fromisoformat(str(s))
    except ValueError:
        return datetime.min.replace(tzinfo=timezone.utc)
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


# ---------------------------------------------------------------- per-question values


def _distinct(sources) -> list[str]:
    return list(dict.fromkeys(sources or []))


def _ranking(q: dict) -> list[str]:
    """The question's source ranking: the kept ranking when written, else its top k."""
    return _distinct(q.get("ranked_sources") or [c.get("source") for c in q.get("retrieved") or []])


def recall_at(q: dict, k: int) -> float | None:
    gold = set(q.get("gold_sources") or [])
    if q.get("hit") is None or not gold:
        return None
    return len(gold & set(_ranking(q)[:k])) / len(gold)


def ndcg_at(q: dict, k: int) -> float | None:
    gold = set(q.get("gold_sources") or [])
    if q.get("hit") is None or not gold:
        return None
    dcg = sum(1 / math.log2(i + 2) for i, s in enumerate(_ranking(q)[:k]) if s in gold)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(gold), k)))
    return dcg / ideal


def _by_id(questions, key, keep) -> dict[str, float]:
    return {str(q.get("id")): float(v) for q in questions if keep(q) and (v := q.get(key)) is not None}


def _has_row_values(name: str, questions: list[dict]) -> bool:
    return any(name in (q.get("retrieval") or {}) for q in questions)


def _values_by_id(group: str, name: str, questions: list[dict], *, row_values: bool | None = None
                  ) -> dict[str, float] | None:
    """{question id: value} whose mean is ``group.name``, or None when the rows do not hold them.
    nDCG / Recall at IR_DEPTH come from the scorer's own per-row values when the rows have them
    (``row_values`` forces one source: a paired test reads both runs the same way)."""
    answerable = lambda q: q.get("hit") is not None
    if group == "retrieval" and name.startswith("hit_rate@"):
        return _by_id(questions, "hit", answerable)
    if group == "retrieval" and name.startswith("mrr@") and name != f"mrr@{IR_DEPTH}":
        return _by_id(questions, "reciprocal_rank", answerable)
    if group == "retrieval" and name in (f"ndcg@{IR_DEPTH}", f"recall@{IR_DEPTH}"):
        if _has_row_values(name, questions) if row_values is None else row_values:  # the scorer's own values
            return {str(q.get("id")): float(v) for q in questions
                    if (v := (q.get("retrieval") or {}).get(name)) is not None}
        f = ndcg_at if name.startswith("ndcg") else recall_at  # a run written before rows carried them
        return {str(q.get("id")): v for q in questions if (v := f(q, IR_DEPTH)) is not None}
    if group == "answer" and name == "keyword_recall":
        return _by_id(questions, "keyword_hit", answerable)
    if group == "answer" and name == "abstain_rate_unanswerable":
        return _by_id(questions, "abstained", lambda q: q.get("hit") is None)
    if group == "claims":  # the claim checker's per-question values (questions.jsonl "claims")
        return {str(q.get("id")): float(v) for q in questions if (v := (q.get("claims") or {}).get(name)) is not None}
    return None


def _per_question(group: str, name: str, questions: list[dict]) -> list[float] | None:
    """The per-question values whose mean is ``group.name``, or None when the rows do not hold them."""
    vals = _values_by_id(group, name, questions)
    return None if vals is None else list(vals.values())


def paired_holm(rows: list[dict], questions: list[dict], other_questions: list[dict] | None) -> dict[str, dict]:
    """Per headline metric (``group.name``), a paired randomization test of this run against another
    over the questions both answered (10,000 permutations, seed 42), Holm-adjusted over the metrics
    tested: ``{key: {"n", "p", "p_holm"}}``. A metric without per-question values in both runs has none."""
    if not other_questions:
        return {}
    raw: dict[str, tuple[int, float, float]] = {}
    for h in rows:
        if not h.get("ci"):  # only a figure its own rows reproduce is tested
            continue
        both = _has_row_values(h["name"], questions) and _has_row_values(h["name"], other_questions)
        mine, theirs = (_values_by_id(h["group"], h["name"], qs, row_values=both)
                        for qs in (questions, other_questions))
        if not mine or not theirs:
            continue
        shared = sorted(set(mine) & set(theirs))
        if len(shared) < 2:
            continue
        a = np.array([theirs[i] for i in shared])
        b = np.array([mine[i] for i in shared])
        raw[f"{h['group']}.{h['name']}"] = (len(shared), float((b - a).mean()), 1.0 if np.array_equal(a, b) else
                                            fisher_randomization_p(a, b, 10_000, 42))
    adjusted = holm({k: p for k, (_, _, p) in raw.items()})
    return {k: {"n": n, "paired_delta": d, "p": p, "p_holm": adjusted[k]} for k, (n, d, p) in raw.items()}


def bootstrap_ci(values: list[float], n: int = BOOTSTRAP, seed: int = 0) -> tuple[float, float]:
    """95% percentile bootstrap interval of the mean (seeded: the same values give the same interval)."""
    x = np.asarray(values, dtype=float)
    means = x[np.random.default_rng(seed).integers(0, len(x), size=(n, len(x)))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(lo), float(hi)


def _headline_names(metrics: dict) -> list[tuple[str, str]]:
    """The handful shown first, in this order, when the run has them."""
    retrieval = list((metrics.get("retrieval") or {}))
    first = lambda prefix: next((n for n in retrieval if n.startswith(prefix) and n != f"mrr@{IR_DEPTH}"), None)
    wanted = [("retrieval", first("hit_rate@")), ("retrieval", first("mrr@")), ("retrieval", f"ndcg@{IR_DEPTH}"),
              ("retrieval", f"recall@{IR_DEPTH}"), ("answer", "keyword_recall"),
              ("answer", "abstain_rate_unanswerable"), ("claims", "claim_faithfulness"),
              ("claims", "claim_hallucination"), ("claims", "claim_f1"), ("privacy", "private_chunks_leaked"),
              ("privacy", "probes_leaked"), ("ocr", "hit_rate")]
    return [(g, n) for g, n in wanted if n and n in (metrics.get(g) or {})]


def headline(metrics: dict, questions: list[dict]) -> list[dict]:
    """[{group, name, value, n, ci, why}] for the headline metrics; ``ci`` only when the per-question
    values reproduce ``value`` (``why`` says why not)."""
    out = []
    for g, n in _headline_names(metrics):
        value = metrics[g][n]
        row = {"group": g, "name": n, "value": value, "n": None, "ci": None, "why": ""}
        vals = _per_question(g, n, questions)
        if g == "privacy":
            row["why"] = "a count: must be 0"
        elif not vals:
            row["why"] = "no per-question values in questions.jsonl"
        elif num(value) is None or abs(sum(vals) / len(vals) - num(value)) > 5e-4:
            row["why"] = "the per-question values do not reproduce this figure"
        else:
            row.update(n=len(vals), ci=bootstrap_ci(vals))
        out.append(row)
    return out


# ---------------------------------------------------------------- other runs


def _read_metrics(path: Path) -> dict | None:
    try:
        m = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return m if isinstance(m, dict) and isinstance(m.get("metrics"), dict) else None


def _same_data(a: dict, b: dict) -> bool:
    da, db = a.get("dataset") or {}, b.get("dataset") or {}
    return isinstance(da, dict) and isinstance(db, dict) and da.get("name") == db.get("name") \
        and da.get("hash") == db.get("hash")


def previous_run(run_dir: Path, m: dict) -> tuple[str, dict] | None:
    """(folder name, metrics.json) of the newest run created before this one on the same data."""
    me = (parse_time(m.get("created_at")), str(m.get("run_id", run_dir.name)))
    best = None
    for p in sorted(run_dir.parent.glob("*/metrics.json")):
        if p.parent == run_dir or (o := _read_metrics(p)) is None or not _same_data(m, o):
            continue
        key = (parse_time(o.get("created_at")), str(o.get("run_id", p.parent.name)))
        if key < me and (best is None or key > best[0]):
            best = (key, p.parent.name, o)
    return (best[1], best[2]) if best else None


def baseline_run(run_dir: Path, m: dict) -> tuple[str, dict | None, str] | None:
    """(run id, its metrics.json or None, note) of the evalset's baseline, when one is set."""
    path = run_dir.parent / BASELINES_FILE
    name = (m.get("dataset") or {}).get("name")
    if not path.is_file() or not name:
        return None
    try:
        table = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        return (str(path.name), None, f"{path}: not valid YAML: {e}")
    if not isinstance(table, dict) or name not in table:
        return None
    rid = str(table[name])
    if rid == str(m.get("run_id")):
        return (rid, None, "this run is the baseline")
    o = _read_metrics(run_dir.parent / rid / "metrics.json")
    if o is None:
        return (rid, None, f"{path.name} names {rid}, which has no readable metrics.json here")
    if not _same_data(m, o):
        return (rid, None, "the baseline ran on other data (another dataset hash): no delta")
    return (rid, o, "")


def _unreliable(groups: dict, group: str, name: str) -> bool:
    try:
        judged = M.is_judged(group, name)
    except M.UnregisteredMetric:
        return False
    return judged and num((groups.get("ragas_llm") or {}).get("judge_reliable")) != 1.0


MUST_BE_ZERO = ("private_chunks_leaked", "probes_leaked")  # counts: any change is coloured, no test needed


def delta(metrics: dict, other: dict | None, group: str, name: str, test: dict | None = None,
          tested: bool = False) -> dict | None:
    """{text, cls, title} of this run's value minus the other's, judged by the registry's direction and
    coloured better / worse only when its paired test (``test``: :func:`paired_holm`'s entry) is
    significant after Holm; with ``tested`` and no significant test it is grey, "no difference shown"."""
    if other is None:
        return None
    raw_a, raw_b = (metrics.get(group) or {}).get(name), (other.get(group) or {}).get(name)
    a, b = num(raw_a), num(raw_b)
    if a is None or b is None:
        return {"text": "—", "cls": "same", "title": "not in both runs"}
    d = a - b
    try:
        direction = M.direction(group, name)
    except M.UnregisteredMetric:
        direction = M.NEUTRAL
    if abs(d) < 1e-12:
        cls = "same"
    elif direction == M.NEUTRAL or _unreliable(metrics, group, name) or _unreliable(other, group, name):
        cls = "neutral"
    else:
        cls = "better" if (d > 0) == (direction == M.HIGHER) else "worse"
    title = f"{fmt(raw_b)} → {fmt(raw_a)}"
    if tested and cls in ("better", "worse") and name not in MUST_BE_ZERO:  # a leak is a count, not a sample
        if test is None:
            cls, title = "neutral", title + ": no paired test (no per-question values in both runs)"
        elif test["p_holm"] >= 0.05 or (test["paired_delta"] > 0) != (d > 0):
            cls, title = "neutral", title + f": no difference shown (paired test, Holm p {test['p_holm']:.3f})"
        else:
            title += f" (paired test, Holm p {test['p_holm']:.3f}, n {test['n']})"
    return {"text": f"{d:+.4g}" if d else "±0", "cls": cls, "title": title}


# ---------------------------------------------------------------- failures

REASONS = (  # (key, label), worst first
    ("leak", "private leak"), ("gold_missed", "gold missed"), ("abstained", "declined an answerable question"),
    ("answered", "answered an unanswerable question"), ("keywords", "answer missed its keywords"))


def failure_reasons(q: dict) -> list[str]:
    """The reason keys a question failed for (empty: it did not fail)."""
    out = []
    if q.get("leaked_private") or q.get("probe_leaked"):
        out.append("leak")
    if q.get("hit") is False:
        out.append("gold_missed")
    if q.get("hit") is not None and q.get("abstained") is True:
        out.append("abstained")
    if q.get("hit") is None and q.get("abstained") is False:
        out.append("answered")
    if q.get("keyword_hit") is False:
        out.append("keywords")
    return out


def failures(questions: list[dict]) -> list[dict]:
    """Failing questions, worst reason first (stable within a reason), each with ``reasons`` (labels)."""
    order = {k: i for i, (k, _) in enumerate(REASONS)}
    labels = dict(REASONS)
    rows = [(q, r) for q in questions if (r := failure_reasons(q))]
    rows.sort(key=lambda qr: order[qr[1][0]])
    return [{**q, "reasons": [labels[k] for k in r], "reason_keys": r} for q, r in rows]


def failure_counts(fails: list[dict]) -> list[tuple[str, int]]:
    return [(label, n) for key, label in REASONS if (n := sum(key in f["reason_keys"] for f in fails))]


# ---------------------------------------------------------------- the section

TEMPLATE = """<h2 id="summary">Summary</h2>
<p class="lede"><b>{{ ds.name or "—" }}</b> · {{ fmt(ds.n_questions) }} questions · {{ m.created_at or "—" }} · embedder {{ model("embedder") }} · llm {{ model("llm") }}{% if prev %} · previous run on the same data: <a href="../{{ prev[0] }}/report.html">{{ prev[0] }}</a> (<code>invoke compare {{ prev[0] }} {{ m.run_id }}</code>){% else %} · first run on this data here{% endif %}{% if base %} · baseline <b>{{ base[0] }}</b>{% if base[2] %} ({{ base[2] }}){% endif %}{% endif %}</p>
<table class="headline"><tr><th>metric</th><th>value</th><th>95% interval</th><th>n</th>{% if prev %}<th>Δ previous</th>{% endif %}{% if base and base[1] %}<th>Δ baseline</th>{% endif %}</tr>
{% for h in rows %}<tr class="hl"><th scope="row">{{ h.group }} · {{ h.name }}</th><td class="num big">{{ fmt(h.value) }}</td><td class="num">{% if h.ci %}[{{ "%.3f"|format(h.ci[0]) }}, {{ "%.3f"|format(h.ci[1]) }}]{% else %}<small>{{ h.why }}</small>{% endif %}</td><td class="num">{{ fmt(h.n) }}</td>{% if prev %}{% set d = h.d_prev %}<td class="num delta {{ d.cls }}" title="{{ d.title }}">{{ d.text }}</td>{% endif %}{% if base and base[1] %}{% set d = h.d_base %}<td class="num delta {{ d.cls }}" title="{{ d.title }}">{{ d.text }}</td>{% endif %}</tr>
{% endfor %}</table>
{% if prev or (base and base[1]) %}<p><small>A Δ is green or red only when a paired randomization test over the questions both runs answered is significant after Holm's adjustment over the metrics above; grey means no difference shown (hover a Δ for its p).</small></p>{% endif %}
<p class="counts">{% if fails %}<a href="#failures">{{ fails|length }} failing question(s)</a>: {% for label, n in counts %}{{ n }} {{ label }}{% if not loop.last %} · {% endif %}{% endfor %}{% else %}No failing questions.{% endif %}{% if m.regression_failed %} · <b class="worse">{{ m.regression_failed }} regression case(s) below their floor</b>{% endif %}</p>
"""

_env = Environment(autoescape=True, keep_trailing_newline=True)
_env.globals.update(fmt=fmt)


def _other_questions(run_dir: Path, rid: str) -> list[dict] | None:
    path = run_dir.parent / rid / "questions.jsonl"
    try:
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, ValueError):
        return None


def summary_section(run_dir: Path, m: dict, questions: list[dict], fails: list[dict]) -> Markup:
    run_dir = Path(run_dir)
    metrics = m.get("metrics") or {}
    prev, base = previous_run(run_dir, m), baseline_run(run_dir, m)
    rows = headline(metrics, questions)
    tests_prev = paired_holm(rows, questions, _other_questions(run_dir, prev[0]) if prev else None)
    tests_base = paired_holm(rows, questions, _other_questions(run_dir, base[0]) if base and base[1] else None)
    for h in rows:
        key = f"{h['group']}.{h['name']}"
        h["d_prev"] = delta(metrics, (prev[1].get("metrics") or {}) if prev else None, h["group"], h["name"],
                            tests_prev.get(key), tested=True)
        h["d_base"] = delta(metrics, (base[1].get("metrics") or {}) if base and base[1] else None, h["group"],
                            h["name"], tests_base.get(key), tested=True)
    def model(role):
        x = (m.get("models") or {}).get(role)
        return x.get("id", "—") if isinstance(x, dict) else (x or "—")

    return Markup(_env.from_string(TEMPLATE).render(m=m, ds=m.get("dataset") or {}, rows=rows, prev=prev, base=base,
                                                    fails=fails, counts=failure_counts(fails), model=model))
