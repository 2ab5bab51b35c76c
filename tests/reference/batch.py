"""Pure Python/NumPy references for the compiled batch scan (``_ext/batchjoin.pyx``)."""
from __future__ import annotations

import itertools

import numpy as np


def popcount(x: int) -> int:
    return bin(int(x)).count("1")


def bucket_offsets(sorted_values, t: int) -> np.ndarray:
    headers = np.asarray(sorted_values, dtype=np.uint64) >> np.uint64(64 - t)
    return np.searchsorted(headers, np.arange((1 << t) + 1, dtype=np.uint64), side="left").astype(np.int64)


def matches(chunk, t, q_values, probes, nprobes, h, active):
    """Every (qi, chunk index, distance) PSM finds: the element's own header
    bucket plus its listed flipped headers, entries within distance h."""
    shift = 64 - t
    out = set()
    headers = [int(y) >> shift for y in chunk]
    for i, x in enumerate(q_values):
        if not active[i]:
            continue
        x = int(x)
        wanted = {x >> shift} | {(x ^ int(probes[i][p])) >> shift for p in range(nprobes[i])}
        for j, y in enumerate(chunk):
            if headers[j] in wanted:
                d = popcount(x ^ int(y))
                if d <= h:
                    out.add((i, j, d))
    return out


def top_flip_sets(lw_row, h: int, k: int):
    """Scores (sum of log-odds) of the k most likely non-empty header flip sets
    of size <= h, by brute force over all sets, best first."""
    t = len(lw_row)
    scores = []
    for size in range(1, h + 1):
        for combo in itertools.combinations(range(t), size):
            scores.append(sum(lw_row[c] for c in combo))
    scores.sort(reverse=True)
    return scores[:k]


def mask_score(mask: int, lw_row) -> float:
    """Sum of log-odds of the header bits set in ``mask`` (column c = bit 63 - c)."""
    return sum(lw_row[c] for c in range(len(lw_row)) if (mask >> (63 - c)) & 1)


def ordered_flip_masks(int_lw_row, h: int, k: int):
    """The ``k`` first non-empty flip sets of a row of *integer* log-odds
    (column c = bit 63 - c) in the VOSH order, by brute force: bits ranked
    by log-odds (descending, ties by column), sets ordered by key
    (descending), then size, then their ranks lexicographically. Integer
    keys are exact, so this order is the one both compiled paths give."""
    t = len(int_lw_row)
    col = sorted(range(t), key=lambda c: (-int(int_lw_row[c]), c))   # rank -> column
    sets = [S for size in range(1, min(h, t) + 1) for S in itertools.combinations(range(t), size)]
    sets.sort(key=lambda S: (-sum(int(int_lw_row[col[r]]) for r in S), len(S), S))
    return [sum(1 << (63 - col[r]) for r in S) for S in sets[:k]]


def always_ahead(S, T) -> bool:
    """Is rank set T ahead of rank set S in the VOSH order for every
    non-increasing log-odds <= 0? (T no larger than S, and T's sorted ranks
    each <= the matching one of S's largest len(T).)"""
    return T != S and len(T) <= len(S) and all(a <= b for a, b in zip(T, S[len(S) - len(T):]))
