"""CPU cost of scrapy-simdup in a real crawl: the same crawl with the plugin on and off.

A local site of a few thousand real and near-duplicate pages (the example
project's site, built from ../shared/data) is served by this process on
127.0.0.1; each crawl runs in a fresh child process (Scrapy's default asyncio
reactor) with a spider that reads the title and the links of every page. The
child reports its own CPU time (user + system, from spider open to spider
close) per page downloaded; the server's CPU is not counted.

Modes: ``off`` (no plugin), ``on`` (``ADDONS`` one-liner, ``SIMDUP_ACTION =
"tag"``: every page still reaches the spider, so both crawls do the same
spider work and the difference is the plugin's cost) and ``on-drop`` (the
default action: duplicates never reach the spider; cheaper per page, shown for
information). A fourth mode, ``tree-only``, runs no plugin but a downloader
middleware that only builds ``response.selector`` at the plugin's position,
which the spider then reuses: it measures what moving the page's parse from
the callback to a downloader middleware costs by itself (the features issue
asks the plugin to reuse that tree instead of parsing twice). A fifth,
``control``, is the off crawl again: its ratio to the off crawl beside it
shows how far two identical crawls differ on this machine today. Crawls alternate
and the minimum over ``--repeat`` runs is kept, to damp the noise of a shared
machine.

    python benchmarks/bench_crawl.py            # all pages, 3 repeats
    python benchmarks/bench_crawl.py --quick    # 300 pages, 1 repeat
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def child(args) -> None:
    """One crawl; writes {"pages", "cpu", "wall", "stats"} to args.out."""
    import scrapy
    from scrapy.crawler import CrawlerProcess

    with open(args.urls) as f:
        urls = json.load(f)
    settings = {"LOG_LEVEL": "WARNING", "TELNETCONSOLE_ENABLED": False, "LOGSTATS_INTERVAL": 0,
                "ROBOTSTXT_OBEY": False, "CONCURRENT_REQUESTS": 16,
                "CONCURRENT_REQUESTS_PER_DOMAIN": 16, "DOWNLOAD_DELAY": 0}
    if args.child in ("on", "on-drop"):
        settings.update({"ADDONS": {"scrapy_simdup.Addon": 0}, "SIMDUP_LOG_INTERVAL": 0,
                         "SIMDUP_ACTION": "tag" if args.child == "on" else "drop",
                         # every page is a start request here (the spider yields the URL list)
                         "SIMDUP_DROP_START_REQUESTS": True,
                         "ITEM_PIPELINES": {"scrapy_simdup.SimdupPipeline": None}})
    if args.child == "tree-only":
        from scrapy.http import HtmlResponse

        from scrapy_simdup.integration.addon import MIDDLEWARE_PRIORITY

        class TreeOnlyMiddleware:
            def process_response(self, request, response):
                if isinstance(response, HtmlResponse):
                    _ = response.selector  # parse now; the spider reuses the cached tree
                return response

        settings["DOWNLOADER_MIDDLEWARES"] = {TreeOnlyMiddleware: MIDDLEWARE_PRIORITY}
    marks = {}

    class BenchSpider(scrapy.Spider):
        name = "bench"

        async def start(self):
            for url in urls:
                yield scrapy.Request(url, callback=self.parse, errback=self.failed)

        def parse(self, response):
            links = response.css("a::attr(href)").getall()
            yield {"url": response.url, "title": response.css("title::text").get(),
                   "links": len(links)}

        def failed(self, failure):
            pass

    def opened(spider):
        marks["cpu0"], marks["wall0"] = time.process_time(), time.perf_counter()
        marks["ru0"] = resource.getrusage(resource.RUSAGE_SELF)

    def closed(spider, reason):
        marks["cpu1"], marks["wall1"] = time.process_time(), time.perf_counter()
        marks["ru1"] = resource.getrusage(resource.RUSAGE_SELF)

    process = CrawlerProcess(settings)
    crawler = process.create_crawler(BenchSpider)
    crawler.signals.connect(opened, signal=scrapy.signals.spider_opened)
    crawler.signals.connect(closed, signal=scrapy.signals.spider_closed)
    process.crawl(crawler)
    process.start()
    stats = crawler.stats.get_stats()
    logstats = getattr(crawler, "_simdup_logstats", None)  # the plugin's own timers
    if logstats is not None and logstats.lookups["pages"]:
        n = logstats.lookups["pages"]
        marks["fp"] = logstats.fingerprint_seconds["pages"] / n
        marks["lookup"] = logstats.lookup_seconds["pages"] / n
    ru0, ru1 = marks["ru0"], marks["ru1"]
    result = {"fp": marks.get("fp"), "lookup": marks.get("lookup"),
              "pages": stats.get("response_received_count", 0),
              "cpu": marks["cpu1"] - marks["cpu0"], "wall": marks["wall1"] - marks["wall0"],
              "sys": ru1.ru_stime - ru0.ru_stime, "faults": ru1.ru_minflt - ru0.ru_minflt,
              "stats": {k: v for k, v in stats.items() if k.startswith("simdup/")}}
    with open(args.out, "w") as f:
        json.dump(result, f)


def median_interval(values: list[float], level: float = 0.95, draws: int = 10_000,
                    seed: int = 1) -> tuple[float, float]:
    """A bootstrap interval of the median of ``values``: how far the median of
    this many rounds moves with the noise of a shared machine (see the
    ``control`` mode). Rounds of one run share the machine's drift, so runs
    made at other times spread further than this."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values)))
                     for _ in range(draws))
    cut = int(draws * (1 - level) / 2)
    return medians[cut], medians[draws - 1 - cut]


