"""The Redis index at the store level, against a real redis-server.

The protocol tests drive the store by key 1 (``KeyOneStore``: key 2
unrelated, every sketch equal, so every candidate verifies). The reference is
a sequential PSM-F in pure Python: for each candidate in order, a stored
fingerprint within distance ``h`` in a probed bucket, else insert. The store
must agree with its verdicts exactly for one process, whatever path decided
(local check on the snapshot, or the Lua script's tail check). The verified
two-key rule on real pages, against the in-memory index, is in
``test_redis_verified.py``.
"""
import asyncio
import multiprocessing as mp
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scrapy_simdup.exceptions import IndexUnavailableError, ParameterError
from scrapy_simdup.fingerprint.features import fmix64
from scrapy_simdup.index.backend import Page
from scrapy_simdup.index.redis.lua import FORMAT
from scrapy_simdup.index.redis.store import RedisIndexStore, StoreMatch
from scrapy_simdup.integration.backends import setting_message
from tests.data_root import PAGES_ROOT

M64 = (1 << 64) - 1


def run(coro):
    return asyncio.run(coro)


ZERO_SKETCH = bytes(32)


def key2(values):
    """An independent second key (never within a few bits of another's by chance)."""
    return fmix64(np.asarray(values, dtype=np.uint64) ^ np.uint64(0x5DEECE66D))


class KeyOneStore(RedisIndexStore):
    """The store driven by key 1 alone: key 2 unrelated and probed in its own
    bucket only, every sketch equal (every candidate verifies), near-duplicates
    not stored, as the tests of the protocol need."""

    def __init__(self, *args, **kw):
        kw.setdefault("store_duplicates", False)
        super().__init__(*args, **kw)

    async def check_and_add_many(self, values, masks, keys=None, **kw):
        values = np.ascontiguousarray(values, dtype=np.uint64).ravel()
        n = values.shape[0]
        if not callable(masks) and len(masks) != n:
            raise ValueError(f"masks must have one array per value ({n}), got {len(masks)}")
        return await super().check_and_add_many(
            values, key2(values), np.zeros((n, 32), np.uint8),
            (masks, [np.zeros(1, np.uint64)] * n), keys, **kw)


def page(value, W=None):
    """A page of key ``value`` (key 2 unrelated, the sketch of every page)."""
    return Page(int(value), W, int(key2(np.array([value], np.uint64))[0]), W, ZERO_SKETCH)


class ReferenceStore:
    def __init__(self, t, h):
        self.t, self.h = t, h
        self.buckets = {}
        self.keys = {}

    def check_and_add(self, v, masks, key):
        shift = 64 - self.t
        for m in masks:
            for e in self.buckets.get((v ^ int(m)) >> shift, []):
                d = bin(e ^ v).count("1")
                if d <= self.h:
                    return (e, d, self.keys.get(e))
        self.buckets.setdefault(v >> shift, []).append(v)
        self.keys[v] = key
        return None


def header_masks(t, bits):
    """Mask 0, then single flips of the given header bit positions (0 = top)."""
    return np.array([0] + [1 << (63 - b) for b in bits], dtype=np.uint64)


_counter = iter(range(10**9))


def new_store(server, t=8, h=3):
    base = f"test:{next(_counter)}:{time.monotonic_ns()}"
    return KeyOneStore(server.url, base, header_bits=t, distance=h)


def as_tuple(m):
    return None if m is None else (m.value, m.distance, m.key)


def test_insert_then_duplicates(redis_server):
    async def go():
        st_ = await new_store(redis_server, t=8).connect()
        rng = np.random.default_rng(1)
        vals = rng.integers(0, 2**64, 300, dtype=np.uint64, endpoint=False)
        masks = [header_masks(8, range(8))] * len(vals)
        first = await st_.check_and_add_many(vals, masks, [f"u{i}" for i in range(300)])
        assert first == [None] * 300
        assert await st_.size() == 300 and st_.last_size == 300
        # same page again, a page 2 bits away in the tail, a page 1 header + 1 tail bit away
        again = await st_.check_and_add_many(vals[:5], masks[:5], None)
        assert [as_tuple(m) for m in again] == [(int(v), 0, f"u{i}") for i, v in enumerate(vals[:5])]
        near = vals[:5] ^ np.uint64(0b101)
        res = await st_.check_and_add_many(near, masks[:5], ["x"] * 5)
        assert [m.distance for m in res] == [2] * 5 and [m.key for m in res] == [f"u{i}" for i in range(5)]
        hflip = vals[:5] ^ np.uint64((1 << 60) | 1)
        res = await st_.check_and_add_many(hflip, masks[:5], ["x"] * 5)
        assert [m.distance for m in res] == [2] * 5
        # without the flip of bit 60 among the probes the header is never visited
        res = await st_.check_and_add_many(hflip[:1], [np.zeros(1, np.uint64)], ["y"])
        assert res == [None]
        far = vals[:5] ^ np.uint64(0b1111)
        res = await st_.check_and_add_many(far, masks[:5], ["z"] * 5)
        assert res == [None] * 5
        assert await st_.size() == 306
        await st_.close()
    run(go())


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_agrees_with_sequential_reference(redis_server, data):
    t, h = data.draw(st.sampled_from([(4, 3), (8, 3), (8, 0), (12, 5), (17, 3)]))
    packed = data.draw(st.booleans())   # MGET pre-packed from the bucket table, or by redis-py
    seed = data.draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    n_clusters = data.draw(st.integers(1, 30))
    centres = rng.integers(0, 2**64, n_clusters, dtype=np.uint64, endpoint=False)
    n = data.draw(st.integers(1, 120))
    members = []
    for _ in range(n):
        c = int(centres[rng.integers(n_clusters)])
        nbits = int(rng.integers(0, h + 3))
        for b in rng.choice(64, nbits, replace=False):
            c ^= 1 << int(b)
        members.append(c)
    masks = []
    for _ in range(n):
        k = int(rng.integers(0, t + 1))
        masks.append(header_masks(t, rng.choice(t, k, replace=False)))
    sizes = data.draw(st.lists(st.integers(1, 40), min_size=1, max_size=6))
    chunk = data.draw(st.sampled_from([3, 7, 1024]))  # 3, 7: pipelined chunks
    ahead = data.draw(st.sampled_from([1, 2, 3]))     # snapshots read ahead
    ref = ReferenceStore(t, h)
    expected = [ref.check_and_add(v, m, f"k{i}") for i, (v, m) in enumerate(zip(members, masks))]

    async def go():
        store = await new_store(redis_server, t=t, h=h).connect()
        if not packed:
            store._resp_tab = None
        got = []
        a = 0
        while a < n:
            b = min(n, a + sizes[len(got) % len(sizes)] if got else a + sizes[0])
            got.extend(await store.check_and_add_many(
                np.array(members[a:b], dtype=np.uint64), masks[a:b],
                [f"k{i}" for i in range(a, b)], chunk=chunk, ahead=ahead))
            a = b
        await store.close()
        return got
    got = run(go())
    # the verdicts agree exactly; a duplicate may name another valid match (an
    # earlier page of the same batch is not in the snapshot the client checked)
    assert [m is None for m in got] == [e is None for e in expected]
    kept = {members[i]: f"k{i}" for i, m in enumerate(got) if m is None}
    shift = 64 - t
    for i, m in enumerate(got):
        if m is not None:
            v = members[i]
            assert m.distance == bin(m.value ^ v).count("1") <= h
            assert kept.get(m.value) == m.key
            assert m.value >> shift in {(v ^ int(x)) >> shift for x in masks[i]}
            assert i > int(m.key[1:])


