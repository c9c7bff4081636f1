"""``adiyan testset validate``: does a generated set rank retrieval configurations as human questions do?

For each corpus with human-written questions (XQuAD, ClapNQ dev, adiyan_full, SciFact test) a set is
generated from the same documents (:func:`adiyan.testset.generate.generate`, answerable kinds
lookup / paraphrase / multi_hop, documents linked, not copied), and a fixed panel of retrieval
configurations (:data:`PANELS`) is run on both through the evaluation harness
(:func:`adiyan.eval.harness.open_index` / :func:`question_rows` / :func:`per_question_ir`): the
generated set is scored on the very index the human set builds (same documents, same owners), so
the two differ only in their questions.

Per metric (hit@4 over the top 4 of the ranking, the configuration's own hit@k, nDCG@10) the
configurations are ranked by their mean on each set and compared with Kendall's tau-b; its 95%
interval comes from a percentile bootstrap that resamples the questions of both sets (independently;
the configurations' per-question scores move together). The bias table gives, per contrast of two
configurations (BM25 - dense, hybrid - dense, mpnet - MiniLM, 400- vs 800-character chunks, k 8 - k 4),
the difference on the generated set minus the difference on the human set, in points.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from .. import metrics as M
from ..eval.evalset import load_evalset, materialize_beir
from ..eval.record import RunRecord
from ..eval.harness import IR_DEPTH, close_index, open_index, per_question_ir, question_rows
from ..factory import open_embedder, open_retriever
from .corpus import list_documents
from .generate import generate, write_evalset

CORPORA = {"xquad": "xquad_en/beir", "clapnq": "clapnq_dev/beir", "adiyan_full": "evalsets/adiyan_full",
           "scifact": "scifact"}
VALIDATE_KINDS = ["lookup", "paraphrase", "multi_hop"]
METRICS = ("hit@4", "hit@k", f"ndcg@{IR_DEPTH}")

_BASE = {"embedder.name": "minilm", "retrieval.mode": "dense", "retrieval.kb_top_k": 4}
_C400 = {"chunking.size": 400, "chunking.overlap": 50}
_RRF = {"retrieval.mode": "hybrid", "retrieval.fusion": "rrf"}
_CVX = {"retrieval.mode": "hybrid", "retrieval.fusion": "convex", "retrieval.fusion_weight": 0.5}
PANELS = {
    "quick": {  # MiniLM and BM25 only: 10 configurations, one embedder's indexes
        "dense-minilm-k4": {}, "bm25-k4": {"retrieval.mode": "bm25"}, "rrf-minilm-k4": _RRF,
        "convex-minilm-k4": _CVX, "dense-minilm-k2": {"retrieval.kb_top_k": 2},
        "dense-minilm-k8": {"retrieval.kb_top_k": 8}, "dense-minilm-k4-c400": _C400,
        "bm25-k4-c400": {"retrieval.mode": "bm25", **_C400}, "rrf-minilm-k4-c400": {**_RRF, **_C400},
        "convex-minilm-k8": {**_CVX, "retrieval.kb_top_k": 8},
    },
}
PANELS["standard"] = {**PANELS["quick"], "dense-mpnet-k4": {"embedder.name": "mpnet"},
                      "rrf-mpnet-k4": {"embedder.name": "mpnet", **_RRF}}
PANELS["full"] = {**PANELS["standard"], "dense-nomic-k4": {"embedder.name": "nomic-embed-text"},
                  "rrf-nomic-k4": {"embedder.name": "nomic-embed-text", **_RRF}}
# SciFact (5,183 abstracts): one chunk per abstract as the base chunking (what benchmarks/scifact.py's
# whole_documents variant and the signals helper's nomic encode use, so the content-addressed
# embedding cache already holds those vectors), the shipped 800/100 chunking as the second one; no
# mpnet (a one-off ~68 min encode here). Generation chunks as the first configuration does.
_WHOLE = {"chunking.strategy": "recursive", "chunking.size": 12000, "chunking.overlap": 0}
_C800 = {"chunking.strategy": "auto", "chunking.size": 800, "chunking.overlap": 100}
PANELS["scifact"] = {
    "dense-minilm-k4": _WHOLE, "bm25-k4": {"retrieval.mode": "bm25", **_WHOLE}, "rrf-minilm-k4": {**_RRF, **_WHOLE},
    "convex-minilm-k4": {**_CVX, **_WHOLE}, "dense-minilm-k2": {"retrieval.kb_top_k": 2, **_WHOLE},
    "dense-minilm-k8": {"retrieval.kb_top_k": 8, **_WHOLE}, "dense-minilm-k4-c800": _C800,
    "bm25-k4-c800": {"retrieval.mode": "bm25", **_C800}, "rrf-minilm-k4-c800": {**_RRF, **_C800},
    "convex-minilm-k8": {**_CVX, "retrieval.kb_top_k": 8, **_WHOLE},
}
# SciFact with the whole-documents index alone (no 800/100 encode: its 15,143 chunks are a one-off
# of about half an hour on 2 cores): one chunking, so the chunking contrast is missing; the other ranking families stand in
# for it: RRF with k 10, DBSF fusion, dense pseudo-relevance feedback (3 documents, weight 0.25, the
# setting tuned on SciFact train in benchmarks/scifact_tuning.py) and BM25 with RM3 (10 documents).
PANELS["scifact-whole"] = {
    **{k: v for k, v in PANELS["scifact"].items() if "c800" not in k},
    "rrf10-minilm-k4": {**_RRF, "retrieval.rrf_k": 10, **_WHOLE},
    "dbsf-minilm-k4": {"retrieval.mode": "hybrid", "retrieval.fusion": "dbsf", **_WHOLE},
    "dense-minilm-k4-prf": {"retrieval.prf_docs": 3, "retrieval.prf_weight": 0.25, **_WHOLE},
    "bm25-k4-rm3": {"retrieval.mode": "bm25", "retrieval.rm3_docs": 10, **_WHOLE},
}
PANELS["scifact-nomic"] = {**PANELS["scifact"], "dense-nomic-k4": {"embedder.name": "nomic-embed-text", **_WHOLE},
                           "rrf-nomic-k4": {"embedder.name": "nomic-embed-text", **_RRF, **_WHOLE}}
CONTRASTS = [("bm25 - dense", "bm25-k4", "dense-minilm-k4"), ("hybrid rrf - dense", "rrf-minilm-k4", "dense-minilm-k4"),
             ("hybrid convex - dense", "convex-minilm-k4", "dense-minilm-k4"),
             ("mpnet - minilm (dense)", "dense-mpnet-k4", "dense-minilm-k4"),
             ("nomic - minilm (dense)", "dense-nomic-k4", "dense-minilm-k4"),
             ("chunks 400 - 800 (dense)", "dense-minilm-k4-c400", "dense-minilm-k4"),
             ("chunks 400 - 800 (bm25)", "bm25-k4-c400", "bm25-k4"),
             ("chunks 800 - whole (dense)", "dense-minilm-k4-c800", "dense-minilm-k4"),
             ("chunks 800 - whole (bm25)", "bm25-k4-c800", "bm25-k4"),
             ("k 8 - k 4 (dense)", "dense-minilm-k8", "dense-minilm-k4"),
             ("hybrid dbsf - dense", "dbsf-minilm-k4", "dense-minilm-k4"),
             ("dense PRF - dense", "dense-minilm-k4-prf", "dense-minilm-k4"),
             ("bm25 RM3 - bm25", "bm25-k4-rm3", "bm25-k4")]


def kendall_tau(a, b) -> float:
    """Kendall's tau-b of two score vectors (scipy); nan when one is constant."""
    from scipy.stats import kendalltau  # noqa: PLC0415

    return float(kendalltau(a, b).statistic)


