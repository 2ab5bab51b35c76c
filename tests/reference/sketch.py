"""Pure Python/NumPy references of the verification sketch (``_ext/_sketch.h``)
and of the verified match rule (``index/verified.py``)."""
from __future__ import annotations

import numpy as np

BINS = 32
SALT = 0x9F1D2C3B4A596877
DENSIFY = 0x5851F42D4C957F2D
KEY2_XOR = 0x243F6A8885A308D3
M64 = (1 << 64) - 1


def fmix64_int(k: int) -> int:
    """murmur3's 64-bit finaliser on a Python int."""
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & M64
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & M64
    k ^= k >> 33
    return k


def sketch(hashes) -> bytes:
    """One-permutation MinHash, 32 bins, optimal densification, low 8 bits."""
    empty = None
    m = [empty] * BINS
    for h in (int(x) for x in hashes):
        x = fmix64_int(h ^ SALT)
        b, v = x >> 59, x & ((1 << 59) - 1)
        if m[b] is None or v < m[b]:
            m[b] = v
    out = []
    for e in range(BINS):
        v = m[e]
        if v is None:
            v = 0
            for i in range(64):
                s = fmix64_int((DENSIFY + 64 * e + i) & M64) % BINS
                if m[s] is not None:
                    v = m[s]
                    break
        out.append(v & 0xFF)
    return bytes(out)


def matches(a: bytes, b: bytes) -> int:
    return int((np.frombuffer(a, np.uint8) == np.frombuffer(b, np.uint8)).sum())


def needed(min_similarity: float) -> int:
    """Smallest count m of equal bins whose estimate (m/32 - 1/256)/(1 - 1/256) >= J."""
    if min_similarity <= 0:
        return 0
    c = 1 / 256
    return next(m for m in range(BINS + 1) if (m / BINS - c) / (1 - c) >= min_similarity - 1e-12)


def verified_matches(query, stored, distance: int, min_similarity: float, bands: int = 0):
    """Every stored page (index into ``stored``) that is a verified match of
    ``query``, best first: within ``distance`` on either key, the two
    distances adding up to at most ``distance + 26``, enough equal bins; with
    ``bands``, also a page equal on one of the first ``bands`` pairs of bins
    whose two distances add up to at most ``distance + 34``, with one equal
    bin more.
    Pages are ``(value, value2, sketch)`` tuples."""
    need = needed(min_similarity)
    found = []
    for row, (v1, v2, sk) in enumerate(stored):
        d1, d2 = bin(v1 ^ query[0]).count("1"), bin(v2 ^ query[1]).count("1")
        d = min(d1, d2)
        m = matches(query[2], sk)
        banded = any(sk[2 * b: 2 * b + 2] == query[2][2 * b: 2 * b + 2] for b in range(bands))
        if (m >= need and d <= distance and d1 + d2 <= distance + 26) \
                or (m >= need + 1 and banded and d1 + d2 <= distance + 34):
            found.append((-m, d, row))
    return [row for _, _, row in sorted(found)]


def band_matches(stored, query, bands, pair_limit, needed, exclude=-1):
    """Every stored ``(value, value2, sketch)`` (by row) that agrees with
    ``query`` on one of the first ``bands`` pairs of bins (2b, 2b + 1), whose
    two key distances add up to at most ``pair_limit`` and whose sketch
    agrees in at least ``needed`` bins: sorted ``[(row, agree, min distance)]``."""
    qv, qv2, qs = query
    out = []
    for row, (v, v2, s) in enumerate(stored):
        if row == exclude:
            continue
        if not any(s[2 * b] == qs[2 * b] and s[2 * b + 1] == qs[2 * b + 1]
                   for b in range(bands)):
            continue
        d1, d2 = bin(v ^ qv).count("1"), bin(v2 ^ qv2).count("1")
        agree = sum(a == b for a, b in zip(s, qs))
        if d1 + d2 <= pair_limit and agree >= needed:
            out.append((row, agree, min(d1, d2)))
    return out
