"""The matchers of a batch merge: a batch ``Q`` against one sorted chunk of the collection.

Each matcher works on one key (the merge builds one per key): it is built
once per batch, over ``Q`` sorted by that key with its sketches, and its
``match(chunk_values, chunk_sketch, active)`` returns ``(batch element, chunk
element, distance, matches)`` arrays for the elements of ``Q`` still
``active``: the pairs within the distance on this key whose sketches agree
in at least ``needed`` bins (``matches``: the equal bins). PSM-F deactivates
an element at its first *verified* match.

* :class:`PSMBatchMatcher`: PSM-F (``first``: an element is deactivated at
  its first match) or PSM-A (every match), the compiled join of a probe
  table built over ``Q`` with each chunk;
* :class:`ExactBatchMatcher`: BPHS batch mode, exact (the reference for recall);
* :class:`IndexChunkMatcher`: PSM through the online index itself (the
  cross-check of the batch scan).
"""
from __future__ import annotations

import numpy as np

from scrapy_simdup._ext import batchjoin
from scrapy_simdup.index.memory import BPHSIndex, PSMIndex
from scrapy_simdup.merge.probes import probe_masks
from scrapy_simdup.storage.batchfile import CQ_SCALE

#: distances from which the probe table is split in runs by flipped bits
PROBE_RUNS_FROM = 6


def probe_runs(t: int, distance: int) -> int:
    """Runs per bucket of the probe table: one per number of flipped header
    bits (0..min(h, 8)), so that the join filters an entry whose probe
    flipped ``s`` bits at ``h - s`` differing low bits instead of ``h``.

    Worth it only where false candidates cost: random low bits pass an
    ``h``-bit filter with probability 1e-6 at h = 3 but 1e-3 at h = 7 and
    1e-2 at h = 9, where the runs remove most of them, while at small ``h``
    the more, shorter sweeps cost more than they save. One run below
    PROBE_RUNS_FROM, and when the offsets would pass 2^24 entries (128 MiB)."""
    if distance < PROBE_RUNS_FROM:
        return 1
    runs = min(distance, 8) + 1
    return runs if (runs << t) <= 1 << 24 else 1


def probe_entry_bytes(t: int, distance: int) -> int:
    """Bytes a probe-table entry takes: the element's number and its low 32
    bits, or its number alone where the join gathers every bucket's full
    values anyway (from radius 22: :func:`batchjoin.gathers_always`)."""
    return 4 if batchjoin.gathers_always(distance, probe_runs(t, distance)) else 8


class SharedMatcher:
    """A matcher a Dask worker maps from files rather than receives: its
    ``SHARED_ARRAYS`` are written once by the worker that built it and
    mapped by the others, the other attributes (a few numbers) go with the
    tasks, and ``DERIVED`` ones are rebuilt by :meth:`restore` on the
    worker."""

    SHARED_ARRAYS: tuple = ()
    DERIVED: tuple = ()

    def shared_parts(self) -> tuple[dict, dict]:
        """``(plain attributes, arrays)``: what :meth:`from_shared` takes."""
        plain = {k: v for k, v in vars(self).items()
                 if k not in self.SHARED_ARRAYS and k not in self.DERIVED}
        return plain, {name: getattr(self, name) for name in self.SHARED_ARRAYS}

    @classmethod
    def from_shared(cls, plain: dict, arrays: dict):
        matcher = cls.__new__(cls)
        vars(matcher).update(plain)
        vars(matcher).update(arrays)
        matcher.restore()
        return matcher

    def restore(self) -> None:
        """Rebuild the ``DERIVED`` attributes."""


