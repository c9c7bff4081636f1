"""Every retrieval setting × every entry point: changing the setting changes what that entry point
retrieves, or the entry point refuses it by name. Nothing is silently ignored.

The entry points: ``invoke eval`` (run_eval), the retrieval and context experiments (sweep
points and notebooks), the agent's tools, ``adiyan search`` (also ``--within``), and the SciFact
benchmark's product path; the hnsw and memory experiments, which do not search the knowledge
base, must refuse every retrieval setting by name.

"What an entry point retrieves" is observed two ways: what it shows (questions.jsonl, the
experiment's rows, the CLI's printed hits) and the results the pipeline handed it, recorded by a
spy around ``Retriever.retrieve`` (an observer only: it returns the real result unchanged). An
entry point that bypassed the pipeline would leave the spy empty and fail here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from adiyan import ask as ask_module
from adiyan import cli
from adiyan.config import RetrievalConfig, load_settings, presets
from adiyan.agent import Agent
from adiyan.eval.harness import open_index
from adiyan.eval.runner import run_eval
from adiyan.experiments import context as context_experiment
from adiyan.experiments.hnsw import hnsw_point, vector_set
from adiyan.experiments.memory import evaluate_memory
from adiyan.experiments.retrieval import evaluate_retrieval
from adiyan.models.base import Completion, as_messages
from adiyan.retrieval import pipeline as P
from adiyan.retrieval.pipeline import Retriever, UnsupportedSetting

ROOT = Path(__file__).resolve().parents[1]

PLACES = ["Bled", "Bohinj", "Triglav", "Piran", "Postojna", "Ljubljana", "Skocjan", "Kranjska Gora", "Soca",
          "Velika Planina", "Logar", "Ptuj", "Maribor", "Idrija", "Kobarid", "Vintgar", "Rakov Skocjan",
          "Bovec", "Savica", "Goriska Brda", "Lipica", "Predjama", "Celje", "Jeruzalem", "Pohorje"]


def _doc(i: int, place: str) -> str:
    return (f"# {place} tour\n\nThe {place} tour takes guests on a {3 + i % 5}-hour walk. It costs {200 + 10 * i} "
            f"euros per person, departs at {7 + i % 4}:30 and the guide meets guests at the {place} bus stop. "
            f"Rain gear is recommended for the {place} hike; lunch is a picnic.\n")


DOCS = {f"tour_{i:02d}.md": _doc(i, p) for i, p in enumerate(PLACES)}
DOCS["refund_form.md"] = "# Refunds\n\nForm RF-22 requests a refund; it must reach the office within 14 days.\n"
DOCS["hotels.md"] = ("# Hotels\n\nOn the second night of the Triglav trek guests sleep at the Dom Planika hut; "
                     "in Bled they stay at Hotel Vila Bled.\n")
DOCS["handbook.md"] = "# Guide handbook\n\n" + "\n\n".join(
    f"## {p}\n\nOn the {p} tour the guide counts the guests at every stop, carries a first-aid kit and a "
    f"radio, and reports delays to the office by phone. Meeting point: the {p} bus stop." for p in PLACES[:8]) + "\n"
DOCS["packing.md"] = "# Packing\n\nBring sturdy boots, a rain jacket and a water bottle on every hike.\n"
PRIVATE = {"alice_note.md": "# Alice\n\nAlice's private note: the office safe code is 7319 and the Bled tour "
                            "discount code is ALICE-77.\n"}

QUESTIONS = [
    {"id": "q1", "question": "How much does the Bled tour cost?", "gold": ["tour_00.md"], "kw": ["200"]},
    {"id": "q2", "question": "What does the Piran tour cost and where do guests sleep on the second night of the "
                             "Triglav trek?", "gold": ["tour_03.md", "hotels.md"], "kw": ["230"]},
    {"id": "q3", "question": "Which form do I need for a refund?", "gold": ["refund_form.md"], "kw": ["RF-22"]},
    {"id": "q4", "question": "What should I pack for a hike in the rain?", "gold": ["packing.md"], "kw": ["boots"]},
    {"id": "q5", "question": "When does the guide meet guests for the walk?", "gold": ["tour_05.md"], "kw": ["8:30"]},
]
PROBES = [q["question"] for q in QUESTIONS]


def _write_evalset(root: Path, docs: dict | None = None) -> Path:
    (root / "docs").mkdir(parents=True)
    documents = []
    for name, text in {**(docs or DOCS), **PRIVATE}.items():
        (root / "docs" / name).write_text(text, encoding="utf-8")
        documents.append({"file": f"docs/{name}", "owner": "alice" if name in PRIVATE else "office",
                          "visibility": "private" if name in PRIVATE else "global"})
    (root / "manifest.yaml").write_text(yaml.safe_dump({"name": "entry-points", "questions": "questions.jsonl",
                                                        "documents": documents}), encoding="utf-8")
    with open(root / "questions.jsonl", "w", encoding="utf-8") as f:
        for q in QUESTIONS:
            f.write(json.dumps({"id": q["id"], "question": q["question"], "gold_answer": q["kw"][0],
                                "gold_sources": q["gold"], "answer_keywords": q["kw"], "kind": "lookup"}) + "\n")
    return root


def _write_beir(root: Path, docs: dict | None = None) -> Path:
    (root / "qrels").mkdir(parents=True)
    with open(root / "corpus.jsonl", "w", encoding="utf-8") as f:
        for name, text in (docs or DOCS).items():
            title, body = text.split("\n\n", 1)
            f.write(json.dumps({"_id": name[:-3], "title": title.lstrip("# "), "text": body.strip()}) + "\n")
    with open(root / "queries.jsonl", "w", encoding="utf-8") as f:
        for q in QUESTIONS:
            f.write(json.dumps({"_id": q["id"], "text": q["question"]}) + "\n")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q['id']}\t{g[:-3]}\t1\n" for q in QUESTIONS for g in q["gold"]), encoding="utf-8")
    return root


class HydeLLM:
    """Test double for control flow only: writes a fixed 'hypothetical passage' for HyDE prompts,
    scripted agent decisions (search, search in a document, find, finish) for decision prompts,
    and a fixed answer otherwise."""

    id = "scripted-hyde"
    context_size = 2048
    PASSAGE = "Form RF-22 requests a refund from the office within 14 days."

    def __init__(self):
        self.decisions = 0
        self.question = ""

    def chat(self, messages, *, max_tokens=None, temperature=None):
        msgs = as_messages(messages)
        if "Passage:" in msgs[-1]["content"]:
            return Completion(self.PASSAGE)
        if "Tools:\n" in msgs[0]["content"]:  # the decision prompt
            self.decisions += 1
            q = json.dumps(self.question)
            script = {1: f'Action: search_kb\nAction Input: {{"query": {q}}}',
                      2: f'Action: search_document\nAction Input: {{"source": "office/handbook.md", "query": {q}}}',
                      3: f'Action: find_document\nAction Input: {{"query": {q}}}'}
            return Completion(script.get(self.decisions, 'Action: finish\nAction Input: {"answer": "done"}'))
        return Completion("scripted answer")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("entry")
    return {"evalset": _write_evalset(root / "evalset"), "beir": _write_beir(root / "beir"), "root": root,
            "docs": DOCS, "base": {}}


# Per-query engine knobs (HNSW ef, exact search) can only change results on an index that HNSW
# actually serves: Qdrant scans segments under its full-scan threshold (~650 384-d vectors)
# exactly. 1,500 short documents with a sparse graph (m 4, ef_construct 8) make ef matter.
WORDS = ("tour guest hotel price lake mountain bus train boat refund form code safe office hike boots rain dinner "
         "lunch breakfast guide map ticket museum castle cave bike wine cheese").split()


@pytest.fixture(scope="module")
def big_world(tmp_path_factory):
    import random

    rng = random.Random(0)
    docs = {f"tour_{i:02d}.md": DOCS[f"tour_{i:02d}.md"] for i in range(len(PLACES))}
    docs.update({"refund_form.md": DOCS["refund_form.md"], "hotels.md": DOCS["hotels.md"],
                 "packing.md": DOCS["packing.md"], "handbook.md": DOCS["handbook.md"]})
    docs.update({f"note_{i:04d}.md": f"# Note {i}\n\n" + " ".join(rng.sample(WORDS, 8)) + ".\n" for i in range(1500)})
    root = tmp_path_factory.mktemp("entry-big")
    return {"evalset": _write_evalset(root / "evalset", docs), "beir": _write_beir(root / "beir", docs),
            "root": root, "docs": docs,
            "base": {"store.indexing_threshold_kb": 1, "store.hnsw_m": 4, "store.hnsw_ef_construct": 8}}


@pytest.fixture
def spy(monkeypatch):
    """Records every RetrievalResult the pipeline returns (observation only)."""
    seen: list = []
    real = Retriever.retrieve

    def recording(self, *args, **kwargs):
        res = real(self, *args, **kwargs)
        seen.append(res)
        return res

    monkeypatch.setattr(Retriever, "retrieve", recording)
    return seen


def _settings(world, overrides: dict):
    base = {"paths.data_dir": str(world["root"] / "data"), "paths.cache_dir": str(world["root"] / "cache"),
            "paths.reports_dir": str(world["root"] / "reports"), "paths.models_dir": str(ROOT / ".cache/adiyan/models"),
            "eval.evalset": str(world["evalset"]), "eval.generate": False, "eval.judge": None,
            "eval.incidents": False, "retrieval.use_calibrated_floors": False, **world["base"]}
    return load_settings(None, {**base, **overrides}, environ={})


def _fingerprint(results) -> list:
    """What a list of RetrievalResults retrieved: every ranked chunk and its score (rounded)."""
    return [[(c.source, c.chunk_index, round(c.score, 4)) for c in r.ranked] + ["|"]
            + [(c.source, c.chunk_index) for c in r.chunks] for r in results]


# -- the entry points: each returns (what it shows, what the pipeline handed it) -------------------

def via_eval(world, s, spy):
    run = run_eval(s, progress=False, run_id=f"r{len(list((world['root'] / 'reports').glob('r*')))}")
    rows = [json.loads(x) for x in (run / "questions.jsonl").read_text().splitlines()]
    return [(r["id"], [(c["source"], c["chunk_index"], c["score"]) for c in r["retrieved"]], r["ranked_sources"])
            for r in rows]


def via_retrieval_experiment(world, s, spy):
    res = evaluate_retrieval(s)
    return [(r["qid"], r.get("hit"), r.get("reciprocal_rank"), r.get("retrieval.ndcg@10"), r["context_tokens"])
            for r in res.per_question]


def via_context_experiment(world, s, spy, monkeypatch):
    # test doubles for control flow: the LLM (HyDE passage) and the answerer; retrieval is real
    monkeypatch.setattr(context_experiment, "open_llm", lambda settings: HydeLLM())
    monkeypatch.setattr(context_experiment, "answer_question",
                        lambda llm, q, chunks, settings, cache=None: _Answer(chunks))
    res = context_experiment.evaluate_context(s)
    return [(r["qid"], r["passages_used"], r.get("gold_in_context")) for r in res.per_question], res.info["answers"]


class _Answer:
    """The answerer's double: its 'answer' lists the chunks it was given, so the run shows them."""

    def __init__(self, chunks):
        self.text = " ".join(c.key for c in chunks)
        self.used = [{"source": c.source, "chunk_index": c.chunk_index} for c in chunks]
        self.context_tokens, self.truncated = sum(len(c.text) for c in chunks), False


