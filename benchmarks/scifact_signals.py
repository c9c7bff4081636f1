"""SciFact: more signals through the product path (issue 27 §3), tuned on train, each final tested once.

    python benchmarks/scifact_signals.py [--embedder nomic-embed-text] [--extra minilm] [--no-title]
                                         [--train-only] [--no-generalisation] [--out reports/benchmarks/scifact_signals.json]

One knowledge-base index carries every signal of a chunk: the main embedder's vector, a Qdrant named
vector per extra embedder (``embedder.extra``), the chunk's BM25 vector and its document title's
BM25 vector (``store.title_field``). Stage 1 (train, 809 queries) fetches every signal's list once
per query from that collection under the access filter (``kb.search``: what the pipeline's fusion
sees, 100 a side), then scores every weighting of the signals on a simplex grid (weighted fusion of
z-normalised scores, ``retrieval.fusion=weighted``: computed here with NumPy, a few of them checked
against the pipeline's own ``fusion.weighted`` and ``ir_metrics``), and the feedback routes over the best
weighting: dense PRF (each dense signal's query vector moved, Rocchio) and RM3 (the BM25 and title
query expanded, ``adiyan.retrieval.rm3``) re-query the engine; the classic BM25 + RM3 (BM25 alone)
beside them. Stage 2: the best configuration of each family, chosen on train only, runs through the
real ``Retriever`` on train (confirms the grid's figure, latency) and once on test, each on an index
carrying only the signals it weighs (index size and build time recorded), with a paired randomization
test against the product's hybrid RRF over MiniLM and against the preset ``nomic-hybrid``. The winner
is fixed by train before the test figures exist (WINNER_RULE). Stage 3: the winner and RRF on ClapNQ
dev and XQuAD (default chunking, no re-tuning) with a non-inferiority test (margin 0.01 nDCG@10).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(ROOT))

from benchmarks._scifact_tables import signals_table  # noqa: E402
from benchmarks.scifact import PRODUCT_DEPTH, PRODUCT_VARIANTS, _log, doc_id_of, product_runs  # noqa: E402
from benchmarks.scifact_tuning import to_run  # noqa: E402,F401 - the same chunk-to-document run as the tuning

STEP = 0.05
PREFETCH = 100  # candidates a side: the depth the preset nomic-hybrid was tuned at (z statistics depend on it)
METRICS = ["ndcg@10", "recall@100"]
PRF_GRID = [(m, b) for m in (3, 5, 10) for b in (0.25, 0.5)]
RM3_GRID = [(d, t, w) for d in (3, 5, 10) for t in (10, 20) for w in (0.5, 0.7, 0.9)]
WINNER_TOLERANCE = 0.002  # train nDCG@10 differences below this are noise at 809 queries
# the cost order of the finals: fewer signals and fewer engine queries first
COST = {"two_signals": 0, "three_signals": 1, "title": 2, "rm3": 3, "prf": 3, "prf+rm3": 4}
WINNER_RULE = (f"the cheapest final (order {list(COST)}) within {WINNER_TOLERANCE} train nDCG@10 of the best "
               "final, by train only; fixed before any test figure")
BASELINE = {"embedder.name": "minilm", "retrieval.mode": "hybrid"}  # the product's hybrid RRF k=60 over MiniLM


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


def base_settings(config=None, overrides: dict | None = None):
    from adiyan.config import load_settings

    return load_settings(config).with_overrides({
        "embedder.truncate_dim": None, **PRODUCT_VARIANTS["whole_documents"],
        "retrieval.rank_depth": PRODUCT_DEPTH, **(overrides or {})})


def product_overrides(embedder: str, weights: dict[str, float], *, prf=None, rm3=None) -> dict:
    """A weighting (and feedback) as the product's settings; a signal weighted 0 is not built at all
    (same ranking: it adds 0 to every score), so the index carries only what the configuration uses."""
    used = {s: w for s, w in weights.items() if w > 0 or s in ("dense", "bm25")}
    o = {"embedder.name": embedder, "embedder.extra": [s for s in used if s not in ("dense", "bm25", "title")],
         "store.title_field": "title" in used, "retrieval.mode": "hybrid", "retrieval.fusion": "weighted",
         "retrieval.fusion_norm": "z", "retrieval.fusion_weights": {s: float(w) for s, w in used.items()},
         "retrieval.hybrid_prefetch": PREFETCH}
    if prf:
        o.update({"retrieval.prf_docs": prf[0], "retrieval.prf_weight": prf[1]})
    if rm3:
        o.update({"retrieval.rm3_docs": rm3[0], "retrieval.rm3_terms": rm3[1], "retrieval.rm3_weight": rm3[2]})
    return o


# -- stage 1: the lists, once per train query ------------------------------------------------------------

def collect(kb, queries: dict, depth: int) -> dict:
    """{qid: {"text", "qv": {signal: vector}, "lists": {signal: {key: score}}, "source": {key: source},
    "chunk_text": {key: text}}} from the engine, under the evaluation requester's access filter."""
    from tqdm import tqdm

    from adiyan.eval.harness import EVAL_REQUESTER
    from adiyan.retrieval.pipeline import SPARSE_SIGNALS

    signals = kb.signals()
    dense = [s for s in signals if s not in SPARSE_SIGNALS]
    qvs = {s: dict(zip(queries, kb.signal_embedder(s).embed(list(queries.values()), "query"))) for s in dense}
    out = {}
    for qid, text in tqdm(queries.items(), desc="lists", unit="q", leave=False):
        lists, source, texts = {}, {}, {}
        for s in signals:
            mode = "bm25" if s in SPARSE_SIGNALS else "dense"
            hits = kb.search(text, depth, mode=mode, signal=s, requester=EVAL_REQUESTER,
                             query_vector=qvs[s][qid] if mode == "dense" else None)
            lists[s] = {c.key: c.score for c in hits}
            source.update({c.key: c.source for c in hits})
            texts.update({c.key: c.text for c in hits})
        out[qid] = {"text": text, "qv": {s: qvs[s][qid] for s in dense}, "lists": lists, "source": source,
                    "chunk_text": texts}
    return out