class PSMBatchMatcher(SharedMatcher):
    """Online PSM matching of a batch against sorted chunks (compiled scan).

    The probes of every element (its header and its ``probes`` most likely
    flipped headers, VOSH order) are computed once per batch and inverted into
    a header-ordered probe table; each sorted chunk is then matched by walking
    its bucket offsets and the probe table side by side, each pair within the
    distance verified by the sketches in the same pass. With PSM-F matched
    elements are deactivated and periodically compacted out of the table.
    """

    def __init__(self, q_values, q_cq, q_sketch, distance, probes, first, t, needed,
                 rows=None, partner=None, pair_limit=128):
        """``q_cq[rows]`` are the stored weights of ``q_values`` (``rows``: None for all).
        ``partner``: each element's other key (aligned with ``q_values``), for
        the pair rule (``pair_limit``) in the join; None: no pair rule there."""
        self.values = np.ascontiguousarray(q_values, dtype=np.uint64)
        self.partner = None if partner is None else np.ascontiguousarray(partner, np.uint64)
        self.pair_limit = pair_limit
        self.sketch = np.ascontiguousarray(q_sketch, dtype=np.uint8)
        self.t = t
        self.h = distance
        self.first = first
        self.needed = needed
        # the smallest masks that hold the flips: the header bits alone when t <= 16
        # the probe table does not need each element's sets in VOSH order
        masks, nprobes = probe_masks(q_cq, t, distance, probes, high32=t > 16, header16=t <= 16,
                                     rows=rows, ordered=False)
        # where the join gathers every bucket (h >= 22), it never reads the low bits
        self.offsets, self.low, self.idx = batchjoin.probe_table(
            self.values, masks, nprobes, t, runs=probe_runs(t, distance),
            low_bits=probe_entry_bytes(t, distance) == 8)
        del masks
        self._active_at_compaction = len(self.values)

    SHARED_ARRAYS = ("values", "partner", "sketch", "offsets", "low", "idx")

    def scan(self, chunk_values, chunk_sketch, active, first=None, chunk_partner=None):
        """:meth:`match` leaving the probe table as it is (a Dask worker's
        copy is shared by its tasks). ``first``: PSM-F for this call (default:
        the matcher's). ``chunk_partner``: the chunk's other key (with the
        matcher's ``partner``: the pair rule in the join)."""
        chunk_offsets = batchjoin.bucket_offsets(chunk_values, self.t)
        pairing = {}
        if self.partner is not None and chunk_partner is not None:
            pairing = dict(q_partner=self.partner, chunk_partner=chunk_partner,
                           pair_limit=self.pair_limit)
        return batchjoin.join_chunk(chunk_values, chunk_offsets, self.offsets, self.low,
                                    self.idx, self.values, self.h, active,
                                    self.first if first is None else first,
                                    self.sketch, chunk_sketch, self.needed, **pairing)

    def match(self, chunk_values, chunk_sketch, active, first=None, chunk_partner=None):
        result = self.scan(chunk_values, chunk_sketch, active, first, chunk_partner)
        n_active = int(np.count_nonzero(active))
        if n_active < 0.5 * self._active_at_compaction:
            n = batchjoin.compact_probe_table(self.offsets, self.low, self.idx, active)
            # views: a copy would only add a page-faulting allocation (the
            # peak is already reached, and the table lives until the batch ends)
            self.low, self.idx = self.low[:n], self.idx[:n]
            self._active_at_compaction = n_active
        return result


def _verified(qi, yi, dd, q_sketch, chunk_sketch, needed, active, first):
    """Keep the candidates whose sketches agree in ``needed`` bins; with
    ``first``, one per element (the first listed), deactivated in ``active``."""
    qi = np.asarray(qi, dtype=np.int64)
    yi = np.asarray(yi, dtype=np.int64)
    aa = batchjoin.sketch_agree(q_sketch, qi, chunk_sketch, yi)
    keep = aa >= needed
    qi, yi, dd, aa = qi[keep], yi[keep], np.asarray(dd, dtype=np.uint8)[keep], aa[keep]
    if first and len(qi):
        _, once = np.unique(qi, return_index=True)
        once = np.sort(once)
        qi, yi, dd, aa = qi[once], yi[once], dd[once], aa[once]
        active[qi] = 0
    return qi, yi, dd, aa


