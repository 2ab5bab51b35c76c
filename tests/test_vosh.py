"""VOSH + max-heap order: exactly decreasing p(S), each set once, all sets."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scrapy_simdup import VolatilityModel, flip_masks
from scrapy_simdup.index.volatility import UNIFORM_P
from tests.reference.index import ref_flip_sets

MODEL = VolatilityModel.laplace(0.5)


def _header_p(W, t, model=MODEL):
    """p_j of the header bits, index r = bit 63 - r."""
    p = model.flip_probabilities(W)
    return np.array([p[63 - r] for r in range(t)])


def _mask_to_set(mask, t):
    return tuple(r for r in range(t) if (int(mask) >> (63 - r)) & 1)


@settings(max_examples=60)
@given(t=st.integers(1, 9), h=st.integers(1, 4), seed=st.integers(0, 2**32 - 1),
       ties=st.booleans())
def test_order_matches_brute_force(t, h, seed, ties):
    rng = np.random.default_rng(seed)
    W = rng.laplace(size=64)
    if ties:  # equal weights make equal probabilities
        W = np.round(W)
    masks, flipped = flip_masks(W, t, h, model=MODEL)
    p = _header_p(W, t)
    ref = ref_flip_sets(p, h)
    assert len(masks) == len(ref) == sum(math.comb(t, i) for i in range(min(h, t) + 1))
    sets = [_mask_to_set(m, t) for m in masks]
    assert sets[0] == () and flipped[0] == 0
    assert len(set(sets)) == len(sets)                      # each set once
    assert set(sets) == {S for S, _ in ref}                 # all sets
    assert list(flipped) == [len(S) for S in sets]
    # the probabilities come out exactly in the brute-force sorted order
    got = np.array([np.prod(np.where(np.isin(np.arange(t), S), p, 1 - p)) for S in sets])
    want = np.array([q for _, q in ref])
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-300)
    assert np.all(np.diff(got[1:]) <= got[1:-1] * 1e-9 + 1e-300)


@pytest.mark.parametrize("t, probes", [(12, 17), (20, 2), (20, 5), (24, 9), (30, 31)])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_max_probes_is_a_prefix(t, probes, seed):
    """A cap only ranks the `probes` most volatile bits: same sets, same order."""
    W = np.random.default_rng(seed).laplace(size=64)
    for w in (W, None):
        full, _ = flip_masks(w, t, 3, model=MODEL)
        part, fl = flip_masks(w, t, 3, max_probes=probes, model=MODEL)
        assert len(part) == probes
        np.testing.assert_array_equal(part, full[:probes])


def test_most_volatile_bit_first():
    W = np.full(64, 5.0)
    W[60] = 0.01  # header bit of rank 3 is nearly zero: most volatile
    masks, _ = flip_masks(W, 8, 2, model=MODEL)
    assert masks[1] == 1 << 60


def test_uniform_when_no_weights():
    masks, flipped = flip_masks(None, 6, 2, model=MODEL)
    assert list(flipped) == [0] + [1] * 6 + [2] * 15
    assert UNIFORM_P < 0.5


@pytest.mark.parametrize("kwargs, word", [
    (dict(W=np.zeros(64), header_bits=0, distance=3), "header_bits"),
    (dict(W=np.zeros(64), header_bits=31, distance=3), "header_bits"),
    (dict(W=np.zeros(64), header_bits=8, distance=25), "distance"),
    (dict(W=np.zeros(64), header_bits=8, distance=-1), "distance"),
    (dict(W=np.zeros(63), header_bits=8, distance=2), "W"),
    (dict(W=np.full(64, np.nan), header_bits=8, distance=2), "W"),
    (dict(W=np.zeros(64), header_bits=8, distance=2, max_probes=0), "max_probes"),
])
def test_bad_arguments(kwargs, word):
    with pytest.raises(ValueError, match=word):
        flip_masks(model=MODEL, **kwargs)


@settings(max_examples=40, deadline=None)
@given(t=st.integers(1, 24), h=st.integers(0, 8), k=st.sampled_from([-1, 1, 5, 40]),
       n=st.integers(0, 6), seed=st.integers(0, 2**32 - 1))
def test_flip_masks_many_equals_one_row_at_a_time(t, h, k, n, seed):
    """The batch generator the Redis backend uses gives every row the masks
    of the one-row generator, in the same order."""
    from scrapy_simdup._ext.psm import flip_masks_c, flip_masks_many_c
    rng = np.random.default_rng(seed)
    W = rng.normal(0, 20, (n, 64))
    if n:
        W[0, rng.integers(64)] = 0.0                    # ties and zero weights too
    model = VolatilityModel.default()._c
    flat, counts = flip_masks_many_c(model, W, t, h, k)
    assert counts.shape == (n,) and counts.sum() == flat.shape[0]
    at = 0
    for i in range(n):
        one, _ = flip_masks_c(model, W[i], t, h, k)
        assert flat[at:at + counts[i]].tolist() == one.tolist()
        at += counts[i]


def test_flip_masks_many_rejects_bad_weights():
    from scrapy_simdup._ext.psm import flip_masks_many_c
    model = VolatilityModel.default()._c
    W = np.zeros((2, 64))
    W[1, 3] = np.nan
    with pytest.raises(ValueError, match="finite"):
        flip_masks_many_c(model, W, 14, 3, 10)
    with pytest.raises(ValueError, match="shape"):
        flip_masks_many_c(model, np.zeros((2, 32)), 14, 3, 10)


def test_the_default_model_is_the_shipped_calibration():
    """Every index and the merge use the calibration in scrapy_simdup/data/,
    never an uncalibrated stand-in (the file moved once and the default
    silently became a Laplace model)."""
    import json
    from importlib.resources import files

    shipped = json.loads((files("scrapy_simdup") / "data" / "volatility_default.json").read_text())
    model = VolatilityModel.default()
    assert model.meta == shipped["meta"]
    assert model.meta["source"].startswith("benchmarks/calibrate_volatility.py")
    assert model.to_dict()["survival"] == pytest.approx(shipped["survival"])


def test_a_model_survives_json_and_a_file(tmp_path):
    model = VolatilityModel.default()
    again = VolatilityModel.from_json(model.to_json())
    assert again.to_dict() == model.to_dict()
    model.save(tmp_path / "model.json")
    loaded = VolatilityModel.load(tmp_path / "model.json")
    assert loaded.to_dict() == model.to_dict()
    rng = np.random.default_rng(3)
    W = rng.normal(size=(5, 64))
    for w in W:
        masks, flipped = flip_masks(w, 14, 3, model=loaded)
        want_masks, want_flipped = flip_masks(w, 14, 3, model=model)
        assert masks.tolist() == want_masks.tolist() and flipped.tolist() == want_flipped.tolist()
