"""``invoke compare RUN_A RUN_B``: the page a researcher opens after every change.

Two runs of ``invoke eval`` on the same evalset (the dataset hash must agree: comparing unlike
runs is refused unless forced) are compared metric by metric and question by question:

- every metric both runs wrote, with its delta and whether that is better or worse (direction
  from the metric registry; LLM-judged metrics of an unreliable judge are marked and never
  called better or worse);
- paired randomization tests (Fisher, two-sided, seeded, Smucker et al. 2007) on the
  per-question scores both runs hold: hit, reciprocal rank, nDCG@10 and Recall@10 over the
  source ranking, answer keyword hit, and the RAGAS per-row scores;
- beside both, with runs that measured their repeat spread (``eval.repeats``, :mod:`.repeats`):
  a difference smaller than NOISE_FACTOR x the pooled repeat SD of one run's value is flagged
  "within repeat noise" (a significant paired test on it is still shown, and still flagged);
- the questions that flipped: hit → miss, miss → hit, answer keyword gained / lost, a private
  chunk leaked in one run only, with both runs' retrieved context side by side.

Written to ``reports/compare/<A>__<B>/index.html`` and ``compare.json``; a summary is printed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from jinja2 import Environment

from .. import metrics as M
from .ir_metrics import fisher_randomization_p, holm, per_query
from .repeats import NOISE_FACTOR, within_noise

SEED = 42
PERMUTATIONS = 10_000
ALPHA = 0.05


class CompareError(ValueError):
    """Two runs that cannot be compared; the message says why."""


@dataclass
class Run:
    run_id: str
    dir: Path
    metrics: dict
    questions: list[dict]

    @property
    def dataset_hash(self) -> str:
        return (self.metrics.get("dataset") or {}).get("hash", "")

    def repeat_sd(self, metric: str) -> float | None:
        """The SD of this run's ``group/name`` over reruns (``sd_run`` of its repeat split), if measured."""
        d = ((self.metrics.get("repeats") or {}).get("metrics") or {}).get(metric) or {}
        return d.get("sd_run")

    @property
    def judge_reliable(self) -> bool:
        return bool(((self.metrics.get("metrics") or {}).get("ragas_llm") or {}).get("judge_reliable"))


def resolve_run(reports_dir: Path, name: str) -> Path:
    """A run folder by path, by run id, or by a unique prefix of a run id."""
    p = Path(name)
    if (p / "metrics.json").is_file():
        return p
    cands = [d for d in Path(reports_dir).iterdir() if d.is_dir() and d.name.startswith(name)
             and (d / "metrics.json").is_file()] if Path(reports_dir).is_dir() else []
    if len(cands) == 1:
        return cands[0]
    if not cands:
        raise CompareError(f"no run {name!r} in {reports_dir} (give a run id, a unique prefix or a run folder)")
    raise CompareError(f"run {name!r} is ambiguous: {', '.join(sorted(c.name for c in cands))}")


def load_run(run_dir: Path) -> Run:
    run_dir = Path(run_dir)
    try:
        m = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
        rows = [json.loads(x) for x in (run_dir / "questions.jsonl").read_text(encoding="utf-8").splitlines() if x]
    except (OSError, ValueError) as exc:
        raise CompareError(f"{run_dir}: not a readable run ({type(exc).__name__}: {exc})") from None
    return Run(m.get("run_id", run_dir.name), run_dir, m, rows)


def _num(v):
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else (float(v) if isinstance(v, bool) else None)


def metric_deltas(a: Run, b: Run) -> list[dict]:
    """One row per metric both runs wrote: values, delta, better / worse / same by the registry."""
    out = []
    ga, gb = a.metrics.get("metrics") or {}, b.metrics.get("metrics") or {}
    for group in ga:
        for name, va in ga[group].items():
            vb = (gb.get(group) or {}).get(name)
            xa, xb = _num(va), _num(vb)
            if xa is None or xb is None:
                continue
            try:
                meta = M.lookup(group, name)
            except M.UnregisteredMetric:
                meta = None
            unreliable = bool(meta and meta.judged and not (a.judge_reliable and b.judge_reliable))
            delta = xb - xa
            if meta is None or meta.direction == M.NEUTRAL or unreliable or abs(delta) < 1e-12:
                verdict = "same" if abs(delta) < 1e-12 else ("unreliable" if unreliable else "changed")
            else:
                verdict = "better" if (delta > 0) == (meta.direction == M.HIGHER) else "worse"
            out.append({"group": group, "name": name, "a": xa, "b": xb, "delta": delta, "verdict": verdict,
                        "direction": meta.direction if meta else None, "judged": bool(meta and meta.judged),
                        "unreliable": unreliable,
                        "noise": within_noise(delta, a.repeat_sd(f"{group}/{name}"), b.repeat_sd(f"{group}/{name}"))})
    return out


