"""adiyan testset generate on a hand-built corpus: what each kind must be, checked by hand.

The corpus (three Markdown files written here, one private to ``guide-gorazd``) is small enough
that every expected span is known: the lookup answers are spans of their gold chunk, the
unanswerable questions name an entity that occurs nowhere, the private question's gold is only
retrievable by its owner (checked through a real knowledge base and the evaluation harness), and
the seed decides the set byte for byte.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adiyan.config import load_settings
from adiyan.eval.evalset import load_evalset
from adiyan.testset import generate, list_documents, write_evalset
from adiyan.testset import rules as R
from adiyan.testset.validate import kendall_tau, tau_interval

PRICE = """# Lakeside Outfitters price list

The Glacier Ridge Hike (GR-HK-07) costs 245 euros per person, lunch included.
The Marsh Birding Morning starts at Hotel Vranjek at 06:30 and lasts 4 hours.
Kayak rental costs 38 euros per day; a dry bag is 6 euros extra.

# History

Lakeside Outfitters was founded in 1987 by Hilda Brankovic in the village of Stara Fužina.
In 2019 the company moved its office to Bohinjska Bistrica.
"""
GUIDES = """# Guides

Hilda Brankovic leads the Glacier Ridge Hike every Saturday from June to September.
Gorazd Mlinar guides the Marsh Birding Morning and speaks 4 languages.
"""
SECRET = """# Notes of Gorazd