def via_agent(world, s, spy):
    index = open_index(s)
    shown = []
    for q in PROBES:
        llm = HydeLLM()
        llm.question = q
        res = Agent(llm, index.kb, settings=s, tier="member", requester_id="bob").run(q)
        shown.append([(st.tool, st.n_findings) for st in res.steps])
    return shown


def via_cli(world, s, spy, capsys):
    sets = []
    for key, value in _flat(s).items():
        sets += ["--set", f"{key}={value if value is not None else 'null'}"]
    if not (world["root"] / "data" / "raw").exists():  # the CLI's knowledge base: the same documents
        docs = world["evalset"] / "docs"
        assert cli.main(sets + ["ingest", *[str(docs / n) for n in world["docs"]], "--owner", "office",
                                "--visibility", "global", "--quiet"]) == 0
        assert cli.main(sets + ["ingest", *[str(docs / n) for n in PRIVATE], "--owner", "alice", "--quiet"]) == 0
        capsys.readouterr()
    shown = []
    for q in PROBES:
        assert cli.main(sets + ["search", q, "--as", "bob"]) == 0
        shown.append(capsys.readouterr().out)
        assert cli.main(sets + ["search", q, "--as", "bob", "--within", "office/handbook.md"]) == 0
        shown.append(capsys.readouterr().out)
    return shown


