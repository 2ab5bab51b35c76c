"""Shared index on Redis (two keys, verified): cost and recall by probe budget.

    python benchmarks/bench_redis.py            # 1M unrelated pages + the real pages
    python benchmarks/bench_redis.py --quick    # 100k, for development

Starts its own ``redis-server`` (Debian package) on a free loopback port. For
each probe budget K (buckets per key and look-up, ``SIMDUP_MAX_PROBES``), on a
fresh index at the default distance (22), min_similarity (0.15) and header
bits (t = 14):

1. *Fill* with ``n`` unrelated pages (uniform random keys, random sketches:
   what the bucket reads cost does not depend on their content), checked at
   K = 1 (the fill is not what is measured).
2. *Real pages*: spotsigs-dev (34 stories) mixed with distractors-dragnet,
   fingerprinted by ``Fingerprinter()``, in the fixed order of
   ``random.Random(7).shuffle``, checked in batches of ``--batch`` pages
   (a crawl with many responses in flight coalesces about that many): checks
   per second from one process, bytes Redis sent per check
   (``INFO stats`` ``total_net_output_bytes``), and the flags: a spotsigs page
   flagged as a duplicate of a page of the same story is correct; recall is
   over the spotsigs pages whose story was met before, precision over every
   flag (a distractor flagged as a copy of another distractor counts against
   it, so this precision is lower than eval_real's).

Also: Redis ``used_memory`` per stored page after the fill (the 54-byte
records, the URL lists apart, and Redis' per-key overhead), and the
in-memory ``VerifiedIndex`` at the same t and K on the same pages, whose
verdicts the Redis index repeats (tests/test_redis_verified.py).
"""
from __future__ import annotations

import argparse
import asyncio
import gzip
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
from scrapy_simdup.index.verified import VerifiedIndex
from tests.data_root import DATA_ROOT

T = 14
FILL_BATCH = 2048


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
def real_pages():
    """[(story or None, url, Page)] in the fixed shuffled order."""
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
        out.append((story, f"https://real.example/{path.parent.name}/{path.name}",
                    Page(f.value, np.asarray(f.W), f.value2, np.asarray(f.W2), f.sketch)))
    random.Random(7).shuffle(out)
    return out


def unrelated_pages(n: int, seed: int):
    rng = np.random.default_rng(seed)
    v1 = rng.integers(0, 2**64, n, dtype=np.uint64, endpoint=False)
    v2 = rng.integers(0, 2**64, n, dtype=np.uint64, endpoint=False)
    sk = rng.integers(0, 256, (n, 32), dtype=np.uint8)
    W = np.ones(64)
    return [Page(int(a), W, int(b), W, s.tobytes()) for a, b, s in zip(v1, v2, sk)]


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
            correct += story is not None and pages[j][0] == story
        if story is not None:
            seen.add(story)
    return correct / max(flags, 1), correct / max(need, 1), flags


# ----------------------------------------------------------------- runs
async def fill(srv, base, bg):
    be = RedisBackend.open(srv.url, base, header_bits=T, max_probes=1)
    for a in range(0, len(bg), FILL_BATCH):
        await be.check_and_add_many(bg[a:a + FILL_BATCH],
                                    [f"https://bg.example/{i}"
                                     for i in range(a, min(a + FILL_BATCH, len(bg)))])
    await be.close()


async def real_run(srv, base, pages, k, batch):
    be = RedisBackend.open(srv.url, base, header_bits=T, max_probes=k)
    index_of = {url: i for i, (_, url, _) in enumerate(pages)}
    out_before = int(srv.client.info("stats")["total_net_output_bytes"])
    t0 = time.perf_counter()
    got = []
    for a in range(0, len(pages), batch):
        got.extend(await be.check_and_add_many([p for _, _, p in pages[a:a + batch]],
                                               [u for _, u, _ in pages[a:a + batch]]))
    dt = time.perf_counter() - t0
    sent = int(srv.client.info("stats")["total_net_output_bytes"]) - out_before
    probes = be.probes
    await be.close()
    flags = [None if m is None else index_of.get(m.duplicate_of, -1) for m in got]
    return dt, sent, probes, flags


