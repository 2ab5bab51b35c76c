"""How fast the shared index notices a lost Redis, and recovers when it returns.

    .venv/bin/python benchmarks/bench_redis_outage.py [--checks N]

Starts a ``redis-server`` (Debian package) with AOF (``appendfsync always``)
on a free loopback port and opens an index on it, then for each client
timeout (``SIMDUP_REDIS_PARAMS`` ``socket_timeout``/``socket_connect_timeout``):
times checks with Redis up, kills Redis (SIGKILL) and times the checks that
now fail with ``IndexUnavailableError``, restarts it (with its data) and
times the first check that succeeds again (the replica catching up).
Prints seconds and ratios: a failing check against its timeout (how many
timeouts it costs) and a check after the restart against one with Redis up.
The tests only check that a lost Redis gives errors and not a hang; the time
it takes is measured here, where the machine's noise does not fail a build.
"""
from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from redis_server import RedisServer

from scrapy_simdup.exceptions import IndexUnavailableError
from scrapy_simdup.index.backend import Page
from scrapy_simdup.index.redis.backend import RedisBackend
from scrapy_simdup.index.verified import VerifiedIndex


class AofServer(RedisServer):
    """The tests' server, with its data kept across restarts (AOF)."""

    def start(self, timeout=10.0):
        if self.proc is not None and self.proc.poll() is None:
            return self
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "yes", "--appendfsync", "always", "--dir", self.dir,
             "--loglevel", "warning"], stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.ping():
            time.sleep(0.02)
        return self


def page(value: int) -> Page:
    rng = np.random.default_rng(value)
    return Page(int(rng.integers(0, 2**63)), None, int(rng.integers(0, 2**63)), None,
                rng.integers(0, 256, 32, dtype=np.uint8).tobytes())


async def timed_check(backend, value: int) -> tuple[float, bool]:
    """(seconds, failed) of one check-and-add."""
    t0 = time.perf_counter()
    try:
        await backend.check_and_add(page(value), f"https://outage.example/{value}")
        return time.perf_counter() - t0, False
    except IndexUnavailableError:
        return time.perf_counter() - t0, True


async def one_timeout(server: RedisServer, timeout: float, checks: int, base: int) -> dict:
    server.start()
    backend = RedisBackend.open(server.url, f"outage{base}", VerifiedIndex(),
                                params={"socket_timeout": timeout,
                                        "socket_connect_timeout": timeout})
    up = [(await timed_check(backend, base + i))[0] for i in range(checks)]
    server.stop()
    down = [await timed_check(backend, base + 1000 + i) for i in range(3)]
    server.start()
    back, failed_after_restart = [], 0
    for i in range(20):                       # the first success after the restart
        seconds, failed = await timed_check(backend, base + 2000 + i)
        back.append(seconds)
        if not failed:
            break
        failed_after_restart += 1
    size = len(backend)
    await backend.close()
    return {"up": statistics.median(up), "down": [s for s, _ in down],
            "all_failed": all(f for _, f in down), "back": sum(back),
            "retries": failed_after_restart, "kept": size}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checks", type=int, default=50, help="checks timed with Redis up")
    args = ap.parse_args()
    binary = shutil.which("redis-server")
    if binary is None:
        sys.exit("redis-server is not installed (apt-get install redis-server)")
    server = AofServer(binary)
    server.dir = tempfile.mkdtemp(prefix='simdup-outage-')
    try:
        print(f"{'timeout':>8} {'check up':>10} {'failing checks (ms)':>24} {'ratio to timeout':>18}"
              f" {'first check back':>17} {'ratio to up':>12}")
        for i, timeout in enumerate((0.5, 2.0)):
            r = asyncio.run(one_timeout(server, timeout, args.checks, 10_000 * (i + 1)))
            down = ", ".join(f"{1e3 * s:.2f}" for s in r["down"])
            worst = max(r["down"])
            print(f"{timeout:>7.1f}s {1e3 * r['up']:>8.3f}ms {down:>24} {worst / timeout:>17.4f}x"
                  f" {1e3 * r['back']:>15.3f}ms {r['back'] / r['up']:>11.1f}x"
                  + ("" if r["all_failed"] else "  (a check did not fail while Redis was down!)")
                  + (f"  ({r['retries']} failed after the restart)" if r["retries"] else ""))
        print("a killed local Redis refuses connections at once, so a failing check costs "
              "a small fraction of the timeout; an unreachable host would cost about one "
              "connect timeout (ratio ~1x)")
    finally:
        server.close()


if __name__ == "__main__":
    main()
