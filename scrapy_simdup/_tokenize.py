"""Unicode-aware tokenisation for page features.

Deliberate choices (documented because fingerprints depend on them and must
never drift between versions without a version bump of ``TOKENIZER_VERSION``):

* Unicode NFKC normalisation (full-width forms, ligatures, compatibility
  characters fold to their plain forms), then ``str.casefold`` (so German
  "Straße" and "STRASSE" agree).
* Typographic apostrophes become ``'``; a word keeps inner apostrophes
  ("don't", "l'homme" stay one token), so contractions do not create
  spurious stopword tokens.
* Punctuation, symbols and whitespace separate tokens and are dropped: the
  same article re-typeset with other quotes, dashes or ellipses gives the
  same tokens.
* Numbers are kept as tokens, digit for digit ("2019", "19" in "covid-19"):
  they carry content (scores, years, prices) and differ between genuinely
  different pages. Decimal and thousands separators split them ("3.5" ->
  "3", "5") so "1,000" and "1 000" agree on the digits.
* Scripts written without spaces (Chinese, Japanese kana/kanji, Thai, Lao,
  Khmer, Myanmar) are split into one token per character, so shingles become
  character n-grams there, which is the standard practice for CJK
  near-duplicate detection. Korean (Hangul) uses spaces and stays word-based.
"""
from __future__ import annotations

import re
import unicodedata

TOKENIZER_VERSION = 1

_TOKEN = re.compile(r"\w+(?:'\w+)*")
_NOSPACE = re.compile(
    "[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff"      # Thai, Lao, Myanmar, Khmer
    "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff"       # kana, CJK ext A, CJK
    "\uf900-\ufaff\U00020000-\U0002fa1f]")


def normalize(text: str) -> str:
    """NFKC + apostrophe folding + casefold (ASCII text takes a fast path)."""
    if text.isascii():
        return text.lower()
    if "\u2019" in text or "\u2018" in text:
        text = text.replace("\u2019", "'").replace("\u2018", "'")
    if "\u02bc" in text or "\uff07" in text:
        text = text.replace("\u02bc", "'").replace("\uff07", "'")
    # The two compatibility characters web text is full of, folded the way
    # NFKC folds them (to ASCII starters that compose with nothing, so doing
    # it first changes no result): most pages then need no NFKC pass at all.
    if "\xa0" in text:
        text = text.replace("\xa0", " ")
    if "\u2026" in text:
        text = text.replace("\u2026", "...")
    if not unicodedata.is_normalized("NFKC", text):
        text = unicodedata.normalize("NFKC", text)
    return text.casefold()


def tokenize(text: str) -> list[str]:
    """Tokens of ``text`` in order (see the module docstring for the rules)."""
    if not text:
        return []
    return split_tokens(normalize(text))


def split_tokens(text: str) -> list[str]:
    """Tokens of an already normalised text (the reference of the compiled
    ``_textfeat.token_hashes``, which hashes them without making strings)."""
    tokens = _TOKEN.findall(text)
    if text.isascii() or _NOSPACE.search(text) is None:
        return tokens
    out: list[str] = []
    for tok in tokens:
        if _NOSPACE.search(tok) is None:
            out.append(tok)
            continue
        # split runs of no-space scripts into characters, keep other runs whole
        start = 0
        for m in _NOSPACE.finditer(tok):
            if m.start() > start:
                out.append(tok[start:m.start()])
            out.append(m.group())
            start = m.end()
        if start < len(tok):
            out.append(tok[start:])
    return out
