"""Real crawls with the real Scrapy engine against a local HTTP server.

Each crawl runs in a fresh process (``tests/crawl_runner.py``, Scrapy's default
asyncio reactor) against ``tests/http_server.py`` on 127.0.0.1:<free port>; the
pages are real article texts (``tests.data_root.PAGES_ROOT``), in a news template, with
the edits that make near-duplicates of one article (ad slot, navigation
tracking parameters); the near-duplicate quality itself is measured elsewhere
(the example project and the benchmarks): these tests check the plumbing.
"""
from __future__ import annotations

import json
import os

import pytest

from tests.crawl_jobs import run_job, write_job
from tests.data_root import PAGES_ROOT
from tests.http_server import PageServer

DATA = PAGES_ROOT

N_ARTICLES = 5
N_VARIANTS = 3

pytestmark = pytest.mark.slow


def _articles(n: int) -> list[tuple[str, list[str]]]:
    truth = json.loads((DATA / "article-extraction-benchmark" / "ground-truth.json")
                       .read_text("utf-8"))
    out = []
    for key in sorted(truth):
        body = truth[key].get("articleBody") or ""
        paragraphs = [p.strip() for p in body.split("\n") if len(p.split()) >= 8]
        if 400 <= sum(len(p.split()) for p in paragraphs) <= 2000 and len(paragraphs) >= 4:
            out.append((paragraphs[0][:70], paragraphs))
        if len(out) == n:
            break
    assert len(out) == n, f"not enough articles in {DATA}"
    return out


def _page(title: str, paragraphs: list[str], variant: int) -> bytes:
    stamp = "2024-05-10 09:12"
    ad = ["Subscribe today", "Try our newsletter", "Download the app"][variant % 3]
    body = "\n".join(f"<p>{p}</p>" for p in paragraphs)
    return f"""<!DOCTYPE html><html><head><meta charset="utf-8"><title>{title}</title></head>
<body><nav><a href="/?ref={variant}">Home</a> <a href="/world?ref={variant}">World</a>
<a href="/sport?ref={variant}">Sport</a></nav>
<article><h1>{title}</h1><p class="byline">Updated {stamp}</p>
{body}
<p class="comments">4 comments</p></article>
<aside>{ad}</aside><footer>(c) Example News</footer></body></html>""".encode()


@pytest.fixture(scope="module")
def site():
    pages, clusters = {}, {}
    for a, (title, paragraphs) in enumerate(_articles(N_ARTICLES)):
        for v in range(N_VARIANTS):
            name = f"a{a}v{v}"
            pages[name] = _page(title, paragraphs, v)
            clusters[name] = a
    raw = {
        "json": ("application/json", b'{"a": 1}'),
        "text": ("text/plain", b"just some plain text " * 50),
        "png": ("image/png", b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 20),
        "huge": ("text/html", b"<html><body>" + b"".join(
            f"<p>paragraph {i} of a very long page about topic {i % 97} and more</p>".encode()
            for i in range(120_000)) + b"</body></html>"),
        "malformed": ("text/html", b"<html><body><p>unclosed <div><span>"
                      + b"<b>" * 3000 + b"\x00\xff\xfe broken bytes <<<>>> &bogus; "
                      + b"text " * 200 + b"</i></i></html></body>"),
        "empty": ("text/html", b""),
        "scriptonly": ("text/html", b"<html><head><script>var a = 1;</script></head></html>"),
        "binaryhtml": ("text/html", bytes(range(256)) * 40),
    }
    with PageServer(pages, raw) as server:
        server.clusters = clusters
        yield server


