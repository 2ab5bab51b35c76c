"""``simdup report``: one self-contained HTML page of what the crawls' batch files say.

:mod:`~scrapy_simdup.report.data` gathers the numbers (the crawl records,
a re-scoring at the report's threshold, each page's best earlier match),
:mod:`~scrapy_simdup.report.svg` draws the charts as inline SVG and
:mod:`~scrapy_simdup.report.page` writes the page. It sits between the
command line and the merge: it reads batch files through the merge's
re-scoring and never touches a collection.
"""
from scrapy_simdup.report.data import ReportData, gather
from scrapy_simdup.report.page import render, write_report

__all__ = ["ReportData", "gather", "render", "write_report"]
