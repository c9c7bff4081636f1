"""What BEIR scores, beside what the workbench scores: ``eval.beir_protocol`` on a BEIR folder.

A BEIR folder given to ``invoke eval`` (``eval.evalset=<folder with corpus.jsonl>``) is
materialised as an evalset and run through the product's pipeline (chunking, Qdrant, the
Retriever): the ``product`` protocol. Its rankings are scored here as BEIR reports them, graded
nDCG@10 and Recall@100 over documents (a document ranks by its best chunk), beside the published
figures for the data set (:func:`published_figures`).

``eval.beir_protocol=beir`` adds BEIR's own protocol over the same folder and the same settings'
mode and embedder: every document whole, as ``title + " " + text``, the embedder's own input
truncation, exact search, BM25 / dense / RRF (:func:`adiyan.eval.beir_runs.reference_runs`, the
code the SciFact benchmark runs), 1000 deep. Both land in ``metrics.beir`` of metrics.json::

    product.ndcg@10  product.recall@100     the chunked product path
    beir.ndcg@10     beir.recall@100        the whole-document BEIR protocol (beir only)
    published.ndcg@10 published.recall@100  the first published figure for the method
    beir.delta_ndcg@10 / product.delta_ndcg@10   measured - published

and the details (protocol, every published figure and its source, the relevance used) in
metrics.json ``beir``. The BEIR protocol has no chunking, floor, re-ranker, query transform, PRF
or client-side fusion: under ``beir`` those retrieval settings, changed, are refused by name
(the two figures must come from one configuration), as is ``beir`` on a set that is not a BEIR
folder or from an entry point other than ``invoke eval``.
"""

from __future__ import annotations

import time
from pathlib import Path

import yaml

from ..config import RetrievalConfig, read_yaml_mapping
from ..retrieval.pipeline import UnsupportedSetting
from .. import metrics as M
from .beir import load_beir
from .beir_runs import reference_runs
from .ir_metrics import evaluate_run

PROTOCOLS = ("product", "beir")
METRICS = ("ndcg@10", "recall@100")
DEPTH = 1000  # BEIR's runs keep 1000 documents per query
REGISTRY = Path(__file__).with_name("beir_published.yaml")
# retrieval settings the whole-document protocol has nothing to apply with (BM25, exact dense, RRF only)
NOT_IN_BEIR_PROTOCOL = {"fusion": "it fuses by RRF (retrieval.rrf_k) only", "prf_docs": "it has no feedback step",
                        "rm3_docs": "it has no feedback step",
                        "rerank": "it has no re-ranker", "query_transform": "it embeds each query as written"}


M.register(*[m for metric in METRICS for m in (
    M.Metric(f"product.{metric}", "beir", M.HIGHER, 0.0, 1.0, description=f"graded {metric} of the product's chunked path, by document"),
    M.Metric(f"beir.{metric}", "beir", M.HIGHER, 0.0, 1.0, description=f"graded {metric} of BEIR's whole-document protocol"),
    M.Metric(f"published.{metric}", "beir", M.NEUTRAL, 0.0, 1.0, description=f"the first published {metric} for the method"),
    M.Metric(f"product.delta_{metric}", "beir", M.HIGHER, -1.0, 1.0, description="product minus published"),
    M.Metric(f"beir.delta_{metric}", "beir", M.HIGHER, -1.0, 1.0, description="BEIR protocol minus published"))])


def beir_folder(path) -> Path | None:
    """The BEIR folder ``path`` names (``corpus.jsonl`` + ``queries.jsonl``), else None."""
    p = Path(path)
    return p if (p / "corpus.jsonl").is_file() and (p / "queries.jsonl").is_file() else None


