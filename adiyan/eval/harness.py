"""The evaluation harness shared by ``invoke eval`` and every experiment.

An evaluation is an evalset (documents and questions) + the retrieval pipeline + scorers. This
module owns the first two halves so nothing re-implements them per entry point:

- :func:`open_index`: the evalset's knowledge base, one index per (evalset version, embedder,
  chunking, parser and store knobs), built once under a lock and reused by later runs and sweep
  points (a process that finds it held by another works on a private replica);
- :func:`question_rows`: one row per question, retrieved through :class:`Retriever` as the
  question's requester: the top-k context, the ranking to depth 10, hit / reciprocal rank over
  gold sources, leaked private chunks, privacy probes (and whether the probe's owner retrieves
  the probed document, so a probe can fail), transformation failures, latency;
- :func:`answer_rows`: each row answered from its retrieved top k (``eval.generate``);
- :func:`retrieval_metrics`: the retrieval scorers (:mod:`adiyan.eval.scorers`) over those rows:
  hit rate and MRR at k, nDCG / Recall / MRR / MAP at 10 (ranx), per question kind, privacy, OCR.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ..cache import embedder_identity
from ..config import ConversationConfig, EvalConfig
from ..factory import open_embedder, open_kb
from ..generation import answer_question, approx_tokens
from ..kb import IngestError, IngestItem
from ..retrieval.pipeline import UnsupportedSetting, check_signals, refuse_inert, signals_of
from ..types import RetrievedChunk
from .. import metrics as M
from .beir_protocol import refuse_beir_protocol
from .evalset import Evalset, load_evalset
from .scorers import IR_DEPTH, RETRIEVAL_SCORERS, Rows, annotate_answer, per_question_ranking, score
from .in_document import retrieve_question

EVAL_REQUESTER = "eval-user"

_LOCK = threading.RLock()
_OPEN: dict[str, "EvalIndex"] = {}
_EVALSETS: dict[str, tuple[Evalset, str]] = {}
_REPLICAS: list[str] = []


@atexit.register
def _drop_replicas() -> None:
    for d in _REPLICAS:
        shutil.rmtree(d, ignore_errors=True)


@dataclass
class EvalIndex:
    """An evalset's built knowledge base; ``build`` is what build.json recorded."""

    kb: Any
    evalset: Evalset
    evalset_hash: str
    data_dir: Path
    build: dict
    opened_s: float
    reused: bool  # built before this call (by an earlier run or sweep point)

    @property
    def ingest_failures(self) -> list[dict]:
        return list(self.build.get("failed", []))


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)


