"""Near-duplicate quality on real labelled pages: SpotSigs stories among unrelated pages.

    .venv/bin/python benchmarks/eval_real.py [--quick]

Data, under the data root (``SIMDUP_DATA``, else ``shared/data`` beside the
checkout): ``spotsigs-dev/`` (34 stories, 1,117 gzipped pages, one folder per
story; its README.md gives the protocol) and ``distractors-dragnet/`` (1,381
unrelated gzipped pages). Every page is given as bytes to the default
``Fingerprinter()`` (``fingerprint_html`` for the 64-bit key, ``features_html``
for the feature hashes and weights); the results are cached per page in
``benchmarks/.cache/`` under the page's path, size and mtime and the
fingerprinter's ``version``. A page the fingerprinter skips is never flagged
and never matched.

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

* ``key h <= d``: the 64-bit simhash (Hamming distance <= d; d = 9 is today's
  ``SIMDUP_DISTANCE``);
* ``cosine >= c``: exact cosine of the weighted feature vectors;
* ``recommended``: the design recommended by ``recall_study/REPORT.md``,
  computed here in NumPy as a reference: two 64-bit keys, today's value and a
  simhash of ``fmix64(h ^ C)`` of the same feature hashes with the same
  weights, each searched within radius 22; a candidate is verified by a
  128-bin one-permutation MinHash (optimal densification, low 8 bits per bin)
  of the feature hashes, estimated Jaccard >= 0.15 (corrected for 8-bit chance
  matches); the best match is the highest estimated Jaccard.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from scrapy_simdup import Fingerprinter, SkippedPage
from scrapy_simdup._ext import hashing
from scrapy_simdup._limits import DEFAULT_DISTANCE
from scrapy_simdup.fingerprint.features import fmix64

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("SIMDUP_DATA", REPO.parent / "shared" / "data"))
SPOT = DATA / "spotsigs-dev"
DIST = DATA / "distractors-dragnet"
CACHE = REPO / "benchmarks" / ".cache"
U64 = np.uint64
INF = np.float32(np.inf)

KEY_DISTANCES = (3, 6, DEFAULT_DISTANCE, 12, 14, 16, 18, 20, 22)
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
SPOT_ROWS = (f"key h <= {DEFAULT_DISTANCE} ", "key h <= 14", "recommended")


# ----------------------------------------------------------------- pages

def page_list(quick: bool):
    """[(path, folder or None)] in the fixed order (spotsigs by folder then file, then distractors)."""
    pages = []
    folders = sorted(p for p in SPOT.iterdir() if p.is_dir())
    if quick:
        folders = folders[::4]
    for d in folders:
        pages += [(f, d.name) for f in sorted(d.iterdir()) if f.name.endswith(".gz")]
    dist = sorted((f for f in DIST.iterdir() if f.name.endswith(".gz")), key=lambda f: f.name)
    if quick:
        dist = dist[::4]
    pages += [(f, None) for f in dist]
    return pages


class Cache:
    """Per-page fingerprints and features, keyed by path, size, mtime and ``Fingerprinter().version``."""

    def __init__(self, version: str):
        tag = hashlib.sha1(version.encode()).hexdigest()[:12]
        self.path = CACHE / f"eval_real-{tag}.npz"
        self.entries = {}
        self.dirty = False
        if self.path.exists():
            with np.load(self.path, allow_pickle=False) as z:
                z = {k: z[k] for k in z.files}
            if str(z["version"]) == version:
                offs = z["offsets"]
                for k, key in enumerate(z["keys"]):
                    lo, hi = offs[k], offs[k + 1]
                    self.entries[str(key)] = (int(z["sizes"][k]), int(z["mtimes"][k]), bool(z["valid"][k]),
                                              U64(z["values"][k]), z["hashes"][lo:hi], z["weights"][lo:hi])
        self.version = version

    def get(self, key, st):
        e = self.entries.get(key)
        if e is not None and e[0] == st.st_size and e[1] == st.st_mtime_ns:
            return e[2:]
        return None

    def put(self, key, st, valid, value, hashes, weights):
        self.entries[key] = (st.st_size, st.st_mtime_ns, valid, U64(value), hashes, weights)
        self.dirty = True

    def save(self):
        if not self.dirty:
            return
        CACHE.mkdir(parents=True, exist_ok=True)
        keys = sorted(self.entries)
        es = [self.entries[k] for k in keys]
        offs = np.zeros(len(es) + 1, np.int64)
        offs[1:] = np.cumsum([e[4].shape[0] for e in es])
        tmp = self.path.with_suffix(".tmp.npz")
        np.savez(tmp, version=np.str_(self.version), keys=np.array(keys),
                 sizes=np.array([e[0] for e in es], np.int64), mtimes=np.array([e[1] for e in es], np.int64),
                 valid=np.array([e[2] for e in es], bool), values=np.array([e[3] for e in es], U64),
                 offsets=offs,
                 hashes=np.concatenate([e[4] for e in es]).astype(U64),
                 weights=np.concatenate([e[5] for e in es]).astype(np.float64))
        os.replace(tmp, self.path)


def fingerprint_pages(pages):
    """(valid bool[n], value uint64[n], [(hashes, weights)], seconds spent fingerprinting, pages fingerprinted)."""
    fp = Fingerprinter()
    cache = Cache(fp.version)
    valid, values, feats = [], [], []
    t, done = time.perf_counter(), 0
    empty = (np.empty(0, U64), np.empty(0, np.float64))
    for path, _ in pages:
        key = str(path.relative_to(DATA))
        st = path.stat()
        e = cache.get(key, st)
        if e is None:
            raw = gzip.decompress(path.read_bytes())
            try:
                value = fp.fingerprint_html(raw).value
                hashes, weights = fp.features_html(raw)
                e = (True, U64(value), np.ascontiguousarray(hashes, U64),
                     np.ascontiguousarray(weights, np.float64))
            except SkippedPage:
                e = (False, U64(0), *empty)
            cache.put(key, st, *e)
            done += 1
        valid.append(e[0])
        values.append(e[1])
        feats.append((e[2], e[3]))
    cache.save()
    return np.array(valid), np.array(values, U64), feats, time.perf_counter() - t, done


# ----------------------------------------------------------------- pairwise matrices (list order)

def hamming_matrix(values):
    return np.bitwise_count(values[:, None] ^ values[None, :]).astype(np.uint8)


def simhash_of(feats, xor=None):
    """The 64-bit simhash of each page's feature hashes (remixed by ``fmix64(h ^ xor)``), same weights."""
    hs = [f[0] if xor is None else fmix64(f[0] ^ U64(xor)) for f in feats]
    offs = np.zeros(len(feats) + 1, np.int64)
    offs[1:] = np.cumsum([h.shape[0] for h in hs])
    values, _ = hashing.simhash_hashes_many(np.ascontiguousarray(np.concatenate(hs), U64), offs,
                                            np.ascontiguousarray(np.concatenate([f[1] for f in feats])))
    return values