def run_crawl(tmp_path, settings, requests, mode="pages", item_class="dict", expect_error=False):
    # every request of these crawls is a start request (crawl_runner's start()),
    # which is not dropped by default: these tests check dropping
    job = {"settings": {"LOG_LEVEL": "DEBUG", "SIMDUP_DROP_START_REQUESTS": True, **settings},
           "requests": requests, "mode": mode, "item_class": item_class}
    job_path = write_job(tmp_path / "job.json", job)
    result = run_job(job_path, tmp_path / "result.json", cwd=tmp_path)
    # test_scrapy_versions.py re-runs this module on the oldest supported Scrapy
    expected_version = os.environ.get("SIMDUP_EXPECT_SCRAPY")
    if expected_version:
        assert result["scrapy_version"] == expected_version
    if not expect_error:
        assert result["error"] is None, result.get("traceback") or result["error"]
    # current async components: no deprecation warning from or about us
    ours = [w for w in result["warnings"] if "scrapy_simdup" in w or "Simdup" in w]
    assert not ours, ours
    assert "Traceback" not in result["stderr"] or expect_error, result["stderr"][-3000:]
    return result


def _name(url: str) -> str:
    return url.split("?")[0].rstrip("/").rsplit("/", 1)[-1]


ADDON = {"ADDONS": {"scrapy_simdup.Addon": 0}}


def test_drop_mode_keeps_one_page_per_cluster(site, tmp_path):
    requests = [{"url": site.url(f"/page/{name}")} for name in site.httpd.pages]
    # four more byte-identical copies of one page, fetched concurrently: one survives
    requests += [{"url": site.url(f"/page/a0v0?session={i}")} for i in range(4)]
    result = run_crawl(tmp_path, {**ADDON, "CONCURRENT_REQUESTS": 16}, requests)
    assert result["reactor"] == "AsyncioSelectorReactor"  # Scrapy's default
    stats = result["stats"]
    total = N_ARTICLES * N_VARIANTS + 4
    assert stats["simdup/checked"] == total
    assert stats["simdup/duplicates"] == total - N_ARTICLES
    assert stats["simdup/dropped"] == total - N_ARTICLES
    # every page is stored: a near-duplicate under the key of the page it duplicates
    assert stats["simdup/index_size"] == total
    kept = sorted(site.clusters[_name(r["url"])] for r in result["responses"])
    assert kept == list(range(N_ARTICLES))
    for r in result["responses"]:  # the pages that reach the spider carry their verdict
        assert isinstance(r["simdup"]["simhash"], int) and r["simdup"]["duplicate_of"] is None
    # dropped responses never reach the callback: the errback gets NearDuplicateResponse
    assert len(result["dropped"]) == total - N_ARTICLES
    for drop in result["dropped"]:
        assert drop["type"] == "NearDuplicateResponse"
        assert site.clusters[_name(drop["url"])] == site.clusters[_name(drop["duplicate_of"])]
        assert 0 <= drop["distance"] <= 3
        assert 0.15 <= drop["similarity"] <= 1.0
    assert any("Dropped near-duplicate" in line and "distance" in line for line in result["log"])
    assert any(line.startswith("INFO scrapy_simdup: Simdup summary: pages: checked 19")
               for line in result["log"]), result["log"]


def test_tag_mode_and_periodic_log_line(site, tmp_path):
    requests = [{"url": site.url(f"/page/{name}")} for name in site.httpd.pages]
    settings = {**ADDON, "SIMDUP_ACTION": "tag", "SIMDUP_LOG_INTERVAL": 0.2,
                "CONCURRENT_REQUESTS": 1, "DOWNLOAD_DELAY": 0.08}
    result = run_crawl(tmp_path, settings, requests)
    responses = result["responses"]
    assert len(responses) == N_ARTICLES * N_VARIANTS
    duplicates = [r for r in responses if r["simdup"]["duplicate_of"] is not None]
    originals = [r for r in responses if r["simdup"]["duplicate_of"] is None]
    assert len(duplicates) == N_ARTICLES * (N_VARIANTS - 1)
    assert sorted(site.clusters[_name(r["url"])] for r in originals) == list(range(N_ARTICLES))
    for r in responses:
        tag = r["simdup"]
        assert isinstance(tag["simhash"], int) and 0 <= tag["simhash"] < 2**64
        if tag["duplicate_of"] is None:
            assert tag["distance"] is None and tag["similarity"] is None
        else:
            assert site.clusters[_name(tag["duplicate_of"])] == site.clusters[_name(r["url"])]
            assert 0 <= tag["distance"] <= 3
            # the variants differ outside the main content: the same feature set
            assert tag["similarity"] == 1.0
    stats = result["stats"]
    assert stats["simdup/tagged"] == len(duplicates)
    assert "simdup/dropped" not in stats
    assert any(line.startswith("INFO scrapy_simdup: Simdup: checked ") and "pages/min" in line
               for line in result["log"]), result["log"]


