"""The claim checker: P(the passage supports the claim), a cross-encoder this project trains itself.

No package carries a faithfulness checker (HHEM, MiniCheck, AlignScore and LettuceDetect load their
weights from a hub), so ``adiyan checker train`` fine-tunes the packaged all-MiniLM-L6-v2 on
synthetic pairs (``checker_data``) and commits the result here, in ``trained/checker/``:
``weights.npz`` (every matrix int8 with a scale per row, ~23 MB), ``config.json`` and the tokenizer
files of the base model, and ``card.json`` (what it saw, what it scored, the sha256 of the weights
and the command that reproduces them). A fresh clone never trains.

Inference is the fast path: pairs are scored in batches sorted by length, a passage longer than the
encoder's window is read in overlapping windows and the best window speaks for it
(``support``), and scores are cached by content hash in the caller's cache when one is given.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from .base import ModelAssetError

CHECKER_DIR = Path(__file__).resolve().parent / "trained" / "checker"
MAX_LEN = 256          # word pieces per (claim, passage) pair
WINDOW_WORDS = 150     # passage words per window; windows overlap by half
TOP_WINDOWS = 3        # windows read per claim: those sharing most of its words (all, when as few)
_TOKEN = re.compile(r"[a-z0-9]+")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*")


def numbers(text: str) -> set[str]:
    """The numbers a text states, normalised ("1,200" and "1200" are one; "3.50" keeps its decimals)."""
    out = set()
    for m in _NUMBER.finditer(text):
        n = m.group(0).replace(",", "")
        out.add(n.rstrip("0").rstrip(".") if "." in n else n.lstrip("0") or "0")
    return out


def numbers_agree(claim: str, window: str) -> bool:
    """Every number of the claim is in the window. The encoder reads numbers poorly (a changed
    number passed it in 56% of its synthetic conflicts), so a window that lacks a number the claim
    states cannot support the claim, whatever the encoder says."""
    return numbers(claim) <= numbers(window)
_LOCK = threading.Lock()
_LOADED: dict[str, "ClaimChecker"] = {}


def quantize(state: dict[str, "np.ndarray"]) -> dict[str, np.ndarray]:
    """int8 with one float32 scale per row for every matrix; vectors (biases, norms) as float16."""
    out: dict[str, np.ndarray] = {}
    for name, w in state.items():
        w = np.asarray(w, dtype=np.float32)
        if w.ndim == 2:
            scale = np.abs(w).max(axis=1, keepdims=True) / 127.0
            scale[scale == 0] = 1.0
            out[name + "::q"] = np.round(w / scale).astype(np.int8)
            out[name + "::s"] = scale.astype(np.float32)
        else:
            out[name + "::h"] = w.astype(np.float16)
    return out


def dequantize(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    state: dict[str, np.ndarray] = {}
    for key in arrays:
        name, tag = key.rsplit("::", 1)
        if tag == "q":
            state[name] = arrays[key].astype(np.float32) * arrays[name + "::s"]
        elif tag == "h":
            state[name] = arrays[key].astype(np.float32)
    return state


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def windows(passage: str, words: int = WINDOW_WORDS) -> list[str]:
    """The passage in windows of ``words`` words overlapping by half (one window when it fits)."""
    toks = passage.split()
    if len(toks) <= words:
        return [" ".join(toks)]
    step = words // 2
    return [" ".join(toks[i:i + words]) for i in range(0, max(1, len(toks) - step), step)]


@dataclass(frozen=True)
class Support:
    probability: float  # the best window's P(supported)
    span: str           # that window's text (the evidence shown beside a claim)


class ClaimChecker:
    """Loads the committed weights once per process (``ClaimChecker.load()``)."""

    what = "the claim checker"        # named in errors
    retrain = "adiyan checker train"  # the command that rebuilds the weights
    prefix, suffix = "checker:", "+numbers"  # the identity: prefix + sha16 of the weights + the inference rule
    max_len = MAX_LEN
    default_folder = CHECKER_DIR

    def __init__(self, folder: Path):
        import torch  # heavy: torch and transformers load only when the checker is used
        from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification  # heavy: as torch

        self.folder = folder
        weights = folder / "weights.npz"
        if not weights.is_file():
            raise ModelAssetError(f"{weights}: {self.what}'s weights are missing "
                                  f"(they are committed with the repository; `{self.retrain}` rebuilds them)")
        card = folder / "card.json"
        if not card.is_file():
            raise ModelAssetError(f"{card}: {self.what}'s card is missing (committed beside its weights)")
        self.card = json.loads(card.read_text(encoding="utf-8"))
        # the identity names the weights and the inference rule (numbers must agree: numbers_agree)
        self.identity = self.prefix + (self.card.get("weights_sha256") or file_sha256(weights))[:16] + self.suffix
        config = BertConfig.from_pretrained(folder)
        model = BertForSequenceClassification(config)
        with np.load(weights) as z:
            state = dequantize({k: z[k] for k in z.files})
        model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()}, strict=False)
        model.eval()
        self._model = model
        self._tok = AutoTokenizer.from_pretrained(folder)
        self._torch = torch
        self._seen: dict[tuple[str, str], float] = {}

    @classmethod
    def load(cls, folder: Path | None = None) -> "ClaimChecker":
        folder = Path(folder or cls.default_folder)
        with _LOCK:
            key = str(folder.resolve())
            if key not in _LOADED:
                _LOADED[key] = cls(folder)
            return _LOADED[key]

    def probabilities(self, pairs: Sequence[tuple[str, str]], batch_size: int = 32) -> list[float]:
        """P(supported) for each (claim, passage) pair, the passage truncated to the window. Pairs
        already scored in this process are not scored again (a sweep's points and a test session
        check the same answers many times); the encoder is deterministic, so this changes no value."""
        seen = self._seen
        todo = list(dict.fromkeys(p for p in pairs if p not in seen))
        if todo:
            for p, v in zip(todo, self._score(todo, batch_size)):
                seen[p] = v
            if len(seen) > 200_000:  # a bound on memory: forget the oldest half
                for key in list(seen)[:100_000]:
                    del seen[key]
        return [seen[p] for p in pairs]

    def _score(self, pairs: Sequence[tuple[str, str]], batch_size: int) -> list[float]:
        torch = self._torch
        order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
        out = [0.0] * len(pairs)
        with torch.inference_mode():
            for b in range(0, len(order), batch_size):
                idx = order[b:b + batch_size]
                enc = self._tok([pairs[i][0] for i in idx], [pairs[i][1] for i in idx], truncation="longest_first",
                                max_length=self.max_len, padding=True, return_tensors="pt")
                logits = self._model(**enc).logits[:, 0]
                for i, p in zip(idx, torch.sigmoid(logits).tolist()):
                    out[i] = float(p)
        return out

    def support(self, claims: Sequence[str], passages: Sequence[str], top_windows: int = TOP_WINDOWS) -> list[Support]:
        """For each claim, the best support any window of any passage gives it. Each claim is read
        against the ``top_windows`` windows that share most of its words (a long source has dozens
        of windows; the one that supports a claim shares its words), so the cost grows with the
        claims, not with the source's length."""
        wins = [w for p in passages if p and p.strip() for w in windows(p)]
        if not wins or not claims:
            return [Support(0.0, "") for _ in claims]
        win_words = [set(_TOKEN.findall(w.lower())) for w in wins]
        pairs, owner = [], []
        for ci, c in enumerate(claims):
            words = set(_TOKEN.findall(c.lower()))
            ranked = sorted(range(len(wins)), key=lambda j: (-len(words & win_words[j]), j))[:top_windows]
            for j in ranked:
                pairs.append((c, wins[j]))
                owner.append((ci, j))
        probs = [p if numbers_agree(c, w) else 0.0 for (c, w), p in zip(pairs, self.probabilities(pairs))]
        best: dict[int, tuple[float, int]] = {}
        for (ci, j), p in zip(owner, probs):
            if ci not in best or p > best[ci][0]:
                best[ci] = (p, j)
        return [Support(best[ci][0], wins[best[ci][1]]) for ci in range(len(claims))]
