"""The shared Redis index (a log in a Stream, a replica in every process),
against a real redis-server.

Pages here are synthetic clusters of near-duplicates: keys a few bits from
the cluster's, sketches a few bins apart, so that the members of a cluster
all match one another and nothing else. The replicas search exhaustively
(every flip set of 8 header bits), so every verdict is decided by the log
alone: of each cluster exactly one page is kept, whichever process meets it
first and however the look-ups and appends of the processes interleave.
Also: the layout in Redis, the start-up checks (unreachable, evicting,
another layout, other data, other settings, a log larger than allowed),
Redis lost and back with its data, and Redis restarted empty.
"""
import asyncio
import multiprocessing as mp
import time

import numpy as np
import pytest

from scrapy_simdup.exceptions import IndexConflictError, IndexUnavailableError, ParameterError
from scrapy_simdup.index.backend import Match, Page
from scrapy_simdup.index.redis.backend import RedisBackend
from scrapy_simdup.index.redis.log import LAYOUT, IndexResetError, RedisLog, safe_url
from scrapy_simdup.index.redis.reset import reset_redis_index
from scrapy_simdup.index.replica import RECORD_BYTES, pack_entry, url_hash
from scrapy_simdup.index.verified import VerifiedIndex
from scrapy_simdup.integration.backends import setting_message
from tests.redis_server import free_port

M64 = (1 << 64) - 1


def run(coro):
    return asyncio.run(coro)


def _prefix(name="t"):
    return f"{name}:{time.monotonic_ns()}"


def _index(distance=22, min_similarity=0.18):
    # every flip set of the 8 header bits: exhaustive, as the tests need
    return VerifiedIndex(distance=distance, min_similarity=min_similarity, max_probes=None,
                         header_bits=8)


def _open(url, prefix, follow=0, **kw):
    index = _index(kw.pop("distance", 22), kw.pop("min_similarity", 0.18))
    return RedisBackend.open(url, prefix, index, follow_interval=follow, **kw)


def _flip(x, rng, nbits):
    for b in rng.choice(64, nbits, replace=False):
        x ^= 1 << int(b)
    return x


