"""Requests saved by URL rules: the same crawl without rules, with rules, and with ``maybedont``.

A local site is built from real pages (``spotsigs-dev``, whose stories are
syndicated near-duplicates of each other, and ``distractors-dragnet``) and
served by this process on 127.0.0.1 under three ports that stand for three
host names of one site (``www``, ``m`` and the bare host). Every article is
reachable under the URL variants of real sites, in these proportions per
link: canonical 50%, ``utm_*`` 12%, ``sessionid=`` 8%, ``;jsessionid=`` in
the path 6%, ``ref=`` 6%, ``share=`` 6%, the ``m.`` host 8% (whose pages
link ``m.`` URLs in turn: a mirror) and the bare host 4%; each article page
also links its print (``/print/...``) and AMP (``.../amp``) versions. Half
the articles live at ``/story/<slug>``, half at ``/read?id=<n>`` (a content
parameter), listings at ``/section/<s>?page=<p>`` (another one). Every
article page has a sidebar with a calendar link (``/calendar/<y>/<m>``, a
trap: every month is the same near-empty page, with links to the next and
previous months) and a faceted listing link (``/topics?color=&size=&sort=``,
48 facet combinations of one listing).

Each configuration is one real Scrapy crawl (a child process, Scrapy's
default asyncio reactor) from the home page following every link, with the
plugin's add-on in drop mode:

* ``no rules``: ``SIMDUP_URL_RULES = False``;
* ``rules``: ``SIMDUP_URL_RULES = True``, default rule settings;
* ``rules + budget``: the same and ``SIMDUP_PATTERN_BUDGET = 20``;
* ``maybedont``: no rules, ``maybedont.scrapy_middleware.AvoidDupContentMiddleware``
  (PyPI ``maybedont``, its defaults: p > 0.98, 5% exploration, 300 pages
  before it predicts) on every request, at priority 586 so that it sees
  every response before the plugin drops the near-duplicates; with a shim
  for Python 3.11 (``_shim_maybedont``);
* ``maybedont p>0.9``: the same, bolder (``AVOID_DUP_CONTENT_THRESHOLD = 0.9``);
* ``maybedont as is``: as released, without the shim.

The spider marks its navigation pages (the front page and the section
listings) ``dont_simdup``, as the README advises, so that every article
stays reachable through its listing whatever else is dropped; what a
configuration loses is then what it skipped wrongly.

Columns: requests fetched (what the server answered); duplicate fetches
avoided (1 - the near-duplicates the plugin found in this crawl / those it
found without rules); unique pages lost (the pages the ``no rules`` crawl
kept that this crawl neither fetched nor has a near-duplicate of among what
it fetched, by the plugin's own fingerprint and verification); requests per
unique page (requests / pages kept by ``no rules``); trap pages fetched
(calendar and faceted listing).

    python benchmarks/bench_url_rules.py            # 400 articles
    python benchmarks/bench_url_rules.py --quick    # 120 articles
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

DATA = Path(os.environ.get("SIMDUP_DATA", REPO.parent / "shared" / "data"))
SPOT = DATA / "spotsigs-dev"
DIST = DATA / "distractors-dragnet"
RESULTS = HERE / "results" / "bench_url_rules.txt"

SECTIONS = 8
PER_LISTING = 10
VARIANTS = [("canonical", 50), ("utm", 12), ("session", 8), ("jsession", 6), ("ref", 6),
            ("share", 6), ("mobile", 8), ("bare", 4)]
COLORS = ["red", "blue", "green", "black"]
SIZES = ["s", "m", "l", "xl"]
SORTS = ["new", "price", "name"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
_BODY_END = re.compile(rb"</body\s*>", re.I)
_HREF = re.compile(rb"\bhref\s*=", re.I)
_TITLE = re.compile(rb"<title[^>]*>(.*?)</title", re.I | re.S)


# ----------------------------------------------------------------- the site

def load_articles(n: int, seed: int = 31) -> list[dict]:
    """``n`` real pages: spotsigs-dev (syndicated stories) and distractors, interleaved."""
    from lxml import html as lhtml
    spot = sorted(p for d in sorted(SPOT.iterdir()) if d.is_dir()
                  for p in sorted(d.iterdir()) if p.name.endswith(".gz"))
    dist = sorted(p for p in DIST.iterdir() if p.name.endswith(".gz"))
    rng = random.Random(seed)
    picked = rng.sample(spot, min(len(spot), n * 2 // 5))
    picked += rng.sample(dist, n - len(picked))
    rng.shuffle(picked)
    articles = []
    for i, path in enumerate(picked):
        # the page's own links (to hosts of the real web, or relative ones this
        # site does not serve) are taken out: the crawl follows the site's links
        raw = _HREF.sub(b"data-href=", gzip.decompress(path.read_bytes()))
        match = _TITLE.search(raw)
        title = re.sub(r"\s+", " ", match.group(1).decode("latin-1")).strip()[:80] if match else ""
        try:
            doc = lhtml.fromstring(raw)
            for node in doc.xpath("//script|//style|//noscript"):
                node.drop_tree()
            words = doc.text_content().split()
        except Exception:  # noqa: BLE001 (an unparsable page: no snippet)
            words = []
        title = title or " ".join(words[:8]) or f"Article {i}"
        slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:40] or "article"
        articles.append({"raw": raw, "title": re.sub(r"[<>&\"]", " ", title),
                         "snippet": re.sub(r"[<>&\"]", " ", " ".join(
                             words[len(words) // 3:len(words) // 3 + 25])),
                         "slug": f"{slug}-{i}", "source": f"{path.parent.name}/{path.name}"})
    return articles


class Site:
    """The pages, the URL of each variant, and what each URL serves."""

    def __init__(self, articles: list[dict], hosts: dict[str, str]):
        self.articles = articles
        self.hosts = hosts              # "www" / "m" / "bare" -> "127.0.0.1:<port>"
        self.by_slug = {a["slug"]: i for i, a in enumerate(articles)}
        self.section_of = [i % SECTIONS for i in range(len(articles))]
        self.listing = {}               # (section, page) -> [article]
        for s in range(SECTIONS):
            members = [i for i in range(len(articles)) if i % SECTIONS == s]
            for p in range(0, len(members), PER_LISTING):
                self.listing[(s, p // PER_LISTING + 1)] = members[p:p + PER_LISTING]
        products = [a["title"] for a in articles[:30]]
        self.products = products

    # -- URLs ----------------------------------------------------------------
    def article_path(self, n: int) -> tuple[str, str]:
        """(path, query) of article ``n``'s canonical URL."""
        if n % 2 == 0:
            return f"/story/{self.articles[n]['slug']}", ""
        return "/read", f"id={n}"

    def article_url(self, n: int, variant: str, rng: random.Random, host: str = "www") -> str:
        path, query = self.article_path(n)
        params = [query] if query else []
        if variant == "utm":
            params.append(f"utm_source={rng.choice(['feed', 'twitter', 'newsletter'])}"
                          f"&utm_medium={rng.choice(['social', 'email', 'rss'])}"
                          f"&utm_campaign=c{rng.randrange(20)}")
        elif variant == "session":
            params.append(f"sessionid={rng.getrandbits(40):010x}")
        elif variant == "jsession":
            path += f";jsessionid={rng.getrandbits(48):012X}"
        elif variant == "ref":
            params.append(f"ref={rng.choice(['home', 'sidebar', 'related', 'nav'])}")
        elif variant == "share":
            params.append(f"share={rng.choice(['twitter', 'facebook', 'mail'])}")
        elif variant == "print":
            path = "/print" + path
        elif variant == "amp":
            path += "/amp"
        elif variant == "mobile":
            host = "m"
        elif variant == "bare":
            host = "bare" if host == "www" else host
        return f"http://{self.hosts[host]}{path}" + ("?" + "&".join(params) if params else "")

    def link(self, n: int, rng: random.Random, host: str) -> str:
        variant = rng.choices([v for v, _ in VARIANTS], [w for _, w in VARIANTS])[0]
        return self.article_url(n, variant, rng, host)

    # -- resolving a request ---------------------------------------------------------
    def resolve(self, host_name: str, raw_path: str):
        """(content id, page kind, body) of a request, or None (404)."""
        parts = urlsplit(raw_path)
        query = dict(parse_qsl(parts.query))
        segments = [s.split(";", 1)[0] for s in parts.path.split("/")[1:]]
        variant = "plain"
        if segments and segments[0] == "print":
            segments, variant = segments[1:], "print"
        if len(segments) > 1 and segments[-1] == "amp":
            segments, variant = segments[:-1], "amp"
        rng = random.Random(f"{host_name}{raw_path}")
        if segments == [""]:
            return "home", "listing", self.home(host_name, rng)
        if len(segments) == 2 and segments[0] == "story" and segments[1] in self.by_slug:
            n = self.by_slug[segments[1]]
            if n % 2 == 0:
                return f"article-{n}", "article", self.article(n, host_name, variant, rng)
        if segments == ["read"] and query.get("id", "").isdigit():
            n = int(query["id"])
            if n < len(self.articles) and n % 2 == 1:
                return f"article-{n}", "article", self.article(n, host_name, variant, rng)
        if len(segments) == 2 and segments[0] == "section" and segments[1].isdigit():
            key = (int(segments[1]), int(query.get("page", "1") or 1)
                   if query.get("page", "1").isdigit() else 0)
            if key in self.listing:
                return f"section-{key[0]}-{key[1]}", "listing", self.section(key, host_name, rng)
        if len(segments) == 3 and segments[0] == "calendar" and segments[1].isdigit() \
                and segments[2].isdigit() and 1 <= int(segments[2]) <= 12:
            year, month = int(segments[1]), int(segments[2])
            if 1990 <= year <= 2040:
                return f"calendar-{year}-{month}", "trap", self.calendar(year, month, host_name)
        if segments == ["topics"]:
            facets = (query.get("color"), query.get("size"), query.get("sort"))
            return f"topics-{facets}", "trap", self.topics(facets, host_name, rng)
        return None

    def _nav(self, host: str, rng: random.Random) -> str:
        ref = "?ref=nav" if rng.random() < 0.3 else ""
        base = f"http://{self.hosts[host]}"
        links = [f'<a href="{base}/{ref}">Home</a>']
        links += [f'<a href="{base}/section/{s}{ref or "?page=1"}">Section {s}</a>'
                  for s in range(SECTIONS)]
        return "<nav>" + " | ".join(links) + "</nav>"

    def home(self, host: str, rng: random.Random) -> bytes:
        items = "".join(f'<li><a href="{self.link(n, rng, host)}">{self.articles[n]["title"]}</a>'
                        f'</li>' for n in range(0, len(self.articles), 7)[:30])
        return (f"<html><head><title>Example News</title></head><body>{self._nav(host, rng)}"
                f"<h1>Example News front page</h1><ul>{items}</ul>"
                f'<a href="http://{self.hosts[host]}/calendar/2024/6">Events</a></body></html>'
                ).encode()

    def section(self, key, host: str, rng: random.Random) -> bytes:
        s, p = key
        items = "".join(f'<li><h2><a href="{self.link(n, rng, host)}">{self.articles[n]["title"]}'
                        f'</a></h2><p>{self.articles[n]["snippet"]}</p></li>'
                        for n in self.listing[key])
        more = f'<a href="/section/{s}?page={p + 1}">Next page</a>' \
            if (s, p + 1) in self.listing else ""
        return (f"<html><head><title>Section {s}, page {p}</title></head><body>"
                f"{self._nav(host, rng)}<h1>Section {s}: page {p}</h1><ul>{items}</ul>{more}"
                f"</body></html>").encode()

    def article(self, n: int, host: str, variant: str, rng: random.Random) -> bytes:
        raw = self.articles[n]["raw"]
        if variant == "print":
            block = '<div class="print">Printed from Example News. <a href="/">Home</a></div>'
        else:
            related = rng.sample(range(len(self.articles)), 3)
            year, month = 2000 + n % 25, 1 + n % 12
            facets = (rng.choice(COLORS), rng.choice(SIZES), rng.choice(SORTS))
            block = (
                f'<div class="simdup-bench">{self._nav(host, rng)}'
                f'<a href="{self.article_url(n, "print", rng, host)}">Print</a> '
                f'<a href="{self.article_url(n, "amp", rng, host)}">AMP</a> '
                f'<a href="{self.article_url(n, "share", rng, host)}">Share</a>'
                f"<ul>" + "".join(f'<li><a href="{self.link(r, rng, host)}">'
                                  f'{self.articles[r]["title"]}</a></li>' for r in related)
                + f'</ul><a href="/calendar/{year}/{month}">Events of {MONTHS[month - 1]}</a> '
                f'<a href="/topics?color={facets[0]}&size={facets[1]}&sort={facets[2]}">Shop '
                f"by topic</a></div>")
            if host == "m":
                block = '<div class="mobile">Mobile edition</div>' + block
            if variant == "amp":
                block = '<div class="amp">Accelerated page</div>' + block
        ends = [m.start() for m in _BODY_END.finditer(raw)]
        cut = ends[-1] if ends else len(raw)
        return raw[:cut] + block.encode() + raw[cut:]

    def calendar(self, year: int, month: int, host: str) -> bytes:
        days = " ".join(f"<td>{d}</td>" for d in range(1, 32))
        prev_y, prev_m = (year, month - 1) if month > 1 else (year - 1, 12)
        next_y, next_m = (year, month + 1) if month < 12 else (year + 1, 1)
        return (f"<html><head><title>Events</title></head><body><h1>Events calendar</h1>"
                f"<h2>{MONTHS[month - 1]} {year}</h2><table><tr>{days}</tr></table>"
                f"<p>No events are planned for this month. Our events team publishes the "
                f"programme of readings, talks and open newsroom days a few weeks ahead; "
                f"subscribe to the newsletter to hear about them first, or browse the "
                f"months before and after this one.</p>"
                f'<a href="/calendar/{prev_y}/{prev_m}">Previous month</a> '
                f'<a href="/calendar/{next_y}/{next_m}">Next month</a></body></html>').encode()

    def topics(self, facets, host: str, rng: random.Random) -> bytes:
        products = list(self.products)
        if facets[2] == "name":
            products.sort()
        elif facets[2] == "price":
            products.reverse()
        items = "".join(f"<li>{p}</li>" for p in products)
        links = " ".join(f'<a href="/topics?color={rng.choice(COLORS)}&size={rng.choice(SIZES)}'
                         f'&sort={rng.choice(SORTS)}">More</a>' for _ in range(4))
        return (f"<html><head><title>Topics</title></head><body><h1>Shop by topic</h1>"
                f"<p>Filter: colour {facets[0]}, size {facets[1]}, sorted by {facets[2]}</p>"
                f"<ul>{items}</ul>{links}</body></html>").encode()


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        found = self.server.site.resolve(self.server.host_name, self.path)
        with self.server.lock:
            self.server.log.append((self.server.host_name, self.path,
                                    found[0] if found else None, found[1] if found else None))
        if found is None:
            body, status = b"<html><body>not found</body></html>", 404
        else:
            body, status = found[2], 200
        self.send_response(status)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class SiteServer:
    """Three loopback ports, one per host name, one request log."""

    def __init__(self, articles):
        self.servers = {}
        self.log: list = []
        lock = threading.Lock()
        for name in ("www", "m", "bare"):
            httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
            httpd.daemon_threads = True
            httpd.host_name, httpd.log, httpd.lock = name, self.log, lock
            self.servers[name] = httpd
        self.site = Site(articles, {n: f"127.0.0.1:{s.server_address[1]}"
                                    for n, s in self.servers.items()})
        for httpd in self.servers.values():
            httpd.site = self.site
            threading.Thread(target=httpd.serve_forever, daemon=True).start()

    def close(self):
        for httpd in self.servers.values():
            httpd.shutdown()
            httpd.server_close()


