"""Probes of a batch merge: how many, and which (header-bit volatility -> most likely flip sets).

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

How many: :func:`header_bits` (the header length ``t`` for a chunk size, tuned
for the join kernel) and :func:`merge_probes` (flipped probes per fingerprint
for a target recall, by the model's calibration; at most
:data:`MAX_MERGE_PROBES`).
"""
from __future__ import annotations

import math

import numpy as np

from scrapy_simdup._ext import batchjoin
from scrapy_simdup.index.volatility import VolatilityModel
from scrapy_simdup.storage.batchfile import CQ_SCALE


def volatility_model() -> VolatilityModel:
    """The calibrated :class:`VolatilityModel` the online index uses."""
    return VolatilityModel.default()


def _model_log_odds():
    """The calibrated model's ``c -> log-odds`` function (the one the online
    index's C code evaluates)."""
    return volatility_model().compiled.log_odds


def probes_for_recall(recall: float, t: int, distance: int) -> int | None:
    """Flipped probes per element (own header not counted) reaching ``recall``
    according to the model's calibration; None when it cannot tell."""
    k = volatility_model().probes_for_recall(recall, t, distance)
    return None if k is None else max(0, int(k) - 1)


def log_odds_table() -> np.ndarray:
    """Log-odds of a flip for each stored ``cq`` code 0..255 (``c = cq / 32``)."""
    c = np.arange(256, dtype=np.float64) / CQ_SCALE
    return np.ascontiguousarray(np.asarray(_model_log_odds()(c), dtype=np.float64).reshape(256))


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


DEFAULT_PROBES = 20      # when the volatility model has no calibration to ask
# ... and at a distance beyond its calibration (the wide radius of the
# verified match rule): flip sets probed per key, at most; every flip set
# when there are fewer (the header is short for small merges). The probe
# table holds m * (k + 1) entries of 8 bytes per key.
DEFAULT_WIDE_PROBES = 127
# the model's target when no --probes/--recall is given; it is conservative by a
# few points for PSM-F (bench_batch measures recall against exact BPHS)
DEFAULT_MERGE_RECALL = 0.98


#: header bits below log2(chunk size): 5 with a SIMD join kernel (AVX2 or
#: AVX-512), 3 with the scalar one (see header_bits)
HEADER_SLACK = 5
HEADER_SLACK_SCALAR = 3


def header_bits(chunk_size: int) -> int:
    """PSM header length for chunks of ``chunk_size``: ``t = log2(m) - 5`` (4..30),
    or ``log2(m) - 3`` on a CPU without AVX2.

    Fewer header bits need fewer probes for the same recall (k(t) grows with
    t) and put more chunk entries in each bucket, each one more comparison in
    the join's sweep. With SIMD, about 32 entries per bucket is best; the
    scalar sweep, slower per comparison, is best at about 8 (tuned on the
    bench_batch workload). So which near-duplicates a merge
    finds (it is probabilistic) can differ between CPUs with and without
    AVX2; on one machine it is deterministic.
    """
    slack = HEADER_SLACK if batchjoin.join_kernel_level() > 0 else HEADER_SLACK_SCALAR
    return int(min(30, max(4, round(math.log2(max(chunk_size, 2))) - slack)))


def default_probes(distance: int, chunk_size: int) -> int:
    """Flipped probes per fingerprint when none are asked for: enough for
    ``DEFAULT_MERGE_RECALL`` by the calibrated volatility model (it grows with
    the distance), else ``DEFAULT_PROBES``."""
    return merge_probes(distance, header_bits(chunk_size))


#: the most flipped probes per fingerprint a merge builds a probe table for
#: (the table holds m * (k + 1) entries); beyond, exact search is the tool
MAX_MERGE_PROBES = 4096


def merge_probes(distance: int, t: int, recall: float | None = None) -> int:
    """Flipped probes per fingerprint for a target ``recall`` (None: the
    default target, falling back to ``DEFAULT_PROBES`` without a calibration)
    with ``t`` header bits. A recall the model can only promise with every
    flip set (1.0, or beyond its calibration) gets every flip set when there
    are at most ``MAX_MERGE_PROBES``, else a ValueError that points to
    ``--exact``."""
    k = probes_for_recall(DEFAULT_MERGE_RECALL if recall is None else recall, t, distance)
    if k is not None:
        return k
    if recall is None:
        if distance not in volatility_model().probes:    # beyond the calibration
            return min(batchjoin.flip_set_count(t, distance), DEFAULT_WIDE_PROBES)
        return DEFAULT_PROBES
    every = batchjoin.flip_set_count(t, distance)
    if every > MAX_MERGE_PROBES:
        raise ValueError(f"recall {recall} needs every flip set of {t} header bits at distance "
                         f"{distance} ({every:,} probes per fingerprint): use --exact for "
                         f"complete results, or a lower --recall")
    return every
