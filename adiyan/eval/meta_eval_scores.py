"""The scorers of the meta-evaluation: every answer metric the workbench computes offline against
the ground-truth answer, the judged RAGAS metrics with a configured judge, and the judge's two
calibrations (the authored pairs, which decide reliability as in ``invoke eval``, and RAGChecker's
human preferences, reported beside them).

Offline rows (each response scored against the instance's ``gt_answer``, the workbench's
``reference``): RAGAS ``rouge_score`` (ROUGE-L F), ``non_llm_string_similarity`` (1 - normalised
Levenshtein) and ``exact_match`` through :func:`~adiyan.eval.ragas_metrics.score_non_llm`, as
``invoke eval`` computes them; ``bleu_score`` (sacreBLEU over the whole answer);
``keyword_recall`` (the workbench's keyword hit: every answer keyword in the response). This set
has no authored keywords, so they are derived from the ground truth (:func:`answer_keywords`: its
content words); the graded share of them, ``keyword_share``, is a meta-eval-only diagnostic, as are
ragas' own ``BleuScore`` as shipped (``bleu_score_ragas``) and the embedding similarity
``semantic_similarity[<embedder>]`` (the cosine of the response's and the ground truth's embeddings,
what ragas' ``SemanticSimilarity`` computes; the workbench writes no such metric).

Judged rows: only ``answer_relevancy`` has what it needs here (question and answer); faithfulness,
context precision / recall and noise sensitivity need retrieved contexts, which this set does not
hold, and are listed as not applicable.
"""

from __future__ import annotations

import random
import re
from typing import Mapping, Sequence

import numpy as np
from tqdm.auto import tqdm


from ..cache import call_cache
from ..models import embedder_from_settings
from ..models.checker import ClaimChecker
from .. import metrics as M
from ..types import OWNER
from .claims import SUPPORT_THRESHOLD, claim_prf_many
from .harness import close_index, open_index
from .judge import (PreferencePair, calibrate_preferences, calibrate_reusing, evalset_calibration_pairs,
                    judge_from_settings)
from .meta_eval_method import ASPECTS, MetaInstance, metric_row, same_scores
from .ragas_metrics import LLM_METRICS, REQUIRES, _run, canonical_metric_names, sample_indices, score_llm, score_non_llm

# function words left out of derived keywords (the ground truth's other words of 4+ letters, and
# every token holding a digit, are its keywords)
STOPWORDS = frozenset("""
about above after again against also although among another because been before being below between
both cannot could does doing down during each either even ever every from further had has have having
here hers herself himself however into itself just more most much must neither nor once only other
ought ours ourselves over same several should since some such than that their theirs them themselves
then there these they this those though through thus under until upon very were what whatever when
where whereas whether which while whom whose will with within without would your yours yourself
yourselves also often many well like used using based various include includes including
""".split())
_CITATION = re.compile(r"\[\d+(?:\s*[,-]\s*\d+)*\]")
_TOKEN = re.compile(r"[a-z0-9]+(?:['\-][a-z0-9]+)*")
PREFERENCE_CHARS = 900  # each text in a preference prompt is cut to this (a small judge's context)
CONTEXT_FREE = {"question", "answer", "reference"}  # what this set holds for a judged metric


def answer_keywords(gt_answer: str) -> list[str]:
    """The ground truth's content words, in order of first use: lowercased tokens of 4+ characters
    (or holding a digit) that are not function words; citation markers like ``[4]`` are dropped."""
    seen: dict[str, None] = {}
    for tok in _TOKEN.findall(_CITATION.sub(" ", gt_answer.lower())):
        if (len(tok) >= 4 or any(ch.isdigit() for ch in tok)) and tok not in STOPWORDS:
            seen.setdefault(tok, None)
    return list(seen)


def keyword_share(response: str, keywords: Sequence[str]) -> float | None:
    """Share of ``keywords`` occurring in the response (case-insensitive substring, as keyword_hit)."""
    if not keywords:
        return None
    a = response.lower()
    return sum(k in a for k in keywords) / len(keywords)