# ----------------------------------------------------------------- one crawl (child process)

def _shim_maybedont() -> None:
    """maybedont 0.1.1 calls ``random.sample`` on a set, which Python 3.11
    refuses (``TypeError: Population must be a sequence``): every page whose
    update hits it is lost with an error. The shim sorts the set first and
    changes nothing else."""
    import maybedont.predict as predict

    class _Random:
        def __getattr__(self, name):
            return getattr(random, name)

        def sample(self, population, k):
            if isinstance(population, (set, frozenset, dict)):
                population = sorted(population)
            return random.sample(population, k)
    predict.random = _Random()


def run_crawl(job_path: str) -> None:
    import scrapy
    from scrapy.crawler import CrawlerProcess

    job = json.loads(Path(job_path).read_text())
    kept = []
    random.seed(0)      # maybedont's 5% exploration and samples: the same every run
    if job.get("maybedont_shim"):
        _shim_maybedont()

    class SiteSpider(scrapy.Spider):
        name = "bench_url_rules"
        start_urls = [job["start"]]
        allowed_domains = ["127.0.0.1"]

        def parse(self, response):
            kept.append(response.url)
            for link in response.css("a"):
                href = link.attrib.get("href")
                if not href:
                    continue
                url = response.urljoin(href)
                # navigation pages (the front page, section listings) are not
                # checked, as the README advises: their links are always followed
                nav = urlsplit(url).path in ("", "/") or urlsplit(url).path.startswith("/section/")
                meta = {"dont_simdup": True} if nav else {}
                if job.get("maybedont"):
                    meta["avoid_dup_content"] = True
                yield scrapy.Request(url, callback=self.parse, meta=meta)

    settings = {"LOG_LEVEL": "INFO", "TELNETCONSOLE_ENABLED": False, "ROBOTSTXT_OBEY": False,
                "ADDONS": {"scrapy_simdup.Addon": 0}, "SIMDUP_LOG_INTERVAL": 0,
                **job["settings"]}
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(SiteSpider)
    t0 = time.perf_counter()
    process.crawl(crawler)
    process.start()
    stats = {k: v for k, v in crawler.stats.get_stats().items()
             if isinstance(v, (int, float, str))}
    Path(job["result"]).write_text(json.dumps({"kept": kept, "stats": stats,
                                               "seconds": time.perf_counter() - t0}))