def cosine_matrix(feats, valid):
    """Exact cosine of the weighted feature vectors (float32[n, n]), through an inverted index."""
    n = len(feats)
    rows = np.concatenate([np.full(f[0].shape[0], i, np.int64) for i, f in enumerate(feats) if valid[i]])
    hs = np.concatenate([f[0] for i, f in enumerate(feats) if valid[i]])
    ws = np.concatenate([f[1] / np.sqrt(np.dot(f[1], f[1])) for i, f in enumerate(feats) if valid[i]])
    order = np.argsort(hs, kind="stable")
    hs, rows, ws = hs[order], rows[order], ws[order]
    start = np.flatnonzero(np.r_[True, hs[1:] != hs[:-1]])
    size = np.diff(np.r_[start, hs.shape[0]])
    gstart = np.repeat(start, size)
    left = (gstart + np.repeat(size, size) - 1) - np.arange(hs.shape[0])   # entries after this one in its group
    acc = np.zeros(n * n)
    active = np.flatnonzero(left > 0)
    k = 1
    while active.size:
        a, b = rows[active], rows[active + k]
        acc += np.bincount(a * n + b, weights=ws[active] * ws[active + k], minlength=n * n)
        k += 1
        active = active[left[active] >= k]
    S = acc.reshape(n, n)
    S = (S + S.T).astype(np.float32)
    S[np.diag_indices(n)] = 1.0
    return S


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


# ----------------------------------------------------------------- the online protocol

