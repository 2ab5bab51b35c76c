"""The Redis index decides like the in-memory one, on real pages.

Real labelled pages (spotsigs-dev stories mixed with distractors-dragnet),
fingerprinted by ``Fingerprinter()``, are checked one after the other by the
Redis backend and by ``MemoryBackend`` over ``VerifiedIndex`` with the same
distance, min_similarity and probes: the verdicts (duplicate or not, the
estimated similarity and the distance) are the same. Also: two processes
checking the same pages keep each at most once and store each once, an index of the older layout
is refused at start-up with what to do, and the layout costs 54 bytes a page.
A page met again (a second pass, another process) is decided as in memory:
a kept page is a revisit, a near-duplicate is a near-duplicate of another
stored page again (never of itself) and is not stored twice.
"""
import asyncio
import gzip
import multiprocessing as mp
import random
import time

import numpy as np
import pytest

from scrapy_simdup import Fingerprinter
from scrapy_simdup.exceptions import IndexConflictError, ParameterError
from scrapy_simdup.index.backend import Match, MemoryBackend, Page
from scrapy_simdup.index.redis.backend import RedisBackend
from scrapy_simdup.index.verified import VerifiedIndex
from tests.data_root import DATA_ROOT

SPOT = DATA_ROOT / "spotsigs-dev"
DISTRACTORS = DATA_ROOT / "distractors-dragnet"


def _load():
    if not SPOT.is_dir() or not DISTRACTORS.is_dir():
        pytest.skip(f"the labelled pages are not under {DATA_ROOT} (set SIMDUP_DATA)")
    stories = sorted(p for p in SPOT.iterdir() if p.is_dir())[:12]
    paths = [f for s in stories for f in sorted(s.iterdir()) if f.is_file()]
    paths += sorted(f for f in DISTRACTORS.iterdir() if f.is_file())[:250]
    fp = Fingerprinter()
    pages = []
    for path in paths:
        raw = path.read_bytes()
        if path.suffix == ".gz":
            raw = gzip.decompress(raw)
        try:
            f = fp.fingerprint_html(raw)
        except Exception:  # noqa: BLE001 (a page without text is skipped, as in a crawl)
            continue
        # a plain Page: what the backends need, picklable for the worker processes
        pages.append((f"{path.parent.name}/{path.name}",
                      Page(f.value, np.asarray(f.W), f.value2, np.asarray(f.W2), f.sketch)))
    random.Random(7).shuffle(pages)
    return pages


@pytest.fixture(scope="module")
def pages():
    return _load()


def _base():
    return f"verified:{time.monotonic_ns()}"


def _memory(distance, min_similarity, max_probes, t):
    return MemoryBackend(VerifiedIndex(distance=distance, min_similarity=min_similarity,
                                       max_probes=max_probes, header_bits=t))


def _verdicts(matches):
    return [None if m is None else (round(m.similarity, 9), m.distance) for m in matches]


@pytest.mark.parametrize("t, max_probes, distance, min_similarity, batch", [
    (8, None, 22, 0.15, 1),      # every bucket probed: the exhaustive search
    (8, None, 22, 0.15, 40),     # batches: near-duplicates within one are decided in Lua
    (14, 64, 22, 0.15, 25),      # the same probe budget per key (VOSH order) as memory
    (10, None, 16, 0.0, 30),     # min_similarity 0: the keys alone decide
])
def test_same_verdicts_as_memory_on_real_pages(redis_server, pages, t, max_probes, distance,
                                               min_similarity, batch):
    keys = [k for k, _ in pages]
    memory = _memory(distance, min_similarity, max_probes, t)

    async def go():
        expected = [await memory.check_and_add(p, k) for k, p in pages]
        be = RedisBackend.open(redis_server.url, _base(), header_bits=t, distance=distance,
                               max_probes=max_probes, min_similarity=min_similarity)
        got = []
        for a in range(0, len(pages), batch):
            if batch == 1:
                got.append(await be.check_and_add(pages[a][1], keys[a]))
            else:
                got.extend(await be.check_and_add_many([p for _, p in pages[a:a + batch]],
                                                       keys[a:a + batch]))
        assert len(be) == len(memory)      # near-duplicates are stored too
        await be.close()
        return expected, got
    expected, got = asyncio.run(go())
    dups = sum(m is not None for m in expected)
    assert dups > 50                                    # real near-duplicates were met
    if max_probes is None:
        assert _verdicts(got) == _verdicts(expected)
    else:
        # with a probe budget, memory reports the distance of the key whose
        # probes found the page; Redis reads both keys of a page it finds by
        # key 2, so it reports the smaller of the two (the rule's distance)
        assert [v and v[0] for v in _verdicts(got)] == [v and v[0] for v in _verdicts(expected)]
        assert all(g is None or g.distance <= e.distance for g, e in zip(got, expected))
    # the page named: the same, unless another stored page ties on (similarity, distance)
    same = sum(g.duplicate_of == e.duplicate_of for g, e in zip(got, expected) if e is not None)
    assert same >= 0.95 * dups
    for g in got:
        assert g is None or g.duplicate_of in keys


