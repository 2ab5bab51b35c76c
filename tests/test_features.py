"""Tokenizer and feature hashing against pure Python references."""
from __future__ import annotations

import math
import unicodedata

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from scrapy_simdup._ext import hashing as _core
from scrapy_simdup._ext import textfeat as _textfeat
from scrapy_simdup.fingerprint.features import (
    _M,
    _SALT,
    STOP_HASHES,
    STOPWORDS,
    _logtf_of_count,
    features_from_token_hashes,
    features_from_tokens,
    fmix64,
    shingle_hashes,
    text_token_hashes,
    weigh,
    weighted_features,
)
from scrapy_simdup.fingerprint.tokens import (
    FOLD_LIMIT,
    FOLD_SEGMENTS,
    composition_seconds,
    fold_segments,
    fold_table,
    normalize,
    split_tokens,
    tokenize,
)
from tests.reference.features import features_from_token_hashes_py, spot_hashes, weigh_py
from tests.reference.sketch import fmix64_int

MASK = (1 << 64) - 1
M = 0x9E3779B97F4A7C15
SALT_SHINGLES = 0x5348494E474C4553
SALT_SPOTS = 0x53504F5453494753


def shingles_ref(tokens, k, salt=SALT_SHINGLES):
    hs = [_core.hash64(t) for t in tokens]
    if not hs:
        return []
    k = min(k, len(hs))
    out = []
    for i in range(len(hs) - k + 1):
        s = hs[i] ^ salt
        for j in range(1, k):
            s = (s * M + hs[i + j]) & MASK
        out.append(fmix64_int(s))
    return out


def spots_ref(tokens, chain=2):
    hs = [_core.hash64(t) for t in tokens]
    stop = [t in STOPWORDS for t in tokens]
    out = []
    for i, h in enumerate(hs):
        if not stop[i]:
            continue
        following = [hs[j] for j in range(i + 1, len(hs)) if not stop[j]][:chain]
        if len(following) < chain:
            continue
        s = h ^ SALT_SPOTS
        for f in following:
            s = (s * M + f) & MASK
        out.append(fmix64_int(s))
    return out


words = st.lists(st.sampled_from(["the", "is", "said", "cat", "dog", "der", "und", "Haus",
                                  "x", "2019", "naïve", "le", "chat"]), max_size=40)


@given(words, st.integers(1, 6))
def test_shingle_hashes_match_reference(tokens, k):
    got = shingle_hashes(np.array([_core.hash64(t) for t in tokens], dtype=np.uint64), k)
    assert got.tolist() == shingles_ref(tokens, k)


@given(words)
def test_spot_hashes_match_reference(tokens):
    tokens = [t.lower() for t in tokens]
    got = spot_hashes(np.array([_core.hash64(t) for t in tokens], dtype=np.uint64))
    assert got.tolist() == spots_ref(tokens)


def test_stop_hashes_are_the_stopwords():
    assert sorted(STOP_HASHES.tolist()) == sorted({_core.hash64(w) for w in STOPWORDS})


@given(st.lists(st.integers(0, 5), max_size=50))
def test_weights_are_positive_and_follow_the_formula(ids):
    hashes = np.array([1000 + i for i in ids], dtype=np.uint64)
    counts = {1000 + i: ids.count(i) for i in set(ids)}
    for weighting in ("count", "logtf", "binary"):
        uniq, w = weigh(hashes, weighting)
        assert uniq.tolist() == sorted(counts)
        assert np.all(w > 0)
        for h, x in zip(uniq.tolist(), w.tolist()):
            c = counts[h]
            expected = {"count": c, "logtf": 1 + math.log(c), "binary": 1.0}[weighting]
            assert x == pytest.approx(expected)
    with pytest.raises(ValueError, match="weighting"):
        weigh(np.array([1], dtype=np.uint64), "idf")


def test_feature_sets_are_disjoint_and_combine():
    tokens = "the cat is on the mat and the dog said hello".split()
    a = features_from_tokens(tokens, {"shingles"}, 3)
    b = features_from_tokens(tokens, {"spots"}, 3)
    c = features_from_tokens(tokens, {"shingles", "spots"}, 3)
    assert len(c) == len(a) + len(b)
    assert not set(a.tolist()) & set(b.tolist())
    s = features_from_tokens([], {"structure"}, 3, tags=["html", "body", "div.a", "p", "p"])
    assert len(s) == 2          # 4-grams of 5 tags
    assert features_from_tokens([], {"shingles"}, 3).size == 0


