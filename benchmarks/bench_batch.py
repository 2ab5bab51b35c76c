"""PSM batch mode (``simdup merge``) against BPHS batch mode, same run.

    python benchmarks/bench_batch.py            # n = 10M on disk, m = 1M (3 rounds, best kept)
    python benchmarks/bench_batch.py --quick    # n = 200K, m = 20K
    python benchmarks/bench_batch.py --workers 1,2   # PSM-F in-process vs on Dask, 1 and 2 workers

What is measured: one pending batch ``Q`` of ``m`` fingerprints (written as
crawl batch files, 10 per batch) is merged against a collection ``H`` of
``n`` fingerprints on disk (sorted runs of ``m``) with

* PSM-F  (``simdup merge``, default probes; first verified match, matched
  elements dropped)
* PSM-A  (``simdup merge --all``)
* BPHS   (``simdup merge --exact``: a BPHSIndex with 4 tables built over Q
  per key, every element of every chunk looked up in it, every pair
  verified; BPHS-F = BPHS-A in batch mode)
* PSM-F through the online index (a ``PSMIndex`` built per chunk,
  ``query_many``), the batch scan's cross-check

each in its own process (``--worker``), timing the merge and reading the
process's peak RSS (``VmHWM``) before and after. Throughput is the paper's
``r = m / time`` (new fingerprints merged per second), computed from the
worker's CPU time (single-threaded, so CPU seconds = seconds on one core; the
wall time is printed too, it is inflated when the machine is shared). Precision and recall
are against BPHS on the same data: PSM-A recall = pairs found / BPHS pairs;
PSM-F recall = elements of Q with a match found / elements BPHS matches.
Peak memory is also measured for PSM-F at a smaller ``n`` to show it is
O(m), not O(n).

Workload (``benchmarks/_workload.py``): near-duplicate pairs and fresh pages
whose fingerprints and weights ``W`` are real simhash computations of
documents and their web-like edits (``query_set``; 20% seeded from the real
pages of the report half). To reach millions, each pair is *relocated*:
``x -> x ^ r`` for both members and ``W[j] -> -W[j]`` where ``r`` has bit
``j``: distances, ``|W|`` and therefore bit volatilities are unchanged,
only the position in the 2^64 space moves. Half of Q are variants whose
original is in H (at random positions, so in random chunks), 5% of the pairs
have both members in Q, the rest of Q are fresh pages; the rest of H are
relocated background fingerprints.

``--workers 1,2`` measures instead, same run and same data, the PSM-F merge
in-process and on a Dask ``LocalCluster`` of 1 and 2 worker processes
(``simdup merge --workers N``): wall time from the call to the summary, the
cluster started before (its start-up is printed apart); the pairs must be
the in-process merge's. Each process then merges the same batch again
(the second batch of a longer merge: memory already faulted in), timed
apart; and the Dask tasks' work is run without Dask by one process and by
two at once.

Each page also carries what the verified match rule needs: key 2 is key 1
XOR a fixed mask (its weights sign-flipped to match), so its distances are
key 1's and both keys find the same pairs (the merge does the work of two
keys); the sketch of a variant is its original's with 10 of its 32 bytes
redrawn (22 equal bytes: similarity 0.69), fresh and background pages get
random sketches. Every method verifies at the default ``min_similarity``.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from scrapy_simdup.merge.collection import H_DTYPE, PAIR_DTYPE, Collection
from scrapy_simdup.storage.batchfile import BATCH_DTYPE, header_weights, write_batch

WORK = HERE / ".cache" / "bench_batch"
H = 3
KEY2_MASK = np.uint64(0x9E3779B97F4A7C15)


def _key2(values, W):
    """Key 2 of the workload: key 1 XOR KEY2_MASK, the weights sign-flipped to match."""
    return _relocate(values, W, np.full(len(values), KEY2_MASK, dtype=np.uint64))


def _variant_sketches(sketches, rng, redraw=10):
    """Copies of ``sketches`` with ``redraw`` random bytes of each redrawn."""
    out = sketches.copy()
    cols = np.argsort(rng.random(out.shape), axis=1)[:, :redraw]
    np.put_along_axis(out, cols, rng.integers(0, 256, cols.shape, dtype=np.uint8), axis=1)
    return out


def log(*a):
    print(*a, flush=True)


def _relocate(values, W, r):
    """Move fingerprints in the 2^64 space keeping distances and |W|."""
    values = values ^ r
    if W is None:
        return values, None
    bits = ((r[:, None] >> np.arange(64, dtype=np.uint64)) & np.uint64(1)).astype(bool)
    return values, np.where(bits, -W, W)


def build(n: int, m: int, seed: int = 5):
    """Write the collection (n) and the pending batch (m) under WORK; returns paths."""
    from _workload import background, query_set

    tag = f"v2-n{n}-m{m}-s{seed}"
    root = WORK / tag
    if (root / "done").exists():
        return root / "crawl", root / "collection"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    pool = query_set(20000, H, seed=2, log=log)
    has = pool["has_dup"]
    pv_base = pool["stored_dup"]                               # originals
    pv_var, pW_var = pool["q_value"][has], pool["q_W"][has]   # their edited variants
    fv, fW = pool["q_value"][~has], pool["q_W"][~has]         # fresh pages
    n_pairs = m // 2
    n_in_q = n_pairs // 20                                     # both members in Q
    n_fresh = m - n_pairs - n_in_q
    log(f"building Q: {n_pairs:,} variants ({n_in_q:,} with their original also in Q), "
        f"{n_fresh:,} fresh")
    pick = rng.integers(0, len(pv_var), n_pairs)
    r = rng.integers(0, 2**64, n_pairs, dtype=np.uint64)
    base = pv_base[pick] ^ r
    var_v, var_W = _relocate(pv_var[pick], pW_var[pick].astype(np.float64), r)
    fpick = rng.integers(0, len(fv), n_fresh + n_in_q)
    fr = rng.integers(0, 2**64, len(fpick), dtype=np.uint64)
    fresh_v, fresh_W = _relocate(fv[fpick], fW[fpick].astype(np.float64), fr)
    # originals of the in-Q pairs: use the fresh pages' weights shape? no: an original's
    # own W is not in the pool, so its W is taken from a fresh page (only its volatility
    # order matters for its own queries)
    q_values = np.concatenate([var_v, base[:n_in_q], fresh_v[n_in_q:]])
    q_W = np.concatenate([var_W, fresh_W[:n_in_q], fresh_W[n_in_q:]])
    base_sk = rng.integers(0, 256, (n_pairs, 32), dtype=np.uint8)
    q_sk = np.concatenate([_variant_sketches(base_sk, rng), base_sk[:n_in_q],
                           rng.integers(0, 256, (n_fresh, 32), dtype=np.uint8)])
    order = rng.permutation(m)
    q_values, q_W, q_sk = q_values[order], q_W[order], q_sk[order]
    crawl = root / "crawl"
    per_file = max(1, m // 10)
    for k, s in enumerate(range(0, m, per_file)):
        e = min(m, s + per_file)
        rec = np.empty(e - s, dtype=BATCH_DTYPE)
        rec["value"] = q_values[s:e]
        rec["id"] = np.arange(s, e)
        rec["cq"], rec["wrms"] = header_weights(q_W[s:e])
        rec["value2"], W2 = _key2(q_values[s:e], q_W[s:e])
        rec["cq2"], rec["wrms2"] = header_weights(W2)
        rec["sketch"] = q_sk[s:e]
        write_batch(crawl, f"batch-{k + 1:08d}-0", rec,
                    [f"https://site{(s + i) % 997}.example/q/{s + i}" for i in range(e - s)])
    del q_W
    log(f"building H: {n:,} fingerprints ({n_pairs - n_in_q:,} originals of Q's variants)")
    bg = background(200_000, seed=99, log=log)
    n_bg = n - (n_pairs - n_in_q)
    bgv = bg[rng.integers(0, len(bg), n_bg)] ^ rng.integers(0, 2**64, n_bg, dtype=np.uint64)
    h_values = np.concatenate([base[n_in_q:], bgv])
    h_sk = np.concatenate([base_sk[n_in_q:], rng.integers(0, 256, (n_bg, 32), dtype=np.uint8)])
    perm = rng.permutation(n)
    h_values, h_sk = h_values[perm], h_sk[perm]
    coll = Collection(root / "collection", create=True)
    for s in range(0, n, m):
        e = min(n, s + m)
        run = np.empty(e - s, dtype=H_DTYPE)
        run["value"] = h_values[s:e]
        run["value2"] = h_values[s:e] ^ KEY2_MASK
        run["sketch"] = h_sk[s:e]
        run["id"] = np.arange(s, e)
        coll.append(run, [f"https://site{i % 997}.example/h/{i}" for i in range(s, e)],
                    np.zeros(0, dtype=PAIR_DTYPE), {})
        log(f"  H: {e:,}/{n:,}")
    (root / "done").write_text("ok")
    return crawl, root / "collection"


def _peak_rss_mb() -> float:
    """Peak RSS of this process (VmHWM: reset at exec, unlike getrusage's
    ru_maxrss, which a child inherits from its parent's high-water mark)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker(args) -> None:
    """Run one merge (without committing) and report time, peak RSS and pairs."""
    from scrapy_simdup.merge import merge

    if args.join_kernel is not None:
        from scrapy_simdup._ext import batchjoin

        if batchjoin.join_kernel(args.join_kernel) != args.join_kernel:
            raise SystemExit(f"join kernel {args.join_kernel} is not available on this CPU")
        if args.join_kernel < 2:
            # a CPU without AVX-512: VOSH for the probes
            batchjoin.flip_kernel(0)
    if args.gather is not None:
        from scrapy_simdup._ext import batchjoin

        batchjoin.join_gather(args.gather)
    rss0 = _peak_rss_mb()
    client = None
    if args.dask_workers:
        from scrapy_simdup.merge.distributed import DaskScan

        t0 = time.perf_counter()
        # the cluster `simdup merge --workers N` starts, started here to leave it untimed
        scan = DaskScan(workers=args.dask_workers)
        client = scan._connect()
        startup = time.perf_counter() - t0
    kw = {"psm-f": dict(first=True), "psm-a": dict(first=False),
          "bphs": dict(exact=True, first=False, tables=4),
          "psm-f-index": dict(first=True, engine="index")}[args.worker]
    if args.probes is not None and "exact" not in kw:
        kw["probes"] = args.probes
    if client is not None:
        kw["scheduler"] = client
    distance = H if args.distance is None else args.distance
    stream = None
    if client is not None:
        from dask.distributed import get_task_stream

        stream = get_task_stream(client)
        stream.__enter__()
    t0, c0 = time.perf_counter(), time.process_time()
    s = merge([args.dir], args.collection, distance=distance, chunk_size=args.m, commit=False,
              progress=False, **kw)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    rss1 = _peak_rss_mb()
    np.save(args.out, s.pairs_array)
    extra = {}
    if client is not None:
        stream.__exit__(None, None, None)
        extra["startup"] = startup
        extra["tasks"] = _task_seconds(stream.data, t0)
    if args.again:      # the same merge again, in the same process and cluster
        t1, c1 = time.perf_counter(), time.process_time()
        merge([args.dir], args.collection, distance=distance, chunk_size=args.m, commit=False,
              progress=False, **kw)
        extra["again"] = time.perf_counter() - t1
        extra["again_cpu"] = time.process_time() - c1
    if client is not None:
        scan.close()
    print(json.dumps({**extra, "method": args.worker, "seconds": seconds, "cpu": cpu,
                      "m": s.fingerprints,
                      "n": s.collection_before, "chunks": s.chunks_scanned,
                      "probes": s.probes, "pairs": s.pairs, "duplicates": s.duplicates,
                      "rss_start_mb": rss0, "rss_peak_mb": rss1}))


def ceiling_worker(args) -> None:
    """``--worker ceiling-scan`` / ``ceiling-build``: the Dask tasks' work
    without Dask, in one process: every chunk's scan on key 1 (read, CRC,
    join) or a side's build, ``--repeat`` times; prints the fastest."""
    from scrapy_simdup.merge.batchscan import SideSpec, match_chunk
    from scrapy_simdup.merge.probes import header_bits, merge_probes
    from scrapy_simdup.storage.batchfile import list_batches, read_batch

    records = np.concatenate([read_batch(b, with_urls=False).records
                              for b in list_batches(Path(args.dir))])
    t = header_bits(args.m)
    spec = SideSpec(distance=H, needed=5, first=True, probes=merge_probes(H, t), t=t)
    coll = Collection(args.collection)
    buf = np.empty(args.m, dtype=H_DTYPE)
    side = spec.build(records, 0)
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        if args.worker == "ceiling-build":
            spec.build(records, 1)
        else:
            for start, group in coll.chunk_plan(args.m):
                chunk = Collection.read_chunk(coll.path, start, group, 0, True, buf)
                match_chunk([side], [chunk], records, None, True, keep_table=True)
        times.append(time.perf_counter() - t0)
    print(json.dumps({"seconds": min(times)}))


def parallel_ceiling(crawl, collection, m: int, repeat: int) -> dict:
    """``{kind: (seconds alone, seconds of each of two at once)}``: the scan
    and build work of the Dask tasks run by one process, then by two at once
    (no Dask): how much two cores of this machine give."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    out = {}
    for kind in ("scan", "build"):
        cmd = [sys.executable, __file__, "--worker", f"ceiling-{kind}", "--dir", str(crawl),
               "--collection", str(collection), "--m", str(m), "--repeat", str(repeat)]
        runs = []
        for copies in (1, 2):
            procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
                     for _ in range(copies)]
            runs.append([json.loads(p.communicate()[0].strip().splitlines()[-1])["seconds"]
                         for p in procs])
        out[kind] = (runs[0][0], runs[1])
    return out


def _task_seconds(records, t0: float) -> dict:
    """Compute seconds of a Dask merge's tasks by kind (``simdup-<kind>-...``),
    and the span from the call to the first task's start and from the last
    task's end to the summary (the client's own serial work)."""
    kinds: dict = {}
    starts, stops = [], []
    for r in records:
        for ss in r["startstops"]:
            if ss["action"] == "compute":
                kind = str(r["key"]).split("-")[1]
                kinds[kind] = kinds.get(kind, 0.0) + ss["stop"] - ss["start"]
                starts.append(ss["start"])
                stops.append(ss["stop"])
    wall0 = time.time() - (time.perf_counter() - t0)   # the call's start, as a time.time()
    return {"compute": kinds, "first_start": min(starts) - wall0,
            "last_stop": max(stops) - wall0}


def run_worker(method, crawl, collection, m, out, probes=None, join_kernel=None, distance=None,
               dask_workers=None, again=False, gather=None):
    cmd = [sys.executable, __file__, "--worker", method, "--dir", str(crawl), "--collection",
           str(collection), "--m", str(m), "--out", str(out)]
    if dask_workers:
        cmd += ["--dask-workers", str(dask_workers)]
    if again:
        cmd.append("--again")
    if distance is not None:
        cmd += ["--distance", str(distance)]
    if probes is not None:
        cmd += ["--probes", str(probes)]
    if join_kernel is not None:
        cmd += ["--join-kernel", str(join_kernel)]
    if gather is not None:
        cmd += ["--gather", str(gather)]
    # one core per method: NumPy's OpenBLAS threads otherwise spin for ~0.1 s
    # of CPU after import, inside the timed merge (no method calls BLAS)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{method} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def dask_bench(args) -> None:
    """PSM-F in-process against the Dask merge with each worker count of
    ``--workers``, rounds in turn, the fastest wall time of each kept."""
    n = args.n or (200_000 if args.quick else 10_000_000)
    m = args.m or (20_000 if args.quick else 1_000_000)
    counts = [int(x) for x in args.workers.split(",")]
    distance = H if args.distance is None else args.distance
    log(f"# bench_batch --workers: n = {n:,} on disk, m = {m:,}, distance {distance}, PSM-F, "
        f"{os.cpu_count()} cores; Dask LocalCluster, 1 thread per worker process, started "
        f"before the timed merge")
    crawl, collection = build(n, m)
    out = WORK / "pairs"
    out.mkdir(parents=True, exist_ok=True)
    names = ["in-process"] + [f"dask {k} worker{'s' if k > 1 else ''}" for k in counts]
    rounds = {name: [] for name in names}
    for _ in range(args.repeat):
        for name, k in zip(names, [None] + counts):
            rounds[name].append(run_worker("psm-f", crawl, collection, m,
                                           out / f"dask-{k or 0}.npy", args.probes,
                                           distance=args.distance, dask_workers=k, again=True))
    best = {name: min(rs, key=lambda x: x["seconds"]) for name, rs in rounds.items()}
    ref = np.load(out / "dask-0.npy")
    for name, k in zip(names, [None] + counts):
        r = best[name]
        same = np.array_equal(np.load(out / f"dask-{k or 0}.npy"), ref)
        walls = ", ".join(f"{x['seconds']:.2f}" for x in rounds[name])
        log(f"{name:16s} {r['seconds']:7.2f} s wall  {r['m'] / r['seconds']:>10,.0f} fp/s  "
            f"pairs {r['pairs']:,}" + ("" if k is None else
                                        f"  same pairs as in-process: {same}  cluster start "
                                        f"{r['startup']:.1f} s (not timed)")
            + f"  (best of {args.repeat}: {walls} s)")
    log("")
    log("## where a Dask merge's time goes (the best round of each)")
    for name, k in zip(names[1:], counts):
        r = best[name]
        tasks = r["tasks"]
        total = sum(tasks["compute"].values())
        parts = ", ".join(f"{kind} {sec:.2f}" for kind, sec in sorted(tasks["compute"].items()))
        log(f"{name:16s} task compute {total:5.2f} s ({parts}) = {total / k:.2f} s per worker; "
            f"client alone: {tasks['first_start']:.2f} s before the first task, "
            f"{r['seconds'] - tasks['last_stop']:.2f} s after the last; the client process "
            f"(client and scheduler) used {r['cpu']:.2f} CPU-s, "
            f"{min(x['again_cpu'] for x in rounds[name]):.2f} in the merge again")
    if 1 in counts:
        one = sum(best[names[1 + counts.index(1)]]["tasks"]["compute"].values())
        for name, k in zip(names[1:], counts):
            if k > 1:
                many = sum(best[name]["tasks"]["compute"].values())
                log(f"{name:16s} the same tasks took {many / one:.2f}x the compute time of "
                    f"1 worker: at most {k * one / many:.2f}x the speed of 1 worker with no "
                    f"client work at all")
    log("")
    log(f"## this machine without Dask: the tasks' work run by one process, then by two at "
        f"once (best of {args.repeat})")
    for kind, (alone, pair) in parallel_ceiling(crawl, collection, m, args.repeat).items():
        log(f"{kind:16s} alone {alone:.2f} s, two at once {pair[0]:.2f} and {pair[1]:.2f} s: "
            f"two do {2 * alone / max(pair):.2f}x the work of one")
    log("")
    log("## ratios (same run, wall time)")
    _log_ratios(best, names, counts, "seconds")
    log("")
    log(f"## the same merge again in the same process and cluster (a merge of several "
        f"batches: memory already faulted in), best of {args.repeat}")
    again = {name: {"again": min(r["again"] for r in rs)} for name, rs in rounds.items()}
    for name in names:
        log(f"{name:16s} {again[name]['again']:7.2f} s wall")
    _log_ratios(again, names, counts, "again")


def _log_ratios(best: dict, names: list, counts: list, field: str) -> None:
    """The --workers targets' ratios of ``best[name][field]`` (wall seconds)."""
    base = best["in-process"][field]
    for name in names[1:]:
        log(f"{name:16s} {best[name][field] / base:5.2f}x the in-process time")
    if 1 in counts:
        one = best[names[1 + counts.index(1)]][field]
        for name, k in zip(names[1:], counts):
            if k > 1:
                log(f"{name:16s} {one / best[name][field]:5.2f}x the speed of 1 worker")


