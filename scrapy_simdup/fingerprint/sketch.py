"""What a match is verified with: a second 64-bit key and a MinHash sketch.

The 64-bit simhash (the *key*) finds candidates; it is a coarse estimate of
the angle between two pages, so loose near-duplicates (the same wire story in
two templates) lie 17-24 bits apart while an unrelated page lies within 22
bits with probability about 1/120. Two more values, computed from the same
feature hashes, let an index search wide and still decide precisely:

* the **second key**: the simhash of ``fmix64(h ^ KEY2_XOR)`` of the same
  feature hashes with the same weights. It is an independent sketch of the
  same vector, so a near-duplicate the first key places far away is often
  close under the second; indexes search both (docs/algorithms.rst);
* the **sketch**: a one-permutation MinHash of the distinct feature hashes,
  ``SKETCH_BYTES`` bins of 8 bits (``_ext/_sketch.h``). The number of equal
  bins estimates the Jaccard similarity of the two feature sets, and it is
  independent of the keys, so a candidate found by chance at a wide radius
  passes it with a probability that falls exponentially with the bins
  (:func:`chance_pass`).

A candidate is a match when its estimated similarity is at least
``min_similarity``, i.e. when at least :func:`matches_needed` bins agree.
"""
from __future__ import annotations

from math import ceil, comb

import numpy as np

from scrapy_simdup._ext import hashing

__all__ = ["SKETCH_BYTES", "SKETCH_VERSION", "KEY2_XOR", "page_sketch", "second_key",
           "matches_needed", "similarity", "chance_pass", "check_min_similarity"]

#: bins of the MinHash sketch, one byte each
SKETCH_BYTES = 32
#: the recipe of the second key and of the sketch (part of ``Fingerprinter.version``)
SKETCH_VERSION = 1
#: the second key hashes ``fmix64(h ^ KEY2_XOR)`` (the digits of pi)
KEY2_XOR = 0x243F6A8885A308D3
# two bins agree by chance with probability 1/256 (8 bits a bin)
_CHANCE = 1.0 / 256


def page_sketch(hashes: np.ndarray) -> bytes:
    """The ``SKETCH_BYTES``-byte sketch of a page's feature hashes (uint64)."""
    return hashing.sketch_hashes(np.ascontiguousarray(hashes, dtype=np.uint64))


def second_key(hashes: np.ndarray, weights: np.ndarray | None) -> tuple[int, np.ndarray]:
    """``(value2, W2)``: the second key of the same features and weights."""
    value, W = hashing.simhash_remixed(
        np.ascontiguousarray(hashes, dtype=np.uint64),
        None if weights is None else np.ascontiguousarray(weights, dtype=np.float64), KEY2_XOR)
    return int(value), W


def check_min_similarity(value, name: str = "min_similarity") -> float:
    """``value`` as a float in [0, 1], or a ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) \
            or not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
    return float(value)


def matches_needed(min_similarity: float) -> int:
    """Equal bins a candidate needs for an estimated similarity >= ``min_similarity``
    (0 accepts every candidate: the key alone decides)."""
    min_similarity = check_min_similarity(min_similarity)
    if min_similarity <= 0.0:
        return 0
    return int(ceil((min_similarity * (1 - _CHANCE) + _CHANCE) * SKETCH_BYTES - 1e-9))


def similarity(matches):
    """Estimated Jaccard similarity from the count of equal bins (scalar or array),
    corrected for chance agreement and clipped to [0, 1]."""
    if isinstance(matches, int):    # one match: the same arithmetic, without NumPy
        return min(1.0, max(0.0, (matches / SKETCH_BYTES - _CHANCE) / (1 - _CHANCE)))
    est = (np.asarray(matches, dtype=np.float64) / SKETCH_BYTES - _CHANCE) / (1 - _CHANCE)
    est = np.clip(est, 0.0, 1.0)
    return float(est) if est.ndim == 0 else est


def chance_pass(min_similarity: float) -> float:
    """Probability that an unrelated page's sketch (Jaccard 0) passes."""
    need = matches_needed(min_similarity)
    return sum(comb(SKETCH_BYTES, k) * _CHANCE ** k * (1 - _CHANCE) ** (SKETCH_BYTES - k)
               for k in range(need, SKETCH_BYTES + 1))
