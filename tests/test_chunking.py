"""Chunking strategies: fixed, recursive, markdown (structural), semantic (real minilm), real data."""

from __future__ import annotations

import logging
import re
import string
from collections import Counter
from pathlib import Path

import pytest

from adiyan.chunking import (chunk_stats, chunk_text, effective_strategy, fixed_chunks, is_authored_markdown,
                             markdown_sections, recursive_chunks)
from adiyan.config import ChunkingConfig

MD_SOURCES = Path(__file__).parents[1].parent / "shared/datasets/documents/md/sources"


def cfg(**kw) -> ChunkingConfig:
    return ChunkingConfig(**kw)


def prose(n_paragraphs: int = 6, sentences: int = 6) -> str:
    """Deterministic prose with paragraphs and sentences of varied length; no word over 12 chars."""
    words = ["river", "stone", "lantern", "harvest", "orchard", "meadow", "copper", "window",
             "thunder", "ledger", "compass", "saddle", "quartz", "ember", "harbour", "violin"]
    paras, k = [], 0
    for _ in range(n_paragraphs):
        sents = []
        for _ in range(sentences):
            n = 6 + k % 11
            sents.append(" ".join(words[(k + j * 7) % len(words)] for j in range(n)).capitalize() + ".")
            k += 1
        paras.append(" ".join(sents))
    return "\n\n".join(paras)


# ------------------------------------------------------------------------------------ fixed

def test_fixed_2000_chars_by_hand():
    s = "".join(string.ascii_letters[i % 52] for i in range(2000))
    chunks = chunk_text(s, cfg(strategy="fixed", size=800, overlap=100))
    assert [(c.start, len(c.text)) for c in chunks] == [(0, 800), (700, 800), (1400, 600)]
    assert [c.text for c in chunks] == [s[0:800], s[700:1500], s[1400:2000]]
    assert [c.index for c in chunks] == [0, 1, 2]
    assert chunks[0].text[-100:] == chunks[1].text[:100]


def test_fixed_no_duplicate_or_empty_tail():
    # the window at 700 already reaches the end: no third chunk lying inside the overlap
    assert [len(c) for c in fixed_chunks("x" * 1450, 800, 100)] == [800, 750]
    assert [len(c) for c in fixed_chunks("x" * 1500, 800, 100)] == [800, 800]
    assert [len(c) for c in fixed_chunks("x" * 1501, 800, 100)] == [800, 800, 101]
    assert fixed_chunks("x" * 800, 800, 100) == ["x" * 800]
    assert fixed_chunks("", 800, 100) == [] and fixed_chunks("   \n ", 800, 100) == []
    with pytest.raises(ValueError):
        fixed_chunks("abc", 100, 100)


# ------------------------------------------------------------------------------------ recursive

def test_recursive_hand_checked_example():
    text = "alpha beta gamma delta epsilon zeta eta theta iota kappa"
    # pieces are words (at most size - overlap = 12 chars); each chunk re-opens the previous
    # chunk's last 8 characters from the first word start inside them
    assert recursive_chunks(text, 20, 8) == ["alpha beta gamma", "gamma delta epsilon",
                                             "epsilon zeta eta", "eta theta iota kappa"]


@pytest.mark.parametrize("size,overlap", [(800, 100), (300, 60), (120, 30)])
def test_recursive_invariants(size, overlap):
    text = prose()
    chunks = chunk_text(text, cfg(strategy="recursive", size=size, overlap=overlap))
    assert len(chunks) > 2
    for c in chunks:
        assert 0 < len(c.text) <= size
        assert c.text[:20] in text
        assert text[c.start:c.end] == c.text
        assert c.start == 0 or text[c.start - 1].isspace(), f"chunk {c.index} starts mid-word"
        assert c.strategy == "recursive" and c.note == ""
    for a, b in zip(chunks, chunks[1:]):
        assert a.start < b.start < a.end < b.end
        shared = text[b.start:a.end]
        assert a.text.endswith(shared) and b.text.startswith(shared)
        # ~overlap: at most overlap, at least overlap minus one word (words here are <= 12 chars)
        assert overlap - 13 <= len(shared) <= overlap
    # nothing lost: the chunks tile the stripped text
    assert chunks[0].start == 0 and chunks[-1].end == len(text)


