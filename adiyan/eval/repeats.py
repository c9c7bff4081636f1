"""Where the variance comes from: ``eval.repeats`` and ``eval.judge_repeats`` (issue 25 item 4).

A run's metric is one draw: a sampling generator gives other answers on a rerun, a sampling judge
other verdicts on the same answer. With ``eval.repeats = N`` every question is answered N times
(repeat ``i`` with ``llm.seed + i``, retrieval redone each time) and, with a judge,
each repeat's answers are judged ``eval.judge_repeats = M`` times (judging ``j`` of repeat ``i``
with seed ``llm.seed + i*M + j``, part of the judge's cache key). Per metric, the score of
question ``q`` in repeat ``i``, judging ``j`` is ``y[q,i,j]``; the nested random-effects split
(one-way within repeat, then between repeats) is, per question,

- judge variance ``J_q`` = the mean over repeats of the variance across judgings (``ddof=1``):
  the same answer, different verdicts (needs M >= 2);
- between-repeat variance ``B_q`` = the variance across repeats of the per-repeat means
  ``mean_j y[q,i,j]`` (``ddof=1``), whose expectation is ``S + J / M``;

and over the questions ``judge = mean_q J_q``, ``system = max(0, mean_q B_q - judge / M)``: the
unbiased moment estimator, floored once after averaging (flooring every question before
averaging would bias a zero system variance upwards; the per-question values are kept in the
record unfloored). Both come with a percentile bootstrap 95% interval over questions
(:data:`BOOTSTRAP` resamples, seeded). A metric no judge computes (hit rate, keyword recall,
ROUGE...) has only the system part (M = 1, judge 0 by construction); retrieval is deterministic,
so its system part must come out exactly 0: a value that differs between repeats is reported as
such, never averaged away. With M = 1 and a judged metric the two parts cannot be separated: the
split says so (``judge`` None, ``system`` = system plus judge).

``sd_run`` is the standard deviation of one run's metric (one repeat, one judging) over reruns
with the same questions: ``sqrt((system + judge) / n)``. ``invoke compare`` calls a difference
between two runs smaller than :data:`NOISE_FACTOR` x their pooled ``sd_run`` "within repeat noise"
(:func:`within_noise`), beside the paired test. Variances that are exactly constant are exactly 0
(:func:`_var` never lets float rounding of a mean invent a spread).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

from ..factory import open_llm
from ..retrieval.pipeline import UnsupportedSetting
from .harness import answer_rows, question_rows
from .judge import judge_from_settings
from .ragas_metrics import score_llm

BOOTSTRAP = 2000
NOISE_FACTOR = 2.0  # |delta| < NOISE_FACTOR x pooled sd_run: "within repeat noise"
CI = 0.95


def _var(xs: Sequence[float]) -> float:
    """Sample variance (ddof=1); exactly 0.0 when every value is the same."""
    a = np.asarray(xs, dtype=float)
    if a.size < 2 or float(a.max()) == float(a.min()):
        return 0.0
    return float(a.var(ddof=1))


def _mean(xs: Sequence[float]) -> float:
    a = np.asarray(xs, dtype=float)
    return float(a[0]) if float(a.max()) == float(a.min()) else float(a.mean())


def _ci(samples: np.ndarray) -> list[float]:
    lo, hi = np.quantile(samples, [(1 - CI) / 2, 1 - (1 - CI) / 2])
    return [float(lo), float(hi)]


def decompose(values: Mapping[str, Sequence[Sequence[float | None]]], *, judged: bool, seed: int = 0,
              n_boot: int = BOOTSTRAP) -> dict:
    """The split of one metric from ``values[question][repeat][judging]`` (None: no score, e.g. a
    judge failure; a question enters only when all its N x M scores are present: one with some
    missing counts as incomplete, one with none as undefined).

    Returns ``{"n_questions", "n_incomplete", "n_undefined", "repeats", "judgings", "system_var", "judge_var",
    "system_sd", "judge_sd", "system_var_ci95", "judge_var_ci95", "sd_run", "repeat_means",
    "per_question"}`` (see the module docstring); ``judge_var`` is 0.0 for a metric no judge
    computes and None for a judged one judged once per repeat (not separable)."""
    complete, incomplete, undefined = {}, 0, 0
    shapes = {(len(v), len(v[0]) if len(v) else 0) for v in values.values()}
    if len(shapes) > 1:
        raise ValueError(f"every question needs the same repeats x judgings, got shapes {sorted(shapes)}")
    for q, rep in values.items():
        if all(x is None for r in rep for x in r):  # never defined (e.g. ROUGE of an unanswerable question)
            undefined += 1
            continue
        if any(x is None for r in rep for x in r):  # defined in some repeats or judgings only
            incomplete += 1
            continue
        complete[q] = [[float(x) for x in r] for r in rep]
    n_rep, n_judge = shapes.pop() if shapes else (0, 0)
    out = {"n_questions": len(complete), "n_incomplete": incomplete, "n_undefined": undefined, "repeats": n_rep,
           "judgings": n_judge, "judged": judged}
    if not complete or n_rep < 1:
        return {**out, "system_var": None, "judge_var": None, "system_sd": None, "judge_sd": None,
                "system_var_ci95": None, "judge_var_ci95": None, "sd_run": None, "repeat_means": [],
                "per_question": {}}
    qs = sorted(complete)
    between = np.array([_var([_mean(r) for r in complete[q]]) for q in qs])
    within = np.array([_mean([_var(r) for r in complete[q]]) for q in qs]) if n_judge >= 2 else None
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(qs), size=(n_boot, len(qs)))

    def split(b: np.ndarray, w: np.ndarray | None, axis=None):  # (system, judge) variance
        if w is None:
            return np.maximum(b.mean(axis=axis), 0.0), None
        wm = w.mean(axis=axis)
        return np.maximum(b.mean(axis=axis) - wm / n_judge, 0.0), wm

    sys_v, judge_v = split(between, within)
    sys_b, judge_b = split(between[idx], within[idx] if within is not None else None, axis=1)
    if not judged:
        judge_v, judge_b = 0.0, None
    system = float(sys_v)
    judge = None if judge_v is None else float(judge_v)
    total = system + (judge or 0.0)
    return {**out,
            "system_var": system, "judge_var": judge,
            "system_sd": math.sqrt(system), "judge_sd": None if judge is None else math.sqrt(judge),
            "system_var_ci95": _ci(sys_b) if system or sys_b.any() else [0.0, 0.0],
            "judge_var_ci95": (None if judge is None else [0.0, 0.0] if judge_b is None or not judge_b.any()
                               else _ci(judge_b)),
            "sd_run": math.sqrt(total / len(qs)),
            "repeat_means": [_mean([complete[q][i][j] for q in qs for j in range(n_judge)]) for i in range(n_rep)],
            "per_question": {q: {"between": float(b), **({"within": float(w)} if within is not None else {})}
                             for q, b, w in zip(qs, between, within if within is not None else [None] * len(qs))}}


def within_noise(delta: float, sd_a: float | None, sd_b: float | None, factor: float = NOISE_FACTOR) -> dict | None:
    """Is a difference between two runs inside their repeat spread? The pooled ``sd_run`` of the
    runs that measured it (one run's alone when only one did); None when neither did."""
    sds = [s for s in (sd_a, sd_b) if s is not None]
    if not sds:
        return None
    pooled = math.sqrt(sum(s * s for s in sds) / len(sds))
    return {"pooled_sd": pooled, "threshold": factor * pooled, "within_noise": abs(delta) < factor * pooled,
            "factor": factor}


# ---------------------------------------------------------------- collecting the repeats


@dataclass
class Repeats:
    """What a run with repeats collected: per metric ``"group/name"``, ``{question: [[score per
    judging] per repeat]}``; the seeds each repeat and judging ran with; judged or not per metric."""

    n: int
    m: int
    answer_seeds: list[int]
    judge_seeds: list[list[int]] = field(default_factory=list)
    scores: dict[str, dict[str, list[list[float | None]]]] = field(default_factory=dict)
    judged: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)

    def add(self, metric: str, repeat: int, per_question: Mapping[str, float | None], *, judging: int = 0,
            judged: bool = False) -> None:
        width = self.m if judged else 1
        table = self.scores.setdefault(metric, {})
        for q, v in per_question.items():
            cell = table.setdefault(str(q), [[None] * width for _ in range(self.n)])
            cell[repeat][judging] = None if v is None else float(v)
        if judged:
            self.judged.add(metric)

    def decomposition(self, *, seed: int = 0, n_boot: int = BOOTSTRAP) -> dict:
        return {name: decompose(self.scores[name], judged=name in self.judged, seed=seed, n_boot=n_boot)
                for name in sorted(self.scores)}

    def record(self, *, seed: int = 0, n_boot: int = BOOTSTRAP, **extra) -> dict:
        """The ``repeats`` block of metrics.json (without the per-question scores, which are in
        repeats.json)."""
        dec = self.decomposition(seed=seed, n_boot=n_boot)
        return {"repeats": self.n, "judge_repeats": self.m, "answer_seeds": self.answer_seeds,
                "judge_seeds": self.judge_seeds, "bootstrap": {"resamples": n_boot, "seed": seed, "ci": CI},
                "noise_factor": NOISE_FACTOR, "notes": self.notes, **extra,
                "metrics": {k: {f: v for f, v in d.items() if f != "per_question"} for k, d in dec.items()},
                "per_question": {k: d["per_question"] for k, d in dec.items()}}