def _flat(s, *, evaluation: bool = False) -> dict:
    """The overrides that differ from the defaults, as --set items; for the CLI's verbs that run no
    evaluation (``evaluation`` False) without eval.*, which they refuse by name (tested below)."""
    defaults = _flatten(load_settings(None, {}, environ={}).to_dict())
    mine = _flatten(s.to_dict())
    return {k: v for k, v in mine.items() if defaults.get(k) != v and (evaluation or not k.startswith("eval."))}


def _flatten(d, prefix=""):
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and k != "score_floors":
            out.update(_flatten(v, f"{prefix}{k}."))
        elif isinstance(v, dict):
            for name, floor in v.items():
                out[f"{prefix}{k}.{name}"] = floor
        else:
            out[f"{prefix}{k}"] = v
    return out


def via_ask(world, s, spy):
    """``adiyan ask`` (grounded generation) on the CLI's knowledge base; the LLM is HydeLLM (a test
    double for control flow: HyDE passage, fixed answer); what it shows is its sources and count."""
    if not (world["root"] / "data" / "raw").exists():  # the CLI's knowledge base: the same documents
        _ingest_cli(world, s)
    shown = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ask_module, "open_llm", lambda settings: HydeLLM())
        for q in PROBES:
            r = ask_module.ask(s, q, "bob")
            shown.append((r.answer, [(x.source, x.chunk_index, round(x.score, 4)) for x in r.sources], r.hidden))
    return shown


