"""The compiled sketch bands against the brute-force reference, through merges."""
from __future__ import annotations

import numpy as np
import pytest

from scrapy_simdup._ext.bands import SketchBands
from tests.reference.sketch import band_matches

BINS = 32


class Rows:
    """Row-indexed keys and sketches, with room to grow (as VerifiedIndex keeps them)."""

    def __init__(self, cap):
        self.keys = np.zeros((cap, 2), np.uint64)
        self.sk = np.zeros((cap, BINS), np.uint8)
        self.n = 0

    def add(self, bands, k1, k2, sk):
        m = len(k1)
        self.keys[self.n: self.n + m, 0], self.keys[self.n: self.n + m, 1] = k1, k2
        self.sk[self.n: self.n + m] = sk
        self.n += m
        bands._set_rows(self.sk, self.keys, self.n)
        bands.add(m)

    def stored(self):
        return [(int(a), int(b), bytes(s)) for (a, b), s in
                zip(self.keys[: self.n], self.sk[: self.n])]


def near(rng, k1, k2, sk, flips, keep):
    """A page near (k1, k2, sk): ``flips`` key bits changed, ``keep`` bins kept."""
    a, b = int(k1), int(k2)
    for bit in rng.choice(64, flips, replace=False):
        a ^= 1 << int(bit)
    for bit in rng.choice(64, flips, replace=False):
        b ^= 1 << int(bit)
    s = rng.integers(0, 256, BINS, dtype=np.uint8)
    kept = rng.choice(BINS, keep, replace=False)
    s[kept] = sk[kept]
    return a, b, s


def workload(seed, n, dense_values):
    """``n`` pages: random ones and near copies of earlier ones; with
    ``dense_values`` the bins take few values, so buckets are crowded."""
    rng = np.random.default_rng(seed)
    k1 = rng.integers(0, 2**63, n, dtype=np.int64).astype(np.uint64)
    k2 = rng.integers(0, 2**63, n, dtype=np.int64).astype(np.uint64)
    sk = rng.integers(0, 4 if dense_values else 256, (n, BINS), dtype=np.uint8)
    for i in range(1, n, 3):
        j = int(rng.integers(0, i))
        a, b, s = near(rng, k1[j], k2[j], sk[j], int(rng.integers(0, 20)), int(rng.integers(2, 33)))
        k1[i], k2[i], sk[i] = a, b, s
    return k1, k2, sk


def check(bands, rows, queries, nb, pair_limit, needed, exclude=-1):
    stored = rows.stored()
    for qk1, qk2, qs in queries:
        got_rows, got_agree, got_dist = bands.query(qs, qk1, qk2, pair_limit, needed, exclude)
        got = sorted(set(zip(got_rows.tolist(), got_agree.tolist(), got_dist.tolist())))
        want = band_matches(stored, (int(qk1), int(qk2), bytes(qs)), nb, pair_limit, needed,
                            exclude)
        assert got == want
        # a row comes once per band it agrees on
        per_band = {r: sum(bytes(qs[2 * b: 2 * b + 2]) == stored[r][2][2 * b: 2 * b + 2]
                           for b in range(nb)) for r, _, _ in want}
        assert sorted(got_rows.tolist()) == sorted(r for r, c in per_band.items()
                                                   for _ in range(c))


@pytest.mark.parametrize("nb,dense", [(1, False), (8, False), (16, False), (4, True), (16, True)])
def test_band_matches_equal_the_reference_through_merges(nb, dense):
    n = 6000 if dense else 3000
    k1, k2, sk = workload(nb, n, dense)
    rng = np.random.default_rng(100 + nb)
    bands = SketchBands(nb)
    rows = Rows(n)
    # one by one, then in chunks: the buffer, merges, then the buffer again
    steps = [1] * 200 + [37] * 20 + [900, 1] + [n]
    start = 0
    for step in steps:
        if start >= n:
            break
        stop = min(n, start + step)
        rows.add(bands, k1[start:stop], k2[start:stop], sk[start:stop])
        start = stop
        if rng.random() < 0.1:
            bands._merge()      # (on its own only past 32,768 rows)
        if rng.random() < 0.2 or stop == n:
            picks = rng.integers(0, stop, 5)
            queries = [near(rng, k1[p], k2[p], sk[p], int(rng.integers(0, 24)),
                            int(rng.integers(0, 33))) for p in picks]
            queries.append((k1[picks[0]], k2[picks[0]], sk[picks[0]]))    # a stored page
            check(bands, rows, queries, nb, pair_limit=int(rng.integers(20, 129)),
                  needed=int(rng.integers(0, 12)), exclude=int(picks[0]) if stop % 2 else -1)
    assert len(bands) == n
    assert bands.n_main > 0 and bands.n_buf > 0


