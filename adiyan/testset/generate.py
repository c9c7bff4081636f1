"""``adiyan testset generate``: an evalset generated from a corpus, offline and seeded.

Kinds (each question row's ``kind``; the evalset format of evalsets/README.md):

``lookup``       a sentence of a chunk with a date / year / code / quantity / number / named entity;
                 the question is the sentence with that span replaced by a wh-phrase; the gold
                 answer is the sentence, the answer keyword the span.
``paraphrase``   the same kind of fact, reworded by :func:`rules.paraphrase_question` (wh-phrase
                 first, function words dropped, synonyms) so the words overlap less with the chunk.
``multi_hop``    two chunks of different documents sharing an entity: the entity is described by
                 the second chunk's sentence and the question asks for a span of the first; both
                 documents are gold.
``in_document``  a lookup question scoped to one document by its title (``within``: its file name,
                 for ``search_within_document``).
``unanswerable`` a lookup question whose entity is replaced by a name that occurs nowhere in the
                 corpus: no gold source, no answer keyword.
``private``      when documents are private: a lookup question on a private document asked by its
                 owner (the gold is visible only to them), paired with the same question asked by
                 another requester, ``probe_private`` naming the document: the leak check.

With a generative LLM configured (``llm.url``, or ``llm.name`` ollama / openai-compatible / smollm2),
three more kinds (:mod:`adiyan.testset.llm`), default then: ``llm_rewrite`` (an offline lookup
question reworded by the LLM, same gold), ``ragas_single_hop`` and ``ragas_multi_hop`` (ragas 0.4's
knowledge graph and query synthesizers over the same chunks; gold = the documents of the reference
contexts, gold answer = ragas' reference). Every LLM call is a structured call whose failures the
report counts (``llm.calls``) and whose failed candidates are rejections like any other.

Filters, each counted per kind in the report: the answer span must occur in the gold chunk's stored
text; the question must not contain its answer verbatim; exact and near duplicates (cosine of the
configured embedder's query embeddings >= ``dup_cosine``, within a kind) are dropped; a question whose
gold document is in neither the dense nor the BM25 top 10 of the requester's visible chunks is kept
but flagged (``unreachable_gold``) and counted.
"""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import yaml

from ..eval.evalset import EvalsetError
from . import rules as R
from .corpus import Corpus, CorpusChunk, CorpusDocument, load_corpus
from . import llm as L
from .reach import Reach
from ..factory import open_embedder
from ..models.structured import structured_mode
from .report import markdown_report

OFFLINE_KINDS = ("lookup", "paraphrase", "multi_hop", "in_document", "unanswerable", "private")
ALL_KINDS = OFFLINE_KINDS + L.LLM_KINDS
WEIGHTS = {"lookup": 3, "paraphrase": 3, "multi_hop": 1, "in_document": 1, "unanswerable": 1, "private": 1,
           "llm_rewrite": 3, "ragas_single_hop": 2, "ragas_multi_hop": 1}
RAGAS_MAX_CHUNKS = 4  # graph nodes per ragas sample wanted (a seeded sample of the chunks): bounds the LLM calls
EVAL_REQUESTER = "eval-user"  # adiyan.eval.harness.EVAL_REQUESTER: who asks when a row names nobody
GENERATOR = "adiyan.testset offline v1"
EXAMPLES = 10


@dataclass
class Candidate:
    kind: str
    question: str
    gold_answer: str
    answer: str  # the span ("" when unanswerable)
    span_type: str
    gold: list[tuple[CorpusDocument, CorpusChunk]]
    requester: str | None = None
    extra: dict = field(default_factory=dict)
    pair: "Candidate | None" = None  # a private question's probe: kept or dropped with it


@dataclass
class KindReport:
    made: int = 0
    kept: int = 0
    rejected: dict = field(default_factory=dict)
    unreachable: int = 0
    overlap: list = field(default_factory=list)
    examples: list = field(default_factory=list)
    rejections: list = field(default_factory=list)

    def reject(self, reason: str, cand: Candidate) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1
        self.rejections.append({"reason": reason, "question": cand.question, "answer": cand.answer,
                                "gold": [f"{d.file}#{c.index}" for d, c in cand.gold]})


