"""LoCoMo for the memory engine (adiyan/eval/locomo): the loader, LoCoMo's recall / nDCG / F1 checked
by hand, the paths on a hand-built two-session conversation (tests/data/locomo_two_sessions.json),
and the dispatch from ``invoke eval``. Real models (minilm) and real stores throughout."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from adiyan.eval.locomo import paths as P

from adiyan.eval.locomo.data import LocomoError, load_locomo
from adiyan.retrieval.pipeline import UnsupportedSetting
from adiyan.eval.locomo.run import answer_sample, evaluate, locomo_tables
from adiyan.eval.locomo.scoring import (answer_score, evidence_recall, f1_score, multi_hop_f1, ndcg_at_k,
                                        normalize_answer)

FIXTURE = Path(__file__).parent / "data" / "locomo_two_sessions.json"
LOCOMO8 = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "locomo" / "locomo8.json"
MODEL_DIR = Path(__file__).resolve().parents[1] / ".cache" / "adiyan" / "models"  # as conftest: shared unpacked models
Q2_NDCG = 1 / (1 + 1 / math.log2(3))  # one of two evidence turns, at rank 1


def test_loader_reads_sessions_times_and_questions():
    ls = load_locomo(FIXTURE)
    (c,) = ls.conversations
    assert c.id == "tiny-1" and c.speakers == ("Ann", "Bob") and c.user == "locomo-tiny-1"
    assert [t.dia_id for t in c.turns] == ["D1:1", "D1:2", "D1:3", "D1:4", "D2:1", "D2:2", "D2:3", "D2:4"]
    assert c.turns[0].text == "Ann: I adopted a kitten called Pixel."
    assert c.turns[5].text == "Bob: I played my first recital yesterday! [shares a photo of a violin on a stage]"
    # session time (read as UTC) plus a second per turn; session 3 has a date but no turns: ignored
    assert c.turns[0].at == "2023-01-01T10:00:00+00:00" and c.turns[3].at == "2023-01-01T10:00:03+00:00"
    assert c.turns[4].at == "2023-03-01T15:30:00+00:00" and c.end == "2023-03-01T15:30:03+00:00"
    assert sorted(c.session_times) == [1, 2]
    assert [(q.qid, q.category_name) for q in c.questions] == [
        ("tiny-1.q1", "single_hop"), ("tiny-1.q2", "multi_hop"), ("tiny-1.q3", "temporal"),
        ("tiny-1.q4", "adversarial"), ("tiny-1.q5", "open_domain")]
    assert c.questions[3].answer == "" and c.questions[3].adversarial_answer == "a vase"
    assert c.questions[4].evidence == ()


@pytest.mark.skipif(not LOCOMO8.is_file(), reason="../shared/datasets/locomo/locomo8.json not present")
def test_loader_counts_on_locomo8():
    ls = load_locomo(LOCOMO8)
    assert (len(ls.conversations), len(ls.questions()), len(ls.turns())) == (8, 1586, 4805)
    counts = {n: sum(q.category == n for q in ls.questions()) for n in range(1, 6)}
    assert counts == {1: 213, 2: 256, 3: 76, 4: 681, 5: 360}


def test_recall_and_ndcg_by_hand():
    assert evidence_recall(["D1:3", "D2:3"], ["D2:3", "D1:1"]) == 0.5
    assert evidence_recall([], ["D1:1"]) == 1.0  # no evidence counts 1, as in LoCoMo
    assert evidence_recall(["D8:6; D9:17"], ["D8:6", "D9:17"]) == 0.0  # a misspelt id is never found
    # DCG 1/log2(2) + 1/log2(4) = 1.5; ideal 1 + 1/log2(3)
    assert ndcg_at_k(["D1:3", "D2:3"], ["D2:3", "D1:1", "D1:3"], 10) == pytest.approx(1.5 / (1 + 1 / math.log2(3)))
    assert ndcg_at_k(["D1:3", "D2:3"], ["D2:3", "D1:1", "D1:3"], 2) == pytest.approx(1 / (1 + 1 / math.log2(3)))
    assert ndcg_at_k([], ["D1:1"]) is None


def test_answer_f1_as_locomo_normalises_by_hand():
    assert normalize_answer("The Cat, and a Dog!") == "cat dog"
    assert f1_score("a kitten", "kitten") == 1.0
    assert f1_score("Lisbon in May", "Lisbon") == pytest.approx(0.5)  # P 1/3, R 1
    assert f1_score("running races", "ran a race") == pytest.approx(0.5)  # Porter: run race / ran race
    assert f1_score("7 May, 2023", "7 May 2023") == 1.0  # commas dropped
    assert f1_score("", "Lisbon") == 0.0
    assert multi_hop_f1("Lisbon, May", "May, Lisbon") == 1.0
    assert multi_hop_f1("Lisbon", "Lisbon, May") == pytest.approx(0.5)  # mean over reference parts
    assert answer_score("Lisbon", "Lisbon, May", 1) == pytest.approx(0.5)
    assert answer_score("psychology", "Psychology; counseling certification", 3) == 1.0  # up to the first ';'
    assert answer_score("psychology", "Psychology; counseling certification", 4) == pytest.approx(2 / 4)
    assert answer_score("That is not mentioned in the conversation.", "", 5) == 1.0
    assert answer_score("No information available", "", 5) == 1.0
    assert answer_score("I don't know based on the documents.", "", 5) == 0.0  # LoCoMo's phrases only
    with pytest.raises(ValueError, match="category 6"):
        answer_score("x", "y", 6)


def test_answer_sample_is_seeded_and_per_category():
    ls = load_locomo(FIXTURE)
    assert answer_sample(ls, None, 0) == [q.qid for q in ls.questions()]
    one = answer_sample(ls, 1, 0)
    assert sorted(one) == sorted(q.qid for q in ls.questions())  # one question per category, five categories
    assert answer_sample(ls, 1, 0) == one


@pytest.fixture(scope="module")
def fixture_rows(tmp_path_factory):
    """Every path on the fixture, with minilm behind the project's embedding cache (in tmp)."""
    from adiyan.config import load_settings
    from adiyan.factory import open_embedder

    tmp = tmp_path_factory.mktemp("locomo")
    s = load_settings(None, {"paths.data_dir": str(tmp / "data"), "paths.cache_dir": str(tmp / "cache"),
                             "paths.reports_dir": str(tmp / "reports"), "paths.models_dir": str(MODEL_DIR),
                             "retrieval.use_calibrated_floors": False,
                             # the seed's memory (cosine, every memory decayed): the figures below are by hand
                             "memory.search": "dense", "memory.recency_scope": "all"}, environ={})
    emb = open_embedder(s, progress=False)
    rows, info = evaluate(s, load_locomo(FIXTURE), emb)
    return s, {r["id"]: r for r in rows}, info, emb


