"""mem0 for :class:`adiyan.memory.Memory`: imported lazily, offline and with telemetry off, with the adiyan
embedder and LLM registered as its providers; and the names mem0 files things under."""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
from pathlib import Path

from .models.consolidation import Consolidator

log = logging.getLogger("adiyan.memory")
PROVIDER = "adiyan"  # the name our adapters are registered under in mem0's factories


def mem0_session_scope(user_id: str) -> str:
    """The key mem0 (2.2) files a user's recent messages under (its ``_build_session_scope`` for a
    user filter): deleting a user's memories deletes those messages too."""
    return "user_id=" + str(user_id).strip().replace("%", "%25").replace("&", "%26").replace("=", "%3D")


# -- mem0, imported lazily and offline -------------------------------------------------------

_mem0_lock = threading.Lock()
_mem0_ready = False


class _DropExpected(logging.Filter):
    """mem0 warns at every start that the optional BM25/spaCy extras are missing: expected here."""

    _EXPECTED = ("spaCy is not installed", "fastembed not installed")

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        return not any(s in msg for s in self._EXPECTED)


def import_mem0(home: Path):
    """Import mem0 with telemetry off and register the adiyan adapters (once per process)."""
    global _mem0_ready
    with _mem0_lock:
        if _mem0_ready:
            import mem0  # heavy, optional: mem0 loads only when a Memory is opened

            return mem0
        os.environ["MEM0_TELEMETRY"] = "False"
        if "MEM0_DIR" not in os.environ:
            home.mkdir(parents=True, exist_ok=True)
            os.environ["MEM0_DIR"] = str(home)
        # heavy, optional, and only after MEM0_TELEMETRY / MEM0_DIR are set (mem0 reads them on import):
        import mem0  # heavy: see above
        import mem0.memory.main as mem0_main  # heavy: see above
        import mem0.memory.telemetry as mem0_telemetry  # heavy: see above
        from mem0.embeddings.base import EmbeddingBase  # heavy: see above
        from mem0.llms.base import LLMBase  # heavy: see above
        from mem0.utils.factory import EmbedderFactory, LlmFactory  # heavy: see above

        if mem0_telemetry.MEM0_TELEMETRY:  # imported elsewhere before us, with telemetry on
            log.warning("mem0 was imported with telemetry on; adiyan turns it off")
            mem0_telemetry.MEM0_TELEMETRY = False
            mem0_main.MEM0_TELEMETRY = False
        _no_spacy_downloads()
        for name in ("mem0.utils.spacy_models", "mem0.vector_stores.qdrant"):
            logging.getLogger(name).addFilter(_DropExpected())

        class AdiyanEmbedding(EmbeddingBase):
            """mem0 embedder backed by an adiyan embedder object (``config.model``)."""

            def __init__(self, config=None):
                super().__init__(config)
                self.embedder = self.config.model
                if self.embedder is None or not hasattr(self.embedder, "embed"):
                    raise ValueError("the adiyan mem0 embedder needs an adiyan embedder as config.model")
                self.config.embedding_dims = self.embedder.dim

            @staticmethod
            def _kind(memory_action):
                return "query" if memory_action == "search" else "document"

            def embed(self, text, memory_action=None):
                return self.embedder.embed([text], self._kind(memory_action))[0].tolist()

            def embed_batch(self, texts, memory_action="add"):
                return [row.tolist() for row in self.embedder.embed(list(texts), self._kind(memory_action))]

        class AdiyanLLM(LLMBase):
            """mem0 LLM backed by an adiyan LLM (``config.model``: the LLM or a zero-argument loader)."""

            def __init__(self, config=None):
                super().__init__(config)
                self._source = self.config.model
                self._llm = None
                self.consolidator = Consolidator()  # the owning Memory puts its own in

            def _validate_config(self):
                pass

            def _model(self):
                if self._llm is None:
                    if self._source is None:
                        raise RuntimeError("memory consolidation (infer=True) needs an LLM; none is configured")
                    self._llm = self._source() if callable(self._source) and not hasattr(self._source, "chat") \
                        else self._source
                return self._llm

            def generate_response(self, messages, tools=None, tool_choice="auto", response_format=None, **kwargs):
                if tools:
                    raise NotImplementedError("adiyan LLMs do not do tool calls for mem0")
                return self.consolidator.reply(self._model(), messages, response_format)

        # mem0's factories load providers by dotted path: expose the classes on this module.
        globals()["AdiyanMem0Embedding"] = AdiyanEmbedding
        globals()["AdiyanMem0LLM"] = AdiyanLLM
        EmbedderFactory.provider_to_class[PROVIDER] = f"{__name__}.AdiyanMem0Embedding"
        LlmFactory.register_provider(PROVIDER, f"{__name__}.AdiyanMem0LLM")
        _mem0_ready = True
        return mem0


def _no_spacy_downloads() -> None:
    """mem0 pip-installs spaCy's en_core_web_sm when spaCy is present without it: never offline."""
    if importlib.util.find_spec("spacy") is None:
        return  # mem0 then logs once and goes without lemmas and entities
    import spacy  # heavy, optional: only when spaCy is installed

    if not spacy.util.is_package("en_core_web_sm"):
        from mem0.utils import spacy_models  # heavy: mem0, imported by import_mem0 just before

        spacy_models._load_failed_full = True
        spacy_models._load_failed_lemma = True
