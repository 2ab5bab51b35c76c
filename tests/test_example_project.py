"""`scrapy crawl news` of the example project, in a subprocess, as a user runs it.

The spider builds its local site of near-duplicate pages from its own pages,
serves it itself, and writes its evaluation (drops vs the site's known
clusters) to a JSON report; the Scrapy stats must agree with it.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "example_project"

pytestmark = pytest.mark.slow


def _copy_project(base: Path) -> tuple[Path, dict]:
    """A copy of the project, with only the scrapy_simdup package importable
    besides the environment: the example must not need the rest of the checkout,
    nor the shared data (no ``shared/`` beside the copy, no ``SIMDUP_DATA``):
    it crawls its own pages, as on a user's fresh clone."""
    project = base / "example_project"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("__pycache__", ".scrapy"))
    (base / "pkgs").mkdir()
    (base / "pkgs" / "scrapy_simdup").symlink_to(ROOT / "scrapy_simdup")
    env = {k: v for k, v in os.environ.items() if k != "SIMDUP_DATA"}
    assert not (base / "shared").exists()
    return project, {**env, "PYTHONPATH": str(base / "pkgs")}


def _crawl_news(project: Path, env: dict, report: Path, *args: str) -> tuple[dict, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "scrapy", "crawl", "news", "-a", f"report={report}",
         # one request at a time: a deterministic crawl order, so a stable recall
         "-s", "CONCURRENT_REQUESTS=1", *args],
        cwd=project, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(report.read_text()), proc.stderr


@pytest.fixture(scope="module")
def crawl(tmp_path_factory):
    base = tmp_path_factory.mktemp("example")
    project, env = _copy_project(base)
    # the whole "report" half
    return _crawl_news(project, env, base / "report.json", "-s", "SIMDUP_LOG_INTERVAL=1")


def test_stats_match_the_evaluation(crawl):
    result, log = crawl
    stats = result["stats"]
    assert result["reason"] == "finished"
    assert result["pages_reached"] == result["pages_built"] > 400
    assert result["action"] == "dropped" and result["clusters_from_earlier_crawl"] == 0
    assert stats["simdup/dropped"] == stats["simdup/duplicates"] == result["flagged"]
    skipped = sum(v for k, v in stats.items()
                  if k.startswith("simdup/skipped/") and k != "simdup/skipped/dont_simdup")
    assert stats["simdup/checked"] + skipped == result["pages_reached"]
    # every checked page is stored, near-duplicates under the key of the page
    # they duplicate; only a revisit is not (none in a first crawl)
    assert "simdup/revisits" not in stats
    assert stats["simdup/index_size"] == stats["simdup/checked"]
    assert "simdup/errors" not in stats
    assert "Example evaluation:" in log and "Simdup summary: pages: checked" in log


def test_precision(crawl):
    result, _ = crawl
    assert result["flagged"] > 0.5 * result["known_duplicates"]
    assert result["precision"] >= 0.99, result["wrong_flags"][:10]


def test_recall(crawl):
    result, _ = crawl
    assert result["recall"] >= 0.9


def test_tag_mode_and_a_recrawl_are_evaluated(tmp_path):
    """The evaluation line counts tagged pages in tag mode, and a re-crawl with
    the same SIMDUP_DIR (the site then runs on another port) counts the pages
    recognised from the first crawl as correct, not as wrong."""
    project, env = _copy_project(tmp_path)
    small = ["-a", "records=30", "-s", f"SIMDUP_DIR={tmp_path / 'simdup'}"]
    first, _ = _crawl_news(project, env, tmp_path / "first.json", *small,
                           "-s", "SIMDUP_ACTION=tag")
    assert first["action"] == "tagged" and first["flagged"] > 0
    assert first["flagged"] == first["stats"]["simdup/tagged"]
    assert first["precision"] >= 0.99 and first["recall"] >= 0.8
    again, log = _crawl_news(project, env, tmp_path / "again.json", *small)
    assert again["action"] == "dropped"
    assert again["flagged"] == again["pages_reached"] == first["pages_reached"]
    assert again["precision"] == 1.0 and again["recall"] == 1.0
    assert again["clusters_from_earlier_crawl"] == again["clusters"]
    assert "from an earlier crawl" in log


def test_evaluation_of_a_recrawl_that_misses_a_page(monkeypatch):
    """A re-crawl flags /a as a copy of itself (the index held its cluster)
    and misses /c: /c is a known near-duplicate missed, recall 2/3."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    from news.spiders.news import NewsSpider
    spider = NewsSpider.__new__(NewsSpider)
    spider.settings = {}
    spider.cluster = {"/a": 1, "/b": 1, "/c": 1, "/x": 2}
    spider.kept = ["/c", "/x"]
    spider.flagged = [("/a", "/a", 0), ("/b", "/a", 1)]
    result = spider.evaluate()
    assert result["known_duplicates"] == 3 and result["correct"] == 2
    assert result["recall"] == 2 / 3 and result["clusters_from_earlier_crawl"] == 1


def test_missing_data_fails_with_a_clear_message(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "scrapy", "crawl", "news"], cwd=EXAMPLE,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT),
                               "SIMDUP_DATA": str(tmp_path / "nowhere")})
    assert proc.returncode != 0
    assert "no page data in" in proc.stderr and "SIMDUP_DATA" in proc.stderr
