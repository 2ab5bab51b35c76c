"""The steps of matching one batch ``Q``, shared by the in-process merge and its Dask workers.

* :class:`SideSpec` builds a *side* per key: ``Q``'s arrival order sorted
  by that key and the matcher over it (:mod:`~scrapy_simdup.merge.matchers`);
* :func:`match_chunk` matches ``Q`` against one chunk of the collection on
  both keys (PSM-F: an element matched on key 1 is not looked up on key 2);
* :func:`match_self` finds the pairs within ``Q`` on one key;
* :func:`read_q` reads ``Q``'s batch files into one array.

Both return the pairs found (:func:`pairs_of`), ``id`` the element's
arrival index in ``Q``; :mod:`~scrapy_simdup.merge.run` numbers and
commits them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from scrapy_simdup._limits import pair_limit
from scrapy_simdup.exceptions import CorruptFileError
from scrapy_simdup.merge.collection import PAIR_DTYPE
from scrapy_simdup.merge.matchers import (
    ExactBatchMatcher,
    IndexChunkMatcher,
    PSMBatchMatcher,
    probe_entry_bytes,
)
from scrapy_simdup.storage.batchfile import BATCH_DTYPE, read_batch

#: a batch record's fields of each key: the key, its header weights and their RMS
KEY_FIELDS = (("value", "cq", "wrms"), ("value2", "cq2", "wrms2"))


def read_q(batches: list, with_urls: bool, verify: bool) -> tuple[np.ndarray, list, list]:
    """``(records, read, damaged)``: the batch files ``batches`` (``(path,
    count)``) read into one array (no per-batch arrays to join), the
    :func:`read_batch` result of each (with its URLs if ``with_urls``), and
    ``(path, CorruptFileError)`` of each damaged one, left out."""
    records = np.empty(sum(count for _, count in batches), dtype=BATCH_DTYPE)
    read, damaged, m = [], [], 0
    for path, count in batches:
        try:
            read.append(read_batch(path, with_urls=with_urls, verify=verify,
                                   out=records[m:m + count]))
        except CorruptFileError as exc:
            damaged.append((path, exc))
            continue
        m += count
    return records[:m], read, damaged


def stable_argsort(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(order, values[order])``: the sort order of uint64 ``values``, equal
    values in their original order. NumPy's stable sort of 64-bit keys is a
    timsort (far slower than its SIMD quicksort), so the quicksort runs and
    only the runs of equal values (exact duplicate pages) are put back in
    order."""
    # contiguous first: a batch's value field is strided, and the sort and the
    # gather below lose more on it than the copy costs
    values = np.ascontiguousarray(values, dtype=np.uint64)
    order = np.argsort(values)
    ordered = values[order]
    tie = np.flatnonzero(ordered[1:] == ordered[:-1])
    if len(tie):
        pos = np.union1d(tie, tie + 1)          # positions inside runs of equal values
        starts = np.ones(len(pos), dtype=bool)
        starts[1:] = (pos[1:] != pos[:-1] + 1) | (ordered[pos[1:]] != ordered[pos[:-1]])
        run = np.cumsum(starts)
        order[pos] = order[pos][np.lexsort((order[pos], run))]
    return order, np.ascontiguousarray(ordered)


class Side(NamedTuple):
    """``Q`` on one key: the collection field it is matched on, ``order``
    (the matcher's sorted positions -> arrival order) and the matcher."""

    key: str
    order: np.ndarray
    matcher: object
    pair_limit: int = 128       # the largest sum of a pair's two key distances


@dataclass(frozen=True)
class SideSpec:
    """How a merge matches ``Q`` (one spec for both keys)."""

    distance: int
    needed: int                 # equal sketch bins for a match (0: none)
    first: bool                 # PSM-F, else PSM-A
    probes: int | None = None   # flipped probes per element (PSM)
    t: int = 0                  # header bits (PSM)
    exact: bool = False         # BPHS batch mode
    tables: int | None = None   # BPHS tables (exact)
    engine: str = "join"        # "join" (compiled scan) or "index" (the online index)

    @property
    def psm_f(self) -> bool:
        """An element is dropped at its first match (PSM-F)."""
        return self.first and not self.exact

    def table_bytes(self, m: int) -> int:
        """Bytes of the two keys' probe tables for a batch of ``m``: an entry
        per element and probe, its own header included (8 bytes, or 4 where
        the join gathers every bucket: :func:`probe_entry_bytes`)."""
        entry = 8 if self.exact or self.engine != "join" else probe_entry_bytes(self.t,
                                                                                 self.distance)
        return 2 * m * entry * ((self.probes or 0) + 1)

    def build(self, records: np.ndarray, n: int) -> Side:
        """Side ``n`` (0: key 1, 1: key 2) of the batch ``records`` (BATCH_DTYPE)."""
        key, cq, wrms = KEY_FIELDS[n]
        # the probe table is built over Q sorted by the key: mostly sequential writes
        order, sorted_q = stable_argsort(records[key])
        sketch = np.ascontiguousarray(records["sketch"][order])
        if self.exact:
            matcher = ExactBatchMatcher(sorted_q, sketch, self.distance, self.needed,
                                        self.tables)
        elif self.engine == "index":
            matcher = IndexChunkMatcher(
                sorted_q, np.ascontiguousarray(records[cq][order]),
                np.ascontiguousarray(records[wrms][order]), sketch, self.distance,
                self.probes, self.first, self.t, self.needed)
        else:
            matcher = PSMBatchMatcher(sorted_q, records[cq], sketch, self.distance,
                                      self.probes, self.first, self.t, self.needed, rows=order,
                                      partner=records[_other(key)][order],
                                      pair_limit=pair_limit(self.distance))
        return Side(key, order, matcher, pair_limit(self.distance))