def quotas(n: int, kinds: list[str]) -> dict[str, int]:
    """n split over kinds by :data:`WEIGHTS` (largest remainders; ties in kind order)."""
    w = {k: WEIGHTS[k] for k in kinds}
    total = sum(w.values())
    raw = {k: n * w[k] / total for k in kinds}
    q = {k: int(raw[k]) for k in kinds}
    for k in sorted(kinds, key=lambda k: (-(raw[k] - q[k]), kinds.index(k)))[: n - sum(q.values())]:
        q[k] += 1
    return q


def _facts(doc: CorpusDocument, chunk: CorpusChunk, rng: random.Random):
    """(sentence, span, type, start) facts of a chunk: one span per sentence, chosen by ``rng``."""
    out = []
    for s in R.sentences(chunk.body):
        sp = R.spans(s)
        if sp:
            span, kind, start = sp[rng.randrange(len(sp))]
            out.append((s, span, kind, start, sp))
    return out


def _round_robin(docs: list[CorpusDocument], rng: random.Random):
    """Every (doc, chunk, fact) of ``docs``, one fact per chunk per pass, chunks in a seeded order."""
    per_chunk = []
    for d in docs:
        for c in d.chunks:
            facts = _facts(d, c, rng)
            rng.shuffle(facts)
            if facts:
                per_chunk.append((d, c, facts))
    rng.shuffle(per_chunk)
    depth = 0
    while True:
        any_ = False
        for d, c, facts in per_chunk:
            if depth < len(facts):
                any_ = True
                yield d, c, facts[depth]
        if not any_:
            return
        depth += 1


def _lookup(d, c, fact, kind="lookup") -> Candidate:
    s, span, t, start, _ = fact
    return Candidate(kind, R.lookup_question(s, span, t, start), s, span, t, [(d, c)])


def candidates(corpus: Corpus, kind: str, rng: random.Random, known: str, owners: list[str], llm_ctx=None):
    """Candidates of one kind, in the order the generator considers them (seeded). A candidate whose
    ``extra["_reject"]`` is set failed before the filters (an LLM call): counted as that rejection."""
    public = [d for d in corpus.documents if d.visibility == "global"]
    if kind == "llm_rewrite":
        for d, c, fact in _round_robin(public, rng):
            base = _lookup(d, c, fact, kind)
            q = L.rewrite(llm_ctx.caller, base.question)
            cand = Candidate(kind, q or base.question, base.gold_answer, base.answer, base.span_type, base.gold,
                             extra={"rewritten_from": base.question})
            if q is None:
                cand.extra["_reject"] = "llm_call_failed"
            elif R.tokens(q) == R.tokens(base.question):
                cand.extra["_reject"] = "llm_unchanged"
            yield cand
    elif kind in L.RAGAS_KINDS:
        res = llm_ctx.ragas
        for f in res.failures[kind]:
            yield Candidate(kind, f"[{f['step']}] {f['error']}", "", "", "free", [], extra={"_reject": "ragas_step_failed"})
        by_text = {c.text: (d, c) for d, c in corpus.chunks() if d.visibility == "global"}
        for question, reference, contexts, synthesizer in res.samples[kind]:
            gold = [by_text.get(t) for t in contexts]
            cand = Candidate(kind, " ".join(question.split()), reference, "", "free", [g for g in gold if g],
                             extra={"synthesizer": synthesizer})
            if not contexts or any(g is None for g in gold):
                cand.extra["_reject"] = "context_not_a_chunk"
            yield cand
    elif kind in ("lookup", "in_document"):
        for d, c, fact in _round_robin(public, rng):
            cand = _lookup(d, c, fact, kind)
            if kind == "in_document":
                cand.question = f"In the document “{d.title}”: {cand.question}"
                cand.extra["within"] = d.file
            yield cand
    elif kind == "paraphrase":
        for d, c, (s, span, t, start, _) in _round_robin(public, rng):
            yield Candidate(kind, R.paraphrase_question(s, span, t, start, rng), s, span, t, [(d, c)])
    elif kind == "unanswerable":
        for d, c, (s, span, t, start, sp) in _round_robin(public, rng):
            ents = [x for x in sp if x[0] != span and (x[1] == "code" or (x[1] == "entity" and " " in x[0]))]
            if not ents:
                continue
            ent = ents[rng.randrange(len(ents))]
            fake = R.fake_name(rng, known) if ent[1] == "entity" else \
                "-".join(p[: max(1, len(p))] for p in (R.fake_name(rng, known).upper().split()))
            q = R.lookup_question(s, span, t, start).replace(ent[0], fake)
            if fake not in q:
                continue
            yield Candidate(kind, q, f"The documents do not mention {fake}.", "", t, [],
                            extra={"absent": fake, "replaces": ent[0]})
    elif kind == "multi_hop":
        ents: dict[str, list] = {}
        for d in public:
            for c in d.chunks:
                for s in R.sentences(c.body):
                    sp = R.spans(s)
                    for e, t, st in sp:
                        if t in ("entity", "code") and len(e) >= 4:
                            ents.setdefault(e, []).append((d, c, s, sp))
        names = sorted(e for e, occ in ents.items() if len({o[0].file for o in occ}) >= 2 and len(occ) <= 40)
        rng.shuffle(names)
        for e in names:
            occ = ents[e]
            a = [o for o in occ if any(x[0] != e and x[1] != "entity" for x in o[3])] or \
                [o for o in occ if any(x[0] != e for x in o[3])]
            if not a:
                continue
            d1, c1, s1, sp1 = a[rng.randrange(len(a))]
            b = [o for o in occ if o[0].file != d1.file]
            d2, c2, s2, _ = b[rng.randrange(len(b))]
            answers = [x for x in sp1 if x[0] != e and x[1] != "entity"] or [x for x in sp1 if x[0] != e]
            span, t, start = answers[rng.randrange(len(answers))]
            q1 = R.lookup_question(s1, span, t, start)
            bridge = R.pronoun(s2, e).rstrip(".!?")
            q = f"About the one where “{R._clause(bridge, 0, 1, 20)[0]}”: {R.pronoun(q1, e)}"
            yield Candidate(kind, q, f"{s1} ({e}: {s2})", span, t, [(d1, c1), (d2, c2)],
                            extra={"bridge_entity": e})
    elif kind == "private":
        private = [d for d in corpus.documents if d.visibility == "private"]
        for d, c, fact in _round_robin(private, rng):
            cand = _lookup(d, c, fact, "private")
            cand.requester = d.owner
            others = [o for o in owners if o != d.owner]
            asker = others[rng.randrange(len(others))] if others and rng.random() < 0.5 else None
            cand.pair = Candidate("unanswerable", cand.question,
                                  "The documents available to you do not say.", "", fact[2], [], requester=asker,
                                  extra={"probe_private": d.file, "generated_kind": "private_probe"})
            yield cand
    else:
        raise EvalsetError(f"--kinds: unknown kind {kind!r}; choose from {', '.join(ALL_KINDS)}")


