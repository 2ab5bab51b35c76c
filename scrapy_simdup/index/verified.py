"""The verified index: wide PSM search on two keys, MinHash verification.

A page is stored as its two 64-bit keys and its sketch
(:mod:`scrapy_simdup.fingerprint.sketch`). A look-up searches one PSM table
per key at radius ``distance`` (the VOSH probe order of the shipped volatility
model, at most ``max_probes`` buckets per key), and every stored page found
within ``distance`` of either key whose two key distances add up to at most
``pair_limit`` is a *candidate*. A candidate is a *match*
when its sketch agrees with the query's in at least
``matches_needed(min_similarity)`` bins; the best match is the one with the
most agreeing bins (then the smaller key distance, then the earlier page).

The radius is wide (22 by default, where a plain 64-bit key would flag one
unrelated page in about 120) because the verification, not the radius, keeps
chance matches out: docs/algorithms.rst gives the numbers.

With ``bands``, the first ``bands`` pairs of sketch bins are also exact-match
tables (:mod:`scrapy_simdup._ext.bands`): every stored page that agrees with
the query on a band, whose two key distances add up to at most ``pair_limit
+ BAND_PAIR_SLACK``, is a candidate too, whatever the probes reached; it
needs one equal bin more than the others (two of its bins are equal by
selection, which makes the sketch test easier to pass by chance). A pair
of Jaccard similarity J agrees on a band with probability about J**2 at
any index size, so they find the loose pairs that a probe budget misses as
the header grows.

Memory: each key table keeps the key, the other key (for the pair rule,
checked in the scan before a sketch is read) and the row (24 bytes), and the
sketch takes ``SKETCH_BYTES``: 80 bytes a page at the defaults, plus 8 when
the caller gives its own ids. Bands add 4 bytes a page each and the keys by
row (16 bytes).
"""
from __future__ import annotations

import contextlib
import functools
from math import comb

import numpy as np

from scrapy_simdup._ext import bands as _bands
from scrapy_simdup._ext import hashing, mapped, psm
from scrapy_simdup._limits import (
    BAND_PAIR_SLACK,
    DEFAULT_DISTANCE,
    DEFAULT_MIN_SIMILARITY,
    DEFAULT_PROBES_PER_KEY,
    MAX_BANDS,
    MAX_CALIBRATED_DISTANCE,
    MAX_RECALL_PROBES,
    VERIFIED_HEADER_DROP,
)
from scrapy_simdup._limits import pair_limit as _pair_limit
from scrapy_simdup.fingerprint.sketch import (
    SKETCH_BYTES,
    check_min_similarity,
    matches_needed,
    similarity,
)
from scrapy_simdup.index.memory import PSMIndex, _as_ids, _as_values, _check_distance
from scrapy_simdup.index.volatility import VolatilityModel

__all__ = ["VerifiedIndex", "VerifiedMatch"]


class VerifiedMatch(tuple):
    """``(id, similarity, distance)`` of a verified match: the stored id, the
    estimated Jaccard similarity of the two feature sets, and the Hamming
    distance of the key that found it (the smaller when both did)."""

    __slots__ = ()

    def __new__(cls, id: int, similarity: float, distance: int):
        return super().__new__(cls, (id, similarity, distance))

    id = property(lambda self: self[0])
    similarity = property(lambda self: self[1])
    distance = property(lambda self: self[2])

    def __repr__(self) -> str:
        return f"VerifiedMatch(id={self[0]}, similarity={self[1]:.3f}, distance={self[2]})"


