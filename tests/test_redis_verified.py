"""The Redis index decides like the in-memory one, on real pages.

Real labelled pages (spotsigs-dev stories mixed with distractors-dragnet),
fingerprinted by ``Fingerprinter()``, are checked one after the other by the
Redis backend (a replica of the log in the process) and by ``MemoryBackend``
over a ``VerifiedIndex`` of the same settings: the verdicts are the same
(duplicate or not, the page named, the similarity and the distance), and
near-duplicates are stored too. Met again (the same process, or one that
opens later and loads the log), a kept page is a revisit, a near-duplicate is
a near-duplicate of another stored page (never of itself), and nothing is
stored twice.
"""
import asyncio
import gzip
import random
import time

import numpy as np
import pytest

from scrapy_simdup import Fingerprinter
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
        pages.append((f"https://{path.parent.name}/{path.name}",
                      Page(f.value, np.asarray(f.W), f.value2, np.asarray(f.W2), f.sketch)))
    random.Random(7).shuffle(pages)
    return pages


@pytest.fixture(scope="module")
def pages():
    return _load()


def _prefix():
    return f"verified:{time.monotonic_ns()}"


def _index(distance=22, min_similarity=0.15, max_probes="default"):
    kw = {} if max_probes == "default" else {"max_probes": max_probes}
    return VerifiedIndex(distance=distance, min_similarity=min_similarity, **kw)


def _verdicts(matches):
    return [None if m is None else tuple(m) for m in matches]


async def _check_all(backend, items, batch):
    got = []
    for a in range(0, len(items), batch):
        chunk = items[a:a + batch]
        if batch == 1:
            got.append(await backend.check_and_add(chunk[0][1], chunk[0][0]))
        else:
            got.extend(await backend.check_and_add_many([p for _, p in chunk],
                                                        [k for k, _ in chunk]))
    return got


@pytest.mark.parametrize("distance, min_similarity, max_probes, batch", [
    (22, 0.15, "default", 1),     # the crawl's defaults, one page at a time
    (22, 0.15, None, 1),          # SIMDUP_SEARCH = "exact"
    (16, 0.0, "default", 1),      # min_similarity 0: the keys alone decide
    (22, 0.15, "default", 25),    # batches: a page's batch-mates are checked in its gap
])
def test_same_verdicts_as_memory_on_real_pages(redis_server, pages, distance, min_similarity,
                                               max_probes, batch):
    keys = [k for k, _ in pages]
    memory = MemoryBackend(_index(distance, min_similarity, max_probes))

    async def go():
        expected = [await memory.check_and_add(p, k) for k, p in pages]
        be = RedisBackend.open(redis_server.url, _prefix(),
                               _index(distance, min_similarity, max_probes), follow_interval=0)
        got = await _check_all(be, pages, batch)
        size = len(be)
        await be.close()
        return expected, got, size
    expected, got, size = asyncio.run(go())
    dups = sum(m is not None for m in expected)
    assert dups > 50                                    # real near-duplicates were met
    assert size == len(memory) == len(pages)            # near-duplicates are stored too
    # in a batch, a page's batch-mates are not in the replica it was looked
    # up in: they are in its gap, checked exactly, and the better of the two wins
    assert _verdicts(got) == _verdicts(expected)
    assert all(g is None or g.duplicate_of in keys for g in got)