def fuse(lists: dict, weights: dict, depth: int = PRODUCT_DEPTH) -> dict:
    """One query's lists fused exactly as the pipeline's weighted fusion does (fusion.weighted, z)."""
    from adiyan.retrieval.fusion import weighted

    names = list(weights)
    return weighted([lists[n] for n in names], [weights[n] for n in names], norm="z", top_k=depth)


def library_score(data: dict, weights: dict, qrels, ids) -> dict:
    """nDCG@10 / R@100 of one weighting through the product's own functions (fusion.weighted, ir_metrics)."""
    from adiyan.eval.ir_metrics import evaluate_run

    run = to_run(data, {q: fuse(d["lists"], weights) for q, d in data.items()}, ids)
    return {m: round(v, 4) for m, v in evaluate_run(qrels, run, METRICS).items()}


def _z_matrix(lists: dict, signals: list[str]):
    """Keys (sorted: ties break by key, as fusion.rank_order does) and their z-scores per signal, a key
    missing from a list scoring that list's minimum z (fusion.weighted's floor); a constant list is 0."""
    keys = sorted(set().union(*(lists[s] for s in signals)))
    index = {k: i for i, k in enumerate(keys)}
    z = np.zeros((len(keys), len(signals)))
    for j, s in enumerate(signals):
        d = lists[s]
        if not d:
            continue
        v = np.fromiter(d.values(), dtype=np.float64, count=len(d))
        sd = v.std()
        zs = (v - v.mean()) / sd if sd > 0 else np.zeros_like(v)
        z[:, j] = zs.min()
        z[[index[k] for k in d], j] = zs
    return keys, z


