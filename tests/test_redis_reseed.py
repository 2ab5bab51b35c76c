"""A Redis index emptied under running processes (SIMDUP_REDIS_ON_RESET).

A real redis-server without persistence, killed and restarted empty while
backends hold replicas of its index.
"""
import asyncio
import functools
import time

import numpy as np
import pytest

from scrapy_simdup.exceptions import IndexUnavailableError
from scrapy_simdup.index.backend import Page
from scrapy_simdup.index.redis.backend import RedisBackend
from scrapy_simdup.index.redis.log import APPEND, LAYOUT, IndexResetError, RedisLog
from scrapy_simdup.index.replica import RECENT_KEYS, pack_entry
from scrapy_simdup.index.verified import VerifiedIndex

pytest.importorskip("redis")


def _pages(n, seed):
    rng = np.random.default_rng(seed)
    v1 = rng.integers(0, 2**64, n, dtype=np.uint64)
    v2 = rng.integers(0, 2**64, n, dtype=np.uint64)
    sk = rng.integers(0, 256, (n, 32), dtype=np.uint8)
    return [Page(int(a), None, int(b), None, s.tobytes()) for a, b, s in zip(v1, v2, sk)]


def _near(page, bits=3):
    return Page(page.value ^ ((1 << bits) - 1), None, page.value2, None, page.sketch)


def _open(server, prefix, on_reset):
    return RedisBackend.open(server.url, prefix, VerifiedIndex(), on_reset=on_reset,
                             follow_interval=0)


async def _after_restart(backend, page, key):
    """The index's answer to the first check after a restart (a check on a
    connection made before it fails as an outage first, for SIMDUP_ON_ERROR)."""
    try:
        return await backend.check_and_add(page, key)
    except IndexUnavailableError:
        return await backend.check_and_add(page, key)


def test_the_first_process_reseeds_and_the_others_go_on(private_redis):
    pages = _pages(300, 1)

    async def run():
        a = _open(private_redis, "rs", "reseed")
        b = _open(private_redis, "rs", "stop")
        got = await a.check_and_add_many(pages[:200], [f"u{i}" for i in range(200)])
        assert got == [None] * 200
        # near-duplicates stored too: not kept
        dups = await a.check_and_add_many([_near(p) for p in pages[:20]],
                                          [f"d{i}" for i in range(20)])
        assert [m.duplicate_of for m in dups] == [f"u{i}" for i in range(20)]
        await b.catch_up()
        private_redis.stop()
        private_redis.start()
        assert await _after_restart(a, pages[200], "new") is None      # a re-seeds
        assert a.reseeded == 220
        # b's replica is a prefix of what a wrote back: it goes on
        with pytest.raises(IndexUnavailableError):
            await b.check_and_add(pages[201], "first")
        assert await b.check_and_add(pages[201], "other") is None
        match = await b.check_and_add(_near(pages[5], 2), "d5-again")
        assert match is not None and match.duplicate_of in ("u5", "d5")
        # a revisit of a page kept before the restart
        revisit = await b.check_and_add(pages[7], "u7")
        assert revisit.duplicate_of == "u7"
        await b.catch_up()
        await a.catch_up()
        # a process joining now reaches the same kept flags
        c = _open(private_redis, "rs", "stop")
        for x in (a, b):
            assert len(x) == len(c)
            assert np.array_equal(x.replica._kept.array, c.replica._kept.array)
        assert int(c.replica._kept.array[:220].sum()) == 200
        for x in (a, b, c):
            await x.close()
    asyncio.run(run())


def test_a_process_holding_more_than_the_reseed_stops(private_redis):
    pages = _pages(60, 2)

    async def run():
        short = _open(private_redis, "rl", "reseed")
        await short.check_and_add_many(pages[:30], [f"u{i}" for i in range(30)])
        long = _open(private_redis, "rl", "reseed")
        await long.check_and_add_many(pages[30:50], [f"v{i}" for i in range(20)])
        private_redis.stop()
        private_redis.start()
        assert await _after_restart(short, pages[50], "w") is None     # short re-seeds: 30
        with pytest.raises(IndexUnavailableError):
            await long.check_and_add(pages[51], "x")
        with pytest.raises(IndexResetError, match="re-seeded it with 30 pages, fewer"):
            await long.check_and_add(pages[51], "x")
        with pytest.raises(IndexResetError):      # every check, from now on
            await long.check_and_add(pages[52], "y")
        for x in (short, long):
            await x.close()
    asyncio.run(run())


def test_stop_never_goes_on_with_an_emptied_index(private_redis):
    pages = _pages(20, 3)

    async def run():
        a = _open(private_redis, "st", "stop")
        await a.check_and_add_many(pages[:10], [f"u{i}" for i in range(10)])
        private_redis.stop()
        private_redis.start()
        with pytest.raises(IndexUnavailableError):
            await a.check_and_add(pages[10], "x")
        for page in pages[10:13]:
            with pytest.raises(IndexResetError, match="emptied or re-created"):
                await a.check_and_add(page, "x")
        # nothing was written to the new, empty Redis
        import redis
        assert redis.Redis.from_url(private_redis.url).dbsize() == 0
        await a.close()
    asyncio.run(run())