def _sha(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def evalset_and_hash(evalset) -> tuple[Evalset, str]:
    """An evalset (path or object) and its content hash, memoised per process."""
    if isinstance(evalset, Evalset):
        key = f"{Path(evalset.root).resolve()}#{id(evalset)}"
        if key not in _EVALSETS:
            _EVALSETS[key] = (evalset, evalset.content_hash())
        return _EVALSETS[key]
    key = str(Path(evalset).resolve())
    if key not in _EVALSETS:
        es = load_evalset(evalset)
        _EVALSETS[key] = (es, es.content_hash())
    return _EVALSETS[key]


# The sections an index build reads (open_kb: store engine, embedder, parser, chunker), and their
# fields that are per-query engine knobs, not build knobs (one index serves every value of them).
BUILD_SECTIONS = ("ingest", "chunking", "embedder", "store")
QUERY_TIME = {"store.hnsw_ef": "per-query HNSW search breadth", "store.exact": "per-query brute-force search",
              "store.quantization_oversampling": "per-query candidates the quantized codes preselect"}


def index_key(settings, evalset_hash: str, embedder) -> dict:
    """What an index depends on: the evalset's content, the embedder's identity (runtime and
    weights, not only its name) and every field of the sections the build reads (BUILD_SECTIONS),
    except the per-query knobs (QUERY_TIME). ``embedder``: the embedder, or its identity string."""
    key: dict = {"evalset": evalset_hash,
                 "embedder_identity": embedder if isinstance(embedder, str) else embedder_identity(embedder)}
    for section in BUILD_SECTIONS:
        key[section] = {f: v for f, v in getattr(settings, section).model_dump(mode="json").items()
                        if f"{section}.{f}" not in QUERY_TIME}
    return key


def index_dir(settings, es: Evalset, es_hash: str, embedder) -> Path:
    """``<data_dir>/index/<evalset>-<hash>/<embedder id>/<sha of index_key>``."""
    key = index_key(settings, es_hash, embedder)
    name = embedder if isinstance(embedder, str) else embedder.id
    return (Path(settings.paths.data_dir) / "index" / f"{_slug(es.name)}-{es_hash[:8]}" / _slug(name)
            / _sha(key)[:12])


@contextlib.contextmanager
def _dir_lock(path: Path):
    """An exclusive advisory lock on ``<path>.lock``: one process builds a keyed directory, others wait."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(str(path) + ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def build_once(kdir: Path, build) -> float:
    """Build a keyed directory once, across processes: when ``kdir`` holds no finished build
    (``build.json``), empty it under its lock and call ``build(kdir)``, whose dict (with the build
    time added) becomes ``build.json``. The seconds spent building; 0.0 when a build was there."""
    if (kdir / "build.json").is_file():
        return 0.0
    with _dir_lock(kdir):
        if (kdir / "build.json").is_file():  # another process built it while this one waited
            return 0.0
        if kdir.exists():  # a build that died half way
            shutil.rmtree(kdir)
        kdir.mkdir(parents=True)
        t0 = time.perf_counter()
        record = build(kdir)
        seconds = time.perf_counter() - t0
        (kdir / "build.json").write_text(json.dumps({**record, "build_s": round(seconds, 3)}), encoding="utf-8")
        return seconds


def _replica(src: Path) -> Path:
    """A private copy of a built directory, for a process that finds the original held by another."""
    dst = Path(tempfile.mkdtemp(prefix=f"adiyan-replica-{os.getpid()}-")) / src.name
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.lock"))
    _REPLICAS.append(str(dst.parent))
    return dst


def drop_orphan_replicas() -> None:
    """Replicas and kernel socket folders of processes that are gone (killed before cleaning up)."""
    tmp = Path(tempfile.gettempdir())
    for d in [*tmp.glob("adiyan-replica-*-*"), *tmp.glob("adiyan-kernel-*-*")]:
        try:
            pid = int(d.name.split("-")[2])
            os.kill(pid, 0)
        except (ValueError, IndexError):
            continue
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
        except PermissionError:
            continue


def _held_by_another(exc: BaseException) -> bool:
    text = str(exc)
    return "WouldBlock" in text or "in use by another" in text or "already accessed by another instance" in text \
        or "held by another process" in text


# The same lock, replica and "held" test for the experiments' own keyed directories (HNSW vector
# sets, the memory evalset's store).
dir_lock, replica, held_by_another = _dir_lock, _replica, _held_by_another


def open_index(settings, evalset=None, *, embedder=None, progress: bool = False) -> EvalIndex:
    """The evalset's knowledge base (``eval.evalset`` by default), built once per :func:`index_key`.

    The build ingests every document through the knowledge base's batch path (parse cache,
    embedding cache); a document that fails is recorded in build.json (``failed``: file and
    reason) and the rest go on. Within a process the opened index is shared: it holds no
    retrieval settings, so every caller builds its own :class:`Retriever` over it.
    """
    t0 = time.perf_counter()
    es, es_hash = evalset_and_hash(evalset if evalset is not None else settings.eval.evalset)
    embedder = embedder if embedder is not None else open_embedder(settings, progress=progress)
    kdir = index_dir(settings, es, es_hash, embedder)
    with _LOCK:
        memo = _OPEN.get(str(kdir.resolve()))
        if memo is not None:
            return EvalIndex(memo.kb, es, es_hash, memo.data_dir, memo.build, time.perf_counter() - t0, True)
        reused = (kdir / "build.json").is_file()
        if not reused:
            with _dir_lock(kdir):
                if not (kdir / "build.json").is_file():
                    _build(settings, es, es_hash, embedder, kdir, progress=progress)
        build = json.loads((kdir / "build.json").read_text(encoding="utf-8"))
        data_dir = kdir
        try:
            kb = open_kb(settings, embedder=embedder, data_dir=data_dir)
        except Exception as exc:  # noqa: BLE001 - only "held by another process" is handled
            if not _held_by_another(exc):
                raise
            data_dir = _replica(kdir)  # a parallel worker holds the shard: work on a private copy
            kb = open_kb(settings, embedder=embedder, data_dir=data_dir)
        handle = EvalIndex(kb, es, es_hash, data_dir, build, time.perf_counter() - t0, reused)
        _OPEN[str(kdir.resolve())] = handle
        return handle


def close_index(handle: EvalIndex) -> None:
    """Close an index opened by :func:`open_index` (the next open reopens it)."""
    with _LOCK:
        for key, h in list(_OPEN.items()):
            if h.kb is handle.kb:
                del _OPEN[key]
        handle.kb.close()


def close_all() -> None:
    with _LOCK:
        for h in list(_OPEN.values()):
            with contextlib.suppress(Exception):
                h.kb.close()
        _OPEN.clear()


def _build(settings, es: Evalset, es_hash: str, embedder, kdir: Path, *, progress: bool) -> None:
    if kdir.exists():  # a build interrupted before build.json: start clean
        shutil.rmtree(kdir)
    kdir.mkdir(parents=True)
    hits0, misses0 = embedder.stats.hits, embedder.stats.misses
    cut0 = getattr(embedder.stats, "truncated", 0)
    t0 = time.perf_counter()
    kb = open_kb(settings, embedder=embedder, data_dir=kdir, progress=progress)
    try:
        items = [IngestItem(doc.path, doc.filename, doc.owner, doc.visibility) for doc in es.documents]
        results = kb.ingest_many(items, progress=progress)
        t_opt = time.perf_counter()
        kb.finish_ingest()
        optimize_s = time.perf_counter() - t_opt
        n_chunks = kb.count_chunks()
    finally:
        kb.close()
    ok = [r for r in results if not isinstance(r, IngestError)]
    failed = [{"file": it.filename, "reason": str(r)} for it, r in zip(items, results) if isinstance(r, IngestError)]
    failed += [{"file": m.source, "reason": str(m)} for r in ok for m in r.members if isinstance(m, IngestError)]
    chars = [r.chunk_stats.get("mean", 0) * r.chunk_stats.get("count", 0) for r in ok]
    build = {"key": index_key(settings, es_hash, embedder),
             "built_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
             "build_s": round(time.perf_counter() - t0, 3),
             "parse_s": round(sum(float(r.report.get("seconds", 0.0)) for r in ok if not r.report.get("cached")), 3),
             "chunk_s": round(sum(r.chunk_stats.get("chunk_s", 0.0) for r in ok), 3),
             "optimize_s": round(optimize_s, 3), "n_documents": len(ok), "n_chunks": n_chunks,
             "n_changed": sum(r.changed for r in ok),
             "chunk_chars_total": round(sum(chars)), "embed_cache_hits": embedder.stats.hits - hits0,
             "embed_cache_misses": embedder.stats.misses - misses0,
             # texts the embedder cut to its input window (llama.cpp's n_ctx): embedded from their head only
             "embed_truncated": getattr(embedder.stats, "truncated", 0) - cut0,
             "chunks_per_doc": {r.source: r.n_chunks for r in ok}, "failed": failed}
    tmp = kdir / "build.json.tmp"
    tmp.write_text(json.dumps(build, indent=2), encoding="utf-8")
    tmp.replace(kdir / "build.json")


# ---------------------------------------------------------------- per-question rows


def source_run(chunks) -> dict[str, float]:
    """Chunk ranking → source ranking: each source scored by its best chunk (1/rank keeps order)."""
    run: dict[str, float] = {}
    for rank, c in enumerate(chunks, 1):
        run.setdefault(c.source, 1.0 / rank)
    return run


def leaked(chunks: list[RetrievedChunk], requester: str | None) -> list[str]:
    """Chunks that are neither global nor the requester's own: must always be empty."""
    return [c.key for c in chunks
            if c.payload.get("visibility") != "global" and c.payload.get("owner_identity") != requester]