class ExactBatchMatcher(SharedMatcher):
    """BPHS batch mode (the exact reference): the index module's :class:`BPHSIndex`
    (``tables`` permuted sorted copies) is built over ``Q``, every element of
    a chunk is looked up in it, and every pair within the distance is
    verified. BPHS-F and BPHS-A are the same in batch mode."""

    SHARED_ARRAYS = ("values", "sketch")
    DERIVED = ("index",)

    def __init__(self, q_values, q_sketch, distance, needed, tables=None):
        self.values = np.ascontiguousarray(q_values, dtype=np.uint64)
        self.sketch = np.ascontiguousarray(q_sketch, dtype=np.uint8)
        self.needed = needed
        self.distance = distance
        self.tables = tables
        self._build_index()

    def _build_index(self):
        self.index = BPHSIndex(distance=self.distance, tables=self.tables)
        self.index.add(self.values)

    def restore(self) -> None:
        # the compiled index does not pickle: a Dask worker rebuilds it from Q
        self._build_index()

    def match(self, chunk_values, chunk_sketch, active, first=None):
        """Every verified pair (BPHS-F and BPHS-A are the same in batch mode:
        ``first`` is ignored)."""
        qi, yi, dd = self.index.query_many(chunk_values, first=False)
        # query_many answers for chunk elements: swap to (batch element, chunk element)
        qi, yi = np.asarray(yi, dtype=np.int64), np.asarray(qi, dtype=np.int64)
        keep = active[qi].astype(bool)
        return _verified(qi[keep], yi[keep], np.asarray(dd, dtype=np.uint8)[keep],
                         self.sketch, chunk_sketch, self.needed, active, False)

    scan = match


def _pseudo_W(cq: np.ndarray, wrms: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Full 64-weight vectors carrying the stored header weights (signs from the
    value bits) and the stored RMS, for the online index's query API."""
    n = len(values)
    W = np.zeros((n, 64), dtype=np.float64)
    top = cq.astype(np.float64) / CQ_SCALE * wrms.astype(np.float64)[:, None]
    bits = 63 - np.arange(top.shape[1])
    signs = np.where((values[:, None] >> bits.astype(np.uint64)) & np.uint64(1), 1.0, -1.0)
    W[:, bits] = top * signs
    rest = 64 - top.shape[1]
    fill = np.sqrt(np.maximum(64.0 * wrms.astype(np.float64) ** 2 - (top ** 2).sum(axis=1), 0) / rest)
    low = np.arange(rest)
    lsigns = np.where((values[:, None] >> low.astype(np.uint64)) & np.uint64(1), 1.0, -1.0)
    W[:, low] = fill[:, None] * lsigns
    return W


class IndexChunkMatcher:
    """PSM batch mode through the online index itself: a :class:`PSMIndex` is
    built over each chunk and ``Q`` is answered with ``query_many`` (the
    index's compiled query loop, VOSH probes recomputed per chunk), every
    candidate then verified. Slower than :class:`PSMBatchMatcher`; kept as
    the cross-check of the batch scan."""

    def __init__(self, q_values, q_cq, q_wrms, q_sketch, distance, probes, first, t, needed):
        self.values = np.ascontiguousarray(q_values, dtype=np.uint64)
        self.sketch = np.ascontiguousarray(q_sketch, dtype=np.uint8)
        self.W = _pseudo_W(q_cq, q_wrms, self.values)
        self.h = distance
        self.first = first
        self.t = t
        self.probes = probes
        self.needed = needed

    def match(self, chunk_values, chunk_sketch, active, first=None):
        index = PSMIndex(distance=self.h, max_probes=self.probes + 1, header_bits=self.t)
        index.add(chunk_values, np.arange(len(chunk_values), dtype=np.int64))
        sel = np.flatnonzero(active)
        if len(sel) == 0:
            return (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.uint8),
                    np.zeros(0, np.uint8))
        # every candidate, then the verified ones (the first of each with PSM-F)
        qidx, ids, dist = index.query_many(self.values[sel], self.W[sel], first=False)
        return _verified(sel[qidx], ids, dist, self.sketch, chunk_sketch, self.needed,
                         active, self.first if first is None else first)

    scan = match