def weight_grid(data: dict, signals: list[str], qrels, ids, step: float = STEP, *, fixed: dict | None = None) -> dict:
    """Mean nDCG@10 of every weighting of ``signals`` (simplex grid), vectorised: per query one matrix
    product for all weightings. ``fixed`` pins some weights to 0 (a sub-simplex)."""
    fixed = fixed or {}
    ws = [w for w in grid(len(signals), step) if all(w[signals.index(s)] == v for s, v in fixed.items())]
    W = np.asarray(ws, dtype=np.float64)  # (n_weightings, n_signals)
    total = np.zeros(len(ws))
    disc = 1.0 / np.log2(np.arange(2, 12))
    judged = [q for q in data if q in qrels]
    for qid in judged:
        keys, z = _z_matrix(data[qid]["lists"], signals)
        if not keys:
            continue
        gains = np.array([qrels[qid].get(ids.get(data[qid]["source"][k]) or doc_id_of(data[qid]["source"][k]), 0)
                          for k in keys], dtype=np.float64)
        ideal = np.sort(np.array(list(qrels[qid].values()), dtype=np.float64))[::-1][:10]
        idcg = float((ideal * disc[: len(ideal)]).sum())
        if idcg == 0:
            continue
        f = z @ W.T  # (n_keys, n_weightings)
        order = np.argsort(-f, axis=0, kind="stable")[:10]  # ties: lower index = smaller key first
        total += (gains[order] * disc[: order.shape[0], None]).sum(axis=0) / idcg
    scores = total / len(judged)
    return {w: float(s) for w, s in zip(ws, scores)}


def named(weights: tuple, signals: list[str]) -> dict:
    return {s: float(w) for s, w in zip(signals, weights)}


def wname(weights: dict) -> str:
    return "weighted_z:" + ",".join(f"{s}={w:g}" for s, w in weights.items())


def feedback_lists(kb, data: dict, weights: dict, *, prf=None, rm3=None, depth: int = PRODUCT_DEPTH) -> dict:
    """Each query's lists after pseudo-relevance feedback from the fused first ranking (the pipeline's
    order): ``prf`` (docs, weight) moves every dense signal's vector and re-queries it; ``rm3`` (docs,
    terms, weight) expands the BM25 query and re-queries the BM25 and title lists."""
    from tqdm import tqdm

    from adiyan.eval.harness import EVAL_REQUESTER
    from adiyan.retrieval.fusion import rocchio
    from adiyan.retrieval.pipeline import SPARSE_SIGNALS
    from adiyan.retrieval.rm3 import expand

    m = max(prf[0] if prf else 0, rm3[0] if rm3 else 0)
    out = {}
    for qid, d in tqdm(data.items(), desc=f"feedback prf={prf} rm3={rm3}", unit="q", leave=False):
        top = list(fuse(d["lists"], weights, max(depth, m)))[:m]
        lists, source, texts = dict(d["lists"]), dict(d["source"]), dict(d["chunk_text"])
        if prf:
            for s, qv in d["qv"].items():
                emb = kb.signal_embedder(s)
                moved = rocchio(qv, emb.embed([d["chunk_text"][k] for k in top[: prf[0]]], "document"), prf[1])
                hits = kb.search(d["text"], depth, mode="dense", signal=s, query_vector=moved,
                                 requester=EVAL_REQUESTER)
                lists[s] = {c.key: c.score for c in hits}
                source.update({c.key: c.source for c in hits})
                texts.update({c.key: c.text for c in hits})
        if rm3:
            sq = expand(kb.lexical.query(d["text"]), [d["chunk_text"][k] for k in top[: rm3[0]]], kb.term_counts,
                        terms=rm3[1], weight=rm3[2])
            for s in (x for x in d["lists"] if x in SPARSE_SIGNALS):
                hits = kb.search(d["text"], depth, mode="bm25", signal=s, sparse_query=sq, requester=EVAL_REQUESTER)
                lists[s] = {c.key: c.score for c in hits}
                source.update({c.key: c.source for c in hits})
                texts.update({c.key: c.text for c in hits})
        out[qid] = {**d, "lists": lists, "source": source, "chunk_text": texts}
    return out


def bm25_rm3(kb, data: dict, qrels, ids, depth: int = PRODUCT_DEPTH) -> dict:
    """Classic RM3 on BM25 alone (mode bm25: the feedback is BM25's own top documents), every grid point."""
    from adiyan.eval.harness import EVAL_REQUESTER
    from adiyan.eval.ir_metrics import evaluate_run
    from adiyan.retrieval.rm3 import expand

    rows = {"bm25": {"cfg": {"mode": "bm25"}, **{m: v for m, v in _score_lists(data, "bm25", qrels, ids).items()}}}
    for docs, terms, weight in RM3_GRID:
        run_lists = {}
        for qid, d in data.items():
            top = list(d["lists"]["bm25"])[:docs]
            sq = expand(kb.lexical.query(d["text"]), [d["chunk_text"][k] for k in top], kb.term_counts,
                        terms=terms, weight=weight)
            hits = kb.search(d["text"], depth, mode="bm25", sparse_query=sq, requester=EVAL_REQUESTER)
            run_lists[qid] = {**d, "source": {**d["source"], **{c.key: c.source for c in hits}},
                              "ranking": [c.key for c in hits]}
        run = to_run(run_lists, {q: v["ranking"] for q, v in run_lists.items()}, ids)
        rows[f"bm25+rm3_d{docs}_t{terms}_w{weight}"] = {
            "cfg": {"mode": "bm25", "rm3": [docs, terms, weight]},
            **{m: round(v, 4) for m, v in evaluate_run(qrels, run, METRICS).items()}}
        _log(f"train bm25+rm3 d{docs} t{terms} w{weight}: {rows[f'bm25+rm3_d{docs}_t{terms}_w{weight}']['ndcg@10']}")
    return rows


