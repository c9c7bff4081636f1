"""Query latency p50 / p95 of the embedded engine (EdgeStore): HNSW against exact search, on
vector sets from easy to hard, unfiltered and under filters letting 50% and 5% of points through.

    python benchmarks/latency.py [--sets scifact,noisy_copies,real_text,random] [--n 100000]
                                 [--queries 200] [--k 10] [--ef 128] [--out reports/benchmarks/latency.json]

Vector sets (each built fresh, HNSW forced on every segment and checked: ``indexed_vectors``):

- ``scifact``: the 5,183 real all-MiniLM-L6-v2 SciFact vectors, queried with the SciFact test
  queries (both from the project's embedding cache; filled first, and timed, when missing).
- ``noisy_copies``: ``--n`` noisy copies of the SciFact vectors (each a SciFact vector plus
  Gaussian noise of norm ~0.5, cosine ~0.89 to it), queried with the SciFact queries: the easiest
  case for HNSW, every query lands in a dense cluster of near-duplicates.
- ``real_text``: real MiniLM embeddings of ``--n`` (at least 100,000) distinct real text spans:
  the sentences of SciFact (titles and abstracts), ClapNQ and XQuAD passages and the shared
  documents' Markdown, split further at clause punctuation (``, ; :``) so that every span is real
  text and no two overlap (``real_text_units``); queried with real questions held out of the
  index (SciFact, ClapNQ, XQuAD). Embedded once into the embedding cache; the one-off cost is
  reported (``embed_s``, cache misses).
- ``random``: ``--n`` uniform random unit vectors and random queries: no structure at all, the
  hardest case (HNSW finds a fraction of the true top 10 and takes much longer to build).

Nothing falls back: a set whose data is missing raises, naming what is missing.

Filters, on the payload every knowledge-base chunk carries: ``none``; ``access_50``, the access
filter every read path sends (``visibility == global OR owner_identity == requester``) for a
requester who sees 45% global points and 5% own private ones; ``own_private_5``, a requester's
own private points only (5%). Each row: p50 / p95 of HNSW (``ef`` = ``store.hnsw_ef``) and of the
engine's exact search, interleaved query by query on the same collection, queries and filter;
HNSW's recall@k against exact; and checks that exact search equals a NumPy brute force and that
no hit violates its filter.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
from _common import SHARED, machine, percentile, write_json
from tqdm.auto import tqdm

from adiyan.config import load_settings
from adiyan.eval.beir import doc_text, load_beir
from adiyan.factory import open_embedder
from adiyan.kb import access_filter
from adiyan.retrieval.hnsw_recall import _shard_info  # segments, points, indexed vectors of a shard
from adiyan.store import Cond, EdgeStore, Filter, Point

FULL_SCAN_KB = 10  # ~6 vectors of 384 float32: every filtered search goes through HNSW
INDEXING_THRESHOLD_KB = 1  # build HNSW for any segment, however small
COLLECTION = "latency"
MIN_REAL_TEXT = 100_000
SETS = ("scifact", "noisy_copies", "real_text", "random")
# payload: a seeded uniform u per point decides it (see ``payloads``)
GLOBAL_SHARE, OWNER0_SHARE, OWNER1_SHARE, OTHER_OWNERS = 0.45, 0.05, 0.05, 18
FILTERS = {"none": None,
           "access_50": access_filter("owner-1"),  # global (45%) or owner-1's own (5%)
           "own_private_5": Filter(must=(Cond("owner_identity", "owner-0"), Cond("visibility", "private")))}


class MissingData(RuntimeError):
    """A vector set's data is not available: the benchmark fails rather than measure something else."""


