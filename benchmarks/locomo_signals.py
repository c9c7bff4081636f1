"""Which retrieval signals could carry the memory to LoCoMo recall@10 >= 0.75 (issue 43): each packaged
embedder and BM25 over the raw turns, alone and fused, weights chosen on a dev split and measured on the
conversations held out.

Exact search over every turn of the question's conversation (no store, no time): the ceiling each signal
mix gives the memory's ranking, before recency and the candidate cut. Signals: BM25 (the project's,
divided by the best BM25 of the conversation for the question) and the cosine of minilm, mpnet and
nomic-embed-text (each through the embedding cache; nomic with its search prefixes). Fused score =
sum of weight x signal; weights on a grid of 0..0.5 in steps of 0.1, chosen by dev recall@10 (LoCoMo's
first two conversations, conv-26 and conv-30, as for the memory's thresholds in docs/locomo.md), then
reported on the six held-out conversations with a paired Fisher randomization test against BM25 and
against the memory's current signals (0.5 BM25 + 0.5 minilm). The dev-best weights are also reported with the
question's dates read (``memory.question_dates``: the turns said in the window its absolute date names
ranked first, adiyan/retrieval/question_dates.py), the one use of time that helps an exact search. Deterministic; cold, nomic embeds the
6,391 texts in about 7 minutes, warm the whole run takes about a minute.

    python benchmarks/locomo_signals.py --out benchmarks/results/locomo-signals.json
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time

from _common import SHARED, machine, write_json

DEV = ("conv-26", "conv-30")
SIGNALS = ("bm25", "minilm", "mpnet", "nomic-embed-text")
GRID = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)
CURRENT = {"bm25": 0.5, "minilm": 0.5}  # memory.search=hybrid, memory.lexical_weight 0.5, the minilm default


def main(argv: list[str] | None = None) -> int:
    import numpy as np

    from adiyan.config import load_settings
    from adiyan.stats import fisher_randomization_p
    from adiyan.eval.locomo.data import CATEGORIES, load_locomo
    from adiyan.eval.locomo.scoring import evidence_recall
    from adiyan.factory import open_embedder
    from adiyan.retrieval.bm25 import BM25Retriever
    from adiyan.retrieval.dense import embed_queries, embed_texts
    from adiyan.retrieval.question_dates import DATE_TIER, inside, question_window
    from adiyan.retrieval.recency import parse_timestamp

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--locomo", default=str(SHARED / "locomo" / "locomo8.json"))
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    ls = load_locomo(a.locomo)
    base = load_settings(None)
    rows = []  # per question: signals (n_turns,), evidence, turn ids, category, dev?
    embedders = {n: open_embedder(base.with_overrides({"embedder.name": n}), progress=True) for n in SIGNALS[1:]}
    for conv in ls.conversations:
        ids, texts = [t.dia_id for t in conv.turns], [t.text for t in conv.turns]
        queries = {q.qid: q.question for q in conv.questions}
        cos = {}
        for n, emb in embedders.items():
            d = embed_texts(emb, texts, progress=True)
            d = d / np.linalg.norm(d, axis=1, keepdims=True)
            qids, qv = embed_queries(emb, queries, progress=True)
            qv = qv / np.linalg.norm(qv, axis=1, keepdims=True)
            cos[n] = dict(zip(qids, qv @ d.T))
        bm = BM25Retriever().index(ids, texts)
        said = [parse_timestamp(t.at) for t in conv.turns]
        for q in conv.questions:
            b = bm.scores(q.question).astype(np.float64)
            b = b / b.max() if b.max() > 0 else b
            window = question_window(q.question)
            dated = None if window is None else np.array([inside(window, t) for t in said])
            rows.append({"s": {"bm25": b, **{n: cos[n][q.qid].astype(np.float64) for n in embedders}},
                         "dated": dated if dated is not None and dated.any() and not dated.all() else None,
                         "evidence": q.evidence, "ids": ids, "category": CATEGORIES.get(q.category, str(q.category)),
                         "dev": conv.id in DEV})

    def recalls(w: dict, part: bool, dates: bool = False) -> np.ndarray:
        out = []
        for r in rows:
            if r["dev"] != part:
                continue
            score = sum(w.get(k, 0.0) * r["s"][k] for k in SIGNALS)
            if dates and r["dated"] is not None:  # memory.question_dates: the asked-about time first
                score = score + DATE_TIER * r["dated"]
            out.append(evidence_recall(r["evidence"], [r["ids"][i] for i in np.argsort(-score, kind="stable")[:10]]))
        return np.asarray(out)

    grid = []
    for ws in itertools.product(GRID, repeat=len(SIGNALS)):
        if sum(ws) > 0:
            w = {k: v for k, v in zip(SIGNALS, ws) if v}
            grid.append((float(recalls(w, True).mean()), w))
    grid.sort(key=lambda x: (-x[0], sorted(x[1].items())))
    best_dev, best = grid[0]
    held = [r for r in rows if not r["dev"]]
    cats = sorted({r["category"] for r in held})

    def describe(w: dict, dates: bool = False) -> dict:
        v = recalls(w, False, dates)
        per = {c: round(float(np.mean([x for x, r in zip(v, held) if r["category"] == c])), 4) for c in cats}
        return {"weights": w, "question_dates": dates, "dev_recall@10": round(float(recalls(w, True, dates).mean()), 4),
                "held_out_recall@10": round(float(v.mean()), 4), "held_out_by_category": per}

    methods = {s: describe({s: 1.0}) for s in SIGNALS}
    methods["current_memory_signals"] = describe(CURRENT)
    methods["dev_best_fusion"] = describe(best)
    methods["dev_best_fusion_question_dates"] = describe(best, dates=True)  # the weights as chosen, dates read
    vd = recalls(best, False, True)
    vb, vc, vf = recalls({"bm25": 1.0}, False), recalls(CURRENT, False), recalls(best, False)
    result = {
        "what": "LoCoMo evidence recall@10 of exact search over a conversation's raw turns, per signal and fused; "
                "weights chosen on the dev split (conv-26, conv-30), reported on the 6 held-out conversations",
        "dataset": {"path": a.locomo, "hash": ls.content_hash(), "dev": list(DEV),
                    "dev_questions": sum(r["dev"] for r in rows), "held_out_questions": len(held)},
        "grid": {"values": list(GRID), "points": len(grid), "top5_on_dev": [{"dev": round(r, 4), "weights": w}
                                                                            for r, w in grid[:5]]},
        "methods": methods,
        "paired_held_out": {
            "dev_best_vs_bm25": {"delta": round(float(vf.mean() - vb.mean()), 4),
                                 "p_value": fisher_randomization_p(vb, vf, 10000, 0)},
            "question_dates_vs_dev_best": {"delta": round(float(vd.mean() - vf.mean()), 4),
                                           "p_value": fisher_randomization_p(vf, vd, 10000, 0),
                                           "dated_questions": {"dev": sum(r["dated"] is not None for r in rows if r["dev"]),
                                                               "held_out": sum(r["dated"] is not None for r in held)}},
            "dev_best_vs_current": {"delta": round(float(vf.mean() - vc.mean()), 4),
                                    "p_value": fisher_randomization_p(vc, vf, 10000, 0)},
            "n_permutations": 10000, "seed": 0},
        "seconds": round(time.perf_counter() - t0, 1),
        "machine": machine(),
    }
    write_json(result, a.out, quiet=True)
    for k, m in methods.items():
        print(f"{k:24s} dev {m['dev_recall@10']:.4f}  held-out {m['held_out_recall@10']:.4f}  {m['weights']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
