"""Score floors per embedder, derived from data rather than copied between models.

0.55 was measured by the seed for nomic-embed-text; every embedder has its own score scale
(minilm's cosines run lower), so a floor is calibrated per embedder on an evalset: for every
answerable question, the best score of a chunk from a gold source is a *relevant* score and the
best score of a chunk from any other source an *irrelevant* one. Two rules:

- ``recall`` (default): the highest threshold that still keeps ``min_recall`` (95%) of the
  relevant scores. A floor exists to drop noise, and the seed's first incident was a present
  fact dropped by its floor, so keeping relevant results comes first.
- ``youden``: the threshold that best separates the two (maximum J = TPR − FPR; ties go to
  the lower threshold).

The calibration set must be disjoint from the questions ``invoke eval`` scores (a floor tuned
on the scored questions flatters itself): ``adiyan calibrate-floor`` defaults to XQuAD
(``adiyan.eval.floors.DEFAULT_CALIBRATION_SET``, which says why), and ``floors.yaml`` records the source (evalset, content
hash, split, rule, J, TPR, FPR, n) beside each floor.

Whether a floor is applied (:func:`floor_decision`): a floor that cannot separate relevant
from irrelevant results (J < ``retrieval.floor_min_j``, 0.2) only drops relevant results by
chance, so a *calibrated* one is **not applied** (the pipeline uses ``default_floor``) and the
run says so by name (``floor_cannot_separate``); a *configured* one (``retrieval.score_floors``,
e.g. the seed's 0.55 for nomic-embed-text) is an explicit setting and is applied as set, with
the same named warning when its J, measured on the calibration set, is under the line.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import yaml

FLOORS_FILE = Path(__file__).resolve().parents[1] / "models" / "floors.yaml"
FLOOR_MIN_J = 0.2  # the default of retrieval.floor_min_j


@dataclass
class FloorCalibration:
    embedder_id: str
    floor: float
    rule: str
    youden_j: float  # J = TPR − FPR at ``floor`` on the calibration set
    tpr: float
    fpr: float
    n_relevant: int
    n_irrelevant: int
    relevant_mean: float
    irrelevant_mean: float
    evalset: str = ""
    evalset_hash: str = ""
    measured_at: str = ""
    split: str = ""  # which questions of the evalset were used (e.g. "test qrels, all 300 answerable")
    source: str = ""  # where the evalset came from (a BEIR folder, an evalset folder)
    best_j: float | None = None  # the best J any threshold reaches on this data (Youden), for scale
    best_j_floor: float | None = None
    # a floor set in retrieval.score_floors, measured on the same scores: {floor, youden_j, tpr, fpr}
    configured: dict | None = None


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


def rates_at(relevant: list[float], irrelevant: list[float], threshold: float) -> tuple[float, float, float]:
    """(J, TPR, FPR) of a given threshold: the share of relevant / irrelevant scores it keeps."""
    rel = np.asarray(relevant, dtype=np.float64)
    irr = np.asarray(irrelevant, dtype=np.float64)
    if rel.size == 0 or irr.size == 0:
        raise ValueError("a floor's J needs relevant and irrelevant scores")
    tpr, fpr = float((rel >= threshold).mean()), float((irr >= threshold).mean())
    return tpr - fpr, tpr, fpr


def load_floors(path: Path | None = None) -> dict[str, dict]:
    path = Path(path or FLOORS_FILE)
    if not path.is_file():
        return {}
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def save_floor(cal: FloorCalibration, path: Path | None = None) -> None:
    path = Path(path or FLOORS_FILE)
    floors = load_floors(path)
    floors[cal.embedder_id] = {k: v for k, v in asdict(cal).items() if v is not None}
    Path(path).write_text(
        "# Score floors per embedder, written by `adiyan calibrate-floor --write`, calibrated on data\n"
        "# disjoint from the questions `invoke eval` scores (evalset / evalset_hash / split / source).\n"
        "# youden_j, tpr, fpr: of `floor` on that data; best_j: the best any threshold reaches there;\n"
        "# configured: the floor retrieval.score_floors sets for this embedder, measured on the same data.\n"
        "# A floor with J < retrieval.floor_min_j (0.2) is not applied (adiyan/retrieval/floor.py).\n"
        + yaml.safe_dump(floors, sort_keys=True), encoding="utf-8")


@dataclass
class FloorDecision:
    """Which floor the pipeline applies for an embedder, and why (see the module docstring)."""

    embedder_id: str
    floor: float  # what the pipeline applies
    candidate: float  # the configured or calibrated floor that was considered
    source: str  # configured | calibrated | default
    applied: bool  # the candidate is what the pipeline applies
    youden_j: float | None  # J of the candidate on its calibration set (None: not measured)
    min_j: float
    reason: str
    warning: str | None = None  # a named warning: floor_cannot_separate | floor_not_measured
    calibration: dict | None = field(default=None, repr=False)

    def as_dict(self) -> dict:
        return asdict(self)


def floor_decision(retrieval, embedder_id: str, floors: dict | None = None) -> FloorDecision:
    """The floor for ``embedder_id`` under a ``retrieval`` config section and why: the configured
    one (``retrieval.score_floors``, always applied), else the calibrated one in floors.yaml
    (when ``use_calibrated_floors``; applied only when its J reaches ``floor_min_j``), else
    ``default_floor``."""
    floors = load_floors() if floors is None else floors
    min_j = float(getattr(retrieval, "floor_min_j", FLOOR_MIN_J))
    default = float(retrieval.default_floor)
    cal = floors.get(embedder_id)
    where = f"{cal.get('evalset')} ({cal.get('split') or 'all questions'})" if cal else ""
    if embedder_id in retrieval.score_floors:
        value = float(retrieval.score_floors[embedder_id])
        conf = (cal or {}).get("configured") or {}
        j = conf.get("youden_j") if conf and abs(float(conf.get("floor", -9)) - value) < 1e-9 else None
        if j is None and cal and abs(float(cal["floor"]) - value) < 1e-9:
            j = cal.get("youden_j")
        if j is None:
            return FloorDecision(embedder_id, value, value, "configured", True, None, min_j,
                                 f"retrieval.score_floors sets {value} for {embedder_id}; its J was never measured "
                                 f"(adiyan calibrate-floor --embedder {embedder_id} --write measures it)",
                                 "floor_not_measured", cal)
        if j < min_j:
            return FloorDecision(embedder_id, value, value, "configured", True, float(j), min_j,
                                 f"retrieval.score_floors sets {value} for {embedder_id}, applied as configured, "
                                 f"but it cannot separate relevant from irrelevant results: J {j:.3f} < {min_j} "
                                 f"on {where}", "floor_cannot_separate", cal)
        return FloorDecision(embedder_id, value, value, "configured", True, float(j), min_j,
                             f"retrieval.score_floors sets {value} for {embedder_id}; J {j:.3f} on {where}", None, cal)
    if retrieval.use_calibrated_floors and cal:
        value, j = float(cal["floor"]), cal.get("youden_j")
        if j is None or float(j) < min_j:
            shown = "unknown" if j is None else f"{float(j):.3f}"
            return FloorDecision(embedder_id, default, value, "calibrated", False, None if j is None else float(j),
                                 min_j, f"calibrated floor {value} for {embedder_id} is NOT applied: it cannot "
                                 f"separate relevant from irrelevant results (Youden's J, the share of relevant "
                                 f"chunks it keeps minus the share of irrelevant ones, is {shown} < "
                                 f"retrieval.floor_min_j {min_j} on {where}); default_floor {default} applies. "
                                 f"Nothing to do unless you want a floor: then calibrate one on a set of your own "
                                 f"(adiyan calibrate-floor --evalset PATH --write; docs/concepts/pipeline.md)",
                                 "floor_cannot_separate", cal)
        return FloorDecision(embedder_id, value, value, "calibrated", True, float(j), min_j,
                             f"calibrated floor {value} for {embedder_id}: J {float(j):.3f} on {where}", None, cal)
    return FloorDecision(embedder_id, default, default, "default", True, None, min_j,
                         f"no configured or calibrated floor for {embedder_id}: default_floor {default}"
                         + (" (no floor)" if default <= 0 else ""), None, cal)


def resolve_floor(retrieval, embedder_id: str) -> float:
    """The score floor the pipeline applies for ``embedder_id`` (see :func:`floor_decision`)."""
    return floor_decision(retrieval, embedder_id).floor