# ----------------------------------------------------------------- tokenizer

def test_tokenizer_rules():
    assert tokenize("Hello, World! Don't stop.") == ["hello", "world", "don't", "stop"]
    assert tokenize("Don\u2019t") == tokenize("don't") == ["don't"]
    assert tokenize("ＡＢＣ １２３") == ["abc", "123"]             # NFKC full-width
    assert tokenize("Straße STRASSE") == ["strasse", "strasse"]   # casefold
    assert tokenize("ﬁnance") == ["finance"]                      # ligature
    assert tokenize("3.5 million, 1,000 people") == ["3", "5", "million", "1", "000", "people"]
    assert tokenize("e-mail — “quoted” …") == ["e", "mail", "quoted"]
    assert tokenize("Ελληνικά κείμενα") == ["ελληνικά", "κείμενα"]
    assert tokenize("Привет, мир") == ["привет", "мир"]
    assert tokenize("") == [] and tokenize("  ,;  ") == []


def test_tokenizer_splits_scripts_without_spaces():
    assert tokenize("東京都に住む") == ["東", "京", "都", "に", "住", "む"]
    assert tokenize("ภาษาไทย") == list("ภาษาไทย")
    assert tokenize("한국어 문장") == ["한국어", "문장"]            # Hangul uses spaces
    assert tokenize("iPhone発売") == ["iphone", "発", "売"]


@given(st.text(max_size=200))
def test_tokenizer_is_total_and_idempotent(text):
    tokens = tokenize(text)
    assert all(tokens)
    assert tokenize(" ".join(tokens)) == tokens
    assert normalize(normalize(text)) == normalize(text)


# ------------------------------------------- compiled path (_textfeat) vs reference

# text made of the characters the tokenizer treats specially, plus any Unicode
tricky_text = st.text(
    alphabet=st.one_of(st.sampled_from(list("ab_'\u2019 .,-9\u00e9\u4e2d\u6587\u0e20\u3042"
                                            "\u00b2\u0663\u2160\U00020001\U0001F600\u0301")),
                       st.characters()),
    max_size=120)


@given(tricky_text)
def test_compiled_token_hashes_match_reference(text):
    norm = normalize(text)
    expected = [_core.hash64(t) for t in split_tokens(norm)]
    got = _textfeat.token_hashes(norm)
    if got is None:                     # no UTF-8 form (lone surrogates): Python path
        assert any(0xD800 <= ord(c) <= 0xDFFF for c in norm)
    else:
        assert got.tolist() == expected
    assert text_token_hashes(text).tolist() == expected


def test_compiled_tokens_on_fixed_cases():
    for text in ("don't 'quoted' it's'' a'b'c ''x", "東京都に住むiPhone発売x'中y", "a_b __ 9'9",
                 "x\ud800y z", "\U00020001\U00020002ab", ""):
        norm = normalize(text)
        assert text_token_hashes(text).tolist() == [_core.hash64(t) for t in split_tokens(norm)]


@given(words, st.integers(1, 6), st.sampled_from([(True, False), (False, True), (True, True)]))
def test_compiled_text_features_match_numpy(tokens, k, sets):
    tokens = [t.lower() for t in tokens]
    th = np.array([_core.hash64(t) for t in tokens], dtype=np.uint64)
    names = {n for n, on in zip(("shingles", "spots"), sets) if on}
    got = features_from_token_hashes(th, names, k)
    ref = features_from_token_hashes_py(th, names, k)
    assert got.tolist() == ref.tolist()
    expected = (shingles_ref(tokens, k) if sets[0] else []) + (spots_ref(tokens) if sets[1] else [])
    assert got.tolist() == expected
    assert _textfeat.text_features(th, k, False, False, STOP_HASHES, _SALT["shingles"],
                                   _SALT["spots"]).size == 0