def clusters(seed, n, copies):
    """``n`` clusters of ``copies`` near-duplicates each: keys at most 3 bits
    from the cluster's (6 apart), at most 4 of the 32 bins changed. Members of
    a cluster match one another (distance 22, similarity 0.15), never another
    cluster's."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        c1, c2 = (int(x) for x in rng.integers(0, M64, 2, dtype=np.uint64))
        csk = rng.integers(0, 256, 32, dtype=np.uint8)
        members = []
        for _ in range(copies):
            sk = csk.copy()
            k = int(rng.integers(0, 5))
            sk[rng.choice(32, k, replace=False)] ^= rng.integers(1, 256, k, dtype=np.uint8)
            members.append(Page(_flip(c1, rng, int(rng.integers(0, 4))), None,
                                _flip(c2, rng, int(rng.integers(0, 4))), None, sk.tobytes()))
        out.append(members)
    return out


def _client(url):
    import redis
    return redis.Redis.from_url(url)


# -- messages and bad input ---------------------------------------------------------
def test_passwords_never_appear_in_messages():
    assert safe_url("redis://user:pw@h:6379/0") == "redis://***@h:6379/0"
    assert safe_url("redis://:a@b@h/0") == "redis://***@h/0"
    assert safe_url("redis://h:6379/0?password=pw&db=2") == "redis://h:6379/0?password=***&db=2"
    assert safe_url("unix:///tmp/r.sock?db=1&Password=pw") == \
        "unix:///tmp/r.sock?db=1&Password=***"
    url = f"redis://user:secret@127.0.0.1:{free_port()}/0"
    with pytest.raises(IndexUnavailableError) as err:
        _open(url, "k", params={"socket_connect_timeout": 1.0})
    assert "secret" not in str(err.value) and "***@127.0.0.1" in str(err.value)


def test_bad_input(redis_server):
    for kw, parameter, message in [
            (dict(url="http://x"), "url", "Redis URL must start with redis://"),
            (dict(prefix=""), "key_prefix", "key prefix must be a non-empty string"),
            (dict(distance=25), "distance", "distance must be an integer in 0..24, got 25"),
            (dict(distance=True), "distance", "distance must be an integer"),
            (dict(min_similarity=1.5), "min_similarity", r"min_similarity must be a number"),
            (dict(params=[1]), "params", "connection options must be a dict"),
            (dict(params={"decode_responses": True}), "params", "decode_responses must be off")]:
        args = {"url": redis_server.url, "prefix": "k", **kw}
        with pytest.raises(ParameterError, match=message) as err:
            RedisLog(args.pop("url"), args.pop("prefix"), **args)
        assert err.value.parameter == parameter
        assert "SIMDUP_" not in str(err.value)     # the layer names values, not settings
    for params in ({"no_such_option": 1}, {"socket_timeout": "abc"}):
        with pytest.raises(ValueError, match="SIMDUP_REDIS_PARAMS"):
            _backend(redis_server.url, SIMDUP_REDIS_PARAMS=params)

    async def go():
        be = _open(redis_server.url, _prefix())
        page = clusters(1, 1, 1)[0][0]
        with pytest.raises(ValueError, match="one key per page"):
            await be.check_and_add_many([page, page], ["a"])
        with pytest.raises(TypeError, match="keys must be str"):
            await be.check_and_add(page, 5)
        with pytest.raises(ValueError, match="32 bytes"):
            await be.check_and_add(page._replace(sketch=b"x" * 16), "a")
        assert len(be) == 0 and be.appended == 0      # nothing was appended
        assert await be.check_and_add(page, "a") is None
        await be.close()
    run(go())


def test_unreachable_at_startup_is_a_clear_error():
    url = f"redis://127.0.0.1:{free_port()}/0"
    with pytest.raises(IndexUnavailableError, match=f"cannot use Redis at {url}") as err:
        _open(url, "x", params={"socket_connect_timeout": 1.0})
    assert "SIMDUP_" not in str(err.value)
    with pytest.raises(IndexUnavailableError, match=f"SIMDUP_INDEX: cannot use Redis at {url}"):
        _backend(url, SIMDUP_REDIS_PARAMS={"socket_connect_timeout": 1.0})


# -- the layout --------------------------------------------------------------------
def test_the_index_is_a_meta_hash_and_a_log_of_page_records(redis_server):
    prefix = _prefix("layout")
    pages = [c[0] for c in clusters(2, 5, 1)]

    async def go():
        be = RedisBackend.open(redis_server.url, prefix, _index(), fingerprint="recipe-A",
                               follow_interval=0)
        assert await be.check_and_add_many(pages[:3], ["https://a/0", "https://a/1", "é"]) == \
            [None] * 3
        assert await be.check_and_add(pages[3], "https://a/3") is None
        # the same page under another URL: stored too, not kept
        m = await be.check_and_add(pages[0], "https://copy/")
        assert m == Match("https://a/0", 0, 1.0)
        await be.close()
        return be
    be = run(go())
    client = _client(redis_server.url)
    try:
        meta = {k.decode(): v.decode() for k, v in client.hgetall(prefix + ":meta").items()}
        assert meta.pop("epoch") and meta == {
            "layout": LAYOUT, "fingerprint": "recipe-A", "distance": "22",
            "min_similarity": "0.18", "n": "5"}
        entries = client.xrange(prefix + ":log")
        assert [e[0] for e in entries] == [b"1-0", b"2-0", b"3-0", b"4-0", b"5-0"]
        blobs = [e[1][b"r"] for e in entries]
        want = [pack_entry(pages[0], "https://a/0", 0, False),
                pack_entry(pages[1], "https://a/1", 0, False),
                pack_entry(pages[2], "é", 0, False),
                pack_entry(pages[3], "https://a/3", 3, False),
                pack_entry(pages[0], "https://copy/", 4, True)]
        assert blobs == want
        assert be.bytes_in == sum(map(len, want)) and be.appended == 5
        assert all(len(b) == RECORD_BYTES + len(u.encode())
                   for b, u in zip(blobs, ["https://a/0", "https://a/1", "é", "https://a/3",
                                           "https://copy/"]))
    finally:
        client.close()


# -- one log, many writers -------------------------------------------------------------
def test_a_page_appended_by_another_writer_meanwhile_is_found_in_the_gap(redis_server):
    """B looks a page up in a replica without A's near-duplicate (appended
    meanwhile), then appends it: the append brings A's entry back with B's
    own, the gap check finds it, and B's page is not kept; every replica
    (A's, B's, one opened now) says so."""
    prefix = _prefix("gap")
    (a, b), (c, _) = clusters(3, 2, 2)

    async def go():
        ba = _open(redis_server.url, prefix)
        bb = _open(redis_server.url, prefix)        # no follower: its replica stays behind
        assert await ba.check_and_add(a, "https://a/") is None
        assert len(bb) == 0
        mb = await bb.check_and_add(b, "https://b/")
        assert mb is not None and mb.duplicate_of == "https://a/" and mb.distance <= 6
        assert await bb.check_and_add(c, "https://c/") is None
        await ba.catch_up()
        late = _open(redis_server.url, prefix)
        flags = [[r.replica.kept(i) for i in range(3)] for r in (ba, bb, late)]
        assert flags == [[True, False, True]] * 3
        # met again by A: B's page is a near-duplicate of A's, A's a revisit
        assert (await ba.check_and_add(b, "https://b/")).duplicate_of == "https://a/"
        assert await ba.check_and_add(a, "https://a/") == Match("https://a/", 0, 1.0)
        assert len(ba) == 3                          # nothing stored again
        for be in (ba, bb, late):
            await be.close()
    run(go())


def test_a_url_met_first_by_two_writers_at_once_is_kept_once(redis_server):
    """Two processes meet the same page under the same URL before either
    has the other's entry: both append it; the earlier entry is kept and
    stays the URL's page in every replica (the writers', and one loading
    both entries at once), so met again it is a revisit of the kept entry."""
    prefix = _prefix("same-url")
    (p, _), = clusters(15, 1, 2)

    async def go():
        a, b = _open(redis_server.url, prefix), _open(redis_server.url, prefix)
        assert await a.check_and_add(p, "https://u/") is None
        assert await b.check_and_add(p, "https://u/") == Match("https://u/", 0, 1.0)
        await a.catch_up()
        late = _open(redis_server.url, prefix)
        for be in (a, b, late):
            assert [be.replica.kept(i) for i in range(2)] == [True, False]
            assert be.replica.row_of(url_hash("https://u/")) == 0
            assert await be.check_and_add(p, "https://u/") == Match("https://u/", 0, 1.0)
            assert len(be) == 2                     # a revisit: nothing appended
            await be.close()
    run(go())


def test_writers_in_one_process_keep_one_page_per_cluster(redis_server):
    """Four backends on one index check the copies of the same clusters at
    once (their look-ups and appends interleave): one page of each cluster
    is kept, the others name a page of their cluster."""
    prefix = _prefix("writers")
    cl = clusters(4, 60, 4)
    url_of = {}
    for ci in range(len(cl)):
        for j in range(4):
            url_of[f"https://w{j}/{ci}"] = ci

    async def go():
        bes = [_open(redis_server.url, prefix) for _ in range(4)]
        rng = np.random.default_rng(5)
        jobs = []
        for j, be in enumerate(bes):
            order = rng.permutation(60)
            jobs.append(asyncio.gather(*(be.check_and_add(cl[ci][j], f"https://w{j}/{ci}")
                                         for ci in order.tolist())))
            jobs[-1].order = order
        res = await asyncio.gather(*jobs)
        for be in bes:
            await be.catch_up()
        flags = [[be.replica.kept(i) for i in range(len(be))] for be in bes]
        for be in bes:
            await be.close()
        return [(j.order, r) for j, r in zip(jobs, res)], flags
    results, flags = run(go())
    kept = {}
    for j, (order, res) in enumerate(results):
        for ci, m in zip(order.tolist(), res):
            if m is None:
                kept.setdefault(ci, []).append(j)
            else:
                assert url_of[m.duplicate_of] == ci and m.distance <= 6
    assert sorted(kept) == list(range(60)) and all(len(v) == 1 for v in kept.values())
    assert all(f == flags[0] for f in flags) and sum(flags[0]) == 60 and len(flags[0]) == 240


def test_concurrent_checks_are_coalesced(redis_server):
    """200 checks at once in one process: a few appends, not 200; each pair
    of near-duplicates is kept once."""
    cl = clusters(6, 100, 2)

    async def go():
        be = _open(redis_server.url, _prefix("coalesce"))
        calls = []
        real = be.log.append

        async def counting(start, blobs, count, anchor=b""):
            calls.append(len(blobs))
            return await real(start, blobs, count, anchor)
        be.log.append = counting
        res = await asyncio.gather(*(be.check_and_add(cl[i][j], f"u{i}-{j}")
                                     for j in range(2) for i in range(100)))
        await be.close()
        return res, calls
    res, calls = run(go())
    assert sum(r is None for r in res) == 100
    assert all(r.duplicate_of == f"u{i}-0" for i, r in enumerate(res[100:]))
    assert sum(calls) == 200 and len(calls) <= 3


def _fleet_worker(url, prefix, k, n_processes, join_after, pages, barrier, q):
    """One process of the fleet: checks its copy of every cluster (under its
    own URLs) and the shared pages (under shared URLs), then, once every
    process is done, the same pages again. ``join_after``: open only once
    the log holds that many entries (a process joining a running fleet)."""
    async def go():
        if join_after:
            client = _client(url)
            while int(client.hget(prefix + ":meta", "n") or 0) < join_after:
                time.sleep(0.02)
            client.close()
        be = _open(url, prefix, follow=0.05)
        loaded = be.loaded
        rng = np.random.default_rng(100 + k)
        items = [(members[k], f"https://p{k}/{ci}") for ci, members in enumerate(pages)]
        items += [(members[n_processes], f"https://shared/{ci}")
                  for ci, members in enumerate(pages) if ci % 3 == 0]
        order = rng.permutation(len(items)).tolist()
        first = {}
        for a in range(0, len(order), 5):
            chunk = [items[i] for i in order[a:a + 5]]
            if a % 2:
                got = await be.check_and_add_many([p for p, _ in chunk], [u for _, u in chunk])
            else:
                got = await asyncio.gather(*(be.check_and_add(p, u) for p, u in chunk))
            first.update({u: None if m is None else tuple(m) for (_, u), m in zip(chunk, got)})
        barrier.wait(120)               # every process appended all it had
        await be.catch_up()
        again = await be.check_and_add_many([p for p, _ in items], [u for _, u in items])
        kept = [be.replica.kept(i) for i in range(len(be))]
        await be.close()
        return {"k": k, "loaded": loaded, "first": first, "kept": kept,
                "again": {u: None if m is None else tuple(m)
                          for (_, u), m in zip(items, again)}}
    q.put(run(go()))


def test_a_fleet_of_processes_keeps_each_cluster_once(redis_server):
    """Six processes (one joining once the others have written) meet copies
    of the same 90 clusters under their own URLs, and some pages under the
    same URLs, at once: exactly one process keeps each cluster; every
    replica ends with the same kept flags, those the log decides in plain
    Python; a process opening afterwards has them too, and meets every page
    again with the same verdict as the fleet's processes."""
    from tests.test_redis_replica import ReferenceReplica
    n_proc, n_clusters = 6, 90
    pages = clusters(7, n_clusters, n_proc + 1)
    prefix = _prefix("fleet")
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    barrier = ctx.Barrier(n_proc)
    procs = [ctx.Process(target=_fleet_worker,
                         args=(redis_server.url, prefix, k, n_proc,
                               150 if k == n_proc - 1 else 0, pages, barrier, q))
             for k in range(n_proc)]
    for p in procs:
        p.start()
    try:
        results = sorted((q.get(timeout=240) for _ in procs), key=lambda r: r["k"])
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    assert [p.exitcode for p in procs] == [0] * n_proc
    assert results[-1]["loaded"] >= 150          # it joined a running fleet

    def cluster(url):
        return int(url.rsplit("/", 1)[1])
    kept_by = {}
    for r in results:
        for url, m in r["first"].items():
            if m is None:
                kept_by.setdefault(cluster(url), []).append(url)
            else:
                assert cluster(m[0]) == cluster(url), (url, m)
    assert {c: v for c, v in kept_by.items() if len(v) != 1} == {}
    assert sorted(kept_by) == list(range(n_clusters))
    flags = results[0]["kept"]
    assert all(r["kept"] == flags for r in results)
    assert sum(flags) == n_clusters
    # a URL met by several processes at once may be appended by each
    n_urls = n_proc * n_clusters + len(range(0, n_clusters, 3))
    assert n_urls <= len(flags) <= n_urls + (n_proc - 1) * len(range(0, n_clusters, 3))
    # the log alone decides: its entries applied in plain Python
    client = _client(redis_server.url)
    try:
        entries = client.xrange(prefix + ":log")
    finally:
        client.close()
    ref = ReferenceReplica(22, 5)
    for seq, (entry_id, fields) in enumerate(entries, start=1):
        assert entry_id == f"{seq}-0".encode()
        blob = fields[b"r"]
        rec = np.frombuffer(blob[:RECORD_BYTES], dtype=np.uint8)
        page = Page(int.from_bytes(rec[:8], "little"), None, int.from_bytes(rec[8:16], "little"),
                    None, bytes(rec[16:48]))
        ref.apply(page, blob[RECORD_BYTES:].decode(), int.from_bytes(rec[48:52], "little"),
                  bool(int.from_bytes(rec[52:56], "little") & 1))
    assert ref.kept == flags

    # a process opening now: the same replica, the same verdicts on every page
    async def late():
        be = _open(redis_server.url, prefix)
        kept = [be.replica.kept(i) for i in range(len(be))]
        verdicts = {}
        for r in results:
            urls = list(r["again"])
            by_url = {f"https://p{r['k']}/{ci}": pages[ci][r["k"]] for ci in range(n_clusters)}
            by_url.update({f"https://shared/{ci}": pages[ci][n_proc]
                           for ci in range(0, n_clusters, 3)})
            got = await be.check_and_add_many([by_url[u] for u in urls], urls)
            verdicts[r["k"]] = {u: None if m is None else tuple(m) for u, m in zip(urls, got)}
        size = len(be)
        await be.close()
        return kept, verdicts, size
    kept, verdicts, size = run(late())
    assert kept == flags and size == len(flags)          # nothing stored again
    for r in results:
        assert verdicts[r["k"]] == r["again"]
        for url, m in r["again"].items():      # met again: a revisit iff the page was kept
            assert m is not None and cluster(m[0]) == cluster(url)
            if url in kept_by[cluster(url)]:
                assert m[0] == url and m[1:] == (0, 1.0)
            elif "/shared/" not in url:    # (a shared URL may be stored twice)
                assert m[0] != url


