"""`scrapy crawl news`: crawl a local site of near-duplicate news pages.

The spider builds the site from real news pages (``example_project/data``)
and serves it on 127.0.0.1 itself (no internet needed), follows the home page and
the section listings (``dont_simdup``: listings are navigation, not content)
to every article, and reads the title and links of each article it gets.

scrapy-simdup (enabled in ``settings.py`` with one ``ADDONS`` line) drops the
near-duplicates before they reach ``parse_article``; the errback sees them as
``NearDuplicateResponse`` (with ``SIMDUP_ACTION = "tag"`` they reach it, tagged
in ``response.meta["simdup"]``). At the end the spider compares what was
flagged with the site's known clusters and logs precision and recall.

Arguments (``-a name=value``): ``records`` (use the first N source pages),
``half`` ("report" default, "tune" or "all"), ``seed``, ``report`` (write the
evaluation as JSON to this path).
"""
from __future__ import annotations

import json
import time
from collections import Counter
from urllib.parse import urlsplit

import scrapy

from scrapy_simdup import NearDuplicateResponse

from ..site import SiteServer, build_site, data_dir


class NewsSpider(scrapy.Spider):
    name = "news"

    def __init__(self, records=None, half="report", seed=0, report=None, *args, **kwargs):
        super().__init__(*args, **kwargs)
        data_dir()  # fail now, with a clear message, if SIMDUP_DATA points nowhere
        self.records = int(records) if records else None
        self.half = half
        self.seed = int(seed)
        self.report_path = report
        self.server = None
        self.cluster = {}
        self.kept: list[str] = []
        self.flagged: list[tuple[str, str, int]] = []   # (page, duplicate_of, distance)
        self.links_seen = 0

    async def start(self):
        t0 = time.monotonic()
        pages = build_site(self.records, self.half, self.seed)
        self.server = SiteServer(pages, self.seed)
        self.cluster = {p.path: p.cluster_id for p in pages}
        self.logger.info("Example site: %d pages in %d clusters (%d known near-duplicates), "
                         "built in %.1f s, serving at %s", len(pages),
                         len(set(self.cluster.values())),
                         len(pages) - len(set(self.cluster.values())),
                         time.monotonic() - t0, self.server.base_url)
        yield scrapy.Request(self.server.base_url + "/", callback=self.parse_home,
                             meta={"dont_simdup": True})

    def parse_home(self, response):
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse_section, meta={"dont_simdup": True})

    def parse_section(self, response):
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse_article, errback=self.dropped_article)

    def parse_article(self, response):
        tag = response.meta.get("simdup") or {}
        if tag.get("duplicate_of"):          # SIMDUP_ACTION = "tag"
            self.flagged.append((self._path(response.url), self._path(tag["duplicate_of"]),
                                 tag["distance"]))
        else:
            self.kept.append(self._path(response.url))
        links = response.css("a::attr(href)").getall()
        self.links_seen += len(links)
        yield {"url": response.url, "title": response.css("title::text").get(),
               "links": len(links), "simhash": (response.meta.get("simdup") or {}).get("simhash")}

    def dropped_article(self, failure):
        exc = failure.value
        if isinstance(exc, NearDuplicateResponse):
            self.flagged.append((self._path(exc.url), self._path(exc.duplicate_of), exc.distance))
        else:
            self.logger.error("Download failed: %r", failure)

    @staticmethod
    def _path(url: str) -> str:
        # the site's port changes from run to run: a page recognised from an
        # earlier crawl (SIMDUP_DIR) names its URL with that run's port
        parts = urlsplit(url)
        return parts.path + (f"?{parts.query}" if parts.query else "")

    def evaluate(self) -> dict:
        """Flagged (dropped or tagged) pages vs the site's clusters
        (independent of the crawl order).

        Every page of a cluster but the first one the crawl meets is a known
        near-duplicate, and the first one too when the index already held
        the cluster (a re-crawl with ``SIMDUP_DIR``: then a page is flagged
        as a copy of itself, or every page of the cluster is flagged, which
        one crawl alone cannot do, as the first copy it meets is kept). A flag is correct when the page it
        duplicates is in the same cluster. precision = correct / flagged,
        recall = correct / known near-duplicates among the pages reached.
        """
        reached = self.kept + [path for path, _, _ in self.flagged]
        per_cluster = Counter(self.cluster[p] for p in reached if p in self.cluster)
        same = [(path, dup) for path, dup, _ in self.flagged
                if self.cluster.get(path) is not None
                and self.cluster.get(path) == self.cluster.get(dup)]
        correct_per_cluster = Counter(self.cluster[path] for path, _ in same)
        clusters_seen_before = {c for c, n in per_cluster.items() if correct_per_cluster[c] == n}
        # a page flagged as a copy of itself was seen by an earlier crawl too
        clusters_seen_before |= {self.cluster[path] for path, dup in same if path == dup}
        known = sum(n - 1 + (c in clusters_seen_before) for c, n in per_cluster.items())
        flagged = len(self.flagged)
        wrong = [{"page": path, "duplicate_of": dup, "distance": distance}
                 for path, dup, distance in self.flagged
                 if self.cluster.get(path) is None
                 or self.cluster.get(path) != self.cluster.get(dup)]
        return {
            "pages_built": len(self.cluster), "pages_reached": len(reached),
            "clusters": len(per_cluster), "known_duplicates": known,
            "action": "tagged" if self.settings.get("SIMDUP_ACTION") == "tag" else "dropped",
            "flagged": flagged, "correct": len(same), "wrong": flagged - len(same),
            "clusters_from_earlier_crawl": len(clusters_seen_before),
            "precision": len(same) / flagged if flagged else 1.0,
            "recall": len(same) / known if known else 1.0,
            "wrong_flags": wrong,
        }

    def closed(self, reason):
        if self.server is not None:
            self.server.close()
        if not self.cluster:
            return
        result = self.evaluate()
        stats = self.crawler.stats.get_stats()
        result["stats"] = {k: v for k, v in stats.items() if k.startswith("simdup/")}
        result["reason"] = reason
        self.logger.info(
            "Example evaluation: %(pages_reached)d pages reached in %(clusters)d clusters, "
            "%(known_duplicates)d known near-duplicates; simdup %(action)s %(flagged)d "
            "(%(correct)d correct, %(wrong)d wrong): precision %(precision).3f, "
            "recall %(recall).3f", result)
        if result["clusters_from_earlier_crawl"]:
            self.logger.info("Example evaluation: %d clusters were in the index from an earlier "
                             "crawl (SIMDUP_DIR)", result["clusters_from_earlier_crawl"])
        if self.report_path:
            with open(self.report_path, "w") as f:
                json.dump(result, f, indent=2, default=str)