def test_reference_bm25_recall_on_the_two_session_conversation_by_hand(fixture_rows):
    _, rows, _, _ = fixture_rows
    bm = {qid: r["recall"]["reference_bm25"]["5"] for qid, r in rows.items()}
    # q1 "pixel" matches D1:1 (evidence) and D2:1; q2 "visit" matches only D2:3 of D1:3 + D2:3; q3 "recital"
    # D2:2; q4 "kitten" only D1:1, not the evidence D2:1 ("broke" is not "break"); q5 has no evidence
    assert bm == {"tiny-1.q1": 1.0, "tiny-1.q2": 0.5, "tiny-1.q3": 1.0, "tiny-1.q4": 0.0, "tiny-1.q5": 1.0}
    assert rows["tiny-1.q2"]["retrieved_ids"]["reference_bm25"] == ["D2:3"]
    assert rows["tiny-1.q2"]["ndcg@10"]["reference_bm25"] == pytest.approx(Q2_NDCG)
    t = locomo_tables(list(rows.values()), P.PATHS)
    assert t["reference_bm25"]["recall@5"]["all"] == pytest.approx(3.5 / 5)
    assert t["reference_bm25"]["recall@5"]["multi_hop"] == 0.5 and t["reference_bm25"]["recall@5"]["adversarial"] == 0
    assert t["reference_bm25"]["ndcg@10"]["all"] == pytest.approx((1 + Q2_NDCG + 1 + 0) / 4)  # q5: no value
    assert t["questions"] == {"all": 5, "multi_hop": 1, "temporal": 1, "open_domain": 1, "single_hop": 1,
                              "adversarial": 1}


def test_memory_by_similarity_and_the_kb_rank_as_exact_dense_search(fixture_rows):
    """mem0 (verbatim turns, recency off) and the knowledge base (a turn per chunk) over the same
    embedder must rank the 8 turns exactly as the exact dense index does; the context's ids are turns."""
    _, rows, info, _ = fixture_rows
    for r in rows.values():
        dense = r["retrieved_ids"]["reference_dense"]
        assert len(dense) == 8
        assert r["retrieved_ids"]["memory_similarity"] == dense, r["id"]
        assert r["retrieved_ids"]["kb"] == dense, r["id"]
        assert set(r["context_ids"]) <= set(dense)
    assert info["mem0_searches"] == 5  # one similarity search per question serves every k and recency