# -- start-up checks ---------------------------------------------------------------------
class _Crawler:
    def __init__(self, settings, name="myspider"):
        from scrapy.settings import Settings
        self.settings = Settings(settings)
        self.spider = type("S", (), {"name": name})()


def _backend(url, **settings):
    from scrapy_simdup import SimdupConfig
    from scrapy_simdup.integration.backends import make_backend
    s = {"SIMDUP_INDEX": url, "SIMDUP_REDIS_KEY": f"simdup:{time.monotonic_ns()}:%(spider)s"}
    s.update(settings)
    crawler = _Crawler(s)
    return make_backend(SimdupConfig.from_crawler(crawler), crawler)


def test_an_index_of_other_settings_is_refused(redis_server):
    """A log written with another fingerprint recipe, distance or similarity
    cannot be searched by this process's rule: refused at start-up, naming
    the parameter (the layer) or the setting (a crawl)."""
    prefix = _prefix("settings")
    run(_open(redis_server.url, prefix, fingerprint="recipe-A").close())
    for kw, parameter, message in [
            (dict(fingerprint="recipe-B"), "fingerprint", "made with 'recipe-A'.*'recipe-B'"),
            (dict(distance=16), "distance", "within distance 22, this process 16"),
            (dict(min_similarity=0.3), "min_similarity", "at similarity 0.18, this process at 0.3")]:
        with pytest.raises(ParameterError, match=message) as err:
            _open(redis_server.url, prefix, **{"fingerprint": "recipe-A", **kw})
        assert err.value.parameter == parameter and "SIMDUP_" not in str(err.value)
    # no recipe given (a tool reading the index): accepted
    run(_open(redis_server.url, prefix).close())
    # a long recipe (it holds the content XPath) is cut in the message
    client = _client(redis_server.url)
    client.hset(prefix + ":meta", "fingerprint", "x" * 100_000)
    client.close()
    with pytest.raises(ParameterError, match="100000 characters") as err:
        _open(redis_server.url, prefix, fingerprint="recipe-A")
    assert len(str(err.value)) < 1000

    # through a crawl's settings: the setting named
    key = f"simdup:{time.monotonic_ns()}:%(spider)s"
    first = _backend(redis_server.url, SIMDUP_REDIS_KEY=key)
    assert first.log.fingerprint and "shingles" in first.log.fingerprint
    same = _backend(redis_server.url, SIMDUP_REDIS_KEY=key)      # same settings: shares it
    assert same.log.prefix == first.log.prefix
    for settings, named in [({"SIMDUP_SHINGLE_SIZE": 2}, "SIMDUP_INDEX: .*feature settings"),
                            ({"SIMDUP_DISTANCE": 16}, "SIMDUP_DISTANCE: .*SIMDUP_REDIS_KEY"),
                            ({"SIMDUP_MIN_SIMILARITY": 0.5},
                             "SIMDUP_MIN_SIMILARITY: .*SIMDUP_REDIS_KEY")]:
        with pytest.raises(ValueError, match=named) as err:
            _backend(redis_server.url, SIMDUP_REDIS_KEY=key, **settings)
        assert isinstance(err.value.__cause__, ParameterError)
    for be in (first, same):
        run(be.close())


