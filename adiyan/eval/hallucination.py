"""The ``hallucination`` meta-evaluation: a checker against people's hallucination labels.

Reads any set in RAGTruth's published format (Niu et al., ACL 2024): ``source_info.jsonl``
(``source_id``, ``task_type`` QA / Summary / Data2txt, ``source_info``) and ``response.jsonl``
(``id``, ``source_id``, ``response``, ``labels``: character spans of the response that the source
does not support). A response is hallucinated when it carries a label; every label is kept
(``implicit_true`` and ``due_to_null`` spans included), as the set's README baseline does.

Scored per response: the weakest claim's support (the checker's P(supported), or for the lexical
baseline the share of a sentence's content words found in the source); predicted hallucinated
below a threshold. Reported: AUROC, response-level precision / recall / F1 at the fixed threshold,
character-level span F1 (predicted spans = the unsupported claims), each per task and overall, with
bootstrap intervals over *sources* (responses to one source move together).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from ..metrics import auroc
from ..models.checker import ClaimChecker
from ..models.extractive import content_words
from .claims import SUPPORT_THRESHOLD, claim_spans

TASKS = ("QA", "Summary", "Data2txt")
LEXICAL_THRESHOLD = 0.5  # fixed in advance (the set's README): a sentence half of whose words are new


class HallucinationSetError(ValueError):
    pass


@dataclass
class LabelledResponse:
    id: str
    source_id: str
    task: str
    source: str
    response: str
    spans: list[tuple[int, int]] = field(default_factory=list)

    @property
    def hallucinated(self) -> bool:
        return bool(self.spans)


def _lines(path: Path) -> list[dict]:
    if not path.is_file():
        raise HallucinationSetError(f"{path}: not found (a RAGTruth-format folder holds response.jsonl "
                                    "and source_info.jsonl)")
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError as exc:
                raise HallucinationSetError(f"{path}:{n}: not JSON ({exc})") from exc
    return rows


def source_text(task: str, info) -> str:
    """The evidence a response is checked against, as text: QA's question and passages, a summary's
    document, Data2txt's JSON object written out one ``key: value`` per line (nested keys joined)."""
    if task == "QA" and isinstance(info, dict):
        return f"{info.get('question', '')}\n{info.get('passages', '')}"
    if isinstance(info, str):
        return info
    lines: list[str] = []

    def walk(prefix: str, value) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix} {k}".strip(), v)
        elif isinstance(value, list):
            for v in value:
                walk(prefix, v)
        else:
            lines.append(f"{prefix}: {value}.")

    walk("", info)
    return "\n".join(lines)


def load_ragtruth(folder: str | Path) -> list[LabelledResponse]:
    folder = Path(folder)
    if not folder.is_dir():
        raise HallucinationSetError(f"{folder}: folder not found")
    sources = {}
    for row in _lines(folder / "source_info.jsonl"):
        if "source_id" not in row or "source_info" not in row:
            raise HallucinationSetError(f"{folder / 'source_info.jsonl'}: a row without source_id / source_info")
        sources[str(row["source_id"])] = row
    out = []
    for row in _lines(folder / "response.jsonl"):
        sid = str(row.get("source_id"))
        if sid not in sources:
            raise HallucinationSetError(f"{folder / 'response.jsonl'}: response {row.get('id')} names source "
                                        f"{sid}, which source_info.jsonl does not hold")
        src = sources[sid]
        task = src.get("task_type", "QA")
        spans = [(int(l["start"]), int(l["end"])) for l in row.get("labels") or []]
        out.append(LabelledResponse(str(row["id"]), sid, task, source_text(task, src["source_info"]),
                                    row["response"], spans))
    return out


def prf(tp: int, fp: int, fn: int) -> tuple[float, float, float]:
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / (tp + fn) if tp + fn else 0.0
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


@dataclass
class Scored:
    """One response as a detector saw it: the weakest unit's support and the spans it flags."""
    support: float
    flagged: list[tuple[int, int]]


def lexical_scorer(threshold: float = LEXICAL_THRESHOLD) -> Callable[[LabelledResponse], Scored]:
    """The baseline: each claim's share of content words found in the source; the weakest decides."""
    def score(r: LabelledResponse) -> Scored:
        src = content_words(r.source)
        worst, flagged = 1.0, []
        for a, b in claim_spans(r.response):
            words = content_words(r.response[a:b])
            share = sum(w in src for w in words) / len(words) if words else 1.0
            worst = min(worst, share)
            if share < threshold:
                flagged.append((a, b))
        return Scored(worst, flagged)
    return score


def checker_scorer(checker: ClaimChecker, threshold: float = SUPPORT_THRESHOLD) -> Callable[[LabelledResponse], Scored]:
    def score(r: LabelledResponse) -> Scored:
        spans = claim_spans(r.response)
        if not spans:
            return Scored(1.0, [])
        found = checker.support([r.response[a:b] for a, b in spans], [r.source])
        flagged = [sp for sp, s in zip(spans, found) if s.probability < threshold]
        return Scored(min(s.probability for s in found), flagged)
    return score


def _chars(spans: Sequence[tuple[int, int]]) -> set[int]:
    return {i for a, b in spans for i in range(a, b)}