# hash values that share their table slot and bitmap bit, 0, and others
_POOL = [0, 1, 2**63, (5 << 20), (5 << 20) + 1, (5 << 20) | (1 << 40), 2**64 - 1,
         0xF00D << 48, (0xF00D << 48) + 7]


@given(st.lists(st.sampled_from(_POOL) | st.integers(0, 2**64 - 1), max_size=60),
       st.lists(st.sampled_from(_POOL) | st.integers(0, 2**64 - 1), max_size=300, unique=True))
def test_spot_signatures_with_any_stopword_set(tokens, stopwords):
    """The stopword table (open addressing, a hash 0 kept apart) is np.isin."""
    th = np.array(tokens, dtype=np.uint64)
    stops = np.array(sorted(stopwords), dtype=np.uint64)
    got = _textfeat.text_features(th, 3, False, True, stops, 1, _SALT["spots"]).tolist()
    assert got == _spot_hashes_with(th, stops)


def _spot_hashes_with(th, stops, chain=2):
    """tests.reference.features.spot_hashes with another stopword set."""
    if th.shape[0] < chain + 1:
        return []
    is_stop = np.isin(th, stops)
    ante, content = np.flatnonzero(is_stop), np.flatnonzero(~is_stop)
    if ante.size == 0 or content.size < chain:
        return []
    j = np.searchsorted(content, ante, side="right")
    ok = j + chain <= content.size
    ante, j = ante[ok], j[ok]
    with np.errstate(over="ignore"):
        h = th[ante] ^ np.uint64(_SALT["spots"])
        for c in range(chain):
            h = h * _M + th[content[j + c]]
    return fmix64(h).tolist()


def _weighted_reference(th, names, k, weighting):
    return weigh_py(features_from_token_hashes_py(th, names, k), weighting)


@given(st.lists(st.sampled_from(["the", "a", "said", "x", "y", "z", "w", "is"])
                | st.text("abcdef", min_size=1, max_size=4), max_size=300),
       st.integers(1, 5), st.sampled_from(["shingles", "spots", "shingles+spots"]),
       st.sampled_from(["count", "logtf", "binary"]))
def test_weighted_features_match_numpy(tokens, k, sets, weighting):
    # a small vocabulary: many repeated features, so counts above 1
    th = np.array([_core.hash64(t) for t in tokens], dtype=np.uint64)
    names = set(sets.split("+"))
    got = weighted_features(th, names, k, None, weighting)
    ref = _weighted_reference(th, names, k, weighting)
    assert got[0].tolist() == ref[0].tolist()
    assert got[1].tobytes() == ref[1].tobytes()


def _fmix64_inverse(x: int) -> int:
    x ^= x >> 33
    x = (x * pow(0xC4CEB9FE1A85EC53, -1, 2**64)) & MASK
    x ^= x >> 33
    x = (x * pow(0xFF51AFD7ED558CCD, -1, 2**64)) & MASK
    return x ^ (x >> 33)


def test_weighted_features_sorts_any_input():
    # token hashes crafted so that their 1-shingles share the top bits and come
    # in descending order (one bucket of the counting pass: the insertion pass
    # gives up and qsort sorts), and counts beyond the compiled log-tf table
    # (the NumPy path answers)
    rng = np.random.default_rng(1)
    wanted = sorted((int(v) | (7 << 60) for v in rng.integers(0, 2**40, size=3000)), reverse=True)
    one_bucket = np.array([_fmix64_inverse(v) ^ SALT_SHINGLES for v in wanted], dtype=np.uint64)
    assert features_from_token_hashes(one_bucket, {"shingles"}, 1).tolist() == wanted
    for values in (one_bucket, np.repeat(np.uint64(5), 5000),
                   rng.integers(0, 2**64, size=4000, dtype=np.uint64)):
        for weighting in ("count", "logtf", "binary"):
            got = weighted_features(values, {"shingles"}, 1, None, weighting)
            ref = _weighted_reference(values, {"shingles"}, 1, weighting)
            assert got[0].tolist() == ref[0].tolist()
            assert got[1].tobytes() == ref[1].tobytes()
    assert _textfeat.weighted_features(np.repeat(np.uint64(5), 5000), 1, True, False,
                                       STOP_HASHES, 1, 2, 1, _logtf_of_count()) is None