def _worker(url, base, pages, seed, q):
    async def go():
        be = RedisBackend.open(url, base, header_bits=10, max_probes=64)
        order = list(range(len(pages)))
        random.Random(seed).shuffle(order)
        kept = []
        for a in range(0, len(order), 16):
            idx = order[a:a + 16]
            res = await be.check_and_add_many([pages[i][1] for i in idx],
                                              [pages[i][0] for i in idx])
            kept.extend(i for i, r in zip(idx, res) if r is None)
        await be.close()
        return kept
    q.put(asyncio.run(go()))


def test_two_processes_keep_each_page_at_most_once(redis_server, pages):
    """Both processes check the same real pages in different orders at the
    same time: a page kept by one is a duplicate (of itself, at least) for the
    other, whatever the interleaving of snapshots and scripts."""
    base = _base()
    subset = pages[:300]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(redis_server.url, base, subset, s, q))
             for s in range(2)]
    for p in procs:
        p.start()
    kept = [q.get(timeout=180) for _ in procs]
    for p in procs:
        p.join(30)
    assert not set(kept[0]) & set(kept[1])

    async def size():
        be = RedisBackend.open(redis_server.url, base, header_bits=10)
        n = len(be)
        await be.close()
        return n
    # near-duplicates are stored too, each page once under its own key
    assert asyncio.run(size()) == len(subset)


def test_fifty_four_bytes_a_page(redis_server, pages):
    """54 bytes a page in the buckets; the kept flag rides in the key lists."""
    import redis
    base = _base()

    async def go():
        be = RedisBackend.open(redis_server.url, base, header_bits=8, max_probes=16)
        await be.check_and_add_many([p for _, p in pages], [k for k, _ in pages])
        await be.close()
        return len(be)
    kept = asyncio.run(go())
    client = redis.Redis.from_url(redis_server.url)
    try:
        total = {fam: sum(client.strlen(k) for k in client.scan_iter(f"{base}:{fam}:*"))
                 for fam in "bc"}
        assert client.get(f"{base}:v") == b"3"
        urls = sum(client.strlen(k) for k in client.scan_iter(f"{base}:u:*"))
    finally:
        client.close()
    assert total == {"b": 40 * kept, "c": 14 * kept}
    assert urls == sum(3 + len(k.encode()) for k, _ in pages)   # length, flag, key


def _old_index(url, base):
    """What the previous version left in Redis: header bits, size, id, recipe,
    buckets of 8-byte fingerprints, no ``:v``."""
    import redis
    client = redis.Redis.from_url(url)
    client.set(base + ":t", "14")
    client.set(base + ":n", "3")
    client.set(base + ":id", "0" * 32 + "14simdup-fp/t2.x3.f1")
    client.set(base + ":fingerprint", "simdup-fp/t2.x3.f1")
    client.set(base + ":b:0abc", bytes(24))
    client.close()


