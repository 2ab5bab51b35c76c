"""Shared index on Redis (a log and a replica in every process) against the memory index.

    python benchmarks/bench_redis.py                   # 10^5, 10^6 and 10^7 pages
    python benchmarks/bench_redis.py --quick           # 10^5 only, for development
    python benchmarks/bench_redis.py --n 1e6 --procs 1,4

Starts its own ``redis-server`` (Debian package) on a free loopback port. For
each index size ``n``:

1. *Fill*: ``n`` unrelated pages (uniform random keys and sketches, URLs
   ``https://bg.example/<i>``) are appended to the log as the crawl would have
   (one entry a page). Redis ``used_memory`` per page, URLs included.
2. *Memory index*: a ``MemoryBackend`` holding the same ``n`` pages checks the
   real pages (spotsigs-dev + distractors-dragnet, ``Fingerprinter()``, in the
   fixed order of ``random.Random(7).shuffle``) one after another: look-ups per
   second, P and R.
3. *Shared index, P processes at once* (P = 1 and 4 by default): each process
   opens the index (its replica loads the whole log: the start-up time of a
   process joining a fleet), waits for the others, then checks the real pages
   with 16 checks in flight, as a crawl does. With P = 1 the URLs are the
   pages' own, and P / R are compared with the memory index's; with P > 1
   each process checks every page under its own host, so the processes meet
   each other's copies at once (each page must be kept by exactly one).
   Per process: checks/s, ms per check (median, p99: from the call to its
   answer), replica bytes per page, start-up seconds. Bytes on the wire
   per check (``INFO stats``, both directions, all processes).

Ratios are printed against the memory index at the same size, in the same run.
"""
from __future__ import annotations

import argparse
import asyncio
import gzip
import multiprocessing as mp
import os
import random
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

from scrapy_simdup import Fingerprinter
from scrapy_simdup._limits import DEFAULT_DISTANCE, DEFAULT_MIN_SIMILARITY
from scrapy_simdup.index.backend import MemoryBackend, Page
from scrapy_simdup.index.redis.backend import RedisBackend
from scrapy_simdup.index.redis.log import APPEND, RedisLog
from scrapy_simdup.index.replica import RECORD
from scrapy_simdup.integration.backends import make_index
from scrapy_simdup.integration.config import SimdupConfig
from tests.data_root import DATA_ROOT

PREFIX = "bench"
CONCURRENCY = 16
#: seconds a process may take to check the real pages before the run fails
CHECK_TIMEOUT = 900
FILL_CHUNK = 5000


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

    def net_bytes(self) -> int:
        s = self.client.info("stats")
        return int(s["total_net_output_bytes"]) + int(s["total_net_input_bytes"])

    def close(self):
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


# ----------------------------------------------------------------- data
def real_pages():
    """[(story or None, path, Page)] in the fixed shuffled order."""
    spot = sorted((DATA_ROOT / "spotsigs-dev").glob("*/*"))
    dis = sorted((DATA_ROOT / "distractors-dragnet").glob("*"))
    fp = Fingerprinter()
    out = []
    for path in spot + dis:
        if not path.is_file() or path.name.lower().startswith("readme"):
            continue
        raw = path.read_bytes()
        if path.suffix == ".gz":
            raw = gzip.decompress(raw)
        try:
            f = fp.fingerprint_html(raw)
        except Exception:  # noqa: BLE001 (pages without text are skipped, as in a crawl)
            continue
        story = path.parent.name if path.parent.parent.name == "spotsigs-dev" else None
        out.append((story, f"{path.parent.name}/{path.name}",
                    Page(f.value, np.asarray(f.W), f.value2, np.asarray(f.W2), f.sketch)))
    random.Random(7).shuffle(out)
    return out