@dataclass
class QuestionRows(Rows):
    """What the scorers read (rows, source rankings, qrels), plus each question's retrieval result."""

    results: dict[str, Any] = field(default_factory=dict)  # question id -> RetrievalResult
    retrieve_s: float = 0.0


def refuse_conversation_settings(settings, entry_point: str, *, repeats: bool = False) -> None:
    """conversation.* shape a conversation turn's context; a question evalset has no turns, so a
    changed value would be reported as if it had run: every question-set entry point refuses it.
    So is a retrieval setting with nothing to act on under the chosen mode (``refuse_inert``, which
    the Retriever applies too): here it is refused before an index is built or a run directory written."""
    refuse_inert(settings.retrieval, entry_point)
    check_signals(settings.retrieval, signals_of(settings), entry_point)  # embedder.extra / title_field need hybrid
    refuse_beir_protocol(settings, entry_point)  # eval.beir_protocol=beir: invoke eval on a BEIR folder only
    for key in ("locomo_answer_per_category", "locomo_conversations"):  # read by the LoCoMo run only
        if getattr(settings.eval, key) != EvalConfig.model_fields[key].default:
            raise UnsupportedSetting(f"eval.{key}={getattr(settings.eval, key)}", f"{entry_point} on {settings.eval.evalset}",
                                     "it acts on a LoCoMo evalset only (eval.evalset = a LoCoMo .json file)")
    if not repeats:  # eval.repeats and its judge settings: invoke eval on a question set only
        refuse_repeats(settings, entry_point)
    default = ConversationConfig()
    for key, value in settings.conversation.model_dump().items():
        if value != getattr(default, key):
            raise UnsupportedSetting(f"conversation.{key}={value}", f"{entry_point} on {settings.eval.evalset}",
                                     "a question evalset has no conversation turns (use evalsets/conversations)")


