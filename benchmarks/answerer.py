"""The offline answerers side by side: extractive (quotes) vs SmolLM2 (writes), issue 25 item 2.

    python benchmarks/answerer.py --calibrate        # XQuAD + ClapNQ calibration halves -> adiyan/models/extractive.yaml
    python benchmarks/answerer.py --measure [--smollm2-n 30]

Data: adiyan_full (evalsets/), ClapNQ dev and XQuAD English (../shared/datasets, their BEIR folders
with qa.jsonl). Retrieval is the product path (open_index + the configured Retriever, minilm,
k = 4); both answerers get the same retrieved chunks through ``generation.answer_question``.

Each QA set is split in two halves by a hash of the question id (sha256, even / odd): the
extractive answerer's weights and abstention threshold are calibrated on the even halves only
(``--calibrate``), and every figure of ``--measure`` is on the odd halves and on adiyan_full,
which no calibration reads.

Unanswerable questions: adiyan_full has its own (kind ``unanswerable``). ClapNQ and XQuAD have
none, so each measured question is also asked over its ranking with the gold passages removed
(the top k of what is left): the documents it sees do not hold the answer, and the right reply
is the abstention ("unanswerable by construction").

Metrics: keyword recall (adiyan_full: every answer keyword in the answer; XQuAD: a gold answer
span in the answer, case-insensitive; ClapNQ: its answers are long-form, no keyword), ROUGE-L
and exact match (RAGAS's non-LLM metrics, as ``invoke eval``), abstention on unanswerable and on
answerable questions, latency per answer (median, p95; SmolLM2's measured uncached).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")

from _common import ROOT, SHARED, machine, percentile, write_json  # noqa: E402

from adiyan.cache import CallCache  # noqa: E402
from adiyan.config import load_settings  # noqa: E402
from adiyan import metrics as M  # noqa: E402
from adiyan.eval.harness import close_index, open_index, question_rows  # noqa: E402
from adiyan.eval.ir_metrics import mcnemar_p  # noqa: E402
from adiyan.eval.ragas_metrics import score_non_llm  # noqa: E402
from adiyan.factory import open_llm, open_retriever  # noqa: E402
from adiyan.generation import answer_question, assemble_context, effective_budget  # noqa: E402
from adiyan.models.extractive import PARAMS_FILE, ExtractiveAnswerer  # noqa: E402

QA_SETS = {"xquad": SHARED / "xquad_en", "clapnq": SHARED / "clapnq_dev"}
OUT = ROOT / "reports" / "benchmarks" / "answerer.json"
ENTRY = "benchmarks/answerer.py"


def half(qid: str) -> str:
    return "calibration" if int(hashlib.sha256(qid.encode()).hexdigest(), 16) % 2 == 0 else "test"


def settings_for(evalset: Path, llm: str = "extractive"):
    return load_settings(None, {"eval.evalset": str(evalset), "llm.name": llm, "eval.judge": None,
                                "eval.incidents": False}, environ={})


def qa_rows(name: str) -> dict[str, dict]:
    return {str(r["id"]): r for r in map(json.loads, (QA_SETS[name] / "qa.jsonl").read_text().splitlines())}


def items(name: str, which: str):
    """[(question row, chunks, gold answer, answers, unanswerable?)] of one set and half; QA sets
    add each question again over its ranking without the gold passages (unanswerable)."""
    evalset = ROOT / "evalsets" / "adiyan_full" if name == "adiyan_full" else QA_SETS[name] / "beir"
    s = settings_for(evalset)
    index = open_index(s, progress=False)
    try:
        retriever = open_retriever(s, index.kb, None, entry_point=ENTRY)
        qr = question_rows(index, retriever, progress=False)
    finally:
        close_index(index)
    k = s.retrieval.kb_top_k
    qa = qa_rows(name) if name in QA_SETS else {}
    out = []
    for r in qr.rows:
        if name in QA_SETS and half(r["id"]) != which:
            continue
        res = qr.results[r["id"]]
        gold = set(r["gold_sources"])
        answers = qa[r["id"]]["answers"] if qa else r["answer_keywords"]
        base = {"id": r["id"], "question": r["question"], "gold_answer": r["gold_answer"],
                "gold_sources": r["gold_sources"], "kind": r.get("kind", "lookup"),
                "extra": qa.get(r["id"], {})}
        if name == "adiyan_full":
            out.append({**base, "chunks": res.chunks, "answers": answers, "unanswerable": not gold,
                        "gold_in_context": bool(gold & {c.source for c in res.chunks})})
            continue
        out.append({**base, "chunks": res.chunks, "answers": answers, "unanswerable": False,
                    "gold_in_context": bool(gold & {c.source for c in res.chunks})})
        rest = [c for c in res.ranked if c.source not in gold][:k]
        out.append({**base, "id": r["id"] + "#nogold", "chunks": rest, "answers": [], "unanswerable": True,
                    "gold_in_context": False, "gold_answer": ""})
    return out, s


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^\w%€$.,:-]+", " ", text.lower()).split())


def keyword_hit(name: str, answer: str, it: dict) -> bool | None:
    if it["unanswerable"]:
        return None
    if name == "adiyan_full":
        return M.keyword_hit(answer, it["answers"])
    if name == "xquad":
        return any(_norm(a) in _norm(answer) for a in it["answers"])
    return None  # ClapNQ: long-form answers, no keyword


# -- calibration ------------------------------------------------------------------------
GRID_CUE = [0.0, 0.1, 0.2, 0.3, 0.4]
GRID_LEX = [0.0, 0.1, 0.2, 0.3]
GRID_READER = [0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0]


def _correct(name: str, text: str, it: dict) -> bool:
    """The quoted sentence holds the answer: XQuAD, a gold span; ClapNQ, most of a selected sentence."""
    if name == "xquad":
        return any(_norm(a) in _norm(text) for a in it["answers"])
    from adiyan.models.extractive import content_words

    words = content_words(text)
    for sel in it["extra"].get("selected_sentences") or []:
        sw = content_words(sel)
        if sw and len(sw & words) / len(sw) >= 0.6:
            return True
    return False


def youden(pos: list[float], neg: list[float]) -> tuple[float, float]:
    """The cut t maximising TPR - FPR (score >= t answers), and that J."""
    best_t, best_j = 0.0, -2.0
    for t in sorted(set(pos + neg)):
        tpr = sum(p >= t for p in pos) / len(pos)
        fpr = sum(x >= t for x in neg) / len(neg)
        if tpr - fpr > best_j:
            best_t, best_j = t, tpr - fpr
    return best_t, best_j


def calibrate(args) -> dict:
    llm = open_llm(settings_for(ROOT / "evalsets" / "adiyan_full"))
    llm.params["reader"] = False  # the cosine score first: its weights and threshold as before
    llm.reader = None
    feats = []  # (set, item, candidates with features)
    for name in QA_SETS:
        its, s = items(name, "calibration")
        budget = effective_budget(s, llm)["effective"]
        for it in its:
            ctx = assemble_context(it["question"], it["chunks"], budget_tokens=budget, count=llm.count_tokens)
            feats.append((name, it, llm.features(it["question"], ctx.passages)))
        print(f"{name}: {len(its)} calibration items", flush=True)
    grid = []
    for cw in GRID_CUE:
        for lw in GRID_LEX:
            params = {**llm.params, "cue_weight": cw, "lexical_weight": lw, "threshold": -9.0}
            acc = {n: [] for n in QA_SETS}
            for name, it, cands in feats:
                if it["unanswerable"] or not it["gold_in_context"] or not cands:
                    continue
                llm.rescore(cands, params)
                ex = llm.decide(it["question"], cands, {**params, "max_sentences": 1})
                acc[name].append(_correct(name, ex.text, it))
            per = {n: sum(v) / len(v) for n, v in acc.items() if v}
            grid.append({"cue_weight": cw, "lexical_weight": lw, **{f"top1_{n}": round(v, 4) for n, v in per.items()},
                         "top1_mean": round(sum(per.values()) / len(per), 4)})
    best = max(grid, key=lambda g: (g["top1_mean"], -g["cue_weight"], -g["lexical_weight"]))
    params = {**llm.params, "cue_weight": best["cue_weight"], "lexical_weight": best["lexical_weight"]}
    pos, neg = [], []
    for name, it, cands in feats:
        if not cands:
            (neg if it["unanswerable"] else pos).append(-9.0)
            continue
        top = max(c.score for c in llm.rescore(cands, params))
        if it["unanswerable"]:
            neg.append(top)
        elif it["gold_in_context"]:
            pos.append(top)
    best_t, best_j = youden(pos, neg)
    result = {"threshold": round(best_t, 4), "cue_weight": best["cue_weight"],
              "lexical_weight": best["lexical_weight"], "second_margin": params["second_margin"],
              "max_sentences": params["max_sentences"]}
    reader_fig = {}
    if not args.no_reader:
        # the reader reads each item's best reader_top units (by the calibrated score); its
        # threshold is the Youden J cut of the top P(answers) between the same positives and negatives
        from adiyan.models.reader import Reader

        llm.reader = Reader.load(Path(args.reader) if args.reader else None)
        top_n = int(llm.params["reader_top"])
        for name, it, cands in feats:
            for c in cands:
                c.reader = None
            llm.read(it["question"], llm.rescore(cands, params), top=top_n)
        # the reader's weight beside the score by top-1 accuracy (as the score's weights), then the
        # threshold on score + weight * P(answers) by Youden J, over the same positives and negatives
        rgrid = []
        for w in GRID_READER:
            p = {**params, "reader": True, "reader_weight": w, "reader_threshold": -99.0, "max_sentences": 1}
            right, rpos, rneg = {n: [] for n in QA_SETS}, [], []
            for name, it, cands in feats:
                if not cands:
                    (rneg if it["unanswerable"] else rpos).append(-99.0)
                    continue
                ex = llm.decide(it["question"], cands, p)
                top = ex.best.score + w * ex.best.reader
                if it["unanswerable"]:
                    rneg.append(top)
                elif it["gold_in_context"]:
                    rpos.append(top)
                    right[name].append(_correct(name, ex.text, it))
            per = {n: sum(v) / len(v) for n, v in right.items() if v}
            rgrid.append({"reader_weight": w, **{f"top1_{n}": round(v, 4) for n, v in per.items()},
                          "top1_mean": round(sum(per.values()) / len(per), 4), "_pos": rpos, "_neg": rneg})
        rbest = max(rgrid, key=lambda g: (g["top1_mean"], -g["reader_weight"]))
        rt, rj = youden(rbest["_pos"], rbest["_neg"])
        result.update({"reader_top": top_n, "reader_weight": rbest["reader_weight"],
                       "reader_threshold": round(rt, 4), "reader_margin": llm.params["reader_margin"],
                       "reader_identity": llm.reader.identity})
        reader_fig = {"reader_youden_j": round(rj, 4),
                      **{f"reader_{k}": v for k, v in rbest.items() if k.startswith("top1_")},
                      "reader_grid": [{k: v for k, v in g.items() if not k.startswith("_")} for g in rgrid]}
    result.update({"calibrated_on": "XQuAD en + ClapNQ dev, even half by sha256(question id) (benchmarks/answerer.py)",
                   "youden_j": round(best_j, 4), **reader_fig, "n_positive": len(pos), "n_negative": len(neg),
                   "grid": grid, "measured_at": machine()["measured_at"]})
    header = ("# The extractive answerer's calibrated parameters (adiyan/models/extractive.py), written by\n"
              "# `python benchmarks/answerer.py --calibrate`: weights by top-1 answer-sentence accuracy, threshold by\n"
              "# Youden J (answerable with gold in context vs. the same questions with gold removed), on the\n"
              "# calibration halves of XQuAD and ClapNQ only; never on adiyan_full or the measured halves.\n"
              "# With the reader (adiyan/models/reader.py) each read unit scores score + reader_weight * P(answers):\n"
              "# the weight by top-1 accuracy, reader_threshold by Youden J on it (threshold is the score's alone,\n"
              "# used with reader: false).\n")
    import yaml

    keep = {k: v for k, v in result.items() if k not in ("grid", "reader_grid")}
    if args.no_reader and PARAMS_FILE.is_file():  # the reader's calibration is kept as it was
        before = yaml.safe_load(PARAMS_FILE.read_text(encoding="utf-8")) or {}
        keep.update({k: v for k, v in before.items() if k.startswith("reader") and k not in keep})
    PARAMS_FILE.write_text(header + yaml.safe_dump(keep, sort_keys=False), encoding="utf-8")
    print(json.dumps({k: v for k, v in result.items() if k not in ("grid", "reader_grid")}, indent=2))
    return result


# -- measurement ------------------------------------------------------------------------
def answer_all(name, its, s, llm, cache: CallCache | None):
    out = []
    for it in its:
        key = None
        if cache is not None:
            key = cache.key({"llm": llm.id, "q": it["question"], "chunks": [(c.source, c.chunk_index, c.text)
                                                                           for c in it["chunks"]]})
            hit = cache.get(key)
            if hit is not None:
                out.append({**hit, "id": it["id"]})
                continue
        t0 = time.perf_counter()
        ans = answer_question(llm, it["question"], it["chunks"], s)
        row = {"id": it["id"], "answer": ans.text, "latency_s": time.perf_counter() - t0,
               "used": ans.used}
        if cache is not None:
            cache.put(key, row)
        out.append(row)
    return out


def score(name, its, answers) -> dict:
    by = {a["id"]: a for a in answers}
    ans_its = [it for it in its if not it["unanswerable"]]
    una_its = [it for it in its if it["unanswerable"]]
    kw = [keyword_hit(name, by[it["id"]]["answer"], it) for it in ans_its]
    kw = [k for k in kw if k is not None]
    rows = [{"id": it["id"], "question": it["question"], "answer": by[it["id"]]["answer"],
             "retrieved": [{"source": c.source, "chunk_index": c.chunk_index, "text": c.text} for c in it["chunks"]],
             "gold_answer": it["gold_answer"], "gold_sources": it["gold_sources"]} for it in ans_its]
    per = score_non_llm(rows, id_field="source") if rows else {}
    lat = [a["latency_s"] for a in answers]

    def mean(v):
        v = [x for x in v if x is not None]
        return round(sum(v) / len(v), 4) if v else None

    return {"n_answerable": len(ans_its), "n_unanswerable": len(una_its),
            "keyword_recall": mean([float(k) for k in kw]) if kw else None,
            "rouge_l": mean(per.get("rouge_score", [])), "exact_match": mean(per.get("exact_match", [])),
            "abstain_unanswerable": mean([float(M.abstained(by[it["id"]]["answer"])) for it in una_its]),
            "abstain_answerable": mean([float(M.abstained(by[it["id"]]["answer"])) for it in ans_its]),
            "latency_median_s": round(percentile(lat, 50), 4) if lat else None,
            "latency_p95_s": round(percentile(lat, 95), 4) if lat else None}


def paired(name: str, its, first: dict, second: dict, other: str = "smollm2") -> dict:
    """Extractive (first) against SmolLM2 (second) on the same questions and retrieved chunks:
    per answerable question whether each holds a keyword, per unanswerable one whether each
    abstains; the discordant pairs and their exact McNemar p."""
    def block(values):
        a_only = sum(1 for x, y in values if x and not y)
        b_only = sum(1 for x, y in values if y and not x)
        return {"questions": len(values), "both": sum(1 for x, y in values if x and y),
                "extractive_only": a_only, f"{other}_only": b_only,
                "neither": sum(1 for x, y in values if not x and not y), "mcnemar_p": mcnemar_p(a_only, b_only)}

    kw = [(keyword_hit(name, first[it["id"]], it), keyword_hit(name, second[it["id"]], it))
          for it in its if not it["unanswerable"]]
    kw = [(x, y) for x, y in kw if x is not None and y is not None]
    ab = [(M.abstained(first[it["id"]]), M.abstained(second[it["id"]])) for it in its if it["unanswerable"]]
    return {"keyword_hit": block(kw) if kw else None, "abstains_unanswerable": block(ab) if ab else None}


def _sample(its, n):
    """n answerable and (QA sets) their n unanswerable twins, by sorted id hash: the same every run."""
    if n is None:
        return its
    base = sorted({it["id"].split("#")[0] for it in its}, key=lambda q: hashlib.sha256(q.encode()).hexdigest())[:n]
    keep = set(base)
    return [it for it in its if it["id"].split("#")[0] in keep]


def measure(args) -> dict:
    result = {"machine": machine(), "params": json.loads(json.dumps(ExtractiveAnswerer(None).params)),
              "sets": {}}
    smol_cache = CallCache(Path(load_settings(None, {}, environ={}).paths.cache_dir) / "bench_answers.sqlite",
                           "answerer-bench")
    for name in args.sets:
        its, s = items(name, "test")
        res, answered = {}, {}
        for llm_name in args.answerers:
            if llm_name == "extractive-reader":  # the default with llm.reader=true (what the reader buys)
                ls = s.with_overrides({"llm.name": "extractive", "llm.reader": True})
            else:
                ls = s.with_overrides({"llm.name": llm_name})
            llm = open_llm(ls)
            n = args.smollm2_full_n if name == "adiyan_full" else args.smollm2_n
            sub = its if llm_name.startswith("extractive") else _sample(its, n)
            answer_all(name, sub[:1], ls, llm, None)  # warm-up (model load) outside the timings
            generative = getattr(llm, "generative", True)  # a model's answers are kept (replayed on a re-run)
            answers = answer_all(name, sub, ls, llm, smol_cache if generative else None)
            answered[llm_name] = {a["id"]: a["answer"] for a in answers}
            res[llm_name] = {**score(name, sub, answers), "llm": llm.id,
                             "budget": effective_budget(ls, llm)}
            if llm_name == "extractive" and (args.smollm2_n if name != "adiyan_full" else args.smollm2_full_n):
                # the extractive answerer on SmolLM2's sample too, for a like-for-like row
                small = _sample(its, args.smollm2_n if name != "adiyan_full" else args.smollm2_full_n)
                res["extractive_on_sample"] = score(name, small, [a for a in answers
                                                                  if a["id"] in {i["id"] for i in small}])
            res[llm_name]["examples"] = [{"q": it["question"], "a": a["answer"][:300]}
                                         for it, a in list(zip(sub, answers))[:6]]
            print(name, llm_name, json.dumps({k: v for k, v in res[llm_name].items()
                                              if k not in ("examples", "budget")}), flush=True)
        for other in answered:  # the default against every other answerer, on the questions both answered
            if other == "extractive" or "extractive" not in answered:
                continue
            key = "paired" if other == "smollm2" else f"paired_{other}"
            res[key] = paired(name, [it for it in its if it["id"] in answered[other]],
                              answered["extractive"], answered[other], other=other)
            print(name, key, json.dumps(res[key]), flush=True)
        result["sets"][name] = res
    write_json(result, args.out)
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calibrate", action="store_true")
    ap.add_argument("--measure", action="store_true")
    ap.add_argument("--smollm2-n", type=int, default=30, help="SmolLM2: this many answerable questions per QA set "
                    "(and their unanswerable twins); adiyan_full is answered whole")
    ap.add_argument("--smollm2-full-n", type=int, default=None, help="SmolLM2 on adiyan_full: this many questions "
                    "(default: all)")
    ap.add_argument("--sets", nargs="+", default=["adiyan_full", "xquad", "clapnq"])
    ap.add_argument("--answerers", nargs="+", default=["extractive", "smollm2"])
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--reader", help="a reader folder (default: the committed adiyan/models/trained/reader)")
    ap.add_argument("--no-reader", action="store_true", help="--calibrate the cosine score only (reader: false)")
    args = ap.parse_args(argv)
    if args.calibrate:
        cal = calibrate(args)
        write_json(cal, Path(args.out).with_name("answerer_calibration.json"))
    if args.measure:
        measure(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
