"""Conversations: the history query transformation (rules and LLM, cached), the refusal of
history transforms where no history is passed, the conversation evalset's loader, and on the
authored evalset the rewrite's hit rate against the raw follow-up's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from adiyan.cache import CallCache
from adiyan.eval.conversations import replay
from adiyan.eval.scorers import FOLLOW_UP_KINDS
from adiyan.eval.evalset import EvalsetError, load_conversation_set
from adiyan.eval.harness import close_index, open_index
from adiyan.factory import open_retriever
from adiyan.models.base import Completion
from adiyan.retrieval.pipeline import UnsupportedSetting
from adiyan.retrieval.transform import entities, rewrite_followup, transform_query

ROOT = Path(__file__).resolve().parents[1]
CONVERSATIONS = ROOT / "evalsets" / "conversations"


def _u(text):
    return {"role": "user", "content": text}


def test_rules_resolve_pronouns_and_ellipsis():
    h = [_u("Tell me about the Triglav Lakes Trek."),
         {"role": "assistant", "content": "It is a five-day hut-to-hut trek (TR-TRG-04)."}]
    # the newest entity of the previous exchange: the reply's product code before the question's name
    assert rewrite_followup("And how much does it cost?", h) == "How much does TR-TRG-04 cost?"
    assert rewrite_followup("And how much does it cost?", h[:1]) == "How much does Triglav Lakes Trek cost?"
    # a chain resolves against the first named subject; "is there" is not a pronoun
    h2 = h[:1] + [_u("And how much does it cost?")]
    assert rewrite_followup("Is there a minimum age for it?", h2) == "Is there a minimum age for Triglav Lakes Trek?"
    # ellipsis: the previous question with the new subject
    h3 = [_u("How much does the Julian Alps Weekend cost?")]
    assert rewrite_followup("What about the Norwegian Fjords Explorer?", h3) == \
        "How much does the Norwegian Fjords Explorer cost?"
    # no named referent: the previous question carries the subject
    # a verbless fragment narrows the previous question; a second one narrows the same question
    h5 = [_u("How much does the Julian Alps Weekend cost?")]
    assert rewrite_followup("And for a group?", h5) == "How much does the Julian Alps Weekend cost for a group?"
    assert rewrite_followup("What about for a child of 8?", h5 + [_u("And for a group?")]) == \
        "How much does the Julian Alps Weekend cost for a child of 8?"
    # ... and is also searched without the previous subject (fused), so the group discount can rank
    assert transform_query("And for a group?", "history_rules", history=h5).queries == [
        "How much does the Julian Alps Weekend cost for a group?", "How much does it cost for a group?"]
    assert transform_query("And how much does it cost?", "history_rules", history=h).queries == [
        "How much does TR-TRG-04 cost?"]  # no fragment: one query
    # a tail that asks or refers is a question of its own, resolved as a pronoun follow-up
    assert rewrite_followup("So by when should I pay for it?", h5) == "By when should I pay for Julian Alps Weekend?"
    h4 = [_u("Do you sell gift vouchers?")]
    assert rewrite_followup("How long would one stay valid?", h4) == \
        "Do you sell gift vouchers? How long would one stay valid?"
    # a standalone message and a first message stay as they are
    assert rewrite_followup("Who guides the Adriatic Coast Cycling tour?", h) == \
        "Who guides the Adriatic Coast Cycling tour?"
    assert rewrite_followup("And how much does it cost?", []) == "And how much does it cost?"
    assert entities("Mira Quispe-Lindqvist guides TR-TRG-04 from Hotel Zlatovrh.") == [
        "Mira Quispe-Lindqvist", "Hotel Zlatovrh", "TR-TRG-04"]


class RewritingLLM:
    """Test double for control flow only: answers every prompt with one standalone question, counting calls."""

    id = "scripted-rewriter"
    context_size = 2048

    def __init__(self, text="How much does the Triglav Lakes Trek cost?"):
        self.calls, self.text = 0, text

    def chat(self, messages, *, max_tokens=None, temperature=None):
        self.calls += 1
        return Completion(self.text)


def test_llm_rewrite_is_cached_by_prompt(tmp_path):
    cache = CallCache(tmp_path / "calls.sqlite", "history_llm")
    llm = RewritingLLM()
    h = [_u("Tell me about the Triglav Lakes Trek.")]
    out = transform_query("And how much does it cost?", "history_llm", llm=llm, cache=cache, history=h)
    assert out.queries == ["How much does the Triglav Lakes Trek cost?"] and llm.calls == 1
    again = transform_query("And how much does it cost?", "history_llm", llm=llm, cache=cache, history=h)
    assert again.queries == out.queries and llm.calls == 1  # from the cache
    transform_query("And how much does it cost?", "history_llm", llm=llm, cache=cache, history=h + [_u("ok")])
    assert llm.calls == 2  # another history is another prompt
    empty = transform_query("And when?", "history_llm", llm=RewritingLLM(""), cache=cache, history=h)
    assert empty.queries == ["And when?"] and empty.failed  # counted, never hidden


def test_history_transforms_are_refused_without_history(make_settings, minilm, tmp_path):
    from adiyan.factory import open_kb

    s = make_settings(**{"retrieval.query_transform": "history_rules"})
    kb = open_kb(s, embedder=minilm)
    try:
        with pytest.raises(UnsupportedSetting, match="retrieval.query_transform=history_rules is not honoured by adiyan search"):
            open_retriever(s, kb, entry_point="adiyan search")
        r = open_retriever(s, kb, entry_point="a conversation", supports_history=True)
        with pytest.raises(UnsupportedSetting, match="without history="):
            r.retrieve("how much does it cost?", "bob")
        res = r.retrieve("how much does it cost?", "bob", history=[_u("Tell me about the Triglav Lakes Trek.")])
        assert res.queries == ["How much does Triglav Lakes Trek cost?"] and res.transform == "history_rules"
    finally:
        kb.store.close()


def test_loader_names_the_file_and_the_reason(tmp_path):
    (tmp_path / "manifest.yaml").write_text(yaml.safe_dump({"kind": "conversations",
                                                            "documents_from": str(ROOT / "evalsets" / "adiyan_basic"),
                                                            "conversations": "c.yaml"}))
    conv = [{"id": "x", "user": "u", "turns": [
        {"at": "2025-01-02T00:00:00+00:00", "kind": "statement", "message": "I live in Vienna.",
         "remember": [{"id": "vienna", "text": "I live in Vienna."}]},
        {"at": "2025-01-01T00:00:00+00:00", "kind": "correction", "message": "Where do I live?", "recall": ["vienna"]}]}]
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(conv))
    with pytest.raises(EvalsetError, match=r"c\.yaml: conversation 'x' turn 2: 'at' .* must not go back in time"):
        load_conversation_set(tmp_path)
    conv[0]["turns"][1].update(at="2025-01-03T00:00:00+00:00", recall=["paris"])
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(conv))
    with pytest.raises(EvalsetError, match=r"recall/stale fact\(s\) \['paris'\] were not stated before"):
        load_conversation_set(tmp_path)


def test_authored_evalset_covers_the_brief():
    cs = load_conversation_set(CONVERSATIONS)
    assert len(cs.conversations) >= 20 and all(len(c.turns) >= 3 for c in cs.conversations)
    kinds = {t.kind for _, _, t in cs.turns()}
    assert {"pronoun", "ellipsis", "correction", "coaching", "doc_memory", "statement"} <= kinds
    assert any(t.stale for _, _, t in cs.turns()) and any(f["kind"] == "coaching" for _, _, t in cs.turns()
                                                          for f in t.remember)
    assert all(t.gold_sources and t.recall for _, _, t in cs.turns() if t.kind == "doc_memory")


@pytest.mark.slow  # builds (or reuses) the adiyan_full index: parsing DOCX / PPTX with OCR from cold
def test_rewrite_retrieves_follow_ups_the_raw_message_misses(make_settings):
    """On the authored follow-ups (pronoun, ellipsis and fragment turns) the rule rewrite's hit rate
    at 4 is higher than the raw message's; measured 1.00 vs 0.83 (24 follow-ups) with MiniLM."""
    s = make_settings(**{"paths.cache_dir": str(ROOT / ".cache" / "adiyan")})  # parse and embedding caches
    cs = load_conversation_set(CONVERSATIONS)
    index = open_index(s, str(cs.documents.root))
    try:
        rows = replay(s, cs, index.kb, index.kb.embedder)
    finally:
        close_index(index)
    fol = [r for r in rows if r["kind"] in FOLLOW_UP_KINDS]
    raw = sum(r["hit_raw"] for r in fol) / len(fol)
    rewritten = sum(r["hit"] for r in fol) / len(fol)
    assert len(fol) == 24
    assert rewritten > raw
    # "And for a group?" after a price question (issue 40): the price list's group discount, missed as said
    by_id_ = {r["id"]: r for r in rows}
    assert by_id_["c25.t2"]["rewritten"] == "How much does the Julian Alps Weekend cost for a group?"
    assert by_id_["c25.t2"]["hit_raw"] is False and by_id_["c25.t2"]["hit"] is True
    # a second fragment narrows the same question, not the first fragment's
    assert by_id_["c25.t3"]["rewritten"] == "How much does the Julian Alps Weekend cost for a child of 8?"
    by_id = {r["id"]: r for r in rows}
    assert by_id["c14.t2"]["hit_raw"] is False and by_id["c14.t2"]["hit"] is True  # "What time does it start there?"
    assert by_id["c14.t2"]["rewritten"] == "What time does Triglav Lakes Trek start there?"