# ----------------------------------------------------------------- the benchmark

_MAYBEDONT = {"SIMDUP_URL_RULES": False, "AVOID_DUP_CONTENT_ENABLED": True,
              "DOWNLOADER_MIDDLEWARES": {
                  # above the plugin's 585, so that it sees every response
                  # before the plugin drops the near-duplicates
                  "maybedont.scrapy_middleware.AvoidDupContentMiddleware": 586}}
CONFIGS = {
    "no rules": {"SIMDUP_URL_RULES": False},
    "rules": {"SIMDUP_URL_RULES": True},
    "rules + budget": {"SIMDUP_URL_RULES": True, "SIMDUP_PATTERN_BUDGET": 20},
    "maybedont": _MAYBEDONT,             # with the Python 3.11 shim (_shim_maybedont)
    "maybedont p>0.9": {**_MAYBEDONT, "AVOID_DUP_CONTENT_THRESHOLD": 0.9},     # bolder
    "maybedont as is": _MAYBEDONT,       # as released: fails on Python >= 3.11
}


def crawl(server: SiteServer, name: str, settings: dict, work: Path) -> dict:
    start = len(server.log)
    job = {"start": f"http://{server.site.hosts['www']}/", "settings": settings,
           "maybedont": name.startswith("maybedont"),
           "maybedont_shim": name.startswith("maybedont") and name != "maybedont as is",
           "result": str(work / f"{name}.json")}
    job_path = work / f"{name}.job.json"
    job_path.write_text(json.dumps(job))
    proc = subprocess.run([sys.executable, __file__, "--crawl", str(job_path)],
                          capture_output=True, text=True, cwd=work,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    if proc.returncode != 0 or not Path(job["result"]).exists():
        return {"error": proc.stderr[-2000:]}
    result = json.loads(Path(job["result"]).read_text())
    result["requests"] = server.log[start:]
    (work / f"{name}.log").write_text(proc.stderr)
    result["log"] = [line for line in proc.stderr.splitlines()
                     if "Simdup summary" in line or "URL rule" in line or "trap budget" in line]
    return result


def content_of(site: Site, url: str):
    parts = urlsplit(url)
    host = next(n for n, h in site.hosts.items() if h == parts.netloc)
    return site.resolve(host, parts.path + ("?" + parts.query if parts.query else ""))


def measure(site: Site, results: dict) -> list[dict]:
    """The table's rows (see the module docstring)."""
    from scrapy_simdup import Fingerprinter, SkippedPage, VerifiedIndex

    base = results["no rules"]
    unique = {}
    for url in base["kept"]:
        found = content_of(site, url)
        if found is not None:
            unique.setdefault(found[0], found[2])
    fingerprinter = Fingerprinter()
    fingerprints = {}

    def fp(cid, body):
        if cid not in fingerprints:
            try:
                fingerprints[cid] = fingerprinter.fingerprint_html(body)
            except SkippedPage:
                fingerprints[cid] = None
        return fingerprints[cid]

    base_dups = base["stats"].get("simdup/duplicates", 0)
    rows = []
    for name, result in results.items():
        if "error" in result:
            rows.append({"config": name, "error": result["error"]})
            continue
        fetched = {}
        for _host, _path, cid, kind in result["requests"]:
            if cid is not None:
                fetched.setdefault(cid, kind)
        index = VerifiedIndex()
        bodies = {}
        for host, path, cid, _kind in result["requests"]:
            if cid is not None and cid not in bodies:
                bodies[cid] = site.resolve(host, path)[2]
        for cid, body in bodies.items():
            f = fp(cid, body)
            if f is not None:
                index.add_fingerprint(f)
        lost = []
        for cid, body in unique.items():
            if cid in fetched:
                continue
            f = fp(cid, body)
            if f is None or index.query_fingerprint(f) is None:
                lost.append(cid)
        requests = len(result["requests"])
        dups = result["stats"].get("simdup/duplicates", 0)
        traps = sum(1 for r in result["requests"] if r[3] == "trap")
        rows.append({"config": name, "requests": requests,
                     "duplicates fetched": dups,
                     "avoided": 1 - dups / base_dups if base_dups else 0.0,
                     "lost": len(lost), "lost share": len(lost) / len(unique),
                     "lost examples": lost[:5],
                     "per unique": requests / len(unique), "trap pages": traps,
                     "unique": len(unique), "seconds": result["seconds"],
                     "skipped": result["stats"].get("simdup/url_rules/skipped", 0),
                     "errors": result["stats"].get("log_count/ERROR", 0),
                     "learned": result["stats"].get("simdup/url_rules/learned", 0),
                     "retracted": result["stats"].get("simdup/url_rules/retracted", 0),
                     "log": result["log"]})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--crawl", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="120 articles")
    parser.add_argument("--articles", type=int, default=400)
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--seed", type=int, default=31, help="which real pages, and their order")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--work", help="keep each crawl's files (and its SIMDUP_DIR) here")
    args = parser.parse_args()
    if args.crawl:
        return run_crawl(args.crawl)
    n = 120 if args.quick else args.articles
    articles = load_articles(n, args.seed)
    server = SiteServer(articles)
    results = {}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-url-rules-") as tmp:
            work = Path(args.work or tmp)
            work.mkdir(parents=True, exist_ok=True)
            for name in args.configs.split(","):
                settings = dict(CONFIGS[name])
                if args.work:
                    settings.update(SIMDUP_DIR=str(work / f"{name}.simdup"), LOG_LEVEL="DEBUG")
                results[name] = crawl(server, name, settings, work)
                done = results[name]
                print(f"{name}: {len(done.get('requests', []))} requests "
                      f"{'ERROR' if 'error' in done else ''}", file=sys.stderr, flush=True)
    finally:
        server.close()
    rows = measure(server.site, results)
    spot = sum(not a["source"].startswith(DIST.name) for a in articles)
    lines = ["$ .venv/bin/python benchmarks/bench_url_rules.py" + "".join(
        f" {a}" for a in sys.argv[1:]),
             f"bench_url_rules: {n} articles ({spot} from spotsigs-dev, {n - spot} distractors, "
             f"seed {args.seed}), "
             f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}"]
    try:
        import maybedont  # noqa: F401
        import scrapy
        lines.append(f"Scrapy {scrapy.__version__}; maybedont installed")
    except ImportError as exc:
        lines.append(f"maybedont not importable: {exc}")
    head = (f"{'configuration':<16} {'requests':>8} {'dup fetches':>11} {'avoided':>8} "
            f"{'unique lost':>11} {'req/unique':>10} {'trap pages':>10} {'skipped':>8} "
            f"{'rules':>5} {'retracted':>9} {'errors':>6} {'seconds':>7}")
    lines += ["", head, "-" * len(head)]
    for row in rows:
        if "error" in row:
            lines.append(f"{row['config']:<16} ERROR: {row['error'].strip().splitlines()[-1]}")
            continue
        lines.append(f"{row['config']:<16} {row['requests']:>8} {row['duplicates fetched']:>11} "
                     f"{row['avoided']:>8.1%} {row['lost']:>4} ({row['lost share']:.2%}) "
                     f"{row['per unique']:>10.2f} {row['trap pages']:>10} {row['skipped']:>8} "
                     f"{row['learned']:>5} {row['retracted']:>9} {row['errors']:>6} "
                     f"{row['seconds']:>7.0f}")
    unique = next((r["unique"] for r in rows if "unique" in r), 0)
    lines += ["", f"unique pages (kept by the crawl without rules): {unique}"]
    if any(r["config"] == "maybedont as is" and r.get("errors") for r in rows):
        lines.append("maybedont as is: its pages that hit the Python 3.11 error were fetched and "
                     "lost with the error, before the plugin could check them: its 'avoided' "
                     "counts them, its requests do not")
    for row in rows:
        if row.get("lost examples"):
            lines.append(f"lost by {row['config']}: {', '.join(row['lost examples'])}")
    for row in rows:
        for line in row.get("log", []):
            if "Simdup summary" in line:
                lines.append(f"[{row['config']}] {line.split('Simdup summary: ', 1)[1]}")
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.quick:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