def _check(cand: Candidate, seen: set[str]) -> str | None:
    """The first failed filter's name, or None."""
    if cand.extra.get("_reject"):
        return cand.extra.pop("_reject")
    if not cand.answer and cand.gold and cand.gold_answer and cand.gold_answer.lower() in cand.question.lower():
        return "answer_in_question"  # a free-text reference (ragas) copied into its question
    if cand.answer:
        for _d, c in cand.gold[:1]:  # the answer's chunk is the first gold chunk
            if cand.answer not in c.text:
                return "answer_not_in_gold_chunk"
        if cand.answer.lower() in cand.question.lower():
            return "answer_in_question"
    if len(R.tokens(cand.question)) < 4:
        return "too_short"
    key = " ".join(R.tokens(cand.question))
    if key in seen:
        return "duplicate"
    return None


@dataclass
class Generated:
    questions: list[dict]
    report: dict
    corpus: Corpus


def generate(settings, documents, *, n: int = 100, kinds: list[str] | None = None, seed: int = 0,
             embedder=None, dup_cosine: float = 0.95, reach_check: bool = True, progress: bool = False) -> Generated:
    """Generate up to ``n`` questions over ``documents`` (from :func:`corpus.list_documents`)."""
    embedder = embedder if embedder is not None else open_embedder(settings, progress=progress)
    corpus = load_corpus(settings, documents, embedder=embedder)
    if not corpus.documents:
        raise EvalsetError("no document could be parsed: " + "; ".join(f"{s['file']}: {s['reason']}"
                                                                       for s in corpus.skipped[:5]))
    has_private = any(d.visibility == "private" for d in corpus.documents)
    kinds = list(kinds or [k for k in OFFLINE_KINDS if k != "private" or has_private]
                 + (list(L.LLM_KINDS) if L.generative(settings) else []))
    bad = [k for k in kinds if k not in ALL_KINDS]
    if bad:
        raise EvalsetError(f"--kinds: unknown kind(s) {bad}; choose from {', '.join(ALL_KINDS)}")
    if "private" in kinds and not has_private:
        raise EvalsetError("--kinds private: no document is private (give --private GLOB=OWNER or an evalset "
                           "whose manifest has private documents)")
    known = " ".join(d.text for d in corpus.documents).lower()
    owners = sorted({d.owner for d in corpus.documents if d.visibility == "private"})
    reach = Reach(corpus, embedder) if reach_check else None
    quota = quotas(n, kinds)
    llm_ctx = _llm_context(settings, corpus, embedder, kinds, quota, seed, progress) \
        if any(k in L.LLM_KINDS for k in kinds) else None
    reports = {k: KindReport() for k in kinds}
    kept_all: list[Candidate] = []
    for kind in kinds:
        rep, rng = reports[kind], random.Random(f"{seed}:{kind}")
        want = quota[kind]
        if want <= 0:
            continue
        passed, seen = [], set()
        enough = L.ragas_margin(want) if kind == "llm_rewrite" else 3 * want  # an LLM call per candidate
        for cand in candidates(corpus, kind, rng, known, owners, llm_ctx):
            if len(passed) >= enough:
                break
            rep.made += 1
            why = _check(cand, seen)
            if why:
                rep.reject(why, cand)
                continue
            seen.add(" ".join(R.tokens(cand.question)))
            passed.append(cand)
        vecs = np.asarray(embedder.embed([c.question for c in passed], "query"), dtype=np.float32) if passed else None
        kept_vecs: list[np.ndarray] = []
        for i, cand in enumerate(passed):
            if rep.kept >= want:
                rep.made -= 1  # never considered: the quota was met first
                continue
            v = vecs[i] / (np.linalg.norm(vecs[i]) or 1.0)
            if kept_vecs and float(np.max(np.stack(kept_vecs) @ v)) >= dup_cosine:
                rep.reject("near_duplicate", cand)
                continue
            kept_vecs.append(v)
            rep.kept += 1
            kept_all.append(cand)
            if cand.gold:
                rep.overlap.append(R.overlap(cand.question, cand.gold[0][1].text))
            if reach is not None and cand.gold:
                cand.extra["unreachable_gold"] = not reach.reachable(cand.question, cand.requester,
                                                                      {d.file for d, _ in cand.gold})
                rep.unreachable += int(cand.extra["unreachable_gold"])
            if len(rep.examples) < EXAMPLES:
                rep.examples.append({"question": cand.question, "answer": cand.answer, "requester": cand.requester,
                                     "gold": [f"{d.file}#{c.index}" + (f" p{c.page}" if c.page else "")
                                              for d, c in cand.gold],
                                     "unreachable_gold": cand.extra.get("unreachable_gold")})
    rows = _rows(kept_all, seed)
    report = _report(corpus, reports, quota, kinds, seed, n, dup_cosine, reach_check, rows)
    report["llm"] = _llm_report(llm_ctx)
    return Generated(rows, report, corpus)


