"""Real Scrapy crawls sharing one Redis index (SIMDUP_INDEX = "redis://...").

Four crawler processes crawl the same near-duplicate site at the same time,
each in its own order, against one redis-server: every near-duplicate cluster
must be kept exactly once across all of them. Then Redis is killed in the
middle of a crawl: SIMDUP_ON_ERROR decides (keep: the crawl goes on and counts
``simdup/errors``; stop: the spider closes), and checking resumes when Redis
is back.
"""
import json
import random
import subprocess
import time

import pytest

from tests.crawl_jobs import start_job, write_job
from tests.http_server import PageServer

H = 3


def _site_pages():
    """The generated near-duplicate site, reduced to clusters whose verdicts do
    not depend on the order: members pairwise within H, clusters more than H apart.
    """
    from benchmarks._data import build_near_duplicate_site, load_article_benchmark
    from scrapy_simdup import fingerprint_html
    from tests.data_root import PAGES_ROOT
    pages = build_near_duplicate_site(load_article_benchmark(PAGES_ROOT)[:45], seed=7)
    fps = {p.path: int(fingerprint_html(p.html).value) for p in pages}
    clusters = {}
    for p in pages:
        members = clusters.setdefault(p.cluster_id, [])
        if all(bin(fps[p.path] ^ fps[q.path]).count("1") <= H for q in members):
            members.append(p)
    chosen, values = [], []
    for _cid, members in sorted(clusters.items()):
        vals = [fps[p.path] for p in members]
        if all(bin(a ^ b).count("1") > H for a in vals for b in values):
            chosen.extend(members)
            values.extend(vals)
    return chosen


def _start_crawl(tmp_path, name, settings, urls):
    job = {"settings": {"LOG_LEVEL": "INFO", "ADDONS": {"scrapy_simdup.Addon": 0},
                        **settings},
           "requests": [{"url": u} for u in urls], "mode": "pages"}
    job_path = write_job(tmp_path / f"{name}.job.json", job)
    result_path = tmp_path / f"{name}.result.json"
    proc = start_job(job_path, result_path, cwd=tmp_path, stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True)
    return proc, result_path


def _finish(proc, result_path, timeout=150):
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    result = json.loads(result_path.read_text())
    assert result["error"] is None, result.get("traceback") or result["error"]
    result["stderr"] = err
    return result


def test_four_processes_keep_each_cluster_exactly_once(redis_server, tmp_path):
    pages = _site_pages()
    by_path = {p.path: p for p in pages}
    n_clusters = len({p.cluster_id for p in pages})
    assert n_clusters >= 20 and len(pages) >= 2 * n_clusters
    served = {p.path.strip("/").replace("/", "_"): p.html for p in pages}
    name_of = {p.path: p.path.strip("/").replace("/", "_") for p in pages}
    settings = {"SIMDUP_INDEX": redis_server.url, "SIMDUP_ACTION": "tag",
                "SIMDUP_DISTANCE": H, "SIMDUP_RECALL": 1.0,       # exact within H
                "SIMDUP_REDIS_KEY": f"crawl4:{time.monotonic_ns()}:%(spider)s",
                # each process crawls every URL: the page another process stored
                # under the same URL is a revisit, tagged as one
                "SIMDUP_ON_REVISIT": "tag",
                "CONCURRENT_REQUESTS": 16}
    with PageServer(served) as server:
        runs = []
        for k in range(4):
            urls = [server.url(f"/page/{name_of[p.path]}") for p in pages]
            random.Random(k).shuffle(urls)
            runs.append(_start_crawl(tmp_path, f"p{k}", settings, urls))
        results = [_finish(*run) for run in runs]
    path_of = {server.url(f"/page/{n}"): path for path, n in name_of.items()}
    kept = {}
    checked = revisits = 0
    for r in results:
        assert r["stats"].get("simdup/errors", 0) == 0
        checked += r["stats"]["simdup/checked"]
        revisits += r["stats"].get("simdup/revisits", 0)
        assert len(r["responses"]) == len(pages)
        for resp in r["responses"]:
            tag = resp["simdup"]
            page = by_path[path_of[resp["url"]]]
            if tag["duplicate_of"] is None:
                kept.setdefault(page.cluster_id, []).append(resp["url"])
            elif tag.get("revisit"):    # the stored page is this URL, as Redis keeps it
                assert tag["duplicate_of"] == resp["url"] and tag["distance"] == 0, tag
            else:   # never a false drop: the page it duplicates is of its cluster
                other = by_path[path_of[tag["duplicate_of"]]]
                assert other.cluster_id == page.cluster_id, (resp["url"], tag)
                assert tag["distance"] <= H
    assert checked == 4 * len(pages)
    assert revisits >= 3 * n_clusters   # each stored page, met by the 3 other processes
    assert {c: len(v) for c, v in kept.items() if len(v) != 1} == {}
    assert len(kept) == n_clusters
    # near-duplicates are stored too, each under its own URL; a URL met
    # by two processes at once is appended by both (the later entry is not
    # kept), so the log may hold a few more entries than URLs
    assert n_clusters <= results[0]["stats"]["simdup/index_size"] <= 1.25 * len(pages)