def per_question_scores(rows: Sequence[dict], k: int) -> dict[str, dict[str, float | None]]:
    """The per-question scores of one repeat that metrics are means of: ``retrieval/hit_rate@k``,
    ``retrieval/mrr@k`` (answerable rows), ``answer/keyword_recall``, and every per-row RAGAS
    string score (``ragas/<name>``, from ``row["ragas"]``)."""
    out: dict[str, dict[str, float | None]] = {}
    for r in rows:
        q = str(r["id"])
        if r.get("hit") is not None:
            out.setdefault(f"retrieval/hit_rate@{k}", {})[q] = float(r["hit"])
            out.setdefault(f"retrieval/mrr@{k}", {})[q] = float(r["reciprocal_rank"])
            if r.get("answer") is not None:
                kh = r.get("keyword_hit")
                out.setdefault("answer/keyword_recall", {})[q] = None if kh is None else float(kh)
        for name, v in (r.get("ragas") or {}).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) or v is None:
                out.setdefault(f"ragas/{name}", {})[q] = None if v is None else float(v)
    return out


def judged_scores(per_row: Sequence[dict]) -> dict[str, dict[str, float | None]]:
    """``ragas_llm/<metric>`` per sampled question from :func:`adiyan.eval.ragas_metrics.score_llm`'s rows
    (a failed judgement is None: the question drops out of that metric's split, counted)."""
    out: dict[str, dict[str, float | None]] = {}
    for r in per_row:
        if not r.get("sampled"):
            continue
        for name, v in (r.get("scores") or {}).items():
            out.setdefault(f"ragas_llm/{name}", {})[str(r["id"])] = v
    return out