def tau_interval(h: np.ndarray, g: np.ndarray, *, n_boot: int = 1000, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of tau between configuration means of ``h`` and ``g`` ([config x question]),
    resampling each set's questions with replacement."""
    rng = np.random.default_rng(seed)
    taus = []
    for _ in range(n_boot):
        ih = rng.integers(0, h.shape[1], h.shape[1])
        ig = rng.integers(0, g.shape[1], g.shape[1])
        t = kendall_tau(h[:, ih].mean(axis=1), g[:, ig].mean(axis=1))
        if np.isfinite(t):
            taus.append(t)
    if not taus:
        return float("nan"), float("nan")
    return float(np.percentile(taus, 2.5)), float(np.percentile(taus, 97.5))


def human_set(settings, corpus: str) -> Path:
    rel = CORPORA[corpus]
    if corpus == "adiyan_full":
        return Path(rel)
    return materialize_beir(Path(settings.paths.datasets_dir) / rel)


def _per_question(qr, k: int) -> dict[str, dict[str, float]]:
    """{metric: {question id: value}} over the answerable questions."""
    ir = per_question_ir(qr)
    out = {m: {} for m in METRICS}
    for r in qr.rows:
        if r["hit"] is None:
            continue
        top4 = []
        for s in r["ranked_sources"]:
            if len(top4) == 4:
                break
            top4.append(s)
        out["hit@4"][r["id"]] = float(M.hit(top4, r["gold_sources"]))
        out["hit@k"][r["id"]] = float(r["hit"])
        out[f"ndcg@{IR_DEPTH}"][r["id"]] = float(ir[f"ndcg@{IR_DEPTH}"].get(r["id"], 0.0))
    return out


def _config_settings(settings, over: dict):
    d = settings.model_dump()
    for key, value in {**_BASE, **over}.items():
        section, field = key.split(".", 1)
        d[section][field] = value
    return type(settings).model_validate(d)


def entry_name(corpus: str, kinds: list[str]) -> str:
    """The result's key: the corpus, with the kinds when they are not the default ones."""
    return corpus if list(kinds) == VALIDATE_KINDS else f"{corpus}:{'+'.join(kinds)}"


def run_corpus(settings, corpus: str, out: Path, *, n: int, seed: int, panel: dict, kinds: list[str] | None = None,
               progress: bool = False) -> dict:
    t0 = time.perf_counter()
    kinds = list(kinds or VALIDATE_KINDS)
    entry = entry_name(corpus, kinds)
    hpath = human_set(settings, corpus)
    human = load_evalset(hpath)
    gen_dir = out / "sets" / f"{entry.replace(':', '-').replace('+', '-')}-generated-s{seed}"
    # generation parses and chunks as the panel's first configuration does (its embedder: near-duplicates, reach)
    gs = _config_settings(settings, next(iter(panel.values())))
    emb = open_embedder(gs, progress=progress)
    gen = generate(gs, list_documents(hpath), n=n, kinds=kinds, seed=seed, embedder=emb, progress=progress)
    write_evalset(gen, gen_dir, name=f"{corpus}-generated", link=True)
    generated = load_evalset(gen_dir)
    gen_kind = {q.id: q.kind for q in generated.questions}
    scores = {"human": {m: {} for m in METRICS}, "generated": {m: {} for m in METRICS}}
    timing = {}
    partial = out / "raw" / f"{entry}.partial.json"  # per-configuration progress: an interrupted run resumes
    pkey = {"panel": panel, "n": n, "seed": seed, "questions": generated.content_hash()}
    if partial.is_file():
        old = json.loads(partial.read_text(encoding="utf-8"))
        if old.get("key") == pkey:
            scores, timing = old["scores"], old["timing"]
    for name, over in panel.items():
        if name in timing:
            continue
        s = _config_settings(settings, over)
        tc = time.perf_counter()
        index = open_index(s, human, progress=progress)
        try:
            retriever = open_retriever(s, index.kb, entry_point="adiyan testset validate")
            for label, es in (("human", human), ("generated", generated)):
                ix = index if es is human else dataclasses.replace(index, evalset=es)
                per_q = _per_question(question_rows(ix, retriever, progress=progress, desc=f"{corpus} {name} {label}"),
                                      s.retrieval.kb_top_k)
                for m in METRICS:
                    scores[label][m][name] = per_q[m]
        finally:
            close_index(index)
        timing[name] = round(time.perf_counter() - tc, 1)
        print(f"[testset validate] {corpus} {name}: {timing[name]} s", file=sys.stderr, flush=True)
        partial.write_text(json.dumps({"key": pkey, "scores": scores, "timing": timing}), encoding="utf-8")
    return {"corpus": corpus, "kinds": kinds, "llm": gen.report.get("llm"), "human_set": str(hpath),
            "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "generated_set": str(gen_dir),
            "human_questions": len(next(iter(scores["human"]["hit@4"].values()))),
            "generated_questions": len(next(iter(scores["generated"]["hit@4"].values()))),
            "generation": {k: {kk: v[kk] for kk in ("quota", "made", "kept", "rejected", "unreachable_gold_flagged",
                                                    "mean_word_overlap")} for k, v in gen.report["per_kind"].items()},
            "scores": scores, "gen_kind": gen_kind, "seconds": round(time.perf_counter() - t0, 1),
            "seconds_per_config": timing}


def _matrix(per_config: dict[str, dict[str, float]], names: list[str], ids=None) -> np.ndarray:
    ids = ids if ids is not None else sorted(per_config[names[0]])
    return np.asarray([[per_config[c][q] for q in ids] for c in names], dtype=float)


def analyse(raw: dict, *, n_boot: int, seed: int) -> dict:
    names = list(raw["scores"]["human"]["hit@4"])
    res = {"configs": names, "metrics": {}}
    for m in METRICS:
        h = _matrix(raw["scores"]["human"][m], names)
        g = _matrix(raw["scores"]["generated"][m], names)
        hm, gm = h.mean(axis=1), g.mean(axis=1)
        lo, hi = tau_interval(h, g, n_boot=n_boot, seed=seed)
        by_kind = {}
        for kind in sorted(set(raw["gen_kind"].values())):
            ids = sorted(q for q in raw["scores"]["generated"][m][names[0]] if raw["gen_kind"].get(q) == kind)
            if len(ids) >= 10:
                gk = _matrix(raw["scores"]["generated"][m], names, ids)
                klo, khi = tau_interval(h, gk, n_boot=max(200, n_boot // 5), seed=seed)
                by_kind[kind] = {"questions": len(ids), "tau": kendall_tau(hm, gk.mean(axis=1)), "ci95": [klo, khi],
                                 "mean": float(gk.mean())}
        rank = lambda v: (-v).argsort(kind="stable").argsort() + 1  # noqa: E731
        rh, rg = rank(hm), rank(gm)
        table = [{"config": c, "human": round(float(hm[i]), 4), "generated": round(float(gm[i]), 4),
                  "rank_human": int(rh[i]), "rank_generated": int(rg[i])} for i, c in enumerate(names)]
        idx = {c: i for i, c in enumerate(names)}
        bias = [{"contrast": label, "human_pts": round(100 * (hm[idx[a]] - hm[idx[b]]), 2),
                 "generated_pts": round(100 * (gm[idx[a]] - gm[idx[b]]), 2),
                 "bias_pts": round(100 * ((gm[idx[a]] - gm[idx[b]]) - (hm[idx[a]] - hm[idx[b]])), 2)}
                for label, a, b in CONTRASTS if a in idx and b in idx]
        res["metrics"][m] = {"tau": kendall_tau(hm, gm), "ci95": [lo, hi], "table": table, "bias": bias,
                             "by_kind": by_kind}
    return res


def run_validation(settings, corpora: list[str], out: Path, *, n: int = 300, seed: int = 0, n_boot: int = 1000,
                   panel: str = "standard", kinds: list[str] | None = None, progress: bool = False) -> dict:
    """Validate on each corpus; writes ``out/validate.json`` (with the per-question scores in
    ``out/raw/<corpus>.json``) and ``out/validate.md``. A corpus already measured with the same
    panel, n and seed (its raw file) is not run again."""
    if panel not in PANELS:
        raise ValueError(f"--panel {panel!r}: choose from {', '.join(PANELS)}")
    out = Path(out)
    # the folder is a run record like every job's (config.yaml now, the envelope in validate.json);
    # its name stays the one asked for, so a killed validation resumes in it
    record = RunRecord.start(out.parent, out.name, settings=settings)
    (out / "raw").mkdir(parents=True, exist_ok=True)
    kinds = list(kinds or VALIDATE_KINDS)
    result = {"run": record.envelope(settings),
              "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "panel": panel,
              "panel_configs": {k: {**_BASE, **v} for k, v in PANELS[panel].items()}, "n": n, "seed": seed,
              "bootstrap": n_boot, "kinds": kinds, "corpora": {}}
    entries = {entry_name(c, kinds): c for c in corpora}
    prev = out / "validate.json"
    if prev.is_file():
        old = json.loads(prev.read_text(encoding="utf-8"))
        result["corpora"] = {c: v for c, v in old.get("corpora", {}).items() if c not in entries}
    for entry, corpus in entries.items():
        rawf = out / "raw" / f"{entry}.json"
        key = {"panel": panel, "n": n, "seed": seed, "configs": result["panel_configs"]}
        if kinds != VALIDATE_KINDS:
            key["kinds"] = kinds
        raw = json.loads(rawf.read_text(encoding="utf-8")) if rawf.is_file() else None
        if raw is None or raw.get("key") != key:
            raw = run_corpus(settings, corpus, out, n=n, seed=seed, panel=PANELS[panel], kinds=kinds,
                             progress=progress)
            raw["key"] = key
            rawf.write_text(json.dumps(raw), encoding="utf-8")
        summary = {**{k: v for k, v in raw.items() if k not in ("scores", "gen_kind", "key")}, "panel": panel,
                   "panel_configs": {k: {**_BASE, **v} for k, v in PANELS[panel].items()},
                   "kinds": raw.get("kinds", VALIDATE_KINDS), "n": n, "seed": seed, "bootstrap": n_boot}
        result["corpora"][entry] = {**summary, **analyse(raw, n_boot=n_boot, seed=seed)}
    prev.write_text(json.dumps(result, indent=2), encoding="utf-8")
    (out / "validate.md").write_text(markdown(result), encoding="utf-8")
    return result


def _f(x, nd=3) -> str:
    return "n/a" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f"{x:.{nd}f}"


def summary_lines(result: dict) -> list[str]:
    lines = [f"testset validate (n={result['n']}, seed {result['seed']}):"]
    for corpus, r in result["corpora"].items():
        parts = [f"{m} tau {_f(v['tau'], 2)} [{_f(v['ci95'][0], 2)}, {_f(v['ci95'][1], 2)}]"
                 for m, v in r["metrics"].items()]
        lines.append(f"  {corpus:12} [{r.get('panel', result['panel'])}, {len(r['configs'])} configs] "
                     f"human {r['human_questions']:4} q, generated {r['generated_questions']:4} q: "
                     + "; ".join(parts))
    return lines


def markdown(result: dict) -> str:
    lines = ["# Generated vs human evalsets: do they rank retrieval configurations alike?", "",
             f"Last run {result['measured_at']} (panel `{result['panel']}`, {result['n']} generated questions, kinds "
             f"{', '.join(result['kinds'])}, seed {result['seed']}, {result['bootstrap']} bootstrap resamples over "
             "questions); each corpus below says its own.", "",
             "| corpus | panel | human q | generated q | " + " | ".join(f"tau {m} [95% CI]" for m in METRICS) + " |",
             "|---|---|---|---|" + "---|" * len(METRICS)]
    for corpus, r in result["corpora"].items():
        lines.append(f"| {corpus} | {r.get('panel', result['panel'])} ({len(r['configs'])}) | {r['human_questions']} | {r['generated_questions']} | " + " | ".join(
            f"{_f(r['metrics'][m]['tau'], 2)} [{_f(r['metrics'][m]['ci95'][0], 2)}, {_f(r['metrics'][m]['ci95'][1], 2)}]"
            for m in METRICS) + " |")
    for corpus, r in result["corpora"].items():
        llm = r.get("llm")
        lines += ["", f"## {corpus}", "", f"Human set `{r['human_set']}`; generated `{r['generated_set']}` "
                  f"({r['seconds']} s); kinds {', '.join(r.get('kinds', VALIDATE_KINDS))}"
                  + (f"; LLM `{llm['identity']['llm']}` ({llm['structured']})" if llm else "") + ".", "",
                  "Generation: " + "; ".join(
                      f"{k} kept {v['kept']}/{v['made']} (overlap {_f(v['mean_word_overlap'], 2)}, unreachable "
                      f"{v['unreachable_gold_flagged']})" for k, v in r["generation"].items()), ""]
        for m, v in r["metrics"].items():
            lines += [f"### {m}: tau {_f(v['tau'], 3)} [{_f(v['ci95'][0], 3)}, {_f(v['ci95'][1], 3)}]", "",
                      "| config | human | generated | rank human | rank generated |", "|---|---|---|---|---|"]
            lines += [f"| {t['config']} | {t['human']:.3f} | {t['generated']:.3f} | {t['rank_human']} | "
                      f"{t['rank_generated']} |" for t in v["table"]]
            lines += ["", "| contrast | human (pts) | generated (pts) | bias (pts) |", "|---|---|---|---|"]
            lines += [f"| {b['contrast']} | {b['human_pts']:+.2f} | {b['generated_pts']:+.2f} | {b['bias_pts']:+.2f} |"
                      for b in v["bias"]]
            if v["by_kind"]:
                lines += ["", "| generated kind only | questions | mean | tau [95% CI] |", "|---|---|---|---|"]
                lines += [f"| {k} | {x['questions']} | {x['mean']:.3f} | {_f(x['tau'], 2)} "
                          f"[{_f(x['ci95'][0], 2)}, {_f(x['ci95'][1], 2)}] |" for k, x in v["by_kind"].items()]
            lines.append("")
    return "\n".join(lines) + "\n"
