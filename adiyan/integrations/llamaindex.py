"""Score any LlamaIndex retriever or query engine on one of our evalsets, with our metrics and report.

A user with a LlamaIndex app evaluates it here without rewriting it::

    from llama_index.core import Document, VectorStoreIndex
    from adiyan.chunking_llamaindex import wrap_embedder
    from adiyan.eval.evalset import load_evalset
    from adiyan.integrations.llamaindex import evaluate_llamaindex
    from adiyan.models import load_embedder

    es = load_evalset("evalsets/adiyan_basic")
    docs = [Document(text=d.path.read_text(), metadata={"file_name": d.filename}) for d in es.documents]
    index = VectorStoreIndex.from_documents(docs, embed_model=wrap_embedder(load_embedder("minilm")))
    run = evaluate_llamaindex(index.as_retriever(similarity_top_k=10), es, k=4)
    print(run.metrics["retrieval"]["hit_rate@4"], run.run_dir / "report.html")

**Where the expected sources come from.** Each retrieved node's source is read from its
metadata under ``source_key`` (default ``file_name``, what LlamaIndex's ``SimpleDirectoryReader``
sets; ``source_filename`` for nodes that carry our own payload). The value is matched to an
evalset document by its source key (``owner/filename``), else by its file name (a path is cut to
its last part); a name that two documents share is an error (pass the source key instead), a node
without the key is an error naming the node, and a file the evalset does not have is a miss
(``unknown:<value>``).

**What is scored.** The question rows of :func:`adiyan.eval.harness.question_rows` with the same
fields, so :func:`~adiyan.eval.harness.retrieval_metrics` gives hit rate and MRR at ``k`` (the
first ``k`` nodes), nDCG / Recall / MRR / MAP at 10 (the whole list the retriever returned: ask it
for 10), per kind, and privacy: LlamaIndex has no requester, so a node from a private document of
anyone but the question's requester is a leaked chunk, and a private-leak probe leaks when its
document is retrieved at all. A query engine's answers are scored like ``invoke eval``'s (keyword
recall, abstention, RAGAS's non-LLM metrics: the same scorers). The run is written through
:class:`~adiyan.eval.record.RunRecord`, as ours
(``reports/<run-id>/metrics.json``, ``questions.jsonl``, ``per_question.parquet``,
``report.html``) and listed in ``reports/index.html``.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.llms.types import CompletionResponse, LLMMetadata
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_completion_callback
from pydantic import PrivateAttr
from tqdm.auto import tqdm

from .. import metrics as M
from ..eval.evalset import Evalset, load_evalset
from ..eval.harness import EVAL_REQUESTER, QuestionRows, retrieval_metrics, source_run
from ..eval.record import RunRecord, new_run_id
from ..eval.scorers import ANSWER_SCORERS, score
from ..generation import approx_tokens

DEFAULT_SOURCE_KEY = "file_name"


class SourceMappingError(ValueError):
    """A node's metadata cannot be mapped to a document of the evalset."""


class AdiyanLLM(CustomLLM):
    """One of our LLMs (``chat(messages) -> Completion``) as a LlamaIndex ``LLM``, so a query engine
    can answer with the embedded model offline. Completion only (LlamaIndex wraps chat over it)."""

    _llm: object = PrivateAttr()
    max_tokens: int = 256

    def __init__(self, llm, max_tokens: int = 256, **kwargs):
        super().__init__(max_tokens=max_tokens, **kwargs)
        self._llm = llm

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(context_window=int(getattr(self._llm, "context_size", 2048)), num_output=self.max_tokens,
                           model_name=str(getattr(self._llm, "id", "adiyan")), is_chat_model=False)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs) -> CompletionResponse:
        out = self._llm.chat([{"role": "user", "content": prompt}], max_tokens=self.max_tokens, temperature=0.0)
        return CompletionResponse(text=out.text)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs):
        yield self.complete(prompt, formatted=formatted, **kwargs)  # one chunk: the models here do not stream


@dataclass
class LlamaIndexRun:
    run_dir: Path | None
    metrics: dict
    rows: list[dict]


class _Sources:
    """Node metadata value -> evalset source key."""

    def __init__(self, es: Evalset, key: str):
        self.key = key
        self.keys = {d.source_key for d in es.documents}
        self.by_name: dict[str, list[str]] = {}
        for d in es.documents:
            self.by_name.setdefault(d.filename, []).append(d.source_key)

    def __call__(self, node) -> str:
        meta = node.node.metadata or {}
        if self.key not in meta:
            raise SourceMappingError(f"node {node.node.node_id}: no metadata key {self.key!r} (has "
                                     f"{sorted(meta)}); pass source_key= the key that names the document")
        value = str(meta[self.key])
        if value in self.keys:
            return value
        found = self.by_name.get(value.replace("\\", "/").rsplit("/", 1)[-1], [])
        if len(found) > 1:
            raise SourceMappingError(f"node {node.node.node_id}: {self.key}={value!r} names {found}; "
                                     "store the source key (owner/filename) in the metadata instead")
        return found[0] if found else f"unknown:{value}"


