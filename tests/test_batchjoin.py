"""The compiled batch join (_ext/batchjoin.pyx) against its reference (tests/reference/batch.py)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scrapy_simdup._ext import batchjoin
from tests.reference.batch import (
    always_ahead,
    bucket_offsets,
    mask_score,
    matches,
    ordered_flip_masks,
    popcount,
    top_flip_sets,
)

U64 = st.integers(0, 2**64 - 1)


def _near(base, rng, max_flips=4):
    out = []
    for b in base:
        x = int(b)
        for bit in rng.choice(64, size=int(rng.integers(0, max_flips + 1)), replace=False):
            x ^= 1 << int(bit)
        out.append(x)
    return np.array(out, dtype=np.uint64)


@st.composite
def batch_case(draw):
    t = draw(st.integers(1, 8))
    h = draw(st.integers(0, 4))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    n = draw(st.integers(0, 60))
    m = draw(st.integers(1, 40))
    chunk = np.sort(rng.integers(0, 2**64, n, dtype=np.uint64))
    # queries: some near a chunk element, some random
    q = rng.integers(0, 2**64, m, dtype=np.uint64)
    if n:
        near = _near(chunk[rng.integers(0, n, m)], rng)
        pick = rng.random(m) < 0.7
        q[pick] = near[pick]
    k = draw(st.integers(0, 6))
    probes = np.zeros((m, k), dtype=np.uint64)
    for i in range(m):
        for p in range(k):
            bits = rng.choice(t, size=int(rng.integers(1, min(h, t) + 1)) if h else 1, replace=False)
            probes[i, p] = sum(1 << (63 - int(b)) for b in bits)
    nprobes = rng.integers(0, k + 1, m).astype(np.int32)
    active = (rng.random(m) < 0.8).astype(np.uint8)
    return chunk, t, q, probes, nprobes, h, active


@settings(max_examples=150)
@given(batch_case())
def test_scan_and_join_equal_reference(case):
    chunk, t, q, probes, nprobes, h, active = case
    offsets = batchjoin.bucket_offsets(chunk, t)
    assert np.array_equal(offsets, bucket_offsets(chunk, t))
    want = matches(chunk, t, q, probes, nprobes, h, active)
    got = batchjoin.scan_chunk(chunk, offsets, t, q, probes, nprobes, h, active.copy(), False)
    assert set(zip(*(a.tolist() for a in got))) == want
    po, pl, pi = batchjoin.probe_table(q, probes, nprobes, t)
    # the same table from uint32 masks (top 32 bits), as merge builds it
    po32, pl32, pi32 = batchjoin.probe_table(q, (probes >> np.uint64(32)).astype(np.uint32),
                                              nprobes, t)
    assert np.array_equal(po32, po) and np.array_equal(pl32, pl) and np.array_equal(pi32, pi)
    # and from uint16 masks of the header bits alone (t <= 16)
    po16, pl16, pi16 = batchjoin.probe_table(
        q, (probes >> np.uint64(64 - t)).astype(np.uint16), nprobes, t)
    assert np.array_equal(po16, po) and np.array_equal(pl16, pl) and np.array_equal(pi16, pi)
    elems = pi.astype(np.int64)
    assert np.array_equal(pl, (q[elems] & np.uint64(0xFFFFFFFF)).astype(np.uint32))
    for b in range(len(po) - 1):       # every element listed under each header it probes
        for e in elems[po[b]:po[b + 1]]:
            x = int(q[e])
            assert b in {x >> (64 - t)} | {(x ^ int(probes[e][p])) >> (64 - t)
                                            for p in range(nprobes[e])}
    assert len(pi) == len(pl) == len(q) + int(nprobes.sum())
    # without the low bits: the same table, and the join gathers every bucket
    pon, pln, pin = batchjoin.probe_table(q, probes, nprobes, t, low_bits=False)
    assert np.array_equal(pon, po) and np.array_equal(pin, pi) and len(pln) == 0
    try:
        for level in JOIN_KERNELS:
            batchjoin.join_kernel(level)
            for gather in (-1, 0, 1):
                got = batchjoin.join_chunk(chunk, offsets, po, pl, pi, q, h, active.copy(), False,
                                           gather=gather)
                assert set(zip(*(a.tolist() for a in got))) == want, (level, gather)
                gathered = batchjoin.join_chunk(chunk, offsets, po, pl, pi, q, h, active.copy(),
                                                False, gather=1)
                got = batchjoin.join_chunk(chunk, offsets, pon, pln, pin, q, h, active.copy(),
                                           False, gather=gather)
                assert all(np.array_equal(a, b) for a, b in zip(got, gathered)), (level, gather)
    finally:
        batchjoin.join_kernel()
    # a table in runs by flipped header bits (run r: threshold h - r on the
    # low bits): the same matches, each entry in the run of its flip count
    for runs in (2, h + 1, 9):
        pr, prl, pri = batchjoin.probe_table(q, probes, nprobes, t, runs=runs)
        assert len(pr) == (1 << t) * runs + 1 and len(pri) == len(pi)
        for key in range(len(pr) - 1):
            b, r = divmod(key, runs)
            for e in pri[pr[key]:pr[key + 1]]:
                x = int(q[e])
                flips = [bin(int(probes[e][p]) >> (64 - t)).count("1") for p in range(nprobes[e])
                         if (x ^ int(probes[e][p])) >> (64 - t) == b]
                if x >> (64 - t) == b:
                    flips.append(0)
                assert min(r, runs - 1) in [min(f, runs - 1) for f in flips]
        for gather in (0, 1):
            got = batchjoin.join_chunk(chunk, offsets, pr, prl, pri, q, h, active.copy(), False,
                                       gather=gather)
            assert set(zip(*(a.tolist() for a in got))) == want, (runs, gather)
    # with sketches: the matches whose sketches agree in `needed` bytes, with
    # their equal bytes; first-only drops an element at a verified match only
    rng = np.random.default_rng(len(q) * 7 + len(chunk))
    q_sk = rng.integers(0, 4, (len(q), 32), dtype=np.uint8)
    c_sk = rng.integers(0, 4, (len(chunk), 32), dtype=np.uint8)
    for needed in (0, 8, 12):
        agree = {(i, j): int((q_sk[i] == c_sk[j]).sum()) for i, j, _ in want}
        verified = {(i, j, d, agree[i, j]) for i, j, d in want if agree[i, j] >= needed}
        for level in JOIN_KERNELS:
            batchjoin.join_kernel(level)
            got = batchjoin.join_chunk(chunk, offsets, po, pl, pi, q, h, active.copy(), False,
                                       q_sk, c_sk, needed)
            assert set(zip(*(a.tolist() for a in got))) == verified, level
        batchjoin.join_kernel()
        # first-only keeps the first verified match in the join's order: the
        # gathered sweep (full values) visits candidates in the same order
        for table in ((po, pl, pi), batchjoin.probe_table(q, probes, nprobes, t, runs=h + 1)):
            got = [batchjoin.join_chunk(chunk, offsets, *table, q, h, active.copy(), True,
                                        q_sk, c_sk, needed, gather=gather) for gather in (0, 1)]
            assert all(np.array_equal(a, b) for a, b in zip(*got))
        act = active.copy()
        qi, yi, dd, aa = batchjoin.join_chunk(chunk, offsets, po, pl, pi, q, h, act, True,
                                              q_sk, c_sk, needed)
        assert set(qi.tolist()) == {i for i, _, _, _ in verified} and len(set(qi.tolist())) == len(qi)
        assert set(zip(qi.tolist(), yi.tolist(), dd.tolist(), aa.tolist())) <= verified
        assert [i for i in range(len(q)) if active[i] and not act[i]] == sorted(qi.tolist())
        ai = np.array([i for i, _, _ in want], dtype=np.int64)
        aj = np.array([j for _, j, _ in want], dtype=np.int64)
        assert batchjoin.sketch_agree(q_sk, ai, c_sk, aj).tolist() == [
            agree[i, j] for i, j in zip(ai.tolist(), aj.tolist())]
    # first-only: one match per element that has any, and it is a real match
    for fn in ("scan", "join"):
        act = active.copy()
        if fn == "scan":
            qi, yi, dd = batchjoin.scan_chunk(chunk, offsets, t, q, probes, nprobes, h, act, True)
        else:
            qi, yi, dd = batchjoin.join_chunk(chunk, offsets, po, pl, pi, q, h, act, True)
        assert len(set(qi.tolist())) == len(qi)
        assert set(qi.tolist()) == {i for i, _, _ in want}
        assert {(a, b, c) for a, b, c in zip(qi.tolist(), yi.tolist(), dd.tolist())} <= want
        assert all(act[i] == 0 for i in qi.tolist())
    # compaction keeps exactly the active elements, in header order
    act = (np.random.default_rng(len(q)).random(len(q)) < 0.5).astype(np.uint8)
    po2, pl2, pi2 = po.copy(), pl.copy(), pi.copy()
    n = batchjoin.compact_probe_table(po2, pl2, pi2, act)
    for b in range(len(po) - 1):
        kept = [j for j in range(po[b], po[b + 1]) if act[pi[j]]]
        assert pi2[po2[b]:po2[b + 1]].tolist() == pi[kept].tolist()
        assert pl2[po2[b]:po2[b + 1]].tolist() == pl[kept].tolist()
    assert po2[-1] == n
    # and a table without its low bits compacts its entries the same way
    pon, pln, pin = batchjoin.probe_table(q, probes, nprobes, t, low_bits=False)
    assert batchjoin.compact_probe_table(pon, pln, pin, act) == n
    assert np.array_equal(pon, po2) and np.array_equal(pin[:n], pi2[:n])


# every candidate kernel this CPU has (2 AVX-512, 1 AVX2, 0 scalar)
JOIN_KERNELS = list(range(batchjoin.join_kernel() + 1))


@pytest.mark.parametrize("level", JOIN_KERNELS)
def test_join_kernels_find_every_candidate(level):
    """The SIMD sweeps against brute force: every bucket length (tails of
    every size), 1-19 chunk values per bucket (the kernels take them four or
    eight at a time), every distance, and lanes past the end never counted (masked
    loads, scalar tails)."""
    rng = np.random.default_rng(level)
    assert batchjoin.join_kernel(level) == level
    try:
        for trial in range(400):
            n = int(rng.integers(0, 70))
            ys = rng.integers(0, 2**32, int(rng.integers(1, 20)), dtype=np.uint64)
            low = rng.integers(0, 2**32, n, dtype=np.uint64)
            for j in np.flatnonzero(rng.random(n) < 0.3):   # some within a few bits of a y
                v = int(rng.choice(ys))
                for bit in rng.choice(32, size=int(rng.integers(0, 5)), replace=False):
                    v ^= 1 << int(bit)
                low[j] = v
            h = int(rng.integers(0, 6)) if trial % 10 else int(rng.choice([32, 40, 64]))
            q = low.copy()                   # full values = low bits: distance = low distance
            coff = np.array([0, len(ys)], dtype=np.int64)
            poff = np.array([0, n], dtype=np.int64)
            idx = np.arange(n, dtype=np.uint32)
            qi, yi, dd = batchjoin.join_chunk(ys, coff, poff, low.astype(np.uint32), idx, q, h,
                                               np.ones(n, np.uint8), False, gather=0)
            want = {(e, j, bin(int(low[e]) ^ int(ys[j])).count("1"))
                    for e in range(n) for j in range(len(ys))
                    if bin(int(low[e]) ^ int(ys[j])).count("1") <= h}
            got = list(zip(qi.tolist(), yi.tolist(), dd.tolist()))
            assert len(got) == len(set(got)) and set(got) == want, (trial, n, len(ys), h)
    finally:
        batchjoin.join_kernel()


@pytest.mark.parametrize("level", JOIN_KERNELS)
def test_sweeps_find_exactly_the_candidates(level):
    """The low-bit and full-value sweeps' candidate sets against brute force:
    no candidate missed, none too many (the join's check would hide those),
    in every slot and lane: a value planted equal to each chunk value in
    turn, at every position of a block, then random values near them."""
    rng = np.random.default_rng(200 + level)
    assert batchjoin.join_kernel(level) == level
    try:
        cases = []
        ys = rng.integers(0, 2**64, 8, dtype=np.uint64)
        for j in range(8):              # every slot in every lane, exactly
            for lane in range(40):
                v = rng.integers(0, 2**64, 40, dtype=np.uint64) ^ np.uint64(2**63)
                v[lane] = ys[j]
                cases.append((ys, v, 0))
        for _ in range(300):
            ys = rng.integers(0, 2**64, int(rng.integers(1, 20)), dtype=np.uint64)
            v = rng.integers(0, 2**64, int(rng.integers(0, 70)), dtype=np.uint64)
            for e in np.flatnonzero(rng.random(len(v)) < 0.4):
                x = int(rng.choice(ys))
                for bit in rng.choice(64, size=int(rng.integers(0, 30)), replace=False):
                    x ^= 1 << int(bit)
                v[e] = x
            cases.append((ys, v, int(rng.choice([0, 2, 5, 9, 16, 22, 31, 40, 64]))))
        for ys, v, h in cases:
            for full, mask in ((False, 0xFFFFFFFF), (True, 2**64 - 1)):
                got = batchjoin.sweep_candidates(ys, v, h, full)
                want = {(e, j) for e in range(len(v)) for j in range(len(ys))
                        if bin((int(v[e]) ^ int(ys[j])) & mask).count("1") <= h}
                assert len(got) == len(set(got)) and set(got) == want, (len(v), len(ys), h, full)
    finally:
        batchjoin.join_kernel()


@pytest.mark.parametrize("level", JOIN_KERNELS)
def test_gathered_sweeps_find_every_pair_within_the_distance(level):
    """The full-value sweeps (a bucket's values gathered, as at a wide
    radius) against brute force on the full 64-bit distance, for every
    kernel, bucket length and distance up to 64, in runs; and in the same
    order as the low-bit sweeps: PSM-F's first matches are the same."""
    rng = np.random.default_rng(100 + level)
    assert batchjoin.join_kernel(level) == level
    try:
        for trial in range(300):
            n = int(rng.integers(0, 70))
            ys = np.sort(rng.integers(0, 2**64, int(rng.integers(1, 20)), dtype=np.uint64))
            q = rng.integers(0, 2**64, n, dtype=np.uint64)
            for j in np.flatnonzero(rng.random(n) < 0.5):   # some near a y, anywhere in 64 bits
                v = int(rng.choice(ys))
                for bit in rng.choice(64, size=int(rng.integers(0, 30)), replace=False):
                    v ^= 1 << int(bit)
                q[j] = v
            h = int(rng.choice([0, 3, 9, 16, 22, 28, 32, 40, 64]))
            runs = int(rng.integers(1, 4))
            coff = np.array([0, len(ys)], dtype=np.int64)
            # one bucket (t = 0 header bits) split into runs of any sizes
            cuts = np.sort(rng.integers(0, n + 1, runs - 1))
            poff = np.concatenate([[0], cuts, [n]]).astype(np.int64)
            low = (q & np.uint64(0xFFFFFFFF)).astype(np.uint32)
            idx = rng.permutation(n).astype(np.uint32)      # entries name elements in any order
            q_of = q[idx.astype(np.int64)]
            low = low[idx.astype(np.int64)]
            active = np.ones(n, np.uint8)
            run = np.searchsorted(poff, np.arange(n), side="right") - 1
            # (a run r > h is skipped: its probes flipped more header bits than h)
            want = {(int(idx[e]), j, bin(int(q_of[e]) ^ int(ys[j])).count("1"))
                    for e in range(n) for j in range(len(ys))
                    if bin(int(q_of[e]) ^ int(ys[j])).count("1") <= h and run[e] <= h}
            qi, yi, dd = batchjoin.join_chunk(ys, coff, poff, low, idx, q, h, active.copy(),
                                               False, gather=1)
            got = list(zip(qi.tolist(), yi.tolist(), dd.tolist()))
            assert len(got) == len(set(got)) and set(got) == want, (trial, n, len(ys), h)
            # (join_gather sets the mode of calls that give none)
            assert batchjoin.join_gather(1) == 1
            try:
                again = batchjoin.join_chunk(ys, coff, poff, low, idx, q, h, active.copy(), False)
            finally:
                batchjoin.join_gather()
            assert all(np.array_equal(x, y) for x, y in zip(again, (qi, yi, dd)))
            # the low-bit sweep finds the same, in the same order, where its
            # threshold is h (runs here are not header flips, so not h - r)
            if runs == 1:
                for first in (False, True):
                    a, b = (batchjoin.join_chunk(ys, coff, poff, low, idx, q, h, active.copy(),
                                                 first, gather=gather) for gather in (0, 1))
                    assert all(np.array_equal(x, y) for x, y in zip(a, b)), (trial, first)
    finally:
        batchjoin.join_kernel()


@pytest.mark.parametrize("level", JOIN_KERNELS)
def test_the_pair_rule_in_the_join_is_brute_force_on_both_keys(level):
    """With both sides' other keys, a pair is found when it is within h on the
    key and its two distances add up to at most the limit: against brute
    force, for every kernel, bucket length and limit, gathered or not (in
    the same order), with and without sketches."""
    rng = np.random.default_rng(300 + level)
    assert batchjoin.join_kernel(level) == level
    try:
        for trial in range(200):
            n = int(rng.integers(0, 60))
            ny = int(rng.integers(1, 20))
            ys = np.sort(rng.integers(0, 2**64, ny, dtype=np.uint64))
            yp = rng.integers(0, 2**64, ny, dtype=np.uint64)
            q = rng.integers(0, 2**64, n, dtype=np.uint64)
            qp = rng.integers(0, 2**64, n, dtype=np.uint64)
            for j in np.flatnonzero(rng.random(n) < 0.6):   # near a chunk page on both keys
                c = int(rng.integers(ny))
                v, w = int(ys[c]), int(yp[c])
                for bit in rng.choice(64, size=int(rng.integers(0, 30)), replace=False):
                    v ^= 1 << int(bit)
                for bit in rng.choice(64, size=int(rng.integers(0, 40)), replace=False):
                    w ^= 1 << int(bit)
                q[j], qp[j] = v, w
            h = int(rng.choice([3, 16, 22, 28]))
            limit = int(rng.choice([h, 40, 48, 60, 128]))
            coff = np.array([0, ny], dtype=np.int64)
            poff = np.array([0, n], dtype=np.int64)
            idx = rng.permutation(n).astype(np.uint32)
            low = (q[idx.astype(np.int64)] & np.uint64(0xFFFFFFFF)).astype(np.uint32)
            q_sk = rng.integers(0, 4, (n, 32), dtype=np.uint8)
            c_sk = rng.integers(0, 4, (ny, 32), dtype=np.uint8)

            def dist(a, b):
                return bin(int(a) ^ int(b)).count("1")
            within = {(i, j) for i in range(n) for j in range(ny)
                      if dist(q[i], ys[j]) <= h and dist(q[i], ys[j]) + dist(qp[i], yp[j]) <= limit}
            agree = {(i, j): int((q_sk[i] == c_sk[j]).sum()) for i, j in within}
            found = []
            for gather in (0, 1):
                qi, yi, dd = batchjoin.join_chunk(ys, coff, poff, low, idx, q, h,
                                                  np.ones(n, np.uint8), False, gather=gather,
                                                  q_partner=qp, chunk_partner=yp,
                                                  pair_limit=limit)
                assert set(zip(qi.tolist(), yi.tolist())) == within, (trial, gather)
                assert dd.tolist() == [dist(q[i], ys[j]) for i, j in zip(qi, yi)]
                found.append(list(zip(qi.tolist(), yi.tolist())))
                qi, yi, dd, aa = batchjoin.join_chunk(
                    ys, coff, poff, low, idx, q, h, np.ones(n, np.uint8), False, q_sk, c_sk,
                    9, gather=gather, q_partner=qp, chunk_partner=yp, pair_limit=limit)
                assert {(i, j): a for i, j, a in zip(qi.tolist(), yi.tolist(), aa.tolist())} \
                    == {k: a for k, a in agree.items() if a >= 9}, (trial, gather)
                assert dd.tolist() == [dist(q[i], ys[j]) for i, j in zip(qi, yi)]
            assert found[0] == found[1]     # in the same order: PSM-F keeps its first match
            # a table without its low bits: gathered, the same pairs in the same order
            qi, yi, _ = batchjoin.join_chunk(ys, coff, poff, np.zeros(0, np.uint32), idx, q, h,
                                              np.ones(n, np.uint8), False, gather=0,
                                              q_partner=qp, chunk_partner=yp, pair_limit=limit)
            assert list(zip(qi.tolist(), yi.tolist())) == found[1], trial
        with pytest.raises(ValueError, match="both q_partner and chunk_partner"):
            batchjoin.join_chunk(ys, coff, poff, low, idx, q, h, np.ones(n, np.uint8), False,
                                 q_partner=qp)
        with pytest.raises(ValueError, match="pair_limit"):
            batchjoin.join_chunk(ys, coff, poff, low, idx, q, h, np.ones(n, np.uint8), False,
                                 q_partner=qp, chunk_partner=yp, pair_limit=129)
        with pytest.raises(ValueError, match="differs in length"):
            batchjoin.join_chunk(ys, coff, poff, low, idx, q, h, np.ones(n, np.uint8), False,
                                 q_partner=qp[:-1] if n else np.zeros(1, np.uint64),
                                 chunk_partner=yp)
    finally:
        batchjoin.join_kernel()


@pytest.mark.parametrize("level", JOIN_KERNELS)
def test_a_bucket_with_more_candidates_than_a_batch_finds_them_all_in_order(level):
    """Thousands of candidates in one bucket (every pair passes): the sweep
    hands them over a batch at a time, none lost, in the order of the
    low-bit sweep, whether or not each element stops at its first match."""
    rng = np.random.default_rng(77)
    assert batchjoin.join_kernel(level) == level
    try:
        n, ny = 700, 21
        ys = np.sort(rng.integers(0, 2**64, ny, dtype=np.uint64))
        yp = rng.integers(0, 2**64, ny, dtype=np.uint64)
        q = rng.integers(0, 2**64, n, dtype=np.uint64)
        qp = rng.integers(0, 2**64, n, dtype=np.uint64)
        coff = np.array([0, ny], dtype=np.int64)
        poff = np.array([0, n], dtype=np.int64)
        idx = rng.permutation(n).astype(np.uint32)
        low = (q[idx.astype(np.int64)] & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        for first in (False, True):
            runs = [batchjoin.join_chunk(ys, coff, poff, low, idx, q, 64, np.ones(n, np.uint8),
                                         first, gather=gather, q_partner=qp, chunk_partner=yp,
                                         pair_limit=128) for gather in (0, 1)]
            pairs = [list(zip(r[0].tolist(), r[1].tolist())) for r in runs]
            assert pairs[0] == pairs[1]
            assert len(pairs[1]) == (n if first else n * ny)
            assert len(set(pairs[1])) == len(pairs[1])
    finally:
        batchjoin.join_kernel()


@settings(max_examples=100)
@given(st.integers(1, 12), st.integers(1, 3), st.integers(1, 40), st.integers(0, 2**32 - 1))
def test_batch_flip_masks_are_the_most_likely_sets(t, h, k, seed):
    rng = np.random.default_rng(seed)
    lw = np.log(rng.uniform(1e-4, 0.5, size=(3, t)))
    masks, nprobes = batchjoin.batch_flip_masks(np.ascontiguousarray(lw), h, k)
    for i in range(3):
        got = [int(x) for x in masks[i, :nprobes[i]]]
        assert len(set(got)) == len(got)
        assert all(0 < popcount(x) <= h for x in got)
        assert all(x & ((1 << (64 - t)) - 1) == 0 for x in got)   # header bits only
        scores = [mask_score(x, lw[i]) for x in got]
        assert all(a >= b - 1e-9 for a, b in zip(scores, scores[1:]))
        assert np.allclose(scores, top_flip_sets(lw[i], h, k))
    # the same from quantised weights and a per-code table
    # (the cq path orders bits by code rank: a table with plateaus, equal
    # log-odds for different codes, must give the lw path's column order)
    table = np.sort(rng.uniform(-12, -0.01, 256))[::-1].copy()
    plateaus = np.round(table).copy()
    cq = rng.integers(0, 256, size=(3, t + 2)).astype(np.uint8)
    # (the cq path sums quantised log-odds: the lw path is given the same values)
    for tab in (plateaus, table):
        masks2, n2 = batchjoin.batch_flip_masks_cq(cq, tab, t, h, k)
        qtab = batchjoin.quantized_log_odds(tab).astype(np.float64)
        masks3, n3 = batchjoin.batch_flip_masks(np.ascontiguousarray(qtab[cq[:, :t]]), h, k)
        assert np.array_equal(masks2, masks3) and np.array_equal(n2, n3)
    # uint32 masks (the top 32 bits, what merge keeps) are the same sets
    masks4, n4 = batchjoin.batch_flip_masks_cq(cq, table, t, h, k, True)
    assert masks4.dtype == np.uint32 and np.array_equal(n4, n2)
    assert np.array_equal(masks4.astype(np.uint64) << np.uint64(32), masks2)
    # uint16 masks of the header bits alone
    masks5, n5 = batchjoin.batch_flip_masks_cq(cq, table, t, h, k, header16=True)
    assert masks5.dtype == np.uint16 and np.array_equal(n5, n2)
    assert np.array_equal(masks5.astype(np.uint64) << np.uint64(64 - t), masks2)


# 1: candidate ranking (if the CPU has AVX-512F), 0: VOSH
FLIP_KERNELS = list(range(batchjoin.flip_kernel() + 1))


def _flip_case(rng, trial, t):
    """A log-odds table (the real one, random, or plateaus: many exact ties)
    and three cq rows (32 columns, the in-register path, or just t + 1; every
    7th case with all codes equal)."""
    from scrapy_simdup.merge.probes import log_odds_table

    table = np.ascontiguousarray((log_odds_table(), np.sort(rng.uniform(-12, 0, 256))[::-1],
                                  np.round(np.sort(rng.uniform(-6, 0, 256))[::-1]))[trial % 3])
    cq = rng.integers(0, 256, size=(3, 32 if trial % 2 else t + 1)).astype(np.uint8)
    if trial % 7 == 0:
        cq[:] = cq[0, 0]
    return table, cq


@pytest.mark.parametrize("level", FLIP_KERNELS)
def test_cq_flip_sets_are_the_brute_force_order(level):
    """The cq path (VOSH, or the candidate ranking at h <= 3) against brute
    force over every set, order included: real, random and plateau tables
    (many exact ties, broken by size then ranks), rows of equal codes, every
    t up to 32, rows of 16+ bytes (the in-register path) and shorter ones."""
    rng = np.random.default_rng(20 + level)
    assert batchjoin.flip_kernel(level) == level
    try:
        for trial in range(600):
            t = int(rng.integers(1, 33))
            h = int(rng.integers(1, 5)) if t <= 12 else int(rng.integers(1, 4))
            k = int(rng.integers(1, 40))
            table, cq = _flip_case(rng, trial, t)
            masks, nprobes = batchjoin.batch_flip_masks_cq(cq, table, t, h, k)
            qt = batchjoin.quantized_log_odds(table)
            for i in range(3):
                want = ordered_flip_masks(qt[cq[i, :t]], h, k)
                assert [int(x) for x in masks[i, :nprobes[i]]] == want, (trial, t, h, k, i)
    finally:
        batchjoin.flip_kernel()


@pytest.mark.parametrize("t,h,k", [(4, 2, 5), (6, 3, 10), (8, 3, 16), (10, 2, 12), (7, 3, 40),
                                   (9, 5, 30), (10, 8, 60)])
def test_flip_candidates_hold_every_possible_top_k(t, h, k):
    """The candidate list is the sets with fewer than k sets always ahead
    (checked against the definition), in (size, lexicographic) order, and it
    holds the first k sets for random log-odds."""
    import itertools

    sets = [S for size in range(1, min(h, t) + 1) for S in itertools.combinations(range(t), size)]
    want = [S for S in sets if sum(always_ahead(S, T) for T in sets) < k]
    assert list(batchjoin.flip_candidates(t, h, k)) == want
    cands = set(want)
    rng = np.random.default_rng(t * 100 + k)
    for _ in range(50):
        lw = -np.sort(rng.exponential(rng.choice([0.1, 1, 10]), t))
        lw = np.round(lw * rng.choice([1, 1000]))          # some with ties
        ranked = sorted(sets, key=lambda S: (-sum(lw[r] for r in S), len(S), S))
        assert set(ranked[:k]) <= cands


@pytest.mark.parametrize("level", FLIP_KERNELS)
def test_unordered_flip_sets_are_the_same_sets(level):
    """``ordered=False`` (the merge's call; the select kernel at h > 3 when
    the CPU has it) gives each row the same sets as VOSH's first k, ties
    included, in any order: against the ordered path and brute force."""
    rng = np.random.default_rng(40 + level)
    assert batchjoin.flip_kernel(level) == level
    try:
        for trial in range(300):
            t = int(rng.integers(1, 21))
            h = int(rng.integers(1, 10))
            k = int(rng.integers(1, 120))
            table, cq = _flip_case(rng, trial, t)
            got, n_got = batchjoin.batch_flip_masks_cq(cq, table, t, h, k, ordered=False)
            want, n_want = batchjoin.batch_flip_masks_cq(cq, table, t, h, k)
            assert np.array_equal(n_got, n_want)
            qt = batchjoin.quantized_log_odds(table)
            for i in range(3):
                sets = sorted(int(x) for x in got[i, :n_got[i]])
                assert sets == sorted(int(x) for x in want[i, :n_want[i]]), (trial, t, h, k)
                if t <= 10:
                    assert sets == sorted(ordered_flip_masks(qt[cq[i, :t]], h, k)), (trial, t, h, k)
    finally:
        batchjoin.flip_kernel()


def test_bad_arguments_are_value_errors():
    v = np.zeros(4, dtype=np.uint64)
    with pytest.raises(ValueError, match="not sorted"):
        batchjoin.bucket_offsets(np.array([5, 1], dtype=np.uint64) << np.uint64(60), 4)
    with pytest.raises(ValueError, match="t must be"):
        batchjoin.bucket_offsets(v, 0)
    off = batchjoin.bucket_offsets(v, 4)
    with pytest.raises(ValueError, match="same length"):
        batchjoin.scan_chunk(v, off, 4, v, np.zeros((3, 1), np.uint64),
                              np.zeros(4, np.int32), 3, np.ones(4, np.uint8), True)
    with pytest.raises(ValueError, match="h must be"):
        batchjoin.batch_flip_masks(np.zeros((2, 4)), 25, 3)
    with pytest.raises(ValueError, match="256"):
        batchjoin.batch_flip_masks_cq(np.zeros((2, 4), np.uint8), np.zeros(5), 4, 3, 3)
    table = -np.arange(1.0, 257.0)
    cq = np.zeros((2, 4), np.uint8)
    with pytest.raises(ValueError, match="t <= 16"):
        batchjoin.batch_flip_masks_cq(np.zeros((2, 20), np.uint8), -np.arange(1.0, 257.0), 17, 3, 3,
                                       header16=True)
    with pytest.raises(ValueError, match="t <= 16"):
        batchjoin.probe_table(np.arange(4, dtype=np.uint64), np.zeros((4, 1), np.uint16),
                               np.zeros(4, np.int32), 17)
    with pytest.raises(ValueError, match="NaN"):
        batchjoin.batch_flip_masks_cq(cq, np.where(np.arange(256) == 0, np.nan, table), 4, 3, 3)
    for rows in (np.array([np.nan, 1.0]), np.array([0, 2]), np.array([-1, 0]), np.zeros((1, 1), int)):
        with pytest.raises(ValueError, match="rows"):
            batchjoin.batch_flip_masks_cq(cq, table, 4, 3, 3, rows=rows)
    m1, _ = batchjoin.batch_flip_masks_cq(cq, table, 4, 3, 3, rows=np.array([1, 1, 0]))
    assert m1.shape == (3, 3)
    q = np.arange(4, dtype=np.uint64)
    po, pl, pi = batchjoin.probe_table(q, np.zeros((4, 0), np.uint64), np.zeros(4, np.int32), 4)
    with pytest.raises(ValueError, match="differ in length"):
        batchjoin.join_chunk(v, off, po, pl, pi, q, 3, np.ones(2, np.uint8), False)
    for gather in (0, 1):
        with pytest.raises(ValueError, match="beyond"):
            batchjoin.join_chunk(v, off, po, pl, pi, q[:2], 3, np.ones(2, np.uint8), False,
                                 gather=gather)
    # a gathered bucket reads every entry's element first, so it finds one
    # beyond q_values even when that entry is no candidate
    far = np.full(4, 0x0FFF_FFFF_FFFF_FFFF, dtype=np.uint64)
    fo, fl, fi = batchjoin.probe_table(far, np.zeros((4, 0), np.uint64), np.zeros(4, np.int32), 4)
    zeros = np.zeros(4, np.uint64)
    zoff = batchjoin.bucket_offsets(zeros, 4)
    assert len(batchjoin.join_chunk(zeros, zoff, fo, fl, fi, far[:2], 3, np.ones(2, np.uint8),
                                    False, gather=0)[0]) == 0
    with pytest.raises(ValueError, match="beyond"):
        batchjoin.join_chunk(zeros, zoff, fo, fl, fi, far[:2], 3, np.ones(2, np.uint8), False,
                             gather=1)
    # offsets that decrease or point outside are refused before any read
    bad = po.copy()
    bad[1], bad[2] = bad[2] + 1, bad[2]
    with pytest.raises(ValueError, match="decrease"):
        batchjoin.join_chunk(v, off, bad, pl, pi, q, 3, np.ones(4, np.uint8), False)
    with pytest.raises(ValueError, match="out of range"):
        batchjoin.join_chunk(v[:1], off, po, pl, pi, q, 3, np.ones(4, np.uint8), False)
    with pytest.raises(ValueError, match="shorter"):
        batchjoin.join_chunk(v, off, po, pl[:2], pi[:2], q, 3, np.ones(4, np.uint8), False)
    sk = np.zeros((4, 32), np.uint8)
    with pytest.raises(ValueError, match="both"):
        batchjoin.join_chunk(v, off, po, pl, pi, q, 3, np.ones(4, np.uint8), False, sk)
    with pytest.raises(ValueError, match="gather"):
        batchjoin.join_chunk(v, off, po, pl, pi, q, 3, np.ones(4, np.uint8), False, gather=2)
    with pytest.raises(ValueError, match="gather"):
        batchjoin.join_gather(5)
    with pytest.raises(ValueError, match="q_sketch must have shape"):
        batchjoin.join_chunk(v, off, po, pl, pi, q, 3, np.ones(4, np.uint8), False, sk[:3], sk)
    with pytest.raises(ValueError, match="needed"):
        batchjoin.join_chunk(v, off, po, pl, pi, q, 3, np.ones(4, np.uint8), False, sk, sk, 33)
    with pytest.raises(ValueError, match="out of range"):
        batchjoin.sketch_agree(sk, np.array([4]), sk, np.array([0]))


def test_a_wide_radius_needs_no_low_bits():
    """``gathers_always``: where even the run of the most flipped header bits
    passes too many entries on the low bits, every bucket is gathered, so the
    merge builds its probe table without them; not at a narrow radius, nor
    when the tests force the low-bit sweep."""
    assert batchjoin.gathers_always(22, 9) and batchjoin.gathers_always(24, 9)
    assert not batchjoin.gathers_always(3, 1) and not batchjoin.gathers_always(20, 9)
    assert not batchjoin.gathers_always(4, 6)       # runs past h + 1: some run is skipped
    assert not batchjoin.gathers_always(65, 9) and not batchjoin.gathers_always(-1, 1)
    try:
        batchjoin.join_gather(0)
        assert not batchjoin.gathers_always(22, 9)
    finally:
        batchjoin.join_gather()
    # soundness: with low bits that would fail every entry, the default mode
    # still finds every pair, in the rule's worst bucket (one chunk value,
    # every entry in the run of the most flips)
    from scrapy_simdup.merge.matchers import probe_runs
    t, h = 13, 22
    runs = probe_runs(t, h)
    assert batchjoin.gathers_always(h, runs)
    rng = np.random.default_rng(5)
    y = int(rng.integers(0, 2**63))
    q = np.array([y ^ sum(1 << int(b) for b in rng.choice(64, size=int(k), replace=False))
                  for k in rng.integers(0, 30, 60)], dtype=np.uint64)
    wrong_low = (~q & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    idx = np.arange(len(q), dtype=np.uint32)
    poff = np.zeros(runs + 1, np.int64)
    poff[runs:] = len(q)
    coff = np.array([0, 1], dtype=np.int64)
    want = [i for i in range(len(q)) if bin(int(q[i]) ^ y).count("1") <= h]
    assert 0 < len(want) < len(q)
    got = batchjoin.join_chunk(np.array([y], np.uint64), coff, poff, wrong_low, idx, q, h,
                               np.ones(len(q), np.uint8), False)
    assert sorted(got[0].tolist()) == want