def test_reseeded_entries_past_the_recent_urls_are_named_by_number(private_redis):
    n = RECENT_KEYS + 10
    pages = _pages(n, 4)

    # written as by a crawl that checked them one after another (a bulk
    # write: checking 65k pages would take a minute)
    log = RedisLog(private_redis.url, "rn")
    log.open()
    blobs = [pack_entry(p, f"u{i}", i, False) for i, p in enumerate(pages)]
    client = log.sync_client()
    for a in range(0, n, 5000):
        client.eval(APPEND, 2, log.meta_key, log.log_key, log.epoch, a + 1, 0, b"",
                    *blobs[a:a + 5000])
    log.close_sync()

    async def run():
        a = _open(private_redis, "rn", "reseed")
        assert len(a) == n
        private_redis.stop()
        private_redis.start()
        assert await _after_restart(a, _pages(1, 5)[0], "new") is None
        b = _open(private_redis, "rn", "stop")
        old = await b.check_and_add(_near(pages[3]), "old-copy")
        recent = await b.check_and_add(_near(pages[n - 1]), "recent-copy")
        assert old.duplicate_of == "#4"              # its URL was not kept, its number is
        assert recent.duplicate_of == f"u{n - 1}"
        # still a revisit under its URL, the replica knows its hash
        assert (await b.check_and_add(pages[3], "u3")).duplicate_of == "u3"
        for x in (a, b):
            await x.close()
    asyncio.run(run())


def test_a_reseed_cut_short_is_cleared_and_done_again(redis_server):
    """The re-seeding process loses Redis between two chunks: it deletes
    what it wrote, and the next check re-seeds the whole index."""
    import redis
    pages = _pages(12, 6)
    client = redis.Redis.from_url(redis_server.url)

    async def run():
        a = _open(redis_server, "rc", "reseed")
        await a.check_and_add_many(pages[:10], [f"u{i}" for i in range(10)])
        client.delete("rc:meta", "rc:log")                  # the index emptied
        export, calls = a.replica.export, []

        def failing(start, stop):
            calls.append(start)
            if len(calls) == 2:
                raise redis.ConnectionError("connection lost (simulated)")
            return export(start, stop)
        a.replica.export = failing
        a.log.reseed = functools.partial(a.log.reseed, chunk=4)
        with pytest.raises(IndexUnavailableError, match="connection lost"):
            await a.check_and_add(pages[10], "u10")
        assert client.exists("rc:meta", "rc:log") == 0       # the partial re-seed is gone
        a.replica.export = export
        assert await a.check_and_add(pages[10], "u10") is None
        assert client.xlen("rc:log") == 11 and not client.hexists("rc:meta", "reseeding")
        await a.close()
    asyncio.run(run())


def test_a_reseed_whose_writer_died_is_taken_over(redis_server):
    """A re-seed whose lease ran out (its writer died): a process that
    notices deletes it and re-seeds; a process starting meanwhile is told."""
    import redis
    pages = _pages(12, 7)
    client = redis.Redis.from_url(redis_server.url)

    async def run():
        a = _open(redis_server, "rd", "reseed")
        await a.check_and_add_many(pages[:10], [f"u{i}" for i in range(10)])
        old_epoch = client.hget("rd:meta", "epoch")
        # what a writer that died after its first chunk leaves
        client.delete("rd:meta", "rd:log")
        client.hset("rd:meta", mapping={"layout": LAYOUT, "epoch": "dead", "n": 2,
                                        "parent": old_epoch, "reseed_n": 10,
                                        "reseeding": time.time() + 30,
                                        "fingerprint": "", "distance": 22,
                                        "min_similarity": "0.18"})
        client.xadd("rd:log", {"r": a.replica.export(0, 1)[0]}, id="1-0")
        client.xadd("rd:log", {"r": a.replica.export(1, 2)[0]}, id="2-0")
        with pytest.raises(IndexUnavailableError, match="being re-seeded"):
            _open(redis_server, "rd", "stop")                 # not all there yet
        with pytest.raises(IndexUnavailableError, match="being re-seeded"):
            await a.check_and_add(pages[10], "u10")           # its lease still runs
        client.hset("rd:meta", "reseeding", time.time() - 1)  # ... and now ran out
        assert await a.check_and_add(pages[10], "u10") is None
        assert a.reseeded == 10 and client.xlen("rd:log") == 11
        b = _open(redis_server, "rd", "stop")
        assert np.array_equal(b.replica._kept.array, a.replica._kept.array)
        for x in (a, b):
            await x.close()
    asyncio.run(run())
