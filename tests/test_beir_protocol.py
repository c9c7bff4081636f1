"""Any BEIR folder scores what BEIR scores (issue 28): graded relevance kept end to end, the
real downloads' format variants parsed, ``eval.beir_protocol`` (product | beir) honoured by
``invoke eval`` or refused by name, the published figures beside the run.

The nDCG figures asserted here are computed by hand in the comments; the SciFact test (slow)
reproduces the published BM25 / all-MiniLM-L6-v2 figures through the BEIR protocol.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from adiyan.eval.beir import BeirFormatError, load_beir, read_qrels
from adiyan.eval.evalset import EvalsetError, load_evalset, materialize_beir
from adiyan.eval.harness import QuestionRows, retrieval_metrics
from adiyan.eval.ir_metrics import evaluate_run
from adiyan.metrics import check_metrics
from adiyan.retrieval.pipeline import UnsupportedSetting

ROOT = Path(__file__).resolve().parents[1]
SCIFACT = ROOT.parent / "shared" / "datasets" / "scifact"
L2 = math.log2


def _authored(root: Path, grades: dict | None) -> Path:
    (root / "docs").mkdir(parents=True)
    for name in ("a.md", "b.md", "c.md", "x.md"):
        (root / "docs" / name).write_text(f"# {name}\n\ntext of {name}\n", encoding="utf-8")
    (root / "manifest.yaml").write_text(yaml.safe_dump({"name": "graded", "questions": "questions.jsonl", "documents": [
        {"file": f"docs/{n}", "owner": "office", "visibility": "global"} for n in ("a.md", "b.md", "c.md", "x.md")]}))
    row = {"id": "q1", "question": "which?", "gold_answer": "", "gold_sources": ["a.md", "b.md", "c.md"],
           "answer_keywords": [], "kind": "lookup"}
    if grades is not None:
        row["gold_grades"] = grades
    (root / "questions.jsonl").write_text(json.dumps(row) + "\n", encoding="utf-8")
    return root


def _rows(es, ranking: list[str]) -> QuestionRows:
    """Question rows as question_rows builds them, with a fixed ranking (control flow only: the
    metric path is under test, not retrieval)."""
    q = es.questions[0]
    run = {f"office/{n}": 1.0 / r for r, n in enumerate(ranking, 1)}
    row = {"id": q.id, "kind": q.kind, "hit": True, "reciprocal_rank": 1.0, "leaked_private": [],
           "probe_private": None, "needs_ocr": False}
    return QuestionRows([row], {q.id: run}, {q.id: q.relevance()})


def test_graded_gold_sources_give_the_hand_computed_ndcg(tmp_path):
    """Grades a=2, b=1, c=1; ranking b, x, a, c.
    graded DCG = 1/log2(2) + 0 + 2/log2(4) + 1/log2(5) = 2.430677; ideal (2, 1, 1) = 2 + 1/log2(3) + 1/log2(4)
    = 3.130930 -> nDCG@10 0.776343. Binary (every grade 1): DCG 1 + 1/2 + 1/log2(5) = 1.930677, ideal
    1 + 1/log2(3) + 1/2 = 2.130930 -> 0.906025. Recall@10 is 1 either way."""
    graded_dcg = 1 + 2 / L2(4) + 1 / L2(5)
    graded_ideal = 2 + 1 / L2(3) + 1 / L2(4)
    es = load_evalset(_authored(tmp_path / "g", {"a.md": 2}))
    assert es.questions[0].relevance() == {"office/a.md": 2, "office/b.md": 1, "office/c.md": 1}
    assert es.relevance["kind"] == "graded" and es.relevance["grades"] == [1, 2]
    m = retrieval_metrics(_rows(es, ["b.md", "x.md", "a.md", "c.md"]), 4)["retrieval"]
    assert m["ndcg@10"] == pytest.approx(graded_dcg / graded_ideal, abs=1e-6)
    assert m["ndcg@10"] == pytest.approx(0.776343, abs=1e-6)
    assert m["recall@10"] == 1.0
    binary = load_evalset(_authored(tmp_path / "b", None))
    assert binary.relevance["kind"] == "binary"
    mb = retrieval_metrics(_rows(binary, ["b.md", "x.md", "a.md", "c.md"]), 4)["retrieval"]
    assert mb["ndcg@10"] == pytest.approx(0.906025, abs=1e-6)


@pytest.mark.parametrize("grades, why", [({"x.md": 2}, "not one of its gold_sources"), ({"a.md": 0}, "integer >= 1"),
                                         ({"a.md": 1.5}, "integer >= 1"), (["a.md"], "must map")])
def test_bad_gold_grades_are_refused_naming_the_file_and_line(tmp_path, grades, why):
    root = _authored(tmp_path / "bad", grades)
    with pytest.raises(EvalsetError, match=rf"questions.jsonl:1: .*{why}"):
        load_evalset(root)


def _beir_folder(root: Path, *, crlf: bool = True, bom: bool = True) -> Path:
    """A BEIR folder as the official zips write it: CRLF line endings, plus the variants seen in other
    downloads (a byte-order mark, quoted ids, 1.0 scores), graded 0/1/2 like NFCorpus."""
    nl = "\r\n" if crlf else "\n"
    (root / "qrels").mkdir(parents=True)
    docs = {"d1": ("Boots", "Sturdy hiking boots keep feet dry in the rain on the mountain trail."),
            "d2": ("Jackets", "A rain jacket and boots: what to pack for a wet mountain hike."),
            "d3": ("Refunds", "Form RF-22 requests a refund from the office within 14 days."),
            "d 4": ("Hotels", "Guests sleep at the hut on the second night of the trek."),
            "d5": ("Lunch", "Lunch on the hike is a picnic by the lake.")}
    body = nl.join(json.dumps({"_id": i, "title": t, "text": x}) for i, (t, x) in docs.items()) + nl
    (root / "corpus.jsonl").write_bytes(((("\ufeff" if bom else "") + body)).encode("utf-8"))
    queries = {"q1": "what boots to pack for a rain hike", "q2": "refund form", "q3": "where do guests sleep"}
    (root / "queries.jsonl").write_bytes((nl.join(json.dumps({"_id": q, "text": t}) for q, t in queries.items())
                                          + nl).encode("utf-8"))
    qrels = ["query-id\tcorpus-id\tscore", '"q1"\t"d1"\t2', "q1\td2\t1.0", "q1\td5\t0", "q2\td3\t1",
             'q3\t"d 4"\t2']
    (root / "qrels" / "test.tsv").write_bytes(((("\ufeff" if bom else "") + nl.join(qrels) + nl)).encode("utf-8"))
    return root


def test_a_beir_folder_with_crlf_bom_and_quoted_ids_keeps_its_grades(tmp_path, monkeypatch):
    monkeypatch.setenv("ADIYAN_EVALSET_CACHE", str(tmp_path / "evalsets"))
    folder = _beir_folder(tmp_path / "graded")
    assert (folder / "qrels" / "test.tsv").read_bytes().count(b"\r\n") == 6  # the fixture really is CRLF
    data = load_beir(folder)
    assert data.qrels == {"q1": {"d1": 2, "d2": 1, "d5": 0}, "q2": {"d3": 1}, "q3": {"d 4": 2}}
    assert set(data.corpus) == {"d1", "d2", "d3", "d 4", "d5"} and data.corpus["d1"]["title"] == "Boots"
    es = load_evalset(folder)
    by_id = {q.id: q for q in es.questions}
    assert by_id["q1"].relevance() == {"adiyan-office/d1.md": 2, "adiyan-office/d2.md": 1}  # grade 0: not gold
    assert by_id["q3"].relevance() == {"adiyan-office/d%204.md": 2}
    assert es.beir == {"name": "graded", "split": "test", "docs": 5, "queries": 3}
    assert es.relevance["kind"] == "graded"
    # the LF copy of the same folder parses to the same judgements
    assert read_qrels(_beir_folder(tmp_path / "lf", crlf=False, bom=False) / "qrels" / "test.tsv") == data.qrels


@pytest.mark.parametrize("line, why", [("q1\td1\thigh", "not a number"), ("q1\td1\t1.5", "not a whole number"),
                                       ("q1\td1", "expected 'query-id<TAB>corpus-id<TAB>score'")])
def test_bad_qrels_lines_name_the_file_and_line(tmp_path, line, why):
    path = tmp_path / "test.tsv"
    path.write_text(f"query-id\tcorpus-id\tscore\r\nq0\td0\t1\r\n{line}\r\n", encoding="utf-8")
    with pytest.raises(BeirFormatError, match=rf"test.tsv:3: .*{why}"):
        read_qrels(path)


def test_trec_style_qrels_are_read(tmp_path):
    path = tmp_path / "qrels.txt"
    path.write_text("301 0 FBIS3-10082 1\n301 0 FBIS3-10169 2\n302 0 X 0\n", encoding="utf-8")
    assert read_qrels(path) == {"301": {"FBIS3-10082": 1, "FBIS3-10169": 2}, "302": {"X": 0}}


# -- invoke eval on a BEIR folder, both protocols ----------------------------------------------------

def _settings(make_settings, folder, **kw):
    return make_settings(**{"eval.evalset": str(folder), "eval.generate": False, "eval.judge": None,
                            "eval.incidents": False, "retrieval.rank_depth": 100, **kw})


@pytest.mark.slow  # a whole invoke eval with both protocols: 20 s of the default suite (CI runs it)
def test_invoke_eval_reports_both_protocols_beside_the_published_figures(tmp_path, monkeypatch, make_settings):
    """BM25 over the graded folder: metrics.beir holds the product's and the BEIR protocol's graded nDCG@10
    and Recall@100, the published figure from a published.yaml beside the folder, and the deltas. The BEIR
    protocol's figure equals the NumPy cross-check on the graded qrels (not the binary ones, which differ)."""
    from adiyan.eval.beir_runs import reference_runs
    from adiyan.eval.runner import run_eval

    monkeypatch.setenv("ADIYAN_EVALSET_CACHE", str(tmp_path / "evalsets"))
    folder = _beir_folder(tmp_path / "graded")
    (folder / "published.yaml").write_text(yaml.safe_dump({"docs": 5, "queries": 3, "figures": {"bm25": {
        "ndcg@10": [{"value": 0.5, "source": "a figure written by this test"}]}}}), encoding="utf-8")
    run_dir = run_eval(_settings(make_settings, folder, **{"retrieval.mode": "bm25", "eval.beir_protocol": "beir"}),
                       progress=False)
    m = json.loads((run_dir / "metrics.json").read_text())
    g = m["metrics"]["beir"]
    data = load_beir(folder)
    run = reference_runs(data, ("bm25",), progress=False).runs["bm25"]
    graded = {"q1": {"d1": 2, "d2": 1}, "q2": {"d3": 1}, "q3": {"d 4": 2}}
    want = evaluate_run(graded, run, ["ndcg@10", "recall@100"], use_ranx=False)
    binary = evaluate_run({q: {d: 1 for d in v} for q, v in graded.items()}, run, ["ndcg@10"], use_ranx=False)
    assert g["beir.ndcg@10"] == pytest.approx(want["ndcg@10"], abs=1e-6)
    assert abs(want["ndcg@10"] - binary["ndcg@10"]) > 1e-3  # so the grades are what was scored
    assert g["beir.recall@100"] == pytest.approx(want["recall@100"], abs=1e-6)
    assert 0 < g["product.ndcg@10"] <= 1 and g["product.recall@100"] is not None
    assert g["published.ndcg@10"] == 0.5 and g["beir.delta_ndcg@10"] == pytest.approx(g["beir.ndcg@10"] - 0.5, abs=1e-6)
    assert g["product.delta_ndcg@10"] == pytest.approx(g["product.ndcg@10"] - 0.5, abs=1e-6)
    d = m["beir"]
    assert d["method"] == "bm25" and d["published"]["counts_match"] is True
    assert d["published"]["from"] == [str(folder / "published.yaml")]
    assert d["protocols"]["beir"]["unit"] == "whole document" and d["relevance"]["kind"] == "graded"
    assert m["dataset"]["relevance"]["kind"] == "graded"
    assert check_metrics(m["metrics"]) == []  # every metric written is registered
    # the product protocol: the same product figures, no BEIR-protocol ones
    m2 = json.loads((run_eval(_settings(make_settings, folder, **{"retrieval.mode": "bm25"}), progress=False)
                     / "metrics.json").read_text())
    assert "beir.ndcg@10" not in m2["metrics"]["beir"] and "beir" not in m2["beir"]["protocols"]
    assert m2["metrics"]["beir"]["product.ndcg@10"] == g["product.ndcg@10"]