def _per_question_scores(run: Run) -> dict[str, dict[str, float]]:
    """{score name: {question id: value}} for the scores a paired test can use."""
    scores: dict[str, dict[str, float]] = {"hit": {}, "reciprocal_rank": {}, "keyword_hit": {}}
    qrels, src_run = {}, {}
    for r in run.questions:
        qid = str(r["id"])
        if r.get("hit") is not None:
            scores["hit"][qid] = float(r["hit"])
            scores["reciprocal_rank"][qid] = float(r["reciprocal_rank"])
            qrels[qid] = {s: int((r.get("gold_grades") or {}).get(s, 1)) for s in r.get("gold_sources") or []}
            ranked = r.get("ranked_sources") or [c["source"] for c in r.get("retrieved") or []]
            src_run[qid] = {}
            for rank, s in enumerate(ranked, 1):
                src_run[qid].setdefault(s, 1.0 / rank)
        if r.get("keyword_hit") is not None:
            scores["keyword_hit"][qid] = float(r["keyword_hit"])
        for name, v in (r.get("ragas") or {}).items():
            if isinstance(v, (int, float)):
                scores.setdefault(f"ragas.{name}", {})[qid] = float(v)
    if qrels:
        for metric in ("ndcg@10", "recall@10"):
            scores[metric] = per_query(qrels, src_run, metric)
    return {k: v for k, v in scores.items() if v}


# a paired test's per-question score -> the run metric it is the mean of (its repeat split's key)
_SCORE_METRIC = {"hit": "retrieval/hit_rate@{k}", "reciprocal_rank": "retrieval/mrr@{k}",
                 "keyword_hit": "answer/keyword_recall"}


def paired_tests(a: Run, b: Run, *, n_permutations: int = PERMUTATIONS, seed: int = SEED) -> list[dict]:
    """Fisher randomization tests on every per-question score both runs hold (same questions)."""
    sa, sb = _per_question_scores(a), _per_question_scores(b)
    out = []
    for name in sa:
        if name not in sb:
            continue
        qids = sorted(set(sa[name]) & set(sb[name]))
        if len(qids) < 2:
            continue
        xa = np.array([sa[name][q] for q in qids])
        xb = np.array([sb[name][q] for q in qids])
        p = 1.0 if np.allclose(xa, xb) else fisher_randomization_p(xa, xb, n_permutations, seed)
        metric = _SCORE_METRIC.get(name) or (f"ragas/{name[6:]}" if name.startswith("ragas.") else None)
        if metric and "{k}" in metric:
            metric = metric.format(k=(a.metrics.get("config") or {}).get("retrieval", {}).get("kb_top_k"))
        noise = within_noise(float(xb.mean() - xa.mean()), a.repeat_sd(metric), b.repeat_sd(metric)) if metric else None
        out.append({"score": name, "metric": metric, "n": len(qids), "mean_a": float(xa.mean()),
                    "mean_b": float(xb.mean()), "noise": noise,
                    "delta": float(xb.mean() - xa.mean()), "p_value": p,
                    "wins": int((xb > xa).sum()), "losses": int((xb < xa).sum()), "ties": int((xb == xa).sum())})
    # one comparison, several tests: decide on Holm's adjusted p (issue 44.5), the raw p shown beside
    adjusted = holm({t["score"]: t["p_value"] for t in out})
    for t in out:
        t["p_holm"] = adjusted[t["score"]]
        t["significant"] = t["p_holm"] < ALPHA
    return out


_TEST_OF_METRIC = {"retrieval/ndcg@10": "ndcg@10", "retrieval/recall@10": "recall@10"}


def mark_significance(metrics: list[dict], tests: list[dict]) -> None:
    """A metric row is coloured better / worse only when the paired test of its per-question score is
    significant after Holm's adjustment; otherwise it says "no difference shown" (or "no paired test"
    for a metric with no per-question score), and the page shows it grey (issue 41.5)."""
    by_metric = {t["metric"]: t for t in tests if t.get("metric")}
    by_metric.update({m: t for m, score in _TEST_OF_METRIC.items() for t in tests if t["score"] == score})
    for m in metrics:
        t = by_metric.get(f"{m['group']}/{m['name']}")
        m["p_holm"] = t["p_holm"] if t else None
        if m["verdict"] not in ("better", "worse"):
            m["shown"] = m["verdict"]
        elif t is None:
            m["shown"] = "no paired test"
        else:
            m["shown"] = m["verdict"] if t["significant"] else "no difference shown"