def test_compiled_features_refuse_a_shingle_size_below_one():
    th = np.arange(1, 11, dtype=np.uint64)
    for k in (0, -1, -10**6):
        with pytest.raises(ValueError, match="shingle_size"):
            _textfeat.text_features(th, k, True, False, STOP_HASHES, 1, 2)
        with pytest.raises(ValueError, match="shingle_size"):
            _textfeat.weighted_features(th, k, True, False, STOP_HASHES, 1, 2, 1,
                                        _logtf_of_count())


@given(st.lists(st.integers(0, 2**64 - 1) | st.integers(0, 3), max_size=60))
def test_unique_counts_match_numpy(values):
    a = np.sort(np.array(values, dtype=np.uint64))
    u, c = _textfeat.unique_counts(a)
    ru, rc = np.unique(a, return_counts=True)
    assert u.tolist() == ru.tolist() and c.tolist() == rc.tolist()


def _normalize_plain_nfkc(text: str) -> str:
    """normalize() without its shortcuts: the definition it must equal."""
    text = text.replace("\u2019", "'").replace("\u2018", "'")
    text = text.replace("\u02bc", "'").replace("\uff07", "'")
    return unicodedata.normalize("NFKC", text).casefold()


@given(st.text(alphabet=st.one_of(st.sampled_from(list("a \xa0\u2026.\u0301\u0308\u00b4\u00a8"
                                                        "\u1100\u1161\u3000\u2019\ufb01e")),
                                  st.characters()), max_size=60))
def test_normalize_shortcuts_equal_plain_nfkc(text):
    if text.isascii():
        assert normalize(text) == text.lower()
    else:
        assert normalize(text) == _normalize_plain_nfkc(text)


# -------------------------------------- single-pass normalize (fold_text) vs normalize

_FOLD_SAME = [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0xAC00, 0xD7A3)]  # mapped to themselves


def _fold(text):
    return _textfeat.fold_text(text, fold_table(), fold_segments())


def _row(cp: int) -> int | None:
    """The fold table's row of a code point (FOLD_SEGMENTS), or None."""
    row = 0
    for lo, hi in FOLD_SEGMENTS:
        if lo <= cp < hi:
            return row + cp - lo
        row += hi - lo
    return None


def _folds_alone(cp: int) -> bool:
    """Whether the table (or the ranges mapped to themselves) takes ``cp``."""
    row = _row(cp)
    if row is None:
        return any(lo <= cp <= hi for lo, hi in _FOLD_SAME)
    return cp < 128 or bool(fold_table()[row, 0])


def test_fold_text_on_every_single_character():
    folded = 0
    for cp in range(0x110000):
        c = chr(cp)
        got = _fold(c)
        if got is not None:
            folded += 1
            assert got == normalize(c), hex(cp)
    assert folded > 40_000      # the table is not empty by accident


def test_fold_table_knows_every_composing_character():
    """The characters the table (and the ranges mapped to themselves) accept
    never compose with a preceding one: the builder's shortcut (scanning only
    some composites) finds every one that the whole of Unicode has there."""
    full = composition_seconds([(0, 0x110000)])
    relevant = {cp for cp in full
                if _row(cp) is not None or any(lo <= cp <= hi for lo, hi in _FOLD_SAME)}
    assert relevant <= composition_seconds()
    rows = [_row(cp) for cp in relevant if _row(cp) is not None]
    assert rows and not fold_table()[rows, 0].any()


# characters that fold on their own, with the ones that compose, combine or
# need the full normalisation between them
_fold_alphabet = st.one_of(
    st.sampled_from(list("aZ \xa0\u2026\u2019\u2018\u02bc'.-9\xe9\xc9\xdf\u0130\u03a3\u03c2"
                         "\u1e9e\ufb01\u00b5\u2160\u00bd\u3000\u4e2d\uac00\u3042\u304b"
                         "\u0301\u0308\u0338\u3099\u309a\u1161\u11a8\u05b4\u0915\u093c"
                         "\u0b47\u0b3e\u0dd9\u0dcf\u1100\uff21\U0001d400\ud800"
                         "\uff0c\uff07\uff70\ufe0f\ufeff\ufe10\ufe35\uffe0\U0001F600"
                         "\U0001F3FD\U0001F1E6\U0001F100\U0001F130\U0001F21A")),
    st.characters(max_codepoint=FOLD_LIMIT + 0x100),
    st.characters())