def refuse_beir_protocol(settings, entry_point: str) -> None:
    """Refuse ``eval.beir_protocol=beir`` by name where it cannot act: another entry point than
    ``invoke eval``, an evalset that is not a BEIR folder, or a retrieval setting it cannot apply."""
    protocol = settings.eval.beir_protocol
    if protocol == "product":
        return
    setting = f"eval.beir_protocol={protocol}"
    if entry_point != "invoke eval":
        raise UnsupportedSetting(setting, entry_point, "only invoke eval runs the whole-document BEIR protocol")
    if beir_folder(settings.eval.evalset) is None:
        raise UnsupportedSetting(setting, f"invoke eval on {settings.eval.evalset}",
                                 "the BEIR protocol needs a BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv) "
                                 "as eval.evalset; an authored or conversation evalset has no whole-document protocol")
    for changed, on in ((settings.embedder.extra, f"embedder.extra={settings.embedder.extra}"),
                        (settings.store.title_field, "store.title_field=true")):
        if changed:
            raise UnsupportedSetting(on, f"invoke eval under {setting}", "the BEIR protocol ranks by one dense model "
                                     "and one BM25 field (use eval.beir_protocol=product to measure it on the product path)")
    defaults = RetrievalConfig()
    for name, why in NOT_IN_BEIR_PROTOCOL.items():
        value = getattr(settings.retrieval, name)
        if value != getattr(defaults, name):
            raise UnsupportedSetting(f"retrieval.{name}={value}", f"invoke eval under {setting}",
                                     f"the BEIR protocol ranks whole documents by BM25, exact dense search or RRF; {why} "
                                     "(use eval.beir_protocol=product to measure it on the product path)")


def method_name(mode: str, embedder_id: str) -> str:
    """The published-figures key of a retrieval mode: bm25, dense:<embedder>, hybrid_rrf:<embedder>."""
    return {"bm25": "bm25", "dense": f"dense:{embedder_id}", "hybrid": f"hybrid_rrf:{embedder_id}"}[mode]


def _read_figures(path: Path) -> dict:
    data = read_yaml_mapping(path, ValueError, missing="published figures file not found")
    for method, metrics in (data.get("figures") or {}).items():
        for metric, figs in (metrics or {}).items():
            for i, f in enumerate(figs or []):
                if not isinstance(f, dict) or not isinstance(f.get("value"), (int, float)) or not f.get("source"):
                    raise ValueError(f"{path}: figures.{method}.{metric}[{i}] needs a numeric value and a source")
    return data


def published_figures(name: str, folder: Path | None, counts: dict) -> dict:
    """``{"figures": {method: {metric: [{value, source}]}}, "from": [...], "counts_match": bool | None}``:
    the registry's entry for ``name`` (beir_published.yaml), with a ``published.yaml`` beside the
    folder (or beside its parent when the folder is named ``beir``) added over it."""
    registry = yaml.safe_load(REGISTRY.read_text(encoding="utf-8")) or {}
    entry = registry.get(name) or {}
    figures = {m: dict(v) for m, v in (entry.get("figures") or {}).items()}
    sources = [f"{REGISTRY.name} ({name})"] if entry else []
    expected = {k: entry[k] for k in ("docs", "queries") if k in entry}
    if folder is not None:
        for cand in (folder / "published.yaml", folder.parent / "published.yaml" if folder.name == "beir" else None):
            if cand is not None and cand.is_file():
                local = _read_figures(cand)
                for method, metrics in (local.get("figures") or {}).items():
                    figures.setdefault(method, {}).update(metrics or {})
                expected.update({k: local[k] for k in ("docs", "queries") if k in local})
                sources.append(str(cand))
                break
    match = None if not expected else all(counts.get(k) == v for k, v in expected.items())
    return {"figures": figures, "from": sources, "expected_counts": expected or None, "counts_match": match}


def _first(figures: dict, method: str, metric: str) -> float | None:
    figs = (figures.get(method) or {}).get(metric) or []
    return float(figs[0]["value"]) if figs else None


