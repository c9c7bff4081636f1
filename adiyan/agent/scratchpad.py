"""The scratchpad: the agent's compacted notes, the only view of earlier steps the model gets.

``Scratchpad.render`` prints it within a token budget (findings first); ``compaction`` fills it
from tool output. Kept free of tools and policy so traces and results can hold it without
pulling in the rest of the agent.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Callable

from ..generation import approx_tokens


@dataclass
class Finding:
    text: str
    source: str
    chunk_index: int | None = None  # None: not a KB chunk (full text, memory)
    score: float = 0.0  # relevance to the question, for ordering and trimming
    step: int = 0

    def cite(self) -> str:
        return self.source if self.chunk_index is None else f"{self.source}#{self.chunk_index}"


@dataclass
class Scratchpad:
    findings: list[Finding] = field(default_factory=list)
    documents_checked: list[str] = field(default_factory=list)
    open_questions: list[str] = field(default_factory=list)
    leads: list[str] = field(default_factory=list)  # documents found or listed but not yet checked
    history: list[str] = field(default_factory=list)  # one compacted line per tool call

    def copy(self) -> "Scratchpad":
        return Scratchpad([replace(f) for f in self.findings], list(self.documents_checked),
                          list(self.open_questions), list(self.leads), list(self.history))

    def best_findings(self) -> list[Finding]:
        return sorted(self.findings, key=lambda f: (-f.score, f.step))

    def render(self, budget_tokens: int, count: Callable[[str], int] = approx_tokens) -> str:
        """The scratchpad as text of at most ``budget_tokens`` (by ``count``).

        Lines are admitted by priority: findings (most relevant first), open questions, the
        latest actions, documents checked, leads; then printed in a fixed section order.
        """
        budget = max(1, int(budget_tokens))
        if not (self.findings or self.documents_checked or self.open_questions or self.leads or self.history):
            return "(empty: nothing found yet)"
        candidates: list[tuple[str, str]] = []  # (section, line) in priority order
        for f in self.best_findings():
            candidates.append(("Findings", f"- [{f.cite()}] {f.text}"))
        for q in self.open_questions[-5:]:
            candidates.append(("Open questions", f"- {q}"))
        for i in range(len(self.history) - 1, -1, -1):
            candidates.append(("Actions so far", f"{i + 1}. {self.history[i]}"))
        if self.documents_checked:
            candidates.append(("Documents checked", ", ".join(self.documents_checked[-12:])))
        unread = [s for s in self.leads if s not in self.documents_checked]
        if unread:
            candidates.append(("Leads (not yet checked)", ", ".join(unread[:12])))
        order = ["Findings", "Open questions", "Documents checked", "Leads (not yet checked)", "Actions so far"]
        chosen: dict[str, list[str]] = {k: [] for k in order}
        used = 0
        for section, line in candidates:
            cost = count(line) + (0 if chosen[section] else count(section + ":") + 1)
            if used + cost > budget:
                continue
            chosen[section].append(line)
            used += cost
        chosen["Actions so far"].sort(key=lambda s: int(s.split(".", 1)[0]))
        out = "\n".join(f"{k}:\n" + "\n".join(v) for k, v in ((k, chosen[k]) for k in order) if v)
        if not out:
            out = candidates[0][1] if candidates else ""
        while out and count(out) > budget:  # hard cut: the budget is a promise
            out = out[: max(0, min(len(out) - 1, budget * 4 - 2))].rstrip() + "…"
            if len(out) <= 1:
                break
        return out

    def to_dict(self) -> dict:
        return asdict(self)