class Stream:
    """One shuffled arrival order over a page list (indices into the loaded pages)."""

    def __init__(self, idx, folder, valid):
        order = list(range(len(idx)))
        random.Random(7).shuffle(order)
        self.idx = np.asarray(idx)[order]
        f = folder[self.idx]
        self.folder = f
        self.spot = f >= 0
        n = self.idx.shape[0]
        self.n = n
        earlier = np.tri(n, k=-1, dtype=bool)           # [i, j]: j arrived before i
        v = valid[self.idx]
        self.allowed = earlier & v[:, None] & v[None, :]
        dd = ~self.spot[:, None] & ~self.spot[None, :]
        self.allowed_mixed = self.allowed & ~dd
        self.same = (f[:, None] == f[None, :]) & self.spot[:, None]
        self.n_true = int((earlier & self.same).any(1).sum())   # skipped pages count as misses

    def sub(self, A):
        return A[np.ix_(self.idx, self.idx)]

    def score(self, D):
        """D: float32[n, n] distances in this stream's order (INF: does not pass).

        Returns {rule: Score} for rule "best" (the flag is correct when the best
        earlier match is of the page's story) and "any" (correct when any earlier
        page of its story passes: the study's and eval_quality.py's rule)."""
        flags, correct = {}, {}
        for name, allowed in (("mixed", self.allowed_mixed), ("strict", self.allowed)):
            X = np.where(allowed, D, INF)
            best = np.argmin(X, axis=1)                  # first minimum: the earliest page at the best distance
            flagged = X[np.arange(self.n), best] < INF
            flags[name] = int(flagged.sum())
            if name == "strict":                          # a spotsigs page's candidates are the same in both
                correct["best"] = int((flagged & self.spot & (self.folder[best] == self.folder)).sum())
                correct["any"] = int(((X < INF) & self.same).any(1).sum())
        return {rule: Score(flags["mixed"], flags["strict"], nc, self.n_true) for rule, nc in correct.items()}


class Score:
    def __init__(self, flags_mixed, flags_strict, correct, n_true):
        self.flags_mixed, self.flags_strict, self.correct = flags_mixed, flags_strict, correct
        self.p_mixed = correct / flags_mixed if flags_mixed else 1.0
        self.p_strict = correct / flags_strict if flags_strict else 1.0
        self.r = correct / n_true
        pr = self.p_mixed + self.r
        self.f1 = 2 * self.p_mixed * self.r / pr if pr else 0.0


def methods(H1, H2, C, J):
    """(name, function of a Stream -> distance matrix in its order)."""
    out = []
    for h in KEY_DISTANCES:
        def key(s, h=h):
            d = s.sub(H1).astype(np.float32)
            return np.where(d <= h, d, INF)
        default = "  (today's default)" if h == DEFAULT_DISTANCE else ""
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
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="every 4th story and every 4th distractor (figures not comparable)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    print(f"# run {time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime())} on {os.cpu_count()} shared cores")
    pages = page_list(args.quick)
    folder_names = sorted({f for _, f in pages if f is not None})
    fid = {f: i for i, f in enumerate(folder_names)}
    folder = np.array([fid[f] if f is not None else -1 for _, f in pages])
    spot = folder >= 0
    valid, values, feats, t_fp, n_fp = fingerprint_pages(pages)
    print(f"data: {SPOT.name}/ {int(spot.sum())} pages in {len(folder_names)} stories, "
          f"{DIST.name}/ {int((~spot).sum())} pages; skipped by the fingerprinter: "
          f"{int((~valid & spot).sum())} spotsigs, {int((~valid & ~spot).sum())} distractors"
          + ("  [--quick subset]" if args.quick else ""))
    print(f"fingerprints: {Fingerprinter().version}, "
          f"{n_fp} pages fingerprinted in {t_fp:.1f}s, {len(pages) - n_fp} from benchmarks/.cache/")

    t1 = time.perf_counter()
    check = simhash_of([f for f, ok in zip(feats, valid) if ok])
    same_key = int((check == values[valid]).sum())
    print(f"check: the simhash of features_html equals fingerprint_html's value on "
          f"{same_key} of {int(valid.sum())} pages")
    H1 = hamming_matrix(values)
    H2 = hamming_matrix(np.where(valid, simhash_of(feats, KEY2_XOR), U64(0)))
    C = cosine_matrix(feats, valid)
    J = jaccard_estimate(match_counts(oph_sketch(feats, valid)))
    t_mat = time.perf_counter() - t1

    t2 = time.perf_counter()
    mixed = Stream(np.arange(len(pages)), folder, valid)
    only = Stream(np.flatnonzero(spot), folder, valid)
    meths = methods(H1, H2, C, J)
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
    base_name = next(n for n in rows if n.startswith(f"key h <= {DEFAULT_DISTANCE} "))
    print()
    for name, sc in rows.items():
        if not name.startswith(("recommended", "cosine", "key h <= 14")):
            continue
        label = name.split(":")[0] + (" design" if name.startswith("recommended") else "")
        b, b0 = sc["best"], rows[base_name]["best"]
        a, a0 = sc["any"], rows[base_name]["any"]
        print(f"{label} vs today's default: recall {b.r - b0.r:+.3f} at precision {b.p_mixed:.3f} "
              f"(strict {b.p_strict:.3f}; today's {b0.p_mixed:.3f}, strict {b0.p_strict:.3f}); "
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