def test_an_old_layout_index_is_refused_with_how_to_clear_it(redis_server):
    prefix = _prefix("old")
    client = _client(redis_server.url)
    client.set(prefix + ":t", "14")
    client.set(prefix + ":v", "3")
    client.set(prefix + ":n", "3")
    client.set(prefix + ":b:0abc", bytes(40))
    try:
        with pytest.raises(ParameterError, match="older scrapy-simdup") as err:
            _open(redis_server.url, prefix)
        assert err.value.parameter == "key_prefix"
        assert "SIMDUP_RESET" in str(err.value) and "SIMDUP_REDIS_KEY" in str(err.value)
        with pytest.raises(ValueError, match="SIMDUP_REDIS_KEY: .*older scrapy-simdup"):
            _backend(redis_server.url, SIMDUP_REDIS_KEY=prefix)
        # nothing was written into it
        assert client.exists(prefix + ":meta", prefix + ":log") == 0
        assert client.get(prefix + ":n") == b"3"
        # cleared (what SIMDUP_RESET does), the index can be made
        assert reset_redis_index(redis_server.url, prefix) == (3, 4)
        assert list(client.scan_iter(match=prefix + ":*")) == []
        run(_open(redis_server.url, prefix).close())
    finally:
        client.close()


def test_other_data_under_the_prefix_is_refused(redis_server):
    client = _client(redis_server.url)
    try:
        for key, write in [(":meta", lambda k: client.set(k, "hello")),
                           (":log", lambda k: client.rpush(k, "x"))]:
            prefix = _prefix("foreign")
            write(prefix + key)
            with pytest.raises(ParameterError, match="prefix holds other data") as err:
                _open(redis_server.url, prefix)
            assert err.value.parameter == "key_prefix"
        # a hash of someone else's where the index's is
        prefix = _prefix("foreign")
        client.hset(prefix + ":meta", "owner", "someone")
        with pytest.raises(ParameterError, match="not a scrapy-simdup index") as err:
            _open(redis_server.url, prefix)
        assert err.value.parameter == "key_prefix"
    finally:
        client.close()