@settings(max_examples=60, deadline=None)
@given(v=st.integers(0, M64), bits=st.sets(st.integers(0, 63 - 8), max_size=6),
       h=st.integers(0, 4))
def test_lua_hamming_within_batch(redis_server, v, bits, h):
    """Two pages in one batch: the second is decided by the Lua script."""
    x = 0
    for b in bits:
        x ^= 1 << b
    vals = np.array([v, v ^ x], dtype=np.uint64)
    masks = [np.zeros(1, np.uint64)] * 2

    async def go():
        store = await new_store(redis_server, t=8, h=h).connect()
        res = await store.check_and_add_many(vals, masks, ["a", "b"])
        await store.close()
        return res
    res = run(go())
    assert res[0] is None
    if len(bits) <= h:
        assert res[1] == StoreMatch(v, len(bits), "a")
    else:
        assert res[1] is None


def _interleaved(server, foreign, before=None):
    """Check a page after ``foreign(store2)`` ran between its snapshot and its script."""
    async def go():
        a = await new_store(server, t=8, h=3).connect()
        if before is not None:
            await before(a)
        b = KeyOneStore(server.url, a.base, header_bits=8, distance=3)
        await b.connect()
        real_read = a._read_buckets

        async def read_then_foreign(*args, **kw):
            res = await real_read(*args, **kw)
            await foreign(b)
            return res
        a._read_buckets = read_then_foreign
        v = 0xF0F0_1234_5678_9ABC
        res = await a.check_and_add_many(np.array([v], np.uint64),
                                         [header_masks(8, [2])], ["mine"])
        a._read_buckets = real_read
        size = await a.size()
        await a.close()
        await b.close()
        return res[0], size
    return run(go())


V0 = 0xF0F0_1234_5678_9ABC


def test_race_foreign_insert_seen_through_log(redis_server):
    async def foreign(b):
        other = V0 ^ (1 << 61) ^ 0b11       # header bit 2 flipped, 3 bits away
        assert await b.check_and_add_many(np.array([other], np.uint64),
                                          [np.zeros(1, np.uint64)], ["theirs"]) == [None]
    match, size = _interleaved(redis_server, foreign)
    assert match == StoreMatch(V0 ^ (1 << 61) ^ 0b11, 3, "theirs")
    assert size == 1


