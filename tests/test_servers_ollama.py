"""The Ollama client path against recorded Ollama replies, over real loopback HTTP.

No Ollama server is available here, so a loopback server of ours (tests/servers.py HTTPPeer)
replays recorded /api/chat and /api/embed replies (tests/recordings/ollama.json, in the format
Ollama's API documents; the embedding vectors are nomic-embed-text's, made from the same GGUF
in-process). The official ``ollama`` client really sends its requests and parses the replies:
what it sends (model, options, task prefixes, batches) and what the embedder and LLM make of
the answers are checked here, not Ollama itself.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from adiyan.models import ModelConnectionError, ModelResponseError, ModelTimeoutError, load_embedder, load_llm
from servers import HTTPPeer, free_port, json_reply

RECORDING = json.loads((Path(__file__).parent / "recordings" / "ollama.json").read_text())
DOCS = ["The refund window is 14 days.", "Bring rain gear and sturdy boots for every hike."]
QUERY = "How long is the refund window?"


def replay(method: str, path: str, body: bytes):
    """Ollama's endpoints as recorded; an unknown model or input gets Ollama's 404."""
    req = json.loads(body or b"{}")
    model = req.get("model", "")
    if path == "/api/chat" and model in RECORDING["chat"]:
        return json_reply(RECORDING["chat"][model])
    if path == "/api/embed" and model in RECORDING["embed"]:
        rec = RECORDING["embed"][model]
        inputs = req["input"] if isinstance(req["input"], list) else [req["input"]]
        if all(t in rec["vectors"] for t in inputs):
            return json_reply({"model": model, "embeddings": [rec["vectors"][t] for t in inputs],
                               "total_duration": rec["total_duration"], "load_duration": rec["load_duration"],
                               "prompt_eval_count": rec["prompt_eval_count_per_input"] * len(inputs)})
    err = RECORDING["errors"]["model_not_found"]
    return json_reply({"error": err["body"]["error"].replace("{model}", model)}, err["status"])


@pytest.fixture
def ollama():
    with HTTPPeer(replay) as peer:
        yield peer


def test_ollama_chat(ollama):
    llm = load_llm("ollama:llama3.2", url=ollama.base, max_tokens=64, context_size=4096, seed=7)
    messages = [{"role": "system", "content": "Answer from the context."},
                {"role": "user", "content": "How long is the refund window?"}]
    out = llm.chat(messages)
    rec = RECORDING["chat"]["llama3.2"]
    assert out.text == rec["message"]["content"]
    assert (out.prompt_tokens, out.completion_tokens, out.model) == (126, 21, "ollama:llama3.2")
    (sent,) = ollama.posted("/api/chat")
    assert sent["model"] == "llama3.2" and sent["stream"] is False and sent["messages"] == messages
    assert sent["options"] == {"temperature": 0.0, "num_predict": 64, "seed": 7, "num_ctx": 4096}


def recorded(text: str) -> np.ndarray:
    return np.asarray(RECORDING["embed"]["nomic-embed-text"]["vectors"][text], dtype=np.float32)


def test_ollama_embedder(ollama):
    """nomic-embed-text on Ollama: the task prefixes go over the wire, batches keep their order,
    rows come back L2-normalised as recorded."""
    emb = load_embedder("nomic-embed-text", url=ollama.base, batch_size=1)
    assert (emb.id, emb.dim) == ("nomic-embed-text", 768)
    docs, query = emb.embed(DOCS, "document"), emb.embed([QUERY], "query")
    sent = [b["input"] for b in ollama.posted("/api/embed")]
    assert sent == [["dimension probe"], ["search_document: " + DOCS[0]], ["search_document: " + DOCS[1]],
                    ["search_query: " + QUERY]]
    assert all(b["model"] == "nomic-embed-text" for b in ollama.posted("/api/embed"))
    assert np.allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-6)
    assert np.allclose(docs, [recorded("search_document: " + t) for t in DOCS], atol=1e-6)
    assert np.allclose(query[0], recorded("search_query: " + QUERY), atol=1e-6)
    assert float(query[0] @ docs[0]) > float(query[0] @ docs[1]) + 0.2  # the refund text answers the question
    short = load_embedder("ollama:nomic-embed-text", url=ollama.base, truncate_dim=64)
    assert (short.id, short.dim, short.prefix("query")) == ("ollama:nomic-embed-text@64", 64, "search_query: ")


@pytest.mark.slow  # loads nomic-embed-text in-process (~3 s on a busy machine)
def test_the_recorded_vectors_are_nomic_embed_texts(nomic):
    """The recording holds the model's real vectors: the in-process GGUF gives the same, to 1e-5."""
    for key in RECORDING["embed"]["nomic-embed-text"]["vectors"]:  # each as sent: task prefix included
        kind = next((k for k, prefix in nomic.prefixes.items() if key.startswith(prefix)), None)
        text = key[len(nomic.prefix(kind)):]
        assert float(nomic.embed([text], kind)[0] @ recorded(key)) > 1 - 1e-5, key


@pytest.mark.reliability
def test_ollama_failures_are_named(ollama):
    """A model Ollama does not have (its 404), a server that is down, one that is slow, a reply
    that is not JSON: each a named ModelError naming the URL."""
    with pytest.raises(ModelResponseError, match=rf"Ollama at {ollama.base} answered HTTP 404: model \"qwen3:8b\" "
                                                 "not found"):
        load_llm("ollama:qwen3:8b", url=ollama.base).chat([{"role": "user", "content": "hi"}])
    with pytest.raises(ModelResponseError, match="HTTP 404"):
        load_embedder("ollama:mxbai-embed-large", url=ollama.base)
    down = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ModelConnectionError, match=f"cannot reach Ollama at {down}"):
        load_llm("ollama:llama3.2", url=down).chat([{"role": "user", "content": "hi"}])
    with pytest.raises(ModelConnectionError, match=down):
        load_embedder("nomic-embed-text", url=down)

    def slow(method, path, body):
        time.sleep(2.0)
        return replay(method, path, body)

    def garbage(method, path, body):
        return 200, {"Content-Type": "text/html"}, b"<html>502 Bad Gateway</html>"

    with HTTPPeer(slow) as peer:
        with pytest.raises(ModelTimeoutError, match=f"no reply from Ollama at {peer.base} within 0.5 s"):
            load_llm("ollama:llama3.2", url=peer.base, timeout_s=0.5).chat([{"role": "user", "content": "hi"}])
    with HTTPPeer(garbage) as peer:
        with pytest.raises(ModelResponseError, match=f"Ollama at {peer.base} sent an unusable reply"):
            load_llm("ollama:llama3.2", url=peer.base).chat([{"role": "user", "content": "hi"}])
