"""Every answer metric against human labels: RAGChecker's meta-evaluation set (issue 22, section 2).

Data: ``<paths.datasets_dir>/ragchecker_meta/`` (Ru et al., "RAGChecker", NeurIPS 2024; Apache-2.0):
280 questions, each with a ground-truth answer and two RAG systems' responses, the pair labelled
by two annotators for correctness, completeness and overall preference (-2..2: how much better
``model2``'s response is than ``model1``'s). ``human_labeled_data.json`` holds 560 records, records
2i and 2i+1 being the two annotators of instance i; ``baseline_ragchecker.json`` RAGChecker's own
scores of both responses.

The method is the paper's (Section 4; the authors' ``data/meta_evaluation/meta_eval.py``), so a
figure here is comparable with theirs: for a metric m, delta_i = m(model2) - m(model1) per
instance; NaN deltas replaced by the median delta; deltas min-max scaled to [-2, 2]
(``((d - min) / (max - min) - 0.5) * 4``; a constant delta is left as it is, as their script does,
and has no correlation); each delta repeated for the instance's two annotators (560 values);
Pearson and Spearman x 100 against the 560 labels of one aspect. Human vs human: annotator 1's
280 labels against annotator 2's. Intervals: 95% percentile bootstrap over *instances* (both
annotators of a drawn instance come along), seeded, the same resamples for every metric over the
whole set. RAGChecker's row is recomputed from its file and must match the published figures
within :data:`CHECK_TOLERANCE`: the check that the method here is theirs.

The method's arithmetic is in ``meta_eval_method``, the scorers in ``meta_eval_scores`` (offline
metrics, judged metrics, the judge's two calibrations), the HTML page in ``meta_eval_report``.
"""

from __future__ import annotations

import ast
import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import yaml

from .. import metrics as M
from .meta_eval_method import (ASPECTS, MetaInstance, bootstrap_indices, human_agreement,  # noqa: F401
                               metric_row, same_scores)
from ..models import embedder_from_settings
from .hallucination import validate_checker
from .meta_eval_scores import CONTEXT_FREE, judged_part, not_applicable_rows, offline_rows
from .perturbations import run_battery
from .ragas_metrics import LLM_METRICS, REQUIRES

HUMAN_FILE = "human_labeled_data.json"
RAGCHECKER_FILE = "baseline_ragchecker.json"
PUBLISHED_FILE = Path(__file__).with_name("meta_eval_published.yaml")
CHECK_TOLERANCE = 0.5  # RAGChecker's recomputed row must be within this of the published one (x 100)
DEFAULT_BOOTSTRAP = 1000


class MetaEvalDataError(ValueError):
    """The meta-evaluation files are missing or not in the expected shape (the message names the file)."""


# ---------------------------------------------------------------- loading

def default_data_dir(settings) -> Path:
    return Path(settings.paths.datasets_dir) / "ragchecker_meta"


def _read_json(path: Path):
    if not path.exists():
        raise MetaEvalDataError(f"{path}: not found (the RAGChecker meta-evaluation set; see docs/meta-eval.md)")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise MetaEvalDataError(f"{path}: not valid JSON ({exc})") from exc


def _model(record: Mapping, key: str, path: Path, n: int) -> dict:
    """``model1`` / ``model2`` of a record: a dict, or a Python-literal string of one."""
    value = record.get(key)
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError) as exc:
            raise MetaEvalDataError(f"{path}: record {n}: {key} is a string but not a Python literal ({exc})") from exc
    if not isinstance(value, dict) or not isinstance(value.get("response"), str):
        raise MetaEvalDataError(f"{path}: record {n}: {key} must be a mapping with a 'response' string")
    return value


def _label(record: Mapping, aspect: str, path: Path, n: int) -> int:
    raw = record.get(f"{aspect}_label")
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise MetaEvalDataError(f"{path}: record {n}: {aspect}_label {raw!r} is not an integer") from None
    if not -2 <= value <= 2:
        raise MetaEvalDataError(f"{path}: record {n}: {aspect}_label {value} is outside -2..2")
    return value


