"""Adiyan workbench.

Data flows one way: documents -> parse -> chunk -> embed -> store -> retrieve -> generate /
agent -> evaluate -> report, and so do the imports. Each module belongs to a layer and may
import only from its own layer or below (tests/test_layers.py walks every import, also those
inside functions, and fails on an upward import or a cycle):

====  ==========================================================================================
  0   config (typed settings; config_reference renders it as docs), types, metrics (the metric registry; metrics computed by hand),
      stats (paired randomization test, Holm)
  1   cache, store, ingest, chunking, models: infrastructure that knows nothing of retrieval
  2   kb: the write path and the engine search under the access policy
  3   retrieval: the pipeline (transform -> search -> floor -> re-rank -> cut) and its stages
  4   memory, generation
  5   factory: open_kb / open_retriever / open_memory (nothing is assembled by hand); context: the three-part
      context of a conversation turn (facts, relevant history, message) and persisted conversations
  6   agent, ask (a person's question: generation or the agent, with sources and the hidden count)
  7   report (HTML through the metric registry)
  8   eval: harness, scoring, judge, incidents, the run behind ``invoke eval``
  9   experiments: one module per notebook, built on the eval harness
 10   sweeps: grid, executors, resume, gathering, pages
 11   integrations: adapters for other frameworks (LlamaIndex)
 12   cli
====  ==========================================================================================
"""
import warnings as _warnings

__version__ = "0.1.0"

LAYERS = {
    "adiyan.config": 0, "adiyan.config_reference": 0, "adiyan.types": 0, "adiyan.metrics": 0, "adiyan.stats": 0,
    "adiyan.cache": 1, "adiyan.store": 1, "adiyan.ingest": 1, "adiyan.chunking": 1, "adiyan.chunking_llamaindex": 1, "adiyan.models": 1,
    "adiyan.kb": 2,
    "adiyan.retrieval": 3,
    "adiyan.memory": 4, "adiyan.memory_mem0": 4, "adiyan.generation": 4,
    "adiyan.factory": 5, "adiyan.context": 5,
    "adiyan.agent": 6, "adiyan.ask": 6,
    "adiyan.report": 7,
    "adiyan.eval": 8,
    "adiyan.experiments": 9, "adiyan.testset": 9,
    "adiyan.sweeps": 10,
    "adiyan.integrations": 11,
    "adiyan.cli": 12,
}

# In a notebook kernel without ipywidgets, tqdm.auto falls back to text progress bars and says
# so in every executed notebook; the text bars are what we want.
_warnings.filterwarnings("ignore", message="IProgress not found", module="tqdm")