def test_a_key_replaced_mid_crawl_is_named(redis_server):
    """The log replaced by another type of key while a crawl runs: the error
    names the key prefix (and, in a crawl, SIMDUP_REDIS_KEY)."""
    prefix = _prefix("replaced")
    (a,), (b,) = clusters(8, 2, 1)

    async def go():
        be = _open(redis_server.url, prefix)
        assert await be.check_and_add(a, "a") is None
        client = _client(redis_server.url)
        client.delete(prefix + ":log")
        client.set(prefix + ":log", "x")
        client.close()
        with pytest.raises(IndexConflictError, match=f"'{prefix}'.*another type") as err:
            await be.check_and_add(b, "b")
        assert err.value.parameter == "key_prefix"
        assert setting_message(err.value).startswith("SIMDUP_REDIS_KEY: ")
        await be.close()
    run(go())


def _foreign_entry(url, prefix, seq=None):
    client = _client(url)
    client.xadd(prefix + ":log", {"hello": "world"}, id=f"{seq}-0" if seq else "*")
    client.close()


def test_foreign_entries_in_the_log_are_a_clear_error(redis_server):
    """Entries not written by scrapy-simdup in the log: refused at start-up
    with one message naming the entry; met mid-crawl, each check fails with
    that message (an IndexConflictError: counted, logged without a
    traceback), and nothing is appended past it."""
    pages = [c[0] for c in clusters(9, 4, 1)]
    prefix = _prefix("foreign-log")

    async def go():
        be = _open(redis_server.url, prefix)
        assert await be.check_and_add(pages[0], "a") is None
        _foreign_entry(redis_server.url, prefix, 2)
        for page, key in ((pages[1], "b"), (pages[2], "c")):
            with pytest.raises(IndexConflictError, match="not written by scrapy-simdup") as err:
                await be.check_and_add(page, key)
            assert err.value.parameter == "key_prefix"
        assert len(be) == 1
        await be.close()
    run(go())
    client = _client(redis_server.url)
    assert client.xlen(prefix + ":log") == 2          # nothing appended past it
    client.close()
    with pytest.raises(ValueError, match="not written by scrapy-simdup.*'2-0'"):
        _open(redis_server.url, prefix)
    with pytest.raises(ValueError, match="SIMDUP_REDIS_KEY.*not written by scrapy-simdup"):
        _backend(redis_server.url, SIMDUP_REDIS_KEY=prefix)
    # an entry of a stream id that is not a sequence number (XADD *)
    prefix = _prefix("foreign-log")
    run(_open(redis_server.url, prefix).close())
    _foreign_entry(redis_server.url, prefix)
    with pytest.raises(ValueError, match="not written by scrapy-simdup"):
        _open(redis_server.url, prefix)