def _ingest_cli(world, s):
    sets = []
    for key, value in _flat(s).items():
        sets += ["--set", f"{key}={value if value is not None else 'null'}"]
    docs = world["evalset"] / "docs"
    assert cli.main(sets + ["ingest", *[str(docs / n) for n in world["docs"]], "--owner", "office",
                            "--visibility", "global", "--quiet"]) == 0
    assert cli.main(sets + ["ingest", *[str(docs / n) for n in PRIVATE], "--owner", "alice", "--quiet"]) == 0


def via_scifact_product(world, s, spy):
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import scifact

    runs = scifact.product_runs(s, world["beir"], "test", progress=False)
    return [sorted(r["run"].items()) for r in runs.values()]


ENTRY_POINTS = ["eval", "retrieval_experiment", "context_experiment", "agent", "cli", "scifact_product", "ask"]

# setting -> (base overrides, changed overrides, entry points where it does not apply and why)
WITHIN_ONLY = "searches within one document only"
SETTINGS = {
    "retrieval.kb_top_k": ({}, {"retrieval.kb_top_k": 2}, {
        "scifact_product": "measures the ranking rank_depth deep, never a top-k context"}),
    "retrieval.doc_top_k": ({}, {"retrieval.doc_top_k": 1}, {
        "eval": WITHIN_ONLY, "retrieval_experiment": WITHIN_ONLY, "context_experiment": WITHIN_ONLY,
        "scifact_product": WITHIN_ONLY, "ask": WITHIN_ONLY}),
    "retrieval.rank_depth": ({}, {"retrieval.rank_depth": 20}, {}),
    "retrieval.mode": ({}, {"retrieval.mode": "bm25"}, {}),
    "retrieval.rrf_k": ({"retrieval.mode": "hybrid"}, {"retrieval.mode": "hybrid", "retrieval.rrf_k": 2}, {}),
    "retrieval.hybrid_prefetch": ({"retrieval.mode": "hybrid", "retrieval.hybrid_prefetch": 10},
                                  {"retrieval.mode": "hybrid", "retrieval.hybrid_prefetch": 50}, {}),
    "retrieval.rerank": ({}, {"retrieval.rerank": True}, {}),
    "retrieval.rerank_model": ({"retrieval.rerank": True}, {"retrieval.rerank": True,
                                                            "retrieval.rerank_model": "minilm"}, {}),
    "retrieval.rerank_overfetch": ({"retrieval.rerank": True, "retrieval.rerank_overfetch": 1},
                                   {"retrieval.rerank": True, "retrieval.rerank_overfetch": 4}, {}),
    "retrieval.query_transform=split": ({}, {"retrieval.query_transform": "split"}, {}),
    "retrieval.query_transform=hyde": ({}, {"retrieval.query_transform": "hyde"}, {}),
    "retrieval.score_floors": ({}, {"retrieval.score_floors.minilm": 0.45}, {}),
    "retrieval.default_floor": ({}, {"retrieval.default_floor": 0.45}, {}),
    # floor_min_j -1: the calibrated floor applies whatever its J (minilm's, J 0.19 on XQuAD, would not)
    "retrieval.use_calibrated_floors": ({}, {"retrieval.use_calibrated_floors": True, "retrieval.floor_min_j": -1.0},
                                        {}),
    # a calibrated floor applies only when its J reaches floor_min_j (1.0: never; -1.0: always)
    "retrieval.floor_min_j": ({"retrieval.use_calibrated_floors": True, "retrieval.floor_min_j": 1.0},
                              {"retrieval.use_calibrated_floors": True, "retrieval.floor_min_j": -1.0}, {}),
    # score-aware fusion and dense pseudo-relevance feedback (issue 16, adiyan/retrieval/fusion.py)
    "retrieval.fusion": ({"retrieval.mode": "hybrid"}, {"retrieval.mode": "hybrid", "retrieval.fusion": "dbsf"}, {}),
    "retrieval.fusion_weight": ({"retrieval.mode": "hybrid", "retrieval.fusion": "convex", "retrieval.fusion_weight": 0.1},
                                {"retrieval.mode": "hybrid", "retrieval.fusion": "convex",
                                 "retrieval.fusion_weight": 0.9}, {}),
    "retrieval.fusion_norm": ({"retrieval.mode": "hybrid", "retrieval.fusion": "convex"},
                              {"retrieval.mode": "hybrid", "retrieval.fusion": "convex", "retrieval.fusion_norm": "z"}, {}),
    "retrieval.prf_docs": ({}, {"retrieval.prf_docs": 3, "retrieval.prf_weight": 2.0}, {}),
    "retrieval.prf_weight": ({"retrieval.prf_docs": 3, "retrieval.prf_weight": 0.1},
                             {"retrieval.prf_docs": 3, "retrieval.prf_weight": 4.0}, {}),
    # weighted fusion over every signal by name, and RM3 expansion of the BM25 query (issue 27 §3)
    "retrieval.fusion_weights": (
        {"retrieval.mode": "hybrid", "retrieval.fusion": "weighted", "retrieval.fusion_weights": {"dense": 0.9, "bm25": 0.1}},
        {"retrieval.mode": "hybrid", "retrieval.fusion": "weighted", "retrieval.fusion_weights": {"dense": 0.1, "bm25": 0.9}},
        {}),
    "retrieval.rm3_docs": ({"retrieval.mode": "bm25"}, {"retrieval.mode": "bm25", "retrieval.rm3_docs": 3}, {}),
    "retrieval.rm3_terms": ({"retrieval.mode": "bm25", "retrieval.rm3_docs": 3, "retrieval.rm3_terms": 1},
                            {"retrieval.mode": "bm25", "retrieval.rm3_docs": 3, "retrieval.rm3_terms": 30}, {}),
    "retrieval.rm3_weight": ({"retrieval.mode": "bm25", "retrieval.rm3_docs": 3, "retrieval.rm3_weight": 0.95},
                             {"retrieval.mode": "bm25", "retrieval.rm3_docs": 3, "retrieval.rm3_weight": 0.05}, {}),
}


