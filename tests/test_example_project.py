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


@pytest.fixture(scope="module")
def crawl(tmp_path_factory):
    base = tmp_path_factory.mktemp("example")
    report = base / "report.json"
    # a copy of the project, with only the scrapy_simdup package importable
    # besides the environment: the example must not need the rest of the checkout
    project = base / "example_project"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("__pycache__", ".scrapy"))
    (base / "pkgs").mkdir()
    (base / "pkgs" / "scrapy_simdup").symlink_to(ROOT / "scrapy_simdup")
    env = {**os.environ, "PYTHONPATH": str(base / "pkgs")}
    proc = subprocess.run(
        [sys.executable, "-m", "scrapy", "crawl", "news",  # the whole "report" half
         "-a", f"report={report}", "-s", "SIMDUP_LOG_INTERVAL=1",
         # one request at a time: a deterministic crawl order, so a stable recall
         "-s", "CONCURRENT_REQUESTS=1"],
        cwd=project, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(report.read_text()), proc.stderr


def test_stats_match_the_evaluation(crawl):
    result, log = crawl
    stats = result["stats"]
    assert result["reason"] == "finished"
    assert result["pages_reached"] == result["pages_built"] > 400
    assert stats["simdup/dropped"] == stats["simdup/duplicates"] == result["dropped"]
    skipped = sum(v for k, v in stats.items()
                  if k.startswith("simdup/skipped/") and k != "simdup/skipped/dont_simdup")
    assert stats["simdup/checked"] + skipped == result["pages_reached"]
    assert stats["simdup/index_size"] == stats["simdup/checked"] - stats["simdup/duplicates"]
    assert "simdup/errors" not in stats
    assert "Example evaluation:" in log and "Simdup summary: pages: checked" in log


def test_precision(crawl):
    result, _ = crawl
    assert result["dropped"] > 0.5 * result["known_duplicates"]
    assert result["precision"] >= 0.99, result["wrong_drops"][:10]


def test_recall(crawl):
    result, _ = crawl
    assert result["recall"] >= 0.9


def test_missing_data_fails_with_a_clear_message(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "scrapy", "crawl", "news"], cwd=EXAMPLE,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT),
                               "SIMDUP_DATA": str(tmp_path / "nowhere")})
    assert proc.returncode != 0
    assert "no page data in" in proc.stderr and "SIMDUP_DATA" in proc.stderr
