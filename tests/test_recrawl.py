"""Re-crawls with SIMDUP_DIR: revisits, start requests, the start-up line.

A page whose stored match is the page itself (same URL, or the same item id)
is a revisit: counted in ``simdup/revisits``, kept by default
(``SIMDUP_ON_REVISIT``). Start requests are checked but not dropped unless
``SIMDUP_DROP_START_REQUESTS``. Real crawls in fresh processes
(tests/crawl_runner.py) against a local HTTP server, following links from a
home page as a spider does.
"""
from __future__ import annotations

import json

import pytest

from tests.crawl_jobs import run_job, write_job
from tests.data_root import PAGES_ROOT
from tests.http_server import PageServer

N_ARTICLES = 6


def _html(title: str, body: str) -> bytes:
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title></head>"
            f"<body>{body}</body></html>").encode()


@pytest.fixture(scope="module")
def site():
    truth = json.loads((PAGES_ROOT / "article-extraction-benchmark" / "ground-truth.json")
                       .read_text("utf-8"))
    pages, teasers = {}, []
    for key in sorted(truth):
        paragraphs = [p.strip() for p in truth[key]["articleBody"].split("\n")
                      if len(p.split()) >= 8]
        if sum(len(p.split()) for p in paragraphs) < 300:
            continue
        name = f"a{len(pages)}"
        body = "".join(f"<p>{p}</p>" for p in paragraphs)
        pages[name] = _html(paragraphs[0][:60], f"<article><h1>{name}</h1>{body}</article>")
        teasers.append(f'<li><a href="/page/{name}">{paragraphs[0][:60]}</a>'
                       f"<p>{paragraphs[1]}</p></li>")
        if len(pages) == N_ARTICLES:
            break
    # the home page: enough text of its own to be fingerprinted, and the links
    pages["home"] = _html("Home", f"<main><h1>Latest news</h1><ul>{''.join(teasers)}</ul></main>")
    with PageServer(pages) as server:
        server.articles = [f"a{i}" for i in range(N_ARTICLES)]
        yield server


def _crawl(tmp_path, name, settings, urls, follow=True, mode="pages"):
    job = {"settings": {"LOG_LEVEL": "INFO", "ADDONS": {"scrapy_simdup.Addon": 0},
                        "CONCURRENT_REQUESTS": 1, **settings},
           "requests": [{"url": u} for u in urls], "mode": mode, "follow": follow}
    job_path = write_job(tmp_path / f"{name}.json", job)
    result = run_job(job_path, tmp_path / f"{name}-result.json", cwd=tmp_path)
    assert result["error"] is None, result.get("traceback") or result["error"]
    assert "Traceback" not in result["stderr"], result["stderr"][-3000:]
    return result


def _setup_line(result) -> str:
    (line,) = [line for line in result["log"] if "scrapy_simdup" in line and " within " in line]
    return line


@pytest.mark.slow
def test_a_recrawl_follows_the_links_and_keeps_the_revisits(site, tmp_path):
    """The issue's case: run twice with SIMDUP_DIR, the second run used to drop
    its start page as a near-duplicate of itself and crawl nothing."""
    d = tmp_path / "simdup"
    home = site.url("/page/home")
    every = {home} | {site.url(f"/page/{a}") for a in site.articles}
    first = _crawl(tmp_path, "first", {"SIMDUP_DIR": str(d)}, [home])
    assert {r["url"] for r in first["responses"]} == every
    assert first["stats"]["simdup/checked"] == len(every)
    assert "simdup/duplicates" not in first["stats"] and "simdup/revisits" not in first["stats"]
    line = _setup_line(first)
    assert line.startswith("INFO scrapy_simdup") and (
        "drop near-duplicate pages and items within 22 bits of either key and similarity "
        ">= 0.18 (PSM, 128 probes per key and 12 sketch bands, expected recall 1.000 at this "
        "size), memory "
        "index") in line
    assert f"SIMDUP_DIR={d}: restored 0 fingerprints and 0 items" in line
    assert "revisits kept, start requests not dropped" in line

    # the re-crawl: everything is a revisit, kept, and the links are followed
    again = _crawl(tmp_path, "again", {"SIMDUP_DIR": str(d)}, [home])
    stats = again["stats"]
    assert {r["url"] for r in again["responses"]} == every
    assert stats["finish_reason"] == "finished"
    assert stats["simdup/revisits"] == stats["simdup/checked"] == len(every)
    assert "simdup/duplicates" not in stats and "simdup/dropped" not in stats
    assert stats["simdup/index_restored"] == len(every)
    assert stats["simdup/index_size"] == len(every)     # a revisit is not stored again
    # kept as if new (SIMDUP_ON_REVISIT = "keep")
    assert all(r["simdup"]["duplicate_of"] is None and "revisit" not in r["simdup"]
               for r in again["responses"])
    assert f"restored {len(every):,} fingerprints" in _setup_line(again)
    assert any("revisits" in line and "Simdup summary" in line for line in again["log"])

    # "tag": they reach the spider marked as revisits of themselves
    tagged = _crawl(tmp_path, "tagged", {"SIMDUP_DIR": str(d), "SIMDUP_ON_REVISIT": "tag"},
                    [home])
    assert {r["url"] for r in tagged["responses"]} == every
    for r in tagged["responses"]:
        assert r["simdup"]["revisit"] is True and r["simdup"]["duplicate_of"] == r["url"]
        assert r["simdup"]["distance"] == 0 and r["simdup"]["similarity"] == 1.0
    assert "revisits tagged" in _setup_line(tagged)

    # "drop": dropped like near-duplicates, but for the start page, which
    # reaches the spider (tagged) so that its links are followed
    dropped = _crawl(tmp_path, "dropped", {"SIMDUP_DIR": str(d), "SIMDUP_ON_REVISIT": "drop"},
                     [home])
    stats = dropped["stats"]
    assert [r["url"] for r in dropped["responses"]] == [home]
    assert dropped["responses"][0]["simdup"]["revisit"] is True
    assert stats["simdup/start_requests_kept"] == 1
    assert stats["simdup/revisits"] == len(every)
    assert stats["simdup/dropped"] == len(every) - 1
    assert "simdup/duplicates" not in stats
    assert {(r["url"], r["duplicate_of"], r["type"]) for r in dropped["dropped"]} == {
        (u, u, "NearDuplicateResponse") for u in every - {home}}
    # and with SIMDUP_DROP_START_REQUESTS, the start page too: nothing is crawled
    nothing = _crawl(tmp_path, "nothing", {"SIMDUP_DIR": str(d), "SIMDUP_ON_REVISIT": "drop",
                                          "SIMDUP_DROP_START_REQUESTS": True}, [home])
    assert nothing["responses"] == [] and nothing["stats"]["simdup/dropped"] == 1
    assert "start requests dropped like other pages" in _setup_line(nothing)