def test_gzip_and_redirects_with_explicit_middleware_entry(site, tmp_path):
    # the other way to enable it: a DOWNLOADER_MIDDLEWARES entry + SIMDUP_ENABLED
    settings = {"SIMDUP_ENABLED": True, "SIMDUP_ACTION": "tag",
                "DOWNLOADER_MIDDLEWARES": {"scrapy_simdup.SimdupDownloaderMiddleware": 585}}
    requests = [{"url": site.url("/gz/a1v0")}, {"url": site.url("/redirect/a2v0")},
                {"url": site.url("/gz/a3v0")}, {"url": site.url("/redirect/a3v1")}]
    result = run_crawl(tmp_path, settings, requests)
    stats = result["stats"]
    # all four were fingerprinted as decompressed HTML after the redirect
    assert stats["simdup/checked"] == 4, stats
    assert not any(k.startswith("simdup/skipped/") for k in stats), stats
    by_name = {_name(r["url"]): r for r in result["responses"]}
    assert by_name["a2v0"]["redirect_urls"] and "utm_source=redirect" in by_name["a2v0"]["url"]
    assert by_name["a1v0"]["simdup"]["duplicate_of"] is None
    assert by_name["a2v0"]["simdup"]["duplicate_of"] is None
    # the gzip copy and the redirected copy of article 3 are near-duplicates
    tags = [by_name["a3v0"]["simdup"], by_name["a3v1"]["simdup"]]
    assert sorted(t["duplicate_of"] is None for t in tags) == [False, True]
    dup = next(t for t in tags if t["duplicate_of"])
    assert "utm_source=redirect" in dup["duplicate_of"] or "/gz/a3v0" in dup["duplicate_of"]
    assert stats["httpcompression/response_count"] >= 2


def test_non_html_and_dont_simdup_are_skipped(site, tmp_path):
    requests = [{"url": site.url(f"/raw/{n}")} for n in ("json", "text", "png")]
    requests += [{"url": site.url("/page/a0v0")},
                 {"url": site.url("/page/a0v1"), "meta": {"dont_simdup": True}},
                 {"url": site.url("/page/nope")}]
    result = run_crawl(tmp_path, {**ADDON, "HTTPERROR_ALLOW_ALL": True}, requests)
    stats = result["stats"]
    assert stats["simdup/skipped/not_html"] == 3
    assert stats["simdup/skipped/dont_simdup"] == 1
    assert stats["simdup/skipped/status"] == 1  # the 404 page is not fingerprinted
    assert stats["simdup/checked"] == 1
    assert "simdup/duplicates" not in stats
    assert len(result["responses"]) == 6  # everything reached the spider


def test_robots_txt_is_not_a_page_of_the_crawl(site, tmp_path):
    """Scrapy's own robots.txt request (a 404 here) is neither checked nor counted."""
    result = run_crawl(tmp_path, {**ADDON, "ROBOTSTXT_OBEY": True},
                       [{"url": site.url("/page/a0v0")}])
    stats = result["stats"]
    assert stats["simdup/checked"] == 1
    assert not [k for k in stats if k.startswith("simdup/skipped/")], stats


def test_huge_malformed_and_empty_pages(site, tmp_path):
    names = ("huge", "malformed", "empty", "scriptonly", "binaryhtml")
    requests = [{"url": site.url(f"/raw/{n}")} for n in names]
    result = run_crawl(tmp_path, {**ADDON, "SIMDUP_ACTION": "tag"}, requests)
    stats = result["stats"]
    skipped = {k: v for k, v in stats.items() if k.startswith("simdup/skipped/")}
    # every page is accounted for: fingerprinted or skipped with a reason, no errors
    assert stats.get("simdup/checked", 0) + sum(skipped.values()) == len(names), stats
    assert "simdup/errors" not in stats, result["log"]
    assert stats.get("simdup/skipped/empty", 0) + stats.get(
        "simdup/skipped/too_few_features", 0) >= 2  # empty, script only
    assert len(result["responses"]) == len(names)
    tags = {_name(r["url"]): r["simdup"] for r in result["responses"]}
    assert tags["empty"]["simhash"] is None and tags["empty"]["skipped"]