def test_met_again_the_same_verdicts_as_memory(redis_server, pages):
    """A second pass over the same pages, in another order, by the process
    that stored them and by one that opens afterwards (loading the log):
    the verdicts of memory's second pass; each kept page a revisit of itself,
    each near-duplicate a near-duplicate of another page; nothing stored again."""
    subset = pages[:400]
    memory = MemoryBackend(_index())
    prefix = _prefix()
    again = list(subset)
    random.Random(3).shuffle(again)

    async def go():
        first_mem = [await memory.check_and_add(p, k) for k, p in subset]
        be = RedisBackend.open(redis_server.url, prefix, _index(), follow_interval=0)
        first = await _check_all(be, subset, 1)
        late = RedisBackend.open(redis_server.url, prefix, _index(), follow_interval=0)
        second_mem = [await memory.check_and_add(p, k) for k, p in again]
        second = await _check_all(be, again, 1)
        second_late = await _check_all(late, again, 16)
        sizes = len(be), len(late)
        for b in (be, late):
            await b.close()
        return first_mem, first, second_mem, second, second_late, sizes
    first_mem, first, second_mem, second, second_late, sizes = asyncio.run(go())
    assert _verdicts(first) == _verdicts(first_mem)
    kept = {k for (k, _), m in zip(subset, first_mem) if m is None}
    assert len(kept) < len(subset) - 50                 # real near-duplicates were met
    assert _verdicts(second) == _verdicts(second_mem)
    assert _verdicts(second_late) == _verdicts(second_mem)
    for (k, _), m in zip(again, second_late):
        assert m is not None                            # every page is stored: all match
        if k in kept:
            assert tuple(m) == (k, 0, 1.0)              # a revisit
        else:
            assert m.duplicate_of != k                  # never itself
    assert sizes == (len(subset), len(subset)) == (len(memory), len(memory))


def _pair(pages):
    """Two real pages, the second a near-duplicate of the first (in memory)."""
    for i in range(len(pages)):
        for j in range(i + 1, min(len(pages), i + 200)):
            mem = MemoryBackend(_index())

            async def go(a=pages[i], b=pages[j], mem=mem):
                return [await mem.check_and_add(p, k) for k, p in (a, b)]
            first, second = asyncio.run(go())
            if first is None and second is not None and second.similarity < 1:
                return pages[i], pages[j]
    pytest.skip("no near-duplicate pair")


def test_a_near_duplicate_met_again_is_not_a_revisit(redis_server, pages):
    """A near-duplicate is stored under its own URL too; met again (another
    process, the next crawl) it is a near-duplicate of the kept page, not a
    revisit of itself, and is not stored again. A kept page met again is a
    revisit."""
    (ka, a), (kb, b) = _pair(pages)
    prefix = _prefix()

    async def crawl(items, batch):
        be = RedisBackend.open(redis_server.url, prefix, _index(), follow_interval=0)
        got = await _check_all(be, items, 2 if batch else 1)
        size = len(be)
        await be.close()
        return got, size
    first, size = asyncio.run(crawl([(ka, a), (kb, b)], False))
    assert first[0] is None and first[1].duplicate_of == ka and size == 2
    for batch in (False, True):
        (again_b, again_a), size = asyncio.run(crawl([(kb, b), (ka, a)], batch))
        assert again_b.duplicate_of == ka                   # the kept page, not itself
        assert (again_b.similarity, again_b.distance) == (first[1].similarity, first[1].distance)
        assert tuple(again_a) == (ka, 0, 1.0)               # the kept page: a revisit
        assert size == 2                                    # nothing stored again


def test_a_near_duplicate_whose_only_match_is_itself(redis_server, pages):
    """A near-duplicate met again changed so that only its own entry still
    verifies: it matches nothing, and is still not stored twice, as in memory."""
    (ka, a), (kb, b) = _pair(pages)
    same = np.frombuffer(a.sketch, np.uint8) == np.frombuffer(b.sketch, np.uint8)
    if 32 - same.sum() < 5:
        pytest.skip("the pair's sketches agree too much")
    sk = np.frombuffer(b.sketch, np.uint8).copy()
    sk[same] += 1
    changed = b._replace(sketch=sk.tobytes())
    prefix = _prefix()
    mem = MemoryBackend(_index())

    async def go():
        be = RedisBackend.open(redis_server.url, prefix, _index(), follow_interval=0)
        out = []
        for backend in (mem, be):
            await backend.check_and_add(a, ka)
            await backend.check_and_add(b, kb)
            out.append(await backend.check_and_add(changed, kb))
        other = RedisBackend.open(redis_server.url, prefix, _index(), follow_interval=0)
        out.append((await other.check_and_add_many([changed, a], [kb, ka]))[0])
        n = len(other)
        await be.close()
        await other.close()
        return out, n
    (m, r, r2), n = asyncio.run(go())
    assert m is None and r is None and r2 is None
    assert n == len(mem) == 2