def run_children(modes: list[str], urls_path: str) -> list[dict]:
    """Crawl once in each of ``modes`` at the same time (one process each)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    outs, procs = [], []
    for mode in modes:
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
            outs.append(tmp.name)
        procs.append(subprocess.Popen([sys.executable, __file__, "--child", mode, "--urls",
                                       urls_path, "--out", outs[-1]], env=env))
    results = []
    for proc, out in zip(procs, outs):
        if proc.wait():
            raise subprocess.CalledProcessError(proc.returncode, proc.args)
        with open(out) as f:
            results.append(json.load(f))
        os.unlink(out)
    return results


def count_instructions(mode: str, urls: list[str], n: int) -> int:
    """Instructions executed by a crawl of ``urls[:n]`` in ``mode`` (valgrind's
    cachegrind: deterministic, whatever else the machine runs)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    with tempfile.TemporaryDirectory() as tmp:
        urls_path, out, counts = (os.path.join(tmp, name) for name in ("urls.json", "out", "cg"))
        with open(urls_path, "w") as f:
            json.dump(urls[:n], f)
        subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no",
                        f"--cachegrind-out-file={counts}", sys.executable, __file__, "--child",
                        mode, "--urls", urls_path, "--out", out],
                       check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(counts) as f:
            return next(int(line.split()[1]) for line in f if line.startswith("summary:"))


