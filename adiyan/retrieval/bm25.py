"""BM25 over bm25s (Lù, 2024, https://github.com/xhluca/bm25s): sparse lexical retrieval.

Defaults are the ones that reproduced SciFact's published BM25 figure on our copy (0.676
nDCG@10 vs 0.665-0.680 published): Lucene's BM25 variant with k1=0.9, b=0.4 (Anserini's
defaults), lower-casing, bm25s' English stopword list, the Snowball English stemmer from
PyStemmer, and ``title + " " + text`` as the document (BEIR's convention). The retriever takes
ids and texts; indexing a BEIR corpus is ``adiyan.eval.beir_runs.index_corpus``.

Scores are computed for the whole corpus per query and cut to the top k with ties broken by
document id; documents that share no term with the query (score 0) are not returned.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from .dense import id_ranks, top_k_positions



def _bm25s():
    """bm25s, imported on first use. It sets its logger to DEBUG on import and logs every index build, which
    any handler a dependency puts on the root logger then prints (one line per memory search: the memory's
    BM25 index is per user); its logger is put back to WARNING."""
    import bm25s  # heavy: bm25s (and scipy) load only when BM25 runs

    logging.getLogger("bm25s").setLevel(logging.WARNING)
    return bm25s

Run = dict[str, dict[str, float]]
_META = "adiyan_bm25.json"


def _stemmer(language: str | None):
    if not language:
        return None
    try:
        import Stemmer  # optional native stemmer, loaded only when a BM25 index is built
    except ImportError as exc:  # pragma: no cover - PyStemmer is in requirements.txt
        raise ImportError("BM25 stemming needs PyStemmer (pip install PyStemmer)") from exc
    return Stemmer.Stemmer(language)


class BM25Retriever:
    """index / retrieve / save / load, with external string ids."""

    def __init__(self, *, k1: float = 0.9, b: float = 0.4, method: str = "lucene",
                 stemmer: str | None = "english", stopwords: str | list[str] | None = "en"):
        self.k1, self.b, self.method = k1, b, method
        self.stemmer_language = stemmer
        self.stopwords = stopwords
        self._stemmer = _stemmer(stemmer)
        self._bm25 = None
        self.ids: list[str] = []
        self._id_rank = np.zeros(0, dtype=np.int64)

    def config(self) -> dict:
        return {"k1": self.k1, "b": self.b, "method": self.method, "stemmer": self.stemmer_language,
                "stopwords": self.stopwords, "tokenizer": "bm25s.tokenize (lowercase, \\b\\w\\w+\\b)"}

    def _tokenize(self, texts: Sequence[str]) -> list[list[str]]:
        bm25s = _bm25s()

        return bm25s.tokenize(list(texts), lower=True, stopwords=self.stopwords or [], stemmer=self._stemmer,
                              return_ids=False, show_progress=False)

    def index(self, ids: Sequence[str], texts: Sequence[str], *, show_progress: bool = False) -> "BM25Retriever":
        bm25s = _bm25s()

        ids = [str(i) for i in ids]
        if len(ids) != len(texts):
            raise ValueError(f"BM25Retriever.index: {len(ids)} ids but {len(texts)} texts")
        if len(set(ids)) != len(ids):
            raise ValueError("BM25Retriever.index: document ids must be unique")
        self._bm25 = bm25s.BM25(k1=self.k1, b=self.b, method=self.method)
        self._bm25.index(self._tokenize(texts), show_progress=show_progress)
        self.ids = ids
        self._id_rank = id_ranks(ids)
        return self

    def _require_index(self):
        if self._bm25 is None:
            raise RuntimeError("BM25Retriever: call index() or load() first")
        return self._bm25

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every indexed document for one query (0 where no term matches)."""
        bm = self._require_index()
        token_ids = bm.get_tokens_ids(self._tokenize([query])[0])  # out-of-vocabulary terms drop out
        if not token_ids:
            return np.zeros(len(self.ids), dtype=np.float32)
        return np.asarray(bm.get_scores_from_ids(token_ids), dtype=np.float32)

    def retrieve(self, queries: Mapping[str, str] | Sequence[str], k: int = 100) -> Run:
        """{query id: {doc id: score}}, best first; a list of queries gets ids "0", "1", ..."""
        if not isinstance(queries, Mapping):
            queries = {str(i): q for i, q in enumerate(queries)}
        run: Run = {}
        for qid, text in queries.items():
            s = self.scores(text)
            top = top_k_positions(s, k, self._id_rank, s > 0)
            run[str(qid)] = {self.ids[i]: float(s[i]) for i in top}
        return run

    def save(self, path: str | os.PathLike) -> Path:
        path = Path(path)
        self._require_index().save(str(path), show_progress=False)
        meta = {"config": self.config(), "ids": self.ids}
        (path / _META).write_text(json.dumps(meta), encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "BM25Retriever":
        bm25s = _bm25s()

        path = Path(path)
        meta_path = path / _META
        if not meta_path.is_file():
            raise FileNotFoundError(f"{meta_path}: not a BM25Retriever folder (save() writes it)")
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        cfg = meta["config"]
        self = cls(k1=cfg["k1"], b=cfg["b"], method=cfg["method"], stemmer=cfg["stemmer"],
                   stopwords=cfg["stopwords"])
        self._bm25 = bm25s.BM25.load(str(path), load_corpus=False, show_progress=False)
        self.ids = list(meta["ids"])
        self._id_rank = id_ranks(self.ids)
        return self
