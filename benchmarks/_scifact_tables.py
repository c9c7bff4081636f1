"""The SciFact tuning report as a text table, shared by ``scifact_tuning.py`` (which writes the
report) and ``scifact.py`` (whose summary includes it). It lives here, with no imports, so that
``scifact.py`` does not import ``scifact_tuning.py``, which imports ``scifact.py`` for the product
path: benchmarks/*.py have no import cycle (tests/test_benchmark_imports.py).
"""

from __future__ import annotations


def tuning_table(report: dict) -> str:
    """Every configuration tried: train nDCG@10 / R@100, and for those taken to test the test figure,
    the paired randomization p-value vs hybrid RRF and latency; then the one-off indexing cost."""
    t = report["test"]
    lines = [f"{'config':<52} {'train':>7} {'R@100':>6} {'test':>7} {'p_vs_rrf':>9} {'p50ms':>7} {'p95ms':>7}"]
    rows = report["train"]["rows"]
    for n in sorted(set(rows) | set(t["scores"]), key=lambda n: -rows.get(n, {}).get("ndcg@10", 0.0)):
        tr = rows.get(n, {})
        cells = f"{n:<52} {tr.get('ndcg@10', float('nan')):>7.4f} {tr.get('recall@100', float('nan')):>6.3f}"
        if n in t["scores"]:
            p = t["vs_rrf"].get(n, {}).get("ndcg@10", {}).get("p_value")
            cells += (f" {t['scores'][n]['ndcg@10']:>7.4f} {'' if p is None else f'{p:.4f}':>9} "
                      f"{t['latency_ms'][n]['p50']:>7.1f} {t['latency_ms'][n]['p95']:>7.1f}")
        lines.append(cells)
    emb = report.get("embedder", "minilm")
    idx = {v.get("build_s") for v in t.get("index", {}).values()}
    which = "one MiniLM index for every row" if emb == "minilm" else f"MiniLM for rrf_k60, {emb} for the rest"
    lines.append(f"indexing (one-off, whole-documents indexes, {which}): "
                 f"build_s {sorted(i for i in idx if i)} (embeddings from the cache)")
    enc = report.get("encoding_cost")
    if enc:
        lines.append(f"encoding {enc['embedder']}: {enc['s_per_doc']} s/doc on {enc['sample_docs']} docs -> "
                     f"~{enc['estimated_full_encode_min']} min for {enc['corpus_docs']} docs, paid once (cache)")
    bm = report.get("bm25_params_offline")
    if bm:
        best = max(bm["rows"], key=lambda k: bm["rows"][k]["convex_z_a0.5"])
        lines.append(f"BM25 k1/b (offline, train; product k1.2_b0.75): best fused {best} {bm['rows'][best]} "
                     f"vs product {bm['rows'].get(bm['product'])}")
    pf = report.get("prefetch_grid_offline")
    if pf:
        lines.append(f"hybrid_prefetch x convex (offline, train): best {pf['best']} {pf['rows'][pf['best']]}")
    for ds, g in report.get("generalisation", {}).items():
        lines.append(f"{ds}: " + ", ".join(
            f"{n} {g['scores'][n]['ndcg@10']:.4f}" + (f" (p {g['vs_rrf'][n]['ndcg@10']['p_value']:.4f})"
                                                      if n in g.get("vs_rrf", {}) else "") for n in g["scores"]))
        for n, r in g.get("non_inferiority_vs_rrf", {}).items():  # reports before issue 23 have none
            lines.append(f"  {n} vs rrf_k60, nDCG@10: {r['ndcg@10']['sentence']}")
    return "\n".join(lines)



def signals_table(report: dict) -> str:
    """The SciFact signals table: train (grid, Retriever), test, p vs RRF and vs the preset, latency, index."""
    t = report.get("test") or {}
    # p_preset: against the preset nomic-hybrid on the same test queries (for bm25+rm3: against BM25 alone)
    lines = [f"{'final':<16} {'train':>7} {'train(R)':>8} {'test':>7} {'p_rrf':>7} {'p_preset':>8} "
             f"{'p50ms':>6} {'p95ms':>6} {'index MB':>8}  settings"]
    for name, f in report["finals"].items():
        pt = f.get("pipeline_train") or {}
        sc = t.get("scores", {}).get(name, {})
        p = t.get("vs_rrf", {}).get(name, {}).get("ndcg@10", {}).get("p_value")
        pp = t.get("vs_preset_nomic-hybrid", {}).get(name, {}).get("ndcg@10", {}).get("p_value")
        if name == "bm25+rm3":  # RM3 on BM25 alone: its own baseline is BM25
            pp = t.get("vs_bm25", {}).get(name, {}).get("ndcg@10", {}).get("p_value")
        lat = t.get("latency_ms", {}).get(name, {})
        ov = {k.split(".", 1)[1]: v for k, v in f["overrides"].items() if k not in ("retrieval.mode", "retrieval.fusion",
                                                                                  "retrieval.fusion_norm",
                                                                                  "retrieval.hybrid_prefetch")}
        lines.append(f"{name:<16} {f['train_grid']['ndcg@10']:>7.4f} {pt.get('ndcg@10', float('nan')):>8.4f} "
                     f"{sc.get('ndcg@10', float('nan')):>7.4f} {'' if p is None else f'{p:.4f}':>7} "
                     f"{'' if pp is None else f'{pp:.4f}':>8} {lat.get('p50', float('nan')):>6.1f} "
                     f"{lat.get('p95', float('nan')):>6.1f} {(pt.get('index') or {}).get('disk_mb', float('nan')):>8}  {ov}")
    for ref in ("rrf_k60", "preset_nomic-hybrid", "bm25"):
        if ref in t.get("scores", {}):
            lines.append(f"{ref:<16} {'':>7} {'':>8} {t['scores'][ref]['ndcg@10']:>7.4f}")
    if report.get("winner_by_train"):
        lines.append(f"winner by train: {report['winner_by_train']} ({report['winner_rule']})")
    for ds, g in (report.get("generalisation") or {}).items():
        lines.append(f"{ds}: " + ", ".join(f"{n} {g['scores'][n]['ndcg@10']:.4f}" for n in g["scores"]))
        for n, r in g.get("non_inferiority_vs_rrf", {}).items():
            lines.append(f"  {n} vs rrf_k60, nDCG@10: {r['ndcg@10']['sentence']}")
    return "\n".join(lines)
