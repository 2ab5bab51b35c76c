"""Shared index on Redis: throughput, memory, and the peers, in one run.

    python benchmarks/bench_redis.py            # 1M fingerprints (the reported run)
    python benchmarks/bench_redis.py --quick    # 100k, for development

Starts its own ``redis-server`` (Debian package) on a free loopback port, then:

1. *Fill*: 1M checks of new documents (``_workload.background``: real simhash
   computations of synthetic pages) through ``RedisBackend.check_and_add_many``
   in batches (each one a PSM-F lookup + atomic insert): checks/second from one
   process, and Redis ``INFO memory`` ``used_memory`` before/after, split into
   the fingerprint index (buckets + bookkeeping) and the URL lists
   (``MEMORY USAGE`` of the ``<key>:u:*`` keys).
2. *Queries* on the filled index: 20k checks, half near-duplicates of stored
   pages at distance 1..3 (real edits, ``_workload.query_set``), half new:
   checks/second and recall (near-duplicates found).
3. *4 processes* checking new streams against the same index at once.
4. Peers measured here: the in-memory backend (``MemoryBackend`` on
   ``PSMIndex``, the default index, one process: it is not shared) on the same
   fill and queries; ``datasketch.MinHashLSH`` with Redis storage doing the
   same check-and-insert (query, insert if no candidate; per page, and
   batched with its query buffer and insertion session), 1 and 4 processes,
   on precomputed MinHash signatures, compared with ours on the same number
   of checks from an empty index.
"""
from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _workload import background, query_set

from scrapy_simdup import SimdupConfig
from scrapy_simdup.index.redis.backend import RedisBackend
from scrapy_simdup.index.redis.store import RedisIndexStore
from scrapy_simdup.integration.backends import probe_budget

H = 3
T = 14
BATCH = 2048