def test_recursive_prefers_paragraph_boundaries():
    paras = ["First paragraph about rivers and stones.", "Second paragraph about lanterns.",
             "Third one about copper windows and thunder."]
    text = "\n\n".join(paras)
    chunks = chunk_text(text, cfg(strategy="recursive", size=100, overlap=0))
    assert [c.text for c in chunks] == [paras[0] + "\n\n" + paras[1], paras[2]]


def test_recursive_short_text_is_one_chunk():
    text = "  A short note about the refund policy.\n"
    chunks = chunk_text(text, cfg())
    assert len(chunks) == 1
    assert chunks[0].text == "A short note about the refund policy." and chunks[0].start == 2
    assert chunk_text("", cfg()) == [] and chunk_text(" \n\n ", cfg()) == []


def test_recursive_overlap_not_below_size():
    with pytest.raises(ValueError, match="overlap"):
        chunk_text(prose(), cfg(strategy="recursive", size=100, overlap=100))
    with pytest.raises(ValueError, match="overlap"):
        chunk_text(prose(), cfg(strategy="recursive", size=100, overlap=150))
    with pytest.raises(ValueError):
        recursive_chunks("abc", 50, 60)


def test_recursive_word_longer_than_size_is_cut():
    text = "start " + "x" * 250 + " end"
    chunks = recursive_chunks(text, 100, 20)
    assert all(len(c) <= 100 for c in chunks)
    assert "".join(chunks).count("x") >= 250


# ------------------------------------------------------------------------------------ markdown

SECTIONS = {
    "Refund policy > Cancellation windows": ("zebracode", "Cancellations made within 14 days of purchase are refunded "
                                             "in full; zebracode applies to all annual plans."),
    "Office plants": ("fernmarker", "The fernmarker ferns on the third floor are watered every Tuesday by facilities."),
    "Parking": ("garagetag", "Visitors park on level two of the garage; garagetag stickers are issued at reception."),
    "Lunch menu": ("soupword", "Friday lunch is a lentil soup; soupword vouchers cover one bowl per employee."),
    "Server rooms": ("rackflag", "Server room B is kept at 19 degrees; rackflag badges open its door."),
}
FIVE_SECTIONS_MD = """# Refund policy

## Cancellation windows

{0}

# Office plants

{1}

# Parking

{2}

# Lunch menu

{3}

# Server rooms

{4}
""".format(*(body for _, body in SECTIONS.values()))


def test_markdown_sections_never_mix_and_carry_heading_path():
    chunks = chunk_text(FIVE_SECTIONS_MD, cfg(strategy="markdown"))
    assert len(chunks) == 5
    for c, (path, (marker, body)) in zip(chunks, SECTIONS.items()):
        assert c.text.startswith(path + "\n\n")
        assert c.heading_path == path and c.body == body
        assert FIVE_SECTIONS_MD[c.start:c.end] == body
        others = [m for _, (m, _) in SECTIONS.items() if m != marker]
        assert marker in c.text and not any(m in c.text for m in others)
        assert c.strategy == "markdown" and c.note == ""
    # heading-blind chunking of the same file mixes sections in one chunk
    blind = chunk_text(FIVE_SECTIONS_MD, cfg(strategy="recursive"))
    assert len(blind) == 1 and all(m in blind[0].text for m, _ in SECTIONS.values())


def test_markdown_hash_inside_fenced_code_does_not_split():
    md = ("# Setup\n\nRun this:\n\n```bash\n# install the package\npip install adiyan\n## not a heading\n```\n\n"
          "~~~\n# also code\n~~~\n\nDone.\n\n# Usage\n\nCall it.\n")
    secs = markdown_sections(md)
    assert [s.heading_path for s in secs] == ["Setup", "Usage"]
    chunks = chunk_text(md, cfg(strategy="markdown"))
    assert [c.heading_path for c in chunks] == ["Setup", "Usage"]
    assert "# install the package" in chunks[0].text and "## not a heading" in chunks[0].text
    assert "# also code" in chunks[0].text and chunks[0].text.endswith("Done.")
    assert chunks[1].text == "Usage\n\nCall it."


def test_markdown_heading_path_levels_and_preamble():
    md = "Intro line.\n\n# A\n\ntext a\n\n## B\n\ntext b\n\n### C ###\n\ntext c\n\n## D\n\ntext d\n\n#nothashtag\n"
    chunks = chunk_text(md, cfg(strategy="markdown"))
    assert [(c.heading_path, c.body) for c in chunks] == [
        ("", "Intro line."), ("A", "text a"), ("A > B", "text b"), ("A > B > C", "text c"),
        ("A > D", "text d\n\n#nothashtag")]
    assert chunks[0].text == "Intro line."


