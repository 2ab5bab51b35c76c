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

import numpy as np

TOKENIZER_VERSION = 2   # 2: no apostrophe left at a cut before/after a no-space character

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


# --------------------------------------------------------------------------
# The table of the compiled single-pass normalize (``textfeat.fold_text``).
#
# For most web text normalize() is a per-character map: each character c
# goes to casefold(NFKC(c)) (after the apostrophe folding above). That holds
# when no character of the text takes part in canonical composition or
# reordering: NFKC(c) must consist of starters (combining class 0) that are
# never the second character of a canonical composition pair. Then the text's
# decomposition is the concatenation of the characters' decompositions, no
# pair composes across a boundary, and NFKC of the whole text is the
# concatenation of NFKC of each character (casefold is per character in any
# case). The table maps every such character of FOLD_SEGMENTS to its output
# (at most FOLD_WIDTH BMP code points, or FOLD_SELF: itself) and marks every
# other one, on which the compiled pass gives up and normalize() is used. CJK
# ideographs and Hangul syllables (outside the segments) map to themselves,
# which the tests check like every table entry.

FOLD_LIMIT = 0x3100             # Latin ... CJK symbols, kana, Bopomofo
#: the code points the table has rows for, in order: below FOLD_LIMIT; the
#: variation selectors, CJK compatibility forms, half- and full-width forms
#: (the punctuation of CJK text) and specials (BOM); emoji and pictographs
FOLD_SEGMENTS = ((0, FOLD_LIMIT), (0xFE00, 0x10000), (0x1F000, 0x1FB00))
FOLD_WIDTH = 3                  # longest output kept (e.g. "\u2026" -> "...")
FOLD_SELF = 0x8000              # a row's length for "maps to itself" (above the BMP)
_APOSTROPHES = {"\u2019": "'", "\u2018": "'", "\u02bc": "'", "\uff07": "'"}


def composition_seconds(ranges=((0, FOLD_LIMIT), (0xFB1D, 0xFB50))) -> set[int]:
    """Code points that are the second character of a canonical two-character
    decomposition of a character in ``ranges`` (a superset of those that
    compose with a preceding character), plus the conjoining Hangul vowels and
    trailing consonants (composed algorithmically). The default ranges hold
    every composite whose second character is in ``FOLD_SEGMENTS`` (the tests
    check it against all of Unicode)."""
    seconds = set(range(0x1161, 0x1176)) | set(range(0x11A8, 0x11C3))
    for lo, hi in ranges:
        for cp in range(lo, hi):
            d = unicodedata.decomposition(chr(cp))
            if d and not d.startswith("<"):
                parts = d.split()
                if len(parts) == 2:
                    seconds.add(int(parts[1], 16))
    return seconds


_fold_table = None
_fold_segments = np.array(FOLD_SEGMENTS, dtype=np.uint32)


def fold_segments() -> np.ndarray:
    """``uint32[k, 2]``: FOLD_SEGMENTS, for the compiled pass."""
    return _fold_segments


def fold_table():
    """``uint16[rows, 1 + FOLD_WIDTH]``, a row per code point of
    ``FOLD_SEGMENTS`` in order: output length (0: not a simple map, take the
    full normalize(); FOLD_SELF: the character itself) and the output code
    points (built once per process, from this Python's Unicode data)."""
    global _fold_table
    if _fold_table is None:
        seconds = composition_seconds()
        combining, normalize_ = unicodedata.combining, unicodedata.normalize
        rows = []
        for lo, hi in FOLD_SEGMENTS:
            for cp in range(lo, hi):
                c = chr(cp)
                row = (0,)
                if not (cp in seconds or combining(c) or 0xD800 <= cp <= 0xDFFF):
                    nfkc = normalize_("NFKC", _APOSTROPHES.get(c, c))
                    out = nfkc.casefold()
                    if nfkc == c or not any(combining(x) or ord(x) in seconds for x in nfkc):
                        if out == c and cp > 0xFFFF:
                            row = (FOLD_SELF,)
                        elif len(out) <= FOLD_WIDTH and max(out) <= "\uffff":
                            row = (len(out), *map(ord, out))
                rows.append(row + (0,) * (1 + FOLD_WIDTH - len(row)))
        _fold_table = np.array(rows, dtype=np.uint16)
    return _fold_table


def tokenize(text: str) -> list[str]:
    """Tokens of ``text`` in order (see the module docstring for the rules)."""
    if not text:
        return []
    return split_tokens(normalize(text))


def split_tokens(text: str) -> list[str]:
    """Tokens of an already normalised text: those the compiled
    ``textfeat.token_hashes`` hashes without making strings (this is the path
    for text it cannot take, with lone surrogates, and its test reference)."""
    tokens = _TOKEN.findall(text)
    if text.isascii() or _NOSPACE.search(text) is None:
        return tokens
    out: list[str] = []
    for tok in tokens:
        if _NOSPACE.search(tok) is None:
            out.append(tok)
            continue
        # split runs of no-space scripts into characters, keep other runs
        # whole (less the apostrophes the cut leaves at their ends)
        start = 0
        for m in _NOSPACE.finditer(tok):
            piece = tok[start:m.start()].strip("'")
            if piece:
                out.append(piece)
            out.append(m.group())
            start = m.end()
        piece = tok[start:].strip("'")
        if piece:
            out.append(piece)
    return out
