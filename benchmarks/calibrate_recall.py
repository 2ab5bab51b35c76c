"""Calibrate the verified index's recall by probe budget, at radii 12-24.

    .venv/bin/python benchmarks/calibrate_recall.py [--out PATH] [--check]

Adds the ``verified_recall`` table to ``scrapy_simdup/data/volatility_default.json``:
for each search radius ``d`` and header size ``t``, the share of near-duplicate
pages the look-up finds with ``K`` probes per key (``VERIFIED_PROBE_LEVELS``),
out of those an exhaustive search finds. This is the recall the index states
(``VerifiedIndex.expected_recall``) and the budget ``recall=`` /
``SIMDUP_RECALL`` asks for.

Data: the real near-duplicate pages of spotsigs-dev (``../shared/data``), in
the protocol's order (spotsigs-dev/README.md): a page is *findable* when an
earlier page of its story passes the rule exhaustively (either key within
``d``, the two distances adding up to at most ``d + 26``, the default sketch
agreement); it is *found* with ``K`` probes when, for one of its six nearest
such pages (by key distance), the VOSH order of its own weights reaches that
page's header on a key within ``d`` in at most ``K`` probes
(``psm.ranks_of``). Loose pairs are what the budget is for, so the table is
calibrated on real ones, not on synthetic edits.

With sketch bands (``bands``, at ``BAND_LEVELS``), the ``banded_recall``
table: a page is also findable, and found whatever the probes, when an
earlier page of its story agrees with it on one of the bands and passes the
sketch test with one equal bin more, its two key distances adding up to at
most ``d + 26 + BAND_PAIR_SLACK``.

``--check``: fit on half of the stories and compare with the other half (and
the other way round): how far the stated recall is from what the same budget
finds on stories it was not fitted on.
"""
from __future__ import annotations

import argparse
import gzip
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from scrapy_simdup import Fingerprinter, SkippedPage, VolatilityModel
from scrapy_simdup._ext import psm
from scrapy_simdup._limits import BAND_PAIR_SLACK, DEFAULT_MIN_SIMILARITY, pair_limit
from scrapy_simdup.fingerprint.sketch import matches_needed
from scrapy_simdup.index.volatility import _DEFAULT_PATH, BAND_LEVELS, VERIFIED_PROBE_LEVELS

DATA = Path(os.environ.get("SIMDUP_DATA", HERE.parents[1] / "shared" / "data"))
DISTANCES = range(12, 25)
HEADER_BITS = range(8, 31)
NEAREST = 6


def pages():
    listed = [(f.name, p) for f in sorted((DATA / "spotsigs-dev").iterdir()) if f.is_dir()
              for p in sorted(f.iterdir()) if p.suffix == ".gz"]
    random.Random(7).shuffle(listed)
    fp = Fingerprinter()
    out = []
    for story, path in listed:
        try:
            out.append((story, fp.fingerprint_html(gzip.open(path).read())))
        except SkippedPage:
            pass
    return out


def popcount(a):
    return np.bitwise_count(a).astype(np.int64)


def candidate_pairs(fps, stories, distance, needed):
    """(query, earlier page) pairs: for each page, its NEAREST earlier pages of
    the same story that pass the rule exhaustively."""
    v1 = np.array([f.value for f in fps], np.uint64)
    v2 = np.array([f.value2 for f in fps], np.uint64)
    sk = np.frombuffer(b"".join(f.sketch for f in fps), np.uint8).reshape(len(fps), -1)
    q, p = [], []
    for i in range(len(fps)):
        same = np.array([j for j in range(i) if stories[j] == stories[i]], np.int64)
        if not len(same):
            continue
        d1, d2 = popcount(v1[same] ^ v1[i]), popcount(v2[same] ^ v2[i])
        agree = (sk[same] == sk[i]).sum(axis=1)
        ok = (np.minimum(d1, d2) <= distance) & (d1 + d2 <= pair_limit(distance)) \
            & (agree >= needed)
        near = same[ok][np.argsort(np.minimum(d1, d2)[ok], kind="stable")][:NEAREST]
        q += [i] * len(near)
        p += near.tolist()
    return np.array(q, np.int64), np.array(p, np.int64), v1, v2


