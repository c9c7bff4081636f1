"""SciFact train: more than two signals, offline (issue 16). Two dense models and BM25 fused by a
weighted sum of z-normalised scores (``adiyan.retrieval.fusion.weighted``), weights on a 0.05 grid,
over the lists stage 1 of ``scifact_tuning.py`` fetched from each embedder's knowledge-base index
(``<cache_dir>/benchmarks/scifact_train_lists.<embedder>.pkl``; run that script with ``--embedder``
first). Train only: this decides whether a second dense signal is worth building into the product.
``--matryoshka 256 128`` adds nomic-embed-text cut to those widths (read from the full-width cache).

    python benchmarks/scifact_signals.py --embedders minilm nomic-embed-text [--out reports/benchmarks/scifact_signals.json]
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(ROOT))

from benchmarks.scifact import _log  # noqa: E402
from benchmarks.scifact_tuning import PRODUCT_DEPTH, lists_file, to_run  # noqa: E402

STEP = 0.05


def grid(n: int, step: float = STEP):
    """Every weight vector of ``n`` non-negative multiples of ``step`` summing to 1."""
    units = round(1 / step)

    def rec(k, left):
        if k == 1:
            yield (left,)
            return
        for i in range(left + 1):
            for rest in rec(k - 1, left - i):
                yield (i, *rest)

    for w in rec(n, units):
        yield tuple(round(x * step, 4) for x in w)


def run(embedders: list[str], cache_dir: Path, data_dir: Path, norms=("z",), step: float = STEP) -> dict:
    from adiyan.eval.beir import load_beir
    from adiyan.eval.ir_metrics import evaluate_run
    from adiyan.retrieval.fusion import weighted

    loaded = {}
    for e in embedders:
        f = lists_file(cache_dir, e)
        if not f.is_file():
            raise SystemExit(f"{f}: missing; run benchmarks/scifact_tuning.py --embedder {e} --train-only first")
        with f.open("rb") as fh:  # written by scifact_tuning.py on this machine
            loaded[e] = pickle.load(fh)
    qrels = load_beir(data_dir, "train").qrels
    first = loaded[embedders[0]]
    ids, qids = first["ids"], list(first["lists"])
    # one source map across embedders (chunk keys are the same documents in every index)
    merged = {}
    for q in qids:
        src = {}
        for e in embedders:
            src.update(loaded[e]["lists"][q]["source"])
        merged[q] = {"source": src, "sig": [loaded[e]["lists"][q]["dense"] for e in embedders]
                     + [first["lists"][q]["bm25"]]}
    names = [*embedders, "bm25"]
    rows = {}
    t0 = time.perf_counter()
    for norm in norms:
        for w in grid(len(names), step):
            fused = {q: weighted(m["sig"], w, norm=norm, top_k=PRODUCT_DEPTH) for q, m in merged.items()}
            score = evaluate_run(qrels, to_run(merged, fused, ids), ["ndcg@10"])["ndcg@10"]
            rows[f"{norm}:" + ",".join(f"{n}={x}" for n, x in zip(names, w))] = round(score, 4)
    best = max(rows, key=rows.get)
    two = {k: v for k, v in rows.items() if sum(1 for part in k.split(":")[1].split(",")
                                                 if not part.endswith("=0.0")) <= 2}
    best_two = max(two, key=two.get)
    _log(f"best of {len(rows)}: {best} {rows[best]}; best with <= 2 signals {best_two} {two[best_two]}")
    return {"signals": names, "n_queries": len(qids), "rows": rows, "best": best, "best_two_signals": best_two,
            "grid_s": round(time.perf_counter() - t0, 1), "split": "train (809 queries); test untouched"}


def matryoshka(data_dir: Path, dims=(256, 128), embedder: str = "nomic-embed-text") -> dict:
    """Train nDCG@10 of the embedder cut to each width (dense alone, convex z 0.6 with BM25 — the weight
    tuned at full width — and RRF k=60), through each width's own product index; the embedding cache
    holds the full-width rows, so no width re-encodes (``cache`` shows the misses: 0 once encoded)."""
    from adiyan.eval.beir import load_beir
    from adiyan.eval.evalset import beir_ids, materialize_beir
    from adiyan.eval.harness import close_index, open_index
    from adiyan.eval.ir_metrics import evaluate_run
    from benchmarks.scifact_tuning import _settings, collect, fuse

    train = load_beir(data_dir, "train")
    out = {}
    for dim in dims:
        s = _settings(None, {"embedder.truncate_dim": dim}, embedder=embedder)
        t0 = time.perf_counter()
        idx = open_index(s, materialize_beir(data_dir, split="test"), progress=False)
        build_s = time.perf_counter() - t0
        try:
            ids, lists = beir_ids(idx.evalset), collect(idx.kb, train.queries, PRODUCT_DEPTH)
            cache = idx.kb.embedder.stats.as_dict()
        finally:
            close_index(idx)
        row = {"open_index_s": round(build_s, 1), "cache": cache}
        for name, cfg in (("dense", {"mode": "dense"}), ("convex_z_a0.6", {"fusion": "convex", "alpha": 0.6, "norm": "z"}),
                          ("rrf_k60", {"fusion": "rrf", "rrf_k": 60})):
            run = to_run(lists, {q: fuse(l, cfg, PRODUCT_DEPTH) for q, l in lists.items()}, ids)
            row[name] = round(evaluate_run(train.qrels, run, ["ndcg@10"])["ndcg@10"], 4)
        out[f"{embedder}@{dim}"] = row
        _log(f"matryoshka {embedder}@{dim}: {row}")
    return out


def main(argv=None) -> int:
    from adiyan.config import load_settings

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--embedders", nargs="+", default=["minilm", "nomic-embed-text"])
    ap.add_argument("--data", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--norms", nargs="+", default=["z"], help="z and/or minmax (z won every two-signal grid)")
    ap.add_argument("--step", type=float, default=STEP)
    ap.add_argument("--matryoshka", nargs="*", type=int, default=[256, 128],
                    help="also measure nomic-embed-text cut to these widths (train; none: skip)")
    args = ap.parse_args(argv)
    s = load_settings(None)
    data_dir = Path(args.data) if args.data else Path(s.paths.datasets_dir) / "scifact"
    out = Path(args.out) if args.out else Path(s.paths.reports_dir) / "benchmarks" / "scifact_signals.json"
    res = run(args.embedders, Path(s.paths.cache_dir), data_dir, tuple(args.norms), args.step)
    if args.matryoshka:
        res["matryoshka_train"] = matryoshka(data_dir, tuple(args.matryoshka))
    out.write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")
    _log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
