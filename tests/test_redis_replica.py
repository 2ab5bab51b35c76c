"""The replica every process of a shared Redis index keeps, without Redis.

``index.replica`` decides from the log alone which pages were kept: an entry
is kept when its writer's look-up found no match and no entry of its gap (the
entries appended between the writer's look-up and the entry) matches it, as
checked exactly by ``hashing.gap_matches``. Here the compiled and vectorised
parts are held against plain Python, exhaustively, on seeded random logs of
near-duplicate pages: ``gap_matches``, the ``KeyMap`` (URL hash -> row),
``Replica.apply`` (kept flags, gap matches, the page stored under each URL,
whatever the batches the log is applied in) and ``Replica.lookup`` (as
``MemoryBackend`` decides).
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scrapy_simdup._ext import hashing
from scrapy_simdup.fingerprint.sketch import matches_needed, similarity
from scrapy_simdup.index.backend import Page
from scrapy_simdup.index.replica import (
    MATCHED,
    RECORD_BYTES,
    KeyMap,
    Replica,
    RowMap,
    pack_entry,
    url_hash,
)
from scrapy_simdup.index.verified import VerifiedIndex

M64 = (1 << 64) - 1


# -- plain Python ---------------------------------------------------------------
def _pop(x):
    return bin(x).count("1")


def _agree(a, b):
    return sum(x == y for x, y in zip(a, b))


def _match(page, row, v1, v2, sk, distance, needed):
    """(agree, distance) of ``page`` against stored row ``row`` if it passes
    the rule (the two distances add up to at most ``distance + 26``)."""
    d1, d2 = _pop(v1[row] ^ page.value), _pop(v2[row] ^ page.value2)
    d = min(d1, d2)
    a = _agree(sk[row], page.sketch)
    return (a, d) if d <= distance and d1 + d2 <= distance + 26 and a >= needed else None


def _best(page, rows, v1, v2, sk, distance, needed):
    """The best row (most equal bins, then the smaller distance, then the
    earlier row) among ``rows``: (row, agree, distance) or None."""
    best = None
    for r in rows:
        m = _match(page, r, v1, v2, sk, distance, needed)
        if m is not None and (best is None or (-m[0], m[1], r) < (-best[1], best[2], best[0])):
            best = (r, m[0], m[1])
    return best


class ReferenceReplica:
    """What a replica is, entry after entry, in plain Python."""

    def __init__(self, distance, needed):
        self.distance, self.needed = distance, needed
        self.v1, self.v2, self.sk, self.kept, self.gaps = [], [], [], [], []
        self.keys = {}      # URL -> row of the page stored under it

    def apply(self, page, url, base, matched):
        row = len(self.v1)
        self.v1.append(page.value)
        self.v2.append(page.value2)
        self.sk.append(page.sketch)
        gap = _best(page, range(max(base, 0), row), self.v1, self.v2, self.sk, self.distance,
                    self.needed)
        kept = not matched and gap is None
        self.kept.append(kept)
        self.gaps.append(gap)
        # a copy of the page stored under the URL, appended at once by another
        # process (the URL met first by both), does not replace it
        if kept or gap is None or self.keys.get(url) != gap[0]:
            self.keys[url] = row

    def lookup(self, page, url):
        own = self.keys.get(url)
        store = True
        if own is not None:
            if self.kept[own]:
                m = _match(page, own, self.v1, self.v2, self.sk, self.distance, self.needed)
                if m is not None:
                    return False, (own, m[0], m[1]), own
            else:
                store = False
        rows = [r for r in range(len(self.v1)) if r != own]
        return store, _best(page, rows, self.v1, self.v2, self.sk, self.distance,
                            self.needed), own


# -- pages ---------------------------------------------------------------------
def _flip(x, rng, nbits):
    for b in rng.choice(64, nbits, replace=False):
        x ^= 1 << int(b)
    return x


def _pages(rng, n, n_clusters, distance):
    """``n`` pages in ``n_clusters`` clusters of near-duplicates: keys a few
    bits from the cluster's (some beyond ``distance``), sketches with a few
    bins changed (some too many)."""
    centres = [(int(rng.integers(0, M64, dtype=np.uint64)), int(rng.integers(0, M64,
                                                                              dtype=np.uint64)),
                rng.integers(0, 256, 32, dtype=np.uint8)) for _ in range(n_clusters)]
    pages = []
    for _ in range(n):
        c1, c2, csk = centres[int(rng.integers(n_clusters))]
        sk = csk.copy()
        k = int(rng.choice([0, 0, 1, 4, 12, 28]))
        sk[rng.choice(32, k, replace=False)] = rng.integers(0, 256, k, dtype=np.uint8)
        top = max(distance // 2 + 2, 3)
        pages.append(Page(_flip(c1, rng, int(rng.integers(0, top))), None,
                          _flip(c2, rng, int(rng.integers(0, top))), None, sk.tobytes()))
    return pages


def _index(distance, min_similarity):
    # every flip set of the 8 header bits: the exhaustive search the reference does
    return VerifiedIndex(distance=distance, min_similarity=min_similarity, max_probes=None,
                         header_bits=8)


# -- gap_matches ---------------------------------------------------------------
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_gap_matches_is_the_brute_force(data):
    seed = data.draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    distance = data.draw(st.sampled_from([0, 3, 8, 22, 24]))
    needed = data.draw(st.integers(0, 32))
    n = data.draw(st.integers(1, 40))
    pages = _pages(rng, n, data.draw(st.integers(1, 5)), distance)
    v1 = np.array([p.value for p in pages], np.uint64)
    v2 = np.array([p.value2 for p in pages], np.uint64)
    sk = np.frombuffer(b"".join(p.sketch for p in pages), np.uint8).reshape(n, 32)
    first = data.draw(st.integers(0, n))
    starts = np.array([data.draw(st.integers(-3, first + i)) for i in range(n - first)],
                      np.int64)
    rows, agree, dist = hashing.gap_matches(np.stack([v1, v2], axis=1), sk, first, starts,
                                            distance, needed, distance + 26)
    assert rows.dtype == np.int64 and agree.dtype == np.uint8 and dist.dtype == np.uint8
    sketches = [p.sketch for p in pages]
    for i in range(n - first):
        want = _best(pages[first + i], range(max(int(starts[i]), 0), first + i),
                     [p.value for p in pages], [p.value2 for p in pages], sketches,
                     distance, needed)
        got = (int(rows[i]), int(agree[i]), int(dist[i]))
        assert got == (want if want is not None else (-1, 0, 0)), (i, starts[i])


def test_gap_matches_refuses_bad_arrays():
    z = np.zeros((4, 2), np.uint64)
    sk = np.zeros((4, 32), np.uint8)
    with pytest.raises(ValueError, match="32 bytes"):
        hashing.gap_matches(z, np.zeros((4, 16), np.uint8), 0, np.zeros(4, np.int64), 3, 0)
    with pytest.raises(ValueError, match="two a row"):
        hashing.gap_matches(np.zeros((4, 3), np.uint64), sk, 0, np.zeros(4, np.int64), 3, 0)
    with pytest.raises(ValueError, match="past the arrays"):
        hashing.gap_matches(z, sk, 2, np.zeros(3, np.int64), 3, 0)
    with pytest.raises(ValueError, match="past the arrays"):
        hashing.gap_matches(z[:2], sk, 0, np.zeros(3, np.int64), 3, 0)
    with pytest.raises(ValueError, match="past the arrays"):
        hashing.gap_matches(z, sk, -1, np.zeros(1, np.int64), 3, 0)


def test_hash_tails_hashes_the_urls():
    blobs = [b"x" * RECORD_BYTES + "https://a/é".encode(), b"y" * RECORD_BYTES]
    got = hashing.hash_tails(blobs, RECORD_BYTES)
    assert got.tolist() == [url_hash("https://a/é"), url_hash("")]
    with pytest.raises(ValueError, match="shorter"):
        hashing.hash_tails([b"abc"], RECORD_BYTES)
    with pytest.raises(TypeError, match="bytes"):
        hashing.hash_tails(["abc"], 0)
    with pytest.raises(ValueError, match=">= 0"):
        hashing.hash_tails([b"abc"], -1)


# -- KeyMap and RowMap -------------------------------------------------------------
class RowMapOverKeys:
    """A RowMap and every row's key, used as a KeyMap."""

    def __init__(self):
        self.map, self.keys = RowMap(), np.zeros(0, np.uint64)

    def put_many(self, hashes, rows):
        if rows.shape[0]:
            if rows.max() >= len(self.keys):
                self.keys = np.concatenate(
                    [self.keys, np.zeros(rows.max() + 1 - len(self.keys), np.uint64)])
            self.keys[rows] = hashes
        self.map.put_many(rows, self.keys)

    def get(self, h):
        return self.map.get(h, self.keys)

    def __len__(self):
        return len(self.map)