def _score_lists(data, signal, qrels, ids) -> dict:
    from adiyan.eval.ir_metrics import evaluate_run

    run = to_run(data, {q: list(d["lists"][signal]) for q, d in data.items()}, ids)
    return {m: round(v, 4) for m, v in evaluate_run(qrels, run, METRICS).items()}


def tune_train(settings, data_dir: Path, step: float = STEP) -> dict:
    """Stage 1 over the all-signals index: lists, weight grid, feedback grids, classic BM25 + RM3."""
    from adiyan.eval.beir import load_beir
    from adiyan.eval.evalset import beir_ids, materialize_beir
    from adiyan.eval.harness import close_index, open_index

    train = load_beir(data_dir, "train")
    index = open_index(settings, materialize_beir(data_dir, split="test"), progress=True)
    kb = index.kb
    try:
        ids = beir_ids(index.evalset)
        signals = kb.signals()
        t0 = time.perf_counter()
        data = collect(kb, train.queries, PRODUCT_DEPTH)
        collect_s = time.perf_counter() - t0
        rows: dict[str, dict] = {}
        for s in signals:  # each signal alone
            rows[f"{s}_alone"] = {"cfg": {"weights": {s: 1.0}}, **_score_lists(data, s, train.qrels, ids)}
        t0 = time.perf_counter()
        scores = weight_grid(data, signals, train.qrels, ids, step)
        grid_s = time.perf_counter() - t0
        ranked = sorted(scores.items(), key=lambda kv: -kv[1])
        # the best of each family (a face of the simplex), each checked against the product's own fusion
        extras = [x for x in signals if x not in ("dense", "bm25", "title")]
        families = {"two_signals": lambda w: all(w[x] == 0 for x in extras + ["title"] if x in w)}
        if extras:
            families["three_signals"] = lambda w: all(w[x] > 0 for x in extras) and w.get("title", 0) == 0
        if "title" in signals:
            families["title"] = lambda w: w["title"] > 0
        best: dict[str, dict] = {}
        for name, member in families.items():
            cand = [(w, v) for w, v in ranked if member(named(w, signals))]
            if not cand:
                continue
            w, v = cand[0]
            weights = named(w, signals)
            lib = library_score(data, weights, train.qrels, ids)
            if abs(lib["ndcg@10"] - v) > 5e-4:  # the NumPy grid must be the product's fusion
                raise AssertionError(f"grid {v:.5f} vs library {lib['ndcg@10']} for {weights}")
            best[name] = {"weights": weights, "grid_ndcg@10": round(v, 5), **lib}
            rows[f"{name}:{wname(weights)}"] = {"cfg": {"weights": weights}, **lib}
            _log(f"train best {name}: {weights} {lib}")
        # the engine's RRF over every signal, for reference (what fusion=rrf would do with these signals)
        from adiyan.retrieval.fusion import rrf

        for k in (60, 10):
            fused = {q: rrf([{"q": l} for l in d["lists"].values()], k, top_k=PRODUCT_DEPTH)["q"] for q, d in data.items()}
            from adiyan.eval.ir_metrics import evaluate_run

            rows[f"rrf_k{k}_all_signals"] = {"cfg": {"fusion": "rrf", "rrf_k": k}, **{
                m: round(v, 4) for m, v in evaluate_run(train.qrels, to_run(data, fused, ids), METRICS).items()}}
        top = max(best.values(), key=lambda b: b["ndcg@10"])["weights"]
        # feedback over the best weighting: PRF (dense), RM3 (BM25 + title), then the best of each together
        t0 = time.perf_counter()
        for prf in PRF_GRID:
            d2 = feedback_lists(kb, data, top, prf=prf)
            rows[f"prf_m{prf[0]}_b{prf[1]}:{wname(top)}"] = {"cfg": {"weights": top, "prf": list(prf)},
                                                            **library_score(d2, top, train.qrels, ids)}
            _log(f"train prf {prf}: {rows[f'prf_m{prf[0]}_b{prf[1]}:{wname(top)}']['ndcg@10']}")
        for rm3 in RM3_GRID:
            d2 = feedback_lists(kb, data, top, rm3=rm3)
            rows[f"rm3_d{rm3[0]}_t{rm3[1]}_w{rm3[2]}:{wname(top)}"] = {"cfg": {"weights": top, "rm3": list(rm3)},
                                                                      **library_score(d2, top, train.qrels, ids)}
            _log(f"train rm3 {rm3}: {rows[f'rm3_d{rm3[0]}_t{rm3[1]}_w{rm3[2]}:{wname(top)}']['ndcg@10']}")

        def best_of(prefix):
            return max((r for n, r in rows.items() if n.startswith(prefix)), key=lambda r: r["ndcg@10"])

        bp, br = best_of("prf_"), best_of("rm3_")
        best["prf"] = {"weights": top, "prf": bp["cfg"]["prf"], **{m: bp[m] for m in METRICS}}
        best["rm3"] = {"weights": top, "rm3": br["cfg"]["rm3"], **{m: br[m] for m in METRICS}}
        d2 = feedback_lists(kb, data, top, prf=tuple(bp["cfg"]["prf"]), rm3=tuple(br["cfg"]["rm3"]))
        both = library_score(d2, top, train.qrels, ids)
        rows[f"prf+rm3:{wname(top)}"] = {"cfg": {"weights": top, "prf": bp["cfg"]["prf"], "rm3": br["cfg"]["rm3"]},
                                         **both}
        best["prf+rm3"] = {"weights": top, "prf": bp["cfg"]["prf"], "rm3": br["cfg"]["rm3"], **both}
        feedback_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        classic = bm25_rm3(kb, data, train.qrels, ids)
        classic_s = time.perf_counter() - t0
        cache = {s: kb.signal_embedder(s).stats.as_dict() for s in signals if s not in ("bm25", "title")}
    finally:
        close_index(index)
    return {"n_queries": len(train.queries), "signals": signals, "step": step, "n_weightings": len(scores),
            "grid_top": [{"weights": named(w, signals), "ndcg@10": round(v, 5)} for w, v in ranked[:25]],
            "rows": rows, "best": best, "bm25_rm3": classic,
            "seconds": {"collect": round(collect_s, 1), "grid": round(grid_s, 1), "feedback": round(feedback_s, 1),
                        "bm25_rm3": round(classic_s, 1)}, "embed_cache": cache}


