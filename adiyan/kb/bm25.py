"""BM25 statistics from the corpus, for the knowledge base (a mixin of ``KnowledgeBase``).

A BM25 document weight depends on the document's length relative to the corpus average
(tf·(k+1) / (tf + k·(1 − b + b·len/avg_len))); IDF is applied by the engine at query time. The
average is measured on the stored chunks (each carries its length, ``bm25_len``), kept in
``raw/bm25.json``, and when it drifts by more than ``BM25_DRIFT`` the sparse vectors are
re-encoded with the new one, so the statistics always come from the corpus itself. The
re-encoding re-upserts only each source's committed version, under the source's write lock: a
concurrent re-ingest never sees its replaced chunks written back, and a removed document's
chunks are never restored (the reads go through the committed version anyway).
"""

from __future__ import annotations

import json

from ..store.base import LexicalEncoder, Point
from ..types import OWNER


class CorpusBm25Stats:
    """Needs ``store``, ``collection``, ``raw``, ``lexical``, ``_lengths``, ``_bm25_stats`` and ``_source_lock``."""

    BM25_DRIFT = 0.10
    REENCODE_PAGE = 2000  # points re-encoded and written back at a time

    def bm25_length(self, text: str) -> int:
        """Tokens BM25 counts in ``text`` (after Qdrant's tokenizer, stop words and stemming)."""
        v = self._lengths.document(text)
        k = 1.2
        return int(sum(round(w * k / (k + 1.0 - w)) for w in v.values))

    def term_counts(self, text: str) -> dict[int, int]:
        """Each term's frequency in ``text`` by the engine's term id (Qdrant's tokenizer, stop words and
        stemming), read back from a b = 0 weight, tf·(k+1)/(tf+k): what RM3's term distributions count."""
        v = self._lengths.document(text)
        k = 1.2
        return {int(t): int(round(w * k / (k + 1.0 - w))) for t, w in zip(v.indices, v.values)}

    def bm25_avg_len(self) -> float:
        try:
            return float(json.loads(self._bm25_stats.read_text())["avg_len"])
        except (OSError, ValueError, KeyError):
            return 256.0  # Qdrant's default until the first batch is measured

    def refresh_bm25_stats(self, *, force: bool = False) -> dict:
        """Measure the corpus's mean chunk length; re-encode the sparse vectors if it drifted."""
        lengths = [int(p.payload.get("bm25_len") or self.bm25_length(p.payload.get("text", "")))
                   for p in self.store.scroll(self.collection)]
        if not lengths:
            return {"avg_len": self.lexical_avg_len, "chunks": 0, "reencoded": 0}
        measured = max(1.0, sum(lengths) / len(lengths))
        current = self.bm25_avg_len()
        if not force and self._bm25_stats.exists() and abs(measured - current) <= self.BM25_DRIFT * current:
            return {"avg_len": current, "measured": measured, "chunks": len(lengths), "reencoded": 0}
        encoder = LexicalEncoder(avg_len=measured)
        page: dict[str, list[Point]] = {}

        def write_page() -> None:
            for source, points in page.items():
                # under the source's write lock, and only the committed version: a concurrent
                # re-ingest must never see its replaced chunks written back
                with self._source_lock(source):
                    rec = self.raw.get(source, OWNER)
                    keep = [p for p in points if rec is None and not p.payload.get("doc_version")
                            or rec is not None and p.payload.get("doc_version") == rec.doc_version]
                    if keep:
                        self.store.upsert(self.collection, keep)
            page.clear()

        # page by page: a million chunks with their vectors would not fit in memory at once (each
        # point is written back whole, under the same per-source check, whichever page it is on)
        for n, p in enumerate(self.store.scroll(self.collection, with_vectors=True), 1):
            p.sparse = encoder.document(p.payload.get("text", ""))
            p.payload.setdefault("bm25_len", self.bm25_length(p.payload.get("text", "")))
            page.setdefault(p.payload.get("source_filename", ""), []).append(p)
            if n % self.REENCODE_PAGE == 0:
                write_page()
        write_page()
        tmp = self._bm25_stats.with_suffix(".tmp")
        tmp.write_text(json.dumps({"avg_len": measured, "chunks": len(lengths)}))
        tmp.replace(self._bm25_stats)
        self.lexical = encoder
        return {"avg_len": measured, "previous": current, "chunks": len(lengths), "reencoded": len(lengths)}

    @property
    def lexical_avg_len(self) -> float:
        return self.bm25_avg_len()