def _run(entry, world, overrides, spy, monkeypatch, capsys):
    s = _settings(world, overrides)
    spy.clear()
    if overrides.get("retrieval.query_transform") == "hyde" and entry in ("eval", "retrieval_experiment", "cli",
                                                                             "scifact_product"):
        # the configured LLM writes the HyDE passage; a scripted one keeps the test fast (control flow)
        monkeypatch.setattr("adiyan.retrieval.pipeline.llm_from_settings", lambda settings: HydeLLM())
        monkeypatch.setattr("adiyan.eval.runner.open_llm", lambda settings: HydeLLM())
    fn = {"eval": via_eval, "retrieval_experiment": via_retrieval_experiment, "agent": via_agent,
          "scifact_product": via_scifact_product, "ask": via_ask}.get(entry)
    if entry == "context_experiment":
        shown = via_context_experiment(world, s, spy, monkeypatch)
    elif entry == "cli":
        shown = via_cli(world, s, spy, capsys)
    else:
        shown = fn(world, s, spy)
    return shown, _fingerprint(spy)


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_every_setting_changes_what_every_entry_point_retrieves(world, spy, monkeypatch, capsys, entry, setting):
    _check(world, spy, monkeypatch, capsys, entry, setting, SETTINGS)


# Build-time signals (issue 27 §3): more lists per chunk, fused in hybrid mode; each entry point either
# retrieves differently with them or refuses them by name
BUILD_SETTINGS = {
    "embedder.extra": ({"retrieval.mode": "hybrid"}, {"retrieval.mode": "hybrid", "embedder.extra": ["mpnet"]}, {}),
    "store.title_field": ({"retrieval.mode": "hybrid"}, {"retrieval.mode": "hybrid", "store.title_field": True}, {}),
}


