"""Python facade of the fingerprint core: input checking and friendly types."""
from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from scrapy_simdup._ext import hashing


class SimhashResult(NamedTuple):
    """A 64-bit simhash and its bit weights; unpacks as ``value, W``."""

    value: int
    W: np.ndarray


def _check_features(features, name: str = "features") -> list:
    if features is None:
        raise TypeError(f"{name} must be a sequence of str or bytes, not None")
    if isinstance(features, (str, bytes, bytearray)):
        raise TypeError(
            f"{name} must be a sequence of str or bytes, not a single "
            f"{type(features).__name__} (wrap it in a list)")
    if isinstance(features, np.ndarray):
        features = features.tolist()
    elif not isinstance(features, Sequence):
        raise TypeError(
            f"{name} must be a sequence of str or bytes, not {type(features).__name__}")
    return features if isinstance(features, list) else list(features)


def _check_weights(weights, n: int, name: str = "weights") -> np.ndarray:
    try:
        array = np.ascontiguousarray(weights, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a sequence of numbers: {exc}") from None
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}")
    if array.shape[0] != n:
        raise ValueError(f"{name} has {array.shape[0]} entries for {n} features")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be finite (no NaN or infinity)")
    return array


def simhash(features, weights=None) -> SimhashResult:
    """Weighted 64-bit simhash of a sequence of ``str``/``bytes`` features.

    Each occurrence counts with weight 1 unless ``weights`` gives one number
    per feature. Returns ``(value, W)``: ``value`` an int in ``[0, 2**64)``,
    ``W`` the 64 bit weights (bit ``j`` of ``value`` is set iff ``W[j] >= 0``).
    """
    features = _check_features(features)
    hashes = hashing.hash_features(features)
    if weights is None:
        value, W = hashing.simhash_hashes(hashes)
    else:
        value, W = hashing.simhash_hashes(hashes, _check_weights(weights, len(features)))
    return SimhashResult(int(value), W)


def simhash_many(docs, weights=None) -> tuple[np.ndarray, np.ndarray]:
    """Simhash many documents in one compiled call.

    ``docs`` is a sequence of feature sequences; ``weights`` is None or a
    sequence with one weight sequence per document. Returns ``(values, W)``
    with shapes ``(n,)`` uint64 and ``(n, 64)`` float64; row ``d`` is
    ``simhash(docs[d], weights[d])``, bit for bit.
    """
    # copied: the compiled loop indexes it without bounds checks, so no
    # caller's code may resize it meanwhile
    docs = list(_check_features(docs, "docs"))
    if weights is not None:
        weights = _check_features(weights, "weights") if not isinstance(
            weights, np.ndarray) else list(weights)
        if len(weights) != len(docs):
            raise ValueError(f"weights has {len(weights)} entries for {len(docs)} docs")
    return hashing.simhash_docs(docs, weights, _check_features, _check_weights)


def _check_fingerprint(value, name: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer fingerprint, not {type(value).__name__}")
    value = int(value)
    if not 0 <= value < 1 << 64:
        raise ValueError(f"{name} must be in [0, 2**64), got {value}")
    return value


def hamming(a, b) -> int:
    """Number of bits in which two 64-bit fingerprints differ."""
    return hashing.hamming(_check_fingerprint(a, "a"), _check_fingerprint(b, "b"))