def test_race_log_overrun_checks_every_bucket(redis_server):
    from scrapy_simdup.index.redis.lua import LOG_MAX

    async def foreign(b):
        other = V0 ^ 0b1
        await b.check_and_add_many(np.array([other], np.uint64), [np.zeros(1, np.uint64)],
                                   ["theirs"])
        rng = np.random.default_rng(5)
        many = rng.integers(0, 2**64, LOG_MAX // 8 + 2000, dtype=np.uint64, endpoint=False)
        # keep the filler out of the buckets V0 probes, so that it cannot match
        heads = many >> np.uint64(56)
        many = many[(heads != 0xF0) & (heads != 0xD0)]
        for a in range(0, len(many), 8192):
            chunk = many[a:a + 8192]
            await b.check_and_add_many(chunk, [np.zeros(1, np.uint64)] * len(chunk), None)
    match, size = _interleaved(redis_server, foreign)
    assert match is not None and match.value == V0 ^ 0b1 and match.key == "theirs"


def test_race_index_reset_checks_from_start(redis_server):
    """The index is lost and refilled past the snapshot's bucket length."""
    unrelated = np.array([V0 ^ 0xFFFF, V0 ^ 0xFFFF0], np.uint64)   # same bucket, far away
    one = [np.zeros(1, np.uint64)]

    async def foreign(b):
        await b._client.flushdb()
        await b.check_and_add_many(np.array([V0 ^ 0b100], np.uint64), one, ["theirs"])
        await b.check_and_add_many(unrelated[1:], one, ["far"])

    async def before(store):
        await store.check_and_add_many(unrelated[:1], one, ["far"])
    match, size = _interleaved(redis_server, foreign, before)
    assert match == StoreMatch(V0 ^ 0b100, 1, "theirs")


def test_concurrent_coroutines_keep_one(redis_server):
    """Both snapshots are taken before either script runs: the scripts decide."""
    async def go():
        stores = [await new_store(redis_server, t=8).connect()]
        for _ in range(3):
            s = KeyOneStore(redis_server.url, stores[0].base, header_bits=8, distance=3)
            stores.append(await s.connect())
        rng = np.random.default_rng(9)
        centres = rng.integers(0, 2**64, 200, dtype=np.uint64, endpoint=False)
        jobs = []
        for j, s in enumerate(stores):
            vals = centres ^ np.uint64(1 << j)        # 4 near-duplicate copies of each
            order = rng.permutation(len(vals))
            jobs.append(s.check_and_add_many(vals[order], [np.zeros(1, np.uint64)] * len(vals),
                                             [f"p{j}-{i}" for i in order]))
        results = await asyncio.gather(*jobs)
        size = await stores[0].size()
        for s in stores:
            await s.close()
        return results, size
    results, size = run(go())
    kept = sum(r is None for res in results for r in res)
    assert kept == 200 and size == 200


def _worker(url, base, seed, q):
    async def go():
        store = await KeyOneStore(url, base, header_bits=10, distance=3).connect()
        rng = np.random.default_rng(1234)
        centres = rng.integers(0, 2**64, 2000, dtype=np.uint64, endpoint=False)
        mine = np.random.default_rng(seed)
        vals = centres ^ np.uint64(1 << int(mine.integers(0, 50)))
        vals = vals ^ np.uint64(1 << 53)           # top-bit flip: found through a probe
        order = mine.permutation(len(vals))
        kept = []
        for a in range(0, len(order), 64):
            idx = order[a:a + 64]
            masks = [header_masks(10, [0, 1, 2])] * len(idx)
            res = await store.check_and_add_many(vals[idx], masks, [f"s{seed}-{i}" for i in idx])
            kept.extend(int(i) for i, r in zip(idx, res) if r is None)
        await store.close()
        return kept
    q.put(run(go()))


def test_four_processes_keep_exactly_one_per_cluster(redis_server):
    base = f"test:procs:{time.monotonic_ns()}"
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(redis_server.url, base, s, q)) for s in range(4)]
    for p in procs:
        p.start()
    kept = [q.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    clusters = [i for k in kept for i in k]
    assert len(clusters) == 2000 and len(set(clusters)) == 2000


def test_unreachable_at_startup_is_a_clear_error():
    from tests.redis_server import free_port
    url = f"redis://127.0.0.1:{free_port()}/0"
    store = KeyOneStore(url, "x", header_bits=8, params={"socket_connect_timeout": 1.0})
    with pytest.raises(IndexUnavailableError, match=f"cannot use Redis at {url}") as err:
        store.check_server()
    assert "SIMDUP_" not in str(err.value)      # the store names values, not settings


def test_header_bits_mismatch(redis_server):
    store = new_store(redis_server, t=8)
    store.check_server()
    other = KeyOneStore(redis_server.url, store.base, header_bits=9)
    with pytest.raises(ParameterError, match="9 header bits, but the index .* was created "
                                             "with 8") as err:
        other.check_server()
    assert err.value.parameter == "header_bits" and "SIMDUP_" not in str(err.value)


def test_store_errors_name_values_and_the_glue_names_the_setting(redis_server):
    """The store's errors say what value is wrong; what a Scrapy user sees (the
    start-up ValueError of the integration) names the setting it came from."""
    with pytest.raises(ParameterError, match="header bits must be an integer in 4..24, "
                                             "got 40") as err:
        KeyOneStore(redis_server.url, "k", header_bits=40)
    assert "SIMDUP_" not in str(err.value)
    with pytest.raises(ValueError, match="SIMDUP_REDIS_HEADER_BITS"):
        _backend(redis_server.url, SIMDUP_REDIS_HEADER_BITS=40)
    # a stored index with other header bits: refused by the store, named by the glue
    key = f"simdup:{time.monotonic_ns()}:%(spider)s"
    first = _backend(redis_server.url, SIMDUP_REDIS_KEY=key, SIMDUP_REDIS_HEADER_BITS=10)
    with pytest.raises(ValueError, match="SIMDUP_REDIS_HEADER_BITS: 12 header bits, but the "
                                         "index .* was created with 10") as err:
        _backend(redis_server.url, SIMDUP_REDIS_KEY=key, SIMDUP_REDIS_HEADER_BITS=12)
    assert "SIMDUP_REDIS_KEY" in str(err.value)     # the other way out: a new index
    assert isinstance(err.value.__cause__, ParameterError)
    assert "SIMDUP_" not in str(err.value.__cause__)
    run(first.close())


def test_processes_with_other_feature_settings_are_refused(redis_server):
    key = f"simdup:{time.monotonic_ns()}:%(spider)s"
    first = _backend(redis_server.url, SIMDUP_REDIS_KEY=key)
    assert first.store.fingerprint and "shingles" in first.store.fingerprint
    same = _backend(redis_server.url, SIMDUP_REDIS_KEY=key)   # same settings: shares it
    assert same.store.base == first.store.base
    with pytest.raises(ValueError, match="SIMDUP_REDIS_KEY"):
        _backend(redis_server.url, SIMDUP_REDIS_KEY=key, SIMDUP_SHINGLE_SIZE=2)


def test_an_index_redis_lost_is_recreated_with_its_settings(redis_server):
    """After a Redis restart without persistence (or FLUSHDB) the first
    insertion re-creates the index: it records the writer's header bits and
    recipe again, so a process with other settings is still refused, at
    start-up or at its next insertion."""
    import redis

    async def run():
        base = f"lost:{time.monotonic_ns()}"
        a = await KeyOneStore(redis_server.url, base, header_bits=8, distance=3,
                                  fingerprint="recipe-A").connect()
        b = await KeyOneStore(redis_server.url, base, header_bits=8, distance=3,
                                  fingerprint="recipe-A").connect()
        client = redis.Redis.from_url(redis_server.url)
        try:
            masks = header_masks(8, [0, 1])
            await a.check_and_add_many(np.array([1 << 60], np.uint64), [masks], ["a"])
            for key in client.scan_iter(match=base + "*"):     # Redis lost the index
                client.delete(key)
            await a.check_and_add_many(np.array([2 << 60], np.uint64), [masks], ["a2"])
            assert client.get(base + ":t") == b"8"
            assert client.get(base + ":fingerprint") == b"recipe-A"
            other = KeyOneStore(redis_server.url, base, header_bits=8, distance=3,
                                    fingerprint="recipe-B")
            with pytest.raises(ValueError, match="recipe-A"):
                other.check_server()
            # a writer that started before the loss, with other settings than the
            # index re-created since, is refused at its next insertion
            for key in client.scan_iter(match=base + "*"):
                client.delete(key)
            c = await KeyOneStore(redis_server.url, base, header_bits=9, distance=3,
                                      fingerprint="recipe-A").connect()
            with pytest.raises(IndexUnavailableError, match="re-created with other settings"):
                await b.check_and_add_many(np.array([3 << 60], np.uint64), [masks], ["b"])
            await c.close()
        finally:
            client.close()
            await a.close()
            await b.close()
    asyncio.run(run())


def test_a_key_replaced_mid_crawl_is_named(redis_server):
    """Another type of key put under the prefix while a crawl runs: the
    error names the key prefix, not only Redis's WRONGTYPE."""
    import redis

    async def run():
        base = f"replaced:{time.monotonic_ns()}"
        store = await KeyOneStore(redis_server.url, base, header_bits=8, distance=3).connect()
        client = redis.Redis.from_url(redis_server.url)
        try:
            masks = header_masks(8, [0, 1])
            await store.check_and_add_many(np.array([1 << 60], np.uint64), [masks], ["a"])
            client.delete(base + ":n")
            client.hset(base + ":n", "x", "y")
            with pytest.raises(IndexUnavailableError, match=f"key prefix '{base}'") as err:
                await store.check_and_add_many(np.array([2 << 60], np.uint64), [masks], ["b"])
            assert "SIMDUP_" not in str(err.value)
            # what the crawl logs names the setting
            assert setting_message(err.value).startswith("SIMDUP_REDIS_KEY: ")
            with pytest.raises(IndexUnavailableError, match="key prefix"):
                await store.size()
        finally:
            client.close()
            await store.close()
    asyncio.run(run())


def test_bad_input(redis_server):
    with pytest.raises(ParameterError, match="Redis URL must start with redis://"):
        KeyOneStore("http://x", "k")
    with pytest.raises(ParameterError, match="header bits must be an integer in 4..24, got 0"):
        KeyOneStore(redis_server.url, "k", header_bits=0)
    with pytest.raises(ParameterError, match="header bits must be an integer in 4..24, got 25"):
        KeyOneStore(redis_server.url, "k", header_bits=25)
    with pytest.raises(ParameterError, match="distance must be an integer in 0..24, got 25"):
        KeyOneStore(redis_server.url, "k", distance=25)
    with pytest.raises(ParameterError, match=r"min_similarity must be a number in \[0, 1\]"):
        KeyOneStore(redis_server.url, "k", min_similarity=1.5)
    with pytest.raises(ParameterError, match="key prefix must be a non-empty string"):
        KeyOneStore(redis_server.url, "")

    async def go():
        store = await new_store(redis_server).connect()
        with pytest.raises(ValueError, match="masks"):
            await store.check_and_add_many(np.array([1], np.uint64), [np.array([4], np.uint64)])
        with pytest.raises(ValueError, match="one array per value"):
            await store.check_and_add_many(np.array([1, 2], np.uint64), [np.zeros(1, np.uint64)])
        with pytest.raises(ValueError, match="sketches must have shape"):
            await RedisIndexStore.check_and_add_many(
                store, np.array([1], np.uint64), np.array([1], np.uint64),
                np.zeros((1, 16), np.uint8), ([np.zeros(1, np.uint64)],) * 2)
        # a foreign value under a bucket name is reported, not misread
        await store._client.set(store.base + ":b:00", b"abc")
        with pytest.raises(ValueError, match="not a simdup bucket"):
            await store.check_and_add_many(np.array([5], np.uint64), [np.zeros(1, np.uint64)])
        await store.close()
    run(go())


def test_redis_lost_and_back(private_redis):
    async def go():
        store = KeyOneStore(private_redis.url, "lost", header_bits=8,
                                params={"socket_timeout": 2.0, "socket_connect_timeout": 2.0})
        await store.connect()
        one = [np.zeros(1, np.uint64)]
        assert await store.check_and_add_many(np.array([7], np.uint64), one, ["a"]) == [None]
        private_redis.stop()
        # an error, not a hang (the watchdog fails a hung check; how long a
        # failing check takes is measured by benchmarks/bench_redis_outage.py)
        for _ in range(3):
            with pytest.raises(IndexUnavailableError):
                await asyncio.wait_for(
                    store.check_and_add_many(np.array([8], np.uint64), one, ["b"]), 60)
        private_redis.start()                      # empty, and without the script
        res = await store.check_and_add_many(np.array([7, 7], np.uint64), one * 2, ["c", "d"])
        assert res == [None, StoreMatch(7, 0, "c")]
        await store.close()
    run(go())


# -- the backend the Scrapy glue uses ---------------------------------------------
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


def _docs():
    """Real article texts, each with a near-duplicate (one sentence edited)."""
    import json
    root = PAGES_ROOT
    truth = json.loads((root / "article-extraction-benchmark" / "ground-truth.json").read_text())
    texts = [v["articleBody"] for k, v in sorted(truth.items())
             if len(v.get("articleBody", "").split()) > 300][:40]
    assert len(texts) >= 20
    return texts


def _fp(text):
    from scrapy_simdup import simhash
    words = text.lower().split()
    return simhash([" ".join(words[i:i + 3]) for i in range(len(words) - 2)])


def test_backend_real_near_duplicates(redis_server):
    from scrapy_simdup.index.backend import Match
    texts = _docs()
    originals = [_fp(t) for t in texts]
    variants = [_fp(t.replace(".", ". Updated at 10:42.", 1)) for t in texts]

    async def go():
        be = _backend(redis_server.url, SIMDUP_DISTANCE=3)
        assert be.store.base.endswith(":myspider") and len(be) == 0
        assert be.max_probes >= 1
        first = await be.check_and_add_many([page(v, w) for v, w in originals],
                                            [f"https://a/{i}" for i in range(len(texts))])
        assert first == [None] * len(texts)
        found = [await be.check_and_add(page(v, w), f"https://b/{i}")
                 for i, (v, w) in enumerate(variants)]
        # a near-duplicate is stored too, under its own key
        assert len(be) == 2 * len(texts) and be.probes > 0
        await be.close()
        return found
    found = run(go())
    hits = [(i, m) for i, m in enumerate(found) if m is not None]
    # near-duplicates within the distance are found (PSM may miss a few)
    close = [i for i in range(len(texts))
             if bin(originals[i][0] ^ variants[i][0]).count("1") <= 3]
    assert len(close) >= 10
    assert sum(1 for i, _ in hits if i in close) >= 0.8 * len(close)
    for i, m in hits:
        assert isinstance(m, Match) and m.duplicate_of == f"https://a/{i}" and m.distance <= 3


def test_backend_coalesces_concurrent_checks(redis_server):
    rng = np.random.default_rng(3)
    centres = rng.integers(0, 2**64, 100, dtype=np.uint64, endpoint=False)
    W = rng.normal(0, 30, (100, 64))

    async def go():
        be = _backend(redis_server.url, SIMDUP_MAX_PROBES=4)
        calls = []
        real = be.store._snapshot

        async def counting(*a, **kw):
            calls.append(len(a[0]))
            return await real(*a, **kw)
        be.store._snapshot = counting
        jobs = [be.check_and_add(page(int(c) ^ (j << 2), W[i]), f"u{i}-{j}")
                for j in range(2) for i, c in enumerate(centres)]
        res = await asyncio.gather(*jobs)
        await be.close()
        return res, calls
    res, calls = run(go())
    assert sum(r is None for r in res) == 100          # one kept per pair
    assert sum(calls) == 200 and len(calls) <= 3        # a few round trips, not 200


def test_backend_settings_and_startup_errors(redis_server):
    from tests.redis_server import free_port
    with pytest.raises(IndexUnavailableError, match="SIMDUP_INDEX"):
        _backend(f"redis://127.0.0.1:{free_port()}/0",
                 SIMDUP_REDIS_PARAMS={"socket_connect_timeout": 1.0})
    with pytest.raises(ValueError, match="SIMDUP_REDIS_HEADER_BITS"):
        _backend(redis_server.url, SIMDUP_REDIS_HEADER_BITS=40)
    for params in ({"no_such_option": 1}, {"socket_timeout": "abc"}):
        with pytest.raises(ValueError, match="SIMDUP_REDIS_PARAMS"):
            _backend(redis_server.url, SIMDUP_REDIS_PARAMS=params)
    be = _backend(redis_server.url, SIMDUP_MAX_PROBES=7, SIMDUP_REDIS_HEADER_BITS="12")
    assert be.max_probes == 7 and be.store.header_bits == 12
    assert _backend(redis_server.url, SIMDUP_RECALL=0.9, SIMDUP_DISTANCE=3).max_probes <= \
        _backend(redis_server.url, SIMDUP_RECALL=0.99, SIMDUP_DISTANCE=3).max_probes


def test_backend_fault_is_raised_then_recovers(private_redis):
    async def go():
        be = _backend(private_redis.url, SIMDUP_REDIS_PARAMS={"socket_timeout": 2.0,
                                                             "socket_connect_timeout": 2.0})
        W = np.ones(64)
        assert await be.check_and_add(page(1 << 40, W), "a") is None
        private_redis.stop()
        with pytest.raises(IndexUnavailableError):
            await be.check_and_add(page(2 << 40, W), "b")
        private_redis.start()
        assert await be.check_and_add(page(3 << 40, W), "c") is None
        await be.close()
    run(go())


def test_pipelined_chunk_sees_the_chunk_in_flight(redis_server):
    """The snapshot of chunk i+1 is read before the script of chunk i runs:
    near-duplicates across the two chunks are still resolved (one kept)."""
    rng = np.random.default_rng(11)
    centres = rng.integers(0, 2**64, 40, dtype=np.uint64, endpoint=False)
    values = np.concatenate([centres, centres ^ np.uint64(0b11)])     # chunk 1, chunk 2
    masks = [np.zeros(1, np.uint64)] * len(values)

    async def go():
        store = await new_store(redis_server, t=8).connect()
        real = store._commit
        order = []

        async def late_commit(*a, **kw):
            order.append("commit")
            await asyncio.sleep(0.2)           # the next snapshot goes first
            return await real(*a, **kw)
        real_snapshot = store._snapshot

        async def snapshot(*a, **kw):
            order.append("snapshot")
            return await real_snapshot(*a, **kw)
        store._commit, store._snapshot = late_commit, snapshot
        res = await store.check_and_add_many(values, masks, [f"k{i}" for i in range(80)],
                                             chunk=40)
        await store.close()
        return res, order
    res, order = run(go())
    assert order == ["snapshot", "snapshot", "commit", "commit"]
    assert res[:40] == [None] * 40
    assert [m.key for m in res[40:]] == [f"k{i}" for i in range(40)]


@pytest.mark.parametrize("ahead", [2, 3, 4])
def test_snapshots_read_ahead_see_every_uncommitted_chunk(redis_server, ahead):
    """With ``ahead`` snapshots read before the scripts of the chunks before
    them run (each script delayed), a page whose near-duplicate is in any
    earlier chunk, committed or not when its snapshot was read, is found."""
    rng = np.random.default_rng(12)
    centres = rng.integers(0, 2**64, 10, dtype=np.uint64, endpoint=False)
    # chunk j (10 values) holds near-duplicates (distance j + 1) of the centres
    values = np.concatenate([centres ^ np.uint64((1 << (j + 1)) - 1) for j in range(5)])
    masks = [np.zeros(1, np.uint64)] * len(values)

    async def go():
        store = await new_store(redis_server, t=8, h=6).connect()
        real = store._commit

        async def late_commit(*a, **kw):
            await asyncio.sleep(0.05)
            return await real(*a, **kw)
        store._commit = late_commit
        res = await store.check_and_add_many(values, masks, [f"k{i}" for i in range(50)],
                                             chunk=10, ahead=ahead)
        await store.close()
        return res
    res = run(go())
    assert res[:10] == [None] * 10
    for i, m in enumerate(res[10:], start=10):
        assert m is not None and m.key == f"k{i % 10}", (i, m)


# -- the compiled helpers against pure Python ------------------------------------
def _scan_reference(b1, rec1, b2, rec2, probes1, probes2, v1, v2, sk, h, needed, shift):
    """Best verified match, pure Python: records as (key, sketch) in key-1
    buckets and (key 2, key-1 header, position) in key-2 buckets."""
    best = None     # (-agree, distance, header, position, key 1)
    missing = False
    for hd in probes1:
        for pos, (k1, s) in enumerate(rec1.get(hd, [])):
            d = bin(k1 ^ v1).count("1")
            if d <= h:
                a = sum(x == y for x, y in zip(s, sk))
                if a >= needed and (best is None or (-a, d) < best[:2]):
                    best = (-a, d, hd, pos, k1)
    for hd in probes2:
        for k2, h1, pos in rec2.get(hd, []):
            d2 = bin(k2 ^ v2).count("1")
            if d2 <= h:
                if h1 not in b1:
                    missing = True
                    continue
                k1, s = rec1[h1][pos]
                d = min(d2, bin(k1 ^ v1).count("1"))
                a = sum(x == y for x, y in zip(s, sk))
                if a >= needed and (best is None or (-a, d) < best[:2]):
                    best = (-a, d, h1, pos, k1)
    return best, missing


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_scan_verified_matches_reference(data):
    """The compiled local check against pure Python, on random buckets with
    near keys, sketches agreeing in 0..32 bytes, and key-2 records whose
    key-1 bucket is sometimes not fetched."""
    import struct

    from scrapy_simdup._ext.redisbuckets import scan_verified
    seed = data.draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    t = data.draw(st.sampled_from([4, 6, 8]))
    shift = 64 - t
    h = data.draw(st.integers(0, 8))
    needed = data.draw(st.integers(0, 32))
    centre1, centre2 = (int(x) for x in rng.integers(0, 2**63, 2))
    csk = rng.integers(0, 256, 32, dtype=np.uint8)

    def near(c):
        for b in rng.choice(64, int(rng.integers(0, 12)), replace=False):
            c ^= 1 << int(b)
        return c

    def sketch():
        s = csk.copy()
        k = int(rng.integers(0, 33))
        s[rng.choice(32, k, replace=False)] = rng.integers(0, 256, k, dtype=np.uint8)
        return bytes(s)
    rec1, rec2 = {}, {}
    for _ in range(int(rng.integers(0, 40))):
        k1, k2 = near(centre1), near(centre2)
        lst = rec1.setdefault(k1 >> shift, [])
        rec2.setdefault(k2 >> shift, []).append((k2, k1 >> shift, len(lst)))
        lst.append((k1, sketch()))
    fetched1 = sorted(hd for hd in rec1 if rng.random() < 0.8)
    b2 = sorted(rec2)
    n = int(rng.integers(1, 6))
    v1 = np.array([near(centre1) for _ in range(n)], np.uint64)
    v2 = np.array([near(centre2) for _ in range(n)], np.uint64)
    sks = [sketch() for _ in range(n)]
    probes1 = [[hd for hd in fetched1 if rng.random() < 0.7] for _ in range(n)]
    probes2 = [[hd for hd in b2 if rng.random() < 0.7] for _ in range(n)]
    data1 = b"".join(struct.pack("<Q", k) + s for hd in fetched1 for k, s in rec1[hd])
    off1 = np.cumsum([0] + [40 * len(rec1[hd]) for hd in fetched1]).astype(np.int64)
    data2 = b"".join(struct.pack("<Q", k2) + h1.to_bytes(3, "little") + pos.to_bytes(3, "little")
                     for hd in b2 for k2, h1, pos in rec2[hd])
    off2 = np.cumsum([0] + [14 * len(rec2[hd]) for hd in b2]).astype(np.int64)
    pb1 = np.array([fetched1.index(hd) for p in probes1 for hd in p], np.int64)
    pb2 = np.array([b2.index(hd) for p in probes2 for hd in p], np.int64)
    ps1 = np.cumsum([0] + [len(p) for p in probes1]).astype(np.int64)
    ps2 = np.cumsum([0] + [len(p) for p in probes2]).astype(np.int64)
    agree, dist, where, pos, key1, missing, *_ = scan_verified(
        np.frombuffer(data1, np.uint8), off1, np.array(fetched1, np.uint64), pb1, ps1,
        np.frombuffer(data2, np.uint8), off2, pb2, ps2, v1, v2,
        np.frombuffer(b"".join(sks), np.uint8).reshape(n, 32), h, needed)
    for c in range(n):
        best, miss = _scan_reference(set(fetched1), rec1, b2, rec2, probes1[c], probes2[c],
                                     int(v1[c]), int(v2[c]), sks[c], h, needed, shift)
        assert bool(missing[c]) == miss
        if best is None:
            assert agree[c] == -1
        else:
            # the best (agree, distance); ties may name another page
            assert (agree[c], dist[c]) == (-best[0], best[1])
            rec = rec1[int(where[c])][int(pos[c])]
            assert rec[0] == int(key1[c])
            assert sum(x == y for x, y in zip(rec[1], sks[c])) == agree[c]


def test_scan_verified_rejects_bad_layout():
    from scrapy_simdup._ext.redisbuckets import scan_verified
    z8, z64, zi = np.zeros(0, np.uint8), np.zeros(0, np.uint64), np.zeros(0, np.int64)
    v = np.zeros(1, np.uint64)
    sk = np.zeros((1, 32), np.uint8)
    one = np.array([0, 0], np.int64)
    ok = dict(data1=np.zeros(40, np.uint8), off1=np.array([0, 40], np.int64),
              b1=np.zeros(1, np.uint64), pb1=zi, ps1=one, data2=z8,
              off2=np.zeros(1, np.int64), pb2=zi, ps2=one)
    scan_verified(*ok.values(), v, v, sk, 3, 5)
    for key, bad in [("off1", np.array([0, 39], np.int64)),       # not whole records
                     ("off1", np.array([0, 80], np.int64)),       # past the data
                     ("pb1", np.array([1], np.int64)),            # no such bucket
                     ("ps1", np.array([0, 2], np.int64)),         # more probes than listed
                     ("b1", z64)]:                                # a header per bucket
        with pytest.raises(ValueError):
            scan_verified(*{**ok, key: bad}.values(), v, v, sk, 3, 5)
    with pytest.raises(ValueError):
        scan_verified(*ok.values(), v, v, np.zeros((1, 16), np.uint8), 3, 5)


@settings(max_examples=60, deadline=None)
@given(lists=st.lists(st.tuples(st.lists(st.binary(max_size=300), max_size=8),
                                st.integers(0, 5)), min_size=1, max_size=4),
       asks=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 10)), min_size=1, max_size=12))