def test_merges_keep_row_order_within_a_value_and_every_row():
    nb = 3
    rng = np.random.default_rng(5)
    n = 300_000          # more than one buffer: merges with rows already in main
    sk = rng.integers(0, 256, (n, BINS), dtype=np.uint8)
    k = np.zeros(n, np.uint64)
    bands = SketchBands(nb)
    rows = Rows(n)
    for start in range(0, n, 50_000):
        rows.add(bands, k[start:start + 50_000], k[start:start + 50_000], sk[start:start + 50_000])
    assert bands.n_main + bands.n_buf == n and bands.n_main > 0 and bands.n_buf > 0

    def rows_of(b, value):
        q = np.zeros(BINS, np.uint8)
        q[2 * b], q[2 * b + 1] = value & 255, value >> 8
        found, _, _ = bands.query(q, 0, 0, 128, 0)
        values = sk[:, 2 * b].astype(np.int64) | (sk[:, 2 * b + 1].astype(np.int64) << 8)
        return [r for r in found.tolist() if values[r] == value], \
            np.flatnonzero(values == value).tolist()

    picks = [(b, int(v)) for b in range(nb) for v in rng.integers(0, 65536, 20)]
    for b, value in picks:
        mine, want = rows_of(b, value)
        assert sorted(mine) == want             # every row of the value, once
    bands._merge()
    assert bands.n_buf == 0
    for b, value in picks:
        mine, want = rows_of(b, value)
        assert mine == want                     # merged: in row order


def test_bulk_loading_merges_once_and_finds_the_same():
    nb = 4
    k1, k2, sk = workload(9, 4000, True)
    plain, bulk = SketchBands(nb), SketchBands(nb)
    rows_plain, rows_bulk = Rows(4000), Rows(4000)
    bulk._set_bulk(True)
    for start in range(0, 4000, 100):
        sl = slice(start, start + 100)
        rows_plain.add(plain, k1[sl], k2[sl], sk[sl])
        rows_bulk.add(bulk, k1[sl], k2[sl], sk[sl])
    bulk._set_bulk(False)
    for i in range(0, 4000, 97):
        a = plain.query(sk[i], k1[i], k2[i], 60, 4)
        b = bulk.query(sk[i], k1[i], k2[i], 60, 4)
        assert sorted(zip(*(x.tolist() for x in a))) == sorted(zip(*(x.tolist() for x in b)))


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="bands must be 1..16"):
        SketchBands(0)
    with pytest.raises(ValueError, match="bands must be 1..16"):
        SketchBands(17)
    bands = SketchBands(2)
    with pytest.raises(ValueError, match="rows to add"):
        bands.add(1)            # no row arrays given
    rows = Rows(4)
    rows.add(bands, np.zeros(2, np.uint64), np.zeros(2, np.uint64), np.zeros((2, BINS), np.uint8))
    with pytest.raises(ValueError, match="32 bytes"):
        bands.query(np.zeros(31, np.uint8), 0, 0, 128, 0)
    with pytest.raises(ValueError, match="bad row arrays"):
        bands._set_rows(np.zeros((1, BINS), np.uint8), np.zeros((1, 2), np.uint64), 2)
    with pytest.raises(ValueError, match="bad row arrays"):
        bands._set_rows(np.zeros((2, BINS), np.uint8), np.zeros((2, 3), np.uint64), 2)
