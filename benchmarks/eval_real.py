"""Near-duplicate quality on real labelled pages: SpotSigs stories among unrelated pages.

    .venv/bin/python benchmarks/eval_real.py [--quick]

Data, under the data root (``SIMDUP_DATA``, else ``shared/data`` beside the
checkout): ``spotsigs-dev/`` (34 stories, 1,117 gzipped pages, one folder per
story; its README.md gives the protocol) and ``distractors-dragnet/`` (1,381
unrelated gzipped pages). Every page is given as bytes to the default
``Fingerprinter()`` (``fingerprint_html`` for both keys and the sketch,
``features_html`` for the feature hashes and weights); the results are cached
per page in ``benchmarks/.cache/`` under the page's path, size and mtime and
the fingerprinter's ``version`` (``_real.py``, shared with ``eval_quality.py``).
A page the fingerprinter skips is never flagged and never matched. Every page
is stored (no index: all earlier pages are compared); ``eval_quality.py`` runs
the product's index the way a crawl fills it.

Protocol (spotsigs-dev/README.md). The page list is built in a fixed order:
the spotsigs-dev pages sorted by (folder name, file name), then the
distractors sorted by file name. It is shuffled once with
``random.Random(7).shuffle`` and the pages arrive in that order. A page is
flagged when an earlier page passes the method's rule; its match is the best
earlier page that passes (smallest distance, or highest similarity; a tie goes
to the page that arrived first), and the flag is correct when that page is of
the same folder (story). Recall = correct flags / spotsigs pages that have an
earlier page of their folder. Beside this "best match" rule every figure is
also given under the "any page" rule of ``recall_study/REPORT.md`` and
``eval_quality.py`` (correct when any earlier page of the story passes:
dropping the page loses nothing), the rule issue 19's figures were measured
with; the flags are the same, the best-match rule never counts more of them correct.
Two precisions:

* **P (mixed)**: distractor-distractor pairs are left out (as if they did not
  match), because the distractors hold real duplicates of each other
  (identical texts from one site); a distractor matched to a spotsigs page,
  or a spotsigs page matched to a distractor, is a false flag;
* **P (strict)**: every pair counts; a flagged distractor is always false.

F1 is that of P (mixed) and R. "spotsigs-only" runs the same protocol on the
spotsigs-dev list alone (1,117 pages, shuffled the same way).

Methods, all pairs (exhaustive, no index):

* ``key h <= d``: the 64-bit simhash alone (Hamming distance <= d; d = 9 was
  ``SIMDUP_DISTANCE`` before issue 19);
* ``cosine >= c``: exact cosine of the weighted feature vectors;
* ``recommended``: the design recommended by ``recall_study/REPORT.md``,
  computed here in NumPy as a reference: two 64-bit keys, today's value and a
  simhash of ``fmix64(h ^ C)`` of the same feature hashes with the same
  weights, each searched within radius 22; a candidate is verified by a
  128-bin one-permutation MinHash (optimal densification, low 8 bits per bin)
  of the feature hashes, estimated Jaccard >= 0.15 (corrected for 8-bit chance
  matches); the best match is the highest estimated Jaccard;
* ``shipped``: the same rule with what the product stores (``Fingerprinter()``'s
  ``value2`` and its 32-byte ``sketch``, ``matches_needed(min_similarity)``
  equal bytes) at the default ``SIMDUP_DISTANCE`` and ``SIMDUP_MIN_SIMILARITY``,
  every pair checked (no probe budget).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _real import (
    DIST,
    INF,
    SPOT,
    U64,
    Stream,
    cosine_matrix,
    hamming_matrix,
    real_pages,
    simhash_of,
    sketch_matrix,
)

from scrapy_simdup import Fingerprinter
from scrapy_simdup._limits import DEFAULT_DISTANCE, DEFAULT_MIN_SIMILARITY
from scrapy_simdup.fingerprint.features import fmix64
from scrapy_simdup.fingerprint.sketch import SKETCH_BYTES, matches_needed

OLD_DEFAULT = 9                    # SIMDUP_DISTANCE before issue 19
KEY_DISTANCES = (3, 6, OLD_DEFAULT, 12, 14, 16, 18, 20, 22)
COSINES = (0.3, 0.5)
# the recommended design (recall_study/REPORT.md, Q5)
REC_RADIUS = 22
REC_BINS = 128
REC_BITS = 8
REC_J = 0.15
KEY2_XOR = 0x243F6A8885A308D3      # C of key 2: fmix64(h ^ C)
OPH_SEED = 11                      # the recall study's OPH seed and salt
OPH_SALT = 0x9F1D2C3B4A596877
# issue 19's figures, spotsigs-only (P, R, F1 at h = 9; R at h = 14)
ISSUE_H9 = (0.995, 0.812, 0.894)
ISSUE_H14_R = 0.887
SPOT_ROWS = (f"key h <= {OLD_DEFAULT} ", "key h <= 14", "recommended", "shipped")


def oph_sketch(feats, valid, bins=REC_BINS, seed=OPH_SEED):
    """One-permutation MinHash, ``bins`` bins, optimal densification; uint64[n, bins] minima.

    The recall study's definition: ``fmix64(h ^ (SALT + seed))``,
    the top log2(bins) bits pick the bin, the rest is the value; an empty bin e takes
    the value of bin ``fmix64(dens[e, t]) % bins`` for the first t = 0..63 whose bin is not empty."""
    logk = bins.bit_length() - 1
    top = U64(np.iinfo(np.uint64).max)
    rng = np.random.default_rng(seed)
    dens = rng.integers(0, 2**63, size=(bins, 64), dtype=np.int64).astype(U64)
    src = (fmix64(dens.ravel()) % U64(bins)).astype(np.int64).reshape(bins, 64)
    out = np.zeros((len(feats), bins), U64)
    for i, (h, _) in enumerate(feats):
        if not valid[i]:
            continue
        x = fmix64(h ^ U64(OPH_SALT + seed))
        b = (x >> U64(64 - logk)).astype(np.int64)
        v = x & U64((1 << (64 - logk)) - 1)
        m = np.full(bins, top, U64)
        np.minimum.at(m, b, v)
        empty = m == top
        if empty.any():
            full = m.copy()
            for e in np.flatnonzero(empty):
                for s in src[e]:
                    if not empty[s]:
                        m[e] = full[s]
                        break
        out[i] = m
    return out


def match_counts(sketch, bits=REC_BITS):
    """uint8[n, n]: bins whose low ``bits`` bits agree."""
    low = (sketch & U64((1 << bits) - 1)).astype(np.uint8)
    n = low.shape[0]
    M = np.empty((n, n), np.uint8)
    for i in range(n):
        M[i] = (low == low[i]).sum(1)
    return M


def jaccard_estimate(M, bins=REC_BINS, bits=REC_BITS):
    c = 2.0 ** -bits
    return ((M / bins - c) / (1 - c)).astype(np.float32)


def methods(H1, H2, C, J, H2s, M):
    """(name, function of a Stream -> distance matrix in its order)."""
    out = []
    for h in KEY_DISTANCES:
        def key(s, h=h):
            d = s.sub(H1).astype(np.float32)
            return np.where(d <= h, d, INF)
        default = "  (the old default)" if h == OLD_DEFAULT else ""
        out.append((f"key h <= {h}{default}", key))
    for c in COSINES:
        def cos(s, c=c):
            sim = s.sub(C)
            return np.where(sim >= c - 1e-6, -sim, INF)
        out.append((f"cosine >= {c}", cos))

    def rec(s):
        gate = (s.sub(H1) <= REC_RADIUS) | (s.sub(H2) <= REC_RADIUS)
        j = s.sub(J)
        return np.where(gate & (j >= REC_J - 1e-6), -j, INF)
    out.append((f"recommended: 2 keys r <= {REC_RADIUS}, OPH {REC_BINS}x{REC_BITS}b J >= {REC_J}", rec))
    need = matches_needed(DEFAULT_MIN_SIMILARITY)

    def shipped(s):
        d = np.minimum(s.sub(H1), s.sub(H2s)).astype(np.float32)
        m = s.sub(M).astype(np.float32)
        # best first: most equal bytes, then the smaller key distance
        return np.where((d <= DEFAULT_DISTANCE) & (m >= need), -m * 128 + d, INF)
    out.append((f"shipped: 2 keys r <= {DEFAULT_DISTANCE}, sketch {SKETCH_BYTES}x8b J >= "
                f"{DEFAULT_MIN_SIMILARITY} (all pairs)", shipped))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="every 4th story and every 4th distractor (figures not comparable)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    print(f"# run {time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime())} on {os.cpu_count()} shared cores")
    P, folder_names, t_fp, n_fp = real_pages(args.quick)
    folder, spot, valid, values, feats = P.folder, P.spot, P.valid, P.values, P.feats
    print(f"data: {SPOT.name}/ {int(spot.sum())} pages in {len(folder_names)} stories, "
          f"{DIST.name}/ {int((~spot).sum())} pages; skipped by the fingerprinter: "
          f"{int((~valid & spot).sum())} spotsigs, {int((~valid & ~spot).sum())} distractors"
          + ("  [--quick subset]" if args.quick else ""))
    print(f"fingerprints: {Fingerprinter().version}, "
          f"{n_fp} pages fingerprinted in {t_fp:.1f}s, {P.n - n_fp} from benchmarks/.cache/")

    t1 = time.perf_counter()
    check = simhash_of([f for f, ok in zip(feats, valid) if ok])
    same_key = int((check == values[valid]).sum())
    print(f"check: the simhash of features_html equals fingerprint_html's value on "
          f"{same_key} of {int(valid.sum())} pages")
    H1 = hamming_matrix(values)
    key2 = simhash_of(feats, KEY2_XOR)
    print(f"check: the second key of the features equals fingerprint_html's value2 on "
          f"{int((key2[valid] == P.values2[valid]).sum())} of {int(valid.sum())} pages")
    H2 = hamming_matrix(np.where(valid, key2, U64(0)))
    H2s = hamming_matrix(P.values2)
    M = sketch_matrix(P.sketches)
    C = cosine_matrix(feats, valid)
    J = jaccard_estimate(match_counts(oph_sketch(feats, valid)))
    t_mat = time.perf_counter() - t1

    t2 = time.perf_counter()
    mixed = Stream(np.arange(P.n), folder, valid)
    only = Stream(np.flatnonzero(spot), folder, valid)
    meths = methods(H1, H2, C, J, H2s, M)
    rows = {name: mixed.score(fn(mixed)) for name, fn in meths}
    spot_rows = {name: only.score(fn(only)) for name, fn in meths if name.startswith(SPOT_ROWS)}
    t_proto = time.perf_counter() - t2

    print(f"\n== spotsigs-dev + distractors: {mixed.n} pages in one stream (random.Random(7).shuffle), "
          f"{mixed.n_true} spotsigs pages with an earlier page of their story")
    print("   best match: a flag is correct when the best earlier match is of the page's story (this benchmark's rule)")
    print("   any page:   correct when any earlier page of its story passes (recall_study/REPORT.md's rule)")
    print("   P (mixed): distractor-distractor pairs left out; P (strict): every pair counts; F1 of P (mixed) and R")
    w = max(len(n) for n in rows)
    cols = "P (mixed) P (strict)      R     F1"
    print(f"{'':<{w}} | {'best match':^{len(cols)}} | {'any page':^{len(cols)}} |")
    print(f"{'method':<{w}} | {cols} | {cols} | flags (mixed, strict)")
    for name, sc in rows.items():
        b, a = sc["best"], sc["any"]
        print(f"{name:<{w}} | {b.p_mixed:9.3f} {b.p_strict:10.3f} {b.r:6.3f} {b.f1:6.3f} | "
              f"{a.p_mixed:9.3f} {a.p_strict:10.3f} {a.r:6.3f} {a.f1:6.3f} | {b.flags_mixed:6d} {b.flags_strict:6d}")
    base_name = next(n for n in rows if n.startswith(f"key h <= {OLD_DEFAULT} "))
    print()
    for name, sc in rows.items():
        if not name.startswith(("recommended", "shipped", "cosine", "key h <= 14")):
            continue
        label = name.split(":")[0] + (" design" if name.startswith(("recommended", "shipped")) else "")
        b, b0 = sc["best"], rows[base_name]["best"]
        a, a0 = sc["any"], rows[base_name]["any"]
        print(f"{label} vs the old default: recall {b.r - b0.r:+.3f} at precision {b.p_mixed:.3f} "
              f"(strict {b.p_strict:.3f}; old {b0.p_mixed:.3f}, strict {b0.p_strict:.3f}); "
              f"any-page rule: recall {a.r - a0.r:+.3f} at precision {a.p_mixed:.3f}")

    print(f"\n== spotsigs-dev only: {only.n} pages (random.Random(7).shuffle), "
          f"{only.n_true} with an earlier page of their story")
    cols = "    P      R     F1"
    print(f"{'':<{w}} | {'best match':^{len(cols)}} | {'any page':^{len(cols)}} |")
    print(f"{'method':<{w}} | {cols} | {cols} |")
    for name, sc in spot_rows.items():
        b, a = sc["best"], sc["any"]
        print(f"{name:<{w}} | {b.p_mixed:5.3f}  {b.r:5.3f}  {b.f1:5.3f} | {a.p_mixed:5.3f}  {a.r:5.3f}  {a.f1:5.3f} |")
    h9 = spot_rows[base_name]["any"]
    h14 = next(sc["any"] for n, sc in spot_rows.items() if n.startswith("key h <= 14"))
    ok = (tuple(round(x, 3) for x in (h9.p_mixed, h9.r, h9.f1)) == ISSUE_H9
          and round(h14.r, 3) == ISSUE_H14_R)
    print(f"reproduces issue 19's figures (P {ISSUE_H9[0]} R {ISSUE_H9[1]} F1 {ISSUE_H9[2]} at h = 9, "
          f"R {ISSUE_H14_R} at h = 14; the issue used the any-page rule): "
          + ("n/a (--quick subset)" if args.quick else ("yes" if ok else "no")))

    print(f"\ntimes: fingerprinting {t_fp:.1f}s ({n_fp} pages), pairwise keys/cosine/MinHash {t_mat:.1f}s, "
          f"protocol {t_proto:.1f}s, total {time.perf_counter() - t0:.1f}s")
    return 0 if args.quick or ok else 1


if __name__ == "__main__":
    sys.exit(main())
