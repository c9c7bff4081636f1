"""Score floors per embedder, derived from data rather than copied between models.

0.55 was measured by the seed for nomic-embed-text; every embedder has its own score scale
(minilm's cosines run lower), so a floor is calibrated per embedder on an evalset: for every
answerable question, the best score of a chunk from a gold source is a *relevant* score and the
best score of a chunk from any other source an *irrelevant* one. Two rules:

- ``recall`` (default): the highest threshold that still keeps ``min_recall`` (95%) of the
  relevant scores. A floor exists to drop noise, and the seed's first incident was a present
  fact dropped by its floor, so keeping relevant results comes first.
- ``youden``: the threshold that best separates the two (maximum J = TPR − FPR; ties go to
  the lower threshold). Calibrated floors are stored in ``floors.yaml`` beside
this package's models with their provenance, and used when the config names none.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import yaml

FLOORS_FILE = Path(__file__).resolve().parents[1] / "models" / "floors.yaml"


@dataclass
class FloorCalibration:
    embedder_id: str
    floor: float
    rule: str
    youden_j: float
    tpr: float
    fpr: float
    n_relevant: int
    n_irrelevant: int
    relevant_mean: float
    irrelevant_mean: float
    evalset: str = ""
    evalset_hash: str = ""
    measured_at: str = ""


def best_threshold(relevant: list[float], irrelevant: list[float]) -> tuple[float, float, float, float]:
    """(threshold, J, TPR, FPR) maximising Youden's J; a score ≥ threshold counts as kept."""
    rel = np.asarray(relevant, dtype=np.float64)
    irr = np.asarray(irrelevant, dtype=np.float64)
    if rel.size == 0 or irr.size == 0:
        raise ValueError("floor calibration needs relevant and irrelevant scores")
    best = (float("-inf"), -2.0, 0.0, 0.0)
    for t in np.unique(np.concatenate([rel, irr])):  # ascending: ties keep the lower threshold
        tpr = float((rel >= t).mean())
        fpr = float((irr >= t).mean())
        j = tpr - fpr
        if j > best[1] + 1e-12:
            best = (float(t), j, tpr, fpr)
    return best


def recall_threshold(relevant: list[float], irrelevant: list[float], min_recall: float = 0.95):
    """(threshold, J, TPR, FPR) for the highest threshold keeping ``min_recall`` of relevant scores."""
    rel = np.sort(np.asarray(relevant, dtype=np.float64))
    irr = np.asarray(irrelevant, dtype=np.float64)
    if rel.size == 0 or irr.size == 0:
        raise ValueError("floor calibration needs relevant and irrelevant scores")
    drop = int(np.floor((1.0 - min_recall) * rel.size + 1e-9))  # relevant scores we may lose
    t = float(rel[drop])
    tpr, fpr = float((rel >= t).mean()), float((irr >= t).mean())
    return t, tpr - fpr, tpr, fpr


def calibrate_floor(kb, evalset, *, requester: str = "eval-user", rule: str = "recall",
                    min_recall: float = 0.95) -> FloorCalibration:
    """Scores of gold vs other chunks for every answerable question of ``evalset`` in ``kb``."""
    relevant, irrelevant = [], []
    for q in evalset.questions:
        if not q.answerable:
            continue
        res = kb.retrieve_knowledge_base(q.question, q.requester or requester, top_k=50, floor=-1.0)
        gold = [c.score for c in res.chunks if c.source in q.gold_sources]
        other = [c.score for c in res.chunks if c.source not in q.gold_sources]
        if gold:
            relevant.append(max(gold))
        if other:
            irrelevant.append(max(other))
    if rule == "youden":
        t, j, tpr, fpr = best_threshold(relevant, irrelevant)
    elif rule == "recall":
        t, j, tpr, fpr = recall_threshold(relevant, irrelevant, min_recall)
    else:
        raise ValueError(f"unknown floor rule {rule!r}: recall or youden")
    # round down so the stored floor never drops a score the rule kept
    return FloorCalibration(kb.embedder.id, float(np.floor(t * 1e4) / 1e4), f"{rule}" + (f"@{min_recall}" if rule == "recall" else ""), round(j, 4), round(tpr, 4), round(fpr, 4),
                            len(relevant), len(irrelevant), round(float(np.mean(relevant)), 4),
                            round(float(np.mean(irrelevant)), 4), evalset.name, evalset.content_hash()[:16],
                            datetime.now(timezone.utc).isoformat(timespec="seconds"))


def load_floors(path: Path | None = None) -> dict[str, dict]:
    path = Path(path or FLOORS_FILE)
    if not path.is_file():
        return {}
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def save_floor(cal: FloorCalibration, path: Path | None = None) -> None:
    path = Path(path or FLOORS_FILE)
    floors = load_floors(path)
    floors[cal.embedder_id] = asdict(cal)
    Path(path).write_text("# Score floors per embedder, written by `adiyan calibrate-floor --write`.\n"
                          + yaml.safe_dump(floors, sort_keys=True), encoding="utf-8")