@dataclass
class _LLMContext:
    caller: "L.StructuredCaller"
    ragas: "L.RagasSamples | None" = None


def _llm_context(settings, corpus, embedder, kinds, quota, seed, progress) -> _LLMContext:
    """The structured caller and, when a ragas kind is asked for, one ragas pass for both ragas kinds."""
    ctx = _LLMContext(L.caller_for(settings))
    want = {k: L.ragas_margin(quota[k]) for k in L.RAGAS_KINDS if k in kinds and quota[k] > 0}
    if want:
        public = [(d, c) for d, c in corpus.chunks() if d.visibility == "global"]
        ctx.ragas = L.ragas_samples(ctx.caller, embedder, public, want, seed=seed,
                                    max_chunks=max(8, RAGAS_MAX_CHUNKS * sum(want.values())), progress=progress)
    return ctx


def _llm_report(ctx: "_LLMContext | None") -> dict | None:
    if ctx is None:
        return None
    return {"identity": ctx.caller.identity, "structured": structured_mode(ctx.caller.llm),
            "calls": ctx.caller.report(), "ragas": ctx.ragas.report if ctx.ragas is not None else None}


def _gold_chunk(d: CorpusDocument, c: CorpusChunk) -> dict:
    return {"file": d.file, "chunk": c.index, "page": c.page, "start": c.start, "end": c.end}