def test_markdown_long_section_is_split_further():
    body = prose(4, 6)
    md = "# Guide\n\n## Long part\n\n" + body + "\n\n## Short part\n\nTiny.\n"
    size = 300
    chunks = chunk_text(md, cfg(strategy="markdown", size=size, overlap=50))
    long = [c for c in chunks if c.heading_path == "Guide > Long part"]
    assert len(long) >= len(body) // size
    assert all(len(c.text) <= size and c.text.startswith("Guide > Long part\n\n") for c in chunks[:-1])
    assert all(md[c.start:c.end] == c.body for c in chunks)
    for a, b in zip(long, long[1:]):
        assert b.start < a.end  # overlap inside the section
    assert chunks[-1].text == "Guide > Short part\n\nTiny."


def test_markdown_falls_back_to_recursive_for_converted_markdown(caplog):
    c = cfg(strategy="markdown")
    assert effective_strategy(c) == "markdown"
    assert effective_strategy(c, authored_markdown=False) == "recursive"
    assert effective_strategy(cfg(strategy="fixed"), authored_markdown=False) == "fixed"
    assert is_authored_markdown("notes.md") and is_authored_markdown("a.MARKDOWN")
    assert not is_authored_markdown("notes.md", converted=True) and not is_authored_markdown("a.pdf")
    with caplog.at_level(logging.INFO, logger="adiyan.chunking"):
        fell = chunk_text(FIVE_SECTIONS_MD, c, authored_markdown=False)
    expected = chunk_text(FIVE_SECTIONS_MD, cfg(strategy="recursive"))
    assert [(x.text, x.start, x.end) for x in fell] == [(x.text, x.start, x.end) for x in expected]
    assert all(x.strategy == "recursive" and "recursive" in x.note and x.heading_path == "" for x in fell)
    assert any("recursive" in r.getMessage() for r in caplog.records)


# ------------------------------------------------------------------------------------ semantic

TOPICS = {
    "volcano": [
        "Volcanoes form where molten rock from the mantle rises through cracks in the Earth's crust.",
        "When pressure builds up in the magma chamber, a volcano can erupt violently and throw ash high into the sky.",
        "Lava flows from an eruption can travel for kilometres and destroy villages in their path.",
        "Mount Etna in Sicily is one of the most active volcanoes in Europe and erupts several times a decade.",
        "Geologists monitor volcanic gases and small earthquakes to predict the next eruption.",
    ],
    "tax": [
        "Income tax law decides how much of their salary citizens must pay to the government each year.",
        "Taxpayers may deduct certain expenses, such as pension contributions, from their taxable income.",
        "The tax authority can audit a return and charge penalties when income was not declared.",
        "Value added tax is collected by businesses on each sale and passed on to the treasury.",
        "Tax treaties between countries prevent the same income from being taxed twice.",
    ],
    "football": [
        "Football is played by two teams of eleven players who try to kick the ball into the opposing goal.",
        "The goalkeeper is the only player allowed to touch the ball with the hands inside the penalty area.",
        "A match lasts ninety minutes, split into two halves of forty-five minutes each.",
        "The World Cup, held every four years, is the most watched football tournament on the planet.",
        "A striker who scores three goals in one match is said to have scored a hat-trick.",
    ],
}
TOPIC_TEXT = "\n\n".join(" ".join(s) for s in TOPICS.values())  # 478 + 445 + 453 characters + breaks


def topics_of(chunk_text_: str) -> set[str]:
    return {t for t, sents in TOPICS.items() for s in sents if s in chunk_text_}


def test_semantic_splits_at_topic_boundaries(minilm):
    chunks = chunk_text(TOPIC_TEXT, cfg(strategy="semantic"), embedder=minilm)
    assert len(chunks) >= 3
    for c in chunks:
        assert len(topics_of(c.text)) == 1, c.text
        assert TOPIC_TEXT[c.start:c.end] == c.text and len(c.text) <= 800
    # every sentence lands in exactly one chunk, in order, and each topic boundary is a cut
    found = [s for c in chunks for s in sum(TOPICS.values(), []) if s in c.text]
    assert found == sum(TOPICS.values(), [])
    assert [next(iter(topics_of(c.text))) for c in chunks] == sorted(
        [next(iter(topics_of(c.text))) for c in chunks], key=list(TOPICS).index)


