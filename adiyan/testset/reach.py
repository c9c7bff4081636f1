"""Is a generated question's gold reachable at all? Dense and BM25 over the corpus's own chunks.

The check the generator uses to flag (not drop) a question whose gold document no configuration
would find: its gold document must be in the top :data:`DEPTH` documents (each scored by its best
chunk) of at least one of dense cosine (the configured embedder: the chunk embeddings are the ones
the index stores, so they come from the embedding cache when the set is later evaluated) and BM25
(:class:`adiyan.retrieval.bm25.BM25Retriever`), over the chunks the requester may see.
"""

from __future__ import annotations

import numpy as np

from ..retrieval.bm25 import BM25Retriever

DEPTH = 10  # adiyan.eval.harness.IR_DEPTH: the depth every ranking metric of the evaluation reads
ANONYMOUS = "eval-user"


class Reach:
    def __init__(self, corpus, embedder):
        pairs = corpus.chunks()
        self.files = [d.file for d, _ in pairs]
        self.owner = np.asarray([d.owner for d, _ in pairs])
        self.public = np.asarray([d.visibility == "global" for d, _ in pairs])
        texts = [c.text for _, c in pairs]
        vecs = np.asarray(embedder.embed(texts, "document"), dtype=np.float32)
        self.vecs = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
        self.embedder = embedder
        self.bm25 = BM25Retriever().index([str(i) for i in range(len(texts))], texts)

    def _top_files(self, scores: np.ndarray, visible: np.ndarray) -> set[str]:
        order = np.lexsort((np.arange(len(scores)), -scores))
        out: list[str] = []
        for i in order:
            if not visible[i]:
                continue
            f = self.files[i]
            if f not in out:
                out.append(f)
                if len(out) >= DEPTH:
                    break
        return set(out)

    def reachable(self, question: str, requester: str | None, gold: set[str]) -> bool:
        visible = self.public | (self.owner == (requester or ANONYMOUS))
        q = np.asarray(self.embedder.embed([question], "query"), dtype=np.float32)[0]
        q = q / (np.linalg.norm(q) or 1.0)
        if self._top_files(self.vecs @ q, visible) & gold:
            return True
        s = self.bm25.scores(question)
        s = np.where(s > 0, s, -np.inf)  # a chunk sharing no term with the question is not retrieved
        return bool(self._top_files(s, visible & np.isfinite(s)) & gold)