@given(st.text(alphabet=_fold_alphabet, max_size=40))
def test_fold_text_equals_normalize(text):
    got = _fold(text)
    if got is not None:
        assert got == normalize(text)
    else:   # only a character outside the table makes it give up
        assert not all(_folds_alone(ord(c)) for c in text)


@given(st.one_of(st.text(alphabet=_fold_alphabet, max_size=60), tricky_text))
def test_fold_token_hashes_is_fold_text_then_token_hashes(text):
    got = _textfeat.fold_token_hashes(text, fold_table(), fold_segments())
    folded = _fold(text)
    if folded is None:
        assert got is None
    else:
        assert got.dtype == np.uint64
        assert got.tolist() == _textfeat.token_hashes(folded).tolist() == \
            [_core.hash64(t) for t in split_tokens(normalize(text))]


def test_fold_token_hashes_on_fixed_cases():
    long_token = "Ab" * 5000 + "é"     # longer than the run buffer it starts with
    for text in ("don't 'quoted' it's'' a'b'c ''x", "東京都にiPhone'中y",
                 "a_b __ 9'9 ", "x’s ‘q’", "中'a 'a中' 中''b",
                 "……x ÉTÉ", "'" * 3, "a'", "ßİ", long_token,
                 "word " * 3000, "",
                 # full-width punctuation and letters, variation selectors, a BOM, emoji
                 "\uff37\uff4f\uff52\uff4c\uff44\uff0c\u4f60\u597d\uff01",
                 "x\ufe0fy\ufeffz \U0001F600\U0001F44D\U0001F3FD a\U0001F600b"):
        got = _textfeat.fold_token_hashes(text, fold_table(), fold_segments())
        assert got is not None, text
        assert got.tolist() == [_core.hash64(t) for t in split_tokens(normalize(text))], text
    for text in ("a \U0001D400 b", "x\ud800y", "e\u0301", "\U00020001"):
        assert _textfeat.fold_token_hashes(text, fold_table(), fold_segments()) is None, text
    with pytest.raises(ValueError, match="fold table"):
        _textfeat.fold_token_hashes("a", fold_table()[:100], fold_segments())


def test_fold_text_pairs_of_composing_starters():
    """Every pair (first character of a canonical composition, any table
    character): composition across characters is exactly what fold_text must
    never miss."""
    firsts = set()
    for cp in range(0x110000):
        d = unicodedata.decomposition(chr(cp))
        if d and not d.startswith("<") and len(d.split()) == 2:
            firsts.add(int(d.split()[0], 16))
    accepted = [cp for lo, hi in FOLD_SEGMENTS for cp in range(max(lo, 128), hi)
                if _folds_alone(cp)]
    seconds_like = [cp for cp in accepted if unicodedata.normalize("NFKC", chr(cp)) != chr(cp)]
    for x in sorted(firsts):
        for y in seconds_like + accepted[::97]:
            text = chr(x) + chr(y)
            got = _fold(text)
            if got is not None:
                assert got == normalize(text), (hex(x), hex(y))


def _decodes(data: bytes) -> bool:
    """The reference for ``utf8_valid``: Python's own UTF-8 decoder."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@given(st.binary(max_size=40) | st.text(max_size=20).map(
    lambda t: t.encode("utf-8", "surrogatepass")))
def test_utf8_valid_equals_decode(data):
    expected = _decodes(data)
    assert _textfeat.utf8_valid(data) == expected
    padded = b"abcdefgh" * 2 + data + b"xyz"     # after and before the ASCII fast path
    assert _textfeat.utf8_valid(padded) == expected


def test_utf8_valid_on_every_two_and_boundary_three_byte_sequence():
    def same(b):
        return _textfeat.utf8_valid(b) == _decodes(b)
    for a in range(256):
        for b in range(256):
            assert same(bytes([a, b])), (a, b)
            for c in (0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0):
                assert same(bytes([a, b, c])), (a, b, c)
                assert same(bytes([a, b, c, 0x80])), (a, b, c)
