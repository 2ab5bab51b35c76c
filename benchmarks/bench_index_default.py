"""The crawl's default index at a million pages, and the plain 64-bit key at h = 9.

    .venv/bin/python benchmarks/bench_index_default.py [--n 1000000] [--distance 9]

Part 1, the crawl's index (``VerifiedIndex()`` defaults: two keys, radius 22,
2,048 probes per key, sketch verification) against the previous default (one
64-bit key, ``PSMIndex(distance=9, recall=0.99)``), filled with ``n - 2,498``
unrelated background pages (random keys and sketches, which is what unrelated
pages look like to both: their key distances follow Binomial(64, 1/2)) and then
the real labelled pages (spotsigs-dev stories among distractors-dragnet pages,
the online protocol of spotsigs-dev/README.md: shuffled by random.Random(7),
every page queried, then added). Prints page precision and recall (a flag is
correct when its best match is of the page's story; distractor pairs left
out), flags caused by background pages, and the time per look-up (one page at
a time, as the crawl does; wall time, median of the protocol's look-ups).

Part 2 measures PSM against exact BPHS for the plain 64-bit key at h = 9
(``--distance``), where block-permuted search needs G >= 10 blocks: its
leading block is 6 or 7 bits, so each of its tables scans a large range per
query. Same workload as bench_index (real-simhash near-duplicates at distance
1..h planted among background fingerprints; half of the queries have one),
one core, CPU time, best of 3.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import gzip
import random
import time
from pathlib import Path

from bench_index import background, best_time, pairs_of, query_set

from scrapy_simdup import BPHSIndex, Fingerprinter, PSMIndex, SkippedPage, VerifiedIndex
from scrapy_simdup._limits import DEFAULT_RECALL
from scrapy_simdup.fingerprint.sketch import SKETCH_BYTES

PLAIN_DISTANCE = 9      # the previous default: one 64-bit key, no verification
DATA = Path(os.environ.get("SIMDUP_DATA",
                           Path(__file__).resolve().parents[2] / "shared" / "data"))


def real_pages(log):
    """[(story or None, Fingerprint)] of spotsigs-dev and distractors-dragnet in
    the protocol's order."""
    listed = [(f.name, p) for f in sorted((DATA / "spotsigs-dev").iterdir()) if f.is_dir()
              for p in sorted(f.iterdir()) if p.suffix == ".gz"]
    listed += [(None, p) for p in sorted((DATA / "distractors-dragnet").iterdir())
               if p.suffix == ".gz"]
    random.Random(7).shuffle(listed)
    fp = Fingerprinter()
    pages = []
    t = time.perf_counter()
    for story, path in listed:
        try:
            pages.append((story, fp.fingerprint_html(gzip.open(path).read())))
        except SkippedPage:
            pages.append((story, None))
    log(f"  fingerprinted {len(pages):,} real pages in {time.perf_counter() - t:.1f}s")
    return pages


def crawl_protocol(pages, lookup, add):
    """Query, then add every page; returns (correct, wrong, from background,
    n_true, look-up seconds)."""
    story_of = {}
    seen = set()
    correct = wrong = background = n_true = 0
    times = []
    for story, fp in pages:
        has_earlier = story is not None and story in seen
        if story is not None:
            seen.add(story)
            n_true += has_earlier
        if fp is None:
            continue
        t = time.perf_counter()
        match = lookup(fp)
        times.append(time.perf_counter() - t)
        story_of[add(fp)] = story
        if match is None:
            continue
        if match not in story_of:
            background += 1
        elif story is not None and story_of[match] == story:
            correct += 1
        elif story is not None or story_of[match] is not None:
            wrong += 1
    return correct, wrong, background, n_true, float(np.median(times))