def banded_pages(fps, stories, distance, needed, bands):
    """Pages that an earlier page of their story reaches through one of the
    first ``bands`` sketch bands (bool per page)."""
    v1 = np.array([f.value for f in fps], np.uint64)
    v2 = np.array([f.value2 for f in fps], np.uint64)
    sk = np.frombuffer(b"".join(f.sketch for f in fps), np.uint8).reshape(len(fps), -1)
    out = np.zeros(len(fps), bool)
    limit = pair_limit(distance) + BAND_PAIR_SLACK
    for i in range(len(fps)):
        same = np.array([j for j in range(i) if stories[j] == stories[i]], np.int64)
        if not len(same):
            continue
        eq = sk[same] == sk[i]
        band = eq[:, : 2 * bands].reshape(len(same), bands, 2).all(axis=2).any(axis=1)
        near = popcount(v1[same] ^ v1[i]) + popcount(v2[same] ^ v2[i]) <= limit
        out[i] = (band & near & (eq.sum(axis=1) >= needed + 1)).any()   # (one bin more)
    return out


def ranks(model, fps, q, p, v1, v2, t, cap):
    """Probes per pair to reach the earlier page on each key (huge: not reached)."""
    W1 = np.ascontiguousarray([fps[i].W for i in q], dtype=np.float64).reshape(-1, 64)
    W2 = np.ascontiguousarray([fps[i].W2 for i in q], dtype=np.float64).reshape(-1, 64)
    r1 = psm.ranks_of(model.compiled, W1, v1[q], v1[p], t, 24, cap)
    r2 = psm.ranks_of(model.compiled, W2, v2[q], v2[p], t, 24, cap)
    return r1, r2