def test_the_beir_protocol_is_refused_where_it_cannot_act(tmp_path, monkeypatch, make_settings):
    from adiyan.eval.runner import run_eval
    from adiyan.experiments.retrieval import evaluate_retrieval

    monkeypatch.setenv("ADIYAN_EVALSET_CACHE", str(tmp_path / "evalsets"))
    authored = _authored(tmp_path / "authored", None)
    with pytest.raises(UnsupportedSetting, match=r"eval.beir_protocol=beir is not honoured by invoke eval on .*authored"
                                                 r".*needs a BEIR folder"):
        run_eval(_settings(make_settings, authored, **{"eval.beir_protocol": "beir"}), progress=False)
    assert not (tmp_path / "reports").exists()  # refused before a run directory was written
    folder = _beir_folder(tmp_path / "graded")
    with pytest.raises(UnsupportedSetting, match="eval.beir_protocol=beir is not honoured by the retrieval experiment"):
        evaluate_retrieval(_settings(make_settings, folder, **{"eval.beir_protocol": "beir"}))
    with pytest.raises(UnsupportedSetting, match=r"retrieval.rerank=True is not honoured by invoke eval under "
                                                 r"eval.beir_protocol=beir: .*no re-ranker"):
        run_eval(_settings(make_settings, folder, **{"eval.beir_protocol": "beir", "retrieval.rerank": True}),
                 progress=False)
    # a materialised copy is not the BEIR folder: the whole-document protocol reads the folder itself
    with pytest.raises(UnsupportedSetting, match="needs a BEIR folder"):
        run_eval(_settings(make_settings, materialize_beir(folder), **{"eval.beir_protocol": "beir"}), progress=False)


