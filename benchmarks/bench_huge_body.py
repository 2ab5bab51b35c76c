"""A huge compressed body in a real crawl: the plugin's cost with it on and off.

This process serves, on 127.0.0.1, one HTML page sent with
``Content-Encoding: gzip`` whose body inflates to ``--size`` bytes (default
1 GB, below Scrapy's own ``DOWNLOAD_MAXSIZE`` of 1 GiB, which stays at its
default). The gzip stream is generated chunk by chunk into a temporary file
and served from it, so neither the inflated page nor its compressed form is
held in memory here. Each crawl of the page runs in a fresh child process
(Scrapy's default asyncio reactor) with the plugin off, then on (the
``ADDONS`` one-liner, default settings), and reports:

* wall time, from spider open to spider close (download, decompression,
  middlewares, callback);
* the crawl's CPU time (user + system, same span);
* the longest time the reactor was blocked (a 5 ms heartbeat's largest gap:
  Scrapy's decompression and the middlewares run in one go), and the time
  spent in the plugin's middleware alone (two bracketing middlewares at the
  priorities just above and below it);
* the child's peak RSS (``ru_maxrss``).

The plugin reads no more than 8 x ``SIMDUP_MAX_BYTES`` of any body, so its
cost should not grow with the body: the on/off ratios are printed.

    python benchmarks/bench_huge_body.py                 # 1 GB, ~3 GB of RAM
    python benchmarks/bench_huge_body.py --size 100M     # quicker
"""
from __future__ import annotations

import argparse
import http.server
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
HEARTBEAT = 0.005


# ----------------------------------------------------------------- the page

def page_chunks(size: int):
    """The page, ``size`` bytes in all, in chunks of about 1 MiB: an article
    whose numbered sections each hold a heading, two paragraphs and a small
    inline script, as a listing or a live blog grown without bound would."""
    head = (b"<!DOCTYPE html><html><head><meta charset='utf-8'><title>A page without end"
            b"</title></head><body><nav><a href='/'>Home</a></nav><article>\n")
    tail = b"</article></body></html>\n"
    yield head
    left = size - len(head) - len(tail)
    i = 0
    while left > 0:
        parts = []
        n = 0
        while n < (1 << 20):
            section = (f"<section id='s{i}'><h2>Section {i}</h2><p>Section {i} of the report "
                       f"says what the committee found on day {i % 365} about item {i * 7 % 1009} "
                       f"and why it matters to group {i % 97}.</p><p>It goes on to compare it "
                       f"with section {i // 2} and lists {i % 13} open questions.</p><script>"
                       f"window.s{i % 100} = {i};</script></section>\n").encode()
            parts.append(section)
            n += len(section)
            i += 1
        chunk = b"".join(parts)[:left]
        left -= len(chunk)
        yield chunk
    yield tail


def write_gzip(path: Path, size: int) -> int:
    """Write the page gzip-compressed to ``path``, streaming; returns the
    compressed size."""
    compressor = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    total = 0
    with open(path, "wb") as out:
        for chunk in page_chunks(size):
            out.write(compressor.compress(chunk))
            total += len(chunk)
        out.write(compressor.flush())
    assert total == size, (total, size)
    return path.stat().st_size


