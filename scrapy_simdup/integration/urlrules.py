"""URL rules and trap budgets in a crawl: what the downloader middleware
asks before a request is downloaded, and tells after a page was checked.

``SIMDUP_URL_RULES``: rules are learned from the crawl's verdicts
(:mod:`scrapy_simdup.urlrules.learner`); a request a rule maps onto a URL
already checked is dropped with :class:`NearDuplicateRequest` (drop mode) or
fetched and tagged ``meta["simdup_url_rule"]`` (tag mode). A share
``SIMDUP_URL_RULES_CHECK`` of the hits is fetched anyway and checked.
``SIMDUP_PATTERN_BUDGET``: a URL pattern that produced that many pages,
mostly near-duplicates, is cut. Rules persist in ``SIMDUP_DIR`` and, with a
Redis ``SIMDUP_INDEX``, are shared through ``<SIMDUP_REDIS_KEY>:rules``.
"""
from __future__ import annotations

import logging
import time

from scrapy.exceptions import IgnoreRequest

from scrapy_simdup.index.crawldir import namespace_dir
from scrapy_simdup.index.redis.log import CONNECTION_DEFAULTS
from scrapy_simdup.integration.component import debug_shown
from scrapy_simdup.urlrules import PatternBudget, RuleHit, UrlRuleLearner
from scrapy_simdup.urlrules.persist import forget_rules, load_rules, save_rules
from scrapy_simdup.urlrules.shared import RuleShare

__all__ = ["NearDuplicateRequest", "UrlRules"]

logger = logging.getLogger("scrapy_simdup")

#: request meta keys: a rule hit fetched to be checked / tagged, a deprioritised trap request
META_RULE = "simdup_url_rule"
META_TRAP = "simdup_trap"
#: seconds between two exchanges with the fleet's hash in Redis
SHARE_INTERVAL = 1.0


class NearDuplicateRequest(IgnoreRequest):
    """A request not downloaded because a URL rule (or a trap budget) says
    its page would be a near-duplicate. An ``IgnoreRequest``: dropped
    quietly; a request errback receives it with ``url``, ``duplicate_of``
    (the kept page; None for a trap) and ``rule`` (what decided)."""

    def __init__(self, url: str, duplicate_of: str | None, rule: str) -> None:
        what = f"near-duplicate of {duplicate_of}" if duplicate_of else "over its trap budget"
        super().__init__(f"{what} by {rule}: {url}")
        self.url = url
        self.duplicate_of = duplicate_of
        self.rule = rule