# -- SciFact through the BEIR protocol (slow: embeds 5,183 abstracts once, then the cache) -------------

@pytest.mark.slow
@pytest.mark.skipif(not SCIFACT.is_dir(), reason="../shared/datasets/scifact not present")
@pytest.mark.parametrize("mode, published", [("bm25", 0.676), ("dense", 0.645)])
def test_scifact_through_the_beir_protocol_reproduces_the_published_figures(mode, published):
    from adiyan.config import load_settings
    from adiyan.eval.beir_protocol import method_name, published_figures, run_beir_protocol
    from adiyan.models import embedder_from_settings

    s = load_settings(None, {"paths.cache_dir": str(ROOT / ".cache" / "adiyan"), "embedder.name": "minilm",
                             "paths.models_dir": str(ROOT / ".cache" / "adiyan" / "models"),
                             "retrieval.mode": mode, "eval.beir_protocol": "beir"}, environ={})
    emb = embedder_from_settings(s, progress=False) if mode != "bm25" else None
    measured, how = run_beir_protocol(s, SCIFACT, embedder=emb)
    pub = published_figures("scifact", SCIFACT, {"docs": 5183, "queries": 300})
    assert pub["counts_match"] is True
    assert pub["figures"][method_name(mode, "minilm")]["ndcg@10"][0]["value"] == published
    assert measured["ndcg@10"] == pytest.approx(published, abs=0.01)
    assert how["queries"] == 300 and how["unit"] == "whole document"
    if mode == "dense":
        assert how["dense"]["max_seq_length"] == 256  # the model's own truncation, as the published run