def test_an_evicting_redis_is_refused(private_redis):
    client = _client(private_redis.url)
    try:
        client.config_set("maxmemory-policy", "allkeys-lru")
        with pytest.raises(ParameterError, match="allkeys-lru.*noeviction") as err:
            _open(private_redis.url, "evict")
        assert err.value.parameter == "url"
        with pytest.raises(ValueError, match="SIMDUP_INDEX: .*allkeys-lru"):
            _backend(private_redis.url)
        assert client.exists("evict:meta") == 0
        client.config_set("maxmemory-policy", "volatile-lru")    # never evicts the index
        run(_open(private_redis.url, "evict").close())
    finally:
        client.close()


def test_a_log_larger_than_max_pages_is_refused(redis_server):
    prefix = _prefix("max-pages")
    pages = [c[0] for c in clusters(10, 12, 1)]

    async def fill():
        be = _open(redis_server.url, prefix, max_pages=10)
        assert await be.check_and_add_many(pages[:8], [f"u{i}" for i in range(8)]) == [None] * 8
        # a check that would pass the limit: refused, nothing appended
        with pytest.raises(ParameterError, match="more than this process may hold") as err:
            await be.check_and_add_many(pages[8:11], ["u8", "u9", "u10"])
        assert err.value.parameter == "max_pages" and len(be) == 8
        assert await be.check_and_add_many(pages[8:10], ["u8", "u9"]) == [None] * 2
        await be.close()
    run(fill())
    with pytest.raises(ParameterError, match="holds 10 pages, more than this process may hold "
                                             r"\(9\)") as err:
        _open(redis_server.url, prefix, max_pages=9)
    assert err.value.parameter == "max_pages"
    run(_open(redis_server.url, prefix, max_pages=10).close())
    # in a crawl: the setting named
    key = prefix + ":%(spider)s"
    be = _backend(redis_server.url, SIMDUP_REDIS_KEY=key)
    run(be.check_and_add_many(pages[:2], ["x", "y"]))
    with pytest.raises(ValueError, match=r"SIMDUP_REDIS_MAX_PAGES: .*holds 2 pages.*\(1\)"):
        _backend(redis_server.url, SIMDUP_REDIS_KEY=key, SIMDUP_REDIS_MAX_PAGES=1)
    with pytest.raises(ValueError, match="SIMDUP_REDIS_MAX_PAGES"):
        _backend(redis_server.url, SIMDUP_REDIS_MAX_PAGES=0)


