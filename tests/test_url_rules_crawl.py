"""URL rules and trap budgets in real crawls (Scrapy in a fresh process,
``tests/crawl_runner.py``) against the local HTTP server.

The requests are start requests fetched one at a time in their order
(``CONCURRENT_REQUESTS = 1``, ``SIMDUP_DROP_START_REQUESTS = True`` so that
rules may skip them), so that what was learned before each request is known.
"""
from __future__ import annotations

import json

import pytest

from tests.crawl_jobs import run_job, write_job
from tests.http_server import PageServer
from tests.test_scrapy_integration import _articles, _page

pytestmark = pytest.mark.slow

N_ARTICLES = 8


@pytest.fixture(scope="module")
def server():
    pages = {}
    for a, (title, paragraphs) in enumerate(_articles(N_ARTICLES)):
        for v in range(3):
            pages[f"a{a}v{v}"] = _page(title, paragraphs, v)
    with PageServer(pages) as srv:
        srv.names = sorted(pages)
        yield srv


def _crawl(tmp_path, server, paths, name="crawl", **settings):
    job = {"settings": {"SIMDUP_ENABLED": True, "SIMDUP_URL_RULES": True,
                        "SIMDUP_URL_RULES_CHECK": 0.0, "SIMDUP_DROP_START_REQUESTS": True,
                        "CONCURRENT_REQUESTS": 1, "LOG_LEVEL": "INFO",
                        "DOWNLOADER_MIDDLEWARES": {
                            "scrapy_simdup.SimdupDownloaderMiddleware": 585},
                        **settings},
           "requests": [{"url": server.url(p)} for p in paths]}
    work = tmp_path / name
    work.mkdir()
    result = run_job(write_job(work / "job.json", job), work / "result.json", cwd=work)
    assert result["error"] is None, result.get("traceback")
    return result


def _tracking(articles, prefix="utm_source"):
    paths = []
    for a in articles:
        paths += [f"/page/a{a}v0", f"/page/a{a}v0?{prefix}=n{a}"]
    return paths


def _skipped(result):
    return [d for d in result["dropped"] if d["type"] == "NearDuplicateRequest"]


def test_a_rule_is_learned_applied_and_counted(tmp_path, server):
    result = _crawl(tmp_path, server, _tracking(range(N_ARTICLES)))
    stats = result["stats"]
    # three confirmed pairs (a0..a2), then every variant is skipped before download
    assert stats["simdup/url_rules/learned"] >= 1
    skipped = _skipped(result)
    assert [d["url"] for d in skipped] == [server.url(f"/page/a{a}v0?utm_source=n{a}")
                                           for a in range(3, N_ARTICLES)]
    assert [d["duplicate_of"] for d in skipped] == [server.url(f"/page/a{a}v0")
                                                    for a in range(3, N_ARTICLES)]
    assert stats["simdup/url_rules/skipped"] == N_ARTICLES - 3
    assert stats["downloader/request_count"] == N_ARTICLES + 3
    assert any("learned the URL rule query parameter 'utm_source'" in line
               for line in result["log"])
    summary = [line for line in result["log"] if "Simdup summary" in line]
    assert summary and "skipped most: query parameter 'utm_source'" in summary[0]

    # tag mode: nothing is skipped, the hits are fetched and tagged (and checked)
    tagged = _crawl(tmp_path, server, _tracking(range(N_ARTICLES)), name="tag",
                    SIMDUP_ACTION="tag")
    assert not _skipped(tagged)
    assert tagged["stats"]["simdup/url_rules/tagged"] == N_ARTICLES - 3
    assert tagged["stats"]["downloader/request_count"] == 2 * N_ARTICLES
    assert "simdup/url_rules/check_failed" not in tagged["stats"]


def test_a_content_parameter_never_becomes_a_rule(tmp_path, server):
    # /item?id=<name>: near-duplicate variants of one article under other ids
    # propose `id`; the other articles under other ids contradict it
    paths = [f"/item?id=a{a}v{v}" for a in range(N_ARTICLES) for v in range(3)]
    result = _crawl(tmp_path, server, paths, SIMDUP_URL_RULES_SUPPORT=2)
    stats = result["stats"]
    assert stats["simdup/duplicates"] == 2 * N_ARTICLES       # the proposals were there
    assert "simdup/url_rules/learned" not in stats
    assert not _skipped(result)
    assert stats["downloader/request_count"] == len(paths)


