"""The compiled fingerprint core against the reference implementation."""
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import scrapy_simdup
from scrapy_simdup import hamming, simhash, simhash_many
from scrapy_simdup._ext import hashing
from scrapy_simdup.fingerprint.sketch import KEY2_XOR
from tests.reference.simhash import ref_hamming, ref_hash64, ref_simhash

features_st = st.lists(st.one_of(st.text(max_size=40), st.binary(max_size=40)), max_size=60)
weight_st = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
u64 = st.integers(min_value=0, max_value=2**64 - 1)


@given(st.one_of(st.text(max_size=100), st.binary(max_size=100)))
def test_hash64_matches_mmh3(feature):
    assert hashing.hash64(feature) == ref_hash64(feature)


def test_hash64_every_tail_length():
    # MurmurHash3 has a separate code path for each length mod 16.
    # The tail is read with overlapping fixed-size loads: check every length
    # up to 4 blocks, with low and high byte values.
    rng = np.random.default_rng(7)
    for length in range(0, 70):
        for data in (bytes(range(length)), bytes(rng.integers(0, 256, length, dtype=np.uint8)),
                     b"\xff" * length):
            assert hashing.hash64(data) == ref_hash64(data), (length, data)


@given(st.lists(st.one_of(st.text(max_size=70), st.binary(max_size=70),
                          st.text(alphabet="ab\u00e9\u4e2d\U0001f600", max_size=70)),
                max_size=40))
def test_hash_features_matches_mmh3_for_mixed_batches(features):
    # mixed lengths, ASCII / non-ASCII str and bytes in one list: every path
    # of the batch loop (compact-ASCII buffers, cached UTF-8, bytes)
    got = hashing.hash_features(features)
    assert got.tolist() == [ref_hash64(f) for f in features]


def test_hash_features_every_length_combination_of_four():
    keys = [bytes(range(n)) for n in range(0, 65, 3)] + ["x" * n for n in range(0, 65, 5)]
    for shift in range(4):   # every key at every position mod 4
        batch = keys[shift:] + keys[:shift]
        assert hashing.hash_features(batch).tolist() == [ref_hash64(k) for k in batch]


@given(features_st)
def test_simhash_unit_weights_matches_reference(features):
    value, W = simhash(features)
    ref_value, ref_W = ref_simhash(features)
    assert value == ref_value
    np.testing.assert_array_equal(W, ref_W)
    assert isinstance(value, int) and 0 <= value < 2**64
    assert W.shape == (64,) and W.dtype == np.float64


@given(st.lists(st.tuples(st.text(max_size=20), weight_st), max_size=60))
def test_simhash_weighted_matches_reference(pairs):
    features = [f for f, _ in pairs]
    weights = [w for _, w in pairs]
    value, W = simhash(features, weights)
    ref_value, ref_W = ref_simhash(features, weights)
    np.testing.assert_allclose(W, ref_W, rtol=1e-9, atol=1e-6)
    # Bits whose weight is (numerically) zero may legitimately differ by
    # summation order; all others must agree.
    stable = np.abs(ref_W) > 1e-6
    for j in np.flatnonzero(stable):
        assert (value >> int(j)) & 1 == (ref_value >> int(j)) & 1


SIMHASH_KERNELS = list(range(hashing.simhash_kernel() + 1))


@pytest.mark.parametrize("n", [0, 1, 7, 1000])
def test_simhash_kernels_give_bit_identical_W(n):
    # every kernel adds +w or -w to each W[j] in feature order: the same doubles
    rng = np.random.default_rng(n)
    hashes = rng.integers(0, 2**64, size=n, dtype=np.uint64)
    weights = rng.standard_normal(n) * 10.0 ** rng.integers(-3, 6, size=n)
    if n:
        weights[::5] = 0.0
        weights[1::7] = -0.0
    results = []
    try:
        for level in SIMHASH_KERNELS:
            assert hashing.simhash_kernel(level) == level
            value, W = hashing.simhash_hashes(hashes, weights)
            results.append((value, W.tobytes()))
    finally:
        hashing.simhash_kernel()
    assert all(r == results[0] for r in results)
    ref = np.where((hashes[:, None] >> np.arange(64, dtype=np.uint64)) & np.uint64(1), 1.0, -1.0)
    W_ref = np.zeros(64)
    for i in range(n):        # the reference's order: feature after feature
        W_ref += weights[i] * ref[i]
    assert results[0][1] == W_ref.tobytes()


def test_unit_path_counts_past_byte_counter_flush():
    # The unit-weight path flushes 8-bit lane counters every 255 features.
    features = [f"f{i % 300}" for i in range(2000)]
    value, W = simhash(features)
    ref_value, ref_W = ref_simhash(features)
    assert value == ref_value
    np.testing.assert_array_equal(W, ref_W)


def test_empty_and_duplicates():
    value, W = simhash([])
    assert value == 2**64 - 1 and not W.any()
    value1, W1 = simhash(["a"])
    value3, W3 = simhash(["a", "a", "a"])
    assert value1 == value3
    np.testing.assert_array_equal(W3, 3 * W1)


def test_str_and_bytes_features_agree():
    assert simhash(["héllo", "wörld"]) [0] == simhash(["héllo".encode(), "wörld".encode()])[0]


@given(st.lists(features_st, max_size=12))
def test_simhash_many_matches_single(docs):
    values, W = simhash_many(docs)
    assert values.dtype == np.uint64 and values.shape == (len(docs),)
    assert W.shape == (len(docs), 64)
    for d, features in enumerate(docs):
        value, w = simhash(features)
        assert int(values[d]) == value
        np.testing.assert_array_equal(W[d], w)