def serve(path: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    """Serve ``path`` as a gzip-encoded HTML page on 127.0.0.1."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path != "/huge":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(path.stat().st_size))
            self.end_headers()
            with open(path, "rb") as f:
                shutil.copyfileobj(f, self.wfile, 1 << 20)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/huge"


# ----------------------------------------------------------------- one crawl

def child(args) -> None:
    """One crawl of the page; writes its measures as JSON to ``args.out``."""
    import scrapy
    from scrapy.crawler import CrawlerProcess

    from scrapy_simdup.integration.addon import MIDDLEWARE_PRIORITY

    class Before:
        """Runs just before the plugin's process_response (higher priority
        number: closer to the downloader)."""

        def process_response(self, request, response, spider=None):
            request.meta["bench_t0"] = time.perf_counter()
            return response

    class After:
        def process_response(self, request, response, spider=None):
            t0 = request.meta.get("bench_t0")
            if t0 is not None:
                marks["middleware"] = marks.get("middleware", 0.0) + time.perf_counter() - t0
            return response

    settings = {"LOG_LEVEL": "ERROR", "TELNETCONSOLE_ENABLED": False, "LOGSTATS_INTERVAL": 0,
                "ROBOTSTXT_OBEY": False, "DOWNLOAD_TIMEOUT": 600,
                "DOWNLOADER_MIDDLEWARES": {Before: MIDDLEWARE_PRIORITY + 1,
                                           After: MIDDLEWARE_PRIORITY - 1}}
    if args.child == "on":
        settings.update({"ADDONS": {"scrapy_simdup.Addon": 0}, "SIMDUP_LOG_INTERVAL": 0})
    marks: dict = {"stall": 0.0, "items": []}

    class HugeSpider(scrapy.Spider):
        name = "huge"

        async def start(self):
            yield scrapy.Request(args.url, callback=self.parse)

        def parse(self, response):
            marks["items"].append({"bytes": len(response.body),
                                   "simdup": response.meta.get("simdup")})
            yield {"bytes": len(response.body)}

    def beat():
        now = time.perf_counter()
        marks["stall"] = max(marks["stall"], now - marks["last"])
        marks["last"] = now

    def opened(spider):
        # imported once Scrapy has installed its reactor (importing
        # twisted.internet.task first would install the default one)
        from twisted.internet import task

        marks["cpu0"], marks["wall0"] = time.process_time(), time.perf_counter()
        marks["last"] = marks["wall0"]
        marks["heartbeat"] = task.LoopingCall(beat)
        marks["heartbeat"].start(HEARTBEAT, now=False)

    def closed(spider, reason):
        marks["cpu1"], marks["wall1"] = time.process_time(), time.perf_counter()
        if marks["heartbeat"].running:
            marks["heartbeat"].stop()

    process = CrawlerProcess(settings)
    crawler = process.create_crawler(HugeSpider)
    crawler.signals.connect(opened, signal=scrapy.signals.spider_opened)
    crawler.signals.connect(closed, signal=scrapy.signals.spider_closed)
    process.crawl(crawler)
    process.start()
    stats = crawler.stats.get_stats()
    result = {"wall": marks["wall1"] - marks["wall0"], "cpu": marks["cpu1"] - marks["cpu0"],
              "stall": marks["stall"], "middleware": marks.get("middleware"),
              "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
              "items": marks["items"],
              "stats": {k: v for k, v in stats.items()
                        if k.startswith(("simdup/", "httpcompression/", "downloader/response_bytes",
                                         "finish_reason"))}}
    with open(args.out, "w") as f:
        json.dump(result, f, default=str)


def run_child(mode: str, url: str) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
        out = tmp.name
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    try:
        subprocess.run([sys.executable, __file__, "--child", mode, "--url", url, "--out", out],
                       check=True, env=env)
        with open(out) as f:
            return json.load(f)
    finally:
        os.unlink(out)


# ----------------------------------------------------------------- main

def parse_size(text: str) -> int:
    units = {"K": 10**3, "M": 10**6, "G": 10**9}
    text = text.strip().upper()
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=parse_size, default=10**9,
                        help="inflated body size, bytes or with K/M/G (default 1G = 10**9)")
    parser.add_argument("--repeat", type=int, default=1, help="crawls per mode (min kept)")
    parser.add_argument("--child", choices=("off", "on"), help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return

    import scrapy

    from scrapy_simdup.fingerprint.decode import LOOK_FACTOR
    from scrapy_simdup.fingerprint.fingerprinter import DEFAULT_MAX_BYTES

    print(f"Python {platform.python_version()}, Scrapy {scrapy.__version__}, "
          f"{os.cpu_count()} CPUs; SIMDUP_MAX_BYTES {DEFAULT_MAX_BYTES} (default): the plugin "
          f"reads at most {LOOK_FACTOR} x that = {LOOK_FACTOR * DEFAULT_MAX_BYTES / 2**20:.0f} MiB "
          "of a body")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "page.html.gz"
        t0 = time.perf_counter()
        compressed = write_gzip(path, args.size)
        print(f"page: {args.size:,} bytes inflated, {compressed:,} bytes gzip "
              f"(written in {time.perf_counter() - t0:.1f} s)")
        server, url = serve(path)
        best: dict[str, dict] = {}
        try:
            for r in range(args.repeat):
                for mode in ("off", "on"):
                    res = run_child(mode, url)
                    mw = res["middleware"]
                    print(f"  run {r + 1} {mode:3s}  wall {res['wall']:7.2f} s  cpu {res['cpu']:7.2f} s"
                          f"  longest reactor stall {res['stall']:6.2f} s  in the plugin's "
                          f"middleware {mw if mw is None else round(mw, 3)} s  peak RSS "
                          f"{res['peak_rss'] / 1e9:5.2f} GB", flush=True)
                    if mode not in best or res["wall"] < best[mode]["wall"]:
                        best[mode] = res
        finally:
            server.shutdown()
    off, on = best["off"], best["on"]
    for res in (off, on):
        assert res["items"] and res["items"][0]["bytes"] == args.size, res["items"]
    print()
    print(f"{'':28s} {'plugin off':>11s} {'plugin on':>11s} {'on/off':>8s}")
    for key, label, scale, unit in (("wall", "wall time", 1, "s"), ("cpu", "CPU time", 1, "s"),
                                    ("stall", "longest reactor stall", 1, "s"),
                                    ("peak_rss", "peak RSS", 1e-9, "GB")):
        a, b = off[key] * scale, on[key] * scale
        print(f"{label + ' (' + unit + ')':28s} {a:11.2f} {b:11.2f} {b / a:8.2f}")
    print(f"{'in the plugin middleware (s)':28s} {'-':>11s} {on['middleware']:11.3f}")
    print(f"plugin stats: {json.dumps({k: v for k, v in on['stats'].items() if k.startswith('simdup/')})}")
    print(f"the page reached the spider with meta['simdup'] = {on['items'][0]['simdup']}")


if __name__ == "__main__":
    main()