# -- stage 2: finals through the Retriever, on train then once on test --------------------------------------

def finals_of(train: dict, embedder: str) -> dict:
    """The product settings of each family's best (train only)."""
    out = {}
    for fam, b in train["best"].items():
        out[fam] = {"overrides": product_overrides(embedder, b["weights"], prf=b.get("prf"), rm3=b.get("rm3")),
                    "train_grid": {m: b[m] for m in METRICS}}
    # classic RM3 (BM25 alone): its best grid point goes to test even when it loses to BM25 on train,
    # so that RM3's effect on BM25 itself is measured once on test too
    bm = max(((n, r) for n, r in train["bm25_rm3"].items() if n != "bm25"), key=lambda kv: kv[1]["ndcg@10"],
             default=None)
    if bm is not None:
        d, t, w = bm[1]["cfg"]["rm3"]
        out["bm25+rm3"] = {"overrides": {"embedder.name": embedder, "retrieval.mode": "bm25", "retrieval.rm3_docs": d,
                                         "retrieval.rm3_terms": t, "retrieval.rm3_weight": w},
                           "train_grid": {m: bm[1][m] for m in METRICS}}
    return out


def winner_of(finals: dict) -> str:
    """WINNER_RULE, on the train figures through the Retriever."""
    cands = {n: f for n, f in finals.items() if n in COST}
    best = max(f["pipeline_train"]["ndcg@10"] for f in cands.values())
    return min((n for n, f in cands.items() if f["pipeline_train"]["ndcg@10"] >= best - WINNER_TOLERANCE),
               key=lambda n: (COST[n], -cands[n]["pipeline_train"]["ndcg@10"]))