def flipped_questions(a: Run, b: Run) -> list[dict]:
    """Questions whose outcome changed, with both runs' retrieved context."""
    by_b = {str(r["id"]): r for r in b.questions}
    out = []
    for ra in a.questions:
        rb = by_b.get(str(ra["id"]))
        if rb is None:
            continue
        changes = []
        if ra.get("hit") is not None and rb.get("hit") is not None and bool(ra["hit"]) != bool(rb["hit"]):
            changes.append("hit → miss" if ra["hit"] else "miss → hit")
        if ra.get("keyword_hit") is not None and rb.get("keyword_hit") is not None \
                and bool(ra["keyword_hit"]) != bool(rb["keyword_hit"]):
            changes.append("keyword lost" if ra["keyword_hit"] else "keyword gained")
        if bool(ra.get("leaked_private")) != bool(rb.get("leaked_private")):
            changes.append("private leak " + ("fixed" if ra.get("leaked_private") else "introduced"))
        if changes:
            out.append({"id": ra["id"], "question": ra.get("question"), "kind": ra.get("kind"), "changes": changes,
                        "gold_sources": ra.get("gold_sources"),
                        "a": {"retrieved": ra.get("retrieved") or [], "answer": ra.get("answer")},
                        "b": {"retrieved": rb.get("retrieved") or [], "answer": rb.get("answer")}})
    return out


def config_diff(a: Run, b: Run) -> list[dict]:
    """Settings that differ between the two runs (dotted keys)."""
    def flat(d, prefix=""):
        out = {}
        for k, v in (d or {}).items():
            if isinstance(v, dict):
                out.update(flat(v, f"{prefix}{k}."))
            else:
                out[f"{prefix}{k}"] = v
        return out
    fa, fb = flat(a.metrics.get("config")), flat(b.metrics.get("config"))
    return [{"key": k, "a": fa.get(k), "b": fb.get(k)} for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)]


def floor_confound(a: Run, b: Run) -> dict | None:
    """The dense score floor differs between the runs (applied in one, not the other, or another
    value), often with no floor setting in the diff: e.g. two embedders, one of whose calibrated
    floors clears ``retrieval.floor_min_j`` and one not. Every retrieval delta then includes the floor's cut, not
    only the settings that differ; None when both runs applied the same floor."""
    fa, fb = a.metrics.get("floor") or {}, b.metrics.get("floor") or {}
    if not fa or not fb:
        return None
    if fa.get("floor") == fb.get("floor"):  # the floor the pipeline applied (the default when none cleared)
        return None

    def side(f):
        return f"{f.get('floor')} ({f.get('source') if f.get('applied') else 'default'}, {f.get('embedder_id')})"
    return {"a": side(fa), "b": side(fb),
            "message": "the dense score floor differs between the runs: A applies " + side(fa) + ", B "
                       + side(fb) + "; the deltas include the floor's cut, not only the settings that differ "
                       "(set retrieval.use_calibrated_floors=false, or the same retrieval.score_floors, on both "
                       "to compare the rest)"}


def compare_runs(run_a: Path, run_b: Path, out_root: Path, *, force: bool = False) -> tuple[Path, dict]:
    """Compare two run folders; writes index.html and compare.json under ``out_root``."""
    a, b = load_run(run_a), load_run(run_b)
    if a.dataset_hash != b.dataset_hash and not force:
        raise CompareError(f"{a.run_id} and {b.run_id} ran on different data (dataset hash "
                           f"{a.dataset_hash[:12]} vs {b.dataset_hash[:12]}): their questions cannot be paired; "
                           "pass --force to compare the metrics anyway")
    tests = paired_tests(a, b) if a.dataset_hash == b.dataset_hash else []
    metrics = metric_deltas(a, b)
    mark_significance(metrics, tests)
    result = {"a": {"run_id": a.run_id, "dir": str(a.dir), "dataset": a.metrics.get("dataset", {}).get("name"),
                    "config_hash": a.metrics.get("config_hash"), "judge_reliable": a.judge_reliable},
              "b": {"run_id": b.run_id, "dir": str(b.dir), "dataset": b.metrics.get("dataset", {}).get("name"),
                    "config_hash": b.metrics.get("config_hash"), "judge_reliable": b.judge_reliable},
              "same_data": a.dataset_hash == b.dataset_hash, "config_diff": config_diff(a, b),
              "floor_confound": floor_confound(a, b),
              "metrics": metrics,
              "paired_tests": tests,
              "flipped": flipped_questions(a, b) if a.dataset_hash == b.dataset_hash else [],
              "test": {"kind": "Fisher randomization, two-sided", "permutations": PERMUTATIONS, "seed": SEED,
                       "alpha": ALPHA, "adjustment": "Holm over the paired tests of this comparison"},
              "repeat_noise": {"factor": NOISE_FACTOR, "a": _repeat_head(a), "b": _repeat_head(b),
                               "rule": f"|delta| < {NOISE_FACTOR:g} x the pooled repeat SD of one run's value "
                                       "(sqrt((system + judge variance) / n) of each run's eval.repeats split)"}}
    out = Path(out_root) / f"{_slug(a.run_id)}__{_slug(b.run_id)}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare.json").write_text(json.dumps(result, indent=2, ensure_ascii=False), encoding="utf-8")
    (out / "index.html").write_text(_env.from_string(TEMPLATE).render(r=result, fmt=_fmt), encoding="utf-8")
    return out, result


