"""``adiyan ask`` end to end: the real CLI, the real embedder (MiniLM) and the embedded LLM (SmolLM2)
over a knowledge base ingested from evalsets/adiyan_basic's documents plus one private document
of another user. What must hold: the evalset's questions cite their gold source; the private
document never reaches another requester's screen (neither its name nor its text, checked on the
full output) while the hidden count says how many of its chunks the policy removed, equal to
what the pipeline retrieves for the owner role; its owner sees it; the agent's printed trace
lists the tools that really ran.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from adiyan import cli
from adiyan.config import load_settings
from adiyan.factory import open_kb, open_retriever
from adiyan.models.base import Completion
from adiyan.retrieval import Retriever
from adiyan.types import OWNER

ROOT = Path(__file__).resolve().parents[1]
EVALSET = ROOT / "evalsets" / "adiyan_basic"
PRIVATE_NAME = "carol_salary_review.md"
PRIVATE_TEXT = ("# Salary review (Carol, private)\n\nCarol's salary review: her annual bonus code is ZEBRA-4411 and "
                "her salary review meeting with the managing director is on 12 March. The salary review bonus "
                "is paid in April.\n")
SECRET_QUESTION = "When is Carol's salary review meeting and what is her bonus code?"


def _overrides(root: Path) -> dict:
    return {"paths.data_dir": str(root / "data"), "paths.cache_dir": str(root / "cache"),
            "paths.reports_dir": str(root / "reports"), "paths.models_dir": str(ROOT / ".cache/adiyan/models"),
            "retrieval.use_calibrated_floors": False}


def _sets(root: Path) -> list[str]:
    out = []
    for k, v in _overrides(root).items():
        out += ["--set", f"{k}={v}"]
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("ask")
    docs = EVALSET / "docs"
    manifest = yaml.safe_load((EVALSET / "manifest.yaml").read_text(encoding="utf-8"))
    assert {d["visibility"] for d in manifest["documents"]} == {"global"}
    assert cli.main(_sets(root) + ["ingest", *[str(ROOT / "evalsets/adiyan_basic" / d["file"])
                                               for d in manifest["documents"]],
                                   "--owner", "adiyan-office", "--visibility", "global", "--quiet"]) == 0
    private = root / PRIVATE_NAME
    private.write_text(PRIVATE_TEXT, encoding="utf-8")
    assert cli.main(_sets(root) + ["ingest", str(private), "--owner", "carol", "--visibility", "private",
                                   "--quiet"]) == 0
    questions = [json.loads(x) for x in (EVALSET / "questions.jsonl").read_text(encoding="utf-8").splitlines() if x]
    assert sorted(p.name for p in docs.iterdir()) == sorted(Path(d["file"]).name for d in manifest["documents"])
    return {"root": root, "questions": questions}


def _ask(world, capsys, *args) -> tuple[int, str]:
    capsys.readouterr()
    code = cli.main(_sets(world["root"]) + ["ask", *args, "--quiet"])
    out = capsys.readouterr()
    return code, out.out + out.err


def _owner_role_private_chunks(world, question: str) -> int:
    """Independently: the pipeline's top k for the owner role (no access filter), counting carol's."""
    s = load_settings(None, _overrides(world["root"]), environ={})
    kb = open_kb(s, progress=False)
    try:
        res = open_retriever(s, kb, entry_point="test").retrieve_knowledge_base(question, OWNER)
    finally:
        kb.store.close()
    return sum(1 for c in res.chunks if c.source == f"carol/{PRIVATE_NAME}")


@pytest.mark.slow
def test_evalset_questions_cite_their_gold_source(world, capsys):
    answerable = [q for q in world["questions"] if q["gold_sources"]]
    assert len(answerable) == 14
    missed = []
    for q in answerable:
        code, out = _ask(world, capsys, q["question"], "--as", "bob", "--json")
        assert code == 0, out
        res = json.loads(out)
        cited = {s["source"] for s in res["sources"]}
        if not any(f"adiyan-office/{g}" in cited for g in q["gold_sources"]):
            missed.append((q["id"], sorted(cited)))
        assert res["answer"].strip(), q["id"]
        assert all(not s.startswith("carol/") for s in cited)
    assert not missed, missed  # hit rate 1.0 at k 4 on adiyan_basic, as invoke eval measures it


@pytest.mark.slow  # SmolLM2 answers: 100-200 s under load on 2 shared cores
def test_two_questions_cite_their_gold_source_in_the_printed_output(world, capsys):
    for qid, gold in [("q01", "price_list.md"), ("q06", "refund_policy.md")]:
        q = next(x for x in world["questions"] if x["id"] == qid)
        code, out = _ask(world, capsys, q["question"], "--as", "bob")
        assert code == 0, out
        sources = out[out.index("sources ("):]
        assert f"adiyan-office/{gold}  chunk " in sources and "page n/a  score " in sources
    # the answer to the price question quotes the figure (SmolLM2 does, from the cited chunk)
    q01 = next(x for x in world["questions"] if x["id"] == "q01")
    _, out = _ask(world, capsys, q01["question"], "--as", "bob")
    assert "450" in out.split("\n\nsources", 1)[0]


@pytest.mark.slow  # SmolLM2 answers: 100-200 s under load on 2 shared cores
def test_private_document_stays_hidden_from_another_requester(world, capsys):
    expected = _owner_role_private_chunks(world, SECRET_QUESTION)
    assert expected >= 1, "the question must reach the private document when nothing is filtered"
    code, out = _ask(world, capsys, SECRET_QUESTION, "--as", "bob")
    assert code == 0, out
    for leak in (PRIVATE_NAME, "carol/", "ZEBRA", "4411", "12 March", "managing director", "paid in April"):
        assert leak not in out, f"{leak!r} leaked into bob's output:\n{out}"
    assert (f"hidden by the access policy: {expected} of the top 4 chunk(s) for this question are not visible "
            "to bob") in out
    code, js = _ask(world, capsys, SECRET_QUESTION, "--as", "bob", "--json")
    assert json.loads(js)["hidden"] == expected and PRIVATE_NAME not in js and "ZEBRA" not in js


@pytest.mark.slow  # SmolLM2 answers: 100-200 s under load on 2 shared cores
def test_the_owner_sees_her_private_document(world, capsys):
    code, out = _ask(world, capsys, SECRET_QUESTION, "--as", "carol")
    assert code == 0, out
    assert f"carol/{PRIVATE_NAME}  chunk 0" in out
    assert "hidden by the access policy: 0 of the top 4" in out


class EchoLLM:
    """Test double for control flow only, and the worst-case leaker: its answer repeats every
    passage it was handed, so anything the access policy let through would be printed."""

    id = "echo-context"
    context_size = 2048

    def chat(self, messages, *, max_tokens=None, temperature=None):
        return Completion(" | ".join(m.content for m in messages))


def test_the_whole_context_shown_to_another_requester_holds_nothing_private(world, capsys, monkeypatch):
    monkeypatch.setattr("adiyan.ask.open_llm", lambda settings: EchoLLM())
    expected = _owner_role_private_chunks(world, SECRET_QUESTION)
    assert expected >= 1
    code, out = _ask(world, capsys, SECRET_QUESTION, "--as", "bob")
    assert code == 0, out
    assert "Context:\n[1] (adiyan-office/" in out  # the echo shows the passages bob's answer came from
    for leak in (PRIVATE_NAME, "carol/", "ZEBRA", "4411", "12 March", "managing director", "paid in April"):
        assert leak not in out, f"{leak!r} leaked into bob's output:\n{out}"
    assert f"hidden by the access policy: {expected} of the top 4" in out
    code, out = _ask(world, capsys, SECRET_QUESTION, "--as", "carol")
    assert "ZEBRA-4411" in out and f"carol/{PRIVATE_NAME}  chunk 0" in out  # the owner's context has it


def test_a_conversation_carries_its_turns_to_the_next_call_and_only_for_its_user(world, capsys, monkeypatch):
    monkeypatch.setattr("adiyan.ask.open_llm", lambda settings: EchoLLM())
    first = "How much does the Julian Alps Weekend cost per person?"
    code, out = _ask(world, capsys, first, "--as", "bob", "--conversation", "trip1", "--json")
    assert code == 0, out
    assert json.loads(out)["context"]["turns_before"] == 0
    code, out = _ask(world, capsys, "And is there a single supplement on it?", "--as", "bob", "--conversation",
                     "trip1", "--json")
    assert code == 0, out
    res = json.loads(out)
    assert res["context"]["turns_before"] == 2 and res["conversation"] == "trip1"
    assert first in res["answer"]  # the echo shows the earlier turn reached the prompt (history or memory)
    turns = [json.loads(x) for x in (world["root"] / "data/conversations/bob/trip1.jsonl").read_text().splitlines()]
    assert [t["role"] for t in turns] == ["user", "assistant"] * 2 and turns[0]["content"] == first
    # another requester's conversation of the same id is another conversation: bob's turn is not in it
    code, out = _ask(world, capsys, "And is there a single supplement on it?", "--as", "alice", "--conversation",
                     "trip1", "--json")
    res = json.loads(out)
    assert code == 0 and res["context"]["turns_before"] == 0 and first not in res["answer"]
    code, out = _ask(world, capsys, first, "--conversation", "trip1")
    assert code == 2 and "a conversation belongs to a named requester (--as NAME)" in out


def test_empty_question_is_refused_by_name(world, capsys):
    code, out = _ask(world, capsys, "   ", "--as", "bob")
    assert code == 2 and "adiyan: the question is empty" in out


@pytest.mark.slow
def test_agent_prints_a_trace_of_tools_that_really_ran(world, capsys, monkeypatch):
    seen = []  # observer only: the pipeline's real results, recorded
    real = Retriever.retrieve

    def recording(self, *args, **kwargs):
        res = real(self, *args, **kwargs)
        seen.append(res)
        return res

    monkeypatch.setattr(Retriever, "retrieve", recording)
    code, out = _ask(world, capsys, SECRET_QUESTION, "--as", "bob", "--agent")
    assert code == 0, out
    for leak in (PRIVATE_NAME, "carol/", "ZEBRA", "4411", "12 March"):
        assert leak not in out, f"{leak!r} leaked into bob's agent output:\n{out}"
    trace = out[out.index("agent trace ("):].splitlines()[1:]
    steps = [line.split(". ", 1)[1].split("(", 1)[0] for line in trace]
    assert steps and steps[0] == "search_kb"  # strict grounding: evidence first
    searches = [t for t in steps if t in ("search_kb", "search_document", "find_document")]
    # the hidden count is the owner view inside the Retriever, not a retrieve() call; every traced search is one
    assert len(seen) == len(searches), (steps, len(seen))
    assert all(r.query for r in seen)
    code, js = _ask(world, capsys, SECRET_QUESTION, "--as", "bob", "--agent", "--json")
    res = json.loads(js)
    assert res["mode"] == "agent" and [t["tool"] for t in res["trace"]] == steps


# -- the hidden count under every retrieval setting (issue 23 item 2) -------------------------------

PIPELINE = {"retrieval.mode": "hybrid", "retrieval.fusion": "convex", "retrieval.fusion_norm": "z",
            "retrieval.fusion_weight": 0.6, "retrieval.prf_docs": 3, "retrieval.prf_weight": 0.5,
            "retrieval.rerank": True, "retrieval.rerank_model": "minilm"}
MORE_PRIVATE = {
    "dave_refund_notes.md": "# Dave's notes on refunds (private)\n\nCustomer complaint log: a guest who cancelled 20 days "
                            "before departure asked for a refund; I told her the refund request form and the "
                            "cancellation fee. Refund disputes go to Dave.\n",
    "dave_price_ideas.md": "# Dave's price ideas (private)\n\nIdea: lower the price of the Julian Alps Weekend and the "
                           "single supplement next season; children's discount could rise. Draft only.\n",
    "dave_packing.md": "# Dave's packing list (private)\n\nSuitcase weight limit for my own trip, luggage, rain gear, "
                       "boots, insurance papers, medical cover card.\n",
}
# questions whose count differs between the full pipeline's owner view and one engine query of the
# same mode (what the count used to be), and one where both agree
HIDDEN_QUESTIONS = ["What is form EQ-5 used for?", SECRET_QUESTION, "Will the price of the Julian Alps Weekend go down?"]


@pytest.fixture(scope="module")
def fused_world(tmp_path_factory):
    root = tmp_path_factory.mktemp("ask-fused")
    sets = _sets(root) + [x for k, v in PIPELINE.items() for x in ("--set", f"{k}={v}")]
    manifest = yaml.safe_load((EVALSET / "manifest.yaml").read_text(encoding="utf-8"))
    assert cli.main(sets + ["ingest", *[str(EVALSET / d["file"]) for d in manifest["documents"]],
                            "--owner", "adiyan-office", "--visibility", "global", "--quiet"]) == 0
    for name, text in {PRIVATE_NAME: PRIVATE_TEXT, **MORE_PRIVATE}.items():
        (root / name).write_text(text, encoding="utf-8")
    assert cli.main(sets + ["ingest", str(root / PRIVATE_NAME), "--owner", "carol", "--visibility", "private",
                            "--quiet"]) == 0
    assert cli.main(sets + ["ingest", *[str(root / n) for n in MORE_PRIVATE], "--owner", "dave", "--visibility",
                            "private", "--quiet"]) == 0
    return {"root": root, "sets": sets}


def test_hidden_count_is_the_owner_view_of_the_same_pipeline_run(fused_world, capsys, monkeypatch):
    """With convex fusion, pseudo-relevance feedback and re-ranking on, "N of the top k are hidden" is
    the pipeline's own top k for the owner role (computed here independently through open_retriever)
    minus what bob may see; one engine query of the same mode (the count before issue 23) gives other
    numbers on these questions, so the check can fail. Nothing private reaches bob's output."""
    monkeypatch.setattr("adiyan.ask.open_llm", lambda settings: EchoLLM())
    s = load_settings(None, {**_overrides(fused_world["root"]), **PIPELINE}, environ={})
    kb = open_kb(s, progress=False)
    try:
        retriever = open_retriever(s, kb, entry_point="test")
        expected, engine_only = [], []
        for q in HIDDEN_QUESTIONS:
            owner = retriever.retrieve_knowledge_base(q, OWNER)
            expected.append(sum(1 for c in owner.chunks if c.payload["visibility"] != "global"))
            hits = kb.search(q, 4, requester=OWNER, mode="hybrid", prefetch=s.retrieval.hybrid_prefetch)
            engine_only.append(sum(1 for c in hits if c.payload["visibility"] != "global"))
            assert retriever.hidden_count(q, "bob") == expected[-1]  # the agent's count: the same owner view
    finally:
        kb.store.close()
    assert all(expected) and engine_only != expected  # every question hides something; the old count differs
    for q, n in zip(HIDDEN_QUESTIONS, expected):
        capsys.readouterr()
        assert cli.main(fused_world["sets"] + ["ask", q, "--as", "bob", "--quiet", "--json"]) == 0
        out = capsys.readouterr().out
        res = json.loads(out)
        assert res["hidden"] == n, (q, res["hidden"], n)
        assert res["retrieval"].startswith("hybrid") and "rerank" in res["retrieval"]  # the pipeline's own words
        for leak in ("carol/", "dave/", "ZEBRA", "Dave's", "Customer complaint", "Draft only", "insurance papers"):
            assert leak not in out, f"{leak!r} leaked into bob's output"
