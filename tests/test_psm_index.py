"""PSMIndex against brute force: precision 1.0 always, recall 1.0 when
probes are unlimited, recall monotone in max_probes; persistence; bad input."""
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scrapy_simdup import BPHSIndex, CorruptIndexError, PSMIndex, VolatilityModel, simhash
from tests.reference.index import clustered_values, crowded_values, ref_matches

MODEL = VolatilityModel.laplace(0.5)


def _weights(rng, values):
    """Weights consistent with the values' bits (sign = bit)."""
    mag = rng.laplace(size=(len(values), 64))
    bits = ((np.asarray(values, np.uint64)[:, None] >> np.arange(64, dtype=np.uint64)) & 1)
    return np.where(bits == 1, np.abs(mag), -np.abs(mag) - 1e-9)


@settings(max_examples=25)
@given(seed=st.integers(0, 2**32 - 1), h=st.integers(0, 4),
       t=st.one_of(st.none(), st.integers(1, 12)), chunks=st.integers(1, 4))
def test_unlimited_probes_equals_brute_force(seed, h, t, chunks):
    rng = np.random.default_rng(seed)
    stored = clustered_values(rng, 20, 400, h + 1)
    queries = clustered_values(rng, 20, 30, h + 1)
    idx = PSMIndex(distance=h, header_bits=t, model=MODEL)
    ids = []
    for part in np.array_split(stored, chunks):  # buffer and merges
        ids.append(idx.add(part))
    ids = np.concatenate(ids)
    np.testing.assert_array_equal(ids, np.arange(len(stored)))
    assert len(idx) == len(stored)
    W = _weights(rng, queries)
    qi, got_ids, got_d = idx.query_many(queries, W, first=False)
    firsts, first_d = idx.query_many(queries, W, first=True)
    for k, q in enumerate(queries):
        want, d = ref_matches(stored, ids, q, h)
        got = sorted(zip(got_ids[qi == k].tolist(), got_d[qi == k].tolist()))
        assert got == want
        single = idx.query(int(q), W[k], first=False)
        assert sorted(single) == want
        assert [x[1] for x in single] == sorted(x[1] for x in single)
        one = idx.query(int(q), W[k])
        if want:
            assert len(one) == 1 and one[0] in want
            assert (int(firsts[k]), int(first_d[k])) in want
        else:
            assert one == [] and firsts[k] == -1 and first_d[k] == -1


@settings(max_examples=15)
@given(seed=st.integers(0, 2**32 - 1), h=st.integers(9, 16), t=st.integers(4, 14))
def test_large_distances_find_every_match_within_eight_header_flips(seed, h, t):
    """Beyond distance 8 a probe flips at most 8 header bits: unlimited probes
    find exactly the matches whose headers differ in at most 8 bits (all of
    them when t <= 8), and never a false one."""
    rng = np.random.default_rng(seed)
    stored = clustered_values(rng, 10, 300, h + 1)
    queries = clustered_values(rng, 10, 20, h + 1)
    idx = PSMIndex(distance=h, header_bits=t, model=MODEL)
    ids = idx.add(stored)
    W = _weights(rng, queries)
    qi, got_ids, got_d = idx.query_many(queries, W, first=False)
    shift = np.uint64(64 - t)
    for k, q in enumerate(queries):
        want, _ = ref_matches(stored, ids, q, h)
        reachable = [(i, d) for i, d in want
                     if bin(int((stored[i] ^ q) >> shift)).count("1") <= 8]
        got = sorted(zip(got_ids[qi == k].tolist(), got_d[qi == k].tolist()))
        assert got == reachable
        if t <= 8:
            assert got == want


