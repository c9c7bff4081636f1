"""The memory-safety dataset kind (issue 43.2): a folder whose ``manifest.yaml`` says ``kind: memory-safety``
and names a LoCoMo file (``source``), the cross-user questions per user, what is deleted and the corrections
injected (evalsets/memory_safety/manifest.yaml, docs/memory_safety.md). Checked here, with a clear error
naming the manifest and the field."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from .evalset import EvalsetError
from .locomo.data import LocomoSet

KIND = "memory-safety"


@dataclass(frozen=True)
class Correction:
    id: str
    stale_text: str
    correction_text: str
    question: str


@dataclass(frozen=True)
class SafetySet:
    root: Path
    name: str
    source: Path
    questions_per_user: int | None
    delete_memories_per_user: int
    delete_memories_of: tuple[str, ...]
    delete_conversation_of: str
    delete_user: str
    corrections: tuple[Correction, ...]
    stale_days: float
    correction_days: float


def is_memory_safety_set(root) -> bool:
    mpath = Path(root) / "manifest.yaml"
    if not mpath.is_file():
        return False
    try:
        return (yaml.safe_load(mpath.read_text(encoding="utf-8")) or {}).get("kind") == KIND
    except yaml.YAMLError:
        return False


def load_safety_set(root, datasets_dir) -> SafetySet:
    """The manifest, checked: a clear error naming the file and the field for anything it cannot use."""
    root = Path(root)
    mpath = root / "manifest.yaml"
    try:
        m = yaml.safe_load(mpath.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise EvalsetError(f"{mpath}: cannot read the manifest ({exc})") from exc

    known = {"name", "kind", "description", "version", "source", "questions_per_user", "delete_memories_per_user",
             "delete_memories_of", "delete_conversation_of", "delete_user", "corrections", "stale_days",
             "correction_days"}
    unknown = sorted(set(m) - known)
    if unknown:
        raise EvalsetError(f"{mpath}: unknown key(s) {', '.join(unknown)} (a memory-safety manifest has: "
                           f"{', '.join(sorted(known))})")

    def need(key, typ, where=m, label=None):
        v = where.get(key)
        if not isinstance(v, typ) or isinstance(v, bool):
            names = " or ".join(t.__name__ for t in (typ if isinstance(typ, tuple) else (typ,)))
            raise EvalsetError(f"{mpath}: {label or key} must be {names}, got {v!r}")
        return v

    src = Path(need("source", str))
    cands = [src] if src.is_absolute() else [Path(datasets_dir) / src, root / src]
    source = next((p for p in cands if p.is_file()), None)
    if source is None:
        raise EvalsetError(f"{mpath}: source {src} not found (looked in {', '.join(str(p) for p in cands)})")
    qpu = m.get("questions_per_user")
    if qpu is not None and (not isinstance(qpu, int) or isinstance(qpu, bool) or qpu < 1):
        raise EvalsetError(f"{mpath}: questions_per_user must be a positive integer or null, got {qpu!r}")
    dmu = need("delete_memories_per_user", int)
    if dmu < 1:
        raise EvalsetError(f"{mpath}: delete_memories_per_user must be at least 1, got {dmu}")
    corr = []
    for i, c in enumerate(need("corrections", list)):
        if not isinstance(c, dict):
            raise EvalsetError(f"{mpath}: corrections[{i}] must be a mapping")
        fields = {k: need(k, str, c, f"corrections[{i}].{k}") for k in ("id", "stale_text", "correction_text",
                                                                        "question")}
        corr.append(Correction(**fields))
    if len({c.id for c in corr}) != len(corr):
        raise EvalsetError(f"{mpath}: correction ids must be unique")
    stale_days, corr_days = float(need("stale_days", (int, float))), float(need("correction_days", (int, float)))
    if not stale_days > corr_days >= 0:
        raise EvalsetError(f"{mpath}: stale_days ({stale_days}) must be greater than correction_days "
                           f"({corr_days}) >= 0: the correction is the newer statement")
    of = need("delete_memories_of", list)
    if not of or not all(isinstance(x, str) for x in of):
        raise EvalsetError(f"{mpath}: delete_memories_of must list conversation ids (sample ids)")
    out = SafetySet(root, str(m.get("name") or root.name), source, qpu, dmu, tuple(of),
                    need("delete_conversation_of", str), need("delete_user", str), tuple(corr), stale_days, corr_days)
    if out.delete_user in out.delete_memories_of or out.delete_user == out.delete_conversation_of:
        raise EvalsetError(f"{mpath}: delete_user {out.delete_user} is deleted whole: it cannot also be in "
                           "delete_memories_of or delete_conversation_of")
    if len(set(of)) != len(of) or out.delete_conversation_of in of:
        raise EvalsetError(f"{mpath}: delete_memories_of names a conversation twice or names delete_conversation_of "
                           f"({out.delete_conversation_of}): each user's deletions are counted once")
    return out


def check_conversations(ss: SafetySet, ls: LocomoSet) -> None:
    known = {c.id for c in ls.conversations}
    named = [*ss.delete_memories_of, ss.delete_conversation_of, ss.delete_user]
    missing = [x for x in named if x not in known]
    if missing:
        raise EvalsetError(f"{ss.root / 'manifest.yaml'}: no conversation {', '.join(missing)} in {ss.source} "
                           f"(it has {', '.join(sorted(known))})")
    if len(known) < 2:
        raise EvalsetError(f"{ss.source}: isolation needs at least two conversations (users), it has {len(known)}")
    if not known - set(named):
        raise EvalsetError(f"{ss.root / 'manifest.yaml'}: every conversation is deleted from: leave at least one "
                           "user out of the deletions (a bystander whose memories must not move)")