def collect(n: int, m: int, base_seed: int, k: int, answer: Callable[[int, int], list[dict]],
            judge: Callable[[int, int, int, list[dict]], Sequence[dict]] | None = None) -> Repeats:
    """Run the repeats: ``answer(i, seed)`` gives repeat ``i``'s answered, scored rows (retrieved
    again, answered with ``seed``), ``judge(i, j, seed, rows)`` judging ``j`` of them
    (``score_llm``'s per-row dicts); then :func:`score_repeats`."""
    return score_repeats([answer(i, base_seed + i) for i in range(n)], k, m=m, base_seed=base_seed, judge=judge)


def summary_lines(block: dict | None) -> list[str]:
    """The console lines of a run's repeat split."""
    if not block:
        return []
    lines = [f"  repeats: {block['repeats']} answers x {block['judge_repeats']} judgings per question "
             f"(answer seeds {block['answer_seeds']})"]
    lines += [f"    note: {n}" for n in block.get("notes") or []]
    for name, d in block["metrics"].items():
        if d.get("system_var") is None:
            continue
        judge = ("none (not judged)" if not d.get("judged") else "n/a (judged once)" if d["judge_var"] is None
                 else f"{d['judge_sd']:.4f}")
        lines.append(f"    {name}: system sd {d['system_sd']:.4f}, judge sd {judge}, run sd {d['sd_run']:.4f} "
                     f"(n={d['n_questions']}, repeat means {', '.join(f'{x:.4f}' for x in d['repeat_means'])})")
    return lines


# ---------------------------------------------------------------- invoke eval's repeats


