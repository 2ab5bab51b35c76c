"""Pure Python/NumPy reference implementations the compiled core must agree with.

Deliberately simple and slow: one feature and one bit at a time, hashing with
the ``mmh3`` package (the oracle named in the foundation issue).
"""
import mmh3
import numpy as np


def ref_hash64(feature) -> int:
    if isinstance(feature, str):
        feature = feature.encode("utf-8")
    return mmh3.hash64(feature, seed=0, signed=False)[0]


def ref_simhash(features, weights=None):
    """Weighted simhash per DESIGN.md: returns (value, W)."""
    W = np.zeros(64, dtype=np.float64)
    for i, feature in enumerate(features):
        phi = ref_hash64(feature)
        w = 1.0 if weights is None else float(weights[i])
        for j in range(64):
            W[j] += w if (phi >> j) & 1 else -w
    value = 0
    for j in range(64):
        if W[j] >= 0:
            value |= 1 << j
    return value, W


def ref_hamming(a: int, b: int) -> int:
    return bin(a ^ b).count("1")