def test_pages_in_a_declared_utf16_or_utf32_without_a_bom_are_checked(tmp_path):
    """A page served as ``text/html; charset=utf-16be`` (-le, utf-32) without a
    byte-order mark is decoded as Scrapy's response.text decodes it (it was
    skipped as "binary"): the same article in UTF-8 and in those is one page."""
    def article(topic, sentence):
        words = " ".join(sentence.format(i=i) for i in range(60))
        return (f"<!DOCTYPE html><html><head><title>{topic} – café news</title></head>"
                f"<body><article><h1>{topic}</h1><p>{words}</p><p>naïve résumé</p>"
                f"</article></body></html>")
    first = article("Harbour", "The harbour council met on day {i} and voted on berth {i}.")
    second = article("Railway", "Engineers rebuilt {i} bridges while trains ran late by {i} "
                     "minutes, passengers said.")
    raw = {"utf8": ("text/html; charset=utf-8", first.encode("utf-8")),
           "utf16be": ("text/html; charset=utf-16be", first.encode("utf-16-be")),
           "utf16le": ("text/html; charset=utf-16le", first.encode("utf-16-le")),
           "utf32le": ("text/html; charset=UTF-32LE", first.encode("utf-32-le")),
           "other16le": ("text/html; charset=utf-16-le", second.encode("utf-16-le"))}
    names = list(raw)
    with PageServer({}, raw) as server:
        requests = [{"url": server.url(f"/raw/{n}")} for n in names]
        result = run_crawl(tmp_path, {**ADDON, "SIMDUP_ACTION": "tag", "CONCURRENT_REQUESTS": 1},
                           requests)
    stats = result["stats"]
    assert not [k for k in stats if k.startswith("simdup/skipped/")], stats
    assert stats["simdup/checked"] == len(names)
    tags = {_name(r["url"]): r["simdup"] for r in result["responses"]}
    assert tags["utf8"]["duplicate_of"] is None and tags["other16le"]["duplicate_of"] is None
    for name in ("utf16be", "utf16le", "utf32le"):
        assert tags[name]["duplicate_of"].endswith("/raw/utf8"), tags[name]
        assert tags[name]["distance"] == 0 and tags[name]["simhash"] == tags["utf8"]["simhash"]


def test_pages_over_max_bytes_are_fingerprinted_by_their_text(tmp_path):
    """Three different articles behind one 5 MB inline image (over the 4 MiB
    SIMDUP_MAX_BYTES): none is dropped as a copy of another (cut at 4 MiB,
    each used to be the image alone, at distance 0), nothing is truncated,
    a page whose text is behind a 30 MB attribute is fingerprinted, and so
    is one with a tag of 200 000 attributes (not parsed as it is)."""
    image = b'<img src="data:image/png;base64,' + b"A" * 5_000_000 + b'">'
    pages = {}
    for a, (title, paragraphs) in enumerate(_articles(3)):
        page = _page(title, paragraphs, 0)
        pages[f"big{a}"] = page.replace(b"<body>", b"<body>" + image, 1)
    title, paragraphs = _articles(5)[3]
    pages["hugeattr"] = _page(title, paragraphs, 0).replace(
        b"<body>", b'<body><div data-state="' + b"x" * 30_000_000 + b'"></div>', 1)
    # 200 000 attributes in one tag: libxml2 needed 140 s for this 2.6 MB page
    title, paragraphs = _articles(5)[4]
    pages["manyattrs"] = _page(title, paragraphs, 0).replace(
        b"<body>", b"<body><div " + " ".join(f"a{i}=x" for i in range(200_000)).encode()
        + b"></div>", 1)
    with PageServer(pages, {}) as server:
        requests = [{"url": server.url(f"/page/{name}")} for name in sorted(pages)]
        result = run_crawl(tmp_path, {**ADDON, "SIMDUP_ACTION": "tag"}, requests)
    stats = result["stats"]
    assert stats["simdup/checked"] == 5
    assert "simdup/duplicates" not in stats and "simdup/truncated" not in stats
    assert not [k for k in stats if k.startswith("simdup/skipped/")]


