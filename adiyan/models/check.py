"""``invoke models``: prepare every offline model and show that each one really works."""

from __future__ import annotations

import os
import time
from pathlib import Path

from .base import ChatMessage, cosine
from .packaged_gguf import TIERS
from .registry import load_embedder, load_llm

OFFLINE_EMBEDDERS = ["minilm", "mpnet", "nomic-embed-text"]
OFFLINE_LLMS = ["smollm2"]

PARAPHRASE = ("The tour costs 450 euros per person.", "Each traveller pays 450 EUR for the trip.")
UNRELATED = "Bicycles need their chains oiled every few weeks."
PRICE_CONTEXT = "The tour costs 450 euros per person."
PRICE_QUESTION = "How much does the tour cost per person?"


def smoke_embedder(emb) -> dict:
    v = emb.embed([PARAPHRASE[0], PARAPHRASE[1], UNRELATED], "document")
    para, unrel = cosine(v[0], v[1]), cosine(v[0], v[2])
    return {"ok": para > unrel,
            "smoke": f"cos(paraphrase)={para:.3f} > cos(unrelated)={unrel:.3f}" if para > unrel
            else f"FAILED: cos(paraphrase)={para:.3f} <= cos(unrelated)={unrel:.3f}"}


def smoke_llm(llm) -> dict:
    out = llm.chat([ChatMessage("system", "Answer from the context in one sentence."),
                    ChatMessage("user", f"Context: {PRICE_CONTEXT}\n\nQuestion: {PRICE_QUESTION}")],
                   max_tokens=40)
    text = " ".join(out.text.split())
    return {"ok": "450" in text, "smoke": f"{text!r}" if "450" in text else f"FAILED (no 450): {text!r}"}


def check_models(settings, only: list[str] | None = None) -> list[dict]:
    """Every offline model, and a packaged tier (qwen2.5-coder-*) when it is named in ``only`` or
    already joined into paths.models_dir (``invoke models --fetch NAME`` joins it)."""
    os.environ["HF_HUB_OFFLINE"] = "1"  # prove the point: nothing may come from a hub
    rows = []
    tiers = [n for n, t in TIERS.items() if (only and n in only) or (Path(settings.paths.models_dir) / t.file).is_file()]
    for name in OFFLINE_EMBEDDERS + OFFLINE_LLMS + tiers:
        if only and name not in only:
            continue
        row = {"name": name}
        t0 = time.perf_counter()
        try:
            if name in OFFLINE_EMBEDDERS:
                m = load_embedder(name, models_dir=settings.paths.models_dir)
                row.update(id=m.id, size=f"{m.dim} dims", path=getattr(m, "path", ""))
                row["load_s"] = round(time.perf_counter() - t0, 2)
                row.update(smoke_embedder(m))
            else:
                m = load_llm(name, context_size=settings.llm.context_size, models_dir=settings.paths.models_dir)
                row.update(id=m.id, size=f"{m.context_size} ctx", path=getattr(m, "path", ""))
                row["load_s"] = round(time.perf_counter() - t0, 2)
                row.update(smoke_llm(m))
        except Exception as exc:  # noqa: BLE001 - reported per model, the others still run
            row.update(ok=False, load_s=round(time.perf_counter() - t0, 2), smoke=f"ERROR {type(exc).__name__}: {exc}")
        rows.append(row)
    return rows
