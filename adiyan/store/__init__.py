"""Vector stores: Qdrant's embedded engine (default) and a Qdrant server, behind one interface."""

from .base import SPARSE_NAME, CollectionMeta, Cond, Empty, LexicalEncoder, Sparse, EmbedderMismatchError, Filter, Hit, Point, StoreError, VectorStore
from .edge import EdgeStore
from .server import ServerStore, open_store

__all__ = ["SPARSE_NAME", "LexicalEncoder", "Sparse", "CollectionMeta", "Cond", "Empty", "EmbedderMismatchError", "Filter", "Hit", "Point", "StoreError",
           "VectorStore", "EdgeStore", "ServerStore", "open_store"]
