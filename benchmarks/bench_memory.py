"""Memory per checked page in a long crawl: the process's RSS with the plugin minus without.

    .venv/bin/python benchmarks/bench_memory.py [--pages 100000] [--bands 12]

Each mode runs in a fresh child process, which builds ``--pages`` responses of
distinct synthetic articles (``bench_chance``'s Zipf-vocabulary text in a news
template, a 70-odd-character URL each, one page in four a near-duplicate of an
earlier one) and hands each to the downloader middleware as Scrapy's engine
does (``process_response`` of ``SimdupDownloaderMiddleware.from_crawler``;
``SIMDUP_ACTION = "tag"`` so every page goes on). ``off`` builds the same
responses and drops them. The child reports its RSS after a warm-up of 20,000
pages and at the end (``/proc/self/statm``); the figure is (end - warm-up) /
pages, with the plugin minus without. With ``--dir`` the crawl also writes
batch files (``SIMDUP_DIR``): the writer holds up to ``SIMDUP_BATCH_SIZE``
pages between flushes, a bounded share. The warm-up mark is read once the
allocator has handed back the memory it holds free (glibc's ``malloc_trim``);
the end mark both as the process holds it and after the same trim (what is
left is what the live objects take, without fragmentation). ``--bands B``
sets ``SIMDUP_BANDS`` in the crawl.

Target: at most 150 bytes per checked page, URLs included.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

WARM = 20_000


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def trimmed_rss() -> int:
    """RSS once the allocator has handed back what it holds free (glibc's
    ``malloc_trim``): what the live objects take, without fragmentation."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    return rss()


def pages(n, seed=5):
    """(url, html) of n pages: distinct articles, one in four a near-duplicate
    of a recent one. Each article is made again from its own seed when a copy
    needs it, so the generator holds nothing that grows."""
    from _workload import Zipf
    from bench_chance import STOP, _words
    words, zipf, stop = _words(), Zipf(), np.array(STOP)

    def body(j):
        rng = np.random.default_rng((seed, j))
        k = int(rng.integers(150, 700))
        tokens = words[zipf.sample(rng, k).astype(np.int64)]
        is_stop = rng.random(k) < 0.3
        tokens[is_stop] = stop[rng.integers(0, len(stop), int(is_stop.sum()))]
        return [" ".join(tokens[i:i + 18]) + "." for i in range(0, k, 18)]

    rng = np.random.default_rng(seed)
    for i in range(n):
        if i and rng.random() < 0.25:       # a copy of a recent page, one sentence changed
            text = body(int(rng.integers(max(0, i - 500), i)))
            text[int(rng.integers(len(text)))] = "updated " + text[0]
        else:
            text = body(i)
        slug = "-".join(words[zipf.sample(rng, 5).astype(np.int64)])[:40]
        url = f"https://www.example-news.com/2026/11/{1 + i % 28:02d}/world/{slug}-{i}.html"
        yield url, ("<html><head><title>" + text[0][:60] + "</title></head><body><nav>Home | "
                    "World | Business</nav><article><h1>" + text[0][:60] + "</h1><p>"
                    + "</p><p>".join(text) + "</p></article><footer>(c) Example News</footer>"
                    "</body></html>")


def child(mode: str, n: int, out: str, directory: str | None, bands: int | None) -> None:
    from scrapy.http import HtmlResponse, Request

    middleware = None
    if mode == "on":
        from scrapy.utils.test import get_crawler

        from scrapy_simdup.integration.middleware import SimdupDownloaderMiddleware
        settings = {"SIMDUP_ENABLED": True, "SIMDUP_ACTION": "tag", "SIMDUP_LOG_INTERVAL": 0,
                    "SIMDUP_URL_RULES": False}
        if directory:
            settings["SIMDUP_DIR"] = directory
        if bands is not None:
            settings["SIMDUP_BANDS"] = bands
        crawler = get_crawler(settings_dict=settings)
        middleware = SimdupDownloaderMiddleware.from_crawler(crawler)
    loop = asyncio.new_event_loop()
    marks = {}
    t0 = time.perf_counter()
    # both marks are taken inside the loop: the page generator's own tables
    # are freed when it ends, which would read as the crawl shrinking
    for i, (url, html) in enumerate(pages(n)):
        if i == WARM:
            marks["warm"] = trimmed_rss()
        elif i == n - 1:
            marks["end"] = rss()
            marks["end_trimmed"] = trimmed_rss()
        request = Request(url)
        response = HtmlResponse(url, body=html.encode(), encoding="utf-8", request=request)
        if middleware is not None:
            loop.run_until_complete(middleware.process_response(request, response))
    stats = {}
    if middleware is not None:
        stats = {k: v for k, v in middleware.stats.get_stats().items()
                 if isinstance(v, (int, float))}
    Path(out).write_text(json.dumps({"marks": marks, "seconds": time.perf_counter() - t0,
                                     "stats": stats}))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pages", type=int, default=100_000)
    ap.add_argument("--dir", action="store_true", help="also write batch files (SIMDUP_DIR)")
    ap.add_argument("--bands", type=int, default=None, help="SIMDUP_BANDS of the crawl")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--directory", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args.child, args.pages, args.out, args.directory, args.bands)
    print(f"# run {time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime())} on {os.cpu_count()} cores, "
          f"{args.pages:,} pages (RSS measured after {WARM:,})")
    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("off", "on"):
            out = os.path.join(tmp, f"{mode}.json")
            cmd = [sys.executable, __file__, "--child", mode, "--pages", str(args.pages),
                   "--out", out]
            if args.dir:
                cmd += ["--directory", os.path.join(tmp, "simdup")]
            if args.bands is not None:
                cmd += ["--bands", str(args.bands)]
            subprocess.run(cmd, check=True)
            result[mode] = json.loads(Path(out).read_text())
            m = result[mode]["marks"]
            print(f"{mode:>4}: RSS {m['warm'] / 2**20:7.1f} MiB after warm-up, "
                  f"{m['end'] / 2**20:7.1f} MiB at the end: "
                  f"{(m['end'] - m['warm']) / (args.pages - WARM):7.1f} bytes a page; "
                  f"trimmed {(m['end_trimmed'] - m['warm']) / (args.pages - WARM):7.1f}  "
                  f"({result[mode]['seconds']:.0f} s)", flush=True)
    per, trimmed = ({k: (v["marks"]["end" + t] - v["marks"]["warm"]) / (args.pages - WARM)
                     for k, v in result.items()} for t in ("", "_trimmed"))
    stats = result["on"]["stats"]
    print(f"plugin: {per['on'] - per['off']:.1f} bytes per checked page (with minus without); "
          f"{trimmed['on'] - trimmed['off']:.1f} once the allocator has trimmed its free memory; "
          f"checked {stats.get('simdup/checked', 0):,}, duplicates "
          f"{stats.get('simdup/duplicates', 0):,}, index {stats.get('simdup/index_size', 0):,}")
    print(f"target <= 150 bytes per checked page: "
          f"{'PASS' if per['on'] - per['off'] <= 150 else 'FAIL'}")


if __name__ == "__main__":
    main()
