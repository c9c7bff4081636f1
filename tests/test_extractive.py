"""The extractive answerer (llm.name=extractive) and the context budget fitted to the model.

Real embedder (all-MiniLM-L6-v2) on hand-built contexts; the budget tests use a tokenizer that
can be checked by hand (one token per word) in a small model double (control flow only: it is
never asked to write anything).
"""

from __future__ import annotations

import pytest

from adiyan.config import ConfigError
from adiyan import metrics as M
from adiyan.generation import (GROUNDING, NO_CONTEXT_ANSWER, STRICT, BudgetTooLarge, answer_question,
                               assemble_context, effective_budget)
from adiyan.kb import RetrievedChunk
from adiyan.models import load_llm
from adiyan.models.extractive import (ExtractiveAnswerer, parse_passages, question_types, split_sentences,
                                      split_units)

PRICE = ("# Pokljuka Snowshoe Weekend\n\nThe Pokljuka Snowshoe Weekend (TR-SNW-02) is a two-day tour on the "
         "Pokljuka plateau above Bled. It costs 320 euros per person; snowshoes and poles are included. "
         "Groups meet at the Rudno polje car park.")
HOURS = ("The office in Ljubljana is open from 9:00 to 17:00 on weekdays. The guide on the Bled tour is "
         "Ana Vrhovnik-Asante, who has led it since 2019. Pets are not allowed on any tour.")
FAQ = "Luggage is carried between huts by van. Travel insurance is recommended but not included."


def chunks():
    return [RetrievedChunk("office/faq.md", 0, 0.61, FAQ), RetrievedChunk("office/price_list.md", 2, 0.58, PRICE),
            RetrievedChunk("office/handbook.md", 1, 0.55, HOURS)]


@pytest.fixture(scope="module")
def answerer(minilm):
    return ExtractiveAnswerer(minilm)


def test_how_much_returns_the_sentence_with_the_price_and_cites_it(answerer, make_settings):
    ans = answer_question(answerer, "How much does the Pokljuka Snowshoe Weekend cost per person?", chunks(),
                          make_settings(**{"llm.name": "extractive"}))
    assert "320 euros" in ans.text
    # a verbatim quote ("It costs..." read with the sentence that says what "it" is), cited as passage [2]
    assert "It costs 320 euros per person; snowshoes and poles are included. [2]" in ans.text
    assert ans.used[2 - 1] == {"source": "office/price_list.md", "chunk_index": 2}  # what [2] cites
    assert not M.abstained(ans.text)


def test_question_type_cues_pick_the_time_and_the_name(answerer):
    when = answerer.extract("When does the office open?", [FAQ, HOURS])
    assert "9:00 to 17:00" in when.text and when.text.endswith("[2]")
    who = answerer.extract("Who is the guide on the Bled tour?", [FAQ, PRICE, HOURS])
    assert "Ana Vrhovnik-Asante" in who.text
    assert question_types("How many euros is the deposit?") == {"number", "money"}
    assert question_types("In what year was it built?") == {"date"}
    assert question_types("Who leads it?") == {"name"}


def test_an_unrelated_question_abstains_with_the_projects_phrasing(answerer, make_settings):
    ans = answer_question(answerer, "What is the boiling point of liquid nitrogen?", chunks(),
                          make_settings(**{"llm.name": "extractive"}))
    assert ans.text == NO_CONTEXT_ANSWER and "[" not in ans.text  # nothing quoted, nothing cited
    assert M.abstained(ans.text)  # the abstention metric reads it


def test_same_input_same_answer(answerer, minilm, make_settings):
    s = make_settings(**{"llm.name": "extractive"})
    q = "Are pets allowed on the tours?"
    first = answer_question(answerer, q, chunks(), s)
    again = answer_question(ExtractiveAnswerer(minilm), q, chunks(), s)
    assert first.text == again.text and first.used == again.used
    assert "Pets are not allowed on any tour. [3]" in first.text


def test_chat_reads_the_grounded_prompt_like_answer_question(answerer, make_settings):
    s = make_settings(**{"llm.name": "extractive"})
    q = "How much does the Pokljuka Snowshoe Weekend cost per person?"
    ctx = assemble_context(q, chunks(), budget_tokens=2000)
    assert parse_passages(ctx.messages[0].content) == ctx.passages
    assert answerer.chat(ctx.messages).text == answer_question(answerer, q, chunks(), s).text
    assert answerer.chat([{"role": "user", "content": "Action?"}]).text == NO_CONTEXT_ANSWER  # no passages