def pipeline_train(settings, data_dir: Path, overrides: dict) -> dict:
    """One configuration through the real Retriever on the train queries (its own index): figure, latency."""
    from tqdm import tqdm

    from adiyan.eval.beir import load_beir
    from adiyan.eval.evalset import beir_ids, materialize_beir
    from adiyan.eval.harness import EVAL_REQUESTER, close_index, open_index, source_run
    from adiyan.eval.ir_metrics import evaluate_run
    from adiyan.factory import open_retriever

    train = load_beir(data_dir, "train")
    s = settings.with_overrides(overrides)
    index = open_index(s, materialize_beir(data_dir, split="test"), progress=True)
    try:
        ids = beir_ids(index.evalset)
        r = open_retriever(s, index.kb, entry_point="scifact signals")
        run, lat = {}, []
        for qid, text in tqdm(train.queries.items(), desc="train (Retriever)", unit="q", leave=False):
            t0 = time.perf_counter()
            res = r.retrieve(text, EVAL_REQUESTER)
            lat.append(1000 * (time.perf_counter() - t0))
            run[qid] = {ids.get(src) or doc_id_of(src): v for src, v in source_run(res.ranked).items()}
        size = index_size(index)
    finally:
        close_index(index)
    return {**{m: round(v, 4) for m, v in evaluate_run(train.qrels, run, METRICS).items()},
            "latency_ms": _lat(lat), "index": size}


def index_size(index) -> dict:
    """What the index costs: chunks, named vectors, bytes on disk (the shard's parts), build time."""
    kb = index.kb
    out = {"chunks": kb.count_chunks(), "signals": kb.signals(), "build_s": index.build.get("build_s")}
    if hasattr(kb.store, "disk_usage"):
        out["disk_bytes"] = kb.store.disk_usage(kb.collection)
        out["disk_mb"] = round(sum(v for k, v in out["disk_bytes"].items() if k in ("segments", "wal")) / 2**20, 1)
    return out


def _lat(ms) -> dict:
    a = np.asarray(ms)
    return {"p50": round(float(np.percentile(a, 50)), 2), "p95": round(float(np.percentile(a, 95)), 2)}