def test_keys_at_script_matches_reference(redis_server, lists, asks):
    """The server-side lookup of keys by (bucket, position): as the Python
    reading of the key lists, "" past the end or in a damaged (cut) list."""
    import redis

    from scrapy_simdup.index.redis.lua import KEYS_AT
    client = redis.Redis.from_url(redis_server.url)
    prefix = f"keysat:{next(_counter)}:u:"
    blobs = []
    for i, (keys, cut) in enumerate(lists):
        # uint16 LE length, the near-duplicate flag byte, the key
        blob = b"".join(len(x).to_bytes(2, "little") + bytes([i % 2]) + x
                        for i, x in enumerate(keys))
        blob = blob[:-cut] if cut else blob
        blobs.append(blob)
        if blob:
            client.set(f"{prefix}{i:02x}", blob)
    asks = sorted({(b % len(lists), k) for b, k in asks})
    buckets = sorted({b for b, _ in asks})
    counts = [sum(1 for b, _ in asks if b == u) for u in buckets]
    got = client.eval(KEYS_AT, 0, prefix, 2, "".join(f"{b:02x}" for b in buckets).encode(),
                      np.array(counts, "<u2").tobytes(),
                      np.array([k for _, k in asks], "<u4").tobytes())
    want = []
    for b, k in asks:
        blob, pos, key = blobs[b], 0, b""
        for _ in range(k + 1):
            if pos + 3 > len(blob):
                key = b""
                break
            length = int.from_bytes(blob[pos:pos + 2], "little")
            key = blob[pos + 3:pos + 3 + length] if pos + 3 + length <= len(blob) else b""
            pos += 3 + length
        want.append(key)
    assert got == want
    client.close()