@pytest.mark.slow
def test_a_start_page_that_duplicates_another_stored_page_is_kept(site, tmp_path):
    d = tmp_path / "simdup"
    original, copy = site.url("/page/a0"), site.url("/gz/a0")   # same page, another URL
    _crawl(tmp_path, "first", {"SIMDUP_DIR": str(d)}, [original], follow=False)
    again = _crawl(tmp_path, "again", {"SIMDUP_DIR": str(d)}, [copy], follow=False)
    stats = again["stats"]
    (response,) = again["responses"]
    assert response["simdup"]["duplicate_of"] == original and "revisit" not in response["simdup"]
    assert response["simdup"]["distance"] == 0 and response["simdup"]["similarity"] == 1.0
    assert stats["simdup/duplicates"] == stats["simdup/start_requests_kept"] == 1
    assert "simdup/dropped" not in stats and "simdup/revisits" not in stats
    # SIMDUP_DROP_START_REQUESTS = True: dropped like any near-duplicate
    dropped = _crawl(tmp_path, "dropped", {"SIMDUP_DIR": str(d),
                                           "SIMDUP_DROP_START_REQUESTS": True},
                     [copy], follow=False)
    assert dropped["responses"] == [] and dropped["stats"]["simdup/dropped"] == 1
    assert dropped["dropped"][0]["duplicate_of"] == original


@pytest.mark.slow
def test_items_of_the_same_id_are_revisits(site, tmp_path):
    """An item whose SIMDUP_ITEM_ID_FIELD (url) is the stored item's key."""
    d = tmp_path / "simdup"
    urls = [site.url(f"/page/{a}") for a in site.articles]
    first = _crawl(tmp_path, "first", {"SIMDUP_DIR": str(d)}, urls, follow=False, mode="items")
    assert len(first["items"]) == len(urls)
    again = _crawl(tmp_path, "again", {"SIMDUP_DIR": str(d)}, urls, follow=False, mode="items")
    stats = again["stats"]
    assert len(again["items"]) == len(urls)
    assert stats["simdup/items/revisits"] == stats["simdup/items/checked"] == len(urls)
    assert "simdup/items/duplicates" not in stats
    tagged = _crawl(tmp_path, "tagged", {"SIMDUP_DIR": str(d), "SIMDUP_ON_REVISIT": "tag",
                                         "SIMDUP_ON_ERROR": "keep"},
                    urls, follow=False, mode="items")
    assert all(item["simdup"]["revisit"] is True and item["simdup"]["duplicate_of"] ==
               item["url"] for item in tagged["items"])
    dropped = _crawl(tmp_path, "dropped", {"SIMDUP_DIR": str(d), "SIMDUP_ON_REVISIT": "drop"},
                     urls, follow=False, mode="items")
    assert dropped["items"] == []
    assert dropped["stats"]["simdup/items/dropped"] == len(urls)
