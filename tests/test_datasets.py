"""Evaluation data as Hugging Face ``datasets``: evalsets, BEIR and QA sets, run results (issue 15)."""

from __future__ import annotations

import json
import shutil

import datasets
import pandas as pd
import pytest

from adiyan.eval.arrow import write_per_question
from adiyan.eval.beir import BeirFormatError, load_beir, load_beir_dataset, load_qa_dataset
from adiyan.eval.evalset import load_evalset
from adiyan.eval.ragas_metrics import to_ragas_dataset
from adiyan.eval.runner import run_eval
from tests.conftest import ROOT, SHARED

BASIC = ROOT / "evalsets" / "adiyan_basic"
FULL = ROOT / "evalsets" / "adiyan_full"


def _arrow_file(ds) -> str:
    files = ds.cache_files
    assert len(files) == 1, files
    return files[0]["filename"]


def test_evalset_dataset_has_one_row_per_question_with_its_fields(tmp_path):
    es = load_evalset(FULL)
    ds = es.to_dataset(cache_dir=tmp_path)
    assert isinstance(ds, datasets.Dataset)
    assert ds.num_rows == len(es.questions) == 48
    assert ds.column_names == ["id", "question", "gold_answer", "gold_sources", "answer_keywords", "kind",
                               "requester", "extra", "gold_grades"]
    for row, q in zip(ds, es.questions):
        assert (row["id"], row["question"], row["gold_answer"], row["kind"], row["requester"]) == \
            (q.id, q.question, q.gold_answer, q.kind, q.requester)
        assert row["gold_sources"] == q.gold_sources and row["answer_keywords"] == q.answer_keywords
        assert json.loads(row["extra"]) == q.extra
        assert json.loads(row["gold_grades"]) == q.gold_grades == {}  # adiyan_full's relevance is binary
    # private questions keep their requester, probes their extra field
    assert any(r["requester"] for r in ds) and any("probe_private" in json.loads(r["extra"]) for r in ds)
    # Arrow on disk, memory-mapped (not an in-memory table)
    assert _arrow_file(ds).startswith(str(tmp_path)) and ds.data.__class__.__name__ == "MemoryMappedTable"


def test_second_load_hits_the_cache_and_an_edit_changes_the_fingerprint(tmp_path):
    root = tmp_path / "set"
    shutil.copytree(BASIC, root)
    cache = tmp_path / "cache"
    first = load_evalset(root).to_dataset(cache_dir=cache)
    path = _arrow_file(first)
    mtime = (cache / path.split("/")[-2] / "data-00000-of-00001.arrow").stat().st_mtime_ns
    again = load_evalset(root).to_dataset(cache_dir=cache)
    assert _arrow_file(again) == path  # the same cached file...
    assert (cache / path.split("/")[-2] / "data-00000-of-00001.arrow").stat().st_mtime_ns == mtime  # ...not rewritten
    assert again._fingerprint == first._fingerprint
    assert len(list(cache.iterdir())) == 1
    # a document (not the questions) changes: the set's content hash, so a new dataset
    doc = root / "docs" / "faq.md"
    doc.write_text(doc.read_text(encoding="utf-8") + "\nOne more line.\n", encoding="utf-8")
    edited = load_evalset(root).to_dataset(cache_dir=cache)
    assert edited._fingerprint != first._fingerprint and _arrow_file(edited) != path
    assert len([p for p in cache.iterdir() if not p.name.startswith(".")]) == 2
    assert edited["question"] == first["question"]  # same questions, different set version


def test_beir_and_qa_sets_load_as_datasets(tmp_path):
    beir = load_beir(SHARED / "scifact")
    dd = load_beir_dataset(SHARED / "scifact", cache_dir=tmp_path)
    assert (dd["corpus"].num_rows, dd["queries"].num_rows, dd["qrels"].num_rows) == (5183, 300, 339)
    first = dd["corpus"][0]
    assert first["title"] == beir.corpus[first["_id"]]["title"] and first["text"] == beir.corpus[first["_id"]]["text"]
    q = dd["qrels"][0]
    assert beir.qrels[q["query-id"]][q["corpus-id"]] == q["score"]
    qa = load_qa_dataset(SHARED / "clapnq_dev" / "qa.jsonl", cache_dir=tmp_path)
    lines = [json.loads(x) for x in (SHARED / "clapnq_dev" / "qa.jsonl").read_text().splitlines() if x.strip()]
    assert qa.num_rows == len(lines) and qa[5]["question"] == lines[5]["question"]
    assert qa[5]["gold_passage_ids"] == lines[5]["gold_passage_ids"]
    bad = tmp_path / "bad" / "qa.jsonl"
    bad.parent.mkdir()
    bad.write_text('{"id": 1, "question": "ok"}\nnot json\n')
    with pytest.raises(BeirFormatError, match=r"qa.jsonl:2: not valid JSON"):
        load_qa_dataset(bad, cache_dir=tmp_path)


