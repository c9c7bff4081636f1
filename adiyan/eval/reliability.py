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

WARNINGS_DOC = "docs/reference/warnings.md"  # one section per warning name: what it means, what to do


def warning(name: str, message: str, detail: str = "") -> dict:
    """A run's named warning: ``message`` says in one sentence what it means and what the user can
    do, ``detail`` the figures behind it, ``doc`` the docs section (``WARNINGS_DOC#name``)."""
    return {"name": name, "message": message, "detail": detail, "doc": f"{WARNINGS_DOC}#{name}"}


_FLOOR_MESSAGES = {
    "floor_cannot_separate": "the similarity floor cannot tell relevant from irrelevant chunks (Youden's J under "
                             "retrieval.floor_min_j), so a calibrated one is not applied; nothing to do unless you want "
                             "a floor, then calibrate one on a labelled set of your own",
    "floor_not_measured": "retrieval.score_floors sets a floor whose effect was never measured; measure it with "
                          "adiyan calibrate-floor --write",
}


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
        out.append(warning("judge_unreliable",
                           f"the judge ({cal['judge']}) did not agree with labelled pairs often enough to be trusted, "
                           "so the LLM-judged metrics were not computed; nothing to do offline (the claim checker's group "
                           "claims measures the answers), or point eval.judge at a capable model server",
                           f"{cal['why']}{reused}"))
    if decision is not None:
        if decision.warning:
            out.append(warning(decision.warning, _FLOOR_MESSAGES.get(decision.warning, decision.reason),
                               decision.reason))
        cal = decision.calibration or {}
        if cal.get("evalset_hash") and scored_hash.startswith(str(cal["evalset_hash"])):
            out.append(warning("floor_calibrated_on_scored_set",
                               f"the floor of {decision.embedder_id} was calibrated on the set this run scores "
                               f"({cal.get('evalset')}), so its figures flatter it; recalibrate on a disjoint set "
                               "(adiyan calibrate-floor --evalset OTHER --write)"))
        if floor_details and not floor_details.get("measured", True):
            out.append(warning("floor_not_measured_on_scored_set",
                               "what the floor removes could not be measured on this set; nothing to do, or score a "
                               "labelled evalset to see it", floor_details.get("why", "")))
        j_scored = (floor_details or {}).get("j_scored")
        if decision.applied and decision.floor > 0 and j_scored is not None and j_scored < decision.min_j:
            # Reported, never acted on: choosing the floor by the scored set's labels would flatter it.
            (rb, rt), (ib, it) = floor_details["relevant_below"], floor_details["irrelevant_below"]
            out.append(warning("floor_cannot_separate_on_scored_set",
                               f"the applied floor cannot separate relevant from irrelevant chunks on this set, so "
                               f"its figures measure the floor as much as {decision.embedder_id}; compare embedders "
                               "under the same floor policy (retrieval.use_calibrated_floors=false on both)",
                               f"the {decision.source} floor {decision.floor} of {decision.embedder_id} is applied "
                                   f"but cannot separate relevant from irrelevant results on this set: J {j_scored:.3f} < "
                                   f"{decision.min_j} here (J {_fmt(decision.youden_j)} on "
                                   f"{cal.get('evalset') or 'its calibration set'}); it drops {rb} of {rt} relevant and "
                                   f"{ib} of {it} irrelevant top-{floor_details.get('k')} chunks. Its numbers measure "
                               "the floor as much as the embedder."))
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
    return [f"  WARNING {w['name']}: {w['message']} ({w.get('doc') or WARNINGS_DOC})" for w in m.get("warnings") or []]