def test_units_read_a_table_row_with_its_header_and_headings_as_context():
    text = "# Prices\n\n| Tour | Code | Price |\n|---|---|---|\n| Snowshoe Weekend | TR-SNW-02 | 320 |\nOne more line here."
    # the heading is context, never a unit; the header row is no unit of its own: each row is read with it
    assert split_units(text) == [("Tour: Snowshoe Weekend; Code: TR-SNW-02; Price: 320", "Prices"),
                                 ("One more line here.", "Prices")]
    assert split_sentences(text) == ["Tour: Snowshoe Weekend; Code: TR-SNW-02; Price: 320", "One more line here."]
    # the chunker's heading path on a chunk's first line is a heading, even when it ends in "?"
    faq = "FAQ > Pets > Can I bring my dog?\n\nNo. Pets are not allowed on any tour."
    assert split_units(faq) == [("Pets are not allowed on any tour.", "FAQ > Pets > Can I bring my dog?")]
    # a slide's soft-wrapped lines are one unit; a title-case line before a blank line is a heading
    slide = "WINTER PROMO\nCode SNOW-24 gives\n15 percent off all\nsnowshoe tours\n\nAdiyan Travel Sales Contacts\n\nWrite to us."
    assert split_units(slide) == [("Code SNOW-24 gives 15 percent off all snowshoe tours", "WINTER PROMO"),
                                  ("Write to us.", "Adiyan Travel Sales Contacts")]
    # a title-case line with a number says something; a blank line ends a table and its header
    assert split_units("Julian Alps Weekend: 450 EUR Per Person\n\nMore text here.")[0][0] == \
        "Julian Alps Weekend: 450 EUR Per Person"
    two = "| Tour | Price |\n|---|---|\n| Snowshoe Weekend | 320 |\n\n| Days | Nights |\n|---|---|\n| 5 | 4 |"
    assert [u for u, _ in split_units(two)] == ["Tour: Snowshoe Weekend; Price: 320", "Days: 5; Nights: 4"]


def test_a_table_row_is_answered_with_its_header(answerer):
    table = ("## 2026 booking targets by tour\n\n| Product code | Tour | Bookings 2025 | Target 2026 |\n"
             "| --- | --- | --- | --- |\n| TR-ALP-07 | Alpine Lakes Discovery | 412 | 450 |\n"
             "| TR-JUL-03 | Julian Alps Weekend | 655 | 720 |\n")
    ex = answerer.extract("What is the 2026 target for the Julian Alps Weekend (TR-JUL-03)?", [FAQ, table])
    assert ex.text == "Product code: TR-JUL-03; Tour: Julian Alps Weekend; Bookings 2025: 655; Target 2026: 720 [2]"


def test_names_pick_the_answerer_and_a_server_replaces_it():
    from adiyan.models.llms import OpenAICompatibleLLM

    assert isinstance(load_llm("extractive"), ExtractiveAnswerer)
    server = load_llm("extractive", url="http://127.0.0.1:9/v1", model="served")  # no call at construction
    assert isinstance(server, OpenAICompatibleLLM) and server.url == "http://127.0.0.1:9/v1"


def test_settings_that_need_a_generative_model_are_refused_by_name(make_settings, minilm):
    from adiyan.memory import Memory
    from adiyan.retrieval.pipeline import Retriever, UnsupportedSetting

    s = make_settings(**{"llm.name": "extractive", "retrieval.query_transform": "hyde"})
    with pytest.raises(UnsupportedSetting, match="query_transform=hyde.*extractive"):
        Retriever(None, s.retrieval, floor=0.0, llm=ExtractiveAnswerer(minilm), entry_point="test")
    with pytest.raises(ValueError, match="memory.infer=true.*extractive"):
        Memory.from_settings(make_settings(**{"llm.name": "extractive", "memory.infer": True}), embedder=minilm)


# -- the budget fits the model ------------------------------------------------------------

class WordModel:
    """Model double for the budget arithmetic (control flow only): a 600-token window, one token
    per word, a 100-token answer reserve. It is never called."""

    id = "word-model"
    context_size = 600
    max_tokens = 100

    def count_tokens(self, text):
        return len(text.split())

    def chat(self, *a, **k):
        raise AssertionError("not called")


def test_default_budget_is_cut_to_the_window_minus_prompt_and_answer(make_settings):
    s = make_settings(**{"conversation.history_window": 0})
    info = effective_budget(s, WordModel())
    # the instruction is 43 words (GROUNDING 26 + STRICT 17) plus the two section headers ("Context:",
    # "What you remember about the user:" = 1 + 6 words): 50, + 8 template tokens for each of the 2
    # messages (no history window) = 66; room = 600 - 66 - 100 = 434
    assert len(GROUNDING.split()) == 26 and len(STRICT.split()) == 17
    assert info["prompt_reserve"] == 66 and info["answer_reserve"] == 100
    assert info["room"] == 434 and info["effective"] == 434 and info["fitted"] and not info["explicit"]


def test_an_explicit_budget_the_model_cannot_hold_is_refused_by_name(make_settings):
    s = make_settings(**{"conversation.history_window": 0, "generation.context_budget_tokens": 500})
    with pytest.raises(BudgetTooLarge, match=r"generation\.context_budget_tokens=500.*at most 434") as err:
        effective_budget(s, WordModel())
    assert isinstance(err.value, ConfigError)
    ok = effective_budget(make_settings(**{"conversation.history_window": 0,
                                           "generation.context_budget_tokens": 400}), WordModel())
    assert ok["effective"] == 400 and not ok["fitted"]


def test_smollm2_window_is_respected_by_the_assembled_context(make_settings, minilm):
    """The shipped 2,500 is above a 2,048-token window: the context handed over is cut to the room."""
    s = make_settings(**{"llm.name": "extractive"})
    long = [RetrievedChunk(f"office/d{i}.md", i, 0.5, " ".join(["word"] * 600)) for i in range(6)]
    ans = answer_question(ExtractiveAnswerer(minilm, context_size=2048), "What is a word?", long, s)
    room = effective_budget(s, ExtractiveAnswerer(minilm, context_size=2048))["effective"]
    assert room < 2048 < 2500 and 0 < ans.context_tokens <= room and ans.truncated
