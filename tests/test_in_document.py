"""Questions with ``within`` are retrieved through search_within_document and scored by chunk.

A hand-built evalset: ``rates.md`` has three heading sections (the auto chunker splits authored
Markdown on headings, so each is one chunk: #0 boats, #1 bikes, #2 locker), ``other.md`` a
competing kayak price, ``secret.md`` is private to guide-gorazd. Every expected chunk key, hit
and nDCG below is worked out from those texts.
"""

from __future__ import annotations

import json
import math

import pytest
import yaml

from adiyan.config import load_settings
from adiyan.eval.evalset import EvalsetError, load_evalset
from adiyan.eval.harness import close_index, open_index, per_question_ir, question_rows, retrieval_metrics
from adiyan.factory import open_retriever

RATES = """# Boats

Kayak rental costs 38 euros per day at the boathouse on the north shore of the lake.

# Bikes

Bike rental costs 21 euros per day, helmet included, from the shop beside the church.

# Lockers

The boathouse locker code for guests is OTTER-4471 and it changes every spring.
"""
OTHER = "# Other shop\n\nKayak rental at the Riverside shop costs 52 euros per day.\n"
SECRET = "# Notes of Gorazd\n\nMy own boathouse locker code is BEAVER-9120.\n"
OFFICE = "adiyan-office"

QUESTIONS = [
    # one relevant chunk: the bikes section (#1)
    {"id": "bike", "question": "How much is bike rental per day?", "gold_answer": "21 euros",
     "gold_sources": ["rates.md"], "answer_keywords": ["21 euros"], "kind": "in_document", "within": "rates.md"},
    # two relevant chunks: "euros per day" is in the boats (#0) and bikes (#1) sections
    {"id": "per-day", "question": "What costs euros per day?", "gold_answer": "kayaks and bikes",
     "gold_sources": ["rates.md"], "answer_keywords": ["euros per day"], "kind": "in_document", "within": "rates.md"},
    # the same kayak question knowledge-base-wide and scoped: scoped, other.md can never come back
    {"id": "kayak-kb", "question": "What does kayak rental cost per day?", "gold_answer": "38 euros",
     "gold_sources": ["rates.md"], "answer_keywords": ["38 euros"], "kind": "lookup"},
    {"id": "kayak-in", "question": "What does kayak rental cost per day?", "gold_answer": "38 euros",
     "gold_sources": ["rates.md"], "answer_keywords": ["38 euros"], "kind": "in_document", "within": "rates.md"},
    # a private document named by someone who may not see it: missing, nothing retrieved, nothing leaked
    {"id": "secret-other", "question": "What is the locker code?", "gold_answer": "BEAVER-9120",
     "gold_sources": ["secret.md"], "answer_keywords": ["BEAVER-9120"], "kind": "in_document", "within": "secret.md"},
    {"id": "secret-owner", "question": "What is the locker code?", "gold_answer": "BEAVER-9120",
     "gold_sources": ["secret.md"], "answer_keywords": ["BEAVER-9120"], "kind": "in_document", "within": "secret.md",
     "requester": "guide-gorazd"},
]


def _evalset(root, questions):
    (root / "docs").mkdir(parents=True, exist_ok=True)
    for name, text in (("rates.md", RATES), ("other.md", OTHER), ("secret.md", SECRET)):
        (root / "docs" / name).write_text(text, encoding="utf-8")
    manifest = {"name": root.name, "documents": [
        {"file": "docs/rates.md", "owner": OFFICE, "visibility": "global"},
        {"file": "docs/other.md", "owner": OFFICE, "visibility": "global"},
        {"file": "docs/secret.md", "owner": "guide-gorazd", "visibility": "private"}], "questions": "questions.jsonl"}
    (root / "manifest.yaml").write_text(yaml.safe_dump(manifest), encoding="utf-8")
    (root / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions), encoding="utf-8")
    return load_evalset(root)


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    root = tmp_path_factory.mktemp("indoc")
    es = _evalset(root / "set", QUESTIONS)
    s = load_settings(None, {"paths.data_dir": str(root / "data")})
    index = open_index(s, es)
    try:
        qr = question_rows(index, open_retriever(s, index.kb))
        n_rates = index.kb.count_chunks(f"{OFFICE}/rates.md")
    finally:
        close_index(index)
    return qr, {r["id"]: r for r in qr.rows}, n_rates, s