def _ask(target, question: str):
    """(nodes, answer or None) from a retriever or a query engine."""
    if isinstance(target, BaseRetriever):
        return list(target.retrieve(question)), None
    if isinstance(target, BaseQueryEngine):
        resp = target.query(question)
        return list(getattr(resp, "source_nodes", []) or []), (None if resp.response is None else str(resp.response))
    raise TypeError(f"evaluate_llamaindex: {type(target).__name__} is neither a LlamaIndex BaseRetriever nor a "
                    "BaseQueryEngine")


def llamaindex_rows(target, es: Evalset, *, k: int = 4, source_key: str = DEFAULT_SOURCE_KEY,
                    question_ids: Sequence[str] | None = None, progress: bool = False) -> QuestionRows:
    """One harness-shaped row per question, from the target's nodes (and answer, for a query engine)."""
    source_of = _Sources(es, source_key)
    private = {d.source_key: d.owner for d in es.documents if d.visibility != "global"}
    probe_keys = {d.filename: d.source_key for d in es.documents}
    wanted = set(question_ids) if question_ids is not None else None
    out = QuestionRows([])
    for q in tqdm([q for q in es.questions if wanted is None or q.id in wanted], desc="llamaindex", unit="q",
                  disable=not progress, leave=False):
        requester = q.requester or EVAL_REQUESTER
        t0 = time.perf_counter()
        nodes, answer = _ask(target, q.question)
        dt = time.perf_counter() - t0
        out.retrieve_s += dt
        ranked = [{"source": source_of(n), "chunk_index": i, "score": None if n.score is None else round(float(n.score), 6),
                   "text": n.node.get_content(), "node_id": n.node.node_id} for i, n in enumerate(nodes)]
        top = ranked[:k]
        sources = [c["source"] for c in top]
        probe = q.extra.get("probe_private")
        probe_key = probe_keys.get(probe) if probe else None
        ranked_sources = [c["source"] for c in ranked]
        row = {"id": q.id, "question": q.question, "kind": q.kind, "requester": requester,
               "gold_answer": q.gold_answer, "gold_sources": q.gold_sources, "answer_keywords": q.answer_keywords,
               "needs_ocr": bool(q.extra.get("needs_ocr")), "probe_private": probe_key, "retrieved": top,
               "ranked_sources": ranked_sources, "queries": None, "transform_failed": False,
               "empty_reason": None if top else "no nodes",
               "hit": M.hit(sources, q.gold_sources) if q.answerable else None,
               "reciprocal_rank": M.reciprocal_rank(sources, q.gold_sources) if q.answerable else None,
               "leaked_private": [c["node_id"] for c in ranked
                                  if c["source"] in private and private[c["source"]] != requester],
               "probe_leaked": (probe_key in ranked_sources) if probe_key else None,
               "context_tokens": sum(approx_tokens(c["text"]) for c in top), "retrieve_s": round(dt, 6)}
        if probe_key:  # no identities in LlamaIndex: the owner gets what everybody gets
            row["probe_owner_retrieved"] = row["probe_leaked"]
        if answer is not None:
            row.update({"answer": answer, "keyword_hit": M.keyword_hit(answer, q.answer_keywords) if q.answerable
                        else None, "abstained": M.abstained(answer)})
        if q.answerable:
            out.qrels[q.id] = q.relevance()
            out.run[q.id] = source_run([_Src(c["source"]) for c in ranked])
        out.rows.append(row)
    return out


@dataclass
class _Src:
    source: str


def evaluate_llamaindex(target, evalset, *, k: int = 4, source_key: str = DEFAULT_SOURCE_KEY,
                        question_ids: Sequence[str] | None = None, reports_dir: str | Path | None = "reports",
                        run_id: str | None = None, name: str | None = None, progress: bool = True) -> LlamaIndexRun:
    """Score ``target`` (a LlamaIndex ``BaseRetriever`` or ``BaseQueryEngine``) on ``evalset`` (a
    path or an :class:`Evalset`); writes ``reports_dir/<run-id>/`` unless ``reports_dir`` is None."""
    es = evalset if isinstance(evalset, Evalset) else load_evalset(evalset)
    t0 = time.perf_counter()
    qr = llamaindex_rows(target, es, k=k, source_key=source_key, question_ids=question_ids, progress=progress)
    groups = retrieval_metrics(qr, k)
    if any(r.get("answer") is not None for r in qr.rows):  # a query engine answered: answer and string scorers
        groups.update(score(ANSWER_SCORERS, qr, k))
    described = {"target": type(target).__name__, "name": name, "k": k, "source_key": source_key,
                 "question_ids": list(question_ids) if question_ids is not None else None}
    config_hash = hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()
    if reports_dir is None:
        return LlamaIndexRun(None, groups, qr.rows)
    record = RunRecord.start(reports_dir, run_id or new_run_id(suffix="llamaindex"))  # no settings: no config.yaml
    es_hash = es.content_hash()
    out = {**record.envelope(config_hash=config_hash, config={"llamaindex": described}),
           "models": {"llamaindex": {"id": name or type(target).__name__, "source_key": source_key}},
           "dataset": {"name": es.name, "path": str(es.root), "hash": es_hash, "n_documents": len(es.documents),
                       "n_questions": len(qr.rows), "n_answerable": len(qr.qrels)},
           "metrics": groups, "regression": [], "warnings": [],
           "timings": {"total_s": round(time.perf_counter() - t0, 3), "retrieve_s": round(qr.retrieve_s, 3)}}
    return LlamaIndexRun(record.finish(out, qr.rows, parquet=True), groups, qr.rows)