def test_a_rule_that_turns_false_is_retracted(tmp_path, server):
    # `v` does not change the page while v < 100; then it does
    names = server.names
    paths = []
    for a in range(4):
        paths += [f"/flip/a{a}v0", f"/flip/a{a}v0?v={a}"]
    late = []
    for a in range(4, N_ARTICLES):
        n = next(n for n in range(100, 200) if not names[n % len(names)].startswith(f"a{a}v"))
        late.append(f"/flip/a{a}v0?v={n}")
        paths += [f"/flip/a{a}v0", late[-1]]
    result = _crawl(tmp_path, server, paths, SIMDUP_URL_RULES_CHECK=1.0)
    stats = result["stats"]
    assert stats["simdup/url_rules/learned"] >= 1
    assert stats["simdup/url_rules/retracted"] >= 1
    assert stats["simdup/url_rules/check_failed"] >= 1
    assert any("retracted the URL rule query parameter 'v'" in line for line in result["log"])
    assert not _skipped(result)               # every hit was a check, and fetched
    assert stats["downloader/request_count"] == len(paths)
    # after the retraction the late pages are checked as any page (each is a
    # copy of another article: dropped as a near-duplicate of that one)
    late_drops = {d["url"]: d["duplicate_of"] for d in result["dropped"]}
    for path in late:
        assert not late_drops[server.url(path)].startswith(server.url(path.split("?")[0]))


def test_rules_survive_a_restart_with_simdup_dir(tmp_path, server):
    directory = str(tmp_path / "simdup")
    first = _crawl(tmp_path, server, _tracking(range(3)), name="first", SIMDUP_DIR=directory)
    assert first["stats"]["simdup/url_rules/learned"] >= 1
    saved = json.loads((tmp_path / "simdup" / "url-rules.json").read_text())
    assert any(r["arg"] == "utm_source" and r["state"] == "active" for r in saved["rules"])
    # a new crawl: the rule is in use from the start
    second = _crawl(tmp_path, server, _tracking([5]), name="second", SIMDUP_DIR=directory)
    assert second["stats"]["simdup/url_rules/restored"] >= 1
    assert [d["url"] for d in _skipped(second)] == [server.url("/page/a5v0?utm_source=n5")]
    # without the directory the second crawl learns from nothing
    fresh = _crawl(tmp_path, server, _tracking([5]), name="fresh")
    assert not _skipped(fresh)
    # starting afresh forgets the rules too
    reset = _crawl(tmp_path, server, _tracking([5]), name="reset", SIMDUP_DIR=directory,
                   SIMDUP_RESET=True)
    assert not _skipped(reset) and not reset["stats"].get("simdup/url_rules/restored")


def test_a_damaged_rules_file_is_moved_aside(tmp_path, server):
    directory = tmp_path / "simdup"
    directory.mkdir()
    (directory / "url-rules.json").write_text("{not json")
    result = _crawl(tmp_path, server, _tracking(range(4)), SIMDUP_DIR=str(directory))
    assert result["stats"]["simdup/url_rules/corrupt"] == 1
    assert list(directory.glob("corrupt-*/url-rules.json"))
    assert result["stats"]["simdup/url_rules/skipped"] == 1     # learned afresh
    assert json.loads((directory / "url-rules.json").read_text())["rules"]


def test_two_processes_on_one_redis_share_rules(tmp_path, server, redis_server):
    shared = {"SIMDUP_INDEX": redis_server.url, "SIMDUP_REDIS_KEY": "rules-test:%(spider)s"}
    first = _crawl(tmp_path, server, _tracking(range(3)), name="first", **shared)
    assert first["stats"]["simdup/url_rules/learned"] >= 1
    # another process on the same Redis, no SIMDUP_DIR: it uses the fleet's rule
    second = _crawl(tmp_path, server, _tracking([6]), name="second", **shared)
    assert [d["url"] for d in _skipped(second)] == [server.url("/page/a6v0?utm_source=n6")]
    # another key prefix: another fleet, nothing shared
    other = _crawl(tmp_path, server, _tracking([6]), name="other",
                   **{**shared, "SIMDUP_REDIS_KEY": "rules-other:%(spider)s"})
    assert not _skipped(other)


def test_a_trap_pattern_is_cut_at_its_budget(tmp_path, server):
    # a calendar: one near-duplicate page under endless day numbers
    days = [f"/page/a0v{d % 3}?day={d}" for d in range(30)]
    result = _crawl(tmp_path, server, days + ["/item?id=a1v0"], SIMDUP_URL_RULES=False,
                    SIMDUP_PATTERN_BUDGET=10)
    stats = result["stats"]
    assert stats["simdup/traps/patterns"] == 1
    assert stats["simdup/traps/dropped"] == 20
    assert stats["downloader/request_count"] == 11
    assert any("trap budget: pattern" in line and "produced 10 pages, 9 of them" in line
               for line in result["log"])
    trap = [d for d in _skipped(result)]
    assert len(trap) == 20 and all(d["duplicate_of"] is None for d in trap)


def test_in_tag_mode_a_trap_pattern_is_deprioritized_not_dropped(tmp_path, server):
    days = [f"/page/a0v{d % 3}?day={d}" for d in range(30)]
    result = _crawl(tmp_path, server, days, SIMDUP_URL_RULES=False, SIMDUP_PATTERN_BUDGET=10,
                    SIMDUP_ACTION="tag")
    stats = result["stats"]
    assert stats["simdup/traps/patterns"] == 1
    assert stats["simdup/traps/deprioritized"] == 20
    assert not _skipped(result)
    assert stats["downloader/request_count"] == 30        # every one fetched, the cut ones last