def _as_sketches(sketches, n: int) -> np.ndarray:
    """bytes / sequence of bytes / uint8 array -> uint8[n, SKETCH_BYTES]."""
    if isinstance(sketches, (bytes, bytearray, memoryview)):
        sketches = [bytes(sketches)]
    if isinstance(sketches, np.ndarray):
        arr = sketches
    else:
        try:
            items = [bytes(s) for s in sketches]
        except TypeError:
            raise TypeError("sketches must be bytes or a sequence of bytes") from None
        if any(len(s) != SKETCH_BYTES for s in items):
            raise ValueError(f"each sketch must be {SKETCH_BYTES} bytes")
        arr = np.frombuffer(b"".join(items), dtype=np.uint8).reshape(len(items), SKETCH_BYTES)
    if arr.dtype != np.uint8 or arr.ndim != 2 or arr.shape[1] != SKETCH_BYTES:
        raise ValueError(f"sketches must have shape (n, {SKETCH_BYTES}) and dtype uint8")
    if arr.shape[0] != n:
        raise ValueError(f"sketches must have one entry per value ({n}), got {arr.shape[0]}")
    return np.ascontiguousarray(arr)


@functools.lru_cache(maxsize=256)
def _probe_budget(t: int, h: int, cap) -> int:
    """Buckets a look-up probes in one table: flip sets of at most 8 header
    bits (``_vosh.h`` VOSH_MAX_H), the own header included, up to ``cap``."""
    total = sum(comb(t, i) for i in range(min(h, t, 8) + 1))
    return min(int(cap), total) if cap is not None else total