@pytest.mark.parametrize("first", [False, True])
def test_crowded_buckets_give_every_match_in_probe_order(first):
    """The first buckets probed hold more matches than the search checks in
    one deferred pass (it overflows after deferring some), among unrelated
    values, some in the write buffer: the same matches as brute force, and
    PSM-F's match is the first the probe order reaches (the own bucket's
    first match in the table)."""
    rng = np.random.default_rng(3)
    q = int(rng.integers(0, 2**63)) * 2 + 1
    t = 7
    stored = np.concatenate([crowded_values(rng, q, t, 40, 200, 5),
                             rng.integers(0, 2**63, 3000, dtype=np.int64).astype(np.uint64)])
    rng.shuffle(stored)
    idx = PSMIndex(distance=6, header_bits=t, model=MODEL)   # 127 flip sets: not pipelined
    ids = np.concatenate([idx.add(stored[:4000]), idx.add(stored[4000:])])
    assert idx._n_buffered() == len(stored) - 4000     # the rest in the write buffer
    want, _ = ref_matches(stored, ids, np.uint64(q), 6)
    assert len(want) == 40 + 200 * t
    got = idx.query(q, None, first=first)
    if first:
        shift = np.uint64(64 - t)
        own = [(i, d) for i, d in want if i < 4000 and stored[i] >> shift == np.uint64(q) >> shift]
        assert got == [own[0]]
    else:
        assert sorted(got) == want


@settings(max_examples=20)
@given(seed=st.integers(0, 2**32 - 1), probes=st.integers(1, 60))
def test_precision_is_one_with_few_probes(seed, probes):
    rng = np.random.default_rng(seed)
    stored = clustered_values(rng, 30, 600, 4)
    queries = clustered_values(rng, 30, 40, 4)
    idx = PSMIndex(distance=3, max_probes=probes, model=MODEL)
    idx.add(stored)
    qi, ids, d = idx.query_many(queries, _weights(rng, queries), first=False)
    for k, i, dist in zip(qi, ids, d):
        assert bin(int(queries[k]) ^ int(stored[i])).count("1") == dist <= 3


def _doc(rng, vocab, n):
    return [f"w{x}" for x in rng.zipf(1.3, size=n) % vocab]


def test_recall_rises_with_probes_on_real_simhashes():
    """Near-duplicate pairs from real simhash computations of edited texts."""
    rng = np.random.default_rng(7)
    base_vals, var_vals, var_W = [], [], []
    while len(base_vals) < 300:
        words = _doc(rng, 5000, int(rng.integers(80, 400)))
        edited = list(words)
        for _ in range(int(rng.integers(1, 4))):
            pos = int(rng.integers(len(edited)))
            edited[pos:pos + int(rng.integers(1, 6))] = _doc(rng, 5000, 3)
        sh = [" ".join(words[i:i + 3]) for i in range(len(words) - 2)]
        se = [" ".join(edited[i:i + 3]) for i in range(len(edited) - 2)]
        (a, _), (b, Wb) = simhash(sh), simhash(se)
        if 1 <= bin(a ^ b).count("1") <= 3:
            base_vals.append(a)
            var_vals.append(b)
            var_W.append(Wb)
    noise = rng.integers(0, 2**64 - 1, size=20000, dtype=np.uint64, endpoint=True)
    stored = np.concatenate([np.array(base_vals, np.uint64), noise])
    queries = np.array(var_vals, np.uint64)
    W = np.array(var_W)
    exact = BPHSIndex(3)
    exact.add(stored)
    truth_q, truth_ids, _ = exact.query_many(queries, first=False)
    truth = set(zip(truth_q.tolist(), truth_ids.tolist()))
    assert len(truth) >= 300
    idx = PSMIndex(distance=3, header_bits=13)
    idx.add(stored)
    recalls = []
    for probes in (1, 2, 4, 8, 16, 64, 256, None):
        idx.max_probes = probes
        q, ids, _ = idx.query_many(queries, W, first=False)
        got = set(zip(q.tolist(), ids.tolist()))
        assert got <= truth                                  # precision 1.0
        recalls.append(len(got) / len(truth))
    assert recalls == sorted(recalls)
    assert recalls[-1] == 1.0
    assert recalls[0] < 0.9 < recalls[-2]  # volatility order finds most early
    # the model-picked cap reaches its target on these pairs (roughly)
    idx2 = PSMIndex(distance=3, recall=0.9, header_bits=13)
    idx2.add(stored)
    q, ids, _ = idx2.query_many(queries, W, first=False)
    assert len(set(zip(q.tolist(), ids.tolist()))) / len(truth) >= 0.8


