"""What a run says about how far its own numbers can be trusted: the judge and the score floor.

``invoke eval`` turns the judge's calibration and the floor's decision into

- the ``ragas_llm`` metric group: the judge's agreement with its 95% interval and the number of
  labelled pairs, ``judge_reliable``, and per judged metric its mean, ``.n`` (the questions the
  mean is over) and ``.failed``;
- named warnings (``metrics.json`` → ``warnings``, shown at the top of ``report.html`` and in
  the summary): ``judge_unreliable``, ``floor_cannot_separate``, ``floor_not_measured``,
  ``floor_calibrated_on_scored_set``, ``floor_not_measured_on_scored_set``,
  ``floor_cannot_separate_on_scored_set`` (an applied floor whose J on the scored set is under
  ``retrieval.floor_min_j``: reported only, the floor stays as decided on its calibration set);
- the summary's lines, where an unreliable judge's metrics are marked and never read as plain
  numbers.
"""

from __future__ import annotations

from ..report import judged_unreliable
from ..retrieval.floor import FloorDecision


def judged_group(judged: dict) -> dict:
    """The ``ragas_llm`` metric group of a run from what ``_ragas_llm`` returned."""
    cal = judged["calibration"]
    group = {"judge_agreement": cal["agreement"], "judge_agreement_ci_low": cal["ci95_low"],
             "judge_agreement_ci_high": cal["ci95_high"], "judge_calibration_pairs": cal["n"],
             "judge_reliable": float(cal["reliable"])}
    for name, s in judged["summary"].get("metrics", {}).items():
        group[name] = s.get("mean")
        group[f"{name}.n"] = s.get("ok")  # the mean is over the rows the judge scored validly
        group[f"{name}.failed"] = s.get("failed")
    return group


def warnings_for(judged: dict | None, decision: FloorDecision | None, floor_details: dict | None,
                 scored_hash: str = "") -> list[dict]:
    """Named warnings of a run: ``[{"name", "message"}]``, judge first."""
    out = []
    if judged is not None and not judged["calibration"]["reliable"]:
        cal = judged["calibration"]
        reused = "; calibration reused from the cache" if cal.get("reused") else ""
        out.append({"name": "judge_unreliable",
                    "message": f"{cal['why']} ({cal['judge']}): the LLM-judged metrics were not computed{reused}. "
                               "The claim checker's metrics (group claims) measure the answers offline; an LLM "
                               "judge runs only once its calibration clears eval.judge_reliable_agreement "
                               "(docs/concepts/evaluation.md#the-judge)."})
    if decision is not None:
        if decision.warning:
            out.append({"name": decision.warning, "message": decision.reason})
        cal = decision.calibration or {}
        if cal.get("evalset_hash") and scored_hash.startswith(str(cal["evalset_hash"])):
            out.append({"name": "floor_calibrated_on_scored_set",
                        "message": f"the floor of {decision.embedder_id} was calibrated on {cal.get('evalset')}, "
                                   "the set this run scores: its J flatters it. Recalibrate on a disjoint set "
                                   "(adiyan calibrate-floor --write)."})
        if floor_details and not floor_details.get("measured", True):
            out.append({"name": "floor_not_measured_on_scored_set", "message": floor_details.get("why", "")})
        j_scored = (floor_details or {}).get("j_scored")
        if decision.applied and decision.floor > 0 and j_scored is not None and j_scored < decision.min_j:
            # Reported, never acted on: choosing the floor by the scored set's labels would flatter it.
            (rb, rt), (ib, it) = floor_details["relevant_below"], floor_details["irrelevant_below"]
            out.append({"name": "floor_cannot_separate_on_scored_set",
                        "message": f"the {decision.source} floor {decision.floor} of {decision.embedder_id} is applied "
                                   f"but cannot separate relevant from irrelevant results on this set: J {j_scored:.3f} < "
                                   f"{decision.min_j} here (J {_fmt(decision.youden_j)} on "
                                   f"{cal.get('evalset') or 'its calibration set'}); it drops {rb} of {rt} relevant and "
                                   f"{ib} of {it} irrelevant top-{floor_details.get('k')} chunks. Its numbers measure "
                                   "the floor as much as the embedder: compare embedders with the same floor policy "
                                   "(e.g. retrieval.use_calibrated_floors=false for both)."})
    return out


def _fmt(v) -> str:
    return f"{v:.3f}" if isinstance(v, float) else f"{v}"


def group_line(m: dict, group: str, vals: dict) -> str:
    """One summary line per metric group. A judged mean is printed with its n; one from an
    unreliable judge is bracketed and marked, never a plain number."""
    shown = []
    for k, v in vals.items():
        base, _, suffix = k.rpartition(".")
        if suffix in ("n", "failed") and base in vals:
            continue  # printed beside its mean
        if group == "ragas_llm" and k == "judge_agreement" and "judge_agreement_ci_low" in vals:
            lo, hi = vals.get("judge_agreement_ci_low"), vals.get("judge_agreement_ci_high")
            shown.append(f"{k}={_fmt(v)} [95% CI {_fmt(lo)}-{_fmt(hi)}, {vals.get('judge_calibration_pairs')} pairs]")
            continue
        if k in ("judge_agreement_ci_low", "judge_agreement_ci_high", "judge_calibration_pairs"):
            continue
        if f"{k}.n" in vals:
            extra = f"n={vals[f'{k}.n']}" + (f", {vals[f'{k}.failed']} failed" if vals.get(f"{k}.failed") else "")
            if judged_unreliable(m.get("metrics") or {}, group, k):
                shown.append(f"{k}=[UNRELIABLE {_fmt(v)}, {extra}]")
            else:
                shown.append(f"{k}={_fmt(v)} ({extra})")
            continue
        shown.append(f"{k}={_fmt(v)}")
    return f"  {group:<10} " + "  ".join(shown)


def warning_lines(m: dict) -> list[str]:
    return [f"  WARNING {w['name']}: {w['message']}" for w in m.get("warnings") or []]