def test_an_old_layout_index_is_refused_at_startup(redis_server):
    from scrapy_simdup import SimdupConfig
    from scrapy_simdup.integration.backends import make_backend
    base = _base()
    _old_index(redis_server.url, base)
    with pytest.raises(ParameterError, match="older scrapy-simdup") as err:
        RedisBackend.open(redis_server.url, base)
    assert err.value.parameter == "key_prefix"
    assert "SIMDUP_REDIS_KEY" in str(err.value) and f"'{base}:*'" in str(err.value)
    # through the crawl's settings: the message names the setting and the remedy
    settings = {"SIMDUP_INDEX": redis_server.url, "SIMDUP_REDIS_KEY": base}
    with pytest.raises(ValueError, match="SIMDUP_REDIS_KEY.*older scrapy-simdup"):
        make_backend(SimdupConfig.from_settings(settings))
    # nothing was written into the old index
    import redis
    client = redis.Redis.from_url(redis_server.url)
    try:
        assert client.get(base + ":v") is None and client.get(base + ":n") == b"3"
    finally:
        client.close()


def test_an_old_layout_written_mid_crawl_is_refused(redis_server, pages):
    """An index replaced by an older version's while a crawl runs: the script
    refuses to write into it (the layout is checked where it writes)."""
    import redis
    base = _base()

    async def go():
        be = RedisBackend.open(redis_server.url, base, header_bits=8)
        assert await be.check_and_add(pages[0][1], pages[0][0]) is None
        client = redis.Redis.from_url(redis_server.url)
        client.delete(base + ":v")
        client.close()
        with pytest.raises(IndexConflictError, match="older scrapy-simdup") as err:
            await be.check_and_add(pages[1][1], pages[1][0])
        assert err.value.parameter == "key_prefix"
        await be.close()
    asyncio.run(go())


def test_an_index_of_layout_2_is_refused(redis_server):
    """Layout 2 stored near-duplicates without saying so: met again, they
    would pass as revisits. Refused at start-up, with what to do."""
    import redis
    base = _base()
    client = redis.Redis.from_url(redis_server.url)
    client.set(base + ":v", "2")
    client.set(base + ":t", "14")
    client.close()
    with pytest.raises(ParameterError, match="layout 2.*revisit.*SIMDUP_REDIS_KEY"):
        RedisBackend.open(redis_server.url, base)


def _pair(pages):
    """Two real pages, the second a near-duplicate of the first (in memory)."""
    for i in range(len(pages)):
        for j in range(i + 1, len(pages)):
            mem = _memory(22, 0.15, None, 8)

            async def go(a=pages[i], b=pages[j], mem=mem):
                return [await mem.check_and_add(p, k) for k, p in (a, b)]
            first, second = asyncio.run(go())
            if first is None and second is not None and second.similarity < 1:
                return pages[i], pages[j]
    pytest.skip("no near-duplicate pair")


def test_a_near_duplicate_met_again_is_not_a_revisit(redis_server, pages):
    """The bug: a near-duplicate is stored under its own URL too; met again
    (another process, the next crawl) it must be reported as a near-duplicate
    of the kept page, not as a revisit of itself, and not be stored again. A
    kept page met again is a revisit."""
    (ka, a), (kb, b) = _pair(pages)
    base = _base()

    async def crawl(items, batch):
        be = RedisBackend.open(redis_server.url, base, header_bits=8, max_probes=None)
        if batch:
            got = await be.check_and_add_many([p for _, p in items], [k for k, _ in items])
        else:
            got = [await be.check_and_add(p, k) for k, p in items]
        size = len(be)
        await be.close()
        return got, size
    first, size = asyncio.run(crawl([(ka, a), (kb, b)], False))
    assert first[0] is None and first[1].duplicate_of == ka and size == 2
    for batch in (False, True):
        # a new backend: what another process or the next crawl sees
        (again_b, again_a), size = asyncio.run(crawl([(kb, b), (ka, a)], batch))
        assert again_b.duplicate_of == ka          # the kept page, not itself
        assert (again_b.similarity, again_b.distance) == (first[1].similarity, first[1].distance)
        assert again_a.duplicate_of == ka          # the kept page: a revisit
        assert again_a.distance == 0 and again_a.similarity == 1.0
        assert size == 2                           # nothing stored again
    # met alone: the near-duplicate's only other match is the kept page
    (alone,), size = asyncio.run(crawl([(kb, b)], False))
    assert alone.duplicate_of == ka and size == 2