def test_ids_and_growth():
    idx = PSMIndex(distance=2, model=MODEL)
    assert len(idx) == 0 and idx.query(123) == []
    assert idx.add(5).tolist() == [0]
    assert idx.add([7, 9], ids=np.array([100, 200], np.uint64)).tolist() == [100, 200]
    assert idx.query(7, None, first=False) == [(100, 0), (0, 1)]  # 9 is 3 away
    assert idx.query(13, None, first=False) == [(0, 1), (200, 1), (100, 2)]
    t0 = idx.header_bits
    rng = np.random.default_rng(3)
    big = rng.integers(0, 2**63, size=200000, dtype=np.uint64)
    for part in np.array_split(big, 50):
        idx.add(part)
    assert idx.header_bits > t0 and len(idx) == 200003
    assert idx.query(int(big[123456]))[0] == (123456 + 3, 0)
    assert idx.query(5) == [(0, 0)]
    assert idx.nbytes <= 1.25 * 16 * len(idx) + 4096


def test_save_load_roundtrip(tmp_path):
    rng = np.random.default_rng(5)
    stored = clustered_values(rng, 50, 3000, 3)
    idx = PSMIndex(distance=3, recall=0.95)
    idx.add(stored, ids=np.arange(3000) * 10)
    idx.add(stored[:10])  # left in the buffer: save must include it
    path = tmp_path / "idx.psm"
    idx.save(path)
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".tmp")]
    for mmap in (True, False):
        back = PSMIndex.load(path, mmap=mmap)
        assert len(back) == len(idx) and back.distance == 3
        assert back.header_bits == idx.header_bits and back.recall == 0.95
        assert back.max_probes == idx.max_probes
        assert back.model.to_dict() == idx.model.to_dict()
        for q in stored[:50]:
            assert sorted(back.query(int(q), None, first=False)) == \
                sorted(idx.query(int(q), None, first=False))
        back.add(12345)  # a loaded (read-only mapped) index still takes inserts
        assert back.query(12345)[0][1] == 0


def test_a_version_1_file_with_int64_ids_still_loads(tmp_path):
    """Version 1 stored the ids as int64: rewritten here from a version 2
    file (the same bytes but the id array and the checksums), it loads to the
    same index, and one with an id past 2**32 - 2 is refused as corrupt."""
    import struct

    from scrapy_simdup._ext import checksum
    from scrapy_simdup.index.memory import _HEAD, _pad

    idx = PSMIndex(distance=3, model=MODEL)
    stored = np.random.default_rng(3).integers(0, 2**63, 3000, dtype=np.uint64)
    idx.add(stored, ids=np.arange(3000) * 7)
    path = tmp_path / "v2.psm"
    idx.save(path)
    data = path.read_bytes()
    fields = list(_HEAD.unpack(data[:_HEAD.size]))
    n, t, mlen = fields[3], fields[4], fields[6]
    model = data[_HEAD.size:_HEAD.size + mlen]
    pos = _HEAD.size + mlen
    pos += _pad(pos)
    vals = np.frombuffer(data, np.uint64, n, pos)
    pos += 8 * n + _pad(8 * n)
    ids = np.frombuffer(data, np.uint32, n, pos)
    pos += 4 * n + _pad(4 * n)
    offsets = np.frombuffer(data, np.uint32, (1 << t) + 1, pos)

    def version_1(ids64):
        crc = 0
        for a in (vals, ids64, offsets):
            crc = checksum.crc32(memoryview(np.ascontiguousarray(a)).cast("B"), crc)
        fields[1], fields[7] = 1, crc
        head = _HEAD.pack(*fields)
        head = head[:-4] + struct.pack("<I", checksum.crc32(head[:-4] + model))
        out = head + model
        out += b"\0" * _pad(len(out))
        for a in (vals, ids64, offsets):
            b = np.ascontiguousarray(a).tobytes()
            out += b + b"\0" * _pad(len(b))
        return out

    old = tmp_path / "v1.psm"
    old.write_bytes(version_1(ids.astype(np.int64)))
    back = PSMIndex.load(old)
    assert len(back) == 3000
    for i in (0, 1234, 2999):
        assert back.query(int(stored[i]))[0] == (7 * i, 0)
    too_big = ids.astype(np.int64)
    too_big[5] = 2**32 - 1
    old.write_bytes(version_1(too_big))
    with pytest.raises(CorruptIndexError, match="ids out of range"):
        PSMIndex.load(old)