def wide_bench(args, m: int) -> None:
    """PSM-F at a wide distance (the crawls' default, or ``--distance``):
    speed and memory only (its exact reference would be BPHS with ``h + 1``
    tables, and this workload plants near-duplicates within distance 3), on
    a smaller workload (``--wide-m``): the join as it runs (a bucket's full
    values gathered where the low bits pass most entries) against the
    low-bit sweep alone, same pairs."""
    from scrapy_simdup._limits import DEFAULT_DISTANCE

    distance = DEFAULT_DISTANCE if args.distance is None else args.distance
    wide_m = min(m, args.wide_m)
    crawl_w, collection_w = build(2 * wide_m, wide_m)
    out = WORK / "pairs"
    out.mkdir(parents=True, exist_ok=True)
    modes = {"gathered": -1, "low bits only": 0}
    rounds = {name: [] for name in modes}
    for _ in range(args.repeat):
        for name, mode in modes.items():
            rounds[name].append(run_worker("psm-f", crawl_w, collection_w, wide_m,
                                           out / f"psm-f-wide-{mode}.npy",
                                           distance=distance, gather=mode))
    log("")
    log(f"## PSM-F at distance {distance} (the crawls' default: {DEFAULT_DISTANCE}), "
        f"m = {wide_m:,}, n = {2 * wide_m:,} (speed and memory only), best of {args.repeat}")
    best = {}
    for name in modes:
        best[name] = r = min(rounds[name], key=lambda x: x["cpu"])
        cpus = ", ".join(f"{x['cpu']:.2f}" for x in rounds[name])
        log(f"psm-f h={distance} {name:14s} {r['cpu']:7.2f} s CPU  "
            f"{r['m'] / r['cpu']:>10,.0f} fp/s per CPU-second  probes {r['probes']}  "
            f"peak RSS {r['rss_peak_mb']:7.0f} MB  pairs {r['pairs']:,}  (CPU {cpus} s)")
    same = np.array_equal(np.load(out / "psm-f-wide--1.npy"), np.load(out / "psm-f-wide-0.npy"))
    log(f"gathered: {best['low bits only']['cpu'] / best['gathered']['cpu']:.2f}x the throughput "
        f"per CPU-second of the low-bit sweep alone, same pairs: {same}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--n", type=int)
    ap.add_argument("--m", type=int)
    ap.add_argument("--small-n", type=int, help="second collection size for the memory check")
    ap.add_argument("--probes", type=int)
    ap.add_argument("--repeat", type=int, default=3, help="rounds of all methods (best kept)")
    ap.add_argument("--no-index-engine", action="store_true")
    ap.add_argument("--wide-m", type=int, default=20_000,
                    help="batch size of the run at the default distance (0: skip it)")
    ap.add_argument("--worker")
    ap.add_argument("--dir")
    ap.add_argument("--collection")
    ap.add_argument("--out")
    ap.add_argument("--join-kernel", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--gather", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--wide-only", action="store_true",
                    help="only the run at the default distance (--wide-m; --distance H for "
                    "another)")
    ap.add_argument("--distance", type=int, help="with --workers or --wide-only: the distance")
    ap.add_argument("--workers", help="e.g. 1,2: PSM-F in-process vs on Dask with that many "
                    "worker processes (only that)")
    ap.add_argument("--dask-workers", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--again", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker in ("ceiling-scan", "ceiling-build"):
        ceiling_worker(args)
        return
    if args.worker:
        worker(args)
        return
    if args.workers:
        dask_bench(args)
        return
    if args.wide_only:
        wide_bench(args, args.m or 1_000_000)
        return
    n = args.n or (200_000 if args.quick else 10_000_000)
    m = args.m or (20_000 if args.quick else 1_000_000)
    small_n = args.small_n or max(m, n // 5)
    from scrapy_simdup.merge.probes import default_probes, volatility_model

    user_probes = args.probes
    if args.probes is None:  # what `simdup merge` uses when no --probes/--recall is given
        args.probes = default_probes(H, m)
    log(f"# bench_batch: n = {n:,} on disk, m = {m:,}, distance {H}, "
        f"probes {args.probes} (merge default {default_probes(H, m)}), "
        f"cores: 1 per method (single-threaded merge); volatility model: "
        f"{volatility_model().meta.get('source', 'calibrated')}")
    t = time.time()
    crawl, collection = build(n, m)
    crawl_s, collection_s = build(small_n, m)
    log(f"# workload ready in {time.time() - t:.0f} s")
    out = WORK / "pairs"
    out.mkdir(parents=True, exist_ok=True)
    methods = ["psm-f", "psm-a", "bphs"] + ([] if args.no_index_engine else ["psm-f-index"])
    res = {}
    # rounds of every method in turn, the fastest run of each kept: the first
    # process of a run pays for memory the VM has never touched (about 2.5 ms
    # per MB on this kind of machine), which would otherwise fall on PSM-F alone
    rounds = {m_: [] for m_ in methods}
    for _ in range(args.repeat):
        for method in methods:
            rounds[method].append(run_worker(method, crawl, collection, m,
                                             out / f"{method}.npy", args.probes))
    for method in methods:
        res[method] = r = min(rounds[method], key=lambda x: x["cpu"])
        cpus = ", ".join(f"{x['cpu']:.2f}" for x in rounds[method])
        log(f"{method:12s} {r['seconds']:7.2f} s wall {r['cpu']:7.2f} s CPU  "
            f"{r['m'] / r['cpu']:>10,.0f} fp/s per CPU-second  "
            f"peak RSS {r['rss_peak_mb']:7.0f} MB (start {r['rss_start_mb']:.0f} MB)  "
            f"pairs {r['pairs']:,}  duplicates {r['duplicates']:,}  "
            f"(best of {args.repeat}: CPU {cpus} s)")
    small = run_worker("psm-f", crawl_s, collection_s, m, out / "psm-f-small.npy", args.probes)
    log(f"{'psm-f n=' + format(small_n, ','):12s} {small['seconds']:7.2f} s wall "
        f"{small['cpu']:7.2f} s CPU  {small['m'] / small['cpu']:>10,.0f} fp/s per CPU-second  "
        f"peak RSS {small['rss_peak_mb']:7.0f} MB")

    def pairset(method):
        p = np.load(out / f"{method}.npy")
        return set(zip(p["id"].tolist(), p["duplicate_of"].tolist())), set(p["id"].tolist())

    exact_pairs, exact_dups = pairset("bphs")
    log("")
    log(f"## quality against BPHS (exact): {len(exact_pairs):,} pairs, "
        f"{len(exact_dups):,} elements of Q with a near-duplicate")
    for method in [x for x in methods if x != "bphs"]:
        pairs, dups = pairset(method)
        precision = len(pairs & exact_pairs) / max(1, len(pairs))
        if method.startswith("psm-f"):
            recall = len(dups & exact_dups) / max(1, len(exact_dups))
            kind = "element recall (found a match / BPHS matched)"
        else:
            recall = len(pairs & exact_pairs) / max(1, len(exact_pairs))
            kind = "pair recall"
        log(f"{method:12s} precision {precision:.4f}  {kind} {recall:.4f}")
    log("")
    log("## ratios (same run)")
    b, bc = res["bphs"]["seconds"], res["bphs"]["cpu"]
    for method in [x for x in methods if x != "bphs"]:
        log(f"{method:12s} {bc / res[method]['cpu']:6.2f}x BPHS batch (4 tables) throughput "
            f"per CPU-second ({b / res[method]['seconds']:.2f}x wall)")
    log(f"peak RSS of PSM-F: n={small_n:,}: {small['rss_peak_mb']:.0f} MB, n={n:,}: "
        f"{res['psm-f']['rss_peak_mb']:.0f} MB (ratio {res['psm-f']['rss_peak_mb'] / small['rss_peak_mb']:.2f}"
        f" for {n / small_n:.0f}x the collection)")
    log(f"on-disk collection: {sum(p.stat().st_size for p in Path(collection).iterdir()) / 2**20:.0f} MB")
    if args.wide_m:
        wide_bench(args, m)
    # the batch join's SIMD sweep on CPUs with less than this one: the
    # default merge with each lower kernel forced (AVX2: same header length,
    # probes and pairs; scalar: 2 more header bits, so the probes and pairs
    # of its own default)
    from scrapy_simdup._ext import batchjoin

    best = batchjoin.join_kernel()
    names = {2: "AVX-512", 1: "AVX2", 0: "scalar"}
    log("")
    log(f"## PSM-F with the join kernels below this CPU's best ({names[best]}), best of {args.repeat}; "
        f"as on a CPU without AVX-512: VOSH for the probes, the 128-bit CRC")
    for level in range(best - 1, -1, -1):
        runs = [run_worker("psm-f", crawl, collection, m, out / "psm-f-kernel.npy", user_probes,
                           join_kernel=level) for _ in range(args.repeat)]
        r = min(runs, key=lambda x: x["cpu"])
        pairs, _ = pairset("psm-f-kernel")
        log(f"psm-f {names[level]:8s} {r['cpu']:7.2f} s CPU  {r['m'] / r['cpu']:>10,.0f} fp/s "
            f"per CPU-second  {bc / r['cpu']:5.2f}x BPHS  probes {r['probes']}  "
            f"pairs {r['pairs']:,}  precision {len(pairs & exact_pairs) / max(1, len(pairs)):.4f}  "
            f"element recall {len({i for i, _ in pairs} & exact_dups) / max(1, len(exact_dups)):.4f}")


if __name__ == "__main__":
    main()
