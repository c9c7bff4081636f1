"""The LLM kinds of adiyan testset generate against the local llama.cpp server (tests/servers.py).

The server serves SmolLM2-135M: it proves the wiring (every call a structured call through
chat_json, its failures counted, ragas' graph and synthesizers over our chunks, the cache), not
the quality of the questions, which a 135M model cannot write. The corpus is the hand-built one
of tests/test_testset.py.
"""

from __future__ import annotations

import json

import pytest

from adiyan.config import load_settings
from adiyan.eval.evalset import EvalsetError
from adiyan.models.structured import structured_stats
from adiyan.testset import generate, list_documents
from adiyan.testset.llm import LLM_KINDS
from servers import CHAT_ALIAS, llama_server  # noqa: F401 - llama_server: a fixture
from test_testset import GUIDES, PRICE


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    d = tmp_path_factory.mktemp("llmcorpus")
    for name, text in (("price_list.md", PRICE), ("guides.md", GUIDES)):
        (d / name).write_text(text, encoding="utf-8")
    return list_documents(d)


def _settings(tmp_path, **over):
    return load_settings(None, {"paths.data_dir": str(tmp_path / "data"), **over})


def test_llm_kinds_without_a_generative_llm_are_refused_by_name(docs, tmp_path):
    s = _settings(tmp_path)  # llm.name=extractive, no llm.url: quotes sentences, writes nothing
    with pytest.raises(EvalsetError, match=r"need a generative LLM: set llm\.url"):
        generate(s, docs, n=4, kinds=["llm_rewrite"], seed=0)
    plain = generate(s, docs, n=6, seed=0)  # the default kinds stay offline
    assert not {r["kind"] for r in plain.questions} & set(LLM_KINDS) and plain.report["llm"] is None


def test_ragas_samples_become_rows_of_their_chunks_and_failures_rejections(docs, tmp_path, monkeypatch):
    """ragas' output mapped to rows, with a test double for the ragas pass and the caller (control
    flow only: which sample becomes which row, which is rejected and why; the real pass is the slow
    test below). Contexts are the stored chunk texts, so gold chunks and sources are known."""
    from adiyan.testset import llm as L
    from adiyan.testset.corpus import load_corpus
    from adiyan.factory import open_embedder

    s = _settings(tmp_path, **{"llm.name": "smollm2"})
    corpus = load_corpus(s, docs, embedder=open_embedder(s))
    hike = next(c for d, c in corpus.chunks() if "founded in 1987" in c.text)  # price_list.md's history section
    guides = next(c for d, c in corpus.chunks() if d.file == "guides.md")
    fake = L.RagasSamples()
    fake.samples["ragas_single_hop"] = [
        ("Who founded the outfitters that sell the ridge hike?", "Hilda Brankovic founded it in 1987.", [hike.text], "S"),
        ("What is in the brochure?", "Nothing.", ["a text that is no stored chunk"], "S"),
        ("Tell me: the kayak costs 38 euros per day?", "38 euros per day", [hike.text], "S")]  # answer copied
    fake.samples["ragas_multi_hop"] = [("Who leads the hike the outfitters price at 245 euros?", "Hilda Brankovic.",
                                        [hike.text, guides.text], "M")]
    fake.failures["ragas_multi_hop"] = [{"step": "MultiHopAbstractQuerySynthesizer.generate_scenarios",
                                         "error": "StructuredCallFailed: ragas:PersonaThemesMapping: no valid reply"}]
    monkeypatch.setattr(L, "caller_for", lambda settings: L.StructuredCaller(object(), settings, None))
    monkeypatch.setattr(L, "ragas_samples", lambda *a, **k: fake)
    gen = generate(s, docs, n=6, kinds=["ragas_single_hop", "ragas_multi_hop"], seed=0, reach_check=False)
    rows = {r["question"]: r for r in gen.questions}
    one = rows["Who founded the outfitters that sell the ridge hike?"]
    assert one["gold_sources"] == ["price_list.md"] and one["gold_chunks"][0]["chunk"] == hike.index
    assert one["gold_answer"] == "Hilda Brankovic founded it in 1987." and one["answer_keywords"] == []
    two = rows["Who leads the hike the outfitters price at 245 euros?"]
    assert two["gold_sources"] == ["guides.md", "price_list.md"] and len(two["gold_chunks"]) == 2
    pk = gen.report["per_kind"]
    assert pk["ragas_single_hop"]["rejected"] == {"answer_in_question": 1, "context_not_a_chunk": 1}
    assert pk["ragas_multi_hop"]["rejected"] == {"ragas_step_failed": 1}
    assert "PersonaThemesMapping" in pk["ragas_multi_hop"]["rejections"][0]["question"]
    assert pk["ragas_single_hop"]["kept"] == 1 and pk["ragas_multi_hop"]["kept"] == 1