def evaluate_split(settings, beir_dir: Path, configs: dict, split: str, seed: int, *, baseline: str = "rrf_k60",
                   others: tuple[str, ...] = ()) -> dict:
    """Each configuration once through product_runs on ``split``: scores, paired randomization tests
    against ``baseline`` (and each of ``others``), a non-inferiority test vs the baseline, latency."""
    from adiyan.eval.beir import load_beir
    from adiyan.eval.ir_metrics import compare_runs
    from adiyan.eval.noninferiority import MARGIN, runs_non_inferiority

    ds = load_beir(beir_dir, split)
    runs, lat, idx = {}, {}, {}
    for name, overrides in configs.items():
        t0 = time.perf_counter()
        res = product_runs(settings.with_overrides(overrides), beir_dir, split, depth=PRODUCT_DEPTH, progress=True)
        (one,) = res.values()
        runs[name], lat[name] = one["run"], _lat(one["latency_ms"])
        idx[name] = {"build_s": one["index"].get("build_s"), "wall_s": round(time.perf_counter() - t0, 1)}
        _log(f"{split} {name}: done in {idx[name]['wall_s']} s")
    cmp = compare_runs(ds.qrels, runs, METRICS, baseline=baseline, stat_test="fisher", n_permutations=10_000, seed=seed)
    out = {"n_queries": len(ds.queries), "scores": cmp["scores"], "vs_rrf": cmp["vs_baseline"], "latency_ms": lat,
           "index": idx, "non_inferiority_vs_rrf": {n: {"ndcg@10": r} for n, r in
                                                    runs_non_inferiority(ds.qrels, runs, baseline, "ndcg@10", MARGIN,
                                                                         seed=seed).items()}}
    for other in others:
        if other in runs:
            c = compare_runs(ds.qrels, runs, ["ndcg@10"], baseline=other, stat_test="fisher", n_permutations=10_000,
                             seed=seed)
            out[f"vs_{other}"] = c["vs_baseline"]
    return out


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
    from adiyan.config import preset_overrides

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--config", default=None)
    ap.add_argument("--embedder", default="nomic-embed-text", help="the main dense signal (embedder.name)")
    ap.add_argument("--extra", nargs="*", default=["minilm"], help="extra dense signals (embedder.extra)")
    ap.add_argument("--no-title", action="store_true", help="no title field (store.title_field)")
    ap.add_argument("--step", type=float, default=STEP)
    ap.add_argument("--train-only", action="store_true", help="stop after stage 1")
    ap.add_argument("--reuse-train", action="store_true", help="reuse stage 1 (<out>.train.json) if present")
    ap.add_argument("--no-generalisation", action="store_true")
    ap.add_argument("--matryoshka", nargs="*", type=int, default=[],
                    help="only measure nomic-embed-text cut to these widths on train (issue 16's check) and stop")
    args = ap.parse_args(argv)
    if args.matryoshka:
        s0 = base_settings(args.config)
        res = matryoshka(Path(args.data) if args.data else Path(s0.paths.datasets_dir) / "scifact", tuple(args.matryoshka))
        dest = Path(s0.paths.reports_dir) / "benchmarks" / "scifact_matryoshka.json"
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")
        _log(f"wrote {dest}")
        return 0
    settings = base_settings(args.config, {"embedder.name": args.embedder, "embedder.extra": list(args.extra),
                                           "store.title_field": not args.no_title})
    data_dir = Path(args.data) if args.data else Path(settings.paths.datasets_dir) / "scifact"
    tag = "+".join([args.embedder, *args.extra] + ([] if args.no_title else ["title"]))
    out = Path(args.out) if args.out else Path(settings.paths.reports_dir) / "benchmarks" / f"scifact_signals.{tag}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    stage1 = out.with_suffix(".train.json")
    t_all = time.perf_counter()
    if args.reuse_train and stage1.is_file():
        train = json.loads(stage1.read_text(encoding="utf-8"))
    else:
        train = tune_train(settings, data_dir, args.step)
        stage1.write_text(json.dumps(train, indent=2) + "\n", encoding="utf-8")
    report = {"benchmark": "scifact_signals", "embedder": args.embedder, "extra": args.extra,
              "title_field": not args.no_title, "path": "product (one KB collection with named vectors, access "
              "filter, Retriever)", "train": train, "winner_rule": WINNER_RULE,
              "finals": finals_of(train, args.embedder)}
    if args.train_only:
        out.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
        _log(signals_table(report))
        return 0
    base = base_settings(args.config)
    for name, f in report["finals"].items():
        f["pipeline_train"] = pipeline_train(base, data_dir, f["overrides"])
        _log(f"train (Retriever) {name}: {f['pipeline_train']}")
    report["winner_by_train"] = winner_of(report["finals"])  # fixed here, before any test figure
    _log(f"winner by train: {report['winner_by_train']}")
    configs = {"rrf_k60": BASELINE, "bm25": {"embedder.name": "minilm", "retrieval.mode": "bm25"}}
    if args.embedder == "nomic-embed-text":  # the shipped preset over the same dense model: the bar to beat
        configs["preset_nomic-hybrid"] = preset_overrides("nomic-hybrid")
    configs.update({n: f["overrides"] for n, f in report["finals"].items()})
    report["test"] = evaluate_split(base, data_dir, configs, "test", settings.seed,
                                    others=("preset_nomic-hybrid", "bm25"))
    if not args.no_generalisation:
        gen_base = base.with_overrides({"chunking.strategy": "recursive", "chunking.size": 800, "chunking.overlap": 100})
        win = report["winner_by_train"]
        report["generalisation"] = {
            ds: evaluate_split(gen_base, Path(settings.paths.datasets_dir) / ds / "beir",
                               {"rrf_k60": BASELINE, win: report["finals"][win]["overrides"]}, "test", settings.seed)
            for ds in ("clapnq_dev", "xquad_en")}
    report["total_s"] = round(time.perf_counter() - t_all, 1)
    out.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    _log(signals_table(report))
    _log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
