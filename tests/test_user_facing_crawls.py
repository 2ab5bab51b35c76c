"""Real crawls (tests/crawl_runner.py against tests/http_server.py) of what a
user meets: the spider's own tag field, items without text, the first
near-duplicate dropped, the pages' declared rel=canonical."""
from __future__ import annotations

import numpy as np
import pytest

from scrapy_simdup.storage.batchfile import list_batches, read_batch
from tests.crawl_jobs import run_job, write_job
from tests.http_server import PageServer

pytestmark = pytest.mark.slow

ADDON = {"ADDONS": {"scrapy_simdup.Addon": 0}}
STORIES, VARIANTS = 3, 3


def _story(seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(f"word{int(w)}" for w in rng.integers(0, 3000, 60)) for _ in range(6)]


def _page(s: int, v: int, canonical: str | None) -> bytes:
    link = f'<link rel="canonical" href="{canonical}">' if canonical else ""
    body = "\n".join(f"<p>{p}</p>" for p in _story(s))
    ad = ["Subscribe today", "Try our newsletter", "Download the app"][v]
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>Story {s}</title>{link}"
            f"</head><body><nav><a href='/?ref={v}'>Home</a></nav><article><h1>Story {s}</h1>"
            f"{body}</article><aside>{ad}</aside></body></html>").encode()


@pytest.fixture(scope="module")
def site():
    # every copy of story s declares /page/s<s>v1 canonical (relative), but s2's copies
    pages = {f"s{s}v{v}": _page(s, v, f"/page/s{s}v1" if s != 2 else None)
             for s in range(STORIES) for v in range(VARIANTS)}
    with PageServer(pages) as server:
        yield server


def _crawl(tmp_path, site, settings, mode="pages", item_class="dict"):
    job = {"settings": {"LOG_LEVEL": "DEBUG", "SIMDUP_DROP_START_REQUESTS": True,
                        "SIMDUP_LOG_INTERVAL": 0, **settings},
           "requests": [{"url": site.url(f"/page/{name}")} for name in sorted(site.httpd.pages)],
           "mode": mode, "item_class": item_class}
    result = run_job(write_job(tmp_path / "job.json", job), tmp_path / "result.json", cwd=tmp_path)
    assert result["error"] is None, result.get("traceback") or result["error"]
    assert "Traceback" not in result["stderr"], result["stderr"][-3000:]
    return result


def test_tag_mode_leaves_the_spiders_own_tag_field_alone(site, tmp_path):
    result = _crawl(tmp_path, site, {**ADDON, "SIMDUP_ACTION": "tag"}, mode="items",
                    item_class="copy_meta")
    items = result["items"]
    assert len(items) == STORIES * VARIANTS
    pages = {r["url"]: r["simdup"] for r in result["responses"]}
    for item in items:      # what the spider put there, not the items' verdict
        assert item["simdup"] == pages[item["url"]]
        assert item["simdup"]["simhash"] is not None and "skipped" not in item["simdup"]
    warnings = [line for line in result["log"] if "SIMDUP_TAG_FIELD" in line]
    assert len(warnings) == 1 and warnings[0].startswith("WARNING") and "'simdup'" in warnings[0]
    stats = result["stats"]
    assert stats["simdup/items/tag_field_in_use"] == len(items)
    assert stats["simdup/items/checked"] == len(items)       # checked all the same
    # with a field of its own, the items get their verdict
    result = _crawl(tmp_path, site, {**ADDON, "SIMDUP_ACTION": "tag",
                                     "SIMDUP_TAG_FIELD": "simdup_item"}, mode="items",
                    item_class="copy_meta")
    assert all(i["simdup_item"]["simhash"] is not None for i in result["items"])
    assert sum(bool(i["simdup_item"]["duplicate_of"]) for i in result["items"]) == \
        STORIES * (VARIANTS - 1)
    assert not [line for line in result["log"] if "SIMDUP_TAG_FIELD" in line]


def test_items_without_text_pass_unchanged_with_one_info_line(site, tmp_path):
    result = _crawl(tmp_path, site, {**ADDON, "SIMDUP_ACTION": "tag"}, mode="items",
                    item_class="no_text")
    items = result["items"]
    assert len(items) == STORIES * VARIANTS
    assert all(set(i) == {"url", "title"} for i in items)      # no simdup field added
    ours = [line for line in result["log"] if "SIMDUP_ITEM_FIELDS" in line]
    assert len(ours) == 1 and ours[0].startswith("INFO scrapy_simdup: Simdup: no item had text")
    assert f"({len(items)} items passed on unchecked and unchanged)" in ours[0]
    (summary,) = [line for line in result["log"] if "Simdup summary" in line]
    assert "items" not in summary and "no_text" not in summary


def test_the_first_drop_is_logged_at_info_and_canonicals_are_kept(site, tmp_path):
    d = tmp_path / "simdup"
    result = _crawl(tmp_path, site, {**ADDON, "SIMDUP_DIR": str(d)})
    stats = result["stats"]
    assert stats["simdup/dropped"] == STORIES * (VARIANTS - 1)
    (first,) = [line for line in result["log"] if "Filtered near-duplicate page" in line]
    assert first.startswith("INFO scrapy_simdup: ")
    assert "no more dropped pages will be shown (LOG_LEVEL = 'DEBUG' shows every one" in first
    assert all(line.startswith("DEBUG") for line in result["log"]
               if "Dropped near-duplicate" in line)
    # the kept pages say what they declare canonical
    base = site.url("/page/")
    for r in result["responses"]:
        story = int(r["url"].rsplit("/", 1)[1][1])
        assert r["simdup"]["canonical"] == (None if story == 2 else f"{base}s{story}v1")
    # and so do the batch files, for every page checked
    (header,) = list_batches(d)
    batch = read_batch(header)
    assert len(batch.urls) == STORIES * VARIANTS
    for url, canonical in zip(batch.urls, batch.canonicals):
        story = int(url.rsplit("/", 1)[1][1])
        assert canonical == (None if story == 2 else f"{base}s{story}v1")
    # at DEBUG, every drop after the first
    assert sum(line.startswith("DEBUG scrapy_simdup: Dropped near-duplicate page")
               for line in result["log"]) == STORIES * (VARIANTS - 1) - 1
