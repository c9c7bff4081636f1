"""Evalsets generated from a corpus (``adiyan testset generate``) and validated against human ones
(``adiyan testset validate``); docs/testset.md."""

from .corpus import list_documents, load_corpus
from .generate import ALL_KINDS, generate, write_evalset

__all__ = ["ALL_KINDS", "generate", "list_documents", "load_corpus", "write_evalset"]