@pytest.mark.parametrize("make", [KeyMap, RowMapOverKeys])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_keymap_is_a_dict(make, data):
    """Batches of (hash, row), small and large, hashes repeating within and
    across batches: the latest row of a hash wins, as in a dict."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    pool = np.concatenate((np.array([0, 1, M64, M64 - 1, 1 << 63], np.uint64),
                           rng.integers(0, M64, data.draw(st.integers(1, 300)),
                                        dtype=np.uint64, endpoint=True)))
    km, ref = make(), {}
    row = 0
    for size in data.draw(st.lists(st.sampled_from([0, 1, 3, 50, 4097, 5000]), min_size=1,
                                   max_size=8)):
        hashes = rng.choice(pool, size)
        rows = np.arange(row, row + size, dtype=np.int64)
        row += size
        km.put_many(np.ascontiguousarray(hashes), rows)
        ref.update(zip(hashes.tolist(), rows.tolist()))
        assert len(km) == len(ref)
        for h in pool.tolist():
            assert km.get(h) == ref.get(h), h
    absent = [h for h in rng.integers(0, M64, 50, dtype=np.uint64).tolist() if h not in ref]
    assert all(km.get(h) is None for h in absent)


@pytest.mark.parametrize("make", [KeyMap, RowMapOverKeys])
def test_keymap_grows_and_loses_nothing(make):
    """150,000 puts in batches, hashes repeating (the table grows several
    times, its slots probed past collisions): every hash has its latest row."""
    rng = np.random.default_rng(5)
    km, ref = make(), {}
    pool = rng.integers(0, M64, 100_000, dtype=np.uint64, endpoint=True)
    # hashes equal in their high bits: the same first slot (a multiply maps a
    # hash onto it); the last of them next to the end: probes wrap around
    pool[:1000] = rng.integers(0, 1 << 40, 1000, dtype=np.uint64) | (np.uint64(7) << np.uint64(40))
    pool[1000:1500] = rng.integers(0, 1 << 40, 500, dtype=np.uint64) | np.uint64(M64 - (1 << 40))
    for a in range(0, 150_000, 4096):
        hashes = rng.choice(pool, 4096) if a % 3 else pool[a % 100_000:a % 100_000 + 4096]
        rows = np.arange(a, a + hashes.shape[0], dtype=np.int64)
        km.put_many(np.ascontiguousarray(hashes), rows)
        ref.update(zip(hashes.tolist(), rows.tolist()))
    assert len(km) == len(ref)
    assert all(km.get(h) == r for h, r in ref.items())
    assert all(km.get(int(h)) is None
               for h in rng.integers(0, M64, 1000, dtype=np.uint64) if int(h) not in ref)


def test_keymap_refuses_rows_it_cannot_hold():
    km = KeyMap()
    for row in (-1, 0xFFFFFFFF):
        with pytest.raises(OverflowError):
            km.put_many(np.array([1], np.uint64), np.array([row], np.int64))
    with pytest.raises(ValueError, match="differ in length"):
        km.put_many(np.array([1, 2], np.uint64), np.array([0], np.int64))
    assert len(km) == 0 and km.get(1) is None
    km.put_many(np.array([1], np.uint64), np.array([0xFFFFFFFE], np.int64))
    assert km.get(1) == 0xFFFFFFFE


def test_rowmap_refuses_rows_without_keys_and_holds_4_bytes_a_slot():
    rm, keys = RowMap(), np.array([10, 20, 30], np.uint64)
    for row in (-1, 3):
        with pytest.raises(IndexError, match="has no key"):
            rm.put_many(np.array([row], np.int64), keys)
    assert len(rm) == 0 and rm.get(10, keys) is None
    rm.put_many(np.array([0, 2], np.int64), keys)
    assert (rm.get(10, keys), rm.get(20, keys), rm.get(30, keys)) == (0, None, 2)
    assert rm.get(30, keys[:2]) is None        # row 2's key not given: not a match
    with pytest.raises(ValueError, match="rows 0..2 are needed"):
        rm.put_many(np.array([1], np.int64), keys[:2])
    assert rm.nbytes == 4 * 1024


# -- Replica.apply / lookup -------------------------------------------------------
def _log(rng, pages, urls, back):
    """A log of ``pages`` as several writers append it: each entry's base
    some way back (the writer's replica lagged), its flag set when the
    writer's look-up found a match (here: at random)."""
    entries = []
    for i, (p, u) in enumerate(zip(pages, urls)):
        base = int(rng.integers(max(0, i - back), i + 1))
        entries.append((p, u, base, bool(rng.random() < 0.15)))
    return entries


def _apply_in_batches(replica, entries, sizes):
    got = []
    a = j = 0
    while a < len(entries):
        b = min(len(entries), a + sizes[j % len(sizes)])
        applied = replica.apply([pack_entry(p, u, base, m) for p, u, base, m in entries[a:b]])
        assert applied.rows.tolist() == list(range(a, b))
        got.extend((bool(applied.kept[i]), applied.gap_match(i)) for i in range(b - a))
        a, j = b, j + 1
    return got


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_apply_and_lookup_agree_with_the_reference(data):
    seed = data.draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    distance, min_similarity = data.draw(st.sampled_from([(3, 0.0), (8, 0.15), (22, 0.15),
                                                          (22, 0.5)]))
    needed = matches_needed(min_similarity)
    n = data.draw(st.integers(1, 120))
    pages = _pages(rng, n, data.draw(st.integers(1, 12)), distance)
    # URLs repeat: a page met again, by this writer or by two at once
    urls = [f"https://x/{int(rng.integers(0, max(2, n // 2)))}" for _ in range(n)]
    entries = _log(rng, pages, urls, back=data.draw(st.sampled_from([0, 3, 30])))
    ref = ReferenceReplica(distance, needed)
    for p, u, base, m in entries:
        ref.apply(p, u, base, m)
    sizes = data.draw(st.lists(st.integers(1, 50), min_size=1, max_size=5))
    replica = Replica(_index(distance, min_similarity))
    got = _apply_in_batches(replica, entries, sizes)
    assert len(replica) == replica.n == n
    for i, (kept, gap) in enumerate(got):
        assert kept == ref.kept[i] == replica.kept(i), i
        want = ref.gaps[i]
        assert (None if gap is None else (gap.id, gap.similarity, gap.distance)) == \
            (None if want is None else (want[0], similarity(want[1]), want[2])), i
    for u in set(urls):
        assert replica.row_of(url_hash(u)) == ref.keys[u], u
    # look-ups: the pages met again under their URLs, and under new ones
    probes = _pages(rng, 30, 6, distance) + pages[:30]
    for j, p in enumerate(probes):
        u = urls[j % n] if j % 2 else f"https://new/{j}"
        store, match, own = replica.lookup(p, url_hash(u))
        w_store, w_match, w_own = ref.lookup(p, u)
        assert (store, own) == (w_store, w_own), j
        assert (None if match is None else (match.id, match.similarity, match.distance)) == \
            (None if w_match is None else (w_match[0], similarity(w_match[1]), w_match[2])), j


def test_a_page_appended_twice_at_once_keeps_the_earlier_as_stored_page():
    """Two processes meet the same URL first at once and both append it: the
    second entry's gap holds the first, so it is not kept, and the first stays
    the page stored under the URL (met again: a revisit of the kept entry),
    whether the two entries are applied together (a process joining later,
    the follower) or one by one (the writers)."""
    rng = np.random.default_rng(1)
    p, other = _pages(rng, 2, 2, 22)
    log = [pack_entry(other, "https://o/", 0, False),
           pack_entry(p, "https://u/", 1, False),      # both writers held entry 1 only
           pack_entry(p, "https://u/", 1, False)]
    for batches in ([log], [log[:1], log[1:2], log[2:]], [log[:2], log[2:]], [log[:1], log[1:]]):
        replica = Replica(_index(22, 0.15))
        for b in batches:
            replica.apply(b)
        assert [replica.kept(r) for r in range(3)] == [True, True, False], batches
        assert replica.row_of(url_hash("https://u/")) == 1, [len(b) for b in batches]
        store, match, own = replica.lookup(p, url_hash("https://u/"))
        assert (store, own, match.id, match.distance, match.similarity) == (False, 1, 1, 0, 1.0)


def test_the_same_log_in_any_batches_is_the_same_replica():
    """Processes apply the log in different batches (an append returns what
    came since, the follower reads what it finds, a joining process reads the
    whole log): the kept flags, the page stored under each URL and every
    look-up are the same."""
    rng = np.random.default_rng(2)
    pages = _pages(rng, 400, 40, 22)
    urls = [f"https://x/{int(rng.integers(0, 150))}" for _ in range(400)]
    entries = _log(rng, pages, urls, back=20)
    replicas = []
    for sizes in ([400], [1], [7, 1, 30], [64, 3]):
        replica = Replica(_index(22, 0.15))
        _apply_in_batches(replica, entries, sizes)
        replicas.append(replica)
    first = replicas[0]
    kept = [first.kept(r) for r in range(400)]
    assert 40 <= sum(kept) < 300
    for other in replicas[1:]:
        assert [other.kept(r) for r in range(400)] == kept
        for u in set(urls):
            assert other.row_of(url_hash(u)) == first.row_of(url_hash(u)), u
        for j in range(0, 400, 7):
            assert other.lookup(pages[j], url_hash(urls[j])) == \
                first.lookup(pages[j], url_hash(urls[j]))


def test_the_matched_flag_is_not_kept_whatever_the_gap():
    rng = np.random.default_rng(3)
    a, b = _pages(rng, 2, 2, 22)
    replica = Replica(_index(22, 0.15))
    applied = replica.apply([pack_entry(a, "https://a/", 0, True),
                             pack_entry(b, "https://b/", 1, False)])
    assert applied.kept.tolist() == [False, True]
    assert replica.kept(0) is False and replica.kept(1) is True
    # a page whose only stored match is a not-kept entry: still a near-duplicate of it
    store, match, own = replica.lookup(a, url_hash("https://new/"))
    assert store and own is None and match.id == 0


def test_apply_refuses_what_is_not_a_page_record():
    replica = Replica(_index(22, 0.15))
    page = _pages(np.random.default_rng(4), 1, 1, 22)[0]
    with pytest.raises(ValueError, match="log entry 1 is not a page record"):
        replica.apply([b"short"])
    with pytest.raises(ValueError, match="log entry 1 is not a page record"):
        replica.apply(["text"])
    with pytest.raises(ValueError, match="log entry 2 names a base after itself"):
        replica.apply([pack_entry(page, "a", 0, False), pack_entry(page, "b", 5, False)])
    assert len(replica) == 0        # nothing half-applied
    with pytest.raises(OverflowError):
        pack_entry(page, "a", -1, False)
    with pytest.raises(ValueError, match="empty index"):
        idx = _index(22, 0.15)
        idx.add_fingerprint(page)
        Replica(idx)


def test_a_record_is_what_the_docs_say():
    page = Page(0x0123456789ABCDEF, None, 0xFEDCBA9876543210, None, bytes(range(32)))
    blob = pack_entry(page, "https://é/", 7, True)
    assert RECORD_BYTES == 56 and len(blob) == 56 + len("https://é/".encode())
    assert blob[:8] == (0x0123456789ABCDEF).to_bytes(8, "little")
    assert blob[8:16] == (0xFEDCBA9876543210).to_bytes(8, "little")
    assert blob[16:48] == bytes(range(32))
    assert blob[48:52] == (7).to_bytes(4, "little")
    assert blob[52:56] == MATCHED.to_bytes(4, "little")
    assert blob[56:].decode() == "https://é/"


def test_a_replica_reseeded_from_another_maps_every_url_to_the_same_row():
    """export() writes each page decided, without its gap: a URL appended
    twice at once (the later entry a copy of the earlier), or stored again
    after a change, must still map to the row the exporting replica has."""
    rng = np.random.default_rng(12)
    pages = _pages(rng, 60, 6, 22)
    blobs = [pack_entry(p, f"https://x/{i % 7}", max(0, i - 3), False)
             for i, p in enumerate(pages)]
    # two processes append the same new URL at once: the later entry is a
    # copy of the earlier (a bit flipped), both looked up at the same base
    page = pages[0]
    copy = page._replace(value=page.value ^ 1)
    blobs += [pack_entry(page, "https://x/0", 60, False), pack_entry(copy, "https://x/0", 60, False)]
    original = Replica(_index(22, 0.15))
    original.apply(blobs)
    seeded = Replica(_index(22, 0.15))
    seeded.apply(original.export(0, original.n))
    assert [seeded.kept(i) for i in range(seeded.n)] == \
        [original.kept(i) for i in range(original.n)]
    for i in range(7):
        h = url_hash(f"https://x/{i}")
        assert seeded.row_of(h) == original.row_of(h)
    # and both decide a changed page under such a URL alike
    changed = _pages(np.random.default_rng(13), 1, 1, 22)[0]
    for i in range(7):
        h = url_hash(f"https://x/{i}")
        a, b = original.lookup(changed, h), seeded.lookup(changed, h)
        assert (a[0], a[2]) == (b[0], b[2])