def table(q, p, v1, v2, rk, distance, select, banded=None):
    """recall[t] per level of the pages ``select`` (a story mask over pages);
    ``banded``: pages the bands find (bool per page), whatever the probes."""
    d1, d2 = popcount(v1[q] ^ v1[p]), popcount(v2[q] ^ v2[p])
    by_bands = np.zeros(0, np.int64) if banded is None else np.flatnonzero(banded & select)
    findable = np.union1d(q[select[q]], by_bands)
    out = {}
    for t, (r1, r2) in rk.items():
        a = np.where((r1 > 0) & (d1 <= distance), r1, 1 << 62)
        b = np.where((r2 > 0) & (d2 <= distance), r2, 1 << 62)
        best = np.minimum(a, b)
        row = []
        for k in VERIFIED_PROBE_LEVELS:
            found = np.union1d(q[(best <= k) & select[q]], by_bands)
            row.append(round(len(found) / max(1, len(findable)), 4))
        out[t] = row
    return out, len(findable)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=_DEFAULT_PATH)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    t0 = time.time()
    labelled = pages()
    stories = [s for s, _ in labelled]
    fps = [f for _, f in labelled]
    model = VolatilityModel.default()
    needed = matches_needed(DEFAULT_MIN_SIMILARITY)
    cap = VERIFIED_PROBE_LEVELS[-1]
    print(f"{len(fps)} spotsigs-dev pages, {len(set(stories))} stories, fingerprinted in "
          f"{time.time() - t0:.0f}s; sketch agreement >= {needed} bins")
    q, p, v1, v2 = candidate_pairs(fps, stories, max(DISTANCES), needed)
    rk = {t: ranks(model, fps, q, p, v1, v2, t, cap) for t in HEADER_BITS}
    print(f"{len(q)} pairs ranked at t = {HEADER_BITS.start}..{HEADER_BITS.stop - 1} "
          f"in {time.time() - t0:.0f}s")
    everyone = np.ones(len(fps), bool)
    full, banded_full = {}, {}
    for d in DISTANCES:
        # the pairs of radius d: a subset of the widest radius's
        dq, dp, _, _ = candidate_pairs(fps, stories, d, needed) if d != max(DISTANCES) \
            else (q, p, v1, v2)
        keep = np.isin(q * len(fps) + p, dq * len(fps) + dp)
        sub = {t: (r1[keep], r2[keep]) for t, (r1, r2) in rk.items()}
        full[d], n = table(q[keep], p[keep], v1, v2, sub, d, everyone)
        banded_full[d] = {}
        for b in BAND_LEVELS:
            banded = banded_pages(fps, stories, d, needed, b)
            banded_full[d][b], nb = table(q[keep], p[keep], v1, v2, sub, d, everyone, banded)
            print(f"  {b} bands: {nb} findable pages, recall at K = 128 / 512 for t = 16, 20, "
                  f"24: " + ", ".join(
                      f"{banded_full[d][b][t][VERIFIED_PROBE_LEVELS.index(128)]:.3f} / "
                      f"{banded_full[d][b][t][VERIFIED_PROBE_LEVELS.index(512)]:.3f}"
                      for t in (16, 20, 24)))
        print(f"d = {d}: {n} findable pages; recall at K = 512 / 2048 for t = 12, 16, 20, 24: "
              + ", ".join(f"{full[d][t][VERIFIED_PROBE_LEVELS.index(512)]:.3f} / "
                          f"{full[d][t][VERIFIED_PROBE_LEVELS.index(2048)]:.3f}"
                          for t in (12, 16, 20, 24)))
    if args.check:
        names = sorted(set(stories))
        rng = np.random.default_rng(0)
        half = set(rng.permutation(names)[: len(names) // 2].tolist())
        in_a = np.array([s in half for s in stories])
        d = 22
        keep = np.ones(len(q), bool)
        print(f"\n--check at d = {d}: stated (fitted on one half of the stories) against "
              "found (the other half)")
        worst = 0.0
        for fit, test in ((in_a, ~in_a), (~in_a, in_a)):
            a, _ = table(q[keep], p[keep], v1, v2, rk, d, fit)
            b, n = table(q[keep], p[keep], v1, v2, rk, d, test)
            for t in (13, 16, 17, 19, 21, 23):
                diffs = [abs(x - y) for x, y in zip(a[t], b[t])]
                worst = max(worst, max(diffs))
                print(f"  t {t}: " + " ".join(f"K={k}: {x:.3f}/{y:.3f}"
                                              for k, x, y in zip(VERIFIED_PROBE_LEVELS, a[t], b[t])
                                              if k in (256, 1024, 2048, 8192)))
        banded = banded_pages(fps, stories, d, needed, 12)
        print("with 12 bands:")
        for fit, test in ((in_a, ~in_a), (~in_a, in_a)):
            a, _ = table(q[keep], p[keep], v1, v2, rk, d, fit, banded)
            b, n = table(q[keep], p[keep], v1, v2, rk, d, test, banded)
            for t in (16, 19, 23):
                diffs = [abs(x - y) for x, y in zip(a[t], b[t])]
                worst = max(worst, max(diffs))
                print(f"  t {t}: " + " ".join(f"K={k}: {x:.3f}/{y:.3f}"
                                              for k, x, y in zip(VERIFIED_PROBE_LEVELS, a[t], b[t])
                                              if k in (128, 512, 2048)))
        print(f"largest difference between halves: {worst:.3f}")
    model.verified_recall = {d: {t: row for t, row in tab.items()} for d, tab in full.items()}
    model.banded_recall = banded_full
    model.meta["verified_recall"] = (
        f"benchmarks/calibrate_recall.py: spotsigs-dev pages found by K probes per key out of "
        f"those an exhaustive search finds, min_similarity {DEFAULT_MIN_SIMILARITY}")
    model.meta["banded_recall"] = (
        "benchmarks/calibrate_recall.py: the same with sketch bands at each band level, out "
        "of those an exhaustive search with the bands finds")
    model.save(args.out)
    print(f"wrote {args.out} in {time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()