# ----------------------------------------------------------------- redis server
def _die_with_parent():
    """In the child: SIGKILL when the benchmark dies (no orphan server)."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            import signal
            ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
        except OSError:
            pass


class Server:
    def __init__(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.dir = tempfile.mkdtemp(prefix="bench-redis-")
        binary = shutil.which("redis-server")
        if binary is None:
            sys.exit("redis-server is not installed (apt-get install redis-server)")
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir, "--loglevel", "warning"],
            stdout=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        import redis
        self.client = redis.Redis(port=self.port)
        for _ in range(200):
            try:
                self.client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def used_memory(self) -> int:
        return int(self.client.info("memory")["used_memory"])

    def close(self):
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


# ----------------------------------------------------------------- data
def weights_for(values: np.ndarray, seed: int) -> np.ndarray:
    """W consistent with ``values`` (sign = bit) for documents generated
    without W (the background): magnitudes like a 300-shingle page."""
    rng = np.random.default_rng(seed)
    bits = ((values[:, None] >> np.arange(64, dtype=np.uint64)) & np.uint64(1)).astype(bool)
    mag = np.abs(rng.normal(0, 17.0, (values.shape[0], 64))) + 0.5
    return np.where(bits, mag, -mag)


def urls_for(start: int, n: int) -> list[str]:
    return [f"https://site{i % 997}.example.com/news/2024/article-{i}.html"
            for i in range(start, start + n)]


# ----------------------------------------------------------------- ours
def make_backend(url: str, base: str) -> RedisBackend:
    store = RedisIndexStore(url, base, header_bits=T, distance=H)
    store.check_server()
    return RedisBackend(store, max_probes=probe_budget(SimdupConfig(distance=H), T))


async def run_checks(backend, values, W, keys):
    out = []
    for a in range(0, values.shape[0], BATCH):
        out.extend(await backend.check_and_add_many(values[a:a + BATCH], W[a:a + BATCH],
                                                    keys[a:a + BATCH]))
    return out


def _ours_worker(url, base, seed, n, barrier, q):
    values = background(n, seed=seed, log=None)
    W = weights_for(values, seed)
    keys = urls_for(seed * 10_000_000, n)
    backend = make_backend(url, base)

    async def go():
        barrier.wait()
        t0 = time.perf_counter()
        res = await run_checks(backend, values, W, keys)
        t1 = time.perf_counter()
        await backend.close()
        return t0, t1, sum(r is None for r in res)
    q.put(asyncio.run(go()))


def parallel(target, args_list):
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(len(args_list))
    q = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*a, barrier, q)) for a in args_list]
    for p in procs:
        p.start()
    res = [q.get(timeout=3600) for _ in procs]
    for p in procs:
        p.join()
    start = min(r[0] for r in res)
    end = max(r[1] for r in res)
    return end - start, res


# ----------------------------------------------------------------- datasketch
def minhash_stream(n: int, seed: int, num_perm=128, dup_fraction=0.5):
    """Signatures: fresh random ones, and near-duplicates of earlier ones
    (10 % of the permutations changed, Jaccard ~ 0.9)."""
    rng = np.random.default_rng(seed)
    sigs = rng.integers(1, 2**32 - 1, (n, num_perm), dtype=np.uint64)
    for i in range(1, n):
        if rng.random() < dup_fraction:
            j = int(rng.integers(0, i))
            sigs[i] = sigs[j]
            change = rng.choice(num_perm, num_perm // 10, replace=False)
            sigs[i, change] = rng.integers(1, 2**32 - 1, change.shape[0], dtype=np.uint64)
    return sigs


def datasketch_checks(port: int, basename: bytes, sigs, batched: bool, start=0):
    from datasketch import LeanMinHash, MinHash, MinHashLSH
    lsh = MinHashLSH(threshold=0.8, num_perm=sigs.shape[1], storage_config={
        "type": "redis", "basename": basename,
        "redis": {"host": "127.0.0.1", "port": port}})
    mhs = [LeanMinHash(MinHash(num_perm=sigs.shape[1], hashvalues=s, scheme="legacy"))
           for s in sigs]
    keys = [f"https://site.example/{start + i}" for i in range(len(mhs))]
    kept = 0
    t0 = time.perf_counter()
    if not batched:
        for k, m in zip(keys, mhs):
            if not lsh.query(m):
                lsh.insert(k, m, check_duplication=False)
                kept += 1
    else:
        for a in range(0, len(mhs), 500):
            part = list(zip(keys[a:a + 500], mhs[a:a + 500]))
            for _, m in part:
                lsh.add_to_query_buffer(m)
            found = lsh.collect_query_buffer()
            with lsh.insertion_session(buffer_size=500) as session:
                for (k, m), f in zip(part, found):
                    if not f:
                        session.insert(k, m, check_duplication=False)
                        kept += 1
    return t0, time.perf_counter(), kept


def _ds_worker(port, basename, seed, n, batched, barrier, q):
    sigs = minhash_stream(n, seed)
    barrier.wait()
    q.put(datasketch_checks(port, basename, sigs, batched, start=seed * 10_000_000))


# ----------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="100k fingerprints, small peers")
    args = ap.parse_args()
    n_fill = 100_000 if args.quick else 1_000_000
    n_query = 4_000 if args.quick else 20_000
    n_par = 25_000 if args.quick else 100_000        # per process
    n_ds = 2_000 if args.quick else 10_000           # datasketch checks per run
    print(f"# python benchmarks/bench_redis.py{' --quick' if args.quick else ''}")
    print(f"# distance h={H}, Redis header bits t={T}, batch {BATCH}, "
          f"probes per lookup {probe_budget(SimdupConfig(distance=H), T)} "
          f"(default recall target), cores {os.cpu_count()}")
    bg = background(n_fill, seed=1)
    Wbg = weights_for(bg, 1)
    keys = urls_for(0, n_fill)
    qs = query_set(n_query, H, seed=2)
    srv = Server()
    import redis as _r
    print(f"# redis-server {srv.client.info('server')['redis_version']}, "
          f"redis-py {_r.__version__}")
    rows = []
    try:
        # 1. fill ------------------------------------------------------------
        base = "bench:main"
        before = srv.used_memory()
        backend = make_backend(srv.url, base)
        srv.client.config_resetstat()
        t0, c0 = time.perf_counter(), time.process_time()
        res = asyncio.run(run_checks(backend, bg, Wbg, keys))
        fill_dt, fill_cpu = time.perf_counter() - t0, time.process_time() - c0
        server_us = sum(v["usec"] for k, v in srv.client.info("commandstats").items()
                        if k.startswith("cmdstat_"))
        stored = n_fill - sum(r is not None for r in res)
        after = srv.used_memory()
        pipe = srv.client.pipeline(transaction=False)
        ukeys = list(srv.client.scan_iter(match=base + ":u:*", count=10_000))
        for k in ukeys:
            pipe.memory_usage(k, samples=0)
        url_mem = int(sum(x or 0 for x in pipe.execute()))
        idx_mem = after - before - url_mem
        n_keys = srv.client.dbsize()
        print(f"\n## fill: {n_fill:,} checks of new pages, one process")
        print(f"redis   {n_fill / fill_dt:>10,.0f} checks/s  ({fill_dt:.1f} s, "
              f"{stored:,} stored, {n_fill - stored:,} near-duplicates in the background)")
        print(f"cpu     client {fill_cpu / n_fill * 1e6:.1f} us per check (process time), "
              f"Redis {server_us / n_fill:.1f} us per check (INFO commandstats); bound with a free "
              f"core each (not measured here): ~{1e6 / max(fill_cpu / n_fill * 1e6, server_us / n_fill):,.0f} checks/s")
        print(f"memory  used_memory {before:,} -> {after:,} bytes; {n_keys:,} keys")
        print(f"        fingerprint index {idx_mem:,} bytes = {idx_mem / stored:.1f} bytes "
              f"per fingerprint (target <= 24)")
        print(f"        URL lists (separate, {len(ukeys):,} keys) {url_mem:,} bytes = "
              f"{url_mem / stored:.1f} bytes per URL "
              f"(~{np.mean([len(k) for k in keys[:1000]]):.0f}-char URLs)")
        rows.append(("fill", n_fill / fill_dt))

        # 2. queries -------------------------------------------------------------
        dup_vals = qs["stored_dup"]
        asyncio.run(run_checks(backend, dup_vals, weights_for(dup_vals, 3),
                               urls_for(50_000_000, dup_vals.shape[0])))
        qv, qW = qs["q_value"], qs["q_W"]
        t0 = time.perf_counter()
        qres = asyncio.run(run_checks(backend, qv, qW, urls_for(60_000_000, qv.shape[0])))
        q_dt = time.perf_counter() - t0
        found = np.array([r is not None for r in qres])
        recall = found[qs["has_dup"]].mean()
        fresh_hits = found[~qs["has_dup"]].mean()
        asyncio.run(backend.close())
        print(f"\n## queries on the filled index: {qv.shape[0]:,} checks, half near-duplicates "
              f"(distance 1..{H}), one process")
        print(f"redis   {qv.shape[0] / q_dt:>10,.0f} checks/s  recall {recall:.3f}, "
              f"new pages matched {fresh_hits:.4f}")
        rows.append(("queries", qv.shape[0] / q_dt))

        # 3. four processes ---------------------------------------------------------
        wall, par = parallel(_ours_worker, [(srv.url, base, 100 + k, n_par) for k in range(4)])
        ours4 = 4 * n_par / wall
        print(f"\n## 4 processes, {n_par:,} checks of new pages each, same index")
        print(f"redis   {ours4:>10,.0f} checks/s aggregate ({wall:.1f} s wall); "
              f"index size now {int(srv.client.get(base + ':n')):,}")

        # 4a. in-memory backend ------------------------------------------------------
        from scrapy_simdup.index.backend import MemoryBackend
        from scrapy_simdup.integration.backends import make_index
        mem = MemoryBackend(make_index(SimdupConfig(distance=H)))
        t0 = time.perf_counter()
        asyncio.run(mem.check_and_add_many(bg, Wbg, keys))
        mem_fill = n_fill / (time.perf_counter() - t0)
        asyncio.run(mem.check_and_add_many(dup_vals, weights_for(dup_vals, 3),
                                           urls_for(50_000_000, dup_vals.shape[0])))
        t0 = time.perf_counter()
        mres = asyncio.run(mem.check_and_add_many(qv, qW, urls_for(60_000_000, qv.shape[0])))
        mem_q = qv.shape[0] / (time.perf_counter() - t0)
        mrecall = np.array([r is not None for r in mres])[qs["has_dup"]].mean()
        print("\n## in-memory backend (PSMIndex, default settings; one process, not shared)")
        print(f"memory  fill {mem_fill:>10,.0f} checks/s, queries {mem_q:,.0f} checks/s, "
              f"recall {mrecall:.3f}")
        del mem

        # 4b. datasketch vs ours on the same number of checks -----------------------
        print(f"\n## datasketch MinHashLSH (threshold 0.8, 128 perm) with Redis storage vs ours, "
              f"{n_ds:,} check-and-insert each (half near-duplicates), from an empty index")
        sigs = minhash_stream(n_ds, 7)
        t0, t1, _ = datasketch_checks(srv.port, b"ds1", sigs, batched=False)
        ds1 = n_ds / (t1 - t0)
        t0, t1, _ = datasketch_checks(srv.port, b"ds2", sigs, batched=True)
        ds1b = n_ds / (t1 - t0)
        wall, _ = parallel(_ds_worker, [(srv.port, b"ds4", 200 + k, n_ds // 4, True)
                                        for k in range(4)])
        ds4 = n_ds / wall
        sv = qv[:n_ds] if qv.shape[0] >= n_ds else qv
        small = make_backend(srv.url, "bench:small")
        t0 = time.perf_counter()
        asyncio.run(run_checks(small, sv, qW[:sv.shape[0]], urls_for(0, sv.shape[0])))
        ours_small = sv.shape[0] / (time.perf_counter() - t0)
        asyncio.run(small.close())
        best_ds1 = max(ds1, ds1b)
        print(f"datasketch per page   {ds1:>10,.0f} checks/s (1 process)")
        print(f"datasketch batched    {ds1b:>10,.0f} checks/s (1 process, query buffer + "
              f"insertion session)")
        print(f"datasketch batched    {ds4:>10,.0f} checks/s (4 processes)")
        print(f"ours                  {ours_small:>10,.0f} checks/s (1 process, same size)")

        print("\n## summary (targets: >= 50,000 checks/s from one process; <= 24 bytes per "
              "fingerprint; >= 10x datasketch)")
        print(f"one process, fill of {n_fill:,}:   {n_fill / fill_dt:>10,.0f} checks/s")
        print(f"one process, queries at {stored:,}: {qv.shape[0] / q_dt:>10,.0f} checks/s")
        print(f"four processes:                  {ours4:>10,.0f} checks/s")
        print(f"bytes per fingerprint:           {idx_mem / stored:>10.1f}")
        print(f"ours / in-memory backend:        fill {n_fill / fill_dt / mem_fill:.2f}x, "
              f"queries {qv.shape[0] / q_dt / mem_q:.2f}x")
        print(f"ours / datasketch (1 process):   {ours_small / best_ds1:.1f}x  "
              f"(vs its best mode; {ours_small / ds1:.1f}x vs per page)")
        print(f"ours / datasketch (4 processes): {ours4 / ds4:.1f}x")
    finally:
        srv.close()


if __name__ == "__main__":
    main()
