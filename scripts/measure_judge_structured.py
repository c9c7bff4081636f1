"""The judge's agreement on the run's labelled pairs with its verdict through the schema (issue 25).

The same pairs ``invoke eval`` calibrates on (``evalset_calibration_pairs`` over eval.evalset, gold
documents' text from the KB), the configured judge (``eval.judge``, default the embedded smollm2),
``llm.structured`` as given (auto: the grammar; none: free text). Writes one JSON object: the
calibration (agreement, Wilson interval, per label, failures), the judge's statuses and its
structured mode.

    python scripts/measure_judge_structured.py --set llm.structured=none --out /tmp/judge_none.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from adiyan.config import load_settings, parse_set
from adiyan.eval.harness import close_index, open_index
from adiyan.eval.judge import calibrate, evalset_calibration_pairs, judge_from_settings
from adiyan.types import OWNER


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--set", action="append", default=[], dest="overrides")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    settings = load_settings(None, parse_set(args.overrides))
    index = open_index(settings)
    try:
        es, kb = index.evalset, index.kb
        failed = {f["file"] for f in index.ingest_failures}
        doc_texts = {d.source_key: kb.get_document_text(d.source_key, OWNER) for d in es.documents
                     if d.filename not in failed}
    finally:
        close_index(index)
    pairs = evalset_calibration_pairs(es, seed=settings.seed, n_pairs=settings.eval.judge_calibration_pairs,
                                      doc_texts=doc_texts)
    judge = judge_from_settings(settings)
    t0 = time.perf_counter()
    cal = calibrate(judge, pairs, reliable_threshold=settings.eval.judge_reliable_agreement)
    out = {"evalset": str(settings.eval.evalset), "judge": judge.describe(), "seconds": time.perf_counter() - t0,
           "calibration": cal.as_dict(), "judge_stats": judge.stats.as_dict()}
    Path(args.out).write_text(json.dumps(out, indent=2, default=str), encoding="utf-8")
    c = out["calibration"]
    print(f"{judge.id} structured={out['judge']['structured']}: agreement {c['agreement']} on {c['n']} pairs "
          f"(95% CI {c['ci95_low']}-{c['ci95_high']}), failed {c['n_failed']}, "
          f"supported verdicts {sum(v['supported'] is True for v in c['verdicts'])}, {out['seconds']:.0f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
