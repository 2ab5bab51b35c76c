"""Instructions per page of the downloader middleware alone, for one checkout or two.

The first pages of bench_crawl's site (the example project's, built from
../shared/data) become Scrapy responses whose lxml trees are built first, as
the spider's parse would build them; the add-on's middleware (tag mode, URL
rules on) then checks them in order, as a crawl does. Under valgrind's
cachegrind, the instructions of checking the first N responses less those of
checking the first N/2 (the same set-up in both), divided by N/2, are the
middleware's instructions per page. A crawl's own count moves by about 1%
from run to run; this one does not, so it shows changes of the plugin's own
work of a few percent. ``--against PATH``: another checkout of the project
(its extensions built in place), measured in the same run.

    python benchmarks/bench_middleware.py --pages 300 [--against /path/to/old/checkout]
"""
from __future__ import annotations

import argparse
import os
import pickle
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SETTINGS = {"SIMDUP_ENABLED": True, "SIMDUP_ACTION": "tag", "SIMDUP_URL_RULES": True,
            "SIMDUP_LOG_INTERVAL": 0, "LOG_LEVEL": "WARNING"}


def child(repo: str, pages_path: str, check: int) -> None:
    """Build the responses of every page in ``pages_path``; check the first ``check``."""
    sys.path.insert(0, repo)
    import asyncio

    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.http import HtmlResponse, Request
    from scrapy.statscollectors import MemoryStatsCollector
    from scrapy.utils.log import configure_logging

    import scrapy_simdup
    from scrapy_simdup import SimdupDownloaderMiddleware

    if not scrapy_simdup.__file__.startswith(os.path.abspath(repo)):
        sys.exit(f"scrapy_simdup came from {scrapy_simdup.__file__}, not {repo}")
    configure_logging({"LOG_LEVEL": "WARNING"})
    with open(pages_path, "rb") as f:
        pages = pickle.load(f)
    checks = []
    for url, html in pages:
        request = Request(url)
        response = HtmlResponse(url, body=html, request=request,
                                headers={b"Content-Type": b"text/html; charset=utf-8"})
        _ = response.selector.root, response.encoding   # the spider's parse, done first
        checks.append((request, response))
    crawler = Crawler(Spider, SETTINGS)
    crawler.stats = MemoryStatsCollector(crawler)
    middleware = SimdupDownloaderMiddleware.from_crawler(crawler)

    async def run() -> None:
        for request, response in checks[:check]:
            await middleware.process_response(request, response)

    asyncio.run(run())


def count(repo: Path, pages_path: str, check: int) -> int:
    """Instructions of a child that checks the first ``check`` pages (cachegrind)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg")
        subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no",
                        f"--cachegrind-out-file={out}", sys.executable, __file__, "--child",
                        str(repo), "--pages-file", pages_path, "--check", str(check)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(out) as f:
            return next(int(line.split()[1]) for line in f if line.startswith("summary:"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=300, help="N: pages of the site used")
    parser.add_argument("--against", type=Path, default=None,
                        help="another checkout of the project, measured the same way")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--pages-file", help=argparse.SUPPRESS)
    parser.add_argument("--check", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.pages_file, args.check)
        return
    if shutil.which("valgrind") is None:
        sys.exit("bench_middleware needs valgrind (apt-get install valgrind)")
    sys.path.insert(0, str(REPO / "example_project"))
    sys.path.insert(0, str(HERE))
    from _data import DATA
    from news.site import build_site  # the example project's site

    os.environ.setdefault("SIMDUP_DATA", str(DATA))
    pages = sorted(build_site(half="all"), key=lambda p: p.path)[:args.pages]
    n, half = len(pages), len(pages) // 2
    import scrapy
    print(f"{n} pages of the bench_crawl site; Python {platform.python_version()}, "
          f"Scrapy {scrapy.__version__}")
    repos = [REPO] + ([args.against.resolve()] if args.against else [])
    with tempfile.NamedTemporaryFile(suffix=".pickle", delete=False) as f:
        pickle.dump([("http://127.0.0.1:8000" + p.path, p.html) for p in pages], f)
        pages_path = f.name
    try:
        per_page = []
        for repo in repos:
            small, large = count(repo, pages_path, half), count(repo, pages_path, n)
            per_page.append((large - small) / (n - half))
            print(f"  {str(repo):40s} {large:,} instructions checking {n} pages, {small:,} "
                  f"checking {half}: {per_page[-1] / 1e6:.3f} M per page", flush=True)
        if len(per_page) == 2:
            print(f"this checkout / {args.against}: {per_page[0] / per_page[1]:.3f}")
    finally:
        os.unlink(pages_path)


if __name__ == "__main__":
    main()
