"""SciFact (BEIR, test split): BM25, dense all-MiniLM-L6-v2, hybrid RRF, hybrid + re-rank, and
HNSW recall / latency, each beside the published reference number.

    python benchmarks/scifact.py [--data ../shared/datasets/scifact] [--out reports/benchmarks/scifact.json]
                                 [--rerank-top 20] [--rerank-model mpnet] [--no-rerank] [--no-hnsw]

Prints a summary table on stderr and the JSON on stdout, and writes the JSON to ``--out``.
Embeddings go through the project's cache (``<cache_dir>/embeddings.sqlite``): the ~5 minutes
all-MiniLM-L6-v2 spends on the 5,183 documents, and mpnet's time on the re-rank candidates,
are paid once. ``run_scifact(...)`` is the same thing as a function for task runners.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(ROOT))

from benchmarks._scifact_tables import signals_table, tuning_table  # noqa: E402

for _k, _v in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}.items():
    os.environ.setdefault(_k, _v)

METRICS = ["ndcg@10", "recall@100"]
DEPTH = 1000  # first-stage depth per query: fusion and re-ranking see this many candidates
RRF_K = 60

# Published / reference figures (../shared/datasets/README.md), SciFact test split.
PUBLISHED = {
    "bm25": {
        "ndcg@10": 0.676,
        "ndcg@10_sources": {
            "BEIR paper, Anserini multifield": 0.665,
            "Anserini/Pyserini flat": 0.679,
            "Lucene-style, k1=1.2 b=0.75": 0.680,
            "bm25s k1=0.9 b=0.4 Snowball + stopwords, title+text, on this copy (the reference)": 0.676,
        },
        "ndcg@10_range": [0.665, 0.680],
        "recall@100": None,
    },
    "dense_minilm": {"ndcg@10": 0.645, "ndcg@10_sources": {
        "all-MiniLM-L6-v2, max_seq_length 256, title+text, on this copy": 0.645}, "recall@100": None},
    "hybrid_rrf": {"ndcg@10": 0.718, "ndcg@10_sources": {
        "RRF k=60 of the bm25s and all-MiniLM-L6-v2 runs, on this copy": 0.718},
        "recall@100": 0.948},
    "hybrid_rerank": {"ndcg@10": None, "ndcg@10_sources": {
        "no published figure for this pipeline; for context: all-mpnet-base-v2 alone": 0.656,
        "RRF of bm25s + MiniLM + mpnet (whole corpus embedded with mpnet)": 0.719,
        "BM25 top-100 re-ranked by cross-encoder ms-marco-MiniLM-L-6-v2 (BEIR)": 0.682},
        "recall@100": None},
}
TARGETS = {"bm25_ndcg@10_within": 0.02, "dense_ndcg@10_within": 0.02, "hybrid_ndcg@10_min": 0.71,
           "hnsw_recall@10_min": 0.99, "hnsw_ef_max": 128}


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _sha256_files(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode())
        with p.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def _versions() -> dict:
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for dist in ("numpy", "bm25s", "PyStemmer", "ranx", "sentence-transformers", "torch", "qdrant-edge-py"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = None
    return out


def _row(name: str, measured: dict) -> dict:
    pub = PUBLISHED.get(name, {})
    row = {}
    for m in METRICS:
        ref = pub.get(m)
        row[m] = {"measured": round(measured[m], 4), "published": ref,
                  "delta": None if ref is None else round(measured[m] - ref, 4)}
        if pub.get(f"{m}_sources"):
            row[m]["published_sources"] = pub[f"{m}_sources"]
        if pub.get(f"{m}_range"):
            lo, hi = pub[f"{m}_range"]
            row[m]["published_range"] = [lo, hi]
            row[m]["distance_to_range"] = round(max(lo - measured[m], measured[m] - hi, 0.0), 4)
    return row


# The product path: SciFact ingested into the knowledge base as documents (global, one owner) and
# retrieved through the pipeline every entry point uses (Retriever: engine search in Qdrant's
# embedded engine under the requester's access filter, floor, cut), as `invoke eval` would.
PRODUCT_MODES = ("dense", "bm25", "hybrid")
PRODUCT_DEPTH = 100  # retrieval.rank_depth: the ranking kept per query (recall@100)
PRODUCT_VARIANTS = {
    # one chunk per abstract, like the reference path's title + text (the longest is ~9,800 chars)
    "whole_documents": {"chunking.strategy": "recursive", "chunking.size": 12000, "chunking.overlap": 0},
    # the shipped default chunking (800 characters, 100 overlap): a document ranks by its best chunk
    "default_chunking": {},
    # issue 41.8: an abstract that fits the embedder's window (MiniLM: 256 word pieces, with its title) is
    # one chunk, a longer one is split as by default
    "within_window": {"chunking.keep_within_window": True},
}
# The chunking rows compared per query, paired (baseline first): issue 41.8's before / after
CHUNKING_PAIRS = (("whole_documents", "default_chunking"), ("default_chunking", "within_window"))


# Configurations tuned on SciFact train (benchmarks/scifact_tuning.py, issue 16), run on the
# whole-documents index beside the modes above: name -> retrieval settings.
# Test nDCG@10 (train): convex 0.7316 (0.7359), + PRF 0.7330 (0.7366), RRF k=10 0.7206 (0.7252); RRF k=60 0.7121
# (engine RRF with ties settled by point id); the preset nomic-hybrid 0.7422 (0.7575).
PRODUCT_TUNED = {
    "hybrid_convex_z_a0.5": {"retrieval.mode": "hybrid", "retrieval.fusion": "convex", "retrieval.fusion_weight": 0.5,
                             "retrieval.fusion_norm": "z"},
    "hybrid_convex_z_a0.5_prf_m3_b0.25": {"retrieval.mode": "hybrid", "retrieval.fusion": "convex",
                                          "retrieval.fusion_weight": 0.5, "retrieval.fusion_norm": "z",
                                          "retrieval.prf_docs": 3, "retrieval.prf_weight": 0.25},
    "hybrid_rrf_k10": {"retrieval.mode": "hybrid", "retrieval.rrf_k": 10},
    # issue 27 (benchmarks/scifact_signals.py --embedder minilm --extra): the title field, weights tuned on train
    # (0.7361), tested once: 0.7339
    "hybrid_weighted_z_title": {"retrieval.mode": "hybrid", "retrieval.fusion": "weighted", "retrieval.fusion_norm": "z",
                                "retrieval.fusion_weights": {"dense": 0.45, "bm25": 0.5, "title": 0.05},
                                "retrieval.hybrid_prefetch": 100, "store.title_field": True},
}


def _presets() -> dict:
    """The shipped presets (adiyan/presets), each run on the whole-documents index like the rows above."""
    from adiyan.config import preset_overrides, presets

    return {f"preset_{name}": preset_overrides(name) for name in presets()}


PRODUCT_TUNED.update(_presets())


def doc_id_of(source_key: str) -> str:
    """``adiyan-office/<id>.md`` (a materialised BEIR passage) → ``<id>``."""
    name = source_key.split("/", 1)[1]
    return name[:-3] if name.endswith(".md") else name


def product_runs(settings, beir_dir, split: str = "test", *, modes=None, depth: int | None = None,
                 progress: bool = True) -> dict:
    """{mode: {"run": {qid: {doc id: score}}, "latency_ms": [...], "index": build facts}} through the product.

    The BEIR folder becomes an evalset (adiyan.eval.evalset.materialize_beir, cached outside the
    repository), the harness builds its index once (parse, chunk, embed through the cache, Qdrant
    dense + BM25 sparse vectors with corpus statistics), and each mode is a Retriever over it.
    """
    from adiyan.eval.evalset import beir_ids, materialize_beir
    from adiyan.eval.harness import close_index, open_index, question_rows
    from adiyan.factory import open_retriever

    root = materialize_beir(beir_dir, split=split)
    modes = modes or (settings.retrieval.mode,)  # by default the configured mode, every setting as given
    base = settings if depth is None else settings.with_overrides({"retrieval.rank_depth": depth})
    index = open_index(base, root, progress=progress)
    out = {}
    try:
        for mode in modes:
            s = base.with_overrides({"retrieval.mode": mode})
            qr = question_rows(index, open_retriever(s, index.kb), progress=progress, desc=f"product {mode}")
            ids = beir_ids(index.evalset)  # source key -> passage id, from the manifest
            run = {qid: {ids[k] if k in ids else doc_id_of(k): v for k, v in r.items()} for qid, r in qr.run.items()}
            out[mode] = {"run": run, "latency_ms": [1000 * r["retrieve_s"] for r in qr.rows],
                         "floor": open_retriever(s, index.kb).floor if mode == "dense" else None}
        build = {k: v for k, v in index.build.items() if k not in ("chunks_per_doc", "key")}
        build["bm25_avg_len"] = index.kb.bm25_avg_len()
        for mode in out:
            out[mode]["index"] = build
    finally:
        close_index(index)
    return out


def run_scifact(data: str | os.PathLike | None = None, out: str | os.PathLike | None = None, *,
                rerank_top: int = 20, rerank_model: str = "mpnet", rerank: bool = True, hnsw: bool = True,
                efs: tuple[int, ...] = (8, 16, 32, 64, 128, 256), seed: int | None = None,
                config: str | os.PathLike | None = None, progress: bool = True, product: bool = True,
                variants: tuple[str, ...] | None = None, tuned: tuple[str, ...] | None = None) -> dict:
    """Run the SciFact benchmark; returns (and, with ``out``, writes) the JSON report as a dict.

    ``variants`` / ``tuned`` select product rows by name (None: all; ``()``: none); an unknown
    name is refused. ``data`` defaults to ``<paths.datasets_dir>/scifact``; without it the public BEIR zip is
    fetched into ``<paths.cache_dir>/beir``. Embeddings use the cache in ``paths.cache_dir``.
    """
    from adiyan.config import load_settings
    from adiyan.eval.beir import load_beir, resolve_beir
    from adiyan.eval.beir_runs import reference_runs
    from adiyan.eval.ir_metrics import backend, compare_runs, evaluate_run, holm
    from adiyan.eval.noninferiority import runs_non_inferiority
    from adiyan.models import embedder_from_settings
    from adiyan.retrieval import BiEncoderReranker, rrf
    from adiyan.retrieval import rerank as rerank_run
    from adiyan.retrieval.hnsw_recall import measure_hnsw_recall

    t_start = time.perf_counter()
    settings = load_settings(config).with_overrides({"embedder.name": "minilm", "embedder.truncate_dim": None})
    seed = settings.seed if seed is None else seed
    path = Path(data) if data else resolve_beir("scifact", settings.paths.datasets_dir, settings.paths.cache_dir)
    ds = load_beir(path, "test")
    _log(f"SciFact from {path}: {ds.stats()}")
    timings: dict[str, float] = {}
    runs: dict[str, dict] = {}

    # BM25, dense all-MiniLM-L6-v2 (through the embedding cache) and their RRF: BEIR's whole-document
    # protocol, the same function `invoke eval --set eval.beir_protocol=beir` runs (beir_runs.reference_runs)
    t0 = time.perf_counter()
    emb = embedder_from_settings(settings)
    timings["minilm_load_s"] = time.perf_counter() - t0
    ref = reference_runs(ds, ("bm25", "dense", "hybrid"), embedder=emb, depth=DEPTH, rrf_k=RRF_K, progress=progress)
    runs["bm25"], runs["dense_minilm"], runs["hybrid_rrf"] = ref.runs["bm25"], ref.runs["dense"], ref.runs["hybrid"]
    index, qvecs, max_seq = ref.dense_index, ref.query_vectors, ref.max_seq_length
    timings.update({"bm25_index_s": ref.timings["bm25_index_s"], "bm25_retrieve_s": ref.timings["bm25_retrieve_s"],
                    "minilm_embed_and_search_s": ref.timings["dense_embed_and_search_s"],
                    "rrf_s": ref.timings["rrf_s"]})
    minilm_cache = emb.stats.as_dict()

    # Hybrid + re-rank of the top-N -------------------------------------------------------------------
    rerank_stats: dict = {}
    if rerank:
        reranker = BiEncoderReranker.from_settings(settings, rerank_model)
        doc_texts = dict(zip(ds.doc_ids(), ds.doc_texts()))
        runs["hybrid_rerank"] = rerank_run(runs["hybrid_rrf"], ds.queries, doc_texts, reranker, top_n=rerank_top,
                                           progress=progress, stats=rerank_stats)
        rerank_stats["cache"] = reranker.embedder.stats.as_dict()
        rerank_stats["max_seq_length"] = getattr(getattr(reranker.embedder.inner, "_model", None),
                                                 "max_seq_length", None)
        # The re-ranked order as a third voice in the fusion: costs nothing more (same vectors).
        runs["hybrid_rerank_rrf"] = rrf([runs["bm25"], runs["dense_minilm"], runs["hybrid_rerank"]], k=RRF_K)

    # Scores, references and paired tests ------------------------------------------------------------
    measured = {name: evaluate_run(ds.qrels, run, METRICS) for name, run in runs.items()}
    methods = {name: _row(name, measured[name]) for name in runs}
    significance = compare_runs(ds.qrels, runs, METRICS, baseline="bm25", stat_test="fisher",
                                n_permutations=10_000, seed=seed)

    # The product path, beside the reference path ------------------------------------------------------
    product_report = None
    if product:
        import numpy as np  # the benchmark's own arithmetic

        product_report = {"modes": {}, "depth": PRODUCT_DEPTH,
                          "path": "KnowledgeBase ingest (materialised BEIR passages, global) -> Qdrant embedded "
                                  "engine (dense HNSW + BM25 sparse, corpus avg_len) -> Retriever under the "
                                  "access filter (floor, cut); as invoke eval retrieves"}
        reference = {"dense": "dense_minilm", "bm25": "bm25", "hybrid": "hybrid_rrf"}
        variants = tuple(PRODUCT_VARIANTS) if variants is None else variants
        tuned = tuple(PRODUCT_TUNED) if tuned is None else tuned
        unknown = [v for v in variants if v not in PRODUCT_VARIANTS] + [t for t in tuned if t not in PRODUCT_TUNED]
        if unknown:
            raise ValueError(f"unknown product row(s) {unknown}; variants: {list(PRODUCT_VARIANTS)}, "
                             f"tuned: {list(PRODUCT_TUNED)}")
        plan = [(v, PRODUCT_VARIANTS[v], PRODUCT_MODES) for v in variants]
        plan += [(name, {**PRODUCT_VARIANTS["whole_documents"], **PRODUCT_TUNED[name]}, ("hybrid",)) for name in tuned]
        for variant, overrides, modes in plan:
            t0 = time.perf_counter()
            prod = product_runs(settings.with_overrides(overrides), path, "test", modes=modes,
                                depth=PRODUCT_DEPTH, progress=progress)
            timings[f"product_{variant}_s"] = time.perf_counter() - t0
            for mode, res in prod.items():
                name = f"product_{variant}" if variant in PRODUCT_TUNED else f"product_{mode}_{variant}"
                runs[name] = res["run"]
                m = evaluate_run(ds.qrels, res["run"], METRICS)
                ref_name = reference[mode]  # not ``ref``: that is the reference path's result, read below
                cmp = compare_runs(ds.qrels, {ref_name: runs[ref_name], name: res["run"]}, METRICS, baseline=ref_name,
                                   stat_test="fisher", n_permutations=10_000, seed=seed)
                lat = np.asarray(res["latency_ms"])
                product_report["modes"][name] = {
                    "mode": mode, "variant": variant, "settings": overrides,
                    **{k: round(v, 4) for k, v in m.items()},
                    "reference_path": ref_name, "reference_ndcg@10": round(measured[ref_name]["ndcg@10"], 4),
                    "delta_ndcg@10_vs_reference": round(m["ndcg@10"] - measured[ref_name]["ndcg@10"], 4),
                    "paired_vs_reference": cmp, "floor": res["floor"],
                    "latency_ms": {"p50": round(float(np.percentile(lat, 50)), 3),
                                   "p95": round(float(np.percentile(lat, 95)), 3)},
                    "index": res["index"]}
                methods[name] = {mm: {"measured": round(m[mm], 4), "published": PUBLISHED.get(ref_name, {}).get(mm),
                                      "delta": None if PUBLISHED.get(ref_name, {}).get(mm) is None
                                      else round(m[mm] - PUBLISHED[ref_name][mm], 4)} for mm in METRICS}

        # The default chunking against one chunk per abstract, both through the product path (issue 41.8):
        # per mode, a paired randomization test over the 300 queries, whole documents the baseline.
        for base, other in CHUNKING_PAIRS:
            if {base, other} <= set(variants):
                pair = {mode: compare_runs(ds.qrels, {base: runs[f"product_{mode}_{base}"],
                                                      other: runs[f"product_{mode}_{other}"]}, METRICS,
                                           baseline=base, stat_test="fisher", n_permutations=10_000, seed=seed)
                        for mode in PRODUCT_MODES}
                # Holm over the three modes' nDCG@10 tests; and "not worse" by its own test (margin 0.01)
                adjusted = holm({mode: c["vs_baseline"][other]["ndcg@10"]["p_value"] for mode, c in pair.items()})
                for mode, c in pair.items():
                    c["ndcg@10_p_holm_over_modes"] = adjusted[mode]
                    c["non_inferiority_ndcg@10"] = runs_non_inferiority(
                        ds.qrels, {base: runs[f"product_{mode}_{base}"], other: runs[f"product_{mode}_{other}"]},
                        base, "ndcg@10")[other]
                product_report.setdefault("chunking_paired", {})[f"{other}_vs_{base}"] = pair

    # HNSW recall vs exact, on the MiniLM SciFact vectors ---------------------------------------------
    hnsw_report = None
    if hnsw:
        t0 = time.perf_counter()
        hnsw_report = measure_hnsw_recall(index.ids, index.vectors, qvecs, k=10, efs=efs, seed=seed,
                                          hnsw_m=settings.store.hnsw_m, ef_construct=settings.store.hnsw_ef_construct,
                                          embedder_id=emb.id, progress=progress)
        timings["hnsw_s"] = time.perf_counter() - t0

    bm = measured["bm25"]["ndcg@10"]
    lo, hi = PUBLISHED["bm25"]["ndcg@10_range"]
    checks = {
        "bm25_ndcg@10_within_0.02_of_published_range": lo - 0.02 <= bm <= hi + 0.02,
        "dense_ndcg@10_within_0.02_of_0.645": abs(measured["dense_minilm"]["ndcg@10"] - 0.645) <= 0.02,
        "hybrid_ndcg@10_at_least_0.71": measured["hybrid_rrf"]["ndcg@10"] >= 0.71,
    }
    if product_report and "product_hybrid_whole_documents" in product_report["modes"]:
        hyb = product_report["modes"]["product_hybrid_whole_documents"]
        checks["product_hybrid_within_0.01_of_reference"] = abs(hyb["delta_ndcg@10_vs_reference"]) <= 0.01
    if hnsw_report:
        first = hnsw_report["min_ef_reaching_0.99"]["none"]
        checks["hnsw_recall@10_0.99_at_ef_<=128"] = first is not None and first <= 128
    timings["total_s"] = time.perf_counter() - t_start
    data_files = [path / "corpus.jsonl", path / "queries.jsonl", path / "qrels" / "test.tsv"]
    report = {
        "benchmark": "scifact",
        "dataset": {"path": str(path), **ds.stats(), "sha256": _sha256_files(data_files)},
        "metrics_backend": backend(),
        "methods": methods,
        "significance": significance,
        "rerank": rerank_stats or None,
        "product": product_report,
        "hnsw": hnsw_report,
        "checks": checks,
        "config": {
            "seed": seed,
            "settings_hash": settings.config_hash(),
            "first_stage_depth": DEPTH,
            "bm25": ref.bm25_config,
            "document_text": 'title + " " + text, stripped',
            "dense": {"embedder": emb.id, "max_seq_length": max_seq, "normalized": True,
                      "search": "exact (NumPy brute force, cosine)", "cache": minilm_cache,
                      "cache_path": str(Path(settings.paths.cache_dir) / "embeddings.sqlite")},
            "rrf_k": RRF_K,
            "rerank": {"model": rerank_model, "top_n": rerank_top, "kind": "bi-encoder cosine"} if rerank else None,
            "ties": "score descending, then doc id ascending",
            "versions": _versions(),
        },
        "timings_s": {k: round(v, 2) for k, v in timings.items()},
    }
    bench_dir = Path(settings.paths.reports_dir) / "benchmarks"
    tuning = bench_dir / "scifact_tuning.json"
    if tuning.is_file():  # the routes of issue 16, tuned on train (benchmarks/scifact_tuning.py)
        report["tuning"] = json.loads(tuning.read_text(encoding="utf-8"))
    # the same routes over other dense models (scifact_tuning.py --embedder NAME), and the offline
    # multi-signal grid (scifact_signals.py); stage files (.train / .bm25 / .prefetch) are not reports
    report["tuning_other_embedders"] = {
        f.stem.split(".", 1)[1]: json.loads(f.read_text(encoding="utf-8"))
        for f in sorted(bench_dir.glob("scifact_tuning.*.json"))
        if f.stem.split(".", 1)[1] not in ("train", "bm25", "prefetch") and "." not in f.stem.split(".", 1)[1]}
    # more signals through the product (scifact_signals.py: named vectors, title field, RM3), one file per signal set
    report["signals"] = {f.name[len("scifact_signals."):-len(".json")]: json.loads(f.read_text(encoding="utf-8"))
                         for f in sorted(bench_dir.glob("scifact_signals.*.json")) if not f.name.endswith(".train.json")}
    _log(summary_table(report))
    if out:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        _log(f"wrote {out}")
    return report


def summary_table(report: dict) -> str:
    lines = [f"{'method':<20} {'nDCG@10':>8} {'pub':>6} {'delta':>7}   {'R@100':>6} {'pub':>6} {'delta':>7}"]
    for name, row in report["methods"].items():
        cells = []
        for m in METRICS:
            c = row[m]
            pub = "" if c["published"] is None else f"{c['published']:.3f}"
            delta = "" if c["delta"] is None else f"{c['delta']:+.3f}"
            cells.append(f"{c['measured']:>{8 if m == 'ndcg@10' else 6}.4f} {pub:>6} {delta:>7}")
        lines.append(f"{name:<20} {cells[0]}   {cells[1]}")
    if report.get("rerank"):
        r = report["rerank"]
        lines.append(f"re-rank: top {r['top_n']} of hybrid, {r['unique_docs']} unique docs, {r['pairs']} pairs, "
                     f"{r['seconds']} s ({r['cache']})")
    if report.get("hnsw"):
        lines.append(f"{'ef':>5} {'filter':<12} {'recall@10':>9} {'p50 ms':>8} {'p95 ms':>8}")
        for r in report["hnsw"]["rows"]:
            lines.append(f"{r['ef']:>5} {r['filter']:<12} {r['recall@10']:>9.4f} {r['p50_ms']:>8.3f} {r['p95_ms']:>8.3f}")
    lines.append("checks: " + ", ".join(f"{k}={v}" for k, v in report["checks"].items()))
    if report.get("tuning"):
        lines.append("tuned on train, tested once (benchmarks/scifact_tuning.py):\n" + tuning_table(report["tuning"]))
        for emb, rep in (report.get("tuning_other_embedders") or {}).items():
            lines.append(f"the same routes with {emb} as the dense signal (--embedder {emb}):\n" + tuning_table(rep))
    for tag, rep in (report.get("signals") or {}).items():
        lines.append(f"more signals through the product ({tag}; benchmarks/scifact_signals.py):\n" + signals_table(rep))
    return "\n".join(lines)


def _names(arg: str | None, *, no_presets: bool = False) -> tuple[str, ...] | None:
    """A comma-separated row list from the command line (None: all rows; 'none': no rows)."""
    if arg is None:
        return tuple(n for n in PRODUCT_TUNED if not n.startswith("preset_")) if no_presets else None
    return () if arg.strip() == "none" else tuple(n.strip() for n in arg.split(",") if n.strip())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=None, help="BEIR SciFact folder (default: <datasets_dir>/scifact, "
                                                  "else download into the cache)")
    ap.add_argument("--out", default=None, help="JSON output (default: <reports_dir>/benchmarks/scifact.json)")
    ap.add_argument("--rerank-top", type=int, default=20, help="re-rank this many hybrid candidates per query")
    ap.add_argument("--rerank-model", default="mpnet", help="bi-encoder used to re-rank (an adiyan embedder name)")
    ap.add_argument("--no-rerank", action="store_true")
    ap.add_argument("--no-hnsw", action="store_true")
    ap.add_argument("--no-product", action="store_true", help="skip the product path (KB + pipeline)")
    ap.add_argument("--variants", default=None, help="product chunking rows, comma-separated: "
                    + ", ".join(PRODUCT_VARIANTS) + " (default all; 'none' for none)")
    ap.add_argument("--tuned", default=None, help="tuned / preset product rows, comma-separated: "
                    + ", ".join(PRODUCT_TUNED) + " (default all; 'none' for none)")
    ap.add_argument("--no-presets", action="store_true", help="the tuned rows without the shipped presets")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--config", default=None, help="YAML config file")
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    args = ap.parse_args(argv)
    if args.out is None:
        from adiyan.config import load_settings

        args.out = Path(load_settings(args.config).paths.reports_dir) / "benchmarks" / "scifact.json"
    report = run_scifact(args.data, args.out, rerank_top=args.rerank_top, rerank_model=args.rerank_model,
                         rerank=not args.no_rerank, hnsw=not args.no_hnsw, seed=args.seed, config=args.config,
                         progress=not args.quiet, product=not args.no_product,
                         variants=_names(args.variants), tuned=_names(args.tuned, no_presets=args.no_presets))
    print(json.dumps(report, indent=2))
    return 0 if all(report["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
