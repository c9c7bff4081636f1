"""Questions scoped to one document (``within`` in a question row): retrieved and scored in that document.

A row with ``"within": "<file name>"`` (the ``in_document`` kind of ``adiyan testset generate``, or
any hand-written row) asks about one document, the way the agent's ``search_within_document`` tool
or ``adiyan search --within`` does. Retrieving it knowledge-base-wide would score a different read
path than the one the kind names, so such a question goes through
:meth:`Retriever.search_within_document` (its requester's access check first: a document the
requester may not see is a ``DocumentNotFound``, scored as an empty retrieval) with the run's k.

Inside one document every chunk has the gold source, so a document-level hit would always be
true. The unit of relevance is the chunk instead: a chunk is relevant when it holds every answer
keyword (case-insensitive, :func:`adiyan.eval.metrics.keyword_hit`), which does not depend on how
the run chunked the document. ``hit`` / ``reciprocal_rank`` read the top k of the scoped ranking;
nDCG / recall at depth read the ranking against every relevant chunk of the document, enumerated
by one exact dense search of the knowledge base restricted to the document under the requester's
access filter (:meth:`KnowledgeBase.search`).

:func:`retrieve_question` is what the evaluation harness calls per question; it returns ``None``
as the scoring for a question without ``within`` (scored knowledge-base-wide as before).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..kb import DocumentNotFound
from ..types import RetrievalResult
from .. import metrics as M
from .evalset import EvalsetError

NO_RELEVANT_CHUNK = "<no chunk of the document holds the answer keywords>"


@dataclass
class ScopedScore:
    """How a ``within`` question is scored: chunk keys (``source#chunk_index``), not sources."""

    within: str  # the document's source key (owner/file)
    hit: bool | None  # None for an unanswerable row
    reciprocal_rank: float | None
    qrels: dict[str, int] = field(default_factory=dict)  # relevant chunks of the document
    run: dict[str, float] = field(default_factory=dict)  # the scoped ranking, 1/rank per chunk
    found: bool = True  # False: the document is missing or hidden for this requester

    def row_fields(self) -> dict:
        """Extra columns of the question's row (only rows with ``within`` get them)."""
        return {"within": self.within, "within_found": self.found,
                "relevant_chunks": sorted(k for k in self.qrels if k != NO_RELEVANT_CHUNK)}


def within_key(question, evalset) -> str | None:
    """The source key (owner/file) of the row's ``within`` document; None when the row has none.
    EvalsetError naming the questions file and the row when it names no document of the manifest,
    or when an answerable row has no answer keywords (its relevant chunks could not be told)."""
    name = question.extra.get("within")
    if name is None:
        return None
    where = f"{Path(evalset.root) / getattr(evalset, '_questions_file', 'questions.jsonl')}: question {question.id!r}"
    keys = {d.filename: d.source_key for d in evalset.documents}
    if name not in keys:
        raise EvalsetError(f"{where}: within {name!r} is not a document of the manifest")
    if question.answerable and not question.answer_keywords:
        raise EvalsetError(f"{where}: an in-document question (within) needs answer_keywords: its relevant "
                           "chunks are the document's chunks holding them")
    return keys[name]


def relevant_chunks(kb, source: str, question: str, keywords: list[str], requester: str) -> dict[str, int]:
    """Every chunk of ``source`` the requester may see that holds all ``keywords``: one exact dense
    search restricted to the document, as deep as the document has chunks."""
    n = max(1, kb.count_chunks(source))
    chunks = kb.search(question, n, requester=requester, within=source, mode="dense", exact=True)
    return {c.key: 1 for c in chunks if M.keyword_hit(c.text, keywords)}


def retrieve_question(retriever, question, requester: str, evalset) -> tuple[RetrievalResult, ScopedScore | None]:
    """Retrieve one evalset question as ``requester``: knowledge-base-wide (scoring None), or, for a
    row with ``within``, through ``search_within_document`` at the run's k with its chunk-level scoring."""
    src = within_key(question, evalset)
    k = retriever.config.kb_top_k
    if src is None:
        return retriever.retrieve(question.question, requester), None
    try:
        res = retriever.search_within_document(src, question.question, requester, top_k=k)
        found = True
    except DocumentNotFound:  # hidden or missing: nothing is retrieved, the question is missed
        res = RetrievalResult(question.question, [], retriever.floor, mode=retriever.config.mode)
        found = False
    if not question.answerable:
        return res, ScopedScore(src, None, None, found=found)
    qrels = relevant_chunks(retriever.kb, src, question.question, question.answer_keywords, requester) if found else {}
    if not qrels:  # ranx needs a relevant id; this one is never retrieved, so every metric is 0
        qrels = {NO_RELEVANT_CHUNK: 1}
    top = res.chunks[:k]
    holds = [c.key in qrels for c in top]
    rr = next((1.0 / r for r, h in enumerate(holds, 1) if h), 0.0)
    run: dict[str, float] = {}
    for rank, c in enumerate(res.ranked, 1):
        run.setdefault(c.key, 1.0 / rank)
    return res, ScopedScore(src, any(holds), rr, qrels, run, found)