class _Switch(dict):
    """Pages whose serving runs an action (kill / restart Redis) first."""

    def __init__(self, pages, actions):
        super().__init__(pages)
        self.actions = actions

    def __getitem__(self, name):
        action = self.actions.pop(name, None)
        if action is not None:
            action()
        return super().__getitem__(name)


@pytest.mark.parametrize("on_error", ["keep", "stop"])
def test_redis_lost_mid_crawl(aof_redis, tmp_path, on_error):
    """Redis (append-only file) killed mid-crawl and restarted with its data:
    SIMDUP_ON_ERROR decides the pages checked while it is down; then the
    crawl goes on with the same index (copies of pages stored before the
    kill are found)."""
    pages = _site_pages()[:60]
    served = {f"p{i}": p.html for i, p in enumerate(pages)}
    served.update({f"copy{i}": pages[i].html for i in range(10)})
    served["kill"] = served["restart"] = b"<html><body><p>switch</p></body></html>"
    switch = _Switch(served, {"kill": aof_redis.stop, "restart": aof_redis.start})
    settings = {"SIMDUP_INDEX": aof_redis.url, "SIMDUP_ON_ERROR": on_error,
                "SIMDUP_ACTION": "tag", "SIMDUP_REDIS_KEY": "lost:%(spider)s",
                "SIMDUP_REDIS_PARAMS": {"socket_timeout": 2.0, "socket_connect_timeout": 2.0},
                "CONCURRENT_REQUESTS": 1, "DOWNLOAD_DELAY": 0}
    with PageServer(switch) as server:
        names = [f"p{i}" for i in range(20)] + ["kill"] + [f"p{i}" for i in range(20, 40)] \
            + ["restart"] + [f"p{i}" for i in range(40, 60)] + [f"copy{i}" for i in range(10)]
        # one request after another, in this order (priority: earlier first)
        proc, result_path = _start_crawl(tmp_path, on_error, {
            **settings, "SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.ScrapyPriorityQueue"},
            [server.url(f"/page/{n}") for n in names])
        result = _finish(proc, result_path)   # its watchdog fails a crawl that hangs
        url = server.url
    stats = result["stats"]
    assert stats.get("simdup/errors", 0) >= 1
    assert not any("simdup_index_reset" in line for line in result["log"])
    if on_error == "keep":
        assert stats["finish_reason"] == "finished"
        assert len(result["responses"]) == len(names)    # every page kept
        # checking resumed once Redis was back, with the same index
        skipped = sum(v for k, v in stats.items() if k.startswith("simdup/skipped/"))
        assert stats["simdup/checked"] + stats["simdup/errors"] + skipped == len(names)
        assert stats["simdup/checked"] >= 40
        tags = {r["url"]: r["simdup"] for r in result["responses"]}
        before = {url(f"/page/p{j}") for j in range(20)}
        for i in range(10):   # an exact copy of a page stored before the kill
            tag = tags[url(f"/page/copy{i}")]
            assert tag["duplicate_of"] in before and tag["distance"] == 0, (i, tag)
            assert tag["similarity"] == 1.0
        # an outage is logged once per SIMDUP_LOG_INTERVAL (60 s), not once per page
        logged = [line for line in result["log"] if "Simdup error" in line]
        assert len(logged) == 1 and stats["simdup/errors"] >= 10, logged
        # the pages whose check failed say so in meta["simdup"]
        failed = [r["simdup"] for r in result["responses"] if "error" in r["simdup"]]
        assert len(failed) == stats["simdup/errors"]
        assert all(t["error"].startswith("index lookup failed: ") and t["simhash"] is not None
                   and t["duplicate_of"] is None for t in failed), failed[:2]
        # the log is whole: one entry per page checked (copies are stored too)
        import redis
        client = redis.Redis.from_url(aof_redis.url)
        try:
            n = int(client.hget("lost:simdup_test:meta", "n"))
            assert client.xlen("lost:simdup_test:log") == n == stats["simdup/index_size"]
            assert n == stats["simdup/checked"]
        finally:
            client.close()
    else:
        assert stats["finish_reason"] == "simdup_error"
        assert len(result["responses"]) < len(names)
        # a page whose check failed never reaches the spider
        assert all(r["simdup"] is not None and "error" not in r["simdup"]
                   for r in result["responses"])
        assert any(d["type"] == "IgnoreRequest" for d in result["dropped"]), result["dropped"]