# -- faults --------------------------------------------------------------------------------
def test_redis_killed_and_restarted_with_its_data_loses_nothing(aof_redis):
    """Redis (append-only file, fsync at every write) is killed under two
    writers: checks fail while it is down (an error, not a hang, not a
    reset); once it is back the writers go on from the same log: the pages
    stored before are found, nothing is kept twice, and the log is whole."""
    cl = clusters(11, 41, 3)
    params = {"socket_timeout": 2.0, "socket_connect_timeout": 2.0}

    async def go():
        a = _open(aof_redis.url, "aof", params=params)
        b = _open(aof_redis.url, "aof", params=params)
        assert await a.check_and_add_many([c[0] for c in cl[:20]],
                                          [f"a/{i}" for i in range(20)]) == [None] * 20
        assert await b.check_and_add_many([c[0] for c in cl[20:40]],
                                          [f"b/{i}" for i in range(20, 40)]) == [None] * 20
        epoch = a.log.epoch
        aof_redis.stop()
        for be, page in ((a, cl[0][1]), (b, cl[1][1]), (a, cl[2][1])):
            with pytest.raises(IndexUnavailableError) as err:
                await asyncio.wait_for(be.check_and_add(page, "x"), 60)
            assert not isinstance(err.value, IndexResetError)
        aof_redis.start()
        # B meets copies of A's pages and A of B's (their replicas never saw them)
        got_b = await b.check_and_add_many([c[1] for c in cl[:20]],
                                           [f"b2/{i}" for i in range(20)])
        got_a = await a.check_and_add_many([c[1] for c in cl[20:40]],
                                           [f"a2/{i}" for i in range(20, 40)])
        assert [m.duplicate_of for m in got_b] == [f"a/{i}" for i in range(20)]
        assert [m.duplicate_of for m in got_a] == [f"b/{i}" for i in range(20, 40)]
        # and new pages are kept once
        news = await asyncio.gather(a.check_and_add(cl[40][0], "a3"),
                                    b.check_and_add(cl[40][1], "b3"))
        assert sorted(m is None for m in news) == [False, True]
        await a.catch_up()
        await b.catch_up()
        joined = _open(aof_redis.url, "aof", params=params)
        flags = [[be.replica.kept(i) for i in range(len(be))] for be in (a, b, joined)]
        assert joined.log.epoch == epoch
        for be in (a, b, joined):
            await be.close()
        return flags
    flags = run(go())
    assert flags[0] == flags[1] == flags[2] and sum(flags[0]) == 41 and len(flags[0]) == 82
    client = _client(aof_redis.url)
    try:
        ids = [e[0] for e in client.xrange("aof:log")]
        assert ids == [f"{s}-0".encode() for s in range(1, 83)]
        assert client.hget("aof:meta", "n") == b"82"
    finally:
        client.close()


