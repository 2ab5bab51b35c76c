"""A full disk mid-crawl: the batch counters in the stats match the batch
files on disk (a batch written, then its index snapshot failing, is counted)."""
from __future__ import annotations

import asyncio
import builtins
import errno
import json
import os
import subprocess
import uuid

import numpy as np
import pytest
from scrapy.http import HtmlResponse, Request

from scrapy_simdup import SimdupDownloaderMiddleware
from scrapy_simdup.index import snapshot
from tests.scrapy_crawler import make_crawler


def _page(i: int) -> tuple[Request, HtmlResponse]:
    rng = np.random.default_rng(i)
    text = " ".join(f"w{int(w)}" for w in rng.integers(0, 5000, 120))
    url = f"http://example.com/page/{i}/" + "x" * 200       # long keys fill the disk sooner
    html = f"<html><body><article><p>{text}</p></article></body></html>".encode()
    request = Request(url)
    return request, HtmlResponse(url, body=html, encoding="utf-8", request=request)


def _crawl(directory, pages: int) -> dict:
    """Check ``pages`` pages with SIMDUP_DIR=directory and batches of 50;
    returns the crawl's stats after close."""
    crawler = make_crawler({"SIMDUP_ENABLED": True, "SIMDUP_DIR": str(directory),
                            "SIMDUP_BATCH_SIZE": 50, "SIMDUP_LOG_INTERVAL": 0})
    middleware = SimdupDownloaderMiddleware.from_crawler(crawler)
    for i in range(pages):
        request, response = _page(i)
        asyncio.run(middleware.process_response(request, response))
    asyncio.run(middleware._spider_closed(None, "finished"))
    return crawler.stats.get_stats()


def _on_disk(directory) -> tuple[int, int]:
    headers = sorted(directory.glob("batch-*.json"))
    return len(headers), sum(json.loads(h.read_text())["count"] for h in headers)


@pytest.fixture()
def small_disk(tmp_path):
    """A 300 KiB tmpfs (root only; skipped where it cannot be mounted)."""
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=300k", f"simdup-{uuid.uuid4().hex[:8]}",
                           str(mount)], capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_batch_counts_match_the_disk_after_it_filled_up(small_disk):
    d = small_disk / "simdup"
    stats = _crawl(d, 1500)
    assert stats["simdup/errors"] > 0 and stats["simdup/lost"] > 0     # it did fill up
    batches, records = _on_disk(d)
    assert batches > 0
    assert (stats["simdup/batches_flushed"], stats["simdup/batch_records_flushed"]) == \
        (batches, records)


def test_a_batch_written_before_its_snapshot_failed_is_counted(tmp_path, monkeypatch):
    # the disk fills up between a batch and its index snapshot: ENOSPC from
    # the snapshot's file object, from the fourth snapshot on
    opened = {"values": 0}

    class _FullFile:
        def __init__(self, handle):
            self._handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._handle.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):
            return getattr(self._handle, name)

    def small_open(path, mode="r", *args, **kwargs):
        handle = builtins.open(path, mode, *args, **kwargs)
        if str(path).endswith("index.values"):
            opened["values"] += 1
            if opened["values"] > 3:
                return _FullFile(handle)
        return handle

    monkeypatch.setattr(snapshot, "open", small_open, raising=False)
    d = tmp_path / "simdup"
    stats = _crawl(d, 230)
    assert stats["simdup/errors"] > 0       # the snapshots failed
    assert _on_disk(d) == (5, 230)
    assert (stats["simdup/batches_flushed"], stats["simdup/batch_records_flushed"]) == (5, 230)