def _pairs(values: Sequence, n: int) -> tuple[list, list]:
    """Scores of the 2n responses (model1's first, then model2's) as (model1, model2) lists."""
    return list(values[:n]), list(values[n:])


def ragas_bleu_as_shipped(references: Sequence[str], responses: Sequence[str]) -> list[float]:
    """ragas 0.4's ``BleuScore`` as it ships (its ". " sentence split kept): a diagnostic row."""
    from ragas.metrics.collections import BleuScore  # heavy: ragas (~2 s), only for this diagnostic

    metric = BleuScore()

    async def go():
        return [(await metric.ascore(reference=r, response=s)).value for r, s in zip(references, responses)]

    return _run(go())


def embedding_similarity(embedder, references: Sequence[str], responses: Sequence[str]) -> list[float]:
    """Cosine of each response's embedding with its reference's (rows are L2-normalised)."""
    texts = list(dict.fromkeys([*references, *responses]))
    vecs = np.asarray(embedder.embed(texts, "document"), dtype=np.float64)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    at = {t: i for i, t in enumerate(texts)}
    return [float(vecs[at[r]] @ vecs[at[s]]) for r, s in zip(references, responses)]


def _embedder(settings, name: str):
    if name == settings.embedder.name:
        return embedder_from_settings(settings, progress=False)
    other = settings.model_copy(update={"embedder": settings.embedder.model_copy(update={"name": name})})
    return embedder_from_settings(other, progress=False)


def offline_rows(instances: Sequence[MetaInstance], labels: Mapping[str, np.ndarray], settings, *,
                 embedders: Sequence[str] = ("minilm",), n_boot: int, progress: bool = True,
                 extras: bool = True, checker: bool = True) -> list[dict]:
    """The offline metrics' rows, each scored on both responses of all instances; ``extras=False``
    only the registry's metrics (no diagnostics, no embedding similarity); ``checker=False`` leaves
    out the claim checker's rows (the one offline metric that runs a model here)."""
    n, seed = len(instances), settings.seed
    refs = [i.gt_answer for i in instances] * 2
    resps = [i.responses[0] for i in instances] + [i.responses[1] for i in instances]
    rows_in = [{"id": f"{k % n}:model{k // n + 1}", "answer": a, "reference": r} for k, (r, a) in
               enumerate(zip(refs, resps))]
    embedders = embedders if extras else ()
    bar = tqdm(total=5 + len(embedders), desc="meta-eval metrics", unit="metric", disable=not progress, leave=False)
    per_row = score_non_llm(rows_in)
    bar.update(3)
    out = []

    def add(name, values, kind, note=""):
        out.append(metric_row(name, same_scores(*_pairs(values, n)), labels, n_boot=n_boot, seed=seed,
                              kind=kind, note=note))

    add("rouge_score", per_row["rouge_score"], "offline", "RAGAS RougeScore: ROUGE-L F-measure with stemming")
    add("non_llm_string_similarity", per_row["non_llm_string_similarity"], "offline",
        "RAGAS NonLLMStringSimilarity: 1 - normalised Levenshtein distance")
    add("bleu_score", per_row["bleu_score"], "offline", "sacreBLEU of the whole response against the ground truth")
    add("exact_match", per_row["exact_match"], "offline", "RAGAS ExactMatch: byte-for-byte equality")
    kws = [answer_keywords(i.gt_answer) for i in instances] * 2
    add("keyword_recall", [float(M.keyword_hit(a, k)) for a, k in zip(resps, kws)], "offline",
        "the workbench's keyword hit (every keyword in the response) over keywords derived from the ground "
        "truth's content words (this set has no authored keywords)")
    add("chrf_score", per_row["chrf_score"], "offline", "sacreBLEU chrF of the whole response against the ground truth")
    if checker:
        out.extend(checker_rows(instances, labels, resps, refs, n_boot=n_boot, seed=seed, extras=extras))
    if not extras:
        bar.close()
        return out
    add("keyword_share", [keyword_share(a, k) for a, k in zip(resps, kws)], "diagnostic",
        "meta-eval only: the share of the derived keywords in the response (a graded keyword recall)")
    add("bleu_score_ragas", ragas_bleu_as_shipped(refs, resps), "diagnostic",
        "meta-eval only: ragas 0.4.3's BleuScore as shipped, which scores only the response's first sentence")
    bar.update(2)
    for name in embedders:
        emb = _embedder(settings, name)
        add(f"semantic_similarity[{emb.id}]", embedding_similarity(emb, refs, resps), "embedding",
            f"meta-eval only: cosine of the {emb.id} embeddings of response and ground truth (ragas "
            "SemanticSimilarity); texts past the model's input length are cut by it")
        bar.update(1)
    bar.close()
    return out