def unrelated(n: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    v1 = rng.integers(0, 2**64, n, dtype=np.uint64, endpoint=False)
    v2 = rng.integers(0, 2**64, n, dtype=np.uint64, endpoint=False)
    sk = rng.integers(0, 256, (n, 32), dtype=np.uint8)
    return v1, v2, sk


def fill_log(srv, n: int) -> float:
    """Append ``n`` unrelated pages to the log (one entry a page, as checked one
    after another: each entry's base is the one before it); seconds."""
    log = RedisLog(srv.url, PREFIX)
    log.open()
    client = srv.client
    t0 = time.perf_counter()
    for a in range(0, n, FILL_CHUNK):
        b = min(n, a + FILL_CHUNK)
        v1, v2, sk = unrelated(b - a, seed=a + 1)
        rec = np.zeros(b - a, RECORD)
        rec["value"], rec["value2"], rec["sketch"] = v1, v2, sk
        rec["base"] = np.arange(a, b)
        raw = rec.tobytes()
        w = RECORD.itemsize
        blobs = [raw[i * w:(i + 1) * w] + b"https://bg.example/%d" % (a + i)
                 for i in range(b - a)]
        # (the caller has applied the log up to entry a; one entry comes back)
        size = client.eval(APPEND, 2, log.meta_key, log.log_key, log.epoch, a + 1, 1, b"",
                           *blobs)[0]
        if size != b:
            sys.exit(f"the fill was refused at entry {a + 1}: {size}")
    log.close_sync()
    return time.perf_counter() - t0


def score(pages, flags_of):
    """(precision, recall, flags) of ``flags_of[i]``: the index of the page
    matched, or None."""
    seen, correct, need, flags = set(), 0, 0, 0
    for i, (story, _, _) in enumerate(pages):
        if story is not None and story in seen:
            need += 1
        j = flags_of[i]
        if j is not None:
            flags += 1
            correct += story is not None and j >= 0 and pages[j][0] == story
        if story is not None:
            seen.add(story)
    return correct / max(flags, 1), correct / max(need, 1), flags


# ----------------------------------------------------------------- the memory index
def crawl_index():
    """The crawl's index at its defaults (what the plugin builds)."""
    return make_index(SimdupConfig())


def memory_run(pages, n):
    index = crawl_index()
    for a in range(0, n, 10**6):
        v1, v2, sk = unrelated(min(n, a + 10**6) - a, seed=a + 7)
        index.add(v1, v2, sk)
    mem = MemoryBackend(index)
    urls = [f"https://real.example/{p}" for _, p, _ in pages]

    async def run():
        times = []
        out = []
        for (_, _, page), url in zip(pages, urls):
            t = time.perf_counter()
            out.append(await mem.check_and_add(page, url))
            times.append(time.perf_counter() - t)
        return out, times
    got, times = asyncio.run(run())
    index_of = {u: i for i, u in enumerate(urls)}
    flags = [None if m is None else index_of.get(m.duplicate_of, -1) for m in got]
    return flags, np.array(times), index.nbytes / len(index)


# ----------------------------------------------------------------- a fleet process
def fleet_process(url, pages, host, barrier, queue):
    """Open the index, wait for the others, check every page (16 in flight)."""
    t0 = time.perf_counter()
    backend = RedisBackend.open(url, PREFIX, crawl_index())
    startup = time.perf_counter() - t0
    loaded = len(backend)
    barrier.wait()
    urls = [f"https://{host}/{p}" for _, p, _ in pages]

    async def run():
        sem = asyncio.Semaphore(CONCURRENCY)
        times = [0.0] * len(pages)
        out = [None] * len(pages)

        async def one(i):
            async with sem:
                t = time.perf_counter()
                out[i] = await backend.check_and_add(pages[i][2], urls[i])
                times[i] = time.perf_counter() - t
        t = time.perf_counter()
        cpu = time.process_time()
        work = asyncio.gather(*(one(i) for i in range(len(pages))))
        try:
            await asyncio.wait_for(asyncio.shield(work), CHECK_TIMEOUT)
        except asyncio.TimeoutError:    # say where it is stuck, then fail
            for task in asyncio.all_tasks():
                task.print_stack(file=sys.stderr)
            raise
        wall, cpu = time.perf_counter() - t, time.process_time() - cpu
        await backend.close()
        return out, times, wall, cpu
    got, times, wall, cpu = asyncio.run(run())
    index_of = {u: i for i, u in enumerate(urls)}
    flags = [None if m is None else index_of.get(m.duplicate_of, -1) for m in got]
    others = sum(m is not None and not m.duplicate_of.startswith(f"https://{host}/")
                 for m in got)
    kept = [i for i, m in enumerate(got) if m is None]
    queue.put(dict(host=host, startup=startup, loaded=loaded, wall=wall, cpu=cpu,
                   times=times, flags=flags, kept=kept, others=others,
                   replica_bytes=backend.nbytes, replica_pages=len(backend)))


def fleet_run(srv, pages, procs: int):
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(procs + 1)
    queue = ctx.Queue()
    hosts = ["real.example"] if procs == 1 else [f"p{i}.example" for i in range(procs)]
    ps = [ctx.Process(target=fleet_process, args=(srv.url, pages, h, barrier, queue))
          for h in hosts]
    for p in ps:
        p.start()
    barrier.wait(timeout=3600)
    net0 = srv.net_bytes()
    t0 = time.perf_counter()
    results = [queue.get(timeout=CHECK_TIMEOUT + 600) for _ in ps]
    wall = time.perf_counter() - t0
    net = srv.net_bytes() - net0
    for p in ps:
        p.join()
    return results, wall, net


# ----------------------------------------------------------------- report
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="10^5 pages only")
    ap.add_argument("--n", default=None, help="index sizes, comma-separated (1e6,1e7)")
    ap.add_argument("--procs", default="1,4", help="processes at once, comma-separated")
    args = ap.parse_args()
    sizes = [int(float(x)) for x in (args.n or ("1e5" if args.quick else "1e5,1e6,1e7"))
             .split(",")]
    procs = [int(x) for x in args.procs.split(",")]
    pages = real_pages()
    n_spot = sum(s is not None for s, _, _ in pages)
    srv = Server()
    import redis as _r
    print(f"# python benchmarks/bench_redis.py {' '.join(sys.argv[1:])}")
    print(f"# default settings (distance {DEFAULT_DISTANCE}, min_similarity "
          f"{DEFAULT_MIN_SIMILARITY}, {SimdupConfig().probes_per_key} probes per key, "
          f"{SimdupConfig().bands} sketch bands); "
          f"{n_spot} spotsigs-dev + {len(pages) - n_spot} distractors-dragnet pages; "
          f"{CONCURRENCY} checks in flight per process; cores {os.cpu_count()}")
    print(f"# redis-server {srv.client.info('server')['redis_version']}, "
          f"redis-py {_r.__version__}")
    try:
        for n in sizes:
            srv.client.flushall()
            before = srv.used_memory()
            fill_s = fill_log(srv, n)
            per_page = (srv.used_memory() - before) / n
            print(f"\n## {n:,} unrelated pages in the index (filled in {fill_s:.0f} s)")
            print(f"Redis used_memory: {per_page:.1f} bytes per page, URLs included "
                  f"(~{len('https://bg.example/') + len(str(n // 2))} bytes each)")
            mflags, mtimes, mbytes = memory_run(pages, n)
            mp_, mr, _ = score(pages, mflags)
            mrate = len(pages) / mtimes.sum()
            print(f"memory index: {mrate:,.0f} look-ups/s, median {np.median(mtimes) * 1e3:.2f} "
                  f"ms, p99 {np.percentile(mtimes, 99) * 1e3:.2f} ms, {mbytes:.0f} bytes per "
                  f"page, P {mp_:.3f} R {mr:.3f}")
            print(f"{'procs':>5} {'checks/s/proc':>14} {'total/s':>9} {'x memory':>9} "
                  f"{'median ms':>10} {'p99 ms':>8} {'B/check':>8} {'replica B/page':>15} "
                  f"{'start-up s':>11} {'kept once':>10} {'P':>6} {'R':>6}")
            for p in procs:
                srv.client.eval("return 1", 0)
                results, wall, net = fleet_run(srv, pages, p)
                rates = [len(pages) / r["wall"] for r in results]
                times = np.concatenate([r["times"] for r in results])
                total = p * len(pages) / max(r["wall"] for r in results)
                if p == 1:
                    pp, rr, _ = score(pages, results[0]["flags"])
                    once = "-"
                    differ = sum((a is None) != (b is None)
                                 for a, b in zip(results[0]["flags"], mflags))
                    other = sum(a is not None and b is not None and a != b
                                for a, b in zip(results[0]["flags"], mflags))
                    same = f"verdicts unlike memory: {differ}, other page named: {other}"
                else:
                    kept = [set(r["kept"]) for r in results]
                    # each real page: kept by at most one process, and by none
                    # when it matched a page of the index before
                    counts = np.zeros(len(pages), int)
                    for k in kept:
                        counts[list(k)] += 1
                    once = f"{int((counts <= 1).sum())}/{len(pages)}"
                    pp = rr = float("nan")
                    same = ""
                print(f"{p:>5} {min(rates):>7,.0f}-{max(rates):<6,.0f} {total:>9,.0f} "
                      f"{min(rates) / mrate:>8.2f}x {np.median(times) * 1e3:>10.2f} "
                      f"{np.percentile(times, 99) * 1e3:>8.2f} {net / (p * len(pages)):>8,.0f} "
                      f"{max(r['replica_bytes'] / r['replica_pages'] for r in results):>15.0f} "
                      f"{max(r['startup'] for r in results):>11.1f} {once:>10} "
                      f"{pp:>6.3f} {rr:>6.3f} {same}", flush=True)
                # the next run starts from the same n pages
                srv.client.flushall()
                fill_log(srv, n)
    finally:
        srv.close()


if __name__ == "__main__":
    main()
