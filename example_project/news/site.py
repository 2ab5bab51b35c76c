"""The example's local news site: near-duplicate pages built from real pages.

``build_site()`` takes real news pages and makes the variants the web makes
(syndicated copies in other sites' templates, re-headlined, trimmed, with a
paragraph added or comments changed, reader-mode copies) with ``sitedata``
(which the benchmarks and tests use too); ``SiteServer`` serves them on
127.0.0.1 with a home page and one listing page per section. Every page knows its cluster: pages of
one cluster are the known near-duplicates.

The pages are the example's own copy of part of the article-extraction
benchmark (``example_project/data``, MIT licence; the records of the
project's held-out half), so the crawl is the same on every machine.
``SIMDUP_DATA`` points it at a full data root instead (the shared
development data, with ``article-extraction-benchmark/``,
``readability-test-pages/`` and ``trafilatura-cache/``).
"""
from __future__ import annotations

import html
import itertools
import os
import random
import re
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

from .sitedata import build_near_duplicate_site, load_all, split

DEFAULT_DATA = Path(__file__).resolve().parents[1] / "data"
DATASETS = ("article-extraction-benchmark", "readability-test-pages", "trafilatura-cache")


def data_dir() -> Path:
    path = Path(os.environ.get("SIMDUP_DATA") or DEFAULT_DATA)
    if not any((path / name).is_dir() for name in DATASETS):
        raise SystemExit(
            f"scrapy-simdup example: no page data in {path} (expected one of "
            f"{', '.join(DATASETS)}). Unset SIMDUP_DATA to use the example's own pages "
            f"({DEFAULT_DATA}).")
    return path


def build_site(records: int | None = None, half: str = "report", seed: int = 0):
    """SitePage list (path, html, cluster_id, kind, ...) of the example site.

    ``half``: "report" (default; the hold-out half the project reports on),
    "tune" or "all"; ``records``: use only the first N records of it.
    """
    loaded = load_all(data_dir())
    if half != "all":
        tune, report = split(loaded)
        loaded = report if half == "report" else tune
    if records:
        loaded = loaded[:records]
    pages = build_near_duplicate_site(loaded, seed=seed)
    same = same_article(loaded)
    return [p._replace(cluster_id=same.get(p.cluster_id, p.cluster_id)) for p in pages]


def _shingles(text: str, k: int = 5) -> set[str]:
    words = re.findall(r"\w+", text.lower())
    return {" ".join(words[i:i + k]) for i in range(max(len(words) - k + 1, 0))}


def same_article(records, threshold: float = 0.5) -> dict[str, str]:
    """Record id -> cluster id, merging records that carry the same article.

    Some source pages are copies of one text (readability's test pages reuse
    one lorem-ipsum article in a dozen markups, ``rtl-1..4`` are one article):
    their variants are near-duplicates of each other, not hard negatives.
    Two records are merged when their *reference* texts (the datasets'
    article bodies, not our fingerprints) share at least ``threshold`` of
    their word 5-shingles (Jaccard). Records without reference text keep
    their own cluster.
    """
    sets = {r.id: _shingles(r.main_text) for r in records if r.main_text}
    sets = {rid: s for rid, s in sets.items() if s}
    postings: dict[str, list[str]] = {}
    for rid, s in sets.items():
        for sh in s:
            postings.setdefault(sh, []).append(rid)
    shared: Counter = Counter()
    for ids in postings.values():
        if len(ids) > 1:
            shared.update(itertools.combinations(sorted(ids), 2))
    parent = {rid: rid for rid in sets}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for (a, b), n in shared.items():
        if n / (len(sets[a]) + len(sets[b]) - n) >= threshold:
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
    return {rid: find(rid) for rid in sets}


def _listing(title: str, links: list[tuple[str, str]]) -> bytes:
    items = "\n".join(f'<li><a href="{html.escape(href)}">{html.escape(text)}</a></li>'
                      for href, text in links)
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{html.escape(title)}"
            f"</title></head><body><h1>{html.escape(title)}</h1><ul>{items}</ul></body></html>"
            ).encode()


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        body = self.server.routes.get(unquote(urlsplit(self.path).path))
        status = 200 if body is not None else 404
        body = body if body is not None else b"<html><body>Not found</body></html>"
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class SiteServer:
    """Serves the pages, a home page (``/``) and section listings (``/<section>/``)."""

    def __init__(self, pages, seed: int = 0) -> None:
        rng = random.Random(seed)
        routes = {p.path: p.html for p in pages}
        sections: dict[str, list] = {}
        for p in pages:
            sections.setdefault(p.path.strip("/").split("/")[0], []).append(p.path)
        for name, paths in sections.items():
            rng.shuffle(paths)  # a crawl meets the copies in no particular order
            routes[f"/{name}/"] = _listing(name, [(path, path.rsplit("/", 1)[1])
                                                  for path in paths])
        routes["/"] = _listing("Example news", [(f"/{name}/", name) for name in sorted(sections)])
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.routes = routes
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