def test_item_pipeline_drops_duplicate_items(site, tmp_path):
    settings = {"SIMDUP_ENABLED": True, "SIMDUP_ITEM_FIELDS": ["text"],
                "ITEM_PIPELINES": {"scrapy_simdup.SimdupPipeline": 200}}
    requests = [{"url": site.url(f"/page/{name}")} for name in site.httpd.pages]
    result = run_crawl(tmp_path, settings, requests, mode="items")
    stats = result["stats"]
    n = N_ARTICLES * N_VARIANTS
    assert stats["simdup/items/checked"] == n
    assert stats["simdup/items/dropped"] == n - N_ARTICLES
    assert "simdup/checked" not in stats  # the downloader middleware is not enabled
    assert len(result["responses"]) == n
    assert sorted(site.clusters[_name(i["url"])] for i in result["items"]) == \
        list(range(N_ARTICLES))
    for drop in result["dropped"]:
        assert drop["type"] == "NearDuplicateItem"
        assert site.clusters[_name(drop["url"])] == site.clusters[_name(drop["duplicate_of"])]
        assert 0.15 <= drop["similarity"] <= 1.0
    # dropped near-duplicates are counted, and logged at DEBUG (not a WARNING each)
    assert not [line for line in result["log"] if "Dropped" in line], result["log"][:3]
    # the pipeline alone: the close summary has an items part only
    (summary,) = [line for line in result["log"] if "Simdup summary" in line]
    assert "Simdup summary: items: checked" in summary and "pages:" not in summary


def test_structure_features_leave_items_alone(site, tmp_path):
    """SIMDUP_FEATURES = "structure" (template-level dedup of pages) has no
    text features for items: the add-on's pipeline turns itself off with one
    warning instead of failing on every item."""
    settings = {**ADDON, "SIMDUP_FEATURES": "structure", "SIMDUP_ITEM_FIELDS": ["text"],
                "SIMDUP_MIN_FEATURES": 2,
                "SIMDUP_ACTION": "tag"}
    requests = [{"url": site.url(f"/page/a{a}v0")} for a in range(3)]
    result = run_crawl(tmp_path, settings, requests, mode="items")
    stats = result["stats"]
    assert stats["simdup/checked"] == 3
    assert not [k for k in stats if k.startswith("simdup/items/")]
    assert len(result["items"]) == 3
    warnings = [line for line in result["log"] if "SimdupPipeline is off" in line]
    assert len(warnings) == 1 and "SIMDUP_FEATURES" in warnings[0]


def test_item_pipeline_tags_a_field(site, tmp_path):
    settings = {**ADDON, "SIMDUP_ACTION": "tag", "SIMDUP_ITEM_FIELDS": "title,text",
                "SIMDUP_TAG_FIELD": "dup", "SIMDUP_DEBUG": True}
    requests = [{"url": site.url(f"/page/a{a}v{v}")} for a in range(2) for v in range(2)]
    result = run_crawl(tmp_path, settings, requests, mode="items")
    items = result["items"]
    assert len(items) == 4
    # SIMDUP_DEBUG: one line per check, saying whether a page or an item was checked
    assert sum("Simdup checked page " in line for line in result["log"]) == 4
    assert sum("Simdup checked item " in line for line in result["log"]) == 4
    tagged = [i for i in items if i["dup"]["duplicate_of"]]
    assert len(tagged) == 2 and result["stats"]["simdup/items/tagged"] == 2
    for item in tagged:
        assert site.clusters[_name(item["dup"]["duplicate_of"])] == site.clusters[_name(item["url"])]


