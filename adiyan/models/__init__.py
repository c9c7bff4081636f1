"""Model providers behind small interfaces, chosen by name."""

from .base import (LLM, ChatMessage, Completion, Embedder, ModelAssetError, ModelConnectionError, ModelError,
                   ModelResponseError, ModelTimeoutError, cosine, l2_normalize)
from .registry import (EMBEDDERS, LLMS, embedder_from_settings, extra_embedders_from_settings, llm_from_settings,
                       load_embedder, load_llm)

__all__ = ["LLM", "ChatMessage", "Completion", "Embedder", "ModelAssetError", "ModelConnectionError", "ModelError",
           "ModelResponseError", "ModelTimeoutError", "cosine",
           "l2_normalize", "EMBEDDERS", "LLMS", "embedder_from_settings", "extra_embedders_from_settings", "llm_from_settings",
           "load_embedder", "load_llm"]