def test_ragas_evaluation_dataset_is_built_from_a_dataset():
    rows = [{"id": "a", "question": "Q?", "answer": None, "retrieved": [{"text": "ctx", "source": "o/x.md"}],
             "gold_answer": "G", "gold_sources": ["o/x.md"]},
            {"id": "b", "question": "R?", "answer": "A", "contexts": [], "retrieved_ids": [],
             "gold_answer": None, "gold_sources": []}]
    ev = to_ragas_dataset(rows)
    assert [s.user_input for s in ev] == ["Q?", "R?"]
    assert ev[0].retrieved_contexts == ["ctx"] and ev[0].retrieved_context_ids == ["o/x.md"]
    assert ev[0].response is None and ev[1].reference is None and ev[1].reference_context_ids == []


def test_per_question_parquet_keeps_nulls_floats_and_lists_exactly(tmp_path):
    rows = [{"id": "a", "question": "Q", "kind": "lookup", "hit": True, "reciprocal_rank": 1 / 3,
             "retrieve_s": 0.1 + 0.2, "context_tokens": 7, "gold_sources": ["o/x.md"], "ranked_sources": ["o/y.md", "o/x.md"],
             "retrieved": [{"source": "o/y.md", "score": 0.123456789}], "leaked_private": [],
             "ragas": {"rouge_score": 2 / 7, "exact_match": None}},
            {"id": "b", "question": "R", "kind": "unanswerable", "hit": None, "reciprocal_rank": None,
             "gold_sources": [], "retrieved": [], "leaked_private": ["k1", "k2"], "answer": "no idea"}]
    path = write_per_question(rows, tmp_path / "per_question.parquet")
    got = datasets.Dataset.from_parquet(str(path)).to_list()
    frame = pd.read_parquet(path)
    assert frame.loc[0, "reciprocal_rank"] == 1 / 3 and pd.isna(frame.loc[1, "reciprocal_rank"])
    assert list(frame.loc[0, "ranked_sources"]) == ["o/y.md", "o/x.md"] and len(frame) == len(got) == 2
    assert got[0]["reciprocal_rank"] == 1 / 3 and got[0]["retrieve_s"] == 0.1 + 0.2  # bit for bit
    assert got[0]["retrieved_scores"] == [0.123456789] and got[0]["ranked_sources"] == ["o/y.md", "o/x.md"]
    assert got[0]["ragas.rouge_score"] == 2 / 7 and got[0]["ragas.exact_match"] is None
    assert got[1]["hit"] is None and got[1]["reciprocal_rank"] is None and got[1]["leaked_private"] == 2
    assert got[1]["answer"] == "no idea" and got[0]["answer"] is None and got[1]["ragas.rouge_score"] is None


@pytest.mark.slow  # a whole invoke eval of adiyan_basic from cold: ~40-110 s on 2 busy cores
def test_eval_writes_per_question_parquet_that_round_trips(make_settings):
    s = make_settings(**{"eval.evalset": str(BASIC), "eval.generate": False, "eval.judge": None,
                         "eval.incidents": False})
    run = run_eval(s, progress=False, run_id="pq")
    rows = [json.loads(x) for x in (run / "questions.jsonl").read_text().splitlines()]
    by_pandas = pd.read_parquet(run / "per_question.parquet")
    by_datasets = datasets.Dataset.from_parquet(str(run / "per_question.parquet"))
    loaded = datasets.load_dataset("parquet", data_files=str(run / "per_question.parquet"), split="train",
                                   cache_dir=str(run / "hf"))
    assert len(by_pandas) == by_datasets.num_rows == loaded.num_rows == len(rows) == 16
    assert loaded.to_list() == by_datasets.to_list()
    for r, d, (_, p) in zip(rows, by_datasets, by_pandas.iterrows()):
        for k in ("id", "question", "kind", "hit", "reciprocal_rank", "context_tokens", "retrieve_s",
                  "gold_sources", "ranked_sources"):
            assert d[k] == r[k], k  # exact: floats bit for bit
        assert d["retrieved_sources"] == [c["source"] for c in r["retrieved"]]
        assert d["retrieved_scores"] == [c["score"] for c in r["retrieved"]]
        assert d["leaked_private"] == len(r["leaked_private"]) == 0
        for name, v in r["ragas"].items():
            assert d[f"ragas.{name}"] == v, name
        assert p["id"] == r["id"] and (p["reciprocal_rank"] == r["reciprocal_rank"]
                                       or (r["reciprocal_rank"] is None and pd.isna(p["reciprocal_rank"])))
    # an unanswerable question keeps its nulls (not 0 / False)
    una = [d for d in by_datasets if d["kind"] == "unanswerable"]
    assert una and all(d["hit"] is None and d["reciprocal_rank"] is None for d in una)