@pytest.mark.slow  # a server start and ~40 generations of the tiny model on one thread
def test_llm_kinds_through_the_server_every_call_structured_and_counted(docs, tmp_path, llama_server):
    s = _settings(tmp_path, **{"llm.url": llama_server.url, "llm.model": CHAT_ALIAS, "llm.max_tokens": 192})
    gen = generate(s, docs, n=8, kinds=list(LLM_KINDS), seed=3)
    rep = gen.report
    llm_rep = rep["llm"]
    assert llm_rep["identity"]["llm"] == f"openai-compatible:{CHAT_ALIAS}"
    calls = llm_rep["calls"]
    assert "llm_rewrite" in calls and any(p.startswith("ragas:") for p in calls)
    # every call is a structured one: the server refuses json_schema, so each went out as json_object + schema
    for purpose, c in calls.items():
        assert c["ok"] + c["invalid_json"] + c["schema_mismatch"] + c["model_invalid"] + c["error"] == c["calls"], purpose
        assert set(c["modes"]) <= {"json_object", "json_schema"} and sum(c["modes"].values()) == c["calls"], purpose
    from adiyan.factory import open_llm

    st = structured_stats(open_llm(s))  # chat_json's own counters for this LLM object
    assert st.calls == sum(c["calls"] - c["cached"] for c in calls.values() if c["error"] == 0)
    # the rewrite: the offline gold, reworded; a failed call is a counted rejection, never a kept row
    rw = calls["llm_rewrite"]
    assert rep["per_kind"]["llm_rewrite"]["rejected"].get("llm_call_failed", 0) == rw["calls"] - rw["ok"]
    by_text = {c.text: (d, c) for d, c in gen.corpus.chunks()}
    for r in gen.questions:
        if r["kind"] == "llm_rewrite":
            (span,) = r["answer_keywords"]
            assert r["rewritten_from"] != r["question"] and span.lower() not in r["question"].lower()
            (gc,) = r["gold_chunks"]
            chunk = next(c for d, c in gen.corpus.chunks() if d.file == gc["file"] and c.index == gc["chunk"])
            assert span in chunk.text
        elif r["kind"] in ("ragas_single_hop", "ragas_multi_hop"):
            # ragas' reference contexts are our stored chunks: each gold chunk is one, of its gold source
            assert r["gold_chunks"] and all(any(c.index == g["chunk"] and d.file == g["file"] for d, c in by_text.values())
                                            for g in r["gold_chunks"])
            assert sorted({g["file"] for g in r["gold_chunks"]}) == r["gold_sources"]
    for kind, k in rep["per_kind"].items():  # every candidate is kept or a counted rejection
        assert k["made"] == k["kept"] + sum(k["rejected"].values()), kind
        assert len(k["rejections"]) == sum(k["rejected"].values()), kind
    rg = llm_rep["ragas"]
    # ragas' own steps ran through the same caller: summaries, entities, themes of our chunks
    assert {"ragas:StringIO", "ragas:NEROutput", "ragas:ThemesAndConcepts"} <= set(calls)
    assert rg["graph_nodes"] == len(list(gen.corpus.chunks())) and rg["transforms"]["SummaryExtractor(summary)"]["tasks"] == rg["graph_nodes"]
    for name, v in rg["synthesizers"].items():  # every unit of work is accounted for
        assert v["scenario_failures"] + v["units_without_scenario"] <= v["units_tried"] <= v["units"], name
    failed_steps = sum(v["scenario_failures"] + v["sample_failures"] for v in rg["synthesizers"].values())
    assert failed_steps == sum(k["rejected"].get("ragas_step_failed", 0) for k in rep["per_kind"].values())
    # the same seed again: every reply from the content-addressed cache, the same set
    again = generate(s, docs, n=8, kinds=list(LLM_KINDS), seed=3)
    missed = {p: c for p, c in again.report["llm"]["calls"].items() if c["error"] == 0 and c["cached"] != c["calls"]}
    assert not missed, missed
    assert json.dumps(again.questions, sort_keys=True) == json.dumps(gen.questions, sort_keys=True)
