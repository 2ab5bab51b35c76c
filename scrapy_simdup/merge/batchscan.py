"""The steps of matching one batch ``Q``, shared by the in-process merge and its Dask workers.

* :class:`SideSpec` builds a *side* per key: ``Q``'s arrival order sorted
  by that key and the matcher over it (:mod:`~scrapy_simdup.merge.matchers`);
* :func:`match_chunk` matches ``Q`` against one chunk of the collection on
  both keys (PSM-F: an element matched on key 1 is not looked up on key 2);
* :func:`match_self` finds the pairs within ``Q`` on one key.

Each returns, per key, ``(elements of Q in arrival order, what they
matched, equal sketch bins)``; :mod:`~scrapy_simdup.merge.run` turns them
into pairs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from scrapy_simdup.merge.matchers import ExactBatchMatcher, IndexChunkMatcher, PSMBatchMatcher

#: a batch record's fields of each key: the key, its header weights and their RMS
KEY_FIELDS = (("value", "cq", "wrms"), ("value2", "cq2", "wrms2"))
#: what a pair needs of a matched collection record (no sketch)
MATCHED_DTYPE = np.dtype([("value", "<u8"), ("value2", "<u8"), ("id", "<i8")])


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

    def build(self, records: np.ndarray, n: int) -> Side:
        """Side ``n`` (0: key 1, 1: key 2) of the batch ``records`` (BATCH_DTYPE)."""
        key, cq, wrms = KEY_FIELDS[n]
        order, sorted_q = stable_argsort(records[key])
        # the probe table is built over Q sorted by the key: mostly sequential writes
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
                                      self.probes, self.first, self.t, self.needed, rows=order)
        return Side(key, order, matcher)


def matched_records(chunk: np.ndarray, yi: np.ndarray) -> np.ndarray:
    """The :data:`MATCHED_DTYPE` fields of ``chunk[yi]``."""
    out = np.empty(len(yi), dtype=MATCHED_DTYPE)
    for name in MATCHED_DTYPE.names:
        out[name] = chunk[name][yi]
    return out


def match_chunk(sides, chunks, active: np.ndarray, psm_f: bool, keep_table: bool = False):
    """``Q`` (``active`` elements, arrival order) against one chunk of the
    collection (``chunks``: its records sorted by each side's key): per key
    ``(elements, matched records, equal bins)``. PSM-F deactivates an element
    in ``active`` at its first match, for the other key too. ``keep_table``:
    leave the probe tables as they are (a Dask worker's are shared by its
    tasks; in-process they are compacted as elements drop out)."""
    out = []
    for side, chunk in zip(sides, chunks):
        if not active.any():
            break
        side_active = np.ascontiguousarray(active[side.order])
        # (the compiled join reads the sketches of its candidates in place)
        sketches = chunk["sketch"] if isinstance(side.matcher, PSMBatchMatcher) \
            else np.ascontiguousarray(chunk["sketch"])
        run = side.matcher.scan if keep_table else side.matcher.match
        qi, yi, _dd, agree = run(np.ascontiguousarray(chunk[side.key]), sketches, side_active)
        qa = side.order[qi]
        if psm_f:
            active[qa] = 0
        out.append((qa, matched_records(chunk, yi), agree))
    return out


def match_self(side: Side, active: np.ndarray | None = None, keep_table: bool = False):
    """The pairs within ``Q`` on ``side``'s key for the ``active`` elements
    (arrival order; None: all): ``(element, an earlier element it matched,
    equal bins)``, in arrival order. Every pair is looked at, so an
    element's matches do not depend on which other elements are active."""
    matcher = side.matcher
    side_active = np.ones(len(side.order), dtype=np.uint8) if active is None \
        else np.ascontiguousarray(active[side.order])
    run = matcher.scan if keep_table else matcher.match
    qi, yi, _dd, agree = run(matcher.values, matcher.sketch, side_active, first=False)
    qa, ya = side.order[qi], side.order[yi]
    earlier = ya < qa       # (every element also matches itself)
    return qa[earlier], ya[earlier], agree[earlier]
