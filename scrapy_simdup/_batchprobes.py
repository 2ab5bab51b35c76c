"""Probe headers for a batch ``Q``: header-bit volatility -> most likely flip sets.

Computed once per merge for the whole batch (the paper: "pre-process Q by
identifying the volatile bits ... saves time in identifying top
bit-combinations every time a new chunk is loaded"), then reused for every
chunk of the collection by :func:`scrapy_simdup._batchscan.scan_chunk`.

The flip-set order is the VOSH order (decreasing ``p(S)``); the bit
volatilities ``p_j = P(Y > |W[j]|)`` come from the index's calibrated
:class:`VolatilityModel` when it is available.
"""
from __future__ import annotations

import itertools

import numpy as np

#: most volatile header bits considered per element (sets over these only)
VOLATILE_BITS = 16


def _volatility_model():
    try:
        from . import VolatilityModel  # noqa: PLC0415 - written by the index module
    except ImportError:
        return None
    try:
        return VolatilityModel.default()
    except Exception:  # noqa: BLE001 - any incompatibility: use the fallback
        return None


def header_probabilities(absw: np.ndarray, t: int) -> np.ndarray:
    """Flip probabilities ``(m, t)`` of the ``t`` header bits (column 0 = bit 63).

    ``absw`` is the batch files' ``absw`` field (``|W|`` of bits 63..32).
    """
    a = np.asarray(absw[:, :t], dtype=np.float64)
    model = _volatility_model()
    if model is not None:
        try:
            p = np.asarray(model.flip_probability(a), dtype=np.float64)
            if p.shape == a.shape:
                return np.clip(p, 1e-12, 0.5)
        except Exception:  # noqa: BLE001
            pass
    # Fallback (no calibrated model importable): a Laplace tail scaled by the
    # fingerprint's own mean |W| (the W scale grows with the page length).
    scale = np.maximum(absw.astype(np.float64).mean(axis=1, keepdims=True), 1e-9) * 0.5
    return np.clip(0.5 * np.exp(-a / scale), 1e-12, 0.5)


def _subsets(v: int, h: int) -> np.ndarray:
    """All subsets of ``range(v)`` of sizes ``1..h`` as an index array padded with ``v``."""
    rows = []
    for size in range(1, h + 1):
        for combo in itertools.combinations(range(v), size):
            rows.append(list(combo) + [v] * (h - size))
    return np.array(rows, dtype=np.int64).reshape(-1, max(h, 1))


def probe_masks(p: np.ndarray, h: int, k: int, block: int = 8192) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` most likely header flip sets of each row of ``p`` as masks.

    ``p`` is ``(m, t)`` (column ``c`` is bit ``63 - c``). Returns ``(masks
    uint64 (m, k), nprobes int32 (m,))``: masks with the flipped bits in their
    physical positions, in decreasing ``p(S)`` (ties broken by fewer bits).
    Sets range over each row's ``VOLATILE_BITS`` most volatile bits.
    """
    m, t = p.shape
    h = min(h, t)
    if h <= 0 or k <= 0 or m == 0:
        return np.zeros((m, 0), dtype=np.uint64), np.zeros(m, dtype=np.int32)
    v = min(t, VOLATILE_BITS)
    sets = _subsets(v, h)                       # (S, h) indices into the volatile bits
    k = min(k, len(sets))
    sizes = (sets < v).sum(axis=1)
    masks = np.empty((m, k), dtype=np.uint64)
    logit = np.log(p) - np.log1p(-p)
    for start in range(0, m, block):
        stop = min(m, start + block)
        lg = logit[start:stop]
        order = np.argsort(-lg, axis=1, kind="stable")[:, :v]     # most volatile first
        top = np.take_along_axis(lg, order, axis=1)
        top = np.concatenate([top, np.zeros((stop - start, 1))], axis=1)
        score = top[:, sets].sum(axis=2) - 1e-9 * sizes           # log p(S) + const
        if k < len(sets):
            best = np.argpartition(-score, k - 1, axis=1)[:, :k]
            best = np.take_along_axis(
                best, np.argsort(-np.take_along_axis(score, best, axis=1), axis=1, kind="stable"),
                axis=1)
        else:
            best = np.argsort(-score, axis=1, kind="stable")
        bitpos = 63 - order                                        # physical bit of each volatile slot
        bitmask = np.concatenate(
            [np.left_shift(np.uint64(1), bitpos.astype(np.uint64)),
             np.zeros((stop - start, 1), dtype=np.uint64)], axis=1)
        chosen = sets[best]                                        # (b, k, h)
        rows = np.arange(stop - start)[:, None, None]
        masks[start:stop] = np.bitwise_or.reduce(bitmask[rows, chosen], axis=2)
    return masks, np.full(m, k, dtype=np.int32)
