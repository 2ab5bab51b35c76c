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


def expected_recall(distance: int, t: int, probes: int) -> float | None:
    """The share of the near-duplicates an exact merge finds that ``probes``
    flipped probes per key on ``t`` header bits find, by the calibration on
    real pages (``VolatilityModel.expected_recall``: the two keys of real
    near-duplicate pairs, radius 12-24); None at other radii. Every flip set
    of a header short enough for VOSH to flip all its bits finds them all."""
    if probes >= batchjoin.flip_set_count(t, distance) and min(t, distance) <= VOSH_MAX_FLIPS:
        return 1.0
    return volatility_model().expected_recall(distance, t, probes + 1)


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
# the model's target when no --probes/--recall is given; it is conservative by a
# few points for PSM-F (bench_batch measures recall against exact BPHS)
DEFAULT_MERGE_RECALL = 0.98
#: ... and at a radius of the verified rule (the model's ``verified_recall``
#: table, calibrated on real near-duplicate pairs), where probes are dear:
#: the share of an exact merge's near-duplicates a merge is expected to find
DEFAULT_WIDE_MERGE_RECALL = 0.95


#: header bits below log2(chunk size): 5 with a SIMD join kernel (AVX2 or
#: AVX-512), 3 with the scalar one (see header_bits)
HEADER_SLACK = 5
HEADER_SLACK_SCALAR = 3
#: ... and at a radius of the verified rule: buckets of about 64 pages (a
#: larger probe table per batch, for more recall and less time per chunk)
WIDE_HEADER_SLACK = 6


def is_wide(distance: int | None) -> bool:
    """Whether ``distance`` is a radius of the verified rule's recall table."""
    return distance is not None and int(distance) in volatility_model().verified_recall


def header_bits(chunk_size: int, distance: int | None = None) -> int:
    """PSM header length for chunks of ``chunk_size``: ``t = log2(m) - 5`` (4..30),
    or ``log2(m) - 3`` on a CPU without AVX2; ``log2(m) - 6`` at a radius of
    the verified rule (:func:`is_wide`).

    At such a radius (22 by default) a pair differs in about a third of the
    header bits, so every header bit fewer saves many probes, and the join
    checks its candidates' other key (the pair rule) in the sweep itself:
    larger buckets are cheaper than the probes they save.

    Fewer header bits need fewer probes for the same recall (k(t) grows with
    t) and put more chunk entries in each bucket, each one more comparison in
    the join's sweep. With SIMD, about 32 entries per bucket is best; the
    scalar sweep, slower per comparison, is best at about 8 (tuned on the
    bench_batch workload). So which near-duplicates a merge
    finds (it is probabilistic) can differ between CPUs with and without
    AVX2; on one machine it is deterministic.
    """
    if is_wide(distance):
        slack = WIDE_HEADER_SLACK
    else:
        slack = HEADER_SLACK if batchjoin.join_kernel_level() > 0 else HEADER_SLACK_SCALAR
    return int(min(30, max(4, round(math.log2(max(chunk_size, 2))) - slack)))


def default_probes(distance: int, chunk_size: int) -> int:
    """Flipped probes per fingerprint when none are asked for: enough for
    ``DEFAULT_MERGE_RECALL`` (``DEFAULT_WIDE_MERGE_RECALL`` at a radius of the
    verified rule) by the calibrated volatility model (it grows with the
    distance), else ``DEFAULT_PROBES``."""
    return merge_probes(distance, header_bits(chunk_size, distance))


#: the most header bits a flip set of VOSH flips
VOSH_MAX_FLIPS = 8

#: the most flipped probes per fingerprint a merge builds a probe table for
#: (the table holds m * (k + 1) entries); beyond, exact search is the tool
MAX_MERGE_PROBES = 4096


def merge_probes(distance: int, t: int, recall: float | None = None) -> int:
    """Flipped probes per fingerprint for a target ``recall`` (None: the
    default target, falling back to ``DEFAULT_PROBES`` without a calibration)
    with ``t`` header bits. At a radius of the verified rule, the fewest
    probes whose :func:`expected_recall` reaches the target. A recall the
    model can only promise with every flip set (1.0, or beyond its
    calibration) gets every flip set when there are at most
    ``MAX_MERGE_PROBES``, else a ValueError that points to ``--exact``."""
    every = batchjoin.flip_set_count(t, distance)
    if is_wide(distance) and (recall is None or recall < 1.0):
        target = DEFAULT_WIDE_MERGE_RECALL if recall is None else recall
        k = _fewest_wide_probes(distance, t, target)
        if k is not None and min(k, every) <= MAX_MERGE_PROBES:
            return min(k, every)
        if every > MAX_MERGE_PROBES:
            raise ValueError(f"recall {target} needs more than {MAX_MERGE_PROBES:,} probes per "
                             f"fingerprint on {t} header bits at distance {distance}: use "
                             f"--exact for complete results, or a lower --recall")
        return every
    k = probes_for_recall(DEFAULT_MERGE_RECALL if recall is None else recall, t, distance)
    if k is not None:
        return k
    if recall is None:
        return DEFAULT_PROBES
    if every > MAX_MERGE_PROBES:
        raise ValueError(f"recall {recall} needs every flip set of {t} header bits at distance "
                         f"{distance} ({every:,} probes per fingerprint): use --exact for "
                         f"complete results, or a lower --recall")
    return every


def _fewest_wide_probes(distance: int, t: int, target: float) -> int | None:
    """The fewest flipped probes per key whose :func:`expected_recall` reaches
    ``target``; None when no probe count the calibration covers does."""
    lo, hi = 15, 65535          # the calibrated range, own bucket not counted
    if (expected_recall(distance, t, hi) or 0.0) < target:
        return None
    if (expected_recall(distance, t, lo) or 0.0) >= target:
        return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if expected_recall(distance, t, mid) >= target:
            hi = mid
        else:
            lo = mid
    return hi