async def _first_error(*checks):
    """The error of the first check that fails otherwise than on a connection
    that died with the old server (the one check that may meet it)."""
    for i, check in enumerate(checks):
        try:
            await check
        except IndexResetError as exc:
            for later in checks[i + 1:]:
                later.close()
            return exc
        except IndexUnavailableError as exc:
            if i == len(checks) - 1 or "Connection closed" not in str(exc):
                return exc
    return None


def test_redis_restarted_empty_is_an_index_reset(private_redis):
    """Redis restarted without its data: the next append says so (an
    IndexResetError, not an outage), and every check after it, even once
    another process has made a new index; the follower finds it too."""
    cl = clusters(12, 6, 2)
    params = {"socket_timeout": 2.0, "socket_connect_timeout": 2.0}

    async def go():
        a = _open(private_redis.url, "reset", params=params)
        b = _open(private_redis.url, "reset", params=params, follow=0.05)
        assert await a.check_and_add(cl[0][0], "a0") is None
        assert await b.check_and_add(cl[1][0], "b1") is None
        private_redis.stop()
        private_redis.start()                   # empty
        err = await _first_error(a.check_and_add(cl[0][1], "a0-copy"),
                                 a.check_and_add(cl[0][1], "a0-copy"))
        assert isinstance(err, IndexResetError), err
        assert "emptied or re-created" in str(err) and "SIMDUP_" not in str(err)
        fresh = _open(private_redis.url, "reset", params=params)    # a new index
        assert await fresh.check_and_add(cl[2][0], "f2") is None
        with pytest.raises(IndexResetError):
            await a.check_and_add(cl[3][0], "a3")
        # B's follower meets the new index: B's next check is a reset, though
        # its look-up alone would not append anything (a revisit)
        for _ in range(200):
            if b._reset is not None:
                break
            await asyncio.sleep(0.02)
        with pytest.raises(IndexResetError):
            await b.check_and_add(cl[1][0], "b1")
        for be in (a, b, fresh):
            await be.close()
    run(go())


def test_an_index_cleared_under_the_process_is_a_reset(redis_server):
    prefix = _prefix("cleared")
    (a, b), = clusters(13, 1, 2)

    async def go():
        be = _open(redis_server.url, prefix)
        assert await be.check_and_add(a, "a") is None
        assert reset_redis_index(redis_server.url, prefix)[0] == 1
        with pytest.raises(IndexResetError):
            await be.check_and_add(b, "b")          # b would have been kept again
        await be.close()
    run(go())


def test_redis_restarted_from_older_saved_data_is_an_index_reset(private_redis):
    """Redis restarted from a snapshot older than the log the processes
    applied (RDB saved, then more pages appended, then a crash): its log
    lacks entries the replicas hold; the next append, and the follower, say
    so (an IndexResetError) instead of numbering new pages over the lost ones."""
    cl = clusters(14, 12, 2)
    params = {"socket_timeout": 2.0, "socket_connect_timeout": 2.0}

    async def go():
        a = _open(private_redis.url, "older", params=params)
        b = _open(private_redis.url, "older", params=params, follow=0.05)
        assert await a.check_and_add_many([c[0] for c in cl[:5]], [f"a{i}" for i in range(5)]) \
            == [None] * 5
        client = _client(private_redis.url)
        client.save()                               # the snapshot Redis restarts from
        client.close()
        assert await a.check_and_add_many([c[0] for c in cl[5:10]],
                                          [f"a{i}" for i in range(5, 10)]) == [None] * 5
        await b.catch_up()
        private_redis.stop()
        private_redis.start()                       # with the 5 entries of the snapshot
        # a copy of a lost page: without the check, it would be appended as entry 6 and kept
        err = await _first_error(a.check_and_add(cl[7][1], "a7-copy"),
                                 a.check_and_add(cl[7][1], "a7-copy"))
        assert isinstance(err, IndexResetError) and "does not hold the 10 entries" in str(err), err
        for _ in range(200):
            if b._reset is not None:
                break
            await asyncio.sleep(0.02)
        with pytest.raises(IndexResetError, match="does not hold the 10 entries"):
            await b.check_and_add(cl[11][0], "b11")
        for be in (a, b):
            await be.close()
        client = _client(private_redis.url)
        assert client.xlen("older:log") == 5 and client.hget("older:meta", "n") == b"5"
        client.close()
    run(go())
