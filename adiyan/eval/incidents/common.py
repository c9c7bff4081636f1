"""What every incident replay shares: the result record, the authored data, the embedder's window.

A replay runs a *before* and an *after* configuration of production code over authored
variants (``evalsets/incidents/``) and classes each variant:

- **held**: the before shows the seed's failure and the after prevents it;
- **not reproduced**: the before did not fail either (nothing for the after to prevent);
- **violated**: the after let the failure through (the defence broke);
- **not a test**: a variant the before and the after cannot tell apart by construction (incident
  4's picture with no text: both configurations can only name it), so it cannot show the
  principle; the after must still not let the failure through there (else it is violated), but
  it is never counted as held;
- **n/a**: it cannot be measured in this configuration (a text past the embedder's input
  window, scores that are no cosines), with the reason; never counted as held.

The verdict (:func:`verdict`): the principle **holds** when no variant is violated and at least
one discriminating variant is held (a before that never fails shows nothing, and neither does a
variant that is not a test); it **fails** otherwise; it is **n/a** when no variant can be
measured. The counts are always printed beside it ("3/7 variants, 4 not reproduced",
"4/4 variants, 1 not a test"), so one case cannot carry the result unseen.

Every result names its **basis**: ``production configuration`` when both halves are settings the
production code accepts and runs (incidents 1, 3, 4), ``replica`` when the before is something
production refuses to run (incident 2's unscoped search, incident 5's tier table without the
general fallback), rebuilt here only to show the failure. A replica's verdict reads "demonstrated
on a replica", never "holds": its after is the production code, its before is not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
INCIDENTS_DIR = ROOT / "evalsets" / "incidents"


PRODUCTION, REPLICA = "production configuration", "replica"


@dataclass
class IncidentResult:
    number: int
    name: str
    seed_figure: str  # what the seed recorded (its words and numbers), labelled as the seed's
    measured: str  # what the replay measured here, in one sentence
    model: str
    holds: bool | None  # None: n/a in this configuration (``measured`` says why)
    principle: str
    variants_held: int = 0
    variants: int = 0  # variants that could be measured here: held + not reproduced + violated
    variants_na: int = 0  # variants that could not (each with its reason in details)
    not_reproduced: int = 0  # the before did not fail either
    violated: int = 0  # the after let the failure through
    not_a_test: int = 0  # cannot discriminate before from after by construction; never held
    before: str = ""  # the production code and setting the before runs
    after: str = ""
    details: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)  # the incident's own figures, recorded as {n}_{name}_{key}
    seconds: float = 0.0
    basis: str = PRODUCTION  # PRODUCTION: the before is a setting production runs; REPLICA: one it refuses
    basis_note: str = ""  # for a replica: where production refuses the before

    @property
    def status(self) -> str:
        """"holds" | "demonstrated on a replica" (held, but the before is a replica) | "FAILS" | "n/a"."""
        if self.holds is None:
            return "n/a"
        if not self.holds:
            return "FAILS"
        return "holds" if self.basis == PRODUCTION else "demonstrated on a replica"

    @property
    def variants_text(self) -> str:
        """``"6/6 variants"``, ``"3/7 variants, 4 not reproduced"``, ``"6/6 variants, 1 n/a"``,
        ``"4/4 variants, 1 not a test"``, ``"n/a"``."""
        if not self.variants:
            rest = [f"{n} {what}" for n, what in ((self.not_a_test, "not a test"), (self.variants_na, "n/a")) if n]
            return ("n/a" + (f" ({self.variants_na} variants)" if self.variants_na else "")) if not self.not_a_test \
                else "0/0 variants, " + ", ".join(rest)
        parts = [f"{self.variants_held}/{self.variants} variants"]
        parts += [f"{n} {what}" for n, what in ((self.not_reproduced, "not reproduced"), (self.violated, "violated"),
                                                (self.not_a_test, "not a test"), (self.variants_na, "n/a")) if n]
        return ", ".join(parts)

    @property
    def variants_share(self) -> float | None:
        return round(self.variants_held / self.variants, 6) if self.variants else None


def load_spec(name: str) -> dict:
    """An incident's authored data, ``evalsets/incidents/<name>``; a clear error naming the file."""
    path = INCIDENTS_DIR / name
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: cannot read the incident's data: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping at the top level")
    return data


def settings_for(settings, data_dir: str | Path, **overrides):
    """The replay's settings: the configured ones in a throw-away data directory."""
    return settings.with_overrides({"paths.data_dir": str(data_dir), **overrides})


def input_window(embedder) -> tuple[int | None, str]:
    """(tokens the embedder reads per text, how that is known); None when it cannot be known.

    minilm reads 256 word pieces, mpnet 384; nomic-embed-text runs with a 2,048-token llama.cpp
    context here (it was trained to 8,192); an Ollama model's window is not visible from here.
    """
    inner = getattr(embedder, "inner", embedder)  # the model behind the embedding cache
    window = inner.input_window() if hasattr(inner, "input_window") else None
    if window is None:
        return None, f"{embedder.id}: input window unknown here (no local tokenizer)"
    return int(window), f"{embedder.id} reads {window} tokens per text (its own tokenizer counts them)"


def count_tokens(embedder, text: str) -> int | None:
    """Tokens of ``text`` as the embedder reads it (its tokenizer, special tokens included)."""
    inner = getattr(embedder, "inner", embedder)
    return inner.count_tokens(text) if hasattr(inner, "count_tokens") else None


HELD, NOT_REPRODUCED, VIOLATED, NA = "held", "not reproduced", "violated", "n/a"
NOT_A_TEST = "not a test"


def classify(before_failed: bool, after_prevented: bool, *, discriminating: bool = True) -> str:
    """A measurable variant's status: the after's failure first (a broken defence is never hidden);
    a variant that cannot discriminate before from after is "not a test", never held."""
    if not after_prevented:
        return VIOLATED
    if not discriminating:
        return NOT_A_TEST
    return HELD if before_failed else NOT_REPRODUCED


def verdict(statuses: list[str]) -> bool | None:
    """The incident's verdict from its variants' statuses (see the module docstring): holds only if
    at least one discriminating variant held and none was violated."""
    measured = [s for s in statuses if s != NA]
    if not measured:
        return None
    return VIOLATED not in measured and HELD in measured


def counts(statuses: list[str]) -> dict[str, int]:
    """The IncidentResult fields for these statuses (``variants``: the discriminating measured ones
    and any violated one; "not a test" and n/a are counted beside them)."""
    return {"variants_held": statuses.count(HELD), "variants": sum(s in (HELD, NOT_REPRODUCED, VIOLATED) for s in statuses),
            "variants_na": statuses.count(NA), "not_reproduced": statuses.count(NOT_REPRODUCED),
            "violated": statuses.count(VIOLATED), "not_a_test": statuses.count(NOT_A_TEST)}