def _own_flags_reference(values, counts, headers, idx, ev, eh, h):
    """The vectorised NumPy definition (what the script may skip re-checking)."""
    n = values.shape[0]
    starts = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
    is_new = idx < 0
    own_v = np.concatenate((ev, values[is_new]))
    own_h = np.concatenate((eh, headers[starts][is_new]))
    own_pos = np.concatenate((np.full(ev.shape[0], -1), np.flatnonzero(is_new)))
    flags = np.zeros(n, dtype=np.uint8)
    for c in range(n):
        probed = set(headers[starts[c]:starts[c] + counts[c]].tolist())
        for v, hd, pos in zip(own_v.tolist(), own_h.tolist(), own_pos.tolist()):
            if pos < c and hd in probed and bin(v ^ int(values[c])).count("1") <= h:
                flags[c] = 1
                break
    return flags


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_own_flags_matches_reference(data):
    from scrapy_simdup._ext.redisbuckets import own_flags
    n = data.draw(st.integers(1, 12))
    ne = data.draw(st.integers(0, 6))
    h = data.draw(st.integers(0, 6))
    small = st.integers(0, 7)            # few buckets: collisions happen
    pool = data.draw(st.lists(st.integers(0, M64), min_size=1, max_size=4))
    near = st.builds(lambda b, bit: b ^ (1 << bit), st.sampled_from(pool), st.integers(0, 63))
    values = np.array(data.draw(st.lists(near, min_size=n, max_size=n)), dtype=np.uint64)
    counts = np.array(data.draw(st.lists(st.integers(1, 4), min_size=n, max_size=n)), np.int64)
    headers = np.array(data.draw(st.lists(small, min_size=int(counts.sum()),
                                          max_size=int(counts.sum()))), dtype=np.uint64)
    idx = np.array(data.draw(st.lists(st.sampled_from([-1, 0, 5]), min_size=n, max_size=n)),
                   dtype=np.int64)
    ev = np.array(data.draw(st.lists(near, min_size=ne, max_size=ne)), dtype=np.uint64)
    eh = np.array(data.draw(st.lists(small, min_size=ne, max_size=ne)), dtype=np.uint64)
    probe_start = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    got = own_flags(values, probe_start, headers, idx, ev, eh, h)
    assert got.tolist() == _own_flags_reference(values, counts, headers, idx, ev, eh, h).tolist()


