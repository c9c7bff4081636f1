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


def resolve_floor(retrieval, embedder_id: str) -> float:
    """The score floor for ``embedder_id`` under a ``retrieval`` config section: the configured
    one (``retrieval.score_floors``), else the calibrated one in floors.yaml (when
    ``use_calibrated_floors``), else ``default_floor``."""
    if embedder_id in retrieval.score_floors:
        return float(retrieval.score_floors[embedder_id])
    if retrieval.use_calibrated_floors:
        calibrated = load_floors().get(embedder_id)
        if calibrated:
            return float(calibrated["floor"])
    return float(retrieval.default_floor)
