"""SimdupDownloaderMiddleware: drop or tag near-duplicate HTML responses."""
from __future__ import annotations

import logging

from scrapy import signals
from scrapy.exceptions import IgnoreRequest
from scrapy.http import HtmlResponse

from scrapy_simdup.exceptions import CorruptFileError
from scrapy_simdup.fingerprint.canonical import declared_canonical
from scrapy_simdup.integration.component import SimdupComponent, debug_shown
from scrapy_simdup.integration.urlrules import NearDuplicateRequest, UrlRules

__all__ = ["SimdupDownloaderMiddleware", "NearDuplicateResponse", "NearDuplicateRequest"]

logger = logging.getLogger("scrapy_simdup")


class NearDuplicateResponse(IgnoreRequest):
    """Raised for a dropped near-duplicate (``SIMDUP_ACTION = "drop"``).

    An ``IgnoreRequest``, so Scrapy drops the response quietly; a request
    errback receives it with ``url``, ``duplicate_of``, ``distance``,
    ``similarity`` (the estimated similarity of the two pages' features, as
    in ``meta["simdup"]``) and ``simhash`` attributes.
    """

    def __init__(self, url: str, duplicate_of: str, distance: int, simhash: int,
                 similarity: float | None = None) -> None:
        super().__init__(f"near-duplicate of {duplicate_of} (distance {distance}): {url}")
        self.url = url
        self.duplicate_of = duplicate_of
        self.distance = distance
        self.similarity = similarity
        self.simhash = simhash


class SimdupDownloaderMiddleware(SimdupComponent):
    """Checks every final HTML response against the index.

    Place it below ``HttpCompressionMiddleware`` (590) and ``RedirectMiddleware``
    (600), so that it sees decompressed responses after redirects: the add-on
    uses 585. Requests with ``meta["dont_simdup"] = True`` are not checked.
    Every response it passes on gets ``meta["simdup"]`` (``simhash``,
    ``duplicate_of``, ``distance``; ``skipped`` when not fingerprinted,
    ``error`` when the check failed, ``revisit`` for a page stored before
    under its own URL with ``SIMDUP_ON_REVISIT = "tag"``; ``canonical``: the
    URL the page declares canonical, or None). Start requests
    are not dropped unless ``SIMDUP_DROP_START_REQUESTS``: a near-duplicate
    one reaches the spider tagged. The first near-duplicate dropped is
    logged at INFO, the others at DEBUG.
    """

    kind = "pages"
    prefix = "simdup/"

    def __init__(self, crawler, config, fingerprinter=None, backend=None) -> None:
        super().__init__(crawler, config, fingerprinter, backend)
        #: SIMDUP_URL_RULES / SIMDUP_PATTERN_BUDGET: requests skipped before download
        self.url_rules = None
        if (config.url_rules or config.pattern_budget) and not self.refused:
            try:
                self.url_rules = UrlRules(crawler, config)
            except CorruptFileError as exc:     # SIMDUP_ON_ERROR = "stop"
                logger.error("Simdup: the saved URL rules are damaged: %s; the crawl stops "
                             "(SIMDUP_ON_ERROR=stop)", exc)
                self.refused = "simdup_corrupt_index"
                crawler.signals.connect(self._refuse, signal=signals.spider_opened)
        if self.url_rules is not None:
            self.logstats.summaries.append(self.url_rules.summary)

    def process_request(self, request, spider=None):
        if self.url_rules is None or self.refused:
            return None
        return self.url_rules.process_request(request)

    async def _spider_closed(self, spider, reason) -> None:
        if self.url_rules is not None:
            await self.url_rules.close()    # rules saved while SIMDUP_DIR is still locked
        await super()._spider_closed(spider, reason)

    async def process_response(self, request, response, spider=None):
        url = response.url
        if self.refused:     # the crawl is being stopped: no page goes through unchecked
            raise IgnoreRequest(f"scrapy-simdup refused to check pages ({self.refused})")
        if request.meta.get("dont_obey_robotstxt") and url.endswith("/robots.txt"):
            return response     # Scrapy's own robots.txt request: not a page of the crawl
        canonical = None
        if request.meta.get("dont_simdup"):
            verdict = self.skip("dont_simdup", url)
        elif not isinstance(response, HtmlResponse):
            verdict = self.skip("not_html", url)
        elif not 200 <= response.status < 300:
            verdict = self.skip("status", url)
        else:
            canonical = _canonical(response)
            verdict = await self.check(lambda: self.fingerprinter.fingerprint_response(response),
                                       url, canonical=canonical)
            if verdict.error is not None:    # counted and logged
                if self.config.on_error == "stop":  # the spider is being closed
                    raise IgnoreRequest(f"scrapy-simdup could not check {url} "
                                        f"({verdict.error}); SIMDUP_ON_ERROR=stop")
                request.meta["simdup"] = dict(verdict.as_tag(), canonical=canonical)
                return response
        await self._observed(request, url, verdict)
        match = verdict.match
        show = True    # the match goes into meta["simdup"]
        if match is not None:
            if verdict.revisit:
                drop = self.config.on_revisit == "drop"
                show = self.config.on_revisit != "keep"
                what = "revisit"
            else:
                drop = self.config.action == "drop"
                what = "near-duplicate"
            if drop and request.meta.get("is_start_request") and \
                    not self.config.drop_start_requests:
                # a start page leads to the rest of the crawl: it reaches the spider, tagged
                drop, show = False, True
                self.stats.inc_value("simdup/start_requests_kept")
                if debug_shown():
                    logger.debug("Kept start page %s, a %s of %s (distance %d)", url, what,
                                 match.duplicate_of, match.distance,
                                 extra={"spider": self.crawler.spider})
            elif drop:
                self._inc_stat("simdup/dropped")
                note = ""
                if canonical is not None and canonical != match.duplicate_of:
                    note = (f"; it declares rel=canonical {canonical}"
                            + (" (itself)" if canonical == url else ""))
                self.log_drop(what, url, match, note)
                raise NearDuplicateResponse(url, match.duplicate_of, match.distance,
                                            verdict.simhash, match.similarity)
            elif not verdict.revisit:  # tag mode
                self._inc_stat("simdup/tagged")
                if debug_shown():
                    logger.debug("Tagged near-duplicate %s of %s (distance %d)", url,
                                 match.duplicate_of, match.distance,
                                 extra={"spider": self.crawler.spider})
        # every response passed on carries the verdict (in drop mode: not a
        # duplicate, but for a start page)
        request.meta["simdup"] = dict(verdict.as_tag(with_match=show), canonical=canonical)
        return response

    async def _observed(self, request, url, verdict):
        """Tell the URL rules what the index found (before the page may be dropped)."""
        if self.url_rules is not None and verdict.error is None and verdict.skipped is None:
            await self.url_rules.observe(request, url, verdict)


def _canonical(response) -> str | None:
    """The URL the page declares canonical (:mod:`scrapy_simdup.fingerprint.canonical`)."""
    try:
        return declared_canonical(response.body, response.url, response.encoding,
                                  b", ".join(response.headers.getlist(b"Link")) or None)
    except Exception:  # noqa: BLE001 (an odd page never stops its check)
        return None