@pytest.mark.slow
@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("setting", sorted(BUILD_SETTINGS))
def test_build_time_signals_change_what_every_entry_point_retrieves(world, spy, monkeypatch, capsys, entry, setting):
    """The changed run gets its own data directory: a knowledge base built without the signal refuses
    to be opened with it (EmbedderMismatchError naming the setting, tests/test_signals.py)."""
    base, changed, _ = BUILD_SETTINGS[setting]
    shown_a, seen_a = _run(entry, world, base, spy, monkeypatch, capsys)
    other = dict(world, root=world["root"] / f"built-{setting}-{entry}")
    other["root"].mkdir(exist_ok=True)
    shown_b, seen_b = _run(entry, other, changed, spy, monkeypatch, capsys)
    assert seen_a and seen_b, f"{entry} retrieved without the pipeline"
    assert seen_a != seen_b, f"{setting} changed nothing {entry} retrieved"
    if _top_k(seen_a) != _top_k(seen_b) and entry != "agent":
        assert shown_a != shown_b, f"{setting} changed the chunks {entry} was given but not what it shows"


ENGINE_SETTINGS = {
    "store.hnsw_ef": ({"store.hnsw_ef": 1}, {"store.hnsw_ef": 512}, {}),
    "store.exact": ({"store.hnsw_ef": 1}, {"store.hnsw_ef": 1, "store.exact": True}, {}),
}


@pytest.mark.slow
@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("setting", sorted(ENGINE_SETTINGS))
def test_engine_knobs_change_what_every_entry_point_retrieves(big_world, spy, monkeypatch, capsys, entry, setting):
    _check(big_world, spy, monkeypatch, capsys, entry, setting, ENGINE_SETTINGS)


def _check(world, spy, monkeypatch, capsys, entry, setting, table):
    base, changed, not_applicable = table[setting]
    if entry in not_applicable:
        pytest.skip(f"{setting} does not apply to {entry}: it {not_applicable[entry]}")
    shown_a, seen_a = _run(entry, world, base, spy, monkeypatch, capsys)
    assert seen_a, f"{entry} retrieved without the pipeline"
    try:
        shown_b, seen_b = _run(entry, world, changed, spy, monkeypatch, capsys)
    except UnsupportedSetting as exc:  # refusing by name is the other honest answer
        assert setting.split("=")[0] in str(exc)
        return
    assert seen_b, f"{entry} retrieved without the pipeline"
    assert seen_a != seen_b, f"{setting} changed nothing {entry} retrieved"
    if _top_k(seen_a) != _top_k(seen_b) and entry != "agent":
        # when the chunks handed over changed, what the entry point shows changed too
        assert shown_a != shown_b, f"{setting} changed the chunks {entry} was given but not what it shows"


def _top_k(fingerprint) -> list:
    return [f[f.index("|") + 1:] for f in fingerprint]


def test_experiments_that_do_not_search_the_kb_refuse_retrieval_settings(world):
    s = _settings(world, {"retrieval.rerank": True, "retrieval.use_calibrated_floors": True})
    with pytest.raises(UnsupportedSetting, match="retrieval.rerank=True.*hnsw experiment"):
        vs = vector_set("synthetic-20k", s, n_queries=5)
        hnsw_point(vs, s, ef=16, access_filter=False)
    with pytest.raises(UnsupportedSetting, match="retrieval.query_transform=split.*memory experiment"):
        evaluate_memory(_settings(world, {"retrieval.query_transform": "split", "retrieval.use_calibrated_floors": True}))


@pytest.mark.parametrize("setting", [("conversation.history_window", 2), ("conversation.facts_min_similarity", 0.5)])
def test_question_set_entry_points_refuse_conversation_settings(world, setting):
    """conversation.* shape a turn's context; a question set has none, so a changed value is refused by
    name before anything runs (the run would otherwise describe a setting that never applied)."""
    key, value = setting
    s = _settings(world, {key: value})
    reports = world["root"] / "reports"
    before = sorted(reports.iterdir()) if reports.exists() else []
    with pytest.raises(UnsupportedSetting, match=rf"{key}={value} is not honoured by invoke eval"):
        run_eval(s, progress=False)
    assert (sorted(reports.iterdir()) if reports.exists() else []) == before  # no run directory was written
    with pytest.raises(UnsupportedSetting, match=rf"{key}={value} is not honoured by the retrieval experiment"):
        evaluate_retrieval(s)
    with pytest.raises(UnsupportedSetting, match=rf"{key}={value} is not honoured by the context experiment"):
        context_experiment.evaluate_context(s)


# -- inert settings (issue 23 item 1): one declaration says where each setting acts ------------------

# RetrievalConfig fields with no row in SETTINGS, and why (every other field must have one)
NOT_IN_TABLE = {
    "retrieval.unsafe_unscoped_search": "TEST-ONLY: every entry point refuses it by name (tests/test_access_policy.py, "
                                        "the unscoped-search incident replay)",
}