@pytest.mark.parametrize("memory_cfg", [{}, {"memory.search": "hybrid", "memory.recency_scope": "superseded"}],
                         ids=["seed", "default"])
def test_candidate_memory_returns_what_memory_search_returns(fixture_rows, memory_cfg):
    s, _, _, minilm = fixture_rows
    s = s.with_overrides(memory_cfg)
    ls = load_locomo(FIXTURE)
    (c,) = ls.conversations
    memory, folder, built = P.memory_store(s, ls, minilm)
    assert built == 0.0  # the module fixture built it; this run reuses it
    assert (memory.search_mode, memory.recency_scope) == (s.memory.search, s.memory.recency_scope)
    try:
        cm = P.CandidateMemory(memory, depth=20)
        for q in c.questions:
            for k in (1, 2, 3, 5):
                for recency in (True, False):
                    want = memory.search(q.question, user_id=c.user, k=k, recency=recency, now=c.end)
                    got = cm.search(q.question, user_id=c.user, k=k, recency=recency, now=c.end)
                    assert [(h.id, h.weight, h.metadata["dia_id"]) for h in got] == \
                        [(h.id, h.weight, h.metadata["dia_id"]) for h in want], (q.qid, k, recency)
                    # the scores come from two separate engine searches, whose float64 dot products may
                    # round the last bit apart (CI saw 0.06980978069509336 against ...337): equal to 1e-12
                    assert [h.score for h in got] == pytest.approx([h.score for h in want], rel=1e-12, abs=0), \
                        (q.qid, k, recency)
        assert cm.searches == len(c.questions)
    finally:
        memory.close()


def test_recency_ranks_a_newer_turn_first(fixture_rows):
    """q2's evidence: D1:3 (sister, Lisbon; 59 days old) and D2:3 (visit the sister; new). With a 14-day
    half-life the older turn's weight is 0.5 ** (59.2 / 14) ~ 0.054, so no session-1 turn may outrank a
    session-2 turn of at least a fifth of its similarity: the top of the recency ranking is session 2."""
    _, rows, _, _ = fixture_rows
    for r in rows.values():
        assert r["retrieved_ids"]["memory_recency"][0].startswith("D2:"), r["id"]


def _bad(tmp_path, content: str) -> Path:
    p = tmp_path / "broken_locomo.json"
    p.write_text(content, encoding="utf-8")
    return p


def test_dispatch_refuses_a_malformed_locomo_file_naming_it(tmp_path, make_settings):
    from adiyan.eval.runner import run_eval

    cases = {"{not json": "not valid JSON", '{"qa": []}': "non-empty JSON list",
             '[{"conversation": {"session_1": []}, "qa": "x"}]': "'qa' list",
             json.dumps([{"sample_id": "c", "conversation": {"session_1": [{"speaker": "A", "dia_id": "D2:1",
                                                                           "text": "hi"}],
                                                             "session_1_date_time": "1:56 pm on 8 May, 2023"},
                          "qa": []}]): "expected D1:<turn>",
             json.dumps([{"sample_id": "c", "conversation": {"session_1": [{"speaker": "A", "dia_id": "D1:1",
                                                                           "text": "hi"}],
                                                             "session_1_date_time": "yesterday"},
                          "qa": []}]): "not like"}
    for content, reason in cases.items():
        p = _bad(tmp_path, content)
        s = make_settings(**{"eval.evalset": str(p), "eval.incidents": False, "eval.generate": False})
        with pytest.raises(LocomoError, match=reason) as exc:
            run_eval(s, progress=False)
        assert str(p) in str(exc.value)
    assert not (tmp_path / "reports").exists()  # refused before anything was written
    with pytest.raises(LocomoError, match="not found"):
        load_locomo(tmp_path / "missing.json")