def test_a_near_duplicate_whose_only_match_is_itself(redis_server, pages):
    """A near-duplicate met again changed so that only its own record still
    verifies (its bytes that agreed with the kept page now differ): it
    matches nothing, and is still not stored twice, as in memory."""
    (ka, a), (kb, b) = _pair(pages)
    same = np.frombuffer(a.sketch, np.uint8) == np.frombuffer(b.sketch, np.uint8)
    if 32 - same.sum() < 5:
        pytest.skip("the pair's sketches agree too much")
    sk = np.frombuffer(b.sketch, np.uint8).copy()
    sk[same] += 1
    changed = b._replace(sketch=sk.tobytes())
    base = _base()
    mem = _memory(22, 0.15, None, 8)

    async def go():
        be = RedisBackend.open(redis_server.url, base, header_bits=8, max_probes=None)
        out = []
        for backend in (mem, be):
            await backend.check_and_add(a, ka)
            await backend.check_and_add(b, kb)
            out.append(await backend.check_and_add(changed, kb))
        # and in a batch, from another backend (another process)
        other = RedisBackend.open(redis_server.url, base, header_bits=8, max_probes=None)
        out.append((await other.check_and_add_many([changed, a], [kb, ka]))[0])
        n = len(other)
        await be.close()
        await other.close()
        return out, n
    (m, r, r2), n = asyncio.run(go())
    assert m is None and r is None and r2 is None
    assert n == len(mem) == 2


def _second_pass_worker(url, base, pages, t, max_probes, batch, q):
    async def go():
        be = RedisBackend.open(url, base, header_bits=t, max_probes=max_probes)
        got = []
        for a in range(0, len(pages), batch):
            got.extend(await be.check_and_add_many([p for _, p in pages[a:a + batch]],
                                                   [k for k, _ in pages[a:a + batch]]))
        n = len(be)
        await be.close()
        return [k for k, _ in pages], [None if m is None else tuple(m) for m in got], n
    q.put(asyncio.run(go()))


@pytest.mark.parametrize("t, max_probes, batch, other_process", [
    (8, None, 1, False),         # every bucket probed, one page at a time
    (8, None, 40, True),         # batches, in another process
    (14, 64, 25, False),         # a probe budget per key
])
def test_second_pass_same_verdicts_as_memory(redis_server, pages, t, max_probes, batch,
                                             other_process):
    """Two passes over the same real pages: in the second, Redis and memory
    give the same verdicts: each kept page is a revisit of itself, each
    near-duplicate a near-duplicate of another page, and nothing is stored
    again."""
    subset = pages[:400]
    keys = [k for k, _ in subset]
    memory = _memory(22, 0.15, max_probes, t)
    base = _base()

    async def first():
        be = RedisBackend.open(redis_server.url, base, header_bits=t, max_probes=max_probes)
        got = await be.check_and_add_many([p for _, p in subset], keys)
        await be.close()
        return [await memory.check_and_add(p, k) for k, p in subset], got
    expected1, got1 = asyncio.run(first())
    assert [m is None for m in got1] == [m is None for m in expected1]
    second_order = list(subset)
    random.Random(3).shuffle(second_order)
    if other_process:
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        proc = ctx.Process(target=_second_pass_worker,
                           args=(redis_server.url, base, second_order, t, max_probes, batch, q))
        proc.start()
        _, got2, size = q.get(timeout=180)
        proc.join(30)
        got2 = [None if m is None else Match(*m) for m in got2]
    else:
        got2, size = asyncio.run(_second_pass_worker_inline(redis_server.url, base,
                                                             second_order, t, max_probes,
                                                             batch))

    async def second_memory():
        return [await memory.check_and_add(p, k) for k, p in second_order]
    expected2 = asyncio.run(second_memory())
    kept = {k for k, m in zip(keys, expected1) if m is None}
    assert len(kept) < len(subset) - 50                 # real near-duplicates were met
    for (k, _), e, g in zip(second_order, expected2, got2):
        assert e is not None and g is not None          # every page is stored: all match
        if k in kept:
            assert e.duplicate_of == k and g.duplicate_of == k       # a revisit
            assert (g.similarity, g.distance) == (1.0, 0)
        else:
            assert e.duplicate_of != k and g.duplicate_of != k       # never itself
    if max_probes is None:
        assert _verdicts(got2) == _verdicts(expected2)
    else:
        assert [v[0] for v in _verdicts(got2)] == [v[0] for v in _verdicts(expected2)]
    same = sum(g.duplicate_of == e.duplicate_of for g, e in zip(got2, expected2))
    assert same >= 0.95 * len(subset)
    assert size == len(memory) == len(subset)           # nothing stored again