def checker_rows(instances, labels, resps, refs, *, n_boot: int, seed: int, extras: bool) -> list[dict]:
    """The trained claim checker's rows: claim precision / recall / F1 of each response against the
    ground truth (RAGChecker's definitions, the checker as the entailment model), each against all
    three aspects; with ``extras`` also RAGChecker's own mapping (precision for correctness, recall
    for completeness, F1 for overall) as one diagnostic row, and faithfulness / hallucination
    listed as not applicable (they need retrieved contexts, which this set does not hold)."""
    n = len(instances)
    ck = ClaimChecker.load()
    scores = claim_prf_many(ck, resps, refs)
    note = (f"the trained claim checker ({ck.identity}): claims of one text entailed by the other, "
            f"threshold {SUPPORT_THRESHOLD}")
    out = []
    cols = {}
    for name in ("claim_precision", "claim_recall", "claim_f1"):
        vals = [np.nan if s[name] is None else s[name] for s in scores]
        cols[name] = _pairs(vals, n)
        row = metric_row(name, same_scores(*cols[name]), labels, n_boot=n_boot, seed=seed, kind="checker", note=note)
        row["registry_groups"] = M.groups_declaring(name)
        out.append(row)
    if extras:
        out.append(metric_row("claims[ragchecker mapping]", {"correctness": cols["claim_precision"],
                                                            "completeness": cols["claim_recall"],
                                                            "overall": cols["claim_f1"]},
                              labels, n_boot=n_boot, seed=seed, kind="diagnostic",
                              note="meta-eval only: the checker's claim precision, recall and F1 mapped to the three "
                                   "aspects as RAGChecker's own row maps them"))
        out.extend({"metric": m, "kind": "checker", "status": "not_applicable",
                    "registry_groups": M.groups_declaring(m), "aspects": {},
                    "why": "needs retrieved contexts: the meta-evaluation set holds none (see the hallucination "
                           "labels below for the checker against people)"}
                   for m in ("claim_faithfulness", "claim_hallucination"))
    return out


# ---------------------------------------------------------------- the judge

def preference_pairs(instances: Sequence[MetaInstance], n_pairs: int, seed: int = 0, *,
                     aspect: str = "overall", max_chars: int = PREFERENCE_CHARS) -> list[PreferencePair]:
    """Human-labelled preference pairs: instances whose two annotators agree on which response is
    better (same sign, not a tie) on ``aspect``; the better one placed as A in every other pair."""
    clear = [i for i in instances if np.sign(i.labels[aspect][0]) == np.sign(i.labels[aspect][1]) != 0]
    rng = random.Random(seed)
    rng.shuffle(clear)
    out = []
    for k, inst in enumerate(clear[:n_pairs]):
        better, worse = (inst.responses[1], inst.responses[0]) if inst.labels[aspect][0] > 0 else inst.responses
        label = "A" if k % 2 == 0 else "B"
        a, b = (better, worse) if label == "A" else (worse, better)
        out.append(PreferencePair(f"ragchecker-{inst.id}", inst.query, _cut(inst.gt_answer, max_chars),
                                  _cut(a, max_chars), _cut(b, max_chars), label,
                                  source=f"RAGChecker meta-evaluation instance {inst.id} ({inst.dataset}), {aspect}"))
    return out


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n].rstrip() + " …"