def test_item_pipeline_tag_field_missing_on_scrapy_item(site, tmp_path):
    settings = {**ADDON, "SIMDUP_ACTION": "tag"}
    requests = [{"url": site.url("/page/a0v0")}, {"url": site.url("/page/a0v1")}]
    result = run_crawl(tmp_path, settings, requests, mode="items", item_class="scrapy")
    assert len(result["items"]) == 2  # kept, not crashed
    assert result["stats"]["simdup/items/errors"] == 2
    warnings = [line for line in result["log"] if "Cannot tag Item items with a 'simdup'" in line]
    assert len(warnings) == 1 and "KeyError" in warnings[0]


def test_item_pipeline_tag_on_frozen_items_keeps_them(site, tmp_path):
    """Frozen dataclass items cannot take the tag field: every item goes on
    untagged (counted, one warning), none is lost."""
    settings = {**ADDON, "SIMDUP_ACTION": "tag"}
    requests = [{"url": site.url(f"/page/a0v{v}")} for v in range(3)]
    result = run_crawl(tmp_path, settings, requests, mode="items", item_class="frozen")
    assert len(result["items"]) == 3 and all(i["simdup"] is None for i in result["items"])
    assert result["stats"]["simdup/items/errors"] == 3
    assert result["stats"]["simdup/items/duplicates"] == 2
    assert "simdup/items/tagged" not in result["stats"]      # found, but no tag written
    assert sum("Cannot tag FrozenItem items" in line for line in result["log"]) == 1


def test_item_field_that_cannot_be_read_is_a_counted_skip(site, tmp_path):
    settings = {**ADDON, "SIMDUP_ITEM_FIELDS": ["text"], "SIMDUP_ACTION": "tag"}
    requests = [{"url": site.url(f"/page/a0v{v}")} for v in range(2)]
    result = run_crawl(tmp_path, settings, requests, mode="items", item_class="unreadable")
    assert len(result["items"]) == 2
    assert result["stats"]["simdup/items/skipped/unreadable_field"] == 2
    assert "simdup/items/errors" not in result["stats"]
    # an id whose str() fails: the item is checked under a number instead
    result = run_crawl(tmp_path, settings, requests, mode="items", item_class="unreadable_id")
    assert len(result["items"]) == 2 and result["stats"]["simdup/items/checked"] == 2


def test_bad_setting_fails_the_crawl_at_start_up(site, tmp_path):
    result = run_crawl(tmp_path, {**ADDON, "SIMDUP_DISTANCE": "three"},
                       [{"url": site.url("/page/a0v0")}], expect_error=True)
    assert result["error"].startswith("ValueError") and "SIMDUP_DISTANCE" in result["error"]
    assert not result["responses"]


def test_sketch_bands_in_a_crawl_and_in_the_index_it_restores(site, tmp_path):
    """SIMDUP_BANDS: the start-up line says so, and a second crawl with the
    same SIMDUP_DIR restores the index (its bands built again) and drops the
    variants of the first crawl's pages."""
    settings = {**ADDON, "SIMDUP_BANDS": 12, "SIMDUP_MAX_PROBES": 128,
                "SIMDUP_DIR": str(tmp_path / "simdup")}
    first = [{"url": site.url(f"/page/a{a}v0")} for a in range(N_ARTICLES)]
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    result = run_crawl(tmp_path / "one", settings, first)
    assert result["stats"]["simdup/checked"] == N_ARTICLES
    assert result["stats"].get("simdup/duplicates", 0) == 0
    assert any("128 probes per key and 12 sketch bands" in line for line in result["log"])
    rest = [{"url": site.url(f"/page/a{a}v{v}")} for a in range(N_ARTICLES)
            for v in range(1, N_VARIANTS)]
    result = run_crawl(tmp_path / "two", settings, rest)
    stats = result["stats"]
    assert stats["simdup/checked"] == len(rest) and stats["simdup/dropped"] == len(rest)
    assert stats["simdup/index_size"] == N_ARTICLES + len(rest)
    for drop in result["dropped"]:
        assert drop["duplicate_of"].endswith("v0")
        assert site.clusters[_name(drop["url"])] == site.clusters[_name(drop["duplicate_of"])]
