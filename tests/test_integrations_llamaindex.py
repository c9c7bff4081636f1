"""adiyan.integrations.llamaindex: a real LlamaIndex index, built offline over our embedder, scored
with our metrics (issue 15). Real models throughout (MiniLM, SmolLM2); no test doubles."""

from __future__ import annotations

import json

import pytest
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.node_parser import SentenceSplitter

from adiyan.chunking_llamaindex import wrap_embedder
from adiyan import metrics as M
from adiyan.eval.evalset import load_evalset
from adiyan.integrations.llamaindex import AdiyanLLM, SourceMappingError, evaluate_llamaindex
from tests.conftest import ROOT

BASIC = ROOT / "evalsets" / "adiyan_basic"


@pytest.fixture(scope="module")
def basic_index(minilm):
    es = load_evalset(BASIC)
    docs = [Document(text=d.path.read_text(encoding="utf-8"), metadata={"file_name": d.filename})
            for d in es.documents]
    index = VectorStoreIndex.from_documents(docs, embed_model=wrap_embedder(minilm),
                                            transformations=[SentenceSplitter(chunk_size=120, chunk_overlap=15)])
    return es, index


@pytest.mark.slow  # indexes adiyan_basic, retrieves every question twice, writes the report: ~70 s busy
def test_adapter_hit_rate_equals_the_hand_count_over_the_retrievers_raw_nodes(basic_index, tmp_path):
    es, index = basic_index
    retriever = index.as_retriever(similarity_top_k=10)
    run = evaluate_llamaindex(retriever, es, k=4, reports_dir=tmp_path, run_id="li", progress=False)
    hits, rrs = [], []
    for q in es.questions:
        if not q.answerable:
            continue
        files = [n.node.metadata["file_name"] for n in retriever.retrieve(q.question)]
        assert len(files) == 10
        top = [f"adiyan-office/{f}" for f in files[:4]]  # adiyan_basic: every document is adiyan-office's
        hits.append(any(s in q.gold_sources for s in top))
        rrs.append(next((1 / r for r, s in enumerate(top, 1) if s in q.gold_sources), 0.0))
    ret = run.metrics["retrieval"]
    assert ret["hit_rate@4"] == pytest.approx(sum(hits) / len(hits), abs=1e-6)
    assert ret["mrr@4"] == pytest.approx(sum(rrs) / len(rrs), abs=1e-6)
    assert len(hits) == 14  # 16 questions, two unanswerable
    assert run.metrics["privacy"]["private_chunks_leaked"] == 0
    # written as one of our runs: every metric registered, the report and the run index list it
    for group, vals in run.metrics.items():
        for name in vals:
            M.lookup(group, name)
    m = json.loads((run.run_dir / "metrics.json").read_text())
    assert m["dataset"]["hash"] == es.content_hash() and m["metrics"]["retrieval"] == ret
    assert "li" in (tmp_path / "index.html").read_text() and (run.run_dir / "report.html").is_file()
    assert (run.run_dir / "per_question.parquet").is_file()


def test_a_node_without_the_source_key_is_named(basic_index):
    es, index = basic_index
    with pytest.raises(SourceMappingError, match=r"no metadata key 'source_filename' \(has \['file_name'\]\)"):
        evaluate_llamaindex(index.as_retriever(similarity_top_k=3), es, source_key="source_filename",
                            reports_dir=None, progress=False)
    with pytest.raises(TypeError, match="neither a LlamaIndex BaseRetriever nor a BaseQueryEngine"):
        evaluate_llamaindex(index, es, reports_dir=None, progress=False)


def test_private_documents_another_owner_retrieves_count_as_leaks(minilm, tmp_path):
    root = tmp_path / "set"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "public.md").write_text("The office opens at nine in the morning on weekdays.\n")
    (root / "docs" / "salary.md").write_text("Alice's salary is 4,200 euros a month, paid on the 25th.\n")
    (root / "manifest.yaml").write_text(
        "name: leak\nquestions: questions.jsonl\ndocuments:\n"
        "  - {file: docs/public.md, owner: office, visibility: global}\n"
        "  - {file: docs/salary.md, owner: alice, visibility: private}\n")
    rows = [{"id": "p1", "question": "What is Alice's salary?", "gold_answer": "", "gold_sources": [],
             "answer_keywords": [], "kind": "private", "requester": "bob", "probe_private": "salary.md"},
            {"id": "p2", "question": "What is my salary?", "gold_answer": "4,200 euros", "gold_sources": ["salary.md"],
             "answer_keywords": ["4,200"], "kind": "private", "requester": "alice"}]
    (root / "questions.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    es = load_evalset(root)
    docs = [Document(text=d.path.read_text(), metadata={"file_name": d.filename}) for d in es.documents]
    index = VectorStoreIndex.from_documents(docs, embed_model=wrap_embedder(minilm))
    run = evaluate_llamaindex(index.as_retriever(similarity_top_k=2), es, k=2, reports_dir=None, progress=False)
    # LlamaIndex has no access filter: bob's probe gets alice's private document (1 leaked node), alice's
    # own question gets it too and that is no leak
    assert run.metrics["privacy"] == {"private_chunks_leaked": 1, "probe_questions": 1, "probes_leaked": 1,
                                      "probes_owner_retrieved": 1.0}
    assert run.metrics["retrieval"]["hit_rate@2"] == 1.0


@pytest.mark.slow
def test_a_query_engine_answering_with_the_embedded_llm_is_scored(basic_index, smollm2, tmp_path):
    es, index = basic_index
    ids = ["q01", "q02", "q03"] if {"q01", "q02", "q03"} <= {q.id for q in es.questions} \
        else [q.id for q in es.questions if q.answerable][:3]
    engine = index.as_query_engine(llm=AdiyanLLM(smollm2, max_tokens=64), similarity_top_k=4)
    run = evaluate_llamaindex(engine, es, k=4, question_ids=ids, reports_dir=tmp_path, run_id="qe", progress=False)
    assert [r["id"] for r in run.rows] == ids
    retriever = index.as_retriever(similarity_top_k=4)
    questions = {q.id: q for q in es.questions}
    for r in run.rows:
        q = questions[r["id"]]
        assert isinstance(r["answer"], str) and r["answer"].strip()
        assert r["keyword_hit"] == M.keyword_hit(r["answer"], q.answer_keywords)
        # the engine's context is the retriever's top 4, in order
        assert [c["node_id"] for c in r["retrieved"]] == [n.node.node_id for n in retriever.retrieve(q.question)]
        assert set(r["ragas"]) >= {"rouge_score", "exact_match", "id_based_context_recall"}
    ans = run.metrics["answer"]
    assert ans["keyword_recall"] == pytest.approx(sum(r["keyword_hit"] for r in run.rows) / 3, abs=1e-6)
    assert run.metrics["ragas"]["id_based_context_recall"] is not None
