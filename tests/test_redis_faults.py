"""The Redis backend when the log or its callers go wrong: an entry no
replica can apply, a log grown past SIMDUP_REDIS_MAX_PAGES by other
processes, a bad page among coalesced checks, a cancelled batch, a server
that never answers."""
import asyncio
import socket
import time
from types import SimpleNamespace

import numpy as np
import pytest

from scrapy_simdup.exceptions import IndexConflictError, IndexUnavailableError, ParameterError
from scrapy_simdup.index.backend import Page
from scrapy_simdup.index.redis.backend import RedisBackend
from scrapy_simdup.index.redis.log import CONNECTION_DEFAULTS, IndexResetError
from scrapy_simdup.index.verified import VerifiedIndex
from scrapy_simdup.integration.urlrules import _redis_client

redis = pytest.importorskip("redis")


def _pages(n, seed):
    rng = np.random.default_rng(seed)
    v1 = rng.integers(0, 2**64, n, dtype=np.uint64)
    v2 = rng.integers(0, 2**64, n, dtype=np.uint64)
    sk = rng.integers(0, 256, (n, 32), dtype=np.uint8)
    return [Page(int(a), None, int(b), None, s.tobytes()) for a, b, s in zip(v1, v2, sk)]


def _open(server, prefix, **kw):
    return RedisBackend.open(server.url, prefix, VerifiedIndex(), **kw)


def test_an_entry_no_replica_can_apply_stops_the_appends(redis_server):
    prefix = "faults:corrupt"
    pages = _pages(30, 1)
    client = redis.Redis.from_url(redis_server.url)

    async def run():
        a = _open(redis_server, prefix, follow_interval=0)
        for i in range(5):
            assert await a.check_and_add(pages[i], f"https://x/{i}") is None
        client.xadd(prefix + ":log", {"r": b"short"}, id="6-0")      # a foreign writer
        client.hincrby(prefix + ":meta", "n", 1)
        with pytest.raises(IndexConflictError, match="entry 6 is not a page record"):
            await a.check_and_add(pages[5], "https://x/5")
        for i in range(6, 20):       # every later check fails before appending
            with pytest.raises(IndexConflictError, match="cannot be applied"):
                await a.check_and_add(pages[i], f"https://x/{i}")
        assert int(client.hget(prefix + ":meta", "n")) == 7      # 5 + the foreign + 1
        await a.close()
    asyncio.run(run())


def test_a_log_grown_past_max_pages_by_others_stops_the_checks(redis_server):
    prefix = "faults:cap"
    pages = _pages(160, 2)

    async def run():
        a = _open(redis_server, prefix, follow_interval=0.02, max_pages=100)
        b = _open(redis_server, prefix)
        await a.check_and_add(pages[0], "https://a/0")
        await b.check_and_add_many(pages[1:150], [f"https://b/{i}" for i in range(1, 150)])
        await asyncio.sleep(0.3)                # the follower meets the log past the cap
        assert len(a) <= 100
        with pytest.raises(ParameterError, match=r"grew to 150 pages, more than this process "
                                                 r"may hold \(100\)"):
            await a.check_and_add(pages[150], "https://a/150")
        await a.close()
        await b.close()
    asyncio.run(run())


def test_a_bad_page_fails_alone_and_a_cancelled_batch_leaves_no_caller_waiting(redis_server):
    pages = _pages(20, 3)

    async def run():
        a = _open(redis_server, "faults:drain", follow_interval=0)
        bad = pages[0]._replace(value=-1)
        got = await asyncio.gather(a.check_and_add(pages[1], "https://ok/1"),
                                   a.check_and_add(bad, "https://bad"),
                                   a.check_and_add(pages[2], "https://ok/2"),
                                   return_exceptions=True)
        assert got[0] is None and got[2] is None and isinstance(got[1], ValueError)
        first = [asyncio.ensure_future(a.check_and_add(p, f"https://x/{i}"))
                 for i, p in enumerate(pages[3:8])]
        await asyncio.sleep(0)
        await asyncio.sleep(0)                  # the drain took its batch: it awaits Redis
        queued = [asyncio.ensure_future(a.check_and_add(p, f"https://y/{i}"))
                  for i, p in enumerate(pages[10:13])]
        await asyncio.sleep(0)
        a._drainer.cancel()
        done, pending = await asyncio.wait(first + queued, timeout=5)
        assert not pending                      # answered, or failed as an outage
        for task in first + queued:
            assert task.cancelled() or task.exception() is None \
                or isinstance(task.exception(), (IndexUnavailableError, asyncio.CancelledError))
        await a.close()
    asyncio.run(run())


def test_a_log_rebuilt_past_this_replica_from_older_data_is_a_reset(redis_server):
    """Redis back from older saved data (entries 21..30 lost), then another
    process appends past this one's position: the count fits again, the
    pages do not; this process must say so, not go on with other rows."""
    prefix = "faults:older"
    pages = _pages(60, 4)
    client = redis.Redis.from_url(redis_server.url)

    async def run():
        a = _open(redis_server, prefix, follow_interval=0)
        c = _open(redis_server, prefix, follow_interval=0)
        await c.check_and_add_many(pages[:20], [f"https://c/{i}" for i in range(20)])
        await a.check_and_add_many(pages[20:30], [f"https://a/{i}" for i in range(20, 30)])
        # what an older snapshot holds: entries 1..20
        client.xdel(prefix + ":log", *[f"{s}-0" for s in range(21, 31)])
        client.execute_command("XSETID", prefix + ":log", "20-0")
        client.hset(prefix + ":meta", "n", 20)
        # the process that had 20 goes on first, past a's position
        await c.check_and_add_many(pages[30:45], [f"https://c/{i}" for i in range(30, 45)])
        with pytest.raises(IndexResetError, match="does not hold the 30 entries"):
            await a.check_and_add(pages[50], "https://a/50")
        with pytest.raises(IndexResetError, match="does not hold the 30 entries"):
            await a.catch_up()
        assert int(client.hget(prefix + ":meta", "n")) == 35      # a appended nothing
        for x in (a, c):
            await x.close()
    asyncio.run(run())


def test_the_url_rules_client_gives_up_on_a_server_that_never_answers():
    """The URL rules share through their own client of the index's server:
    it has the index's bounded timeouts (the user's options override them),
    so a server that accepts and never answers fails a sync, not hangs it."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)            # connections complete; nothing is ever read or sent
    url = f"redis://127.0.0.1:{silent.getsockname()[1]}/0"
    try:
        client = _redis_client(SimpleNamespace(index=url, redis_params={}))
        kwargs = client.connection_pool.connection_kwargs
        assert kwargs["socket_timeout"] == CONNECTION_DEFAULTS["socket_timeout"]
        asyncio.run(client.aclose())
        client = _redis_client(SimpleNamespace(index=url, redis_params={"socket_timeout": 0.3}))

        async def ping():
            try:
                await client.ping()
            finally:
                await client.aclose()

        t0 = time.monotonic()
        with pytest.raises(Exception, match="[Tt]imeout"):
            asyncio.run(ping())
        assert time.monotonic() - t0 < 5
    finally:
        silent.close()
