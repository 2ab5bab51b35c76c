"""URL rules learned from content-confirmed near-duplicates, and trap budgets.

Pure Python, no Scrapy: the integration feeds it the crawl's verdicts (a page
and the kept page it duplicates, or None) and asks it, before a request is
downloaded, whether a learned rule maps the request's URL onto a URL already
checked (:class:`~scrapy_simdup.urlrules.learner.UrlRuleLearner`). Trap
budgets per URL pattern are in :mod:`~scrapy_simdup.urlrules.traps`; the
rules' file in ``SIMDUP_DIR`` in :mod:`~scrapy_simdup.urlrules.persist`;
sharing counts through Redis in :mod:`~scrapy_simdup.urlrules.shared`.
"""
from scrapy_simdup.urlrules.learner import Rule, RuleHit, UrlRuleLearner
from scrapy_simdup.urlrules.traps import PatternBudget

__all__ = ["Rule", "RuleHit", "UrlRuleLearner", "PatternBudget"]
