"""Probe headers for a batch ``Q``: header-bit volatility -> most likely flip sets.

Computed once per merge for the whole batch (the paper: "pre-process Q by
identifying the volatile bits ... saves time in identifying top
bit-combinations every time a new chunk is loaded"), then reused for every
chunk of the collection by :func:`scrapy_simdup._batchscan.scan_chunk`.

The flip sets come in VOSH order (non-increasing ``p(S)``) from the index
module's compiled generator (``_vosh.h``, called by
:func:`scrapy_simdup._batchscan.batch_flip_masks`); the bit log-odds
``log(p_j / (1 - p_j))`` come from the index's calibrated volatility model,
evaluated on ``c_j = |W[j]| / rms(W)``.
"""
from __future__ import annotations

import numpy as np

from . import _batchscan


def _model_log_odds():
    """The calibrated model's ``c -> log-odds`` function, or None if not importable."""
    try:
        from ._index import VolatilityModel  # noqa: PLC0415 - the index module
    except ImportError:
        return None
    for factory in ("default", "load_default", "builtin"):
        make = getattr(VolatilityModel, factory, None)
        if make is None:
            continue
        try:
            model = make()
        except Exception:  # noqa: BLE001
            continue
        for name in ("log_odds", "log_odds_c"):
            fn = getattr(model, name, None)
            if fn is not None:
                return fn
    return None


def _fallback_log_odds(c: np.ndarray) -> np.ndarray:
    # Used only when the index's calibrated model is unavailable: a Laplace
    # tail p = 0.5 exp(-c / 0.35) on the normalised weight.
    p = np.clip(0.5 * np.exp(-c / 0.35), 1e-300, 0.5 - 1e-12)
    return np.log(p) - np.log1p(-p)


def header_log_odds(absw: np.ndarray, wrms: np.ndarray, t: int) -> np.ndarray:
    """Log-odds ``(m, t)`` that each header bit flips (column ``c`` = bit ``63 - c``)."""
    if not 1 <= t <= absw.shape[1]:
        raise ValueError(f"t must be in 1..{absw.shape[1]}, got {t}")
    rms = np.asarray(wrms, dtype=np.float64)[:, None]
    c = np.asarray(absw[:, :t], dtype=np.float64) / np.where(rms > 0, rms, 1.0)
    c = np.where(rms > 0, c, 0.0)
    fn = _model_log_odds()
    lw = None
    if fn is not None:
        try:
            lw = np.asarray(fn(c), dtype=np.float64).reshape(c.shape)
        except Exception:  # noqa: BLE001
            lw = None
    if lw is None:
        lw = _fallback_log_odds(c)
    return np.ascontiguousarray(lw)


def probe_masks(absw: np.ndarray, wrms: np.ndarray, t: int, h: int, k: int):
    """``(masks uint64 (m, k), nprobes int32 (m,))``: each element's ``k`` most
    likely non-empty header flip sets, as XOR masks in their physical bits."""
    if k <= 0 or h <= 0:
        m = len(absw)
        return np.zeros((m, 0), dtype=np.uint64), np.zeros(m, dtype=np.int32)
    return _batchscan.batch_flip_masks(header_log_odds(absw, wrms, t), h, k)