def test_corrupt_and_truncated_files(tmp_path):
    idx = PSMIndex(distance=3, model=MODEL)
    idx.add(np.arange(1, 5000, dtype=np.uint64) * 7919)
    path = tmp_path / "idx.psm"
    idx.save(path)
    data = path.read_bytes()
    cases = {
        "truncated": data[: len(data) // 2],
        "short": data[:10],
        "empty": b"",
        "magic": b"X" + data[1:],
        "flipped": data[:-1000] + bytes([data[-1000] ^ 1]) + data[-999:],
        "header": data[:20] + bytes([data[20] ^ 1]) + data[21:],
        "longer": data + b"\0" * 64,
    }
    for name, blob in cases.items():
        bad = tmp_path / f"{name}.psm"
        bad.write_bytes(blob)
        with pytest.raises(CorruptIndexError, match=str(bad.name)):
            PSMIndex.load(bad)
    assert issubclass(CorruptIndexError, ValueError)


def test_damaged_bucket_offsets_are_refused_even_without_verify(tmp_path):
    """The query loops trust the offsets: a damaged one used to read out of
    bounds (segfault) with verify=False."""
    idx = PSMIndex(distance=3, model=MODEL)
    idx.add(np.random.default_rng(0).integers(0, 2**63, 5000, dtype=np.uint64))
    path = tmp_path / "idx.psm"
    idx.save(path)
    n, t = len(idx), idx.header_bits
    data = bytearray(path.read_bytes())
    off_start = len(data) - 4 * ((1 << t) + 1) - (-(4 * ((1 << t) + 1)) % 64)
    base = np.frombuffer(bytes(data[off_start:off_start + 4 * ((1 << t) + 1)]), "<u4")
    assert base[0] == 0 and base[-1] == n          # found the offsets
    for k, value in ((10, 0x7FFFFFFF), (10, int(base[12])), (1 << (t - 1), 0)):
        bad = bytearray(data)
        bad[off_start + 4 * k:off_start + 4 * k + 4] = int(value).to_bytes(4, "little")
        target = tmp_path / "bad.psm"
        target.write_bytes(bytes(bad))
        with pytest.raises(CorruptIndexError, match="bucket"):
            PSMIndex.load(target, verify=False)


@pytest.mark.parametrize("kwargs, word", [
    (dict(distance=-1), "distance"), (dict(distance=25), "distance"),
    (dict(header_bits=0), "header_bits"), (dict(header_bits=31), "header_bits"),
    (dict(max_probes=0), "max_probes"), (dict(recall=0.0), "recall"),
    (dict(recall=1.5), "recall"), (dict(recall=0.9, max_probes=3), "recall"),
])
def test_bad_constructor_arguments(kwargs, word):
    with pytest.raises(ValueError, match=word):
        PSMIndex(**kwargs)


def test_bad_query_arguments():
    idx = PSMIndex(model=MODEL)
    idx.add([1, 2, 3])
    for W in (np.zeros(63), np.zeros((2, 64)), [1.0] * 65):
        with pytest.raises(ValueError, match="W"):
            idx.query(1, W)
    Wn = np.zeros(64)
    Wn[3] = np.nan
    with pytest.raises(ValueError, match="W"):
        idx.query(1, Wn)
    with pytest.raises(ValueError, match="W"):
        idx.query_many([1, 2], np.zeros((3, 64)))
    Wm = np.ones((20, 64))
    Wm[13, 5] = np.inf
    for probes in (5, 500):  # pipelined and per-query loops
        idx.max_probes = probes
        with pytest.raises(ValueError, match=r"W\[13\]"):
            idx.query_many(np.arange(20), Wm)
    with pytest.raises(ValueError, match="value"):
        idx.query(-1)
    with pytest.raises(ValueError, match="value"):
        idx.query(1 << 64)
    with pytest.raises(ValueError, match="values"):
        idx.add(-5)
    with pytest.raises(ValueError, match="ids"):
        idx.add([1, 2], ids=[1])
    with pytest.raises(TypeError, match="values"):
        idx.add(np.array([1.5]))
    # a float or a bool would be truncated: refused like in BPHSIndex
    for value in (1.9, True, float(2**60 + 1)):
        with pytest.raises(ValueError, match="value"):
            idx.query(value)
    assert idx.query(np.uint64(1), first=False) == idx.query(1, first=False) != []
    # -1 is query_many's "no match": not an id
    with pytest.raises(ValueError, match="ids must be >= 0"):
        idx.add([7], ids=[-1])
    # the table keeps ids in 4 bytes
    with pytest.raises(ValueError, match=r"below 2\*\*32 - 1"):
        idx.add([7], ids=[2**32 - 1])
    assert len(idx) == 3
    for probes in (2.5, "7", True):
        with pytest.raises(ValueError, match="max_probes"):
            idx.max_probes = probes
    idx.max_probes = 2**70                     # more than every flip set: every flip set
    assert idx.query(1, [0.5] * 64, first=False) == [(0, 0), (2, 1), (1, 2)]
    with pytest.raises(TypeError, match="tables"):
        BPHSIndex(3, tables="4")
    assert idx.query(1, [0.5] * 64, first=False) == [(0, 0), (2, 1), (1, 2)]


@pytest.mark.parametrize("t", [None, 6, 9])
@pytest.mark.parametrize("id_bits", [5, 12, 20, 32])
def test_a_packed_table_answers_as_an_unpacked_one(t, id_bits):
    """A packed table keeps ids' low bits in its keys' header bits and the
    rest in 0, 1, 2 or 4 bytes beside them (by the largest id): through adds,
    the write buffer and merges it answers every query as brute force and as
    an unpacked table with the same entries, and gives the same arrays back."""
    rng = np.random.default_rng(id_bits * 100 + (t or 0))
    h = 4
    stored = clustered_values(rng, 40, 1500, h + 1)
    top = min(2**id_bits, 2**32 - 1) - 1
    ids = rng.integers(0, top, size=len(stored), endpoint=True)
    ids[len(ids) // 2] = top          # the widest id, added in the middle
    queries = clustered_values(rng, 40, 40, h + 1)
    W = _weights(rng, queries)
    packed, plain = (PSMIndex(distance=h, header_bits=t, model=MODEL) for _ in range(2))
    packed._set_packed()
    for part in np.array_split(np.arange(len(stored)), 5):
        for idx in (packed, plain):
            idx.add(stored[part], ids=ids[part].astype(np.uint64))
        assert packed._arrays()[0].tolist() == plain._arrays()[0].tolist()
        assert packed._arrays()[1].tolist() == plain._arrays()[1].tolist()
    packed._merge()
    plain._merge()
    for k, q in enumerate(queries):
        want, _ = ref_matches(stored, ids, q, h)
        assert sorted(packed.query(int(q), W[k], first=False)) == want
        assert sorted(plain.query(int(q), W[k], first=False)) == want
    a, b = packed.query_many(queries, W, first=False), plain.query_many(queries, W, first=False)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    for x, y in zip(packed._main_arrays(), plain._main_arrays()):
        np.testing.assert_array_equal(x, y)
    rest = max(0, id_bits - packed.header_bits)        # id bits beside the key
    width = 0 if rest == 0 else 1 if rest <= 8 else 2 if rest <= 16 else 4
    assert packed.nbytes - plain.nbytes == len(stored) * (width - 4)


def test_a_table_is_packed_before_anything_is_added():
    idx = PSMIndex(distance=3)
    idx.add(5)
    with pytest.raises(ValueError, match="packed before"):
        idx._set_packed()
