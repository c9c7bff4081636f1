"""The memory experiment (notebooks/memory.ipynb; sweep recency): recency half-life on the memory evalset.

The evalset is data (``evalsets/memory/``: memories with their ages, questions with the memory
expected first and, for corrections, the one superseded); :func:`load_memory_evalset` reads and
checks it. Its mem0 store is built once per (evalset content, embedder) through
:func:`adiyan.factory.open_memory` in a data directory of its own; each point opens it with its
own ``memory.*`` settings (nothing is changed on an open store). Memory search is not the
knowledge-base retrieval pipeline, so ``retrieval.*`` settings are refused by name.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import yaml

from ..cache import embedder_identity
from ..eval.harness import build_once, held_by_another, refuse_repeats, replica
from ..factory import open_embedder, open_memory
from ..memory import consolidation_identity, resolve_infer
from ..retrieval.pipeline import refuse_settings
from .common import PointResult, mean
from .scoring import merge, replay_stale_fact, score_memory

MEMORY_EVALSET = Path(__file__).resolve().parents[2] / "evalsets" / "memory"
ENTRY_POINT = "the memory experiment"

_LOCK = threading.RLock()
_OPEN: dict[str, tuple[tuple, object]] = {}  # store folder -> (the memory settings it was opened with, Memory)


def _sha(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


@dataclass
class MemoryEvalset:
    now: str
    memories: list[dict]  # {"id", "user", "text", "age_days", "created_at"}
    questions: list[dict]  # {"qid", "user", "question", "expected", "superseded", "kind"}
    version: int = 1
    root: Path | None = None

    def content_hash(self) -> str:
        return _sha({"now": self.now, "memories": self.memories, "questions": self.questions, "v": self.version})

    def to_frames(self):
        import pandas as pd  # heavy: only notebooks ask for tables

        return pd.DataFrame(self.memories), pd.DataFrame(self.questions)


def _jsonl(path: Path) -> list[dict]:
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{n}: {exc}") from None
    return rows


def load_memory_evalset(path: str | Path = MEMORY_EVALSET) -> MemoryEvalset:
    """The conversation-memory evalset at ``path`` (``evalsets/memory`` by default), checked:
    ids unique, every question's memories exist and belong to its user, ``created_at`` is
    ``now - age_days``, ``kind`` follows ``superseded`` and a correction is newer than what it corrects."""
    root = Path(path)
    manifest = yaml.safe_load((root / "manifest.yaml").read_text(encoding="utf-8")) or {}
    now = str(manifest["now"])
    now_dt = datetime.fromisoformat(now)
    mems = _jsonl(root / manifest.get("memories", "memories.jsonl"))
    qs = _jsonl(root / manifest.get("questions", "questions.jsonl"))
    by_id = {m["id"]: m for m in mems}
    if len(by_id) != len(mems):
        raise ValueError(f"{root}: memory ids are not unique")
    for m in mems:
        if datetime.fromisoformat(m["created_at"]) != now_dt - timedelta(days=m["age_days"]):
            raise ValueError(f"{root}: memory {m['id']}: created_at {m['created_at']} is not now - {m['age_days']} days")
    for q in qs:
        exp, sup = q["expected"], q["superseded"]
        if exp not in by_id or (sup and sup not in by_id):
            raise ValueError(f"{root}: question {q['qid']} names a memory that does not exist")
        if by_id[exp]["user"] != q["user"]:
            raise ValueError(f"{root}: question {q['qid']}: its expected memory belongs to another user")
        if q["kind"] != ("correction" if sup else "stable"):
            raise ValueError(f"{root}: question {q['qid']}: kind {q['kind']!r} does not match superseded={sup!r}")
        if sup and by_id[sup]["age_days"] <= by_id[exp]["age_days"]:
            raise ValueError(f"{root}: question {q['qid']}: the correction is not newer than what it corrects")
    return MemoryEvalset(now, mems, qs, int(manifest.get("version", 1)), root)


def memory_evalset() -> MemoryEvalset:
    """The authored conversation-memory evalset (``evalsets/memory``)."""
    return load_memory_evalset(MEMORY_EVALSET)


def _open_at(settings, data_dir: Path, embedder, infer: bool = False):
    # Always a local store in its own folder, never the configured server: the evalset's memories
    # must not land in a real memory collection. The call cache stays the configured one.
    local = settings.with_overrides({"paths.data_dir": str(data_dir), "store.engine": "edge"})
    return open_memory(local, embedder, None, infer=infer)


def memory_store(settings, es: MemoryEvalset, embedder, *, progress: bool = False):
    """A mem0 Memory holding the evalset, built once per (evalset, embedder, consolidation),
    opened with the point's ``memory.*`` settings (a point with other settings gets a freshly
    opened one). With consolidation on (``memory.infer``, :func:`adiyan.memory.resolve_infer`)
    mem0 stores the facts the LLM extracts from each memory, each carrying the memory's
    ``eval_id``; the build records what it cost (``build.json`` -> ``consolidation``)."""
    infer = resolve_infer(settings)
    key = {"evalset": es.content_hash(), "embedder": embedder_identity(embedder),
           "prefix": settings.store.collection_prefix,
           "layout": "open_memory"}
    if infer:  # a consolidated store depends on the LLM too; the verbatim store's key is unchanged
        key["consolidation"] = consolidation_identity(settings)
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", embedder.id)
    kdir = Path(settings.paths.data_dir) / "sweep" / "memory" / f"v{es.version}-{slug}-{_sha(key)[:12]}"
    wanted = json.dumps(settings.memory.model_dump(), sort_keys=True, default=str)  # every memory.* setting
    memo_key = str(kdir.resolve())
    with _LOCK:
        held = _OPEN.get(memo_key)
        if held is not None and held[0] == wanted:
            return held[1]
        if held is not None:  # opened with other memory settings: close it, open anew below
            del _OPEN[memo_key]
            held[1].close()
        def build(kdir: Path) -> dict:
            mem = _open_at(settings, kdir, embedder, infer)
            ids = {}
            try:
                for m in es.memories:
                    ids[m["id"]] = mem.add(m["text"], user_id=m["user"], created_at=m["created_at"],
                                           metadata={"eval_id": m["id"]}, infer=infer)
                stored = sum(mem.count(u) for u in sorted({m["user"] for m in es.memories}))
                stats = mem.consolidation_stats()
            finally:
                mem.close()
            return {"key": key, "memories": len(ids), "infer": infer, "stored": stored,
                    **({"consolidation": stats} if infer else {})}

        build_once(kdir, build)
        try:
            mem = _open_at(settings, kdir, embedder)
        except Exception as exc:  # noqa: BLE001 - only "held by another process" is handled
            if not held_by_another(exc):
                raise
            mem = _open_at(settings, replica(kdir), embedder)  # a parallel worker holds it
        mem.build_record = json.loads((kdir / "build.json").read_text(encoding="utf-8"))
        _OPEN[memo_key] = (wanted, mem)
        return mem


def evaluate_memory(settings, *, k: int | None = None, evalset: MemoryEvalset | None = None,
                    progress: bool = False, score: bool = False, regression_cases=None) -> PointResult:
    """Memory search on the memory evalset with ``memory.half_life_days`` / ``memory.recency``.

    Per question (asked at the evalset's "now"): rank of the expected memory among the top k;
    for corrections whether the superseded statement outranks the correction (stale). Metrics:
    hit@1, MRR, correction_hit@1, stable_hit@1, stale_rate, search latency. ``score`` adds RAGAS's
    ID-based context metrics, incident 3 replayed with the point's memory settings (its verdict, margin
    and break-even gap) and the regression cases (:func:`adiyan.experiments.scoring.score_memory`).
    """
    refuse_settings(settings, ENTRY_POINT, honoured=set())
    refuse_repeats(settings, ENTRY_POINT)  # eval.repeats: invoke eval on a question set only
    es = evalset or memory_evalset()
    emb = open_embedder(settings, progress=progress)
    mem = memory_store(settings, es, emb, progress=progress)
    mc = settings.memory
    k = k or mc.top_k
    rows, lat, ranked_by_q = [], [], {}
    for q in es.questions:
        t0 = time.perf_counter()
        hits = mem.search(q["question"], user_id=q["user"], k=k, now=es.now)
        lat.append(time.perf_counter() - t0)
        # source memories, best first: with consolidation several facts may come from one memory
        ranked = list(dict.fromkeys(h.metadata.get("eval_id") for h in hits))
        ranked_by_q[q["qid"]] = ranked
        rank = ranked.index(q["expected"]) + 1 if q["expected"] in ranked else None
        row = {"qid": q["qid"], "kind": q["kind"], "hit@1": float(rank == 1), "rr": 1.0 / rank if rank else 0.0,
               "top1": ranked[0] if ranked else None, "search_ms": lat[-1] * 1000,
               "top1_weight": hits[0].weight if hits else None}
        if q["superseded"]:
            srank = ranked.index(q["superseded"]) + 1 if q["superseded"] in ranked else None
            row["stale"] = float(srank is not None and (rank is None or srank < rank))
        rows.append(row)
    corr = [r for r in rows if r["kind"] == "correction"]
    stab = [r for r in rows if r["kind"] == "stable"]
    metrics = {"hit@1": mean(r["hit@1"] for r in rows), "mrr": mean(r["rr"] for r in rows),
               "correction_hit@1": mean(r["hit@1"] for r in corr), "stable_hit@1": mean(r["hit@1"] for r in stab),
               "stale_rate": mean(r["stale"] for r in corr), "search_ms": 1000 * float(np.mean(lat))}
    info = {"now": es.now, "questions": len(rows), "corrections": len(corr), "stable": len(stab),
            "memories": len(es.memories), "half_life_days": mc.half_life_days, "recency": mc.recency, "k": k,
            "memory_search": mc.search, "recency_scope": mc.recency_scope,
            "embedder": emb.id, "evalset": str(es.root), "evalset_version": es.version,
            "evalset_hash": es.content_hash(),
            **{k: mem.build_record.get(k) for k in ("infer", "stored", "consolidation") if k in mem.build_record}}
    res = PointResult(metrics, rows, info)
    if score:
        group, incident = replay_stale_fact(settings, emb)  # incident 3 at this point's half-life
        merge(res, score_memory(ranked_by_q, es.questions, "memory", emb.id, regression_cases=regression_cases,
                                incidents=group, incident=incident))
    return res