def refuse_repeats(settings, entry_point: str) -> None:
    """eval.repeats / judge_repeats / judge_temperature (adiyan/eval/repeats.py) are honoured by
    ``invoke eval`` on a question set; every other entry point refuses a changed value by name."""
    for key in ("repeats", "judge_repeats", "judge_temperature"):
        if getattr(settings.eval, key) != EvalConfig.model_fields[key].default:
            raise UnsupportedSetting(f"eval.{key}={getattr(settings.eval, key)}", entry_point,
                                     "the variance split runs in invoke eval on a question set only")


def question_rows(index: EvalIndex, retriever, *, progress: bool = False, desc: str = "retrieve") -> QuestionRows:
    """Retrieve every question of the index's evalset through ``retriever`` as its requester."""
    es = index.evalset
    if retriever.depth(retriever.config.kb_top_k) < IR_DEPTH:
        raise ValueError(f"retrieval.rank_depth={retriever.config.rank_depth}: the evaluation measures rankings "
                         f"{IR_DEPTH} deep; set it to at least {IR_DEPTH}")
    probe_keys = {d.filename: d.source_key for d in es.documents}
    out = QuestionRows([])
    for q in tqdm(es.questions, desc=desc, unit="q", disable=not progress, leave=False):
        requester = q.requester or EVAL_REQUESTER
        t0 = time.perf_counter()
        res, scoped = retrieve_question(retriever, q, requester, es)  # a row with `within`: in that document only
        dt = time.perf_counter() - t0
        out.retrieve_s += dt
        top, ranked = res.chunks, res.ranked
        sources = [c.source for c in top]
        probe = q.extra.get("probe_private")
        probe_key = probe_keys.get(probe) if probe else None
        row = {
            "id": q.id, "question": q.question, "kind": q.kind, "requester": requester,
            "gold_answer": q.gold_answer, "gold_sources": q.gold_sources, "answer_keywords": q.answer_keywords,
            **({"gold_grades": q.gold_grades} if q.gold_grades else {}),
            "needs_ocr": bool(q.extra.get("needs_ocr")), "probe_private": probe_key,
            "retrieved": [c.as_dict() for c in top],
            "ranked_sources": [c.source for c in ranked],
            "queries": res.queries if res.queries != [q.question] else None,
            "transform_failed": res.transform_failed,
            "empty_reason": res.empty_reason if not top else None,
            "hit": scoped.hit if scoped else M.hit(sources, q.gold_sources) if q.answerable else None,
            "reciprocal_rank": scoped.reciprocal_rank if scoped else
            M.reciprocal_rank(sources, q.gold_sources) if q.answerable else None,
            "leaked_private": leaked(ranked, requester),
            "probe_leaked": (probe_key in {c.source for c in ranked}) if probe_key else None,
            "context_tokens": sum(approx_tokens(c.text) for c in top),
            "retrieve_s": round(dt, 6),
        }
        if scoped:
            row.update(scoped.row_fields())
        if probe_key:  # the probe must be able to fail: its owner finds the document with this question
            owner = probe_key.split("/", 1)[0]
            owner_res = retriever.retrieve(q.question, owner)
            row["probe_owner_retrieved"] = probe_key in {c.source for c in owner_res.ranked}
        if q.answerable and scoped:  # chunk-level: chunks of the document holding the answer keywords
            out.qrels[q.id], out.run[q.id] = scoped.qrels, scoped.run
        elif q.answerable:
            out.qrels[q.id] = q.relevance()  # graded: nDCG's gains; recall / hit count every grade > 0
            out.run[q.id] = source_run(ranked)  # the whole kept ranking: metrics cut it at their own depth
        out.results[q.id] = res
        out.rows.append(row)
    return out


