"""IR metrics over qrels and runs: nDCG@k, Recall@k, MRR@k, MAP@k, and paired significance tests.

The numbers come from ranx (Bassani, ECIR 2022, https://github.com/AmenRa/ranx), whose metrics
follow trec_eval. ranx is a dependency: without it every metric raises ``RanxMissing`` (no
silent fallback; ``metrics.json`` records the backend). A pure-NumPy implementation of the same
four metrics is kept as the cross-check the tests call explicitly (``use_ranx=False``,
``per_query_numpy``); nothing in the workbench computes a reported figure with it. Both sides
see the same input:

* ties are broken before evaluation: each query's documents are ordered by score, descending,
  then by document id, ascending, and the scores are replaced by that rank order. ranx sorts
  hashed ids with an unstable sort, so equal scores would otherwise rank arbitrarily
  (trec_eval breaks ties by doc id descending; we use ascending, like our retrievers);
* a judged query missing from the run scores 0, an unjudged query in the run is ignored;
* a document is relevant when its qrel is >= 1; nDCG's gain is the qrel value (trec_eval's
  ``ndcg_cut``, ranx's ``ndcg``), its discount ``1 / log2(rank + 1)``;
* MAP@k divides by the number of relevant documents (ranx and trec_eval), not by min(k, R).
"""

from __future__ import annotations

import itertools
import math
import warnings
from typing import Iterable, Mapping, Sequence

import numpy as np

from ..stats import fisher_randomization_p, holm  # noqa: F401 - re-exported: callers import them from here

# ranx's numba kernels cast query-id hashes from uint64 to int64 and say so on every first call;
# the ids are only used as keys, so nothing is lost, and the warning only clutters the summary
warnings.filterwarnings("ignore", message=".*unsafe cast from uint64 to int64.*")

Qrels = Mapping[str, Mapping[str, int]]
Run = Mapping[str, Mapping[str, float]]

SUPPORTED = ("ndcg", "recall", "mrr", "map")

_UNLOADED = object()
_ranx_module = _UNLOADED


class RanxMissing(ImportError):
    """ranx, the IR-metrics dependency, cannot be imported: no metric is computed without it."""


def _ranx():
    """ranx, imported on first use; ``RanxMissing`` (naming the package) when it cannot be.

    Importing ranx takes seconds (numba), so ``import adiyan.cli`` does not pay for it; its
    numba kernels then compile on first use (cached on disk).
    """
    global _ranx_module
    if _ranx_module is _UNLOADED:
        try:
            import ranx  # heavy: numba; ~3 s to import, paid on the first metric computed
        except ImportError as exc:
            raise RanxMissing(f"ranx is required for the IR metrics (nDCG, Recall, MRR, MAP) and could not be "
                              f"imported ({exc}); install the project's requirements (scripts/install.sh), "
                              "e.g. .venv/bin/pip install ranx") from exc
        _ranx_module = ranx
    return _ranx_module


def backend() -> str:
    """The library every reported IR metric comes from: always "ranx" (RanxMissing without it)."""
    _ranx()
    return "ranx"


def parse_metric(metric: str) -> tuple[str, int | None]:
    """``"ndcg@10"`` -> ``("ndcg", 10)``; ``"mrr"`` -> ``("mrr", None)`` (whole ranking)."""
    name, _, k = metric.lower().partition("@")
    if name not in SUPPORTED:
        raise ValueError(f"unknown metric {metric!r}; supported: {', '.join(s + '@k' for s in SUPPORTED)}")
    if k and (not k.isdigit() or int(k) < 1):
        raise ValueError(f"metric {metric!r}: k must be a positive integer")
    return name, int(k) if k else None


def ranked(docs: Mapping[str, float]) -> list[str]:
    """Document ids by score descending, ties by id ascending."""
    return [d for d, _ in sorted(docs.items(), key=lambda kv: (-float(kv[1]), kv[0]))]


def _canonical_run(run: Run, qrels: Qrels) -> dict[str, dict[str, float]]:
    """Judged queries only, each with rank-order scores n, n-1, ..., 1 (ties already broken)."""
    out: dict[str, dict[str, float]] = {}
    for qid in qrels:
        docs = ranked(run.get(qid, {}))
        out[qid] = {d: float(len(docs) - i) for i, d in enumerate(docs)}
    return out


def _judged(qrels: Qrels) -> dict[str, dict[str, int]]:
    return {q: {d: int(r) for d, r in docs.items()} for q, docs in qrels.items() if docs}


