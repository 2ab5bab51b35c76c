"""The Redis index decides like the in-memory one, on real pages.

Real labelled pages (spotsigs-dev stories mixed with distractors-dragnet),
fingerprinted by ``Fingerprinter()``, are checked one after the other by the
Redis backend and by ``MemoryBackend`` over ``VerifiedIndex`` with the same
distance, min_similarity and probes: the verdicts (duplicate or not, the
estimated similarity and the distance) are the same. Also: two processes
checking the same pages keep each at most once and store each once, an index of the older layout
is refused at start-up with what to do, and the layout costs 54 bytes a page.
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
from scrapy_simdup.index.backend import MemoryBackend, Page
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
        assert client.get(f"{base}:v") == b"2"
    finally:
        client.close()
    assert total == {"b": 40 * kept, "c": 14 * kept}


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