# every setting with a condition in pipeline.ACTS_WHEN: a configuration where it has nothing to act
# on, and a changed value
INERT = {
    "rrf_k": ({"retrieval.mode": "dense"}, 10),
    "hybrid_prefetch": ({"retrieval.mode": "dense"}, 10),
    "fusion": ({"retrieval.mode": "dense"}, "convex"),
    "fusion_weight": ({"retrieval.mode": "hybrid", "retrieval.fusion": "dbsf"}, 0.9),
    "fusion_norm": ({"retrieval.mode": "hybrid"}, "z"),
    "prf_docs": ({"retrieval.mode": "bm25"}, 3),
    "prf_weight": ({"retrieval.mode": "dense"}, 2.0),
    "fusion_weights": ({"retrieval.mode": "hybrid"}, {"dense": 0.5, "bm25": 0.5}),
    "rm3_docs": ({"retrieval.mode": "dense"}, 3),
    "rm3_terms": ({"retrieval.mode": "bm25"}, 5),
    "rm3_weight": ({"retrieval.mode": "hybrid"}, 0.2),
    "rerank_model": ({}, "minilm"),
    "rerank_overfetch": ({}, 2),
}


def test_every_retrieval_setting_has_a_row_or_is_declared():
    """A new RetrievalConfig field fails here until it has a row in SETTINGS (or says why not) and a
    line in the one declaration of where it acts (pipeline.ACTS_WHEN)."""
    rows = {key.split("=")[0] for key in SETTINGS}
    fields = set(RetrievalConfig.model_fields)
    no_row = sorted(f"retrieval.{f}" for f in fields if f"retrieval.{f}" not in rows | set(NOT_IN_TABLE))
    assert not no_row, f"no row in SETTINGS and not declared in NOT_IN_TABLE: {no_row}"
    assert rows | set(NOT_IN_TABLE) <= {f"retrieval.{f}" for f in fields}  # no row for a field that is gone
    assert set(P.ACTS_WHEN) == fields
    conditional = {name for name, when in P.ACTS_WHEN.items() if isinstance(when, P.ActsWhen)}
    assert set(INERT) == conditional, "every conditional setting needs an INERT case"
    for key, (base, changed, _) in SETTINGS.items():  # the table's own configurations act as they say
        for overrides in (base, changed):
            P.refuse_inert(load_settings(None, overrides, environ={}).retrieval, "the table")


@pytest.mark.parametrize("name", sorted(INERT))
def test_a_changed_setting_with_nothing_to_act_on_is_refused_by_name(name):
    where, value = INERT[name]
    when = P.ACTS_WHEN[name]
    s = load_settings(None, {**where, f"retrieval.{name}": value}, environ={})
    assert not when.test(s.retrieval)
    with pytest.raises(UnsupportedSetting) as exc:
        P.refuse_inert(s.retrieval, "invoke eval")
    assert f"retrieval.{name}={value}" in str(exc.value) and when.needs in str(exc.value)
    # left at its default it is no setting at all: nothing is refused
    P.refuse_inert(load_settings(None, where, environ={}).retrieval, "invoke eval")


class _NoKB:
    """Test double for control flow only: a retriever must refuse before it touches the knowledge base."""

    class embedder:
        id = "none"


def test_the_retriever_refuses_inert_settings_whoever_builds_it():
    s = load_settings(None, {"retrieval.fusion": "convex"}, environ={})
    with pytest.raises(UnsupportedSetting, match=r"retrieval\.fusion=convex .*retrieval\.mode=hybrid .*"
                                                 r"here retrieval\.mode=dense"):
        Retriever.from_settings(s, _NoKB(), entry_point="adiyan search")
    with pytest.raises(UnsupportedSetting, match=r"retrieval\.rerank_overfetch=2 .*retrieval\.rerank=true"):
        Retriever(_NoKB(), RetrievalConfig(rerank_overfetch=2), floor=0.0)