class UrlRules:
    """The middleware's URL rules and trap budget (one per middleware)."""

    def __init__(self, crawler, config) -> None:
        self.crawler = crawler
        self.config = config
        self.stats = crawler.stats
        self.learner = UrlRuleLearner(min_support=config.url_rules_support,
                                      check=config.url_rules_check) if config.url_rules else None
        self.budget = PatternBudget(config.pattern_budget) if config.pattern_budget else None
        self.directory = namespace_dir(config.dir, "pages") if config.dir else None
        self.share: RuleShare | None = None
        self._client = None
        self._synced_at = 0.0
        self._share_failed_at: float | None = None
        self._dirty = False
        if config.reset and self.directory is not None and forget_rules(self.directory):
            logger.info("Simdup: SIMDUP_RESET: forgot the URL rules saved in %s", self.directory,
                        extra={"spider": crawler.spider})
        if self.learner is not None and self.directory is not None:
            # a damaged file: moved aside, or CorruptFileError with SIMDUP_ON_ERROR = "stop"
            restored, moved = load_rules(self.learner, self.directory, config.on_error)
            self.stats.set_value("simdup/url_rules/restored", restored)
            if moved:
                self.stats.inc_value("simdup/url_rules/corrupt")
        if self.learner is not None and config.index != "memory":
            self._client = _redis_client(config)

    # -- before download -------------------------------------------------------------
    def process_request(self, request):
        meta = request.meta
        if meta.get("dont_simdup") or META_RULE in meta or META_TRAP in meta:
            return None
        if meta.get("is_start_request") and not self.config.drop_start_requests:
            return None     # start pages lead to the crawl: never skipped
        url = request.url
        drop = self.config.action == "drop"
        if self.budget is not None:
            pattern = self.budget.over_budget(url)
            if pattern is not None:
                if drop:
                    self.stats.inc_value("simdup/traps/dropped")
                    if debug_shown():
                        logger.debug("Dropped %s: pattern %s is over its budget", url, pattern,
                                     extra={"spider": self.crawler.spider})
                    raise NearDuplicateRequest(url, None, f"trap budget of {pattern}")
                self.stats.inc_value("simdup/traps/deprioritized")
                return request.replace(priority=request.priority - 1000, dont_filter=True,
                                       meta={**meta, META_TRAP: pattern})
        if self.learner is None:
            return None
        hit = self.learner.lookup(url)
        if hit is None:
            return None
        info = {"duplicate_of": hit.duplicate_of, "matched": hit.matched_url,
                "rules": [r.id for r in hit.rules]}
        rule = "; ".join(r.describe() for r in hit.rules)
        if not drop:      # tag mode: fetched, tagged, and every one is a check
            meta[META_RULE] = {**info, "rule": rule}
            self.stats.inc_value("simdup/url_rules/tagged")
            return None
        if self.learner.should_check(url):
            meta[META_RULE] = {**info, "rule": rule, "check": True}
            self.stats.inc_value("simdup/url_rules/checked")
            return None
        self.learner.skipped(hit)
        self.stats.inc_value("simdup/url_rules/skipped")
        if debug_shown():
            logger.debug("Skipped %s, a near-duplicate of %s by the URL rule %s", url,
                         hit.duplicate_of, rule, extra={"spider": self.crawler.spider})
        raise NearDuplicateRequest(url, hit.duplicate_of, rule)

    # -- after the check -------------------------------------------------------------
    async def observe(self, request, url: str, verdict) -> None:
        """A page the index checked (``verdict`` without error or skip)."""
        match = verdict.match
        duplicate_of = match.duplicate_of if match is not None and not verdict.revisit else None
        if self.learner is not None:
            info = request.meta.get(META_RULE)
            checked = None
            if isinstance(info, dict):
                rules = tuple(self.learner.rules[r] for r in info.get("rules", ())
                              if r in self.learner.rules)
                if rules:
                    checked = RuleHit(info["duplicate_of"], info.get("matched", ""), rules)
            self.learner.observe(url, duplicate_of, checked)
            if checked is not None and self.learner.cluster(checked.duplicate_of) != \
                    self.learner.cluster(duplicate_of or url):
                self.stats.inc_value("simdup/url_rules/check_failed")
            self._events()
            await self._sync(time.monotonic())
        if self.budget is not None:
            pattern = self.budget.observe(url, duplicate_of is not None)
            if pattern is not None:
                pages, dups, _ = self.budget.counts[pattern]
                self.stats.inc_value("simdup/traps/patterns")
                logger.info("Simdup: trap budget: pattern %s produced %d pages, %d of them "
                            "near-duplicates: its further requests are %s", pattern, pages, dups,
                            "dropped" if self.config.action == "drop" else "deprioritized",
                            extra={"spider": self.crawler.spider})

    def _events(self) -> None:
        for event, rule in self.learner.take_events():
            self._dirty = True
            s, c = rule.count("support"), rule.count("contradictions")
            if event == "learned":
                self.stats.inc_value("simdup/url_rules/learned")
                logger.info("Simdup: learned the URL rule %s (%d confirmed pairs, no "
                            "contradiction)", rule.describe(), s,
                            extra={"spider": self.crawler.spider})
            else:
                self.stats.inc_value("simdup/url_rules/retracted")
                logger.info("Simdup: retracted the URL rule %s: %d pairs confirmed it, %d "
                            "contradicted it (%d of %d checks failed)", rule.describe(), s, c,
                            rule.count("failed_checks"), rule.count("checks"),
                            extra={"spider": self.crawler.spider})
        if self._dirty and self.directory is not None:
            self._save()

    def _save(self) -> None:
        try:
            save_rules(self.learner, self.directory)
            self._dirty = False
        except OSError as exc:
            self.stats.inc_value("simdup/errors")
            logger.error("Simdup could not save the URL rules to %s: %s",
                         self.config.dir_setting, exc.strerror or exc,
                         extra={"spider": self.crawler.spider})

    async def _sync(self, now: float, force: bool = False) -> None:
        if self._client is None or (not force and now - self._synced_at < SHARE_INTERVAL):
            return
        self._synced_at = now
        if self.share is None:
            spider = getattr(self.crawler.spider, "name", None) or "default"
            self.share = RuleShare(self._client, self.config.redis_key_for(spider) + ":rules")
        try:
            await self.share.sync(self.learner)
        except Exception as exc:  # noqa: BLE001 (Redis down: the rules go on locally)
            self.stats.inc_value("simdup/url_rules/share_errors")
            if self._share_failed_at is None or now - self._share_failed_at > 60:
                self._share_failed_at = now
                logger.warning("Simdup could not share the URL rules through Redis (%s: %s); "
                               "going on with this process's counts", type(exc).__name__, exc,
                               extra={"spider": self.crawler.spider})
            return
        self._events()

    async def close(self) -> None:
        if self.learner is None:
            return
        await self._sync(time.monotonic(), force=True)
        if self.directory is not None:
            self._save()
        if self._client is not None:
            try:
                await self._client.aclose()
            except Exception:  # noqa: BLE001 (closing: nothing left to do)
                pass

    # -- the summary ----------------------------------------------------------------
    def summary(self, top: int = 3) -> str | None:
        parts = []
        get = self.stats.get_value
        if self.learner is not None:
            active = self.learner.active()
            retracted = sum(r.state == "retracted" for r in self.learner.rules.values())
            best = sorted((r for r in self.learner.rules.values() if r.own["skipped"]),
                          key=lambda r: -r.own["skipped"])[:top]
            part = (f"URL rules: {len(active)} in use ({retracted} retracted), skipped "
                    f"{get('simdup/url_rules/skipped', 0)} requests, checked "
                    f"{get('simdup/url_rules/checked', 0)} ({get('simdup/url_rules/check_failed', 0)} "
                    f"failed)")
            if best:
                part += "; skipped most: " + ", ".join(
                    f"{r.describe()} ({r.own['skipped']})" for r in best)
            parts.append(part)
        if self.budget is not None:
            parts.append(f"traps: {len(self.budget.cut)} patterns cut, "
                         f"{get('simdup/traps/dropped', 0) + get('simdup/traps/deprioritized', 0)} "
                         f"requests {'dropped' if self.config.action == 'drop' else 'deprioritized'}")
        return "; ".join(parts) or None


def _redis_client(config):
    """A ``redis.asyncio`` client of the shared index's server, with the
    index's bounded timeouts (a sync that hung would hold its page's check)."""
    import redis.asyncio  # noqa: PLC0415 (optional: the redis install extra)
    return redis.asyncio.Redis.from_url(config.index,
                                        **{**CONNECTION_DEFAULTS, **config.redis_params})
