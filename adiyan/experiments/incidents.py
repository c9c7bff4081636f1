"""The incidents experiment (notebooks/incidents.ipynb): the five incident replays as point metrics."""

from __future__ import annotations

from dataclasses import asdict

from ..eval.incidents import replay_all
from .common import PointResult


def evaluate_incidents(settings, *, progress: bool = False) -> PointResult:
    """The five incident replays (:func:`adiyan.eval.incidents.replay_all`) as sweep metrics."""
    results = replay_all(settings, progress=progress)
    metrics = {"principles_holding_share": sum(r.holds for r in results) / len(results)}
    rows = []
    for r in results:
        metrics[f"{r.number}_{r.name.replace(' ', '_')}_holds"] = float(r.holds)
        rows.append({"qid": f"incident-{r.number}", "holds": float(r.holds), "seconds": r.seconds})
    return PointResult(metrics, rows, {"incidents": [asdict(r) for r in results]})


def incident_narrative(result: PointResult) -> str:
    """The incident replays of :func:`evaluate_incidents` told in Markdown: what happened to the
    seed, what the replay measured here and with which model, the principle, and whether it holds."""
    lines = []
    for r in result.info["incidents"]:
        verdict = "the principle holds" if r["holds"] else "**the principle does not hold**"
        lines.append(f"### {r['number']}. {r['name']}: {verdict}")
        lines.append(f"*Principle.* {r['principle']}")
        lines.append(f"*The seed recorded* {r['seed_figure']}. *Measured here* ({r['model']}, {r['seconds']:.1f} s): "
                     f"{r['measured']}.")
        details = {k: v for k, v in (r.get("details") or {}).items() if not isinstance(v, (list, dict))}
        if details:
            lines.append("*Details:* " + "; ".join(f"{k} = {v}" for k, v in details.items()) + ".")
        lines.append("")
    return "\n\n".join(lines)
