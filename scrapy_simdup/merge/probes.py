"""Probe headers for a batch ``Q``: header-bit volatility -> most likely flip sets.

Computed once per merge for the whole batch (the paper: "pre-process Q by
identifying the volatile bits ... saves time in identifying top
bit-combinations every time a new chunk is loaded"), inverted into the probe
table (:func:`scrapy_simdup._ext.batchjoin.probe_table`) and reused for every
chunk of the collection by :func:`scrapy_simdup._ext.batchjoin.join_chunk`.

The flip sets come in VOSH order (non-increasing ``p(S)``) from the index
module's compiled generator (``_vosh.h``, called by
:func:`scrapy_simdup._ext.batchjoin.batch_flip_masks_cq`), or from the
same-result candidate ranking of ``_topflips.h`` (``h <= 3``; up to 8 flips
when the order of each element's sets is left free, as the merge does); the
bit log-odds
``log(p_j / (1 - p_j))`` come from the index's calibrated volatility model,
evaluated on ``c_j = |W[j]| / rms(W)`` (stored quantised, so a 256-entry table).
"""
from __future__ import annotations

import numpy as np

from scrapy_simdup._ext import batchjoin
from scrapy_simdup.storage.batchfile import CQ_SCALE


def volatility_model():
    """The index module's calibrated :class:`VolatilityModel`, or None if unavailable."""
    try:
        from scrapy_simdup.index.volatility import VolatilityModel  # noqa: PLC0415 - the index module
        return VolatilityModel.default()
    except Exception:  # noqa: BLE001 - not built yet / incompatible: use the fallback
        return None


def _model_log_odds():
    """The calibrated model's ``c -> log-odds`` function (the one the online
    index's C code evaluates), or None if not importable."""
    model = volatility_model()
    if model is None:
        return None
    compiled = getattr(model, "_c", None)
    if compiled is not None and hasattr(compiled, "log_odds"):
        return compiled.log_odds

    def from_p(c):
        p = np.clip(model.p(c), 1e-300, 0.5 - 1e-9)
        return np.log(p) - np.log1p(-p)
    return from_p


def probes_for_recall(recall: float, t: int, distance: int) -> int | None:
    """Flipped probes per element (own header not counted) reaching ``recall``
    according to the model's calibration; None when it cannot tell."""
    model = volatility_model()
    if model is None:
        return None
    k = model.probes_for_recall(recall, t, distance)
    return None if k is None else max(0, int(k) - 1)


def _fallback_log_odds(c: np.ndarray) -> np.ndarray:
    # Used only when the index's calibrated model is unavailable: a Laplace
    # tail p = 0.5 exp(-c / 0.35) on the normalised weight.
    p = np.clip(0.5 * np.exp(-c / 0.35), 1e-300, 0.5 - 1e-12)
    return np.log(p) - np.log1p(-p)


def log_odds_table() -> np.ndarray:
    """Log-odds of a flip for each stored ``cq`` code 0..255 (``c = cq / 32``)."""
    c = np.arange(256, dtype=np.float64) / CQ_SCALE
    fn = _model_log_odds()
    if fn is not None:
        try:
            return np.ascontiguousarray(np.asarray(fn(c), dtype=np.float64).reshape(256))
        except Exception:  # noqa: BLE001
            pass
    return _fallback_log_odds(c)


def header_log_odds(cq: np.ndarray, t: int, table: np.ndarray | None = None) -> np.ndarray:
    """Log-odds ``(m, t)`` that each header bit flips (column ``c`` = bit ``63 - c``),
    from the batch files' ``cq`` field (one table lookup per bit)."""
    if not 1 <= t <= cq.shape[1]:
        raise ValueError(f"t must be in 1..{cq.shape[1]}, got {t}")
    table = log_odds_table() if table is None else table
    return np.ascontiguousarray(table[np.asarray(cq[:, :t], dtype=np.uint8)])


def probe_masks(cq: np.ndarray, t: int, h: int, k: int, high32: bool = False, rows=None,
                header16: bool = False, ordered: bool = True):
    """``(masks uint64 (m, k), nprobes int32 (m,))``: each element's ``k`` most
    likely non-empty header flip sets, as XOR masks in their physical bits
    (``high32``: uint32 masks of the top 32 bits, half the memory;
    ``header16``: uint16 masks of the header bits alone, ``t <= 16``).
    ``rows``: the elements are ``cq[rows]`` (in that order), read in place.
    ``ordered=False``: each row's sets in any order (faster at larger ``h``)."""
    m = len(cq) if rows is None else len(rows)
    if k <= 0 or h <= 0:
        dtype = np.uint16 if header16 else np.uint32 if high32 else np.uint64
        return np.zeros((m, 0), dtype=dtype), np.zeros(m, dtype=np.int32)
    if not 1 <= t <= cq.shape[1]:
        raise ValueError(f"t must be in 1..{cq.shape[1]}, got {t}")
    return batchjoin.batch_flip_masks_cq(cq, log_odds_table(), t, h, k, high32, rows, header16,
                                          ordered)