def test_semantic_min_size_and_size_cap(minilm):
    # without a minimum, the 0.5 threshold cuts inside topics too (minilm: neighbours ~0.3)
    raw = chunk_text(TOPIC_TEXT, cfg(strategy="semantic", min_size=0), embedder=minilm)
    assert len(raw) > 3 and all(len(topics_of(c.text)) == 1 for c in raw)
    default = chunk_text(TOPIC_TEXT, cfg(strategy="semantic", min_size=200), embedder=minilm)
    assert all(len(c.text) >= 200 for c in default) and len(default) < len(raw)
    big = chunk_text(TOPIC_TEXT, cfg(strategy="semantic", size=1500, min_size=600), embedder=minilm)
    # every topic (478, 445, 453 chars) is under 600: merging goes on until all fit in one chunk
    assert [(c.start, c.end) for c in big] == [(0, 1380)]
    capped = chunk_text(TOPIC_TEXT, cfg(strategy="semantic", size=250, overlap=0, min_size=100), embedder=minilm)
    assert all(len(c.text) <= 250 for c in capped)
    # min_size yields to the cap only: a chunk under it could not merge with either neighbour
    for i, c in enumerate(capped):
        if len(c.text) < 100:
            for n in (i - 1, i + 1):
                if 0 <= n < len(capped):
                    lo, hi = min(c.start, capped[n].start), max(c.end, capped[n].end)
                    assert hi - lo > 250
    assert all(len(topics_of(c.text)) == 1 for c in capped)


def test_semantic_is_deterministic_and_needs_an_embedder(minilm):
    c = cfg(strategy="semantic")
    one = chunk_text(TOPIC_TEXT, c, embedder=minilm)
    two = chunk_text(TOPIC_TEXT, c, embedder=minilm)
    assert [(x.text, x.start, x.end) for x in one] == [(x.text, x.start, x.end) for x in two]
    with pytest.raises(ValueError, match="embedder"):
        chunk_text(TOPIC_TEXT, c)
    assert chunk_text("One sentence only.", c, embedder=minilm)[0].text == "One sentence only."


# ------------------------------------------------------------------------------------ stats

def test_chunk_stats_by_hand():
    s = "".join(string.ascii_letters[i % 52] for i in range(2000))
    stats = chunk_stats(chunk_text(s, cfg(strategy="fixed")))
    assert stats == {"count": 3, "min": 600, "max": 800, "mean": 733.3, "median": 800, "p90": 800}
    assert chunk_stats([])["count"] == 0


# ------------------------------------------------------------------------------------ real data

def _words(text: str) -> Counter:
    return Counter(re.findall(r"\w+", text.lower()))


def test_real_markdown_sources_are_present():
    names = sorted(p.name for p in MD_SOURCES.glob("*.md"))
    assert "wiki.md" in names and "duck.md" in names, names


@pytest.mark.parametrize("strategy", ["fixed", "recursive", "markdown", "semantic"])
@pytest.mark.parametrize("name", ["wiki.md", "duck.md"])
def test_real_data_coverage(name, strategy, minilm):
    text = (MD_SOURCES / name).read_text(encoding="utf-8")
    c = cfg(strategy=strategy)
    chunks = chunk_text(text, c, embedder=minilm)
    again = chunk_text(text, c, embedder=minilm)
    assert [x.text for x in chunks] == [x.text for x in again]
    assert chunks and all(0 < len(x.text) <= c.size for x in chunks)
    assert all(text[x.start:x.end] == x.body for x in chunks)
    # words of the concatenated chunks, each counted at most as often as in the source
    # (so overlaps and heading prefixes never count twice) cover >= 99% of the source's words
    src = _words(text)
    got = _words("\n".join(x.text for x in chunks))
    covered = sum(min(n, got[w]) for w, n in src.items())
    assert covered / sum(src.values()) >= 0.99
    if strategy == "markdown":
        assert any(" > " in x.heading_path for x in chunks)