def figures(items: Sequence[LabelledResponse], scored: Sequence[Scored], threshold: float) -> dict:
    """AUROC (higher support = less likely hallucinated), response P/R/F1, span F1 (character level)."""
    y = [int(r.hallucinated) for r in items]
    risk = [1.0 - s.support for s in scored]
    pred = [s.support < threshold for s in scored]
    tp = sum(1 for a, b in zip(y, pred) if a and b)
    fp = sum(1 for a, b in zip(y, pred) if not a and b)
    fn = sum(1 for a, b in zip(y, pred) if a and not b)
    p, r, f = prf(tp, fp, fn)
    ctp = cfp = cfn = 0
    for item, s in zip(items, scored):
        gold, got = _chars(item.spans), _chars(s.flagged)
        ctp += len(gold & got)
        cfp += len(got - gold)
        cfn += len(gold - got)
    _, _, span_f1 = prf(ctp, cfp, cfn)
    a = auroc(y, risk)
    return {"n": len(items), "hallucinated": sum(y), "auroc": None if a is None else round(a, 4),
            "precision": round(p, 4), "recall": round(r, 4), "f1": round(f, 4), "span_f1": round(span_f1, 4)}


def bootstrap(items: Sequence[LabelledResponse], scored: Sequence[Scored], threshold: float, *,
              resamples: int = 1000, seed: int = 0) -> dict[str, tuple[float, float]]:
    """95% percentile intervals of AUROC, F1 and span F1, resampling sources (clusters)."""
    by_source: dict[str, list[int]] = {}
    for i, r in enumerate(items):
        by_source.setdefault(r.source_id, []).append(i)
    keys = sorted(by_source)
    rng = random.Random(seed)
    vals: dict[str, list[float]] = {"auroc": [], "f1": [], "span_f1": []}
    for _ in range(resamples):
        idx = [i for k in (rng.choice(keys) for _ in keys) for i in by_source[k]]
        f = figures([items[i] for i in idx], [scored[i] for i in idx], threshold)
        for name in vals:
            if f[name] is not None:
                vals[name].append(f[name])
    out = {}
    for name, v in vals.items():
        v.sort()
        out[name] = (round(v[int(0.025 * len(v))], 4), round(v[min(len(v) - 1, int(0.975 * len(v)))], 4)) if v else (None, None)
    return out


def evaluate(items: Sequence[LabelledResponse], scorer: Callable[[LabelledResponse], Scored], threshold: float,
             *, resamples: int = 1000, seed: int = 0, progress=None) -> dict:
    scored = []
    for r in (progress(items) if progress else items):
        scored.append(scorer(r))
    out = {"overall": {**figures(items, scored, threshold),
                       "ci95": bootstrap(items, scored, threshold, resamples=resamples, seed=seed)}}
    for task in TASKS:
        idx = [i for i, r in enumerate(items) if r.task == task]
        if idx:
            out[task] = figures([items[i] for i in idx], [scored[i] for i in idx], threshold)
    out["threshold"] = threshold
    out["_supports"] = [round(s.support, 4) for s in scored]
    return out


def validate_checker(folder: str | Path, *, threshold: float | None = None, resamples: int = 1000,
                     checker: ClaimChecker | None = None, progress: bool = False) -> dict:
    """The checker and the lexical baseline on one RAGTruth-format folder, measured in the same run."""
    from tqdm import tqdm  # light: the progress bar only

    items = load_ragtruth(folder)
    checker = checker or ClaimChecker.load()
    t = SUPPORT_THRESHOLD if threshold is None else threshold
    bar = (lambda xs: tqdm(xs, desc="hallucination: checker", unit="response")) if progress else None
    return {"data": str(folder), "responses": len(items), "labels": "every span (implicit_true and due_to_null kept)",
            "checker": {"identity": checker.identity, **evaluate(items, checker_scorer(checker, t), t,
                                                                  resamples=resamples, progress=bar)},
            "lexical": evaluate(items, lexical_scorer(), LEXICAL_THRESHOLD, resamples=resamples)}


def hallucination_lines(result: dict) -> list[str]:
    out = [f"hallucination labels: {result['data']} ({result['responses']} responses; {result['labels']})",
           f"  {'detector':<10} {'task':<9} {'n':>4} {'halluc.':>7} {'AUROC':>6} {'P':>6} {'R':>6} {'F1':>6} {'span F1':>7}"]
    for name in ("checker", "lexical"):
        res = result[name]
        for task in ("overall", *TASKS):
            if task not in res:
                continue
            f = res[task]
            au = "-" if f["auroc"] is None else f"{f['auroc']:.3f}"
            out.append(f"  {name:<10} {task:<9} {f['n']:>4} {f['hallucinated']:>7} {au:>6} {f['precision']:>6.3f} "
                       f"{f['recall']:>6.3f} {f['f1']:>6.3f} {f['span_f1']:>7.3f}")
        ci = res["overall"]["ci95"]
        out.append(f"  {name:<10} 95% intervals over sources: AUROC {ci['auroc'][0]}-{ci['auroc'][1]}, "
                   f"F1 {ci['f1'][0]}-{ci['f1'][1]}, span F1 {ci['span_f1'][0]}-{ci['span_f1'][1]} "
                   f"(threshold {res['threshold']})")
    return out


def write_card_validation(result: dict, folder: Path) -> Path:
    """Record a validation's figures in a checker folder's ``card.json`` (``validation``), beside
    what it was trained on: the card says what the model scored on people's labels."""
    path = Path(folder) / "card.json"
    card = json.loads(path.read_text(encoding="utf-8"))
    card["validation"] = {"command": f"adiyan checker validate --data {result['data']} --card",
                          "data": Path(result["data"]).name, "responses": result["responses"],
                          "labels": result["labels"],
                          **{name: {k: v for k, v in result[name].items() if k != "_supports"}
                             for name in ("checker", "lexical")}}
    path.write_text(json.dumps(card, indent=1) + "\n", encoding="utf-8")
    return path