@given(st.lists(st.lists(st.tuples(st.text(max_size=10), weight_st), max_size=20), max_size=8))
def test_simhash_many_weighted(docs):
    features = [[f for f, _ in doc] for doc in docs]
    weights = [[w for _, w in doc] for doc in docs]
    values, W = simhash_many(features, weights)
    for d in range(len(docs)):
        _, ref_W = ref_simhash(features[d], weights[d])
        np.testing.assert_allclose(W[d], ref_W, rtol=1e-9, atol=1e-6)


def test_simhash_many_equals_a_loop_of_simhash():
    """Bit for bit, on random documents: unit and random weights, empty
    documents, long documents (past the 255-feature counter flush), non-ASCII
    str, bytes, and documents given as tuples or NumPy arrays."""
    rng = np.random.default_rng(20)
    docs, weights = [], []
    for d in range(300):
        n = 0 if d % 7 == 0 else int(rng.integers(1, 700 if d % 5 == 0 else 40))
        words = [f"w{rng.integers(1000)} é{rng.integers(50)}" if rng.random() < 0.2
                 else f"w{rng.integers(100_000)} x{rng.integers(1000)}" for _ in range(n)]
        if d % 11 == 1:
            words = [w.encode() for w in words]
        docs.append(tuple(words) if d % 13 == 2 else np.array(words) if d % 17 == 3 else words)
        weights.append(rng.normal(0.0, 3.0, n) if d % 2 else list(rng.integers(1, 5, n) * 0.5))
    for ws in (None, weights):
        values, W = simhash_many(docs, ws)
        assert values.shape == (len(docs),) and W.shape == (len(docs), 64)
        for d, doc in enumerate(docs):
            value, w = simhash(doc, None if ws is None else ws[d])
            assert int(values[d]) == value
            assert W[d].tobytes() == w.tobytes()
    values, W = simhash_many([])
    assert values.shape == (0,) and W.shape == (0, 64)
    with pytest.raises(TypeError, match=r"docs\[1\]\[2\] must be str or bytes"):
        simhash_many([["a"], ["b", "c", 3]])
    with pytest.raises(TypeError, match=r"docs\[1\]"):
        simhash_many([["a"], "not a list"])
    with pytest.raises(ValueError, match="finite"):
        simhash_many([["a"], ["b"]], [[1.0], [math.nan]])


@given(u64, u64)
def test_hamming_matches_reference(a, b):
    assert hamming(a, b) == ref_hamming(a, b)


@given(st.lists(u64, max_size=50), u64)
def test_hamming_many(values, query):
    out = hashing.hamming_many(np.array(values, dtype=np.uint64), query)
    assert out.tolist() == [ref_hamming(v, query) for v in values]
    pairs = hashing.hamming_pairs(np.array(values, dtype=np.uint64),
                                np.full(len(values), query, dtype=np.uint64))
    assert pairs.tolist() == out.tolist()


@pytest.mark.parametrize("bad", [None, 42, "a string", b"bytes", {"a": 1}.keys(), 3.5])
def test_non_sequence_features_rejected(bad):
    with pytest.raises(TypeError):
        simhash(bad)


def test_none_feature_rejected_with_index():
    with pytest.raises(TypeError, match=r"features\[1\]"):
        simhash(["a", None])


@pytest.mark.parametrize("weights", [[1.0, math.nan], [math.inf, 1.0], [1.0, -math.inf]])
def test_non_finite_weights_rejected(weights):
    with pytest.raises(ValueError, match="finite"):
        simhash(["a", "b"], weights)


def test_mismatched_lengths_rejected():
    with pytest.raises(ValueError, match="2 features"):
        simhash(["a", "b"], [1.0])
    with pytest.raises(ValueError):
        simhash_many([["a"], ["b"]], [[1.0]])
    with pytest.raises(TypeError):
        simhash(["a"], ["heavy"])


def test_hamming_rejects_bad_values():
    with pytest.raises(ValueError):
        hamming(-1, 0)
    with pytest.raises(ValueError):
        hamming(2**64, 0)
    with pytest.raises(TypeError):
        hamming("1", 0)


def test_public_surface():
    assert scrapy_simdup.__version__
    for name in ("simhash", "simhash_many", "hamming"):
        assert name in scrapy_simdup.__all__


@pytest.mark.parametrize("n", [0, 1, 17, 1000])
@pytest.mark.parametrize("weighted", [False, True])
def test_page_keys_are_the_two_keys_and_the_sketch(n, weighted):
    """``page_keys`` (one call, the fingerprinter's) gives what the three
    separate calls give."""
    rng = np.random.default_rng(n)
    hashes = np.unique(rng.integers(0, 2**63, n, dtype=np.int64).astype(np.uint64) * np.uint64(3))
    weights = rng.random(hashes.shape[0]) + 0.5 if weighted else None
    value, W, value2, W2, sketch = hashing.page_keys(hashes, weights, KEY2_XOR)
    want, want_W = hashing.simhash_hashes(hashes, weights)
    want2, want_W2 = hashing.simhash_remixed(hashes, weights, KEY2_XOR)
    assert (value, value2, sketch) == (want, want2, hashing.sketch_hashes(hashes))
    assert np.array_equal(W, want_W) and np.array_equal(W2, want_W2)
    with pytest.raises(ValueError, match="weights"):
        hashing.page_keys(hashes, np.ones(hashes.shape[0] + 1), KEY2_XOR)