def _authored_calibration(settings, judge, progress):
    """The judge on the evalset's authored pairs, exactly as ``invoke eval`` calibrates it."""
    index = open_index(settings, progress=progress)
    try:
        failed = {f["file"] for f in index.ingest_failures}
        doc_texts = {d.source_key: index.kb.get_document_text(d.source_key, OWNER)
                     for d in index.evalset.documents if d.filename not in failed}
        evalset = index.evalset
    finally:
        close_index(index)
    pairs = evalset_calibration_pairs(evalset, seed=settings.seed, n_pairs=settings.eval.judge_calibration_pairs,
                                      doc_texts=doc_texts)
    store = call_cache(settings, "calibration") \
        if settings.eval.judge_calibration_reuse else None
    return calibrate_reusing(judge, pairs, store, reliable_threshold=settings.eval.judge_reliable_agreement,
                             progress=progress, stop_when_unreachable=settings.eval.judge_calibration_early_stop)


def not_applicable_rows(names: Sequence[str]) -> list[dict]:
    return [{"metric": m, "kind": "judged", "status": "not_applicable", "registry_groups": ["ragas_llm"],
             "aspects": {}, "why": "needs " + ", ".join(sorted(set(REQUIRES[m]) - CONTEXT_FREE)) +
             ": the meta-evaluation set holds no retrieved contexts"} for m in names]


def judged_part(settings, instances: Sequence[MetaInstance], labels: Mapping[str, np.ndarray], *, n_boot: int,
                progress: bool = True) -> dict:
    """The judge's two calibrations and the judged metrics it can score here, on ``eval.judge_sample``
    instances (``eval.judge_sample_unreliable`` when the authored pairs find it unreliable: then its
    rows are struck and only check the wiring)."""
    judge = judge_from_settings(settings)
    ev = settings.eval
    cal = _authored_calibration(settings, judge, progress)
    human = calibrate_preferences(judge, preference_pairs(instances, ev.judge_calibration_pairs, settings.seed),
                                  reliable_threshold=ev.judge_reliable_agreement, progress=progress)
    names = canonical_metric_names(ev.judge_metrics or None)
    usable = [m for m in names if set(REQUIRES[m]) <= CONTEXT_FREE]
    rows = not_applicable_rows([m for m in names if m not in usable])
    sample = ev.judge_sample if cal.reliable or ev.judge_sample_unreliable is None else ev.judge_sample_unreliable
    chosen = sample_indices(len(instances), sample, settings.seed)
    summary = None
    if usable:
        ragas_rows = [{"id": f"{instances[i].id}:model{j + 1}", "question": instances[i].query,
                       "answer": instances[i].responses[j], "reference": instances[i].gt_answer}
                      for i in chosen for j in (0, 1)]
        per_row, summary = score_llm(ragas_rows, judge, embedder_from_settings(settings, progress=False), usable,
                                     calibration=cal, progress=progress)
        sub = {a: labels[a][chosen] for a in ASPECTS}
        for m in usable:
            vals = [r["scores"][m] for r in per_row]
            row = metric_row(m, same_scores(vals[0::2], vals[1::2]), sub, n_boot=n_boot, seed=settings.seed,
                             kind="judged", note=f"RAGAS {m} judged by {judge.id} on {len(chosen)} instance(s)")
            row.update(registry_groups=["ragas_llm"], judge=judge.id, judge_reliable=cal.reliable,
                       struck=not cal.reliable, sample=len(chosen),
                       failed=sum(r["status"][m] != "ok" for r in per_row))
            if not cal.reliable:
                row["why"] = (f"{cal.why()} ({judge.id}): the figure on {len(chosen)} instance(s) checks the "
                              "wiring only")
            rows.append(row)
    return {"id": judge.id, "reliable": cal.reliable, "rule": "the authored pairs' 95% lower bound must clear "
            f"{ev.judge_reliable_agreement} (as invoke eval); the human preferences are reported beside",
            "calibration": {"authored": cal.as_dict(), "human_preferences": human.as_dict()},
            "sample": {"n": len(chosen), "instances": [instances[i].id for i in chosen]},
            "not_scored": [m for m in LLM_METRICS if m not in names],
            "summary": summary, "rows": rows}