def test_keys_of_matches_found_in_the_snapshot(redis_server):
    """Near-duplicates found in the client's snapshot report their page's key
    (read on the server by KEYS_AT, not by fetching the key lists)."""
    zero = [np.zeros(1, np.uint64)]
    rng = np.random.default_rng(21)     # far apart, all in bucket 0 (t=4: top 4 bits)
    vals = rng.integers(0, 2**60, 12, dtype=np.uint64)

    async def scenario():
        store = await new_store(redis_server, t=4, h=2).connect()
        for a, b in ((0, 5), (5, 12)):
            assert await store.check_and_add_many(
                vals[a:b], zero * (b - a), [f"https://x/{i}" for i in range(a, b)]) == \
                [None] * (b - a)
        near = vals ^ np.uint64(1)
        res = await store.check_and_add_many(near[::-1], zero * 12, [f"n{i}" for i in range(12)])
        assert [m.key for m in res] == [f"https://x/{i}" for i in range(12)][::-1]
        assert all(m.distance == 1 for m in res)
        await store.close()
    run(scenario())


def test_a_script_missing_from_the_cache_is_loaded_and_the_insert_runs_once(redis_server):
    """The server lost one script but not the other (SCRIPT FLUSH, then another
    process loaded only the insert script): the insert that ran is not run
    again when the key lookup fails with NOSCRIPT, and the other way round."""
    import redis

    from scrapy_simdup.index.redis.lua import CHECK_AND_INSERT, KEYS_AT
    zero = [np.zeros(1, np.uint64)]
    a, b, c = np.uint64(0x1234_5678_9ABC_DEF0), np.uint64(0xFEDC_BA98_7654_3210), \
        np.uint64(0x0F0F_0F0F_0F0F_0F0F)

    async def go():
        store = await new_store(redis_server, t=8, h=3).connect()
        client = redis.Redis.from_url(redis_server.url)
        assert await store.check_and_add_many(np.array([a]), zero, ["A"]) == [None]
        client.script_flush()
        client.script_load(CHECK_AND_INSERT)              # KEYS_AT is missing
        res = await store.check_and_add_many(np.array([a, b]), zero * 2, ["A2", "B"])
        assert res[0].key == "A" and res[0].distance == 0 and res[1] is None
        assert int(client.get(store.base + ":n")) == 2     # B inserted once
        client.script_flush()
        client.script_load(KEYS_AT)                       # CHECK_AND_INSERT is missing
        res = await store.check_and_add_many(np.array([b, c]), zero * 2, ["B2", "C"])
        assert res[0].key == "B" and res[1] is None
        assert int(client.get(store.base + ":n")) == 3
        client.close()
        await store.close()
    run(go())


