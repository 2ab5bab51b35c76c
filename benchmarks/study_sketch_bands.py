"""Study: the sketch's bins as LSH bands, a candidate source beside PSM.

    .venv/bin/python benchmarks/study_sketch_bands.py [--bands 8,12,16] [--probes 128,512]

The measurement behind ``VerifiedIndex(bands=...)``. The crawl's index finds a
candidate only when one of its probes reaches it, and loose pairs (17-24 bits
apart) sit behind flip sets that a fixed budget reaches less often as the
header grows. The candidate is then verified on its 32-bin MinHash sketch (6
equal bins). A *band* is two bins read as one 16-bit value: a true pair of
Jaccard similarity J agrees on it with probability about J^2, whatever the
size of the index, and an unrelated page one time in 65,536. ``B`` bands cost
4 bytes a page each (the page's row in the band's bucket) and a look-up reads
``B`` buckets of ``n / 65,536`` rows and their sketches.

Spotsigs-dev + distractors-dragnet in the protocol's order, every earlier
page with 6 equal bins of 32 as the verification, candidates from each
source: today's rule (either key within 22 bits and the pair rule), B bands,
and both; with the PSM budget of K probes per key at the header sizes of
10^7 and 10^8 pages (``psm.ranks_of``: the probe that reaches each pair).
Page P and R as in bench_index_default (distractor pairs left out). A band's
candidate also needs its two key distances to add up to at most ``pair_limit
+ BAND_PAIR_SLACK`` (56) and one equal bin more, as in the index, where this
keeps random pages out; the "alone" rows show what that costs. ``bench_index_default.py --bands``
measures the index itself at scale.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench_index_default import real_pages

from scrapy_simdup import VolatilityModel
from scrapy_simdup._ext import psm
from scrapy_simdup._limits import (
    BAND_PAIR_SLACK,
    DEFAULT_DISTANCE,
    DEFAULT_MIN_SIMILARITY,
    pair_limit,
)
from scrapy_simdup.fingerprint.sketch import SKETCH_BYTES, matches_needed

NEEDED = matches_needed(DEFAULT_MIN_SIMILARITY)


def exhaustive(pages, log, band_counts, budgets):
    idx = [i for i, (_, fp) in enumerate(pages) if fp is not None]
    story = [pages[i][0] for i in idx]
    fps = [pages[i][1] for i in idx]
    n = len(fps)
    v1 = np.array([f.value for f in fps], np.uint64)
    v2 = np.array([f.value2 for f in fps], np.uint64)
    sk = np.frombuffer(b"".join(f.sketch for f in fps), np.uint8).reshape(n, SKETCH_BYTES)
    W = (np.array([f.W for f in fps]), np.array([f.W2 for f in fps]))
    seen, n_true = set(), 0
    for s, _ in pages:
        if s is not None:
            n_true += s in seen
            seen.add(s)
    # every (page, earlier page) pair that the verification passes
    q, p = [], []
    for i in range(1, n):
        ok = np.flatnonzero((sk[:i] == sk[i]).sum(axis=1) >= NEEDED)
        q += [i] * len(ok)
        p += ok.tolist()
    q, p = np.array(q, np.int64), np.array(p, np.int64)
    eq = sk[q] == sk[p]
    agree = eq.sum(axis=1)
    d1 = np.bitwise_count(v1[q] ^ v1[p]).astype(np.int64)
    d2 = np.bitwise_count(v2[q] ^ v2[p]).astype(np.int64)
    dist = np.minimum(d1, d2)
    limit = pair_limit(DEFAULT_DISTANCE)
    key_ok = ((d1 <= DEFAULT_DISTANCE) & (d1 + d2 <= limit),
              (d2 <= DEFAULT_DISTANCE) & (d1 + d2 <= limit))
    band_any = np.stack([eq[:, 2 * b: 2 * b + 2].all(axis=1) for b in range(16)], axis=1)
    band_hit = band_any & ((d1 + d2 <= limit + BAND_PAIR_SLACK) & (agree > NEEDED))[:, None]

    def score(cand):
        """Page P and R when each page takes its best candidate (most equal
        bins, then the smaller key distance, then the earlier page)."""
        qs, ps = q[cand], p[cand]
        order = np.lexsort((ps, dist[cand], -agree[cand], qs))
        first = np.ones(len(order), bool)
        first[1:] = qs[order][1:] != qs[order][:-1]
        correct = flags = 0
        for k in order[first]:
            a, b = story[qs[k]], story[ps[k]]
            if a is None and b is None:     # distractor pairs are left out
                continue
            flags += 1
            correct += a is not None and a == b
        return (correct / flags if flags else 1.0), correct / n_true

    log(f"{n:,} real pages, {len(q):,} pairs with >= {NEEDED} equal bins; "
        f"{n_true:,} pages have an earlier page of their story")
    log("candidates (all verified at >= 6 equal bins)        P      R")
    rows = []
    for name, cand in [("today's rule, exhaustive", key_ok[0] | key_ok[1]),
                       ("the sketch alone (every earlier page)", np.ones(len(q), bool))] + \
            [(f"{b} bands alone, no key distance nor extra bin", band_any[:, :b].any(axis=1))
             for b in band_counts] + \
            [(f"{b} bands alone", band_hit[:, :b].any(axis=1)) for b in band_counts]:
        pr = score(cand)
        rows.append(dict(part=1, what=name, P=pr[0], R=pr[1]))
        log(f"  {name:48s} {pr[0]:.4f} {pr[1]:.4f}")
    model = VolatilityModel.default()
    for size, t in ((10**7, 16), (10**8, 19)):
        ranks = []
        for k, v in enumerate((v1, v2)):
            r = psm.ranks_of(model.compiled, np.ascontiguousarray(W[k][q]), v[q], v[p], t,
                             24, max(budgets)).astype(np.int64)
            ranks.append(np.where(r > 0, r, 1 << 40))
        log(f"at {size:.0e} pages (header {t} bits): PSM budget K probes per key, plus B bands")
        log("  K      " + "  ".join(f"B={b:<2}  P      R     " for b in (0,) + tuple(band_counts)))
        for budget in budgets:
            psm_found = ((ranks[0] <= budget) & key_ok[0]) | ((ranks[1] <= budget) & key_ok[1])
            line = []
            for b in (0,) + tuple(band_counts):
                pr = score(psm_found | band_hit[:, :b].any(axis=1))
                rows.append(dict(part=1, n=size, t=t, probes=budget, bands=b, P=pr[0], R=pr[1]))
                line.append(f"      {pr[0]:.4f} {pr[1]:.4f}")
            log(f"  {budget:<5}" + "".join(line))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bands", default="8,12,16", help="band counts, comma-separated (<= 16)")
    ap.add_argument("--probes", default="128,512", help="PSM probes per key, comma-separated")
    args = ap.parse_args(argv)
    try:
        band_counts = [int(x) for x in args.bands.split(",") if x]
        budgets = [int(float(x)) for x in args.probes.split(",") if x]
    except ValueError:
        ap.error("--bands and --probes take comma-separated numbers")
    if not budgets or any(k < 1 for k in budgets) or any(not 1 <= b <= 16 for b in band_counts):
        ap.error("--probes: at least 1 per key; --bands: 1..16")

    def log(*a):
        print(*a, flush=True)
    log(f"# run {time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime())} on {os.cpu_count()} cores")
    pages = real_pages(log)
    exhaustive(pages, log, band_counts, budgets)


if __name__ == "__main__":
    main()