def test_the_default_splits_authored_markdown_on_headings_and_converted_text_by_size():
    """The design's two-stage default (strategy auto): the five sections of an authored Markdown
    file become five chunks, each under its heading; the same text from a converter is split by
    size only, and neither says it fell back (auto chose, nothing was overridden)."""
    auto = ChunkingConfig()
    assert auto.strategy == "auto"
    authored = chunk_text(FIVE_SECTIONS_MD, auto, authored_markdown=True)
    assert authored == chunk_text(FIVE_SECTIONS_MD, cfg(strategy="markdown"), authored_markdown=True)
    assert len(authored) == 5 and all(c.strategy == "markdown" and c.note == "" for c in authored)
    converted = chunk_text(FIVE_SECTIONS_MD, auto, authored_markdown=False)
    assert [c.text for c in converted] == [c.text for c in chunk_text(FIVE_SECTIONS_MD, cfg(strategy="recursive"))]
    assert all(c.strategy == "recursive" and c.note == "" for c in converted)
    assert effective_strategy(auto, True) == "markdown" and effective_strategy(auto, False) == "recursive"


def test_keep_within_window_keeps_what_the_embedder_reads_whole(minilm):
    """chunking.keep_within_window (issue 41.8): a section of 858 characters that MiniLM reads whole
    (237 of its 256 word pieces, counted by its own tokenizer) is one chunk; without the setting the
    800-character split cuts it in two. A longer section is split as before, and an embedder that
    cannot count tokens (None) changes nothing."""
    section = "The cat sat on the mat and the dog ran. " * 21
    text = "# Title of paper\n\n" + section
    assert minilm.count_tokens("Title of paper\n\n" + section.strip()) <= 256 < minilm.count_tokens(text + section)
    split = chunk_text(text, ChunkingConfig(), embedder=minilm)
    kept = chunk_text(text, ChunkingConfig(keep_within_window=True), embedder=minilm)
    assert len(split) == 2 and len(kept) == 1
    assert kept[0].text == "Title of paper\n\n" + section.strip() and kept[0].heading_path == "Title of paper"
    longer = "# Title of paper\n\n" + section * 2
    assert [c.text for c in chunk_text(longer, ChunkingConfig(keep_within_window=True), embedder=minilm)] == \
           [c.text for c in chunk_text(longer, ChunkingConfig(), embedder=minilm)]
    plain = section.strip()  # converted text, no headings: the recursive path
    assert len(chunk_text(plain, ChunkingConfig(keep_within_window=True), embedder=minilm,
                          authored_markdown=False)) == 1

    class _NoTokenizer:  # a stand-in for a server embedder that cannot count tokens (control flow only)
        def input_window(self):
            return None

        def count_tokens(self, text):
            return None

        def prefix(self, kind):
            return ""
    assert len(chunk_text(text, ChunkingConfig(keep_within_window=True), embedder=_NoTokenizer())) == 2


def test_an_option_added_later_leaves_stored_versions_as_they_were_at_its_default():
    """A stored document's version (and so its point ids, which settle the engine's score ties) hashes
    the chunking settings: an option added later must not change it at its default, or every index's
    tied results reorder (SciFact's hybrid nDCG@10 moved 0.7121 -> 0.7184 when keep_within_window was
    added). The JSON below is the default chunking as versions saw it before that option existed."""
    assert ChunkingConfig().version_json() == ('{"strategy":"auto","size":800,"overlap":100,"min_size":200,'
                                              '"semantic_threshold":0.5}')
    assert '"keep_within_window":true' in ChunkingConfig(keep_within_window=True).version_json()


def test_keep_within_window_is_refused_by_name_where_it_cannot_act(minilm):
    """With a strategy that does not split by size, or an embedder that cannot count its tokens (a model
    server), the setting would do nothing: the knowledge base every entry point opens refuses it."""
    from adiyan.chunking import refuse_inert_window
    from adiyan.config import ConfigError

    refuse_inert_window(ChunkingConfig(keep_within_window=True), minilm)  # acts: accepted
    refuse_inert_window(ChunkingConfig(strategy="semantic"), object())  # off: nothing to check
    with pytest.raises(ConfigError, match="keep_within_window=true does nothing with chunking.strategy=semantic"):
        refuse_inert_window(ChunkingConfig(strategy="semantic", keep_within_window=True), minilm)

    class _Server:  # a stand-in for a server embedder that cannot count tokens (control flow only)
        id = "ollama:nomic"

        def input_window(self):
            return None

    with pytest.raises(ConfigError, match="needs an embedder that counts its own tokens; ollama:nomic"):
        refuse_inert_window(ChunkingConfig(keep_within_window=True), _Server())