async def _second_pass_worker_inline(url, base, pages, t, max_probes, batch):
    be = RedisBackend.open(url, base, header_bits=t, max_probes=max_probes)
    got = []
    for a in range(0, len(pages), batch):
        if batch == 1:
            got.append(await be.check_and_add(pages[a][1], pages[a][0]))
        else:
            got.extend(await be.check_and_add_many([p for _, p in pages[a:a + batch]],
                                                   [k for k, _ in pages[a:a + batch]]))
    n = len(be)
    await be.close()
    return got, n


@pytest.mark.parametrize("batch", [False, True])
def test_a_page_whose_key_moved_bucket_is_decided_as_in_memory(redis_server, pages, batch):
    """Met again after a change that moved key 1 to another bucket (its top
    bit flipped), a page has no own entry in its new bucket: its old record
    is found as its best match, and is still its own entry: a near-duplicate
    is checked again with it set apart (a near-duplicate of the kept page,
    not stored again), a kept page is a revisit."""
    (ka, a), (kb, b) = _pair(pages)
    top = 1 << 63
    moved_a = a._replace(value=a.value ^ top)
    moved_b = b._replace(value=b.value ^ top)
    mem = _memory(22, 0.15, None, 8)
    base = _base()

    async def go():
        be = RedisBackend.open(redis_server.url, base, header_bits=8, max_probes=None)
        other = RedisBackend.open(redis_server.url, base, header_bits=8, max_probes=None)
        out = []
        for backend in (mem, be):
            await backend.check_and_add_many([a, b], [ka, kb])
        for backend in (mem, other):
            if batch:
                out.append(await backend.check_and_add_many([moved_b, moved_a], [kb, ka]))
            else:
                out.append([await backend.check_and_add(moved_b, kb),
                            await backend.check_and_add(moved_a, ka)])
        n = len(other)
        await be.close()
        await other.close()
        return out, n
    (m, r), n = asyncio.run(go())
    assert m[0].duplicate_of == r[0].duplicate_of == ka       # not itself
    assert (r[0].similarity, r[0].distance) == (m[0].similarity, m[0].distance)
    assert m[1].duplicate_of == r[1].duplicate_of == ka       # a revisit
    assert (r[1].similarity, r[1].distance) == (m[1].similarity, m[1].distance) == (1.0, 0)
    assert n == len(mem) == 2                                 # nothing stored again


def test_two_processes_meet_the_stored_pages_again_at_once(redis_server, pages):
    """After a first crawl, two processes re-crawl the same real pages at the
    same time, in different orders: each kept page is a revisit, each
    near-duplicate a near-duplicate of another page, in both; nothing is
    stored again."""
    subset = pages[:300]
    keys = [k for k, _ in subset]
    base = _base()

    async def first():
        be = RedisBackend.open(redis_server.url, base, header_bits=10, max_probes=64)
        got = await be.check_and_add_many([p for _, p in subset], keys)
        await be.close()
        return got
    got1 = asyncio.run(first())
    kept = {k for k, m in zip(keys, got1) if m is None}
    assert len(kept) < len(subset) - 40
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    orders = []
    for seed in range(2):
        order = list(subset)
        random.Random(seed + 11).shuffle(order)
        orders.append(order)
    procs = [ctx.Process(target=_second_pass_worker,
                         args=(redis_server.url, base, order, 10, 64, 16, q))
             for order in orders]
    for p in procs:
        p.start()
    results = [q.get(timeout=180) for _ in procs]
    for p in procs:
        p.join(30)
    for order_keys, got, size in results:
        assert size == len(subset)                      # nothing stored again
        for k, m in zip(order_keys, got):
            assert m is not None
            assert (m[0] == k) == (k in kept), (k, m)   # a revisit iff kept