def test_settings_locomo_cannot_honour_are_refused_by_name(make_settings):
    from adiyan.eval.runner import run_eval
    from adiyan.retrieval.pipeline import UnsupportedSetting

    for key, value in (("eval.mode", "agent"), ("store.engine", "server")):
        s = make_settings(**{"eval.evalset": str(FIXTURE), key: value, "store.url": "http://127.0.0.1:1"})
        with pytest.raises(UnsupportedSetting, match=f"{key}={value}"):
            run_eval(s, progress=False)
    with pytest.raises(LocomoError, match="no conversation conv-99"):
        run_eval(make_settings(**{"eval.evalset": str(FIXTURE), "eval.locomo_conversations": ["conv-99"]}),
                 progress=False)


def test_invoke_eval_on_a_locomo_file_writes_the_run(make_settings, capsys):
    """The whole run through the CLI on the fixture: metrics.json (the hand-computed BM25 figure at
    the documented key), questions.jsonl, report.html with the LoCoMo section, the runs index."""
    from adiyan import cli

    s = make_settings(**{"eval.evalset": str(FIXTURE), "eval.incidents": False, "eval.generate": False,
                         "eval.judge": None})
    sets = []
    for key in ("paths.data_dir", "paths.reports_dir", "paths.cache_dir", "paths.models_dir"):
        sets += ["--set", f"{key}={s.to_dict()[key.split('.')[0]][key.split('.')[1]]}"]
    sets += ["--set", f"eval.evalset={FIXTURE}", "--set", "eval.incidents=false", "--set", "eval.generate=false",
             "--set", "eval.judge=null", "--set", "retrieval.use_calibrated_floors=false"]
    assert cli.main(sets + ["eval", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "reference_bm25 recall@5" in out and "0.700" in out
    (run,) = [d for d in Path(s.paths.reports_dir).iterdir() if d.is_dir()]
    m = json.loads((run / "metrics.json").read_text())
    assert m["locomo"]["reference_bm25"]["recall@5"]["all"] == pytest.approx(0.7)
    assert m["metrics"]["locomo"]["reference_bm25.recall@5"] == pytest.approx(0.7)
    assert m["dataset"]["kind"] == "locomo" and m["dataset"]["n_questions"] == 5
    from adiyan import metrics as M

    assert M.check_metrics(m["metrics"]) == []  # every metric written is registered
    assert len((run / "questions.jsonl").read_text().splitlines()) == 5
    html = (run / "report.html").read_text()
    assert 'id="locomo"' in html and "<svg" in html and 'id="q-tiny-1.q2"' in html
    assert "http" not in html.split('id="locomo"')[1].replace("http://www.w3.org", "")  # no network assets
    assert run.name in (Path(s.paths.reports_dir) / "index.html").read_text()


class _ScriptedLLM:
    """Test double for control flow only: answers each fixture question with a fixed string, so the
    answer side's sampling, scoring per category and labelling can be checked by hand."""

    id = "scripted"
    ANSWERS = {"What kind of pet is Pixel?": "kitten", "Which city is the visit to, and when?": "Lisbon",
               "When was the recital?": "February", "What did the kitten break?": "Not mentioned in the conversation",
               "Which colour is the favourite?": "stated"}

    def chat(self, messages, **kw):
        asked = next(q for q in self.ANSWERS if q in messages[-1].content)
        return SimpleNamespace(text=self.ANSWERS[asked], prompt_tokens=1, completion_tokens=1)


def test_answers_are_scored_per_category_and_labelled_wiring(fixture_rows):
    from adiyan.eval.locomo.run import answer_metrics, answer_rows

    s, _, _, emb = fixture_rows
    ls = load_locomo(FIXTURE)
    sample = answer_sample(ls, 8, s.seed)
    rows, _ = evaluate(s, ls, emb, paths=("context", "kb"), keep_chunks=set(sample))
    answer_rows(s, rows, sample, _ScriptedLLM(), None)
    g, ragas = answer_metrics(s, rows)
    # kitten = a kitten: 1; multi-hop "Lisbon" vs "Lisbon, May": (1 + 0) / 2; "February" vs "28 February 2023":
    # P 1, R 1/3 -> 0.5; adversarial abstains in LoCoMo's words: 1; "stated" vs "not stated": P 1, R 1/2 -> 2/3
    assert g["f1.single_hop"] == 1.0 and g["f1.multi_hop"] == 0.5 and g["f1.temporal"] == pytest.approx(0.5)
    assert g["f1.adversarial"] == 1.0 and g["f1.open_domain"] == pytest.approx(2 / 3)
    assert g["f1"] == pytest.approx((1 + 0.5 + 0.5 + 1 + 2 / 3) / 5) and g["answered"] == 5
    # the default answerer is the extractive one (quotes, not the embedded generative model): not wiring;
    # the embedded smollm2 is labelled wiring
    assert s.llm.name == "extractive" and g["wiring"] == 0.0
    assert answer_metrics(s.with_overrides({"llm.name": "smollm2"}), rows)[0]["wiring"] == 1.0
    assert ragas["exact_match"] == 0.0  # no answer is its reference string ("kitten" is not "a kitten")
    assert all(r["abstained"] is False for r in rows if r["category"] != 5)


@pytest.mark.parametrize("key, value", [("eval.locomo_conversations", ["conv-26"]),
                                        ("eval.locomo_answer_per_category", 2)])
def test_locomo_settings_are_refused_on_a_question_evalset(key, value):
    """The LoCoMo settings act on a LoCoMo file only: on adiyan_full they are refused by name."""
    from adiyan.config import load_settings
    from adiyan.eval.harness import refuse_conversation_settings
    from adiyan.retrieval.pipeline import UnsupportedSetting

    with pytest.raises(UnsupportedSetting, match=key.replace(".", r"\.")):
        refuse_conversation_settings(load_settings(None, {key: value}), "invoke eval")
    refuse_conversation_settings(load_settings(None, {}), "invoke eval")  # the defaults pass


# -- LongMemEval's published format, read into the same structures (issue 43.3) -----------------------

LME = Path(__file__).parent / "data" / "longmemeval_tiny.json"


def test_longmemeval_file_is_read_with_turn_level_evidence_and_its_question_date():
    ls = load_locomo(LME)
    a, b = ls.conversations
    assert (a.id, b.id) == ("lme-colour", "lme-car_abs") and a.user == "locomo-lme-colour"
    assert [t.dia_id for t in a.turns] == ["D1:1", "D1:2", "D2:1", "D2:2"]
    assert a.turns[0].text == "user: My favourite colour is teal, by the way." and a.turns[1].speaker == "assistant"
    assert a.turns[0].at == "2023-05-01T10:00:01+00:00" and a.turns[2].at == "2023-05-20T09:30:01+00:00"
    (q,) = a.questions
    assert q.evidence == ("D1:1",) and q.category_name == "single-session-user" and q.answer == "teal"
    assert a.end == "2023-06-01T12:00:00+00:00"  # asked at question_date, not at the last turn
    (qb,) = b.questions
    assert qb.evidence == () and qb.category_name == "knowledge-update_abstention"


def test_longmemeval_runs_through_the_locomo_paths_scored_by_hand(minilm, make_settings):
    s = make_settings(**{"memory.search": "hybrid"})
    rows, _ = evaluate(s, load_locomo(LME), minilm, paths=("reference_bm25", "memory_similarity"))
    by = {r["id"]: r for r in rows}
    # "favourite colour" matches only D1:1 of the first haystack; the abstention has no evidence: counts 1
    assert by["lme-colour.q1"]["retrieved_ids"]["reference_bm25"][0] == "D1:1"
    assert by["lme-colour.q1"]["recall"]["reference_bm25"]["5"] == 1.0
    assert by["lme-car_abs.q1"]["recall"]["reference_bm25"]["5"] == 1.0
    assert by["lme-colour.q1"]["retrieved_ids"]["memory_similarity"][0] == "D1:1"
    assert by["lme-colour.q1"]["category_name"] == "single-session-user"


@pytest.mark.parametrize("edit, reason", [
    (lambda d: d[0].pop("haystack_dates"), "needs question_id"),
    (lambda d: d[0].update(question_type="gossip"), "question_type 'gossip'"),
    (lambda d: d[0]["haystack_dates"].__setitem__(0, "May 1st"), "haystack date 'May 1st'"),
    (lambda d: d[0]["haystack_sessions"][0][0].update(role="narrator"), "session 1 turn 1 needs role"),
])
def test_a_malformed_longmemeval_file_is_refused_naming_the_instance(tmp_path, edit, reason):
    data = json.loads(LME.read_text(encoding="utf-8"))
    edit(data)
    p = tmp_path / "lme.json"
    p.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(LocomoError, match=reason) as e:
        load_locomo(p)
    assert str(p) in str(e.value)


def test_answers_on_longmemeval_are_refused_by_name(make_settings):
    from adiyan.eval.locomo.run import run_locomo

    s = make_settings(**{"eval.evalset": str(LME), "eval.generate": True})
    with pytest.raises(UnsupportedSetting, match="eval.generate=true"):
        run_locomo(s, progress=False)