def test_scoped_rows_retrieve_only_their_document(scored):
    qr, rows, n_rates, s = scored
    assert n_rates == 3  # one chunk per heading section, as the docstring's chunk numbers assume
    for qid in ("bike", "per-day", "kayak-in"):
        r = rows[qid]
        assert r["within"] == f"{OFFICE}/rates.md" and r["within_found"] is True
        assert {c["source"] for c in r["retrieved"]} == {f"{OFFICE}/rates.md"}
        assert len(r["retrieved"]) == 3  # k = 4, but the document has 3 chunks
    # the same question knowledge-base-wide sees the other shop's kayak price too
    assert f"{OFFICE}/other.md" in {c["source"] for c in rows["kayak-kb"]["retrieved"]}
    assert "within" not in rows["kayak-kb"]


def test_relevance_is_the_chunks_holding_the_keywords_by_hand(scored):
    qr, rows, _, _ = scored
    assert rows["bike"]["relevant_chunks"] == [f"{OFFICE}/rates.md#1"]
    assert rows["per-day"]["relevant_chunks"] == [f"{OFFICE}/rates.md#0", f"{OFFICE}/rates.md#1"]
    assert qr.qrels["bike"] == {f"{OFFICE}/rates.md#1": 1}
    ir = per_question_ir(qr)
    for qid in ("bike", "per-day"):
        ranks = [i for i, c in enumerate(rows[qid]["retrieved"], 1) if f"{c['source']}#{c['chunk_index']}"
                 in rows[qid]["relevant_chunks"]]
        dcg = sum(1 / math.log2(r + 1) for r in ranks)
        idcg = sum(1 / math.log2(r + 1) for r in range(1, len(rows[qid]["relevant_chunks"]) + 1))
        assert ir["ndcg@10"][qid] == pytest.approx(dcg / idcg)
        assert rows[qid]["hit"] is True and rows[qid]["reciprocal_rank"] == pytest.approx(1 / ranks[0])
    # the document-level hit of a scoped row would be 1.0 by construction; the chunk-level one is not:
    # the kb-wide row's qrels are documents, the scoped row's are chunks
    assert qr.qrels["kayak-kb"] == {f"{OFFICE}/rates.md": 1} and qr.qrels["kayak-in"] == {f"{OFFICE}/rates.md#0": 1}


def test_hidden_document_is_missing_and_nothing_leaks(scored):
    qr, rows, _, s = scored
    other, owner = rows["secret-other"], rows["secret-owner"]
    assert other["within_found"] is False and other["retrieved"] == [] and other["hit"] is False
    assert other["relevant_chunks"] == [] and other["leaked_private"] == []
    assert owner["within_found"] is True and owner["hit"] is True
    assert owner["relevant_chunks"] == ["guide-gorazd/secret.md#0"]
    priv = retrieval_metrics(qr, s.retrieval.kb_top_k)["privacy"]
    assert priv["private_chunks_leaked"] == 0
    assert per_question_ir(qr)["ndcg@10"]["secret-other"] == 0.0


def test_bad_within_is_refused_naming_the_file_and_question(tmp_path):
    es = _evalset(tmp_path / "bad", [{**QUESTIONS[0], "within": "nowhere.md"}])
    s = load_settings(None, {"paths.data_dir": str(tmp_path / "data")})
    index = open_index(s, es)
    try:
        with pytest.raises(EvalsetError, match=r"questions\.jsonl: question 'bike': within 'nowhere.md' is not a document"):
            question_rows(index, open_retriever(s, index.kb))
        es2 = _evalset(tmp_path / "nokw", [{**QUESTIONS[0], "answer_keywords": []}])
        with pytest.raises(EvalsetError, match="needs answer_keywords"):
            from dataclasses import replace

            question_rows(replace(index, evalset=es2), open_retriever(s, index.kb))
    finally:
        close_index(index)