def test_a_key_prefix_holding_other_data_is_a_clear_error(redis_server):
    import redis
    base = f"foreign:{time.monotonic_ns()}"
    client = redis.Redis.from_url(redis_server.url)
    try:
        client.set(base + ":t", "hello")
        with pytest.raises(ValueError, match="not a scrapy-simdup index"):
            KeyOneStore(redis_server.url, base, header_bits=8).check_server()
        client.set(base + ":t", "8")
        client.set(base + ":v", FORMAT)
        client.set(base + ":fingerprint", b"\xff\xfe binary")
        with pytest.raises(ValueError, match="cannot be compared"):
            KeyOneStore(redis_server.url, base, header_bits=8,
                            fingerprint="recipe").check_server()
        # a long recipe (a content XPath is part of it) is cut in the message
        client.set(base + ":fingerprint", "x" * 100_000)
        with pytest.raises(ValueError, match="100000 characters") as err:
            KeyOneStore(redis_server.url, base, header_bits=8,
                            fingerprint="recipe").check_server()
        assert len(str(err.value)) < 1000
        # another Redis type under the prefix: the key prefix, not "Redis unavailable"
        other = f"foreign-hash:{time.monotonic_ns()}"
        client.hset(other + ":t", "a", "b")
        with pytest.raises(ParameterError, match="use another key prefix") as err:
            KeyOneStore(redis_server.url, other, header_bits=8).check_server()
        assert err.value.parameter == "key_prefix"
    finally:
        client.close()


def test_passwords_never_appear_in_messages():
    from scrapy_simdup.index.redis.store import safe_url
    assert safe_url("redis://user:pw@h:6379/0") == "redis://***@h:6379/0"
    assert safe_url("redis://:a@b@h/0") == "redis://***@h/0"
    assert safe_url("redis://h:6379/0?password=pw&db=2") == "redis://h:6379/0?password=***&db=2"
    assert safe_url("unix:///tmp/r.sock?db=1&Password=pw") == "unix:///tmp/r.sock?db=1&Password=***"