def _other(key: str) -> str:
    """The collection field of the other key."""
    return KEY_FIELDS[1][0] if key == KEY_FIELDS[0][0] else KEY_FIELDS[0][0]


def pairs_of(q, qa: np.ndarray, ids: np.ndarray, value: np.ndarray, value2: np.ndarray,
             agree: np.ndarray, limit: int = 128) -> np.ndarray:
    """:data:`PAIR_DTYPE` records of the pairs (element ``qa`` of ``Q``, the
    record it matched: its ``ids``, ``value`` and ``value2``) whose two key
    distances add up to at most ``limit`` (the online index's rule,
    ``_limits.pair_limit``): ``id`` is ``qa`` (the caller adds ``Q``'s first
    collection id), the distance the smaller of the two keys' Hamming
    distances. ``q``: ``Q``'s ``value`` and ``value2`` in arrival order (a
    record array or a dict)."""
    d1 = np.bitwise_count(q["value"][qa] ^ value)
    d2 = np.bitwise_count(q["value2"][qa] ^ value2)
    keep = d1.astype(np.int64) + d2 <= limit
    pairs = np.empty(int(keep.sum()), dtype=PAIR_DTYPE)
    pairs["id"] = qa[keep]
    pairs["duplicate_of"] = ids[keep]
    pairs["distance"] = np.minimum(d1, d2)[keep]
    pairs["matches"] = agree[keep]
    return pairs


def match_chunk(sides, chunks, q, active: np.ndarray | None, psm_f: bool,
                keep_table: bool = False) -> list:
    """``Q`` (``active`` elements, arrival order; None: all, and none
    deactivated; ``q``: see :func:`pairs_of`) against one chunk of the
    collection (``chunks``: its records sorted by each side's key): the pairs
    found with each key. PSM-F deactivates an element in ``active`` at its
    first match, for the other key too. ``keep_table``: leave the probe
    tables as they are (a Dask worker's are shared by its tasks; in-process
    they are compacted as elements drop out)."""
    out = []
    for side, chunk in zip(sides, chunks):
        if active is None:
            side_active = np.ones(len(side.order), dtype=np.uint8)
        elif not active.any():
            break
        else:
            side_active = np.ascontiguousarray(active[side.order])
        # (the compiled join reads the sketches of its candidates in place,
        # and applies the pair rule with the chunk's other key)
        kw = {"first": False} if psm_f else {}
        if isinstance(side.matcher, PSMBatchMatcher):
            sketches = chunk["sketch"]
            kw["chunk_partner"] = np.ascontiguousarray(chunk[_other(side.key)])
        else:
            sketches = np.ascontiguousarray(chunk["sketch"])
        run = side.matcher.scan if keep_table else side.matcher.match
        # PSM-F: every verified pair of the chunk, then the first that passes
        # the pair rule (an element stopped at a pair the rule drops would
        # miss the chunk's other pairs)
        qi, yi, _dd, agree = run(np.ascontiguousarray(chunk[side.key]), sketches, side_active,
                                 **kw)
        qa = side.order[qi]
        pairs = pairs_of(q, qa, chunk["id"][yi], chunk["value"][yi], chunk["value2"][yi],
                         agree, side.pair_limit)
        if psm_f:
            _, once = np.unique(pairs["id"], return_index=True)
            pairs = pairs[np.sort(once)]
            if active is not None:
                active[pairs["id"]] = 0
        out.append(pairs)
    return out


def match_self(side: Side, q, active: np.ndarray | None = None,
               keep_table: bool = False) -> np.ndarray:
    """The pairs within ``Q`` on ``side``'s key for the ``active`` elements
    (arrival order; None: all), each element with an earlier one:
    :func:`pairs_of` records, ``duplicate_of`` the earlier element's arrival
    index. Every pair is looked at, so an element's matches do not depend on
    which other elements are active."""
    matcher = side.matcher
    side_active = np.ones(len(side.order), dtype=np.uint8) if active is None \
        else np.ascontiguousarray(active[side.order])
    run = matcher.scan if keep_table else matcher.match
    kw = {"chunk_partner": matcher.partner} if isinstance(matcher, PSMBatchMatcher) else {}
    qi, yi, _dd, agree = run(matcher.values, matcher.sketch, side_active, first=False, **kw)
    qa, ya = side.order[qi], side.order[yi]
    earlier = ya < qa       # (every element also matches itself)
    qa, ya = qa[earlier], ya[earlier]
    return pairs_of(q, qa, ya, q["value"][ya], q["value2"][ya], agree[earlier], side.pair_limit)
