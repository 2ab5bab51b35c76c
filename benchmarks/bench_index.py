"""Online index benchmark: PSM-F / PSM-A against BPHS, faiss, PyPI simhash, NumPy.

    .venv/bin/python benchmarks/bench_index.py            # n = 1M and 10M
    .venv/bin/python benchmarks/bench_index.py --quick    # n = 100k, small

Workload (``benchmarks/_workload.py``, cached in ``benchmarks/.cache/``): the
stored fingerprints are simhashes of synthetic pages (Zipf vocabulary, site
boilerplate) plus the originals of the near-duplicate pairs; the queries are
the edited variants (half of them, Hamming distance 1..h from their original,
real simhash computations, 20% seeded from the report half of the real pages)
and fresh pages with no near-duplicate (the other half). Ground truth is
BPHS (exact), checked against faiss and a NumPy scan.

Everything runs on one core (faiss with one OpenMP thread). Slow peers (the
PyPI ``simhash`` package, NumPy brute force) are timed on a subsample and
labelled so.
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from _workload import background, query_set

from scrapy_simdup import BPHSIndex, PSMIndex

PROBES = [1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 96, 128, 192, 256,
          384, 512, 1024, None]


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def faiss_memory(stored, h) -> float:
    """Bytes per fingerprint of a faiss IndexBinaryMultiHash, measured as the
    RSS growth of a fresh process building it (the hash maps are C++ heap)."""
    import subprocess
    import tempfile
    with tempfile.NamedTemporaryFile(suffix=".npy", dir=HERE / ".cache") as f:
        np.save(f, stored)
        f.flush()
        code = (
            "import sys, numpy as np, faiss\n"
            "def rss():\n"
            "    return int(open('/proc/self/statm').read().split()[1]) * 4096\n"
            f"v = np.load({f.name!r})\n"
            "r0 = rss()\n"
            f"x = faiss.IndexBinaryMultiHash(64, {h + 1}, {64 // (h + 1)})\n"
            "x.add(v.view(np.uint8).reshape(-1, 8))\n"
            "print((rss() - r0) / len(v))\n")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                             text=True, check=True)
    return float(out.stdout.strip())


def best_time(fn, repeat=3):
    """Best CPU time of this process (the machine's 2 cores are shared with
    other jobs: wall time would measure them too)."""
    best = float("inf")
    out = None
    for _ in range(repeat):
        t = time.process_time()
        out = fn()
        best = min(best, time.process_time() - t)
    return best, out


def pairs_of(q, ids):
    return set(zip(q.tolist(), ids.tolist()))


def run(n, Q, h, sub, log):
    qs = query_set(Q, h, seed=2, log=log)
    dup = qs["stored_dup"]
    stored = np.concatenate([background(n - len(dup), seed=1, log=log), dup])
    base_ids = np.arange(n - len(dup), n)              # id of each pair's original
    qv, qW, has_dup = qs["q_value"], qs["q_W"], qs["has_dup"]
    log(f"\n=== n = {n:,} stored fingerprints, {len(qv):,} queries "
        f"({has_dup.sum():,} with a planted near-duplicate at distance 1..{h}, "
        f"{qs['real'].sum():,} of them seeded from real pages), h = {h} ===")
    hist = np.bincount(qs["distance"][has_dup], minlength=h + 1)[1:]
    log("planted pairs by distance: " + ", ".join(
        f"d={d + 1}: {c:,}" for d, c in enumerate(hist)))

    rows = []  # (name, qps, recall, bytes/fp, note)

    # ------------------------------------------------------------ build
    r0 = rss()
    t = time.perf_counter()
    psm = PSMIndex(distance=h)
    psm.add(stored)
    t_psm = time.perf_counter() - t
    psm_rss = rss() - r0
    log(f"PSM build {t_psm:.1f}s, header_bits t = {psm.header_bits}, "
        f"{psm.nbytes / n:.2f} bytes/fp (arrays), RSS +{psm_rss / n:.1f} B/fp")
    bphs = {}
    for T in (4, 10):
        r0 = rss()
        t = time.perf_counter()
        b = BPHSIndex(distance=h, tables=T)
        b.add(stored)
        bphs[T] = b
        log(f"BPHS T={T} build {time.perf_counter() - t:.1f}s, "
            f"{b.nbytes / n:.1f} bytes/fp (arrays), RSS +{(rss() - r0) / n:.1f} B/fp")

    # ------------------------------------------------------------ truth
    tq, tid, td = bphs[4].query_many(qv, first=False)
    truth = pairs_of(tq, tid)
    q10, id10, _ = bphs[10].query_many(qv, first=False)
    assert pairs_of(q10, id10) == truth, "BPHS T=4 and T=10 disagree"
    truth_q = np.zeros(len(qv), bool)
    truth_q[tq] = True
    planted_found = np.isin(base_ids[qs["base_index"][has_dup]], tid)
    log(f"truth (BPHS): {len(truth):,} matching pairs, {truth_q.sum():,} queries with "
        f"a match ({truth_q[~has_dup].sum():,} among the fresh pages); planted pairs "
        f"found: {planted_found.mean():.4f}")
    # NumPy scan on a subsample of queries: exact, must equal BPHS
    check = np.linspace(0, len(qv) - 1, 20).astype(int)
    t = time.process_time()
    for k in check:
        got = set(np.nonzero(np.bitwise_count(stored ^ qv[k]) <= h)[0].tolist())
        want = {i for (qq, i) in truth if qq == k}
        assert got == want, f"NumPy scan and BPHS disagree on query {k}"
    t_np = (time.process_time() - t) / len(check)

    # ------------------------------------------------------------ recall curve
    log("\nRecall vs probes (buckets probed per query, own header included), "
        "against BPHS:")
    log(f"{'probes':>7} {'PSM-F':>8} {'PSM-A':>8} {'PSM-F, no W':>12} {'PSM-F q/s':>11}")
    curve = []
    n_truth_q = truth_q.sum()
    for k in PROBES:
        psm.max_probes = k
        tF, (fid, _) = best_time(lambda: psm.query_many(qv, qW, first=True), repeat=2)
        rF = (fid[truth_q] >= 0).sum() / n_truth_q
        assert np.all(fid[~truth_q] == -1), "PSM returned a non-match"
        aq, aid, _ = psm.query_many(qv, qW, first=False)
        got = pairs_of(aq, aid)
        assert got <= truth, "PSM-A returned a non-match"
        rA = len(got) / len(truth)
        nid, _ = psm.query_many(qv, None, first=True)
        rN = (nid[truth_q] >= 0).sum() / n_truth_q
        curve.append((k, rF, rA, rN))
        log(f"{'all' if k is None else k:>7} {rF:8.4f} {rA:8.4f} {rN:12.4f} "
            f"{len(qv) / tF:11,.0f}")
        if k is not None and rA >= 0.999 and rF >= 0.999:
            break
    kF = next(k for k, rF, _, _ in curve if rF >= 0.95)
    kA = next(k for k, _, rA, _ in curve if rA >= 0.95)
    k_model = psm.model.probes_for_recall(0.95, psm.header_bits, h)
    psm.max_probes = k_model
    aq, aid, _ = psm.query_many(qv, qW, first=False)
    fid, _ = psm.query_many(qv, qW, first=True)
    log(f"95% recall needs {kF} probes (PSM-F), {kA} probes (PSM-A); the calibrated "
        f"model picks {k_model} for recall=0.95 at t={psm.header_bits}: measured "
        f"PSM-F {(fid[truth_q] >= 0).mean():.4f}, "
        f"PSM-A {len(pairs_of(aq, aid)) / len(truth):.4f}")

    # ------------------------------------------------------------ speed
    log("\nThroughput (one core; CPU time of this process, best of 3):")
    psm.max_probes = kF
    tF, _ = best_time(lambda: psm.query_many(qv, qW, first=True))
    psm.max_probes = kA
    tA, _ = best_time(lambda: psm.query_many(qv, qW, first=False))
    psm_bytes = psm.nbytes / n
    rows.append(("PSM-F @95% recall", len(qv) / tF, 0.95, psm_bytes, f"{kF} probes, batch"))
    rows.append(("PSM-A @95% recall", len(qv) / tA, 0.95, psm_bytes, f"{kA} probes, batch"))
    # single queries from Python
    psm.max_probes = kF
    m1 = min(len(qv), 50000)
    ql = [int(v) for v in qv[:m1]]
    Wl = [qW[i] for i in range(m1)]
    query = psm.query

    def singles():
        for v, w in zip(ql, Wl):
            query(v, w)
    t1, _ = best_time(singles)
    rows.append(("PSM-F single query()", m1 / t1, 0.95, psm_bytes,
                 f"{t1 / m1 * 1e6:.2f} us/query from Python"))
    for T, b in bphs.items():
        tb, _ = best_time(lambda b=b: b.query_many(qv, first=True))
        rows.append((f"BPHS-F T={T}", len(qv) / tb, 1.0, b.nbytes / n,
                     "exact, batch, bucket offsets"))
        tb, _ = best_time(lambda b=b: b.query_many(qv, first=False))
        rows.append((f"BPHS-A T={T}", len(qv) / tb, 1.0, b.nbytes / n,
                     "exact, batch, bucket offsets"))
        b.binary = True  # the paper's BPHS: binary search in each table
        nb = min(len(qv), 50000)
        tb, _ = best_time(lambda b=b, nb=nb: b.query_many(qv[:nb], first=True), repeat=2)
        rows.append((f"BPHS-F T={T} binary", nb / tb, 1.0, b.nbytes / n,
                     "exact, binary search (paper)"))
        b.binary = False
    del bphs
    gc.collect()

    try:
        import faiss
        faiss.omp_set_num_threads(1)
        t = time.perf_counter()
        fx = faiss.IndexBinaryMultiHash(64, h + 1, 64 // (h + 1))
        fx.nflip = 0  # h + 1 substrings: one matches exactly (pigeonhole), exact
        fx.add(stored.view(np.uint8).reshape(-1, 8))
        t_build = time.perf_counter() - t
        f_bytes = faiss_memory(stored, h)
        log(f"faiss IndexBinaryMultiHash({h + 1} x {64 // (h + 1)} bits) build "
            f"{t_build:.1f}s, {f_bytes:.1f} B/fp (RSS growth in a fresh process)")
        mf = min(len(qv), 50000)
        xq = qv[:mf].view(np.uint8).reshape(-1, 8)
        tf, (lims, _dist, ids) = best_time(lambda: fx.range_search(xq, h + 1), repeat=2)
        fq = np.repeat(np.arange(mf), np.diff(lims.astype(np.int64)))
        want = {(a, b_) for a, b_ in truth if a < mf}
        assert pairs_of(fq, ids) == want, "faiss disagrees with BPHS"
        rows.append(("faiss MultiHash range", mf / tf, 1.0, f_bytes,
                     f"exact, {mf:,} queries"))
        fx = None  # free it before the next peer is built
        gc.collect()
    except ImportError:
        log("faiss-cpu not installed: skipped")

    try:
        import logging

        from simhash import Simhash, SimhashIndex
        logging.getLogger("simhash").setLevel(logging.ERROR)
        ns = min(n, sub)
        # subsample that keeps the planted originals of the first queries
        idx_s = np.concatenate([np.arange(ns - 2000), base_ids[:2000]])
        r0 = rss()
        t = time.perf_counter()
        si = SimhashIndex([(str(i), Simhash(int(stored[i]))) for i in idx_s], f=64, k=h)
        s_bytes = (rss() - r0) / len(idx_s)
        log(f"PyPI simhash SimhashIndex build on a {len(idx_s):,} subsample "
            f"{time.perf_counter() - t:.1f}s")
        ms = 1000
        qsel = np.concatenate([np.nonzero(has_dup)[0][:ms // 2],
                               np.nonzero(~has_dup)[0][:ms // 2]])
        objs = [Simhash(int(qv[k])) for k in qsel]
        ts, _ = best_time(lambda: [si.get_near_dups(o) for o in objs], repeat=1)
        rows.append(("PyPI simhash SimhashIndex", len(qsel) / ts, 1.0, s_bytes,
                     f"SUBSAMPLE n={len(idx_s):,} (slower at n)"))
        si = None
        gc.collect()
    except ImportError:
        log("PyPI simhash not installed: skipped")

    rows.append(("NumPy brute-force scan", 1.0 / t_np, 1.0, 16.0,
                 f"exact, {len(check)} queries"))

    # ------------------------------------------------------------ table
    log(f"\n{'method':<28} {'queries/s':>12} {'recall':>7} {'bytes/fp':>9}  note")
    for name, qps, rec, b, note in rows:
        log(f"{name:<28} {qps:12,.0f} {rec:7.2f} {b:9.1f}  {note}")
    by = {r[0]: r for r in rows}
    f = by["PSM-F @95% recall"][1]
    log("\nRatios (PSM-F at 95% recall):")
    log(f"  vs BPHS-F T=4:  {f / by['BPHS-F T=4'][1]:6.2f}x faster (target >= 5x)")
    log(f"  vs BPHS-F T=10: {f / by['BPHS-F T=10'][1]:6.2f}x faster")
    log(f"  vs BPHS-F T=4 with the paper's binary search: "
        f"{f / by['BPHS-F T=4 binary'][1]:6.2f}x faster; T=10: "
        f"{f / by['BPHS-F T=10 binary'][1]:6.2f}x")
    if "faiss MultiHash range" in by:
        log(f"  vs faiss IndexBinaryMultiHash: {f / by['faiss MultiHash range'][1]:6.2f}x "
            f"faster (target >= 3x; faiss returns all matches: PSM-A vs faiss "
            f"{by['PSM-A @95% recall'][1] / by['faiss MultiHash range'][1]:.2f}x)")
    if "PyPI simhash SimhashIndex" in by:
        log(f"  vs PyPI simhash (its subsample): "
            f"{f / by['PyPI simhash SimhashIndex'][1]:,.0f}x faster")
    log(f"  vs NumPy scan: {f / by['NumPy brute-force scan'][1]:,.0f}x faster")
    log(f"  PSM-A vs BPHS-A T=4: {by['PSM-A @95% recall'][1] / by['BPHS-A T=4'][1]:.2f}x")
    log(f"  memory: PSM {psm_bytes:.2f} B/fp = {psm_bytes / 16:.3f}x raw (8 B value + "
        f"8 B id; target <= 1.25x); BPHS T=4 {by['BPHS-F T=4'][3] / psm_bytes:.1f}x PSM, "
        f"T=10 {by['BPHS-F T=10'][3] / psm_bytes:.1f}x PSM")
    log(f"  batch PSM-F: {f:,.0f} queries/s per core (target > 1,000,000 at n = 10M); "
        f"single query(): {by['PSM-F single query()'][4]} (target < 5 us)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="n = 100k, 20k queries")
    ap.add_argument("--sizes", default=None, help="comma-separated n (default 1M,10M)")
    ap.add_argument("--queries", type=int, default=None)
    ap.add_argument("--distance", type=int, default=3)
    ap.add_argument("--subsample", type=int, default=100_000,
                    help="stored fingerprints for the PyPI simhash peer")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in (args.sizes or ("100000" if args.quick else
                                             "1000000,10000000")).split(",")]
    Q = args.queries or (20_000 if args.quick else 200_000)
    print("command: .venv/bin/python benchmarks/bench_index.py " + " ".join(
        sys.argv[1:] if argv is None else argv))
    print(f"numpy {np.__version__}, {os.cpu_count()} cores (shared), one core used")

    def log(*a):
        print(*a, flush=True)
    for n in sizes:
        run(n, Q, args.distance, args.subsample, log)


if __name__ == "__main__":
    main()