def summary_lines(result: dict) -> list[str]:
    lines = [f"compare {result['a']['run_id']} → {result['b']['run_id']}"
             + ("" if result["same_data"] else "  (DIFFERENT DATA: metrics only)")]
    for d in result["config_diff"]:
        lines.append(f"  setting {d['key']}: {d['a']} → {d['b']}")
    if result.get("floor_confound"):
        lines.append(f"  CONFOUND: {result['floor_confound']['message']}")
    for m in result["metrics"]:
        if m["verdict"] in ("better", "worse", "unreliable") or (m["verdict"] == "changed"):
            tag = "UNRELIABLE JUDGE" if m["unreliable"] else m.get("shown", m["verdict"])
            lines.append(f"  {m['group']}/{m['name']}: {_fmt(m['a'])} → {_fmt(m['b'])} ({m['delta']:+.4f}, {tag})"
                         + _noise_tag(m.get("noise")))
    for t in result["paired_tests"]:
        if t["delta"]:
            lines.append(f"  paired {t['score']}: {t['mean_a']:.4f} → {t['mean_b']:.4f}, p={t['p_value']:.4f}, "
                         f"Holm-adjusted p={t.get('p_holm', t['p_value']):.4f}"
                         + (" significant" if t["significant"] else " (no difference shown)") + f" (n={t['n']})"
                         + _noise_tag(t.get("noise")))
    lines.append(f"  {len(result['flipped'])} question(s) flipped")
    return lines


def _repeat_head(run: Run) -> dict | None:
    r = run.metrics.get("repeats")
    return {k: r.get(k) for k in ("repeats", "judge_repeats", "answer_seeds", "judge_seeds")} if r else None


def _noise_tag(noise: dict | None) -> str:
    if not noise:
        return ""
    return (f"  WITHIN REPEAT NOISE (< {noise['threshold']:.4f})" if noise["within_noise"]
            else f"  beyond repeat noise (> {noise['threshold']:.4f})")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(text))


def _fmt(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.4f}".rstrip("0").rstrip(".") if abs(v) < 1e6 else f"{v:.3g}"
    return str(v)


_env = Environment(autoescape=True, keep_trailing_newline=True)

TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>compare {{ r.a.run_id }} → {{ r.b.run_id }}</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:24px;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:8px 0 20px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f4}.better{color:#1b7f3b;font-weight:600}.worse{color:#b3261e;font-weight:600}.same{color:#777}
.unreliable{color:#999;text-decoration:line-through}.badge{background:#eee;border-radius:3px;padding:0 4px;font-size:11px}
.noise{background:#fde9c8}.ctx{font-size:12px;max-width:520px}.ctx li{margin-bottom:4px}.sig{font-weight:700}
</style></head><body>
<h1>Run {{ r.a.run_id }} → {{ r.b.run_id }}</h1>
<p>A: {{ r.a.dataset }} <code>{{ (r.a.config_hash or '')[:12] }}</code> · B: {{ r.b.dataset }}
<code>{{ (r.b.config_hash or '')[:12] }}</code>{% if not r.same_data %} · <b>different data: questions not paired</b>{% endif %}</p>
<h2>Settings that differ</h2>
{% if r.config_diff %}<table><tr><th>setting</th><th>A</th><th>B</th></tr>
{% for d in r.config_diff %}<tr><td><code>{{ d.key }}</code></td><td>{{ d.a }}</td><td>{{ d.b }}</td></tr>{% endfor %}</table>
{% else %}<p>none: the same configuration.</p>{% endif %}
{% if r.floor_confound %}<p class="warn"><b>Confound:</b> {{ r.floor_confound.message }}</p>{% endif %}
<h2>Metrics</h2>
{% if r.repeat_noise.a or r.repeat_noise.b %}<p>Repeat noise ({{ r.repeat_noise.rule }}): A
{% if r.repeat_noise.a %}{{ r.repeat_noise.a.repeats }} repeats x {{ r.repeat_noise.a.judge_repeats }} judgings{% else %}not measured{% endif %},
B {% if r.repeat_noise.b %}{{ r.repeat_noise.b.repeats }} repeats x {{ r.repeat_noise.b.judge_repeats }} judgings{% else %}not measured{% endif %}.</p>{% endif %}
{% set has_noise = r.repeat_noise.a or r.repeat_noise.b %}{% if not has_noise %}<p><small>Neither run repeated its answers (<code>eval.repeats</code> 1), so there is no repeat-noise column: set <code>eval.repeats</code> above 1 on both runs to see whether a difference is larger than the system's own run-to-run spread.</small></p>{% endif %}
<table><tr><th>metric</th><th>A</th><th>B</th><th>Δ</th><th>verdict</th>{% if has_noise %}<th>repeat noise</th>{% endif %}</tr>
{% for m in r.metrics %}<tr class="{{ 'unreliable' if m.unreliable else '' }}"><td>{{ m.group }}/{{ m.name }}
{% if m.unreliable %}<span class="badge">unreliable judge</span>{% endif %}</td><td>{{ fmt(m.a) }}</td>
<td>{{ fmt(m.b) }}</td><td class="{{ m.shown if m.shown in ('better', 'worse') else 'same' }}">{{ '%+.4f' % m.delta }}</td><td class="{{ m.shown if m.shown in ('better', 'worse') else 'same' }}">{{ m.shown or m.verdict }}{% if m.p_holm is not none %} <small>(Holm p {{ '%.3f' % m.p_holm }})</small>{% endif %}</td>
{% if has_noise %}<td>{% if m.noise %}{% if m.noise.within_noise %}<span class="badge noise">within repeat noise</span>{% else %}beyond{% endif %}
(threshold {{ '%.4f' % m.noise.threshold }}){% else %}not measured for this metric{% endif %}</td>{% endif %}</tr>
{% endfor %}</table>
<h2>Paired tests per question</h2>
<p>{{ r.test.kind }}, {{ r.test.permutations }} permutations, seed {{ r.test.seed }}; significant when Holm's adjusted p (over the {{ r.paired_tests|length }} tests of this comparison) is under {{ r.test.alpha }}. A metric above is coloured better or worse only then; otherwise it is grey and says "no difference shown".</p>
<table><tr><th>score</th><th>n</th><th>mean A</th><th>mean B</th><th>Δ</th><th>p</th><th>Holm-adjusted p</th><th>B wins / losses / ties</th>{% if has_noise %}<th>repeat noise</th>{% endif %}</tr>
{% for t in r.paired_tests %}<tr><td>{{ t.score }}</td><td>{{ t.n }}</td><td>{{ fmt(t.mean_a) }}</td><td>{{ fmt(t.mean_b) }}</td>
<td>{{ '%+.4f' % t.delta }}</td><td>{{ '%.4f' % t.p_value }}</td><td class="{{ 'sig' if t.significant else '' }}">{{ '%.4f' % t.p_holm }}{% if not t.significant %} <small>no difference shown</small>{% endif %}</td>
<td>{{ t.wins }} / {{ t.losses }} / {{ t.ties }}</td>
{% if has_noise %}<td>{% if t.noise %}{% if t.noise.within_noise %}<span class="badge noise">within repeat noise</span>{% else %}beyond{% endif %}{% else %}not measured for this score{% endif %}</td>{% endif %}</tr>{% endfor %}</table>
<h2>Questions that flipped ({{ r.flipped|length }})</h2>
{% for q in r.flipped %}<h3>{{ q.id }} ({{ q.kind }}): {{ q.changes|join(', ') }}</h3>
<p>{{ q.question }}<br><small>gold: {{ (q.gold_sources or [])|join(', ') }}</small></p>
<table><tr><th>A</th><th>B</th></tr><tr>{% for side in [q.a, q.b] %}<td class="ctx">
{% if side.answer is not none %}<p><b>answer:</b> {{ side.answer }}</p>{% endif %}<ol>
{% for c in side.retrieved %}<li><code>{{ c.source }}#{{ c.chunk_index }}</code> {{ fmt(c.score) }}<br>{{ c.text[:400] }}</li>{% endfor %}
</ol></td>{% endfor %}</tr></table>{% endfor %}
</body></html>
"""
