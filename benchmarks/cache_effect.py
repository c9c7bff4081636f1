"""The embedding cache's effect on a re-ingest and a re-eval: cold against warm, in the same run.

Re-ingest: the same N SciFact documents ingested into a fresh store twice, first with an empty
embedding cache (every chunk goes to the model), then into another fresh store with the cache
the first pass filled (every chunk is a cache hit). Ratio = cold / warm.

Re-eval: ``adiyan.eval.runner.run_eval`` on ``evalsets/adiyan_basic`` with
``eval.generate=false, eval.judge=null, eval.incidents=false`` (retrieval and non-LLM scoring),
data, cache and reports in a temporary folder:

- cold: empty embedding cache, empty data directory (the evalset is ingested and embedded);
- warm: the same folders again (what a rerun of ``invoke eval`` costs: the evalset's index is
  reused and every query embedding is a cache hit);
- warm cache only: a fresh data directory with the warm embedding cache (the evalset is
  re-ingested, but nothing is embedded): the embedding cache's own share.

The embedder is loaded once before any timing (models are memoised per process), and one
throw-away run in its own folders pays the imports and lazy initialisation first, so the ratios
compare caches, not start-up. Model load time is reported separately.

    python benchmarks/cache_effect.py [--docs 200] [--embedder minilm] [--out reports/benchmarks/cache_effect.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from _common import ROOT, machine, write_json
from ingest import scifact_documents


def reingest(n_docs: int, embedder_name: str) -> dict:
    from adiyan.cache import CachedEmbedder, EmbeddingCache
    from adiyan.config import load_settings
    from adiyan.factory import open_kb
    from adiyan.models import load_embedder
    from adiyan.store import open_store

    docs = scifact_documents(n_docs)
    raw = load_embedder(embedder_name)
    raw.embed(["warm-up"], "document")  # lazily-initialised kernels outside both timings
    out = {}
    with tempfile.TemporaryDirectory(prefix="adiyan_cache_effect_") as tmp:
        for label in ("cold", "warm"):
            s = load_settings(environ={}, overrides={"paths.data_dir": f"{tmp}/data-{label}",
                                                     "embedder.name": embedder_name})
            emb = CachedEmbedder(raw, EmbeddingCache(f"{tmp}/emb.sqlite"))  # empty on the cold pass
            kb = open_kb(s, embedder=emb, store=open_store(s), progress=False)
            t0 = time.perf_counter()
            kb.ingest_many([(data, name, "bench", "global") for name, data in docs])
            kb.finish_ingest()
            seconds = time.perf_counter() - t0
            out[label] = {"seconds": round(seconds, 3), "chunks": kb.count_chunks(), "cache": emb.stats.as_dict()}
            kb.close()
    assert out["cold"]["chunks"] == out["warm"]["chunks"]
    assert out["warm"]["cache"]["misses"] == 0, out["warm"]["cache"]
    return {"documents": len(docs), "embedder": raw.id, **out,
            "ratio_cold_to_warm": round(out["cold"]["seconds"] / out["warm"]["seconds"], 2)}


def _eval_settings(tmp: str, data: str, evalset: Path, embedder_name: str):
    from adiyan.config import load_settings

    return load_settings(environ={}, overrides={
        "paths.data_dir": f"{tmp}/{data}", "paths.cache_dir": f"{tmp}/cache", "paths.reports_dir": f"{tmp}/reports",
        "embedder.name": embedder_name, "eval.evalset": str(evalset), "eval.generate": False,
        "eval.judge": None, "eval.incidents": False})


def _timed_eval(settings) -> dict:
    from adiyan.eval.runner import RegressionFailed, run_eval

    t0 = time.perf_counter()
    regression_failed = None
    try:
        run_dir = run_eval(settings, progress=False)
    except RegressionFailed as exc:  # the run is written all the same; its timing is what counts here
        run_dir, regression_failed = exc.run_dir, str(exc)
    seconds = time.perf_counter() - t0
    m = json.loads((Path(run_dir) / "metrics.json").read_text())
    return {"seconds": round(seconds, 3), "timings": m["timings"], "embedding_cache": m["cache"]["embeddings"],
            "documents_reingested": m["dataset"]["documents_reingested"], "chunks": m["dataset"]["n_chunks"],
            "hit_rate": m["metrics"]["retrieval"].get(f"hit_rate@{settings.retrieval.kb_top_k}"),
            "regression_failed": regression_failed}


def reeval(evalset: Path, embedder_name: str) -> dict:
    from adiyan.models import embedder_from_settings

    with tempfile.TemporaryDirectory(prefix="adiyan_reeval_") as tmp:
        t0 = time.perf_counter()
        embedder_from_settings(_eval_settings(tmp, "data", evalset, embedder_name), progress=False)
        model_load_s = time.perf_counter() - t0
        with tempfile.TemporaryDirectory(prefix="adiyan_reeval_warmup_") as warm_tmp:
            _timed_eval(_eval_settings(warm_tmp, "data", evalset, embedder_name))  # imports, lazy init
        cold = _timed_eval(_eval_settings(tmp, "data", evalset, embedder_name))
        warm = _timed_eval(_eval_settings(tmp, "data", evalset, embedder_name))
        cache_only = _timed_eval(_eval_settings(tmp, "data-fresh", evalset, embedder_name))
    assert warm["hit_rate"] == cold["hit_rate"] == cache_only["hit_rate"], "a cache changed the results"
    return {
        "evalset": str(evalset), "settings": {"eval.generate": False, "eval.judge": None, "eval.incidents": False},
        "model_load_s_excluded": round(model_load_s, 3),
        "cold": cold, "warm": warm, "warm_embedding_cache_fresh_data_dir": cache_only,
        "ratio_cold_to_warm": round(cold["seconds"] / warm["seconds"], 2),
        "ratio_cold_to_warm_embedding_cache_only": round(cold["seconds"] / cache_only["seconds"], 2),
    }


def run(n_docs: int = 200, embedder_name: str = "minilm", evalset: str | Path = ROOT / "evalsets" / "adiyan_basic",
        progress: bool = True) -> dict:
    if progress:
        print(f"[cache_effect] re-ingest of {n_docs} documents, cold vs warm embedding cache", flush=True)
    ri = reingest(n_docs, embedder_name)
    if progress:
        print(f"  cold {ri['cold']['seconds']}s, warm {ri['warm']['seconds']}s: {ri['ratio_cold_to_warm']}x", flush=True)
        print(f"[cache_effect] re-eval of {evalset}", flush=True)
    re = reeval(Path(evalset), embedder_name)
    if progress:
        print(f"  cold {re['cold']['seconds']}s, warm {re['warm']['seconds']}s ({re['ratio_cold_to_warm']}x), "
              f"warm cache + fresh data {re['warm_embedding_cache_fresh_data_dir']['seconds']}s "
              f"({re['ratio_cold_to_warm_embedding_cache_only']}x)", flush=True)
    return {"benchmark": "embedding_cache_effect",
            "reference": "the same work with a cold (empty) cache, measured in the same run",
            "reingest": ri, "reeval": re, "machine": machine()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--docs", type=int, default=200)
    p.add_argument("--embedder", default="minilm")
    p.add_argument("--evalset", default=str(ROOT / "evalsets" / "adiyan_basic"))
    p.add_argument("--out", default="reports/benchmarks/cache_effect.json")
    a = p.parse_args()
    write_json(run(a.docs, a.embedder, a.evalset), a.out)


if __name__ == "__main__":
    main()