def retrieval_metrics(qr: QuestionRows, k: int) -> dict[str, dict]:
    """The retrieval, by_kind, privacy and ocr groups of ``invoke eval``: the retrieval scorers
    (:data:`adiyan.eval.scorers.RETRIEVAL_SCORERS`) composed over the rows."""
    return score(RETRIEVAL_SCORERS, qr, k)


def per_question_ir(qr: QuestionRows) -> dict[str, dict[str, float]]:
    """{metric: {question id: value}} of the retrieval scorer's per-question ranking metrics
    (nDCG@10 and Recall@10, for significance tests)."""
    return per_question_ranking(qr)


def answer_rows(rows, results, settings, llm, cache, progress: bool = False) -> float:
    """Answer every row's question from its retrieved top k (``results``: question id ->
    RetrievalResult) with ``llm`` (None: no answers); the rows gain their answer fields
    (:func:`adiyan.eval.scorers.annotate_answer`). Seconds spent."""
    t0 = time.perf_counter()
    for r in tqdm(rows, desc="answer", unit="q", disable=not progress or llm is None):
        t1 = time.perf_counter()
        answer = answer_question(llm, r["question"], results[r["id"]].chunks, settings, cache=cache) if llm else None
        annotate_answer(r, answer.text if answer else None, answer.used if answer else None)
        if llm is not None:
            r["answer_s"] = round(time.perf_counter() - t1, 6)  # this run's wall time (a cache hit: a look-up)
    return time.perf_counter() - t0