def refuse(settings, llm, entry_point: str) -> list[str]:
    """Refuse, by name, repeat settings this run cannot honour; the notes the run records."""
    ev, notes = settings.eval, []
    if ev.repeats == 1 and ev.judge_repeats == 1:
        if ev.judge_temperature:
            raise UnsupportedSetting(f"eval.judge_temperature={ev.judge_temperature}", entry_point,
                                     "it is the temperature of repeated judgings (eval.judge_repeats > 1 or "
                                     "eval.repeats > 1); a single run's judge is greedy")
        return notes
    if ev.mode == "agent":
        raise UnsupportedSetting(f"eval.repeats={ev.repeats}", f"{entry_point} with eval.mode=agent",
                                 "the agent has its own repeats (eval.agent_repeats)")
    if ev.repeats > 1 and not ev.generate:
        raise UnsupportedSetting(f"eval.repeats={ev.repeats}", f"{entry_point} with eval.generate=false",
                                 "there is no answer stage to repeat")
    if ev.judge_repeats > 1 and not ev.judge:
        raise UnsupportedSetting(f"eval.judge_repeats={ev.judge_repeats}", entry_point,
                                 "no judge is configured (eval.judge)")
    if ev.judge_repeats > 1 and not ev.generate:
        raise UnsupportedSetting(f"eval.judge_repeats={ev.judge_repeats}", f"{entry_point} with eval.generate=false",
                                 "there are no answers to judge")
    if ev.judge_repeats > 1 and ev.judge_temperature == 0:
        raise UnsupportedSetting(f"eval.judge_repeats={ev.judge_repeats} with eval.judge_temperature=0", entry_point,
                                 "a greedy judge gives the same verdict on the same answer every time; set "
                                 "eval.judge_temperature > 0 to judge again")
    generative = llm is not None and getattr(llm, "generative", True)
    if ev.repeats > 1 and generative and settings.llm.temperature == 0:
        raise UnsupportedSetting(f"eval.repeats={ev.repeats} with llm.temperature=0", entry_point,
                                 f"{llm.id} decodes greedily: every repeat is the same answer; set "
                                 "llm.temperature > 0 to sample")
    if ev.repeats > 1 and not generative:
        notes.append(f"the answerer ({getattr(llm, 'id', 'none')}) is deterministic: its system spread is 0 by "
                     "construction (the repeats check that it is)")
    if ev.judge and ev.judge_repeats > 1:
        notes.append(f"the judge's calibration is the greedy judge's (temperature 0); the repeated judgings sample "
                     f"at eval.judge_temperature={ev.judge_temperature}")
    if ev.judge and ev.judge_repeats == 1:
        notes.append("each repeat is judged once (eval.judge_repeats=1): the judged metrics' split cannot "
                     "separate the judge's part from the system's (judge n/a, system = both)")
    return notes


def answer_repeats(settings, index, retriever, llm, cache, progress: bool = False) -> list:
    """Repeats 1..N-1 of the answer stage (repeat 0 is the run itself): each retrieves again and
    answers with ``llm.seed + i`` (a generative model reloaded under that seed; the extractive
    answerer is deterministic and reused). Their QuestionRows, answered, not yet scored."""
    out = []
    for i in range(1, settings.eval.repeats):
        s_i = settings.with_overrides({"llm.seed": settings.llm.seed + i})
        llm_i = open_llm(s_i) if getattr(llm, "generative", True) else llm
        q_i = question_rows(index, retriever, progress=progress, desc=f"retrieve (repeat {i})")
        answer_rows(q_i.rows, q_i.results, s_i, llm_i, cache, progress)
        out.append(q_i)
    return out


def judge_fn(settings, embedder, sample: int | None, stats: list, progress: bool = False):
    """Judging ``j`` of repeat ``i``: the configured judge at ``eval.judge_temperature`` under
    its own seed, on the same seeded sample of answerable questions as the run's judged metrics."""
    def judge(i: int, j: int, seed: int, rows: list[dict]) -> list[dict]:
        jd = judge_from_settings(settings, seed=seed, temperature=settings.eval.judge_temperature)
        answerable = [r for r in rows if r["hit"] is not None and r["retrieved"]]
        ragas_rows = [{"id": r["id"], "question": r["question"], "answer": r["answer"], "retrieved": r["retrieved"],
                       "gold_answer": r["gold_answer"], "gold_sources": r["gold_sources"]} for r in answerable]
        per_row, _ = score_llm(ragas_rows, jd, embedder, settings.eval.judge_metrics or None, sample=sample,
                               seed=settings.seed, progress=progress)
        stats.append({"repeat": i, "judging": j, "seed": seed, **jd.stats.as_dict()})
        return per_row

    return judge


def score_repeats(rows_by_repeat: Sequence[list[dict]], k: int, *, m: int, base_seed: int, judge=None,
                  notes: Sequence[str] = ()) -> Repeats:
    """The split's inputs from every repeat's scored rows (repeat 0 first) and, with ``judge``
    (``judge(i, j, seed, rows)``, e.g. :func:`judge_fn`), ``m`` judgings of each. The seeds:
    ``base_seed + i`` per repeat, ``base_seed + i*m + j`` per judging."""
    n = len(rows_by_repeat)
    m = m if judge else 1
    rep = Repeats(n, m, [base_seed + i for i in range(n)],
                  [[base_seed + i * m + j for j in range(m)] for i in range(n)] if judge else [], notes=list(notes))
    for i, rows in enumerate(rows_by_repeat):
        for metric, vals in per_question_scores(rows, k).items():
            rep.add(metric, i, vals)
        if judge:
            for j in range(m):
                for metric, vals in judged_scores(judge(i, j, rep.judge_seeds[i][j], rows)).items():
                    rep.add(metric, i, vals, judging=j, judged=True)
    return rep
