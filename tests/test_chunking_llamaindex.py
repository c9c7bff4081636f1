"""LlamaIndex node parsers as chunking strategies (adiyan/chunking_llamaindex.py, issue 15)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from pydantic import ValidationError

from adiyan.chunking import chunk_text, effective_strategy
from adiyan.chunking_llamaindex import CHARS_PER_TOKEN
from adiyan.config import ChunkingConfig
from tests.conftest import MODEL_DIR, ROOT, SHARED

WIKI = sorted((SHARED / "documents" / "md" / "sources").rglob("*.md"))
FAQ = (ROOT / "evalsets" / "adiyan_basic" / "docs" / "itineraries.md").read_text(encoding="utf-8")


def _tokens(text: str) -> int:
    from llama_index.core.utils import get_tokenizer  # the tokenizer LlamaIndex counts with (cl100k)

    return len(get_tokenizer()(text))


def test_sizes_are_tokens_at_four_characters_each():
    text = "\n\n".join(p.read_text(encoding="utf-8") for p in WIKI)[:20000]
    cfg = ChunkingConfig(strategy="llamaindex:token", size=800, overlap=0)
    chunks = chunk_text(text, cfg)
    counts = [_tokens(c.text) for c in chunks]
    assert CHARS_PER_TOKEN == 4
    assert max(counts) <= 200  # 800 characters -> 200 tokens
    assert sorted(counts)[len(counts) // 2] > 150  # and the budget is used (not 800 tokens, not 20)
    sentence = chunk_text(text, ChunkingConfig(strategy="llamaindex:sentence", size=800, overlap=100))
    assert max(_tokens(c.text) for c in sentence) <= 200
    assert len(chunks) >= 10 and all(c.strategy == "llamaindex:token" for c in chunks)
    assert abs(sum(counts) - _tokens(text)) <= 0.05 * _tokens(text)  # no overlap: the windows tile the text


@pytest.mark.parametrize("strategy", ["llamaindex:sentence", "llamaindex:markdown"])
def test_every_chunk_knows_where_it_came_from(strategy):
    chunks = chunk_text(FAQ, ChunkingConfig(strategy=strategy, size=400, overlap=40))
    assert len(chunks) >= 3
    for c in chunks:
        assert c.start >= 0 and FAQ[c.start:c.end] == c.text, c.index  # markdown: offsets in the document,
    assert [c.index for c in chunks] == list(range(len(chunks)))     # not in its section


def test_markdown_sections_never_share_a_chunk_and_converted_markdown_falls_back():
    md = "# A\n\nAlpha one. Alpha two.\n\n# B\n\nBeta one.\n"
    chunks = chunk_text(md, ChunkingConfig(strategy="llamaindex:markdown", size=800, overlap=100))
    assert [c.text for c in chunks] == ["# A\n\nAlpha one. Alpha two.", "# B\n\nBeta one."]
    flat = chunk_text(md, ChunkingConfig(strategy="llamaindex:markdown"), authored_markdown=False)
    assert len(flat) == 1 and flat[0].strategy == "llamaindex:sentence" and "'llamaindex:sentence'" in flat[0].note
    assert effective_strategy("llamaindex:markdown", authored_markdown=False) == "llamaindex:sentence"


def test_unknown_and_impossible_settings_are_refused_by_name():
    with pytest.raises(ValidationError, match="llamaindex:sentence"):
        ChunkingConfig(strategy="llamaindex:nope")
    with pytest.raises(ValueError, match="llamaindex:semantic chunking strategy needs an embedder"):
        chunk_text(FAQ, ChunkingConfig(strategy="llamaindex:semantic"))
    with pytest.raises(ValueError, match=r"overlap \(120 chars = 30 tokens\) must be smaller than the size "
                                         r"\(120 chars = 30 tokens\)"):
        chunk_text(FAQ, ChunkingConfig(strategy="llamaindex:token", size=120, overlap=120))


OFFLINE = r"""
import json, socket, sys
def refuse(self, *a):
    raise OSError(f"network call attempted: {a}")
socket.socket.connect = refuse
socket.create_connection = lambda *a, **k: refuse(None, *a)
from pathlib import Path
from adiyan.chunking import chunk_text
from adiyan.config import ChunkingConfig
from adiyan.models import load_embedder
emb = load_embedder("minilm", models_dir=Path(sys.argv[1]))
text = Path(sys.argv[2]).read_text()
out = {}
for s in ["llamaindex:sentence", "llamaindex:token", "llamaindex:markdown", "llamaindex:semantic"]:
    out[s] = len(chunk_text(text, ChunkingConfig(strategy=s), embedder=emb))
print(json.dumps(out))
"""


@pytest.mark.slow  # a fresh interpreter loading llama-index and MiniLM: ~50 s on 2 busy cores
def test_every_strategy_runs_offline_from_the_packaged_data(tmp_path):
    """A fresh process with sockets refused, an empty HOME (no user caches) and neither
    TIKTOKEN_CACHE_DIR nor NLTK_DATA: the tokenizer and punkt come from llama-index-core itself."""
    env = {k: v for k, v in os.environ.items() if k not in ("TIKTOKEN_CACHE_DIR", "NLTK_DATA", "XDG_CACHE_HOME")}
    env.update(HOME=str(tmp_path), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    doc = ROOT / "evalsets" / "adiyan_basic" / "docs" / "faq.md"
    res = subprocess.run([sys.executable, "-c", OFFLINE, str(MODEL_DIR), str(doc)], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    counts = json.loads(res.stdout.strip().splitlines()[-1])
    assert all(n >= 1 for n in counts.values()), counts
    assert not (tmp_path / ".cache" / "llama_index").exists()  # nothing was fetched into a user cache
