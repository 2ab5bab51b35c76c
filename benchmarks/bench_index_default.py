"""PSM against exact BPHS at the crawl's default distance (SIMDUP_DISTANCE = 9).

    .venv/bin/python benchmarks/bench_index_default.py [--n 1000000] [--distance 9]

``bench_index.py`` measures the PSM paper's setting, h = 3. The plugin's
default is h = 9 (see docs/usage.rst, "Choosing SIMDUP_DISTANCE"), where block-
permuted search needs G >= 10 blocks: its leading block is 6 or 7 bits, so each
of its tables scans a large range per query. Same workload as bench_index
(real-simhash near-duplicates at distance 1..h planted among background
fingerprints; half of the queries have one), one core, CPU time, best of 3.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench_index import background, best_time, pairs_of, query_set

from scrapy_simdup import BPHSIndex, PSMIndex
from scrapy_simdup._limits import DEFAULT_DISTANCE, DEFAULT_RECALL


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=20_000)
    ap.add_argument("--distance", type=int, default=DEFAULT_DISTANCE)
    args = ap.parse_args(argv)
    n, h = args.n, args.distance

    def log(*a):
        print(*a, flush=True)
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