def _as_value(value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
            or not 0 <= int(value) < 1 << 64:
        raise ValueError(f"a key must be an int in [0, 2**64), got {value!r}")
    return int(value)


class VerifiedIndex:
    """Near-duplicate index that searches wide and verifies each candidate.

    ``distance``: search radius of each key (0..``MAX_DISTANCE``).
    ``min_similarity``: estimated Jaccard similarity a candidate needs (0: the
    keys alone decide). ``max_probes``: buckets probed per key and look-up (None:
    every flip set of up to 8 header bits). ``header_bits``: fix the header
    size ``t`` (default: ``floor(log2 n) - 7``, growing). ``model``: a
    :class:`VolatilityModel` (default: the shipped one). ``recall``: instead of
    ``max_probes``, the fewest probes per key whose calibrated recall reaches
    it at the current header size, re-chosen as the header grows, at most
    ``MAX_RECALL_PROBES`` (``recall_held`` says whether that sufficed;
    calibrated at ``distance`` 12..24, below that each key's model decides).
    ``pair_limit``: the
    largest sum of a candidate's two key distances (default ``distance +
    26``; 128 turns the pair rule off). ``bands``: sketch bands searched
    beside the keys (0..16; 0: none).
    """

    def __init__(self, distance: int = DEFAULT_DISTANCE,
                 min_similarity: float = DEFAULT_MIN_SIMILARITY,
                 max_probes: int | None = DEFAULT_PROBES_PER_KEY,
                 header_bits: int | None = None, model=None, recall: float | None = None,
                 pair_limit: int | None = None, bands: int = 0):
        self.distance = _check_distance(distance)
        self.min_similarity = check_min_similarity(min_similarity)
        self.needed = matches_needed(self.min_similarity)
        model = VolatilityModel.default() if model is None else model
        if not isinstance(model, VolatilityModel):
            raise TypeError(f"model must be a VolatilityModel, got {type(model).__name__}")
        self.model = model
        # recall= on a calibrated radius: the budget is re-chosen as the header
        # grows (_rebudget), up to MAX_RECALL_PROBES per key
        self.recall: float | None = None
        self.recall_held = True
        table_recall = None
        if recall is not None:
            if isinstance(recall, bool) or not isinstance(recall, (int, float)) \
                    or not 0.0 < float(recall) <= 1.0:
                raise ValueError(f"recall must be in (0, 1], got {recall!r}")
            if model.expected_recall(self.distance, 8, MAX_RECALL_PROBES) is not None:
                self.recall = float(recall)
                max_probes = MAX_RECALL_PROBES      # until the first _rebudget
            elif self.distance <= MAX_CALIBRATED_DISTANCE:
                table_recall, max_probes = recall, None     # each key's own model
            else:
                raise ValueError(f"recall is not calibrated at distance {self.distance}: "
                                 "give max_probes instead")
        elif max_probes is None:
            table_recall = 1.0      # every flip set
        if pair_limit is None:
            pair_limit = _pair_limit(self.distance)
        elif isinstance(pair_limit, bool) or not isinstance(pair_limit, (int, np.integer)) \
                or not 0 <= pair_limit <= 128:
            raise ValueError(f"pair_limit must be an int in 0..128, got {pair_limit!r}")
        self.pair_limit = int(pair_limit)
        if isinstance(bands, bool) or not isinstance(bands, (int, np.integer)) \
                or not 0 <= bands <= MAX_BANDS:
            raise ValueError(f"bands must be an int in 0..{MAX_BANDS}, got {bands!r}")
        if bands and not self.needed:
            raise ValueError("bands need the sketch test: give a min_similarity above 0")
        self.bands = _bands.SketchBands(int(bands)) if bands else None
        self.band_pair_limit = min(128, self.pair_limit + BAND_PAIR_SLACK)
        self.tables = tuple(PSMIndex(distance=self.distance, max_probes=max_probes,
                                     recall=table_recall, header_bits=header_bits, model=model)
                            for _ in range(2))
        self._budget_t = -1
        self._stated = None
        for column, table in zip((1, 0), self.tables):
            table._set_header_drop(VERIFIED_HEADER_DROP)
            table._set_paired(self.pair_limit, column)
            table._set_packed()     # its ids are rows: dense, below 2 ** (t + 8)
        self._n = 0
        self._probes = 0
        self._sketches = np.zeros((0, SKETCH_BYTES), np.uint8)
        self._ids: np.ndarray | None = None      # None while every id equals its row
        # the two keys by row: a table's candidate is checked on its other
        # key there, and a band's on both
        self._keys = np.zeros((0, 2), np.uint64)
        self._share_rows()
        self._rebudget()

    # -- state ------------------------------------------------------------
    def __len__(self) -> int:
        return self._n

    @property
    def header_bits(self) -> int:
        return self.tables[0].header_bits

    @property
    def max_probes(self):
        return self.tables[0].max_probes

    @property
    def expected_recall(self) -> float | None:
        """The share of the near-duplicates an exhaustive search would find
        that a look-up finds at the current size and budget, from the
        calibration of the shipped model (``benchmarks/calibrate_recall.py``,
        real near-duplicate pages, with the bands if any); None where it is not
        calibrated (another radius, fewer than 16 probes per key, 1 to 3
        bands)."""
        key = (self.header_bits, self.max_probes)
        if self._stated is None or self._stated[0] != key:     # read once per header
            self._stated = (key, self.model.expected_recall(self.distance, *key,
                                                            self._band_count))
        return self._stated[1]

    def _rebudget(self) -> None:
        """With ``recall=``: the fewest probes per key that reach it at the
        current header size, at most ``MAX_RECALL_PROBES`` (``recall_held``
        says whether that is enough)."""
        t = self.header_bits
        if self.recall is None or t == self._budget_t:
            return
        self._budget_t = t
        k = self.model.probes_for_expected_recall(self.distance, t, self.recall,
                                                  self._band_count)
        self.recall_held = k is not None and k <= MAX_RECALL_PROBES
        for table in self.tables:
            table.max_probes = k if self.recall_held else MAX_RECALL_PROBES

    @property
    def sketches(self) -> np.ndarray:
        """The stored pages' sketches by row, uint8[rows, SKETCH_BYTES] (a view:
        valid until the next add; rows past ``len(self)`` are unused)."""
        return self._sketches

    @property
    def keys(self) -> np.ndarray:
        """The stored pages' two keys by row, uint64[rows, 2] (a view: valid
        until the next add; rows past ``len(self)`` are unused)."""
        return self._keys

    @property
    def nbytes(self) -> int:
        """Bytes held: the tables, the sketches and keys by row, the bands and ids."""
        total = sum(t.nbytes for t in self.tables) + self._n * (SKETCH_BYTES + 16)
        if self.bands is not None:
            total += self.bands.nbytes
        return total + (self._ids.nbytes if self._ids is not None else 0)

    def __repr__(self) -> str:
        return (f"VerifiedIndex(n={self._n}, distance={self.distance}, "
                f"min_similarity={self.min_similarity}, header_bits={self.header_bits}, "
                f"max_probes={self.max_probes}"
                + (f", bands={self.bands.bands})" if self.bands is not None else ")"))

    def _reserve(self, extra: int) -> None:
        need = self._n + extra
        if need > self._sketches.shape[0]:
            cap = max(need, 2 * self._sketches.shape[0], 64)
            grown = mapped.zeros((cap, SKETCH_BYTES), np.uint8, huge=True)
            grown[: self._n] = self._sketches[: self._n]
            self._sketches = grown
            if self._ids is not None:
                ids = mapped.zeros(cap, np.int64)
                ids[: self._n] = self._ids[: self._n]
                self._ids = ids
            keys = mapped.zeros((cap, 2), np.uint64, huge=True)
            keys[: self._n] = self._keys[: self._n]
            self._keys = keys
            self._share_rows()

    def _share_rows(self) -> None:
        """Hand the row arrays to the tables and bands, whole: rows past
        ``len(self)`` are zeros that no table or band holds yet, so they are
        handed on only when the arrays are replaced, not at every add."""
        rows = self._sketches.shape[0]
        for table in self.tables:
            table._set_sketches(self._sketches, rows, self.needed)
            table._set_partners(self._keys, rows)
        if self.bands is not None:
            self.bands._set_rows(self._sketches, self._keys, rows)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(values, values2, sketches, ids)`` of every stored page, in row order."""
        return (self._keys[: self._n, 0].copy(), self._keys[: self._n, 1].copy(),
                self._sketches[: self._n].copy(), self._row_ids())

    def keys_of(self, row: int) -> tuple[int, int] | None:
        """The two keys of a stored row; None if there is no such row."""
        if not 0 <= row < self._n:
            return None
        return int(self._keys[row, 0]), int(self._keys[row, 1])

    def _row_ids(self) -> np.ndarray:
        if self._ids is None:
            return np.arange(self._n, dtype=np.int64)
        return self._ids[: self._n].copy()

    # -- add --------------------------------------------------------------
    @contextlib.contextmanager
    def bulk_load(self):
        """Within it, many batches of :meth:`add` cost time linear in the pages
        added (the tables merge their buffers geometrically, not every few
        pages per header); queries stay correct but slower until it ends."""
        for table in self._growing():
            table._set_bulk(True)
        try:
            yield self
        finally:
            for table in self._growing():
                table._set_bulk(False)
            self._rebudget()        # (the last merge may have grown the headers)

    @property
    def _band_count(self) -> int:
        return 0 if self.bands is None else self.bands.bands

    def _growing(self):
        return self.tables + ((self.bands,) if self.bands is not None else ())

    def add(self, values, values2, sketches, ids=None) -> np.ndarray:
        """Store pages by their two keys and sketches; returns their int64 ids
        (``ids``, or the next rows when None)."""
        v1 = _as_values(values, "values")
        v2 = _as_values(values2, "values2")
        n = v1.shape[0]
        if v2.shape[0] != n:
            raise ValueError(f"values2 must have one entry per value ({n}), got {v2.shape[0]}")
        sk = _as_sketches(sketches, n)
        id_arr = _as_ids(ids, n, self._n)
        rows = np.arange(self._n, self._n + n, dtype=np.int64)
        self._reserve(n)
        if self._ids is None and not np.array_equal(id_arr, rows):
            self._ids = np.zeros(self._sketches.shape[0], np.int64)
            self._ids[: self._n] = np.arange(self._n, dtype=np.int64)
        if self._ids is not None:
            self._ids[self._n: self._n + n] = id_arr
        self._store(v1, v2, sk, rows)
        return id_arr

    def add_fingerprint(self, fingerprint, id=None) -> int:
        """Store a :class:`Fingerprint` (or any page with ``value``, ``value2``
        and ``sketch``); returns its id."""
        if id is not None or self._ids is not None:
            ids = None if id is None else [id]
            return int(self.add(fingerprint.value, fingerprint.value2, fingerprint.sketch, ids)[0])
        # one page, its id its row: the crawl's path, without the array conversions
        sketch = fingerprint.sketch
        if not isinstance(sketch, bytes) or len(sketch) != SKETCH_BYTES:
            raise ValueError(f"a sketch must be {SKETCH_BYTES} bytes")
        v1, v2 = _as_value(fingerprint.value), _as_value(fingerprint.value2)
        row = self._n
        self._reserve(1)
        self._sketches[row] = memoryview(sketch)
        self._keys[row] = v1, v2
        self._n += 1
        self.tables[0]._add_one(v1, row)
        self.tables[1]._add_one(v2, row)
        self._added(1)
        return row

    def _store(self, v1, v2, sketches, rows) -> None:
        """Append checked pages (room reserved): their keys and sketches by row
        first (the tables read them), then to both tables and the bands."""
        n = rows.shape[0]
        self._sketches[self._n: self._n + n] = sketches
        self._keys[self._n: self._n + n, 0] = v1
        self._keys[self._n: self._n + n, 1] = v2
        self._n += n
        rows32 = rows.astype(np.uint32)
        self.tables[0]._add_arrays(v1, rows32)
        self.tables[1]._add_arrays(v2, rows32)
        self._added(n)

    def _added(self, n: int) -> None:
        """The last ``n`` rows are in the row arrays and both tables: index
        them in the bands, and re-choose the probe budget."""
        if self.bands is not None:
            self.bands.add(n)
        self._rebudget()

    # -- query ------------------------------------------------------------
    def query(self, value: int, value2: int, sketch: bytes, W=None, W2=None,
              first: bool = True, exclude: int | None = None):
        """Verified matches of one page.

        ``first=True``: the best :class:`VerifiedMatch` or None. ``first=False``:
        every verified match, best first. ``exclude``: a stored id to leave out
        (the page's own entry)."""
        value, value2 = _as_value(value), _as_value(value2)
        if first and self._ids is None and type(sketch) is bytes and len(sketch) == SKETCH_BYTES:
            return self._best(value, value2, sketch, W, W2, exclude)
        q = _as_sketches(sketch, 1)[0]
        if first:
            exact = self._exact_copy(value, value2, q, exclude)
            if exact is not None:
                return exact
        self._probes += 2 * _probe_budget(self.header_bits, self.distance, self.max_probes)
        rows1, dist1 = self.tables[0]._query_verified(value, W, q, 0, value2)
        rows2, dist2 = self.tables[1]._query_verified(value2, W2, q, 0, value)
        rows = np.concatenate((rows1, rows2))
        dist = np.concatenate((dist1, dist2)).astype(np.int16)
        ids = rows if self._ids is None else self._ids[rows]
        if exclude is not None and rows.shape[0]:
            keep = ids != exclude
            rows, dist, ids = rows[keep], dist[keep], ids[keep]
        agree = hashing.sketch_matches(q, self._sketches, rows).astype(np.int16)
        if self.bands is not None:
            # two bins of a band's candidate are equal already: one more bin
            brows, bagree, bdist = self.bands.query(q, value, value2, self.band_pair_limit,
                                                    self.needed + 1)
            bids = brows if self._ids is None else self._ids[brows]
            if exclude is not None and brows.shape[0]:
                keep = bids != exclude
                brows, bagree, bdist, bids = brows[keep], bagree[keep], bdist[keep], bids[keep]
            if brows.shape[0]:
                rows, ids = np.concatenate((rows, brows)), np.concatenate((ids, bids))
                dist = np.concatenate((dist, bdist))
                agree = np.concatenate((agree, bagree.astype(np.int16)))
        if not rows.shape[0]:
            return None if first else []
        if first:   # the most agreeing bins, then the smaller distance, then the earlier row
            best = agree.max()
            tied = np.flatnonzero(agree == best)
            i = tied[np.lexsort((rows[tied], dist[tied]))[0]]
            return VerifiedMatch(int(ids[i]), similarity(int(agree[i])), int(dist[i]))
        order = np.lexsort((rows, dist, -agree))
        _, once = np.unique(rows[order], return_index=True)   # a page found by both keys once
        order = order[np.sort(once)]
        est = similarity(agree)
        return [VerifiedMatch(int(ids[i]), float(est[i]), int(dist[i])) for i in order]

    def _best(self, value: int, value2: int, sketch: bytes, W, W2, exclude):
        """:meth:`query`'s best match when ids are rows, in two compiled calls
        (a crawl checks its pages one at a time, each between the parses of
        others: NumPy calls would run with cold caches)."""
        row = exclude if isinstance(exclude, (int, np.integer)) and 0 <= exclude < 2**63 else -1
        best = psm.best_verified(self.tables[0], self.tables[1], value, value2, sketch, W, W2, row)
        self._probes += 2
        if best is None or best[1] != SKETCH_BYTES or best[2] != 0:     # not an exact copy
            self._probes += 2 * _probe_budget(self.header_bits, self.distance, self.max_probes)
            if self.bands is not None:
                best = self.bands.best(sketch, value, value2, self.band_pair_limit,
                                       self.needed + 1, row, best)
        if best is None:
            return None
        return VerifiedMatch(best[0], similarity(best[1]), best[2])

    def _exact_copy(self, value: int, value2: int, q: np.ndarray, exclude):
        """The best match when it is an exact copy (a key equal, every sketch
        bin equal: nothing can beat it), found in the two own buckets alone;
        else None. Crawls meet many (URL variants of one page)."""
        self._probes += 2
        best = None
        for table, v, partner in zip(self.tables, (value, value2), (value2, value)):
            found, dist = table._query_verified(v, None, q, 1, partner)
            found = found[dist == 0]
            if found.shape[0]:
                agree = hashing.sketch_matches(q, self._sketches, found)
                found = found[agree == SKETCH_BYTES]
                ids = found if self._ids is None else self._ids[found]
                if exclude is not None:
                    found = found[ids != exclude]
                if found.shape[0] and (best is None or found.min() < best):
                    best = int(found.min())
        if best is None:
            return None
        return VerifiedMatch(best if self._ids is None else int(self._ids[best]), 1.0, 0)

    def query_fingerprint(self, fingerprint, first: bool = True, exclude: int | None = None):
        """:meth:`query` with a :class:`Fingerprint`'s keys, weights and sketch."""
        return self.query(fingerprint.value, fingerprint.value2, fingerprint.sketch,
                          fingerprint.W, fingerprint.W2, first=first, exclude=exclude)

    def verify(self, page, stored, row: int):
        """:class:`VerifiedMatch` of ``page`` against the page stored as
        ``row`` (whose keys the caller gives in ``stored``: ``(value, value2)``)
        when it passes: within ``distance`` of either key, its sketch agreeing
        enough. Else None."""
        q = _as_sketches(page.sketch, 1)[0]
        if not 0 <= row < self._n:
            raise IndexError(f"row {row} is not stored")
        d1 = (int(stored[0]) ^ _as_value(page.value)).bit_count()
        d2 = (int(stored[1]) ^ _as_value(page.value2)).bit_count()
        dist = min(d1, d2)
        agree = int(hashing.sketch_matches(q, self._sketches, np.array([row], np.int64))[0])
        if dist > self.distance or d1 + d2 > self.pair_limit or agree < self.needed:
            return None
        rid = row if self._ids is None else int(self._ids[row])
        return VerifiedMatch(rid, similarity(agree), dist)

    @property
    def probes(self) -> int:
        """Buckets probed by the look-ups so far (both keys)."""
        return self._probes
