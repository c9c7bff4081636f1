"""What reading through the committed version costs: search latency with and without the read gate.

Every engine search of the knowledge base (``KnowledgeBase.search``, under all three searching
read paths) keeps only chunks of each source's committed version (``adiyan.kb.policy.committed_only``:
one SQLite lookup of the result's sources), asking the engine again when replaced or uncommitted
chunks took places in the top k. The reference, measured in the same run on the same index and
queries, is the same search with the gate switched off (what ``kb.search`` did before issue 13:
the engine query alone). Queries alternate between the two, query by query, so machine load hits
both alike.

Corpus: the first 400 SciFact documents, default chunking (1,048 chunks with minilm), global,
searched as a requester through the access filter; 300 SciFact test queries (vectors embedded
once beforehand, so the engine and the gate are what is timed), k = 10 (``retrieval.rank_depth``),
dense / BM25 / hybrid. Two states:

- ``steady``: every document committed, nothing stale (the normal case: the gate costs one lookup);
- ``write_in_flight``: 100 documents re-ingested with new content and the write stopped right
  after its commit (the fault hook raises there), so their 263-odd replaced chunks are still in
  the engine, as during a re-ingest or after a crash before repair: the gate drops them and
  refills. Without the gate these searches return replaced chunks (counted: ``stale_returned``).

Also the whole pipeline (``Retriever.retrieve``: query embedding from the cache, search, floor,
cut) with and without the gate, the latency a person sees.

    python benchmarks/read_gate.py [--docs 400] [--queries 300] [--k 10] [--out reports/benchmarks/read_gate.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

from _common import ROOT, SHARED, machine, percentile, write_json

import adiyan.kb as kbmod
from adiyan.config import load_settings
from adiyan.eval.beir import load_beir
from adiyan.factory import open_embedder, open_kb, open_retriever
from adiyan.kb.policy import committed_only

REQUESTER = "bench-reader"


def _no_gate(hits, committed):
    return list(hits), 0  # the engine's answer as is: kb.search before issue 13


def _docs(n: int) -> list[tuple[bytes, str]]:
    out = []
    with open(SHARED / "scifact" / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            out.append((f"# {row['title']}\n\n{row['text']}\n".encode(), f"scifact-{row['_id']}.md"))
            if len(out) == n:
                break
    return out


def _time(kb, qtexts, qvecs, k, mode, retriever=None) -> dict:
    """p50 / p95 (ms) gated and ungated, alternating query by query; stale chunks returned ungated."""
    times = {"gated": [], "ungated": []}
    stale_returned, rounds_needed = 0, 0
    for i, (q, v) in enumerate(zip(qtexts, qvecs)):
        for variant in (("gated", "ungated") if i % 2 == 0 else ("ungated", "gated")):
            kbmod.committed_only = committed_only if variant == "gated" else _no_gate
            t0 = time.perf_counter()
            if retriever is not None:
                hits = retriever.retrieve(q, REQUESTER, top_k=k).chunks
            else:
                hits = kb.search(q, k, requester=REQUESTER, mode=mode, query_vector=v)
            times[variant].append(1000 * (time.perf_counter() - t0))
            if variant == "ungated":
                recs = kb.raw.committed({c.source for c in hits})
                stale = sum(recs.get(c.source, (None,))[0] != c.payload.get("doc_version") for c in hits)
                stale_returned += stale
                rounds_needed += bool(stale)
    kbmod.committed_only = committed_only
    out = {v: {"p50_ms": round(percentile(t, 50), 4), "p95_ms": round(percentile(t, 95), 4),
               "mean_ms": round(sum(t) / len(t), 4)} for v, t in times.items()}
    out["ratio_p50_gated_to_ungated"] = round(out["gated"]["p50_ms"] / out["ungated"]["p50_ms"], 3)
    out["ratio_mean_gated_to_ungated"] = round(out["gated"]["mean_ms"] / out["ungated"]["mean_ms"], 3)
    out["overhead_p50_ms"] = round(out["gated"]["p50_ms"] - out["ungated"]["p50_ms"], 4)
    out["ungated_stale_chunks_returned"] = stale_returned
    out["ungated_queries_with_stale_chunks"] = rounds_needed
    return out


def run(n_docs: int = 400, n_queries: int = 300, k: int = 10) -> dict:
    docs = _docs(n_docs)
    ds = load_beir(SHARED / "scifact", "test")
    qtexts = list(ds.queries.values())[:n_queries]
    result = {"benchmark": "read_gate", "documents": n_docs, "queries": len(qtexts), "k": k, "machine": machine()}
    with tempfile.TemporaryDirectory() as tmp:
        s = load_settings(environ={}, overrides={"paths.data_dir": f"{tmp}/data",
                                                 "paths.cache_dir": str(ROOT / ".cache" / "adiyan"),
                                                 "retrieval.rank_depth": k, "retrieval.use_calibrated_floors": False})
        emb = open_embedder(s, progress=False)  # the embedding cache: chunks and queries embedded once
        kb = open_kb(s, embedder=emb, progress=False)
        try:
            res = kb.ingest_many([(data, name, "bench", "global") for data, name in docs])
            assert not [r for r in res if isinstance(r, Exception)]
            kb.finish_ingest()
            qvecs = emb.embed(qtexts, "query")
            result["chunks"] = kb.count_chunks()
            retriever = open_retriever(s, kb, entry_point="benchmarks/read_gate.py")
            for state in ("steady", "write_in_flight"):
                if state == "write_in_flight":
                    def stop_after_commit(stage):  # leaves the replaced chunks in the engine
                        if stage == "after_commit":
                            raise RuntimeError("stopped after the commit")
                    kb.fault_hook = stop_after_commit
                    changed = [(data + b"\nRevised.\n", name, "bench", "global") for data, name in docs[:100]]
                    try:
                        kb.ingest_many(changed)
                    except RuntimeError:
                        pass
                    kb.fault_hook = None
                    result["stale_chunks_in_engine"] = kb.count_chunks() - sum(
                        r.n_chunks for r in kb.raw.list(OWNER))
                result[state] = {mode: _time(kb, qtexts, qvecs, k, mode) for mode in ("dense", "bm25", "hybrid")}
                result[state]["pipeline_dense"] = _time(kb, qtexts, qvecs, k, "dense", retriever=retriever)
        finally:
            kb.close()
    result["summary"] = {f"{state}_{mode}_p50_ratio": result[state][mode]["ratio_p50_gated_to_ungated"]
                         for state in ("steady", "write_in_flight")
                         for mode in ("dense", "bm25", "hybrid", "pipeline_dense")}
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=400)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--out", default=str(ROOT / "reports" / "benchmarks" / "read_gate.json"))
    a = ap.parse_args()
    write_json(run(a.docs, a.queries, a.k), a.out)


if __name__ == "__main__":
    main()
