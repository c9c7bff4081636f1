"""Vector stores: Qdrant's embedded engine (default) and a Qdrant server, behind one interface."""

from .base import CollectionMeta, Cond, Empty, EmbedderMismatchError, Filter, Hit, Point, StoreError, VectorStore
from .edge import EdgeStore
from .server import ServerStore, open_store

__all__ = ["CollectionMeta", "Cond", "Empty", "EmbedderMismatchError", "Filter", "Hit", "Point", "StoreError",
           "VectorStore", "EdgeStore", "ServerStore", "open_store"]