My locker code at the boathouse is OTTER-4471 and I renew it in March 2027.
"""


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    (d / "docs").mkdir()
    for name, text in (("price_list.md", PRICE), ("guides.md", GUIDES), ("secret.md", SECRET)):
        (d / "docs" / name).write_text(text, encoding="utf-8")
    return d


@pytest.fixture(scope="module")
def settings(corpus_dir):
    return load_settings(None, {"paths.data_dir": str(corpus_dir / "data"), "eval.generate": False,
                                "eval.incidents": False, "eval.judge": None})


@pytest.fixture(scope="module")
def docs(corpus_dir):
    return list_documents(corpus_dir / "docs", private=["secret.md=guide-gorazd"])


@pytest.fixture(scope="module")
def gen(settings, docs):
    return generate(settings, docs, n=24, seed=7)


def _by_kind(rows, kind):
    return [r for r in rows if r["kind"] == kind]


def test_rules_lookup_span_by_hand():
    s = "The Glacier Ridge Hike (GR-HK-07) costs 245 euros per person, lunch included."
    found = {(span, kind) for span, kind, _ in R.spans(s)}
    assert {("GR-HK-07", "code"), ("245 euros", "quantity"), ("Glacier Ridge Hike", "entity")} <= found
    start = s.index("245 euros")
    assert R.lookup_question(s, "245 euros", "quantity", start) == \
        "The Glacier Ridge Hike (GR-HK-07) costs how many euros per person, lunch included?"
    y = "In 2019 the company moved its office to Bohinjska Bistrica."
    assert R.lookup_question(y, "2019", "year", 3) == \
        "In which year the company moved its office to Bohinjska Bistrica?"


def test_lookup_gold_answer_is_the_span_of_its_gold_chunk(gen):
    lookups = _by_kind(gen.questions, "lookup")
    assert len(lookups) >= 5
    texts = {"price_list.md": PRICE, "guides.md": GUIDES}
    for r in lookups:
        (span,) = r["answer_keywords"]
        (gc,) = r["gold_chunks"]
        assert r["gold_sources"] == [gc["file"]]
        chunk = next(c for d in gen.corpus.documents if d.file == gc["file"] for c in d.chunks if c.index == gc["chunk"])
        assert span in chunk.text and span in r["gold_answer"] and r["gold_answer"] in texts[gc["file"]]
        assert span.lower() not in r["question"].lower()
        assert r["question"].endswith("?") and "requester" not in r


def test_unanswerable_has_no_gold_and_names_what_is_absent(gen):
    unans = [r for r in _by_kind(gen.questions, "unanswerable") if "probe_private" not in r]
    assert unans
    corpus = (PRICE + GUIDES + SECRET).lower()
    for r in unans:
        assert r["gold_sources"] == [] and r["answer_keywords"] == [] and r["gold_chunks"] == []
        assert r["absent"] in r["question"] and r["absent"].lower() not in corpus
        assert all(w.lower() not in corpus for w in r["absent"].replace("-", " ").split())


def test_private_probe_gold_visible_only_to_its_owner(gen, settings, tmp_path):
    priv = _by_kind(gen.questions, "private")
    probes = [r for r in gen.questions if r.get("probe_private")]
    assert len(priv) == 1 and len(probes) == 1
    (p,), (probe,) = priv, probes
    assert p["gold_sources"] == ["secret.md"] and p["requester"] == "guide-gorazd" and p["answer_keywords"][0] in ("March 2027", "OTTER-4471")
    assert probe["question"] == p["question"] and probe["gold_sources"] == [] and probe.get("requester") != "guide-gorazd"
    assert probe["probe_private"] == "secret.md"
    # the set through the evaluation harness: the owner's question finds its gold, the probe never does
    from adiyan.eval.harness import close_index, open_index, question_rows, retrieval_metrics
    from adiyan.factory import open_retriever

    out = write_evalset(gen, tmp_path / "gen", link=True)
    es = load_evalset(out)
    assert {d.filename: (d.owner, d.visibility) for d in es.documents}["secret.md"] == ("guide-gorazd", "private")
    s = settings.model_copy(update={"paths": settings.paths.model_copy(update={"data_dir": tmp_path / "data"})})
    index = open_index(s, es)
    try:
        qr = question_rows(index, open_retriever(s, index.kb))
    finally:
        close_index(index)
    rows = {r["id"]: r for r in qr.rows}
    assert rows[p["id"]]["hit"] is True
    assert rows[probe["id"]]["probe_leaked"] is False and rows[probe["id"]]["probe_owner_retrieved"] is True
    priv_metrics = retrieval_metrics(qr, s.retrieval.kb_top_k)["privacy"]
    assert priv_metrics["private_chunks_leaked"] == 0 and priv_metrics["probes_leaked"] == 0


def test_same_seed_same_set_other_seed_other_set(settings, docs, gen, tmp_path):
    again = generate(settings, docs, n=24, seed=7)
    assert json.dumps(again.questions, sort_keys=True) == json.dumps(gen.questions, sort_keys=True)
    a = write_evalset(gen, tmp_path / "a")
    b = write_evalset(again, tmp_path / "b")
    assert (a / "questions.jsonl").read_bytes() == (b / "questions.jsonl").read_bytes()
    other = generate(settings, docs, n=24, seed=8)
    assert [r["question"] for r in other.questions] != [r["question"] for r in gen.questions]


def test_report_counts_every_rejection(gen, tmp_path):
    for kind, k in gen.report["per_kind"].items():
        assert k["made"] == k["kept"] + sum(k["rejected"].values()), kind
        assert len(k["rejections"]) == sum(k["rejected"].values())
        assert len(k["examples"]) == min(10, k["kept"])
    kept = {k: v["kept"] for k, v in gen.report["per_kind"].items()}
    rows = [r for r in gen.questions if "probe_private" not in r]
    assert sum(kept.values()) == len(rows)
    out = write_evalset(gen, tmp_path / "r")
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "| lookup |" in md and "near_duplicate" in md


def test_bad_input_is_named(tmp_path, corpus_dir):
    from adiyan.eval.evalset import EvalsetError

    with pytest.raises(EvalsetError, match="no such file"):
        list_documents(tmp_path / "missing")
    with pytest.raises(EvalsetError, match="GLOB=OWNER"):
        list_documents(corpus_dir / "docs", private=["secret.md"])
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "mine.txt").write_text("hand-written", encoding="utf-8")
    from adiyan.testset.generate import Generated

    with pytest.raises(EvalsetError, match="not a generated evalset"):
        write_evalset(Generated([], {}, None), tmp_path / "taken")


def test_kendall_tau_and_interval_by_hand():
    # two rankings of 4 configurations with one swapped pair: 5 concordant, 1 discordant -> (5-1)/6
    assert kendall_tau([0.1, 0.2, 0.3, 0.4], [0.1, 0.3, 0.2, 0.4]) == pytest.approx(4 / 6)
    import numpy as np

    rng = np.random.default_rng(0)
    h = rng.random((4, 50)) * 0.2 + np.arange(4)[:, None] * 0.1
    lo, hi = tau_interval(h, h.copy(), n_boot=200, seed=0)
    assert lo <= 1.0 <= hi + 1e-9 and lo > 0.3


def test_every_panel_has_ten_distinct_valid_configurations_and_contrasts_name_its_members():
    """The issue's panel is at least 10 retrieval configurations: each panel's overrides must
    validate as settings (a misspelt key or value fails here, not an hour into a run), no two
    configurations of a panel may be the same settings (a duplicate would count as agreement), and
    every contrast of the bias table names configurations of some panel."""
    from adiyan.testset.validate import CONTRASTS, PANELS, _config_settings

    base = load_settings(None, {})
    for name, panel in PANELS.items():
        assert len(panel) >= 10, name
        dumped = [json.dumps(_config_settings(base, over).model_dump(mode="json"), sort_keys=True)
                  for over in panel.values()]
        assert len(set(dumped)) == len(dumped), f"panel {name} repeats a configuration"
    for label, a, b in CONTRASTS:
        assert any(a in p and b in p for p in PANELS.values()), label
    whole = PANELS["scifact-whole"]
    assert _config_settings(base, whole["bm25-k4-rm3"]).retrieval.rm3_docs == 10
    assert {_config_settings(base, o).chunking.size for o in whole.values()} == {12000}


def test_validation_writes_its_folder_as_a_run_record(make_settings, tmp_path):
    """`testset validate` writes through the RunRecord every job uses (issue 26): the folder holds the
    settings' config.yaml and validate.json carries the envelope (config hash of these settings)."""
    import yaml

    from adiyan.testset.validate import run_validation

    s = make_settings(**{"retrieval.kb_top_k": 6})
    out = tmp_path / "tsv"
    result = run_validation(s, [], out)
    assert yaml.safe_load((out / "config.yaml").read_text())["retrieval"]["kb_top_k"] == 6
    written = json.loads((out / "validate.json").read_text())
    assert written["run"]["config_hash"] == s.config_hash() == result["run"]["config_hash"]
    assert written["run"]["run_id"] == "tsv" and written["corpora"] == {}
