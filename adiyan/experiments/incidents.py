"""The incidents experiment (notebooks/incidents.ipynb): the five incident replays as point metrics."""

from __future__ import annotations

from ..eval.incidents import as_dict, incident_metrics, replay_all
from .common import PointResult


def evaluate_incidents(settings, *, progress: bool = False) -> PointResult:
    """The five incident replays (:func:`adiyan.eval.incidents.replay_all`) as sweep metrics:
    per incident whether it holds and the share of its variants held (n/a ones are left out)."""
    results = replay_all(settings, progress=progress)
    rows = []
    for r in results:
        row = {"qid": f"incident-{r.number}", "seconds": r.seconds}
        if r.holds is not None:
            row["holds"] = float(r.holds)
        if r.variants_share is not None:
            row["variants_held"] = r.variants_share
        rows.append(row)
    metrics = {f"incidents.{name}": v for name, v in incident_metrics(results).items()}  # the run's names
    return PointResult(metrics, rows, {"incidents": [as_dict(r) for r in results]})


def incident_narrative(result: PointResult) -> str:
    """The incident replays of :func:`evaluate_incidents` told in Markdown: what happened to the
    seed, what the before and the after run, what the replay measured and with which model, the
    variants held, and whether the principle holds."""
    verdicts = {"holds": "the principle holds (production configuration)",
                "demonstrated on a replica": "demonstrated on a replica (production refuses the before)",
                "FAILS": "**the principle does not hold**", "n/a": "*not measurable in this configuration*"}
    lines = []
    for r in result.info["incidents"]:
        lines.append(f"### {r['number']}. {r['name']}: {verdicts[r['status']]} ({r['variants_text']})")
        lines.append(f"*Principle.* {r['principle']}")
        if r.get("before"):
            lines.append(f"*Before* ({r.get('basis', 'production configuration')}): {r['before']}. "
                         f"*After:* {r['after']}.")
        if r.get("basis_note"):
            lines.append(f"*Why a replica:* {r['basis_note']}.")
        lines.append(f"*The seed recorded* {r['seed_figure']}. *Measured here* ({r['model']}, {r['seconds']:.1f} s): "
                     f"{r['measured']}.")
        details = {k: v for k, v in (r.get("details") or {}).items() if not isinstance(v, (list, dict))}
        if details:
            lines.append("*Details:* " + "; ".join(f"{k} = {v}" for k, v in details.items()) + ".")
        lines.append("")
    return "\n\n".join(lines)