# -- vector sets ------------------------------------------------------------------------------------
def _unit(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def _settings():
    return load_settings(environ={})


def _embed_cached(texts: list[str], kind: str, *, desc: str) -> tuple[np.ndarray, dict]:
    """MiniLM vectors through the project's embedding cache; what was embedded now, and how long."""
    emb = open_embedder(_settings().with_overrides({"embedder.name": "minilm", "embedder.batch_size": 128}), progress=False)
    misses0, t0 = emb.stats.misses, time.perf_counter()
    out = []
    for i in tqdm(range(0, len(texts), 4096), desc=desc, unit="batch", leave=False):
        out.append(emb.embed(texts[i:i + 4096], kind))
    return _unit(np.concatenate(out)), {"embedded_now": emb.stats.misses - misses0,
                                        "embed_s": round(time.perf_counter() - t0, 2), "embedder": emb.id}


def scifact_vectors(n_queries: int) -> tuple[np.ndarray, np.ndarray, dict]:
    try:
        ds = load_beir(SHARED / "scifact", "test")
    except Exception as exc:  # noqa: BLE001 - re-raised with what is missing
        raise MissingData(f"SciFact is not loadable from {SHARED / 'scifact'}: {exc}") from exc
    docs, cost = _embed_cached([doc_text(ds.corpus[i]) for i in ds.doc_ids()], "document", desc="scifact docs")
    queries, qcost = _embed_cached(list(ds.queries.values())[:n_queries], "query", desc="scifact queries")
    return docs, queries, {"source": "real all-MiniLM-L6-v2 SciFact vectors (5,183 abstracts), SciFact test queries",
                           "one_off": {"documents": cost, "queries": qcost}}


def noisy_copies(n: int, n_queries: int, seed: int, sigma: float = 0.5) -> tuple[np.ndarray, np.ndarray, dict]:
    centres, queries, info = scifact_vectors(n_queries)
    rng = np.random.default_rng(seed + 4)
    dim = centres.shape[1]
    out = np.empty((n, dim), dtype=np.float32)
    for start in range(0, n, 10_000):
        m = min(10_000, n - start)
        out[start:start + m] = (centres[rng.integers(0, len(centres), m)]
                                + sigma * rng.standard_normal((m, dim), dtype=np.float32) / np.sqrt(dim))
    return _unit(out), queries, {**info, "source": f"{n} noisy copies of the SciFact vectors (centre + Gaussian noise "
                                                  f"of norm ~{sigma}, numpy seed {seed}), SciFact test queries"}


_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_CLAUSE = re.compile(r"(?<=[,;:])\s+")


def spans(text: str, min_words: int = 4) -> list[str]:
    """Sentences, cut further at clause punctuation into spans of at least ``min_words`` words
    (a short clause joins the next); every word of ``text`` is in exactly one span."""
    out = []
    for sentence in _SENTENCE.split(text):
        buf = ""
        for part in _CLAUSE.split(sentence):
            buf = f"{buf} {part}".strip()
            if len(buf.split()) >= min_words:
                out.append(buf)
                buf = ""
        if buf:
            if out and len(buf.split()) < min_words:
                out[-1] += " " + buf
            else:
                out.append(buf)
    return [s for s in out if len(s.split()) >= 3]


def real_text_units() -> tuple[list[str], list[str], dict]:
    """(distinct text spans, held-out questions, counts per source) from ../shared/datasets."""
    per_source: dict[str, list[str]] = {}
    try:
        sci = [json.loads(line) for line in (SHARED / "scifact" / "corpus.jsonl").open(encoding="utf-8")]
        per_source["scifact"] = [s for d in sci for t in (d.get("title", ""), d.get("text", "")) for s in spans(t)]
        for name in ("clapnq_dev", "xquad_en"):
            rows = [json.loads(line) for line in (SHARED / name / "beir" / "corpus.jsonl").open(encoding="utf-8")]
            per_source[name] = [s for d in rows for s in spans(d.get("text", ""))]
        md = sorted((SHARED / "documents").rglob("*.md"))
        per_source["documents_md"] = [s for p in md for line in p.read_text(encoding="utf-8", errors="replace").split("\n\n")
                                      if not line.lstrip().startswith(("|", "#", "<!--", "```")) for s in spans(line)]
        questions = [json.loads(line)["text"] for line in (SHARED / "scifact" / "queries.jsonl").open(encoding="utf-8")]
        for name in ("clapnq_dev", "xquad_en"):
            questions += [json.loads(line)["question"] for line in (SHARED / name / "qa.jsonl").open(encoding="utf-8")]
    except (OSError, KeyError, ValueError) as exc:
        raise MissingData(f"the shared corpora under {SHARED} are not readable: {exc}") from exc
    units = list(dict.fromkeys(s for source in per_source.values() for s in source))
    qset = set(questions)
    units = [u for u in units if u not in qset]  # questions are held out of the index
    if len(units) < MIN_REAL_TEXT:
        raise MissingData(f"only {len(units)} distinct real text spans under {SHARED}; need {MIN_REAL_TEXT}")
    return units, list(dict.fromkeys(questions)), {k: len(v) for k, v in per_source.items()}


def real_text(n: int, n_queries: int, seed: int) -> tuple[np.ndarray, np.ndarray, dict]:
    units, questions, counts = real_text_units()
    if n > len(units):
        raise MissingData(f"--n {n}: only {len(units)} distinct real text spans are available")
    units = units[:n]
    rng = np.random.default_rng(seed + 5)
    picked = [questions[i] for i in sorted(rng.choice(len(questions), n_queries, replace=False))]
    docs, cost = _embed_cached(units, "document", desc="real text spans")
    queries, qcost = _embed_cached(picked, "query", desc="questions")
    return docs, queries, {"source": f"{n} distinct real text spans (sentences split at clause punctuation) of SciFact, "
                                     "ClapNQ, XQuAD and the shared documents, real all-MiniLM-L6-v2 embeddings; "
                                     f"{n_queries} held-out questions (SciFact, ClapNQ, XQuAD, numpy seed {seed})",
                           "spans_per_source": counts, "mean_words": round(float(np.mean([len(u.split()) for u in units])), 1),
                           "one_off": {"documents": cost, "queries": qcost}}


def random_vectors(n: int, n_queries: int, seed: int, dim: int = 384) -> tuple[np.ndarray, np.ndarray, dict]:
    rng = np.random.default_rng(seed)
    return (_unit(rng.standard_normal((n, dim), dtype=np.float32)), _unit(rng.standard_normal((n_queries, dim), dtype=np.float32)),
            {"source": f"{n} uniform random unit vectors x {dim} and random queries (numpy seed {seed}): no structure"})


# -- the measurement --------------------------------------------------------------------------------
def payloads(n: int, seed: int) -> tuple[list[dict], dict[str, np.ndarray]]:
    """Each point's KB payload, and per filter the mask of points it lets through: a seeded
    uniform u makes a point global (u < 45%), owner-0's private (next 5%), owner-1's private
    (next 5%) or another owner's private (the rest, over 18 owners)."""
    u = np.random.default_rng(seed + 1).random(n)
    cut0, cut1 = GLOBAL_SHARE + OWNER0_SHARE, GLOBAL_SHARE + OWNER0_SHARE + OWNER1_SHARE
    is_global = u < GLOBAL_SHARE
    owner = np.empty(n, dtype=int)
    owner[is_global] = np.random.default_rng(seed + 2).integers(0, OTHER_OWNERS + 2, int(is_global.sum()))
    owner[(u >= GLOBAL_SHARE) & (u < cut0)] = 0
    owner[(u >= cut0) & (u < cut1)] = 1
    rest = u >= cut1
    owner[rest] = 2 + ((u[rest] - cut1) / (1 - cut1) * OTHER_OWNERS).astype(int).clip(0, OTHER_OWNERS - 1)
    rows = [{"source_filename": f"owner-{owner[i]}/doc{i}.md", "chunk_index": 0, "owner_identity": f"owner-{owner[i]}",
             "visibility": "global" if is_global[i] else "private"} for i in range(n)]
    masks = {"none": np.ones(n, bool), "access_50": is_global | (owner == 1), "own_private_5": ~is_global & (owner == 0)}
    return rows, masks


def _force_hnsw(store, name: str, dim: int, m: int, ef_construct: int) -> None:
    """Rewrite the shard's config (the vectors and HNSW parameters EdgeStore creates) with a 1 KB
    indexing threshold, so the next optimize() indexes every segment."""
    import qdrant_edge as qe  # native engine, as in adiyan.store.edge

    from adiyan.store.base import SPARSE_NAME

    store.close()
    config = qe.EdgeConfig(
        vectors=qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine),
        sparse_vectors={SPARSE_NAME: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        hnsw_config=qe.HnswIndexConfig(m=m, ef_construct=ef_construct, full_scan_threshold=FULL_SCAN_KB),
        optimizers=qe.EdgeOptimizersConfig(indexing_threshold=INDEXING_THRESHOLD_KB))
    shard = qe.EdgeShard.load(str(store.root / name), config)
    shard.flush()
    shard.close()


def measure(vectors: np.ndarray, queries: np.ndarray, *, info: dict, k: int = 10, ef: int = 128, hnsw_m: int = 16,
            ef_construct: int = 100, seed: int = 0, warmup: int = 20, numpy_checks: int = 20,
            progress: bool = True) -> dict:
    n, dim = vectors.shape
    rows_payload, masks = payloads(n, seed)
    with tempfile.TemporaryDirectory(prefix="adiyan_latency_") as tmp:
        store = EdgeStore(tmp, hnsw_m=hnsw_m, hnsw_ef_construct=ef_construct, full_scan_threshold=FULL_SCAN_KB)
        try:
            store.ensure_collection(COLLECTION, dim=dim, embedder_id="latency-bench")  # payload indexes first
            t0 = time.perf_counter()
            for start in range(0, n, 1000):
                store.upsert(COLLECTION, [Point(str(uuid.UUID(int=i + 1)), vectors[i], rows_payload[i])
                                          for i in range(start, min(start + 1000, n))])
            upsert_s = time.perf_counter() - t0
            _force_hnsw(store, COLLECTION, dim, hnsw_m, ef_construct)
            t0 = time.perf_counter()
            store.optimize(COLLECTION)
            optimize_s = time.perf_counter() - t0
            build = _shard_info(store, COLLECTION)
            if progress:
                print(f"  {n} vectors: upsert {upsert_s:.1f}s, optimize {optimize_s:.1f}s, indexed "
                      f"{build['indexed_vectors']}", flush=True)
            for q in queries[:warmup]:
                store.search(COLLECTION, q, k, ef=ef)
                store.search(COLLECTION, q, k, exact=True)
            index_of = {str(uuid.UUID(int=i + 1)): i for i in range(n)}
            out_rows = []
            for fname, flt in FILTERS.items():
                mask = masks[fname]
                lat = {"hnsw": [], "exact": []}
                recall, violations, exact_mismatch = [], 0, 0
                for qi, q in enumerate(queries):
                    order = ("hnsw", "exact") if qi % 2 == 0 else ("exact", "hnsw")
                    found = {}
                    for mode in order:
                        t = time.perf_counter()
                        hits = store.search(COLLECTION, q, k, flt=flt, ef=ef, exact=(mode == "exact"))
                        lat[mode].append(time.perf_counter() - t)
                        found[mode] = [index_of[h.id] for h in hits]
                    violations += sum(not mask[i] for i in found["hnsw"] + found["exact"])
                    truth = set(found["exact"])
                    recall.append(len(truth & set(found["hnsw"])) / max(1, len(truth)))
                    if qi < numpy_checks:  # the reference is exact: it must equal a brute force
                        scores = np.where(mask, vectors @ q, -np.inf)
                        ref = set(np.argsort(-scores, kind="stable")[:k].tolist())
                        exact_mismatch += len(truth ^ ref) > 0
                row = {"filter": fname, "points_passing": int(mask.sum()),
                       "share_passing": round(float(mask.mean()), 4), "queries": len(queries)}
                for mode in ("hnsw", "exact"):
                    ms = np.asarray(lat[mode]) * 1000.0
                    row[f"{mode}_p50_ms"] = round(percentile(ms, 50), 3)
                    row[f"{mode}_p95_ms"] = round(percentile(ms, 95), 3)
                row["ratio_exact_to_hnsw_p50"] = round(row["exact_p50_ms"] / row["hnsw_p50_ms"], 2)
                row["ratio_exact_to_hnsw_p95"] = round(row["exact_p95_ms"] / row["hnsw_p95_ms"], 2)
                row[f"hnsw_recall@{k}_vs_exact"] = round(float(np.mean(recall)), 4)
                row["filter_violations"] = violations
                row["exact_vs_numpy_mismatches"] = exact_mismatch
                out_rows.append(row)
                if progress:
                    print(f"  {fname:<14} HNSW p50 {row['hnsw_p50_ms']:.2f} ms | exact p50 {row['exact_p50_ms']:.2f} | "
                          f"ratio {row['ratio_exact_to_hnsw_p50']}x | recall {row[f'hnsw_recall@{k}_vs_exact']}",
                          flush=True)
        finally:
            store.close()
    return {"vectors": n, "dim": dim, **info,
            "build": {"upsert_s": round(upsert_s, 2), "optimize_s": round(optimize_s, 2), **build},
            "rows": out_rows}


def checks_for(sizes: list[dict], k: int) -> dict[str, bool]:
    """Every set indexed by HNSW, no hit outside its filter, exact search equal to a brute force."""
    return {"hnsw_built_for_every_set": all(s["build"]["indexed_vectors"] == s["vectors"] for s in sizes),
            "no_hit_outside_its_filter": all(r["filter_violations"] == 0 for s in sizes for r in s["rows"]),
            "exact_equals_numpy_brute_force": all(r["exact_vs_numpy_mismatches"] == 0 for s in sizes for r in s["rows"]),
            "filters_pass_50_and_5_percent": all(
                abs(r["share_passing"] - {"none": 1.0, "access_50": 0.5, "own_private_5": 0.05}[r["filter"]]) < 0.01
                for s in sizes for r in s["rows"])}


def run(sets: tuple = SETS, n: int = 100_000, n_queries: int = 200, k: int = 10, ef: int | None = None,
        seed: int = 0, progress: bool = True) -> dict:
    sc = _settings().store
    ef = ef or sc.hnsw_ef
    makers = {"scifact": lambda: scifact_vectors(n_queries), "noisy_copies": lambda: noisy_copies(n, n_queries, seed),
              "real_text": lambda: real_text(n, n_queries, seed), "random": lambda: random_vectors(n, n_queries, seed)}
    unknown = set(sets) - set(makers)
    if unknown:
        raise ValueError(f"unknown vector set(s) {sorted(unknown)}; choose from {', '.join(SETS)}")
    results = []
    for name in sets:
        docs, queries, info = makers[name]()
        if progress:
            print(f"[latency] {name}: {len(docs)} vectors: {info['source']}", flush=True)
        results.append({"set": name, **measure(docs, queries, info=info, k=k, ef=ef, hnsw_m=sc.hnsw_m,
                                               ef_construct=sc.hnsw_ef_construct, seed=seed, progress=progress)})
    checks = checks_for(results, k)
    real = next((s for s in results if s["set"] == "real_text"), None)
    target = None
    if real is not None:  # on realistic data HNSW must be worth it: faster than exact, nearly as good
        unf = next(r for r in real["rows"] if r["filter"] == "none")
        target = unf["ratio_exact_to_hnsw_p50"] >= 2.0 and unf[f"hnsw_recall@{k}_vs_exact"] >= 0.95
    return {
        "benchmark": "query_latency", "engine": "qdrant-edge (EdgeStore), in-process",
        "reference": "exact search (SearchParams.exact) on the same collection, queries and filter, interleaved query "
                     "by query with the HNSW searches; itself checked against a NumPy brute force",
        "k": k, "hnsw_ef": ef, "hnsw_m": sc.hnsw_m, "hnsw_ef_construct": sc.hnsw_ef_construct,
        "full_scan_threshold_kb": FULL_SCAN_KB, "indexing_threshold_kb": INDEXING_THRESHOLD_KB,
        "filters": {"none": "every point", "access_50": "visibility == global OR owner_identity == owner-1 (the KB's "
                    "access filter)", "own_private_5": "owner_identity == owner-0 AND visibility == private"},
        "timing": "wall time per EdgeStore.search call (Python wrapper, payload included), one query at a time",
        "sizes": results, "checks": checks,
        "target": "real_text, unfiltered: HNSW p50 at least 2x faster than exact with recall@10 >= 0.95",
        "meets_target": target, "ok": all(checks.values()) and target is not False, "machine": machine(),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sets", default=",".join(SETS), help="comma-separated: " + ", ".join(SETS))
    p.add_argument("--n", type=int, default=100_000, help="vectors in noisy_copies, real_text and random")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--ef", type=int, default=None, help="HNSW ef (default: store.hnsw_ef)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="reports/benchmarks/latency.json")
    a = p.parse_args()
    result = run(tuple(s for s in a.sets.split(",") if s), a.n, a.queries, a.k, a.ef, a.seed)
    write_json(result, a.out)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