def memory_flags(pages, k, n_bg):
    """The in-memory verified index at the same t and K (no background: its
    verdicts on the real pages do not depend on unrelated pages, up to chance
    matches)."""
    mem = MemoryBackend(VerifiedIndex(distance=DEFAULT_DISTANCE,
                                      min_similarity=DEFAULT_MIN_SIMILARITY,
                                      max_probes=k, header_bits=T))
    got = asyncio.run(mem.check_and_add_many([p for _, _, p in pages], [u for _, u, _ in pages]))
    index_of = {url: i for i, (_, url, _) in enumerate(pages)}
    return [None if m is None else index_of.get(m.duplicate_of, -1) for m in got]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="100k unrelated pages")
    ap.add_argument("--n", type=int, help="unrelated pages in the index")
    ap.add_argument("--batch", type=int, default=64, help="pages per check_and_add_many")
    ap.add_argument("--budgets", default="16,64,256,1024,2048",
                    help="probe budgets per key to measure")
    args = ap.parse_args()
    n = args.n or (100_000 if args.quick else 1_000_000)
    budgets = [int(x) for x in args.budgets.split(",")]
    print(f"# python benchmarks/bench_redis.py {' '.join(sys.argv[1:])}")
    print(f"# distance {DEFAULT_DISTANCE}, min_similarity {DEFAULT_MIN_SIMILARITY}, header bits "
          f"t={T}, {n:,} unrelated pages + the real pages, batches of {args.batch}, "
          f"cores {os.cpu_count()}")
    pages = real_pages()
    n_spot = sum(s is not None for s, _, _ in pages)
    print(f"# real pages: {n_spot} spotsigs-dev + {len(pages) - n_spot} distractors-dragnet")
    bg = unrelated_pages(n, 1)
    srv = Server()
    import redis as _r
    print(f"# redis-server {srv.client.info('server')['redis_version']}, "
          f"redis-py {_r.__version__}")
    try:
        before = srv.used_memory()
        t0 = time.perf_counter()
        asyncio.run(fill(srv, "bench:fill", bg))
        fill_dt = time.perf_counter() - t0
        after = srv.used_memory()
        pipe = srv.client.pipeline(transaction=False)
        ukeys = list(srv.client.scan_iter(match="bench:fill:u:*", count=10_000))
        for key in ukeys:
            pipe.memory_usage(key, samples=0)
        url_mem = int(sum(x or 0 for x in pipe.execute()))
        stored = int(srv.client.get("bench:fill:n"))
        rec = sum(srv.client.strlen(key) for fam in "bc"
                  for key in srv.client.scan_iter(match=f"bench:fill:{fam}:*", count=10_000))
        print(f"\n## memory after filling {stored:,} pages (K = 1, {stored / fill_dt:,.0f} "
              f"checks/s)")
        print(f"records          {rec / stored:6.1f} bytes per page (40 key-1 + 14 key-2)")
        print(f"index in Redis   {(after - before - url_mem) / stored:6.1f} bytes per page "
              f"(used_memory, URL lists apart: with Redis' per-key overhead of "
              f"{3 << T:,} keys)")
        print(f"URL lists        {url_mem / stored:6.1f} bytes per page")
        srv.client.delete(*[k for k in srv.client.scan_iter("bench:fill:*", count=10_000)])

        print(f"\n## real pages on an index of {n:,} unrelated pages, by probe budget K "
              f"(buckets per key and look-up)")
        print(f"{'K':>6} {'checks/s':>10} {'ms/check':>9} {'KB sent/check':>14} "
              f"{'probes/check':>13} {'P':>6} {'R':>6} {'flags':>6}   memory P / R (same t, K)")
        for k in budgets:
            base = f"bench:k{k}"
            asyncio.run(fill(srv, base, bg))
            dt, sent, probes, flags = asyncio.run(real_run(srv, base, pages, k, args.batch))
            p, r, nf = score(pages, flags)
            mp_, mr, _ = score(pages, memory_flags(pages, k, n))
            print(f"{k:>6} {len(pages) / dt:>10,.0f} {dt / len(pages) * 1e3:>9.2f} "
                  f"{sent / len(pages) / 1024:>14,.0f} {probes / len(pages):>13,.0f} "
                  f"{p:>6.3f} {r:>6.3f} {nf:>6}   {mp_:.3f} / {mr:.3f}", flush=True)
            srv.client.flushdb()
    finally:
        srv.close()


if __name__ == "__main__":
    main()