@pytest.mark.parametrize("how", ["restart", "clear"])
def test_redis_emptied_mid_crawl_stops_the_crawl(private_redis, tmp_path, how):
    """Redis restarted without its data, or the index cleared: going on would
    keep again the pages kept before. One ERROR line says so, and the crawl
    stops (simdup_index_reset), though SIMDUP_ON_ERROR is "keep"."""
    from scrapy_simdup.index.redis.reset import reset_redis_index
    pages = _site_pages()[:30]
    served = {f"p{i}": p.html for i, p in enumerate(pages)}
    served["switch"] = b"<html><body><p>switch</p></body></html>"

    def empty():
        if how == "restart":
            private_redis.stop()
            private_redis.start()
        else:
            assert reset_redis_index(private_redis.url, "empty:simdup_test")[0] > 0
    switch = _Switch(served, {"switch": empty})
    settings = {"SIMDUP_INDEX": private_redis.url, "SIMDUP_ON_ERROR": "keep",
                "SIMDUP_ACTION": "tag", "SIMDUP_REDIS_KEY": "empty:%(spider)s",
                "SIMDUP_REDIS_PARAMS": {"socket_timeout": 2.0, "socket_connect_timeout": 2.0},
                "CONCURRENT_REQUESTS": 1, "DOWNLOAD_DELAY": 0,
                "SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.ScrapyPriorityQueue"}
    names = [f"p{i}" for i in range(15)] + ["switch"] + [f"p{i}" for i in range(15, 30)]
    with PageServer(switch) as server:
        proc, result_path = _start_crawl(tmp_path, how, settings,
                                         [server.url(f"/page/{n}") for n in names])
        result = _finish(proc, result_path)
    stats = result["stats"]
    assert stats["finish_reason"] == "simdup_index_reset"
    assert len(result["responses"]) < len(names)
    errors = [line for line in result["log"] if line.startswith("ERROR")]
    reset = [line for line in errors if "emptied or re-created" in line]
    assert len(reset) == 1 and "simdup_index_reset" in reset[0], errors
    # besides, a restart is an outage first: the connection died with the server
    others = [line for line in errors if line not in reset]
    assert others == [] if how == "clear" else len(others) <= 1, errors
    assert "Traceback" not in result["stderr"]


def test_redis_unreachable_at_startup_stops_the_crawl(tmp_path):
    from tests.redis_server import free_port
    url = f"redis://127.0.0.1:{free_port()}/0"
    with PageServer({"a": b"<html><body><p>text</p></body></html>"}) as server:
        proc, result_path = _start_crawl(tmp_path, "down", {
            "SIMDUP_INDEX": url, "SIMDUP_REDIS_PARAMS": {"socket_connect_timeout": 2.0}},
            [server.url("/page/a")])
        out, err = proc.communicate(timeout=120)
    result = json.loads(result_path.read_text())
    # one error line naming the setting and the URL, a finish reason, no traceback
    assert result["error"] is None, result["error"]
    assert result["stats"].get("finish_reason") == "simdup_index_unavailable"
    # one line, though the middleware and the pipeline both found Redis missing
    assert len([line for line in result["log"] if "SIMDUP_INDEX" in line and url in line]) == 1, \
        result["log"]
    assert "Traceback" not in err
    assert result["responses"] == []
