"""The reader (adiyan/models/reader.py): its training pairs, its committed weights, and the
extractive answerer deciding with it (answer the unit that answers; abstain when none does).

The training pairs are built from a hand-made HaluEval-format fixture (three items), so every
count is checked by hand; the committed weights are the real ones (int8, trained by
``adiyan reader train``), read on hand-made passages."""

from __future__ import annotations

import json

import pytest
import yaml

from adiyan import metrics as M
from adiyan.generation import NO_CONTEXT_ANSWER, answer_question
from adiyan.kb import RetrievedChunk
from adiyan.models.checker import file_sha256
from adiyan.models.extractive import PARAMS_FILE, ExtractiveAnswerer
from adiyan.models.reader import READER_DIR, Reader, knowledge_units, reader_pairs

ROWS = [
    {"knowledge": "Arthur's Magazine (1844–1846) was an American literary periodical.First for Women is a "
                  "woman's magazine published by Bauer Media Group in the USA.",
     "question": "Which magazine was started first Arthur's Magazine or First for Women?",
     "right_answer": "Arthur's Magazine"},  # the answer is in the question: skipped
    {"knowledge": "The Oberoi family is an Indian family that is famous for its involvement in hotels. "
                  "The Oberoi Group is a hotel company with its head office in Delhi.",
     "question": "The Oberoi family is part of a hotel company that has a head office in what city?",
     "right_answer": "Delhi"},
    {"knowledge": "Laleli Mosque is an 18th-century Ottoman imperial mosque. It is located in Laleli, Fatih.",
     "question": "Are the Laleli Mosque and Esma Sultan Mansion located in the same neighborhood?",
     "right_answer": "no"},  # yes / no: skipped
]


def test_training_pairs_from_hand_made_items_counted_by_hand():
    assert knowledge_units(ROWS[0]["knowledge"]) == [
        "Arthur's Magazine (1844–1846) was an American literary periodical.",
        "First for Women is a woman's magazine published by Bauer Media Group in the USA."]  # "periodical.First" split
    pairs, card = reader_pairs(ROWS, seed=0)
    assert card["items_skipped"] == {"yes_no": 1, "answer_in_question": 1, "answer_in_no_unit": 0}
    pos = [p for p in pairs if p.label == 1]
    assert [(p.claim, p.passage) for p in pos] == [
        (ROWS[1]["question"], "The Oberoi Group is a hotel company with its head office in Delhi.")]
    same = [p for p in pairs if p.kind == "same_knowledge_other_unit"]
    assert [p.passage for p in same] == ["The Oberoi family is an Indian family that is famous for its involvement in hotels."]
    assert all(p.label == 0 for p in pairs if p.kind != "answer_unit")
    assert all("Oberoi" not in p.passage for p in pairs if p.kind.startswith("other_item"))  # another item's unit
    assert reader_pairs(ROWS, seed=0) == (pairs, card)  # seeded


def test_the_committed_weights_are_the_ones_the_card_names():
    card = json.loads((READER_DIR / "card.json").read_text())
    assert file_sha256(READER_DIR / "weights.npz") == card["weights_sha256"]
    assert (READER_DIR / "weights.npz").stat().st_size <= 30 * 2**20  # committed once, int8
    assert card["command"].startswith("adiyan reader train")
    calibrated = yaml.safe_load(PARAMS_FILE.read_text())
    assert calibrated["reader_identity"] == Reader.load().identity  # calibrated with these weights


@pytest.fixture(scope="module")
def reader():
    return Reader.load()


def test_the_reader_prefers_the_unit_that_answers_over_one_about_the_question(reader):
    q = "What is Mira's phone-tree code?"
    about, answers = reader.answers(q, ["Every guide has a personal phone-tree code.",
                                        "Mira's personal phone-tree code for the 2025 season is KESTREL-58."])
    assert answers > about


PASSAGES = [
    "Luggage is carried between huts by van. Travel insurance is recommended but not included.",
    "Adiyan Travel > Deposits and group bookings\n\nA deposit of 20% of the tour price is due when you book. Groups "
    "of 8 or more people who book together on the same departure receive a group discount of 5% on the tour price.",
]


def test_llm_reader_with_a_generative_model_is_refused_by_name():
    from adiyan.config import ConfigError, load_settings
    from adiyan.models.registry import llm_from_settings

    s = load_settings(None, {"llm.name": "smollm2", "llm.reader": True}, environ={})
    with pytest.raises(ConfigError, match="llm.reader=true .* llm.name=smollm2"):
        llm_from_settings(s)


def test_the_answerer_answers_what_the_reader_finds_and_abstains_when_nothing_answers(minilm, make_settings):
    answerer = ExtractiveAnswerer(minilm, params={"reader": True}, reader=Reader.load())  # llm.reader=true
    assert answerer.reader is not None and "+reader:" in answerer.id
    assert ExtractiveAnswerer(minilm).reader is None  # the default: off
    s = make_settings(**{"llm.name": "extractive"})
    chunks = [RetrievedChunk(f"office/d{i}.md", i, 0.5, t) for i, t in enumerate(PASSAGES)]
    ans = answer_question(answerer, "How much is the deposit when I book?", chunks, s)
    assert "20%" in ans.text and ans.text.endswith("[2]")
    absent = answer_question(answerer, "What is the Wi-Fi password at Hotel Zlatovrh?", chunks, s)
    assert absent.text == NO_CONTEXT_ANSWER and M.abstained(absent.text)


@pytest.mark.slow
@pytest.mark.xfail(strict=True, raises=AssertionError, reason=(
    "the committed reader was trained before commit 1457832 (extractive._is_title: a title-case line holding a "
    "digit is a unit), which gives one HaluEval item (qa_data.json line 2160, a truncated one-line passage) two "
    "units instead of none: 25,830 pairs (sha 7476aa16881a2ea2) against the card's 25,827 (09a936cd6204d214), and "
    "the shared unit pool re-draws every negative. Re-train (`adiyan reader train`), commit the weights and card, "
    "then remove this mark: strict, so a re-trained card makes it fail until then"))
def test_the_training_pairs_rebuilt_today_are_the_committed_cards():
    """The reader's pairs depend on the answerer's unit splitter, so an edit there moves them silently: rebuild
    them as `adiyan reader train` does (15 s, no model) and compare count, kinds and hash with the card."""
    from adiyan.models.reader import training_pairs
    from tests.conftest import SHARED

    halueval = SHARED / "halueval"
    if not (halueval / "qa_data.json").is_file():
        pytest.skip(f"{halueval}: HaluEval QA is in ../shared/datasets only")
    card = json.loads((READER_DIR / "card.json").read_text(encoding="utf-8"))["training_data"]
    _, _, pairs, data, _ = training_pairs(halueval, items=card["items"], seed=0)
    assert (len(pairs), data["kinds"], data["pairs_sha256"]) == (card["pairs"], card["kinds"], card["pairs_sha256"])