def crawl_index_at_scale(n, log):
    log(f"== the crawl's index with {n:,} pages stored (real pages after {n - 2_498:,} "
        f"background pages)")
    pages = real_pages(log)
    rng = np.random.default_rng(11)
    m = n - len(pages)
    bg1 = rng.integers(0, 2**63, m, dtype=np.int64).astype(np.uint64) * np.uint64(2)
    bg2 = rng.integers(0, 2**63, m, dtype=np.int64).astype(np.uint64) * np.uint64(2)
    bgs = rng.integers(0, 256, (m, SKETCH_BYTES)).astype(np.uint8)
    rows = []
    verified = VerifiedIndex()
    verified.add(bg1, bg2, bgs)          # rows 0..m-1: background

    def v_lookup(fp):
        found = verified.query_fingerprint(fp)
        return None if found is None else found.id
    rows.append(("VerifiedIndex() (the default now)", verified,
                 crawl_protocol(pages, v_lookup, verified.add_fingerprint)))
    plain = PSMIndex(distance=PLAIN_DISTANCE, recall=DEFAULT_RECALL)
    plain.add(bg1)

    def p_lookup(fp):
        found = plain.query(fp.value, fp.W)
        return None if not found else int(min(found, key=lambda hit: hit[1])[0])
    rows.append((f"PSMIndex(distance={PLAIN_DISTANCE}, recall={DEFAULT_RECALL}) (before)", plain,
                 crawl_protocol(pages, p_lookup, lambda fp: int(plain.add(fp.value)[0]))))
    w = max(len(r[0]) for r in rows)
    log(f"{'index':<{w}}  {'P':>5} {'R':>5} {'F1':>5}  {'bg flags':>8}  {'ms/look-up':>10}  "
        f"{'B/page':>6}  t")
    for label, index, (correct, wrong, bg, n_true, sec) in rows:
        flags = correct + wrong + bg
        p = correct / flags if flags else 1.0
        r = correct / n_true
        log(f"{label:<{w}}  {p:5.3f} {r:5.3f} {2 * p * r / (p + r):5.3f}  {bg:8d}  "
            f"{sec * 1e3:10.3f}  {index.nbytes / len(index):6.1f}  {index.header_bits}")
    added = rows[0][2][4] - rows[1][2][4]
    log(f"added look-up time per page: {added * 1e3:+.3f} ms (median, one page at a time)\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=20_000)
    ap.add_argument("--distance", type=int, default=PLAIN_DISTANCE)
    args = ap.parse_args(argv)
    n, h = args.n, args.distance

    def log(*a):
        print(*a, flush=True)
    crawl_index_at_scale(n, log)
    log(f"== the plain 64-bit key at h = {h}: PSM against exact BPHS")
    qs = query_set(args.queries, h, seed=2, log=log)
    dup = qs["stored_dup"]
    stored = np.concatenate([background(n - len(dup), seed=1, log=log), dup])
    qv, qW = qs["q_value"], qs["q_W"]
    log(f"n = {n:,} stored, {len(qv):,} queries ({qs['has_dup'].sum():,} with a planted "
        f"near-duplicate at distance 1..{h}), h = {h}")

    exact = BPHSIndex(distance=h)          # G = h + 1 blocks, T = h + 1 tables
    exact.add(stored)
    tq, tid, _ = exact.query_many(qv, first=False)
    truth = pairs_of(tq, tid)
    truth_q = np.zeros(len(qv), bool)
    truth_q[tq] = True
    tb, _ = best_time(lambda: exact.query_many(qv, first=True))
    log(f"BPHS-F T={exact.tables} (exact)   {len(qv) / tb:12,.0f} queries/s  "
        f"{exact.nbytes / n:6.1f} B/fp")

    psm = PSMIndex(distance=h, recall=DEFAULT_RECALL)   # what the crawl's index uses
    psm.add(stored)
    rows = []
    for label, target in ((f"recall {DEFAULT_RECALL}", DEFAULT_RECALL), ("recall 0.95", 0.95)):
        psm.max_probes = psm.model.probes_for_recall(target, psm.header_bits, h)
        tp, (fid, _) = best_time(lambda: psm.query_many(qv, qW, first=True))
        assert np.all(fid[~truth_q] == -1), "PSM returned a non-match"
        aq, aid, _ = psm.query_many(qv, qW, first=False)
        assert pairs_of(aq, aid) <= truth, "PSM-A returned a non-match"
        recall = (fid[truth_q] >= 0).mean()
        rows.append((label, len(qv) / tp, recall, psm.max_probes))
        log(f"PSM-F {label:<15} {len(qv) / tp:12,.0f} queries/s  {psm.nbytes / n:6.1f} B/fp  "
            f"recall {recall:.4f} at {psm.max_probes} probes (t = {psm.header_bits})")
    log("\nratios (PSM-F vs exact BPHS, same run):")
    for label, qps, recall, _probes in rows:
        log(f"  {label:<15} {qps / (len(qv) / tb):6.1f}x faster, recall {recall:.4f}, "
            f"{exact.nbytes / psm.nbytes:.1f}x less memory")


if __name__ == "__main__":
    main()