def _rows(kept: list[Candidate], seed: int) -> list[dict]:
    rows, n = [], 0
    for cand in kept:
        for c in [cand] + ([cand.pair] if cand.pair is not None else []):
            n += 1
            row = {"id": f"g{seed}-{n:04d}", "question": c.question, "gold_answer": c.gold_answer,
                   "gold_sources": sorted({d.file for d, _ in c.gold}), "answer_keywords": [c.answer] if c.answer else [],
                   "kind": c.kind}
            if c.requester:
                row["requester"] = c.requester
            row["gold_chunks"] = [_gold_chunk(d, ch) for d, ch in c.gold]
            row["answer_type"] = c.span_type
            row.update(c.extra)
            rows.append(row)
    return rows


def _report(corpus, reports, quota, kinds, seed, n, dup_cosine, reach_check, rows) -> dict:
    per_kind = {}
    for k in kinds:
        r = reports[k]
        per_kind[k] = {"quota": quota[k], "made": r.made, "kept": r.kept, "rejected": dict(sorted(r.rejected.items())),
                       "unreachable_gold_flagged": r.unreachable,
                       "mean_word_overlap": round(float(np.mean(r.overlap)), 4) if r.overlap else None,
                       "examples": r.examples, "rejections": r.rejections}
    return {"generator": GENERATOR, "seed": seed, "n_requested": n, "n_questions": len(rows), "kinds": kinds,
            "filters": {"answer_not_in_gold_chunk": "the answer span must occur in the gold chunk's stored text",
                        "answer_in_question": "the question must not contain its answer verbatim",
                        "too_short": "fewer than 4 words", "duplicate": "the same words as a kept question",
                        "near_duplicate": f"query-embedding cosine >= {dup_cosine} with a kept question of its kind",
                        "unreachable_gold": ("flagged, not dropped: the gold document is in neither the dense nor "
                                             "the BM25 top 10 of the requester's visible chunks")
                        if reach_check else "not checked (--no-reach-check)",
                        **({"llm_call_failed": "the LLM's structured reply was not a valid object (llm.calls counts why)",
                            "llm_unchanged": "the LLM returned the offline question's words unchanged",
                            "ragas_step_failed": "a ragas scenario or sample step failed (its error is the 'question')",
                            "context_not_a_chunk": "a ragas reference context is not the text of a stored chunk"}
                           if any(k in L.LLM_KINDS for k in kinds) else {})},
            "documents": len(corpus.documents), "chunks": sum(len(d.chunks) for d in corpus.documents),
            "skipped_documents": corpus.skipped, "chunking": corpus.chunking, "per_kind": per_kind,
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def write_evalset(gen: Generated, out: str | Path, *, name: str | None = None, link: bool = False,
                  force: bool = False) -> Path:
    """Write ``gen`` as an evalset folder: docs/, manifest.yaml, questions.jsonl, report.json, report.md.

    Documents are copied into docs/ (``link``: symlinked, for a set over a large read-only corpus).
    An existing folder is replaced only when it is a generated set (it has a report.json of this
    generator) or with ``force``.
    """
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        rep = out / "report.json"
        ours = rep.is_file() and json.loads(rep.read_text(encoding="utf-8")).get("generator", "").startswith("adiyan.testset")
        if not (ours or force):
            raise EvalsetError(f"{out}: exists and is not a generated evalset; choose another --out or pass --force")
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "docs").mkdir(parents=True)
    used = {d.file for d in gen.corpus.documents}
    docs = []
    for d in gen.corpus.documents:
        dst = tmp / "docs" / d.file
        if link:
            dst.symlink_to(d.path.resolve())
        else:
            shutil.copyfile(d.path, dst)
        docs.append({"file": f"docs/{d.file}", "owner": d.owner, "visibility": d.visibility})
    assert len(used) == len(docs)
    name = name or out.name
    manifest = {"name": name, "description": f"Generated by {GENERATOR} (seed {gen.report['seed']}) from "
                f"{len(docs)} documents: {len(gen.questions)} questions; see report.md", "version": 1,
                "generated": {k: gen.report[k] for k in ("generator", "seed", "n_requested", "kinds", "chunking")},
                "documents": docs, "questions": "questions.jsonl"}
    (tmp / "manifest.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False, allow_unicode=True), encoding="utf-8")
    with open(tmp / "questions.jsonl", "w", encoding="utf-8") as f:
        for row in gen.questions:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    (tmp / "report.json").write_text(json.dumps(gen.report, indent=2, ensure_ascii=False), encoding="utf-8")

    (tmp / "report.md").write_text(markdown_report(gen.report, name), encoding="utf-8")
    shutil.rmtree(out, ignore_errors=True)
    tmp.replace(out)
    return out
