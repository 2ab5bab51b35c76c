"""Brute-force references for the indexes and the VOSH flip-set order."""
from itertools import combinations

import numpy as np


def ref_matches(stored, ids, q, distance):
    """All (id, distance) with Hamming distance <= distance, sorted."""
    stored = np.asarray(stored, dtype=np.uint64)
    d = np.array([bin(int(v) ^ int(q)).count("1") for v in stored], dtype=np.int64)
    hit = np.nonzero(d <= distance)[0]
    return sorted((int(ids[i]), int(d[i])) for i in hit), d


def ref_flip_sets(p, distance):
    """Every set of 1..distance header bits (ranks into p) with its p(S),
    sorted by decreasing p(S); the empty set first."""
    p = np.asarray(p, dtype=np.float64)
    t = len(p)
    out = [((), float(np.prod(1 - p)))]
    for size in range(1, distance + 1):
        for S in combinations(range(t), size):
            inside = np.zeros(t, bool)
            inside[list(S)] = True
            out.append((S, float(np.prod(np.where(inside, p, 1 - p)))))
    out[1:] = sorted(out[1:], key=lambda x: -x[1])
    return out


def clustered_values(rng, n_base, n, max_flips):
    """Values near a few bases (0..max_flips random bit flips each)."""
    base = rng.integers(0, 2**64 - 1, size=n_base, dtype=np.uint64, endpoint=True)
    out = np.empty(n, dtype=np.uint64)
    for i in range(n):
        v = int(base[rng.integers(n_base)])
        for b in rng.choice(64, int(rng.integers(0, max_flips + 1)), replace=False):
            v ^= 1 << int(b)
        out[i] = v
    return out


def crowded_values(rng, q, t, n_own, n_each, max_flips):
    """Values within ``max_flips + 1`` bits of ``q`` that crowd the buckets a
    search probes first (header: the top ``t`` bits): ``n_own`` in ``q``'s own
    bucket and ``n_each`` in each bucket one header bit away, whatever the
    probe order among those. Only bits below the header are flipped beyond that."""
    centres = [q] * n_own + [q ^ (1 << (63 - b)) for b in range(t) for _ in range(n_each)]
    out = np.empty(len(centres), np.uint64)
    for i, centre in enumerate(centres):
        bits = rng.choice(64 - t, int(rng.integers(0, max_flips + 1)), replace=False)
        out[i] = np.uint64(centre ^ sum(1 << int(b) for b in bits))
    return out