# -- pure NumPy per-query metrics (the cross-check the tests call explicitly; never a fallback) --
def _ndcg(rels: dict[str, int], ranking: Sequence[str], k: int | None) -> float:
    top = ranking[:k] if k else ranking
    dcg = sum(rels.get(d, 0) / math.log2(i + 2) for i, d in enumerate(top) if rels.get(d, 0) >= 1)
    ideal = sorted((r for r in rels.values() if r >= 1), reverse=True)
    ideal = ideal[:k] if k else ideal
    idcg = sum(r / math.log2(i + 2) for i, r in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def _recall(rels: dict[str, int], ranking: Sequence[str], k: int | None) -> float:
    relevant = {d for d, r in rels.items() if r >= 1}
    top = ranking[:k] if k else ranking
    return len(relevant.intersection(top)) / len(relevant) if relevant else 0.0


def _mrr(rels: dict[str, int], ranking: Sequence[str], k: int | None) -> float:
    for i, d in enumerate(ranking[:k] if k else ranking):
        if rels.get(d, 0) >= 1:
            return 1.0 / (i + 1)
    return 0.0


def _map(rels: dict[str, int], ranking: Sequence[str], k: int | None) -> float:
    n_rel = sum(1 for r in rels.values() if r >= 1)
    if not n_rel:
        return 0.0
    hits, total = 0, 0.0
    for i, d in enumerate(ranking[:k] if k else ranking):
        if rels.get(d, 0) >= 1:
            hits += 1
            total += hits / (i + 1)
    return total / n_rel


_NUMPY_METRICS = {"ndcg": _ndcg, "recall": _recall, "mrr": _mrr, "map": _map}


def per_query_numpy(qrels: Qrels, run: Run, metric: str) -> dict[str, float]:
    name, k = parse_metric(metric)
    fn = _NUMPY_METRICS[name]
    judged = _judged(qrels)
    canon = _canonical_run(run, judged)
    return {q: fn(judged[q], ranked(canon[q]), k) for q in judged}


# -- ranx ---------------------------------------------------------------------------------------
# ranx holds document ids as NumPy fixed-width strings, and numba compiles its kernels once per
# width (the longest id of the data): a new data set meant a new compilation, seconds per metric
# call. Every id is renamed, before ranx sees it, to one width: its number in this process's id
# table, zero-padded. The metrics only compare ids for equality, so the numbers are unchanged, and
# the kernels compiled once (``warm_up``, at install) serve every data set. The table grows with the
# distinct ids a process evaluates (about 150 bytes each: 150 MB for a million).
_DOC_IDS: dict[str, str] = {}
_NEXT_ID = itertools.count()
_ID_WIDTH = 12


def _doc_id(doc: str) -> str:
    fixed = _DOC_IDS.get(doc)
    if fixed is None:  # setdefault: two threads naming the same id get the same number
        fixed = _DOC_IDS.setdefault(doc, f"{next(_NEXT_ID):0{_ID_WIDTH}d}")
    return fixed


def _ranx_qrels(judged: Mapping[str, Mapping[str, int]]):
    return _ranx().Qrels({q: {_doc_id(d): r for d, r in docs.items()} for q, docs in judged.items()})


def _ranx_objects(qrels: Qrels, run: Run, name: str = "run"):
    judged = _judged(qrels)
    canon = _canonical_run(run, judged)
    q = _ranx_qrels(judged)
    r = _ranx().Run({qid: {_doc_id(d): s for d, s in docs.items()} for qid, docs in canon.items() if docs},
                    name=name)
    return q, r.make_comparable(q)  # empty rankings for judged queries the run left out


def per_query(qrels: Qrels, run: Run, metric: str, *, use_ranx: bool = True) -> dict[str, float]:
    """One score per judged query (the input of a paired test); ``use_ranx=False`` is the NumPy
    cross-check, for tests only."""
    if not use_ranx:
        return per_query_numpy(qrels, run, metric)
    parse_metric(metric)
    q, r = _ranx_objects(qrels, run)
    scores = _ranx().evaluate(q, r, metric, return_mean=False)
    return dict(zip(r.get_query_ids(), (float(s) for s in scores)))


def evaluate_run(qrels: Qrels, run: Run, metrics: Iterable[str] = ("ndcg@10", "recall@100"), *,
                 use_ranx: bool = True) -> dict[str, float]:
    """Mean of each metric over the judged queries, e.g. ``{"ndcg@10": 0.676, "recall@100": 0.93}``
    (ranx; ``use_ranx=False`` is the NumPy cross-check, for tests only)."""
    metrics = list(metrics)
    for m in metrics:
        parse_metric(m)
    if not use_ranx:
        return {m: float(np.mean(list(per_query_numpy(qrels, run, m).values()))) for m in metrics}
    q, r = _ranx_objects(qrels, run)
    out = _ranx().evaluate(q, r, metrics)
    if len(metrics) == 1:
        out = {metrics[0]: out}
    return {m: float(out[m]) for m in metrics}


def compare_runs(qrels: Qrels, runs: Mapping[str, Run], metrics: Iterable[str] = ("ndcg@10", "recall@100"), *,
                 baseline: str | None = None, stat_test: str = "fisher", n_permutations: int = 10_000,
                 seed: int = 42, max_p: float = 0.05) -> dict:
    """Mean scores per run and paired tests of every run against ``baseline`` (default: the first).

    ``stat_test`` is ``"fisher"`` (Fisher's randomization test, two-sided, ``n_permutations``
    permutations drawn with ``seed``) or ``"student"`` (two-sided paired t-test, ranx's
    ``compare``). The randomization test is computed here even with
    ranx: ranx draws its permutations in parallel numba threads whose random streams the seed
    does not govern (two identical calls gave p = 0.51 and 0.4875), and a report must not
    change between runs. Per-query scores, the test's input, come from ranx either way.
    Returns ``{"baseline", "stat_test", "seed", "scores": {run: {metric: mean}},
    "vs_baseline": {run: {metric: {"delta", "p_value", "significant", "win", "tie", "loss"}}}}``.
    """
    metrics = list(metrics)
    names = list(runs)
    if not names:
        raise ValueError("compare_runs needs at least one run")
    baseline = names[0] if baseline is None else baseline
    if baseline not in runs:
        raise ValueError(f"baseline {baseline!r} is not one of the runs: {', '.join(names)}")
    if stat_test not in ("fisher", "student"):
        raise ValueError("stat_test must be 'fisher' or 'student'")
    per = {n: {m: per_query(qrels, runs[n], m) for m in metrics} for n in names}
    scores = {n: {m: float(np.mean(list(per[n][m].values()))) for m in metrics} for n in names}
    p_values: dict[str, dict[str, float]] = {}
    if stat_test == "student" and len(names) > 1:
        q = _ranx_qrels(_judged(qrels))
        ranx_runs = [_ranx_objects(qrels, runs[n], name=n)[1] for n in names]
        report = _ranx().compare(q, ranx_runs, metrics, stat_test="student", max_p=max_p,
                               rounding_digits=6).to_dict()
        p_values = {n: {m: float(report[baseline]["comparisons"][n][m]) for m in metrics}
                    for n in names if n != baseline}
    else:
        for n in names:
            if n == baseline:
                continue
            p_values[n] = {}
            for m in metrics:
                a = np.array([per[baseline][m][q] for q in per[baseline][m]])
                b = np.array([per[n][m][q] for q in per[baseline][m]])
                p_values[n][m] = (fisher_randomization_p(a, b, n_permutations, seed) if stat_test == "fisher"
                                  else paired_t_p(a, b))
    vs = {}
    for n in names:
        if n == baseline:
            continue
        vs[n] = {}
        for m in metrics:
            a = np.array([per[baseline][m][q] for q in per[baseline][m]])
            b = np.array([per[n][m][q] for q in per[baseline][m]])
            p = p_values[n][m]
            if not math.isfinite(p):  # a t-test on identical score vectors: no difference at all
                p = 1.0 if np.array_equal(a, b) else float("nan")
            vs[n][m] = {"delta": float(b.mean() - a.mean()), "p_value": p, "significant": bool(p < max_p),
                        "win": int((b > a).sum()), "tie": int((b == a).sum()), "loss": int((b < a).sum())}
    return {"baseline": baseline, "stat_test": stat_test, "n_permutations": n_permutations, "seed": seed,
            "max_p": max_p, "backend": backend(), "queries": len(_judged(qrels)), "scores": scores,
            "vs_baseline": vs}


# -- the paired tests computed here -------------------------------------------------------------
def paired_t_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided paired Student's t-test p-value."""
    from scipy import stats  # heavy: scipy loads only when a paired t-test is asked for

    a, b = np.asarray(a, float), np.asarray(b, float)
    if np.allclose(a, b):
        return 1.0
    return float(stats.ttest_rel(a, b).pvalue)


def mcnemar_p(b: int, c: int) -> float | None:
    """Exact McNemar test: the two-sided binomial p of the discordant pairs (``b`` items only the
    first system got right, ``c`` only the second), to 4 significant figures (so a tiny p stays
    readable, never 0.0); None without a discordant pair."""
    if b + c == 0:
        return None
    from scipy.stats import binomtest  # noqa: PLC0415

    return float(f"{binomtest(b, b + c, 0.5).pvalue:.4g}")


def warm_up() -> None:
    """Compile ranx's numba kernels once, into the venv's numba cache, so the first metric a
    fresh install computes does not pay for it. scripts/install.sh calls this; without it the
    first test run (or ``invoke eval``) on a new venv spends about a minute compiling.
    Binary and graded relevance, a cut and a whole ranking, a query the run leaves out, the mean
    and the per-query path and ranx's ``compare``: the calls the package makes (document ids all
    have one width, ``_doc_id``, so these kernels serve every data set)."""
    qrels = {"q1": {"a": 2, "b": 1}, "q2": {"c": 1}, "q3": {"d": 1}}
    run = {"q1": {"a": 0.9, "x": 0.5, "b": 0.4}, "q2": {"c": 0.3, "y": 0.8}}
    metrics = [f"{m}@10" for m in SUPPORTED] + ["recall@100", "ndcg"]
    evaluate_run(qrels, run, metrics)
    per_query(qrels, run, "ndcg@10")
    other = {"q1": {"b": 0.9, "a": 0.1}, "q2": {"y": 0.2}, "q3": {"d": 1.0}}
    compare_runs(qrels, {"a": run, "b": other}, ["ndcg@10", "recall@10"], stat_test="student")