def graded_qrels(qrels: dict) -> dict:
    """Judgements with a grade > 0, and only queries that have one (the product's answerable questions)."""
    graded = {q: {d: int(g) for d, g in docs.items() if g > 0} for q, docs in qrels.items()}
    return {q: docs for q, docs in graded.items() if docs}


def run_beir_protocol(settings, folder, split: str = "test", *, embedder=None,
                      progress: bool = False) -> tuple[dict, dict]:
    """BEIR's whole-document protocol over a BEIR folder with the settings' ``retrieval.mode`` (and
    ``retrieval.rrf_k``), ``embedder`` for dense / hybrid: ({"ndcg@10", "recall@100"}, description)."""
    t0 = time.perf_counter()
    rc = settings.retrieval
    data = load_beir(folder, split)
    ref = reference_runs(data, (rc.mode,), embedder=embedder if rc.mode != "bm25" else None, depth=DEPTH,
                         rrf_k=rc.rrf_k, progress=progress)
    qrels = graded_qrels(data.qrels)
    measured = evaluate_run(qrels, ref.runs[rc.mode], METRICS)
    return measured, {**ref.describe(), "mode": rc.mode, "queries": len(qrels),
                      "seconds": round(time.perf_counter() - t0, 3)}


def beir_report(settings, es, qrels: dict, run: dict, *, embedder, progress: bool = False) -> tuple[dict, dict]:
    """(``metrics.beir`` group, metrics.json ``beir`` details) for a run on a BEIR evalset.

    ``qrels`` / ``run``: the product path's graded qrels and document rankings (source keys,
    QuestionRows.qrels / .run). Under ``eval.beir_protocol=beir`` the whole-document protocol is
    run over ``eval.evalset`` (the BEIR folder itself) with the settings' mode and ``embedder``.
    """
    protocol = settings.eval.beir_protocol
    rc = settings.retrieval
    folder = beir_folder(settings.eval.evalset)
    counts = {"docs": es.beir.get("docs"), "queries": es.beir.get("queries")}
    method = method_name(rc.mode, embedder.id)
    pub = published_figures(es.beir["name"], folder, counts)
    depth = max(rc.rank_depth, rc.kb_top_k)
    product = evaluate_run(qrels, run, METRICS) if qrels else {m: None for m in METRICS}  # no grade > 0 at all
    if depth < 100:  # the ranking kept is shorter than 100: Recall@100 would be Recall@depth
        product["recall@100"] = None
    group: dict = {f"product.{m}": None if v is None else round(v, 6) for m, v in product.items()}
    detail: dict = {
        "dataset": es.beir["name"], "split": es.beir.get("split"), "counts": counts, "relevance": es.relevance,
        "method": method, "protocol": protocol,
        "protocols": {"product": {
            "unit": "chunks (chunking.*), a document ranked by its best chunk", "depth": depth,
            "path": "materialised BEIR passages (# title, text) -> KnowledgeBase ingest -> Retriever (floor, mode, "
                    "fusion, cut), as invoke eval retrieves",
            "chunking": settings.chunking.model_dump(mode="json"),
            "recall@100": None if depth >= 100 else f"not measured: retrieval.rank_depth={rc.rank_depth} keeps "
                                                     f"{depth} documents; set retrieval.rank_depth=100"}},
        "published": pub}
    if protocol == "beir":
        measured, detail["protocols"]["beir"] = run_beir_protocol(settings, folder, es.beir.get("split") or "test",
                                                                  embedder=embedder, progress=progress)
        group.update({f"beir.{m}": round(v, 6) for m, v in measured.items()})
    for metric in METRICS:
        ref_value = _first(pub["figures"], method, metric)
        group[f"published.{metric}"] = ref_value
        for side in ("product", "beir"):
            v = group.get(f"{side}.{metric}")
            if v is not None and ref_value is not None:
                group[f"{side}.delta_{metric}"] = round(v - ref_value, 6)
    return group, detail