def test_invoke_eval_refuses_convex_fusion_in_dense_mode(world, capsys):
    """`invoke eval --set retrieval.fusion=convex` (dense, the default mode): refused by name, before
    an index is built or a run directory written (it used to run plain dense search and report convex)."""
    s = _settings(world, {"retrieval.fusion": "convex"})
    reports = world["root"] / "reports"
    before = sorted(reports.iterdir()) if reports.exists() else []
    sets = []
    for key, value in _flat(s, evaluation=True).items():
        sets += ["--set", f"{key}={value if value is not None else 'null'}"]
    capsys.readouterr()
    assert cli.main(sets + ["eval", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "retrieval.fusion=convex has nothing to act on in invoke eval" in err and "retrieval.mode=hybrid" in err
    with pytest.raises(UnsupportedSetting, match=r"retrieval\.fusion=convex"):
        run_eval(s, progress=False)
    with pytest.raises(UnsupportedSetting, match=r"retrieval\.prf_docs=3"):
        evaluate_retrieval(_settings(world, {"retrieval.mode": "bm25", "retrieval.prf_docs": 3}))
    assert (sorted(reports.iterdir()) if reports.exists() else []) == before


def test_shipped_presets_and_sweep_points_set_no_inert_setting():
    from adiyan import sweeps as S

    for name in presets():
        P.refuse_inert(load_settings(None, {}, environ={}, preset=name).retrieval, f"preset {name}")
    n = 0
    for path in sorted((ROOT / "sweeps").glob("*.yaml")):
        for point in S.expand(S.load_spec(path)):
            P.refuse_inert(load_settings(None, point.overrides, environ={}).retrieval, f"{path.name} {point.id}")
            n += 1
    assert n >= 40  # every point of every shipped sweep was checked


# -- llm.name: every answering entry point loads the configured answerer --------------------

@pytest.mark.slow  # three entry points, two eval runs (about 15 min on the loaded shared machine it was written on)
@pytest.mark.parametrize("name", ["extractive", "smollm2"])
def test_every_answering_entry_point_honours_llm_name(world, monkeypatch, name):
    """``invoke eval``, ``adiyan ask`` and the context experiment answer with the model llm.name
    names. The extractive answerer is real (its answers are quotes with [n] citations or the
    abstention); for smollm2 the loader is observed and the model replaced by HydeLLM (a test
    double for control flow only, so the test does not run a 135M model three times)."""
    from adiyan.generation import NO_CONTEXT_ANSWER
    from adiyan.models import registry

    asked, real = [], registry.load_llm

    def spy_load(llm_name, **kw):
        asked.append(llm_name)
        return real(llm_name, **kw) if llm_name == "extractive" else HydeLLM()

    monkeypatch.setattr(registry, "load_llm", spy_load)
    s = _settings(world, {"llm.name": name, "eval.generate": True})

    def is_extractive(text):
        return text == NO_CONTEXT_ANSWER or text.rstrip().endswith("]")

    run = run_eval(s, progress=False, run_id=f"llm-{name}")
    rows = [json.loads(x) for x in (run / "questions.jsonl").read_text().splitlines()]
    m = json.loads((run / "metrics.json").read_text())
    if not (world["root"] / "data" / "raw").exists():
        _ingest_cli(world, s)
    asks = [ask_module.ask(s, q, "bob").answer for q in PROBES[:2]]
    ctx = context_experiment.evaluate_context(s)
    shown = [r["answer"] for r in rows] + asks + list(ctx.info["answers"].values())
    assert asked and set(asked) == {name}  # every load asked for the configured name, and only it
    if name == "extractive":
        assert m["models"]["llm"]["id"].startswith("extractive-v2:")
        assert all(is_extractive(a) for a in shown), shown
        assert any(a != NO_CONTEXT_ANSWER for a in shown)
    else:
        assert m["models"]["llm"]["id"] == HydeLLM.id and set(shown) == {"scripted answer"}


@pytest.mark.parametrize("verb", [["ingest", "nothing.md", "--owner", "bob"], ["search", "refund window", "--as", "bob"],
                                  ["ask", "How long?", "--as", "bob"], ["ls", "--as", "bob"], ["get", "some.md", "--as", "bob"],
                                  ["kb", "migrate-private", "--owner", "bob"], ["compare", "run-a", "run-b"]])
def test_the_verbs_that_run_no_evaluation_refuse_an_eval_setting_by_name(verb, tmp_path, capsys):
    """adiyan ingest / search / ask / ls / get / migrate-private / compare read no eval.* setting: one given with --set is refused
    by name (exit 2) before anything is opened, never silently inert (a config file's eval section,
    shared with invoke eval, is not refused)."""
    from adiyan import cli

    data = tmp_path / "data"
    code = cli.main(["--set", f"paths.data_dir={data}", "--set", "eval.repeats=3", *verb])
    err = capsys.readouterr().err
    assert code == 2
    name = " ".join(verb[:2]) if verb[0] == "kb" else verb[0]
    assert f"eval.repeats=3 is not honoured by adiyan {name}" in err
    assert not data.exists()  # refused before the knowledge base was opened