def load_meta_set(folder: str | Path) -> list[MetaInstance]:
    """The 280 instances of ``human_labeled_data.json``, each with both annotators' labels."""
    path = Path(folder) / HUMAN_FILE
    data = _read_json(path)
    if not isinstance(data, list) or not data or len(data) % 2:
        raise MetaEvalDataError(f"{path}: expected a non-empty list of 2 records per instance, "
                                f"got {type(data).__name__} of {len(data) if isinstance(data, list) else '?'}")
    out = []
    for i in range(len(data) // 2):
        a, b = data[2 * i], data[2 * i + 1]
        if not isinstance(a, dict) or not isinstance(b, dict):
            raise MetaEvalDataError(f"{path}: records {2 * i} and {2 * i + 1} must be objects")
        if str(a.get("instance_id")) != str(i) or str(b.get("instance_id")) != str(i):
            raise MetaEvalDataError(f"{path}: records {2 * i} and {2 * i + 1} must both be instance {i} "
                                    f"(got {a.get('instance_id')!r}, {b.get('instance_id')!r})")
        m = [_model(a, k, path, 2 * i) for k in ("model1", "model2")]
        mb = [_model(b, k, path, 2 * i + 1) for k in ("model1", "model2")]
        if a.get("gt_answer") != b.get("gt_answer") or [x["response"] for x in m] != [x["response"] for x in mb]:
            raise MetaEvalDataError(f"{path}: records {2 * i} and {2 * i + 1} (instance {i}) disagree on the "
                                    "ground truth or the responses")
        if not isinstance(a.get("gt_answer"), str) or not isinstance(a.get("query"), str):
            raise MetaEvalDataError(f"{path}: record {2 * i}: query and gt_answer must be strings")
        out.append(MetaInstance(i, str(a.get("dataset", "")), a["query"], a["gt_answer"],
                                (m[0]["response"], m[1]["response"]),
                                (str(m[0].get("model_name", "")), str(m[1].get("model_name", ""))),
                                {asp: (_label(a, asp, path, 2 * i), _label(b, asp, path, 2 * i + 1))
                                 for asp in ASPECTS}))
    return out


def load_ragchecker_scores(folder: str | Path, instances: Sequence[MetaInstance]) -> dict[str, np.ndarray]:
    """RAGChecker's score of each response per aspect: ``aspect -> array (n, 2)`` (model1, model2);
    a missing score is NaN."""
    path = Path(folder) / RAGCHECKER_FILE
    data = _read_json(path)
    if not isinstance(data, list) or len(data) != len(instances):
        raise MetaEvalDataError(f"{path}: expected a list of {len(instances)} records, one per instance")
    out = {a: np.full((len(instances), 2), np.nan) for a in ASPECTS}
    for i, (rec, inst) in enumerate(zip(data, instances)):
        if str(rec.get("instance_id")) != str(i) or rec.get("gt_answer") != inst.gt_answer:
            raise MetaEvalDataError(f"{path}: record {i} is not instance {i} of {HUMAN_FILE}")
        for j, key in enumerate(("model1", "model2")):
            m = _model(rec, key, path, i)
            if m["response"] != inst.responses[j]:
                raise MetaEvalDataError(f"{path}: record {i}: {key}'s response differs from {HUMAN_FILE}")
            scores = m.get("ragchecker")
            if not isinstance(scores, dict):
                raise MetaEvalDataError(f"{path}: record {i}: {key} has no 'ragchecker' scores")
            for a in ASPECTS:
                v = scores.get(f"{a}_label")
                out[a][i, j] = np.nan if v is None else float(v)
    return out


def labels_matrix(instances: Sequence[MetaInstance], aspect: str) -> np.ndarray:
    """``(n, 2)`` float array of both annotators' labels of ``aspect``."""
    return np.array([inst.labels[aspect] for inst in instances], dtype=float)


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# ---------------------------------------------------------------- published references and the check

def load_published(path: Path = PUBLISHED_FILE) -> dict:
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or "ragchecker" not in data or "human" not in data:
        raise MetaEvalDataError(f"{path}: expected 'ragchecker' and 'human' entries")
    return data


def reproduction_check(row_or_human: Mapping, published: Mapping) -> dict:
    """Each aspect's Pearson / Spearman against the published figure; ``passed`` when all are
    within :data:`CHECK_TOLERANCE`."""
    out, ok = {}, True
    for aspect in ASPECTS:
        got = row_or_human["aspects"][aspect] if "aspects" in row_or_human else row_or_human[aspect]
        want = published[aspect]
        diffs = {k: None if got[k] is None else round(abs(got[k] - want[k]), 2) for k in ("pearson", "spearman")}
        passed = all(v is not None and v <= CHECK_TOLERANCE for v in diffs.values())
        ok &= passed
        out[aspect] = {"measured": [got["pearson"], got["spearman"]], "published": [want["pearson"], want["spearman"]],
                       "abs_diff": [diffs["pearson"], diffs["spearman"]], "passed": passed}
    return {"tolerance": CHECK_TOLERANCE, "passed": ok, "aspects": out}


# ---------------------------------------------------------------- the job

def run_meta_eval(settings, *, data_dir: str | Path | None = None, n_boot: int = DEFAULT_BOOTSTRAP,
                  embedders: Sequence[str] = ("minilm",), judged: bool | None = None, progress: bool = True,
                  hallucination: str | Path | None = None, perturbations: bool = True) -> dict:
    """Every offline answer metric (and, with ``eval.judge`` set, the judged ones) against the human
    labels, beside the inter-annotator agreement and RAGChecker's recomputed row; the claim checker
    against people's hallucination labels (``hallucination``: a RAGTruth-format folder, default
    ``<datasets_dir>/ragtruth_dev`` where it exists) beside the lexical baseline; and the
    perturbation battery over ClapNQ (``perturbations``)."""
    if n_boot < 100:
        raise ValueError(f"n_boot must be >= 100 for a 95% interval, got {n_boot}")
    folder = Path(data_dir) if data_dir else default_data_dir(settings)
    instances = load_meta_set(folder)
    rc = load_ragchecker_scores(folder, instances)
    labels = {a: labels_matrix(instances, a) for a in ASPECTS}
    seed, n = settings.seed, len(instances)
    idx = bootstrap_indices(n, n_boot, seed)
    published = load_published()
    human = {a: human_agreement(labels[a], idx) for a in ASPECTS}
    ragchecker = metric_row("ragchecker", {a: (rc[a][:, 0], rc[a][:, 1]) for a in ASPECTS}, labels,
                            n_boot=n_boot, seed=seed, kind="reference",
                            note="RAGChecker's own scores (precision / recall / F1 of claims for the three "
                                 "aspects), recomputed from baseline_ragchecker.json")
    ragchecker["check"] = reproduction_check(ragchecker, published["ragchecker"]["figures"])
    human_check = reproduction_check(human, published["human"]["figures"])
    rows = offline_rows(instances, labels, settings, embedders=embedders, n_boot=n_boot, progress=progress)
    judge = None
    if judged if judged is not None else bool(settings.eval.judge):
        judge = judged_part(settings, instances, labels, n_boot=n_boot, progress=progress)
        rows += judge.pop("rows")
    else:  # these need what the set does not hold, judge or not
        rows += not_applicable_rows([m for m in LLM_METRICS if not set(REQUIRES[m]) <= CONTEXT_FREE])
    rt = Path(hallucination) if hallucination else Path(settings.paths.datasets_dir) / "ragtruth_dev"
    halluc = validate_checker(rt, progress=progress) if (hallucination or rt.is_dir()) else None
    clapnq = Path(settings.paths.datasets_dir) / "clapnq_dev"
    battery = None
    if perturbations and (clapnq / "qa.jsonl").is_file():
        battery = run_battery(clapnq, seed=seed, embedder=embedder_from_settings(settings, progress=False))
    return {
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "hallucination": halluc, "perturbations": battery,
        "dataset": {"name": "ragchecker_meta", "path": str(folder), "n_instances": n, "n_labels": 2 * n,
                    "sha256": {f: file_sha256(folder / f) for f in (HUMAN_FILE, RAGCHECKER_FILE)},
                    "sources": sorted({i.dataset for i in instances})},
        "method": "delta = m(model2) - m(model1); NaN -> median; min-max to [-2, 2]; repeated per annotator; "
                  "Pearson / Spearman x 100 against the 560 labels (Ru et al. 2024, Section 4)",
        "n_bootstrap": n_boot, "seed": seed, "interval": "95% percentile bootstrap over instances",
        "human_agreement": {**human, "check": human_check},
        "ragchecker": ragchecker, "rows": rows, "judge": judge, "published": published,
    }


def write_json(result: Mapping, out_dir: str | Path) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "meta_eval.json"
    path.write_text(json.dumps(result, indent=2, ensure_ascii=False, default=_jsonable), encoding="utf-8")
    return path


def _jsonable(v):
    if isinstance(v, (np.floating, np.integer)):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    raise TypeError(f"not JSON serialisable: {type(v).__name__}")


# ---------------------------------------------------------------- the registry's side table

def human_correlation_table(result: Mapping) -> dict:
    """What ``adiyan/human_correlation.yaml`` holds: per registry metric its row (or why it is
    not measured), with the data's hashes and the bootstrap settings. Deterministic (no dates)."""
    metrics = {}
    for row in result["rows"]:
        # the registry groups in which the measured metric is the same computation as here
        groups = row.get("registry_groups") or M.groups_declaring(row["metric"])
        if not groups:
            continue  # a meta-eval-only row (embedding similarity, diagnostics)
        entry = {"groups": list(groups), "status": row["status"], "kind": row["kind"]}
        if row.get("judge"):
            entry["judge"] = row["judge"]
            entry["judge_reliable"] = row.get("judge_reliable")
        if row.get("note"):
            entry["note"] = row["note"]
        if row.get("struck"):
            entry["status"] = "not_measured"
            entry["why"] = row["why"]
        elif row["status"] == "measured":
            entry["n_instances"] = row["n_instances"]
            for a in ASPECTS:
                c = row["aspects"][a]
                entry[a] = {k: c[k] for k in ("pearson", "pearson_ci", "spearman", "spearman_ci")}
        else:
            entry["why"] = row.get("why") or next(c.get("why") for c in row["aspects"].values())
        metrics[row["metric"]] = entry
    return {"source": "RAGChecker meta-evaluation set (Ru et al., NeurIPS 2024), 280 instances x 2 annotators",
            "produced_by": "adiyan meta-eval --write-registry (docs/meta-eval.md)",
            "method": result["method"], "data_sha256": result["dataset"]["sha256"],
            "n_bootstrap": result["n_bootstrap"], "seed": result["seed"], "metrics": metrics}


def write_human_correlation(result: Mapping, path: Path = M.HUMAN_CORRELATION_FILE) -> Path:
    table = human_correlation_table(result)
    header = ("# Measured by `adiyan meta-eval --write-registry`: each answer metric's correlation with human\n"
              "# labels (Pearson / Spearman x 100, 95% bootstrap intervals). Do not edit by hand;\n"
              "# tests/test_meta_eval.py checks the offline figures against a fresh computation.\n")
    Path(path).write_text(header + yaml.safe_dump(table, sort_keys=False, allow_unicode=True), encoding="utf-8")
    M._human_table.cache_clear()
    return Path(path)