def instructions(urls: list[str], n: int) -> None:
    """Instructions per page with and without the plugin: the difference of a
    crawl of ``n`` pages and one of ``n // 2`` (start-up cancels out)."""
    if shutil.which("valgrind") is None:
        sys.exit("--instructions needs valgrind (apt-get install valgrind)")
    half = n // 2
    per_page = {}
    for mode in ("off", "on"):
        small, large = (count_instructions(mode, urls, k) for k in (half, n))
        per_page[mode] = (large - small) / (n - half)
        print(f"  {mode:3s}: {large:,} instructions for {n} pages, {small:,} for {half}: "
              f"{per_page[mode] / 1e6:.2f} M per page", flush=True)
    print(f"instructions per page, on/off (tag mode): {per_page['on'] / per_page['off']:.3f} "
          f"(the plugin: {(per_page['on'] - per_page['off']) / 1e6:.2f} M per page)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="300 pages, 1 repeat")
    parser.add_argument("--pages", type=int, default=None, help="crawl the first N pages")
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument("--instructions", type=int, metavar="N", default=None,
                        help="instead of timing: count the instructions per page of N and "
                             "N/2-page crawls under valgrind, off and on (slow: about a "
                             "minute per 100 pages; unmoved by the machine's other work)")
    parser.add_argument("--together", action="store_true",
                        help="run each crawl of a round at the same time as an off crawl, "
                             "one per core, so that the two meet the same state of a shared "
                             "machine")
    parser.add_argument("--modes", default="off,on,on-drop,tree-only",
                        help="crawls of each round, in order (off and on are needed for the "
                             "ratio; the order alternates from one round to the next)")
    parser.add_argument("--child", choices=("off", "on", "on-drop", "tree-only", "control"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--urls", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return

    sys.path.insert(0, str(REPO / "example_project"))
    sys.path.insert(0, str(REPO / "benchmarks"))
    from _data import DATA
    from news.site import SiteServer, build_site  # the example project's site

    # all the shared real pages (a few thousand site pages), not the example's own subset
    os.environ.setdefault("SIMDUP_DATA", str(DATA))

    n_pages = args.pages or (300 if args.quick else None)
    repeat = args.repeat or (1 if args.quick else 3)
    t0 = time.perf_counter()
    pages = build_site(half="all")
    pages = sorted(pages, key=lambda p: p.path)
    if n_pages:
        pages = pages[:n_pages]
    server = SiteServer(pages)
    urls = [server.base_url + p.path for p in pages]
    size_mb = sum(len(p.html) for p in pages) / 1e6
    print(f"site: {len(pages)} pages, {size_mb:.0f} MB of HTML, {len(set(p.cluster_id for p in pages))} "
          f"clusters (built in {time.perf_counter() - t0:.1f} s)")
    import scrapy
    print(f"Python {platform.python_version()}, Scrapy {scrapy.__version__}, {os.cpu_count()} CPUs")
    if args.instructions:
        try:
            instructions(urls, args.instructions)
        finally:
            server.close()
        return
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(urls, f)
        urls_path = f.name
    best: dict[str, dict] = {}
    modes = [m for m in args.modes.split(",") if m]
    if not {"off", "on"} <= set(modes) or \
            not set(modes) <= {"off", "on", "on-drop", "tree-only", "control"}:
        parser.error("--modes: off and on, and any of on-drop, tree-only and control")
    # per mode, the ratio of each crawl's CPU to the off crawl it is paired with
    # (the one of its round, or with --together the one beside it)
    pairs: dict[str, list[float]] = {mode: [] for mode in modes if mode != "off"}

    def record(r: int, mode: str, res: dict) -> None:
        per_page = res["cpu"] / max(res["pages"], 1)
        print(f"  run {r + 1} {mode:8s} pages {res['pages']:5d}  cpu {res['cpu']:7.2f} s  "
              f"(sys {res['sys']:5.2f} s, {res['faults'] / max(res['pages'], 1):6.1f} "
              f"page faults/page)  wall {res['wall']:6.2f} s  "
              f"cpu/page {1e3 * per_page:6.3f} ms", flush=True)
        res["per_page"] = per_page
        if mode not in best or per_page < best[mode]["per_page"]:
            best[mode] = res

    try:
        for r in range(repeat):
            # reversed every other round: a drift of the machine's speed over a
            # round favours neither crawl
            others = [m for m in modes if m != "off"][::1 if r % 2 == 0 else -1]
            if args.together:
                for mode in others:
                    off, res = run_children(["off", mode], urls_path)
                    record(r, "off", off)
                    record(r, mode, res)
                    pairs[mode].append(res["cpu"] / off["cpu"])
                continue
            runs = {}
            for mode in (["off"] + others if r % 2 == 0 else others + ["off"]):
                runs[mode] = run_children([mode], urls_path)[0]
                record(r, mode, runs[mode])
            for mode in others:
                pairs[mode].append(runs[mode]["cpu"] / runs["off"]["cpu"])
    finally:
        server.close()
        os.unlink(urls_path)
    off, on = best["off"], best["on"]
    ratio = on["per_page"] / off["per_page"]
    print()
    print(f"CPU time per page (min of {repeat}), crawler process only:")
    print(f"  plugin off                : {1e3 * off['per_page']:.3f} ms/page ({off['pages']} pages)")
    print(f"  plugin on  (tag, same work): {1e3 * on['per_page']:.3f} ms/page ({on['pages']} pages)")
    drop = best.get("on-drop")
    if drop is not None:
        downloaded = drop["stats"].get("simdup/checked", 0) + sum(
            v for k, v in drop["stats"].items() if k.startswith("simdup/skipped/"))
        drop_per_page = drop["cpu"] / max(downloaded, 1)
        print(f"  plugin on  (drop, default): {1e3 * drop_per_page:.3f} ms per downloaded page "
              f"({downloaded} downloaded, {drop['pages']} reach the spider)")
    print(f"ratio on/off of the minima (tag, same spider work): {ratio:.3f}")
    if drop is not None:
        print(f"ratio on/off of the minima (drop, per downloaded page): "
              f"{drop_per_page / off['per_page']:.3f}")
    tree = best.get("tree-only")
    if tree is not None:
        print(f"tree-only (no plugin; a middleware builds the tree the spider reuses): "
              f"{1e3 * tree['per_page']:.3f} ms/page, ratio to off "
              f"{tree['per_page'] / off['per_page']:.3f}: what parsing before the callback "
              f"costs by itself (compare the medians below)")
    # Runs of one round are back to back, so a round's on/off ratio shares the
    # machine's state of the moment; the median over rounds is the figure least
    # moved by a slow or fast phase of this shared machine (the minima above
    # may come from different phases).
    print("per-round ratios (each crawl / off of the same round): " + "; ".join(
        f"{mode} " + ", ".join(f"{r:.3f}" for r in rs) for mode, rs in pairs.items()))
    tag = statistics.median(pairs["on"])
    print("median of the per-round ratios (95% bootstrap interval): " + ", ".join(
        f"{mode} {statistics.median(rs):.3f} ({'-'.join(f'{v:.3f}' for v in median_interval(rs))})"
        for mode, rs in pairs.items()))
    low, high = median_interval(pairs["on"])
    print(f"crawl CPU ratio, tag mode (median of {repeat} rounds): {tag:.3f}, 95% interval "
          f"{low:.3f}-{high:.3f}  (target <= 1.15: {'OK' if tag <= 1.15 else 'MISSED'})")
    if on.get("fp") is not None:
        print(f"inside the middleware (tag run, per checked page): fingerprint "
              f"{1e3 * on['fp']:.3f} ms (includes building the lxml tree the spider then "
              f"reuses), index look-up + add {1e3 * on['lookup']:.3f} ms")
    stats = on["stats"]
    print(f"plugin stats (tag run): checked {stats.get('simdup/checked')}, duplicates "
          f"{stats.get('simdup/duplicates')}, index size {stats.get('simdup/index_size')}")


if __name__ == "__main__":
    main()
