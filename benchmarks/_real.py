"""Shared by eval_real.py and eval_quality.py: the real labelled pages, their
cached fingerprints, the pairwise matrices and the online protocol of
spotsigs-dev/README.md.

Data, under the data root (``SIMDUP_DATA``, else ``shared/data`` beside the
checkout): ``spotsigs-dev/`` (one folder per story) and
``distractors-dragnet/`` (unrelated pages). Every page is given as bytes to the
default ``Fingerprinter()``; what it returns (both keys, their weights, the
sketch, the feature hashes and weights, the main text) is cached per page in
``benchmarks/.cache/`` under the page's path, size and mtime and the
fingerprinter's ``version``.

Protocol. The page list is built in a fixed order: the spotsigs-dev pages
sorted by (folder name, file name), then the distractors sorted by file name;
it is shuffled once with ``random.Random(7).shuffle`` and the pages arrive in
that order. A page is flagged when an earlier page passes the method's rule.
Every earlier page is in the index (the README's protocol, and what a crawl
does: its in-memory backend stores every checked page, a near-duplicate under
the key of the page it duplicates). A flag is correct under
"best match" when the best earlier match is of the page's story, under "any
page" when any earlier page of its story passes. Recall = correct flags /
spotsigs pages with an earlier page of their story (a skipped page is a miss).
P (mixed) leaves distractor-distractor pairs out (the distractors hold real
duplicates of each other); P (strict) counts every pair.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from scrapy_simdup import Fingerprinter, SkippedPage
from scrapy_simdup._ext import hashing
from scrapy_simdup.fingerprint.features import fmix64
from scrapy_simdup.fingerprint.sketch import SKETCH_BYTES

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("SIMDUP_DATA", REPO.parent / "shared" / "data"))
SPOT = DATA / "spotsigs-dev"
DIST = DATA / "distractors-dragnet"
CACHE = REPO / "benchmarks" / ".cache"
U64 = np.uint64
INF = np.float32(np.inf)


# ----------------------------------------------------------------- pages

def page_list(quick: bool = False):
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


class Pages:
    """Everything the evaluations need of a page list, in list order."""

    def __init__(self, folder, valid, values, values2, sketches, W, W2, feats, texts):
        self.folder = np.asarray(folder)          # story id, -1: unrelated page
        self.spot = self.folder >= 0
        self.valid = np.asarray(valid, bool)
        self.values = np.asarray(values, U64)
        self.values2 = np.asarray(values2, U64)
        self.sketches = np.asarray(sketches, np.uint8)   # uint8[n, SKETCH_BYTES]
        self.W, self.W2 = W, W2                    # float64[n, 64]
        self.feats = feats                         # [(hashes uint64, weights float64)]
        self.texts = texts                         # main text ("" when skipped)
        self.n = len(self.folder)


_ARRAYS = ("valid", "values", "values2", "sketches", "W", "W2")


class Cache:
    """Per-page results keyed by path, size, mtime and ``Fingerprinter().version``."""

    def __init__(self, version: str):
        tag = hashlib.sha1(version.encode()).hexdigest()[:12]
        self.path = CACHE / f"real-{tag}.npz"
        self.text_path = CACHE / f"real-{tag}.texts.json.gz"
        self.entries = {}
        self.dirty = False
        self.version = version
        if self.path.exists() and self.text_path.exists():
            with np.load(self.path, allow_pickle=False) as z:
                z = {k: z[k] for k in z.files}
            texts = json.loads(gzip.decompress(self.text_path.read_bytes()))
            if str(z["version"]) == version:
                offs = z["offsets"]
                for k, key in enumerate(z["keys"]):
                    lo, hi = offs[k], offs[k + 1]
                    self.entries[str(key)] = (int(z["sizes"][k]), int(z["mtimes"][k]),
                                              {a: z[a][k] for a in _ARRAYS},
                                              z["hashes"][lo:hi], z["weights"][lo:hi], texts[str(key)])

    def get(self, key, st):
        e = self.entries.get(key)
        if e is not None and e[0] == st.st_size and e[1] == st.st_mtime_ns:
            return e[2:]
        return None

    def put(self, key, st, entry):
        self.entries[key] = (st.st_size, st.st_mtime_ns, *entry)
        self.dirty = True

    def save(self):
        if not self.dirty:
            return
        CACHE.mkdir(parents=True, exist_ok=True)
        keys = sorted(self.entries)
        es = [self.entries[k] for k in keys]
        offs = np.zeros(len(es) + 1, np.int64)
        offs[1:] = np.cumsum([e[3].shape[0] for e in es])
        arrays = {a: np.array([e[2][a] for e in es]) for a in _ARRAYS}
        tmp = self.path.with_suffix(".tmp.npz")
        np.savez(tmp, version=np.str_(self.version), keys=np.array(keys),
                 sizes=np.array([e[0] for e in es], np.int64), mtimes=np.array([e[1] for e in es], np.int64),
                 offsets=offs, hashes=np.concatenate([e[3] for e in es]).astype(U64),
                 weights=np.concatenate([e[4] for e in es]).astype(np.float64), **arrays)
        os.replace(tmp, self.path)
        self.text_path.write_bytes(gzip.compress(json.dumps({k: e[5] for k, e in zip(keys, es)}).encode()))


def fingerprint_one(fp: Fingerprinter, raw: bytes):
    """(arrays, hashes, weights, main text) of one page, the way the plugin sees it."""
    try:
        f = fp.fingerprint_html(raw)
        hashes, weights = fp.features_html(raw)
        text = fp.extract_text_html(raw)[0]
        arrays = dict(valid=True, values=U64(f.value), values2=U64(f.value2),
                      sketches=np.frombuffer(f.sketch, np.uint8), W=np.asarray(f.W, np.float64),
                      W2=np.asarray(f.W2, np.float64))
        return arrays, np.ascontiguousarray(hashes, U64), np.ascontiguousarray(weights, np.float64), text
    except SkippedPage:
        arrays = dict(valid=False, values=U64(0), values2=U64(0), sketches=np.zeros(SKETCH_BYTES, np.uint8),
                      W=np.zeros(64), W2=np.zeros(64))
        return arrays, np.empty(0, U64), np.empty(0, np.float64), ""


def load_pages(pages):
    """(Pages, seconds spent fingerprinting, pages fingerprinted) for [(path, folder or None)]."""
    fp = Fingerprinter()
    cache = Cache(fp.version)
    folder_names = sorted({f for _, f in pages if f is not None})
    fid = {f: i for i, f in enumerate(folder_names)}
    rows = []
    t, done = time.perf_counter(), 0
    for path, _ in pages:
        key = str(path.relative_to(DATA))
        st = path.stat()
        e = cache.get(key, st)
        if e is None:
            e = fingerprint_one(fp, gzip.decompress(path.read_bytes()))
            cache.put(key, st, e)
            done += 1
        rows.append(e)
    cache.save()
    folder = [fid[f] if f is not None else -1 for _, f in pages]
    return pages_from_rows(folder, rows), time.perf_counter() - t, done


def pages_from_rows(folder, rows):
    arr = {a: np.array([r[0][a] for r in rows]) for a in _ARRAYS}
    return Pages(folder, arr["valid"], arr["values"], arr["values2"], arr["sketches"].astype(np.uint8),
                 arr["W"], arr["W2"], [(r[1], r[2]) for r in rows], [r[3] for r in rows])


def real_pages(quick: bool = False):
    """(Pages of spotsigs-dev + distractors, story names, seconds, pages fingerprinted)."""
    pages = page_list(quick)
    P, t, done = load_pages(pages)
    return P, sorted({f for _, f in pages if f is not None}), t, done


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


def _pair_sums(feats, valid, weight):
    """float64[n, n]: sum over shared feature hashes of weight(i) * weight(j) (inverted index)."""
    n = len(feats)
    rows = np.concatenate([np.full(f[0].shape[0], i, np.int64) for i, f in enumerate(feats) if valid[i]])
    hs = np.concatenate([f[0] for i, f in enumerate(feats) if valid[i]])
    ws = np.concatenate([weight(f) for i, f in enumerate(feats) if valid[i]])
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
    return S + S.T


def cosine_matrix(feats, valid):
    """Exact cosine of the weighted feature vectors (float32[n, n])."""
    S = _pair_sums(feats, valid, lambda f: f[1] / np.sqrt(np.dot(f[1], f[1]))).astype(np.float32)
    S[np.diag_indices(len(feats))] = 1.0
    return S


def jaccard_matrix(feats, valid):
    """Exact Jaccard of the distinct feature-hash sets (float32[n, n])."""
    inter = _pair_sums(feats, valid, lambda f: np.ones(f[0].shape[0]))
    size = np.array([f[0].shape[0] if ok else 0 for f, ok in zip(feats, valid)], np.float64)
    union = size[:, None] + size[None, :] - inter
    J = np.where(union > 0, inter / np.maximum(union, 1), 0.0).astype(np.float32)
    J[np.diag_indices(len(feats))] = 1.0
    return J


def sketch_matrix(sketches):
    """uint8[n, n]: equal bytes of the product's sketches (what the index verifies with)."""
    n = sketches.shape[0]
    M = np.empty((n, n), np.uint8)
    for i in range(n):
        M[i] = (sketches == sketches[i]).sum(1)
    return M


# ----------------------------------------------------------------- the online protocol

class Stream:
    """One shuffled arrival order over a page list (indices into the loaded pages)."""

    def __init__(self, idx, folder, valid):
        order = list(range(len(idx)))
        random.Random(7).shuffle(order)
        self.idx = np.asarray(idx)[order]
        f = np.asarray(folder)[self.idx]
        self.folder = f
        self.spot = f >= 0
        n = self.idx.shape[0]
        self.n = n
        self.valid = np.asarray(valid)[self.idx]
        earlier = np.tri(n, k=-1, dtype=bool)           # [i, j]: j arrived before i
        v = self.valid
        self.allowed = earlier & v[:, None] & v[None, :]
        dd = ~self.spot[:, None] & ~self.spot[None, :]
        self.allowed_mixed = self.allowed & ~dd
        self.same = (f[:, None] == f[None, :]) & self.spot[:, None]
        self.n_true = int((earlier & self.same).any(1).sum())   # skipped pages count as misses

    def sub(self, A):
        return A[np.ix_(self.idx, self.idx)]

    def score(self, D):
        """Every page stored. D: float32[n, n] distances in this stream's order (INF: does
        not pass; smaller is better). Returns {"best": Score, "any": Score}."""
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

    def score_named(self, D):
        """Every page stored, and a flag names one page, as the crawl's backend does: the best
        earlier page by D (ties: the earlier). Both rules judge that one page. D as in
        :meth:`score`. Returns ({"best": Score, "any": Score}, {flagged position: position of
        the page it names})."""
        named = {}
        res = OnlineTally(self)
        for i in range(1, self.n):
            if not self.valid[i]:
                continue
            row = np.where(self.allowed[i, :i], D[i, :i], INF)
            j = int(np.argmin(row))
            if row[j] < INF:
                named[i] = j
                res.add(i, [j])
        return res.scores(), named


class OnlineTally:
    """Counts flags of an online run: ``add(i, matches best first)`` per flagged page."""

    def __init__(self, stream: Stream):
        self.s = stream
        self.fm = self.fs = self.cb = self.ca = 0

    def add(self, i, matches):
        s = self.s
        matches = np.asarray(matches)
        if not matches.size:
            return
        self.fs += 1
        if s.spot[i]:
            self.fm += 1
            self.cb += int(s.folder[matches[0]] == s.folder[i])
            self.ca += int((s.folder[matches] == s.folder[i]).any())
        elif s.spot[matches].any():                       # a distractor flagged by a spotsigs page
            self.fm += 1

    def scores(self):
        n = self.s.n_true
        return {"best": Score(self.fm, self.fs, self.cb, n), "any": Score(self.fm, self.fs, self.ca, n)}


class Score:
    def __init__(self, flags_mixed, flags_strict, correct, n_true):
        self.flags_mixed, self.flags_strict, self.correct = flags_mixed, flags_strict, correct
        self.p_mixed = correct / flags_mixed if flags_mixed else 1.0
        self.p_strict = correct / flags_strict if flags_strict else 1.0
        self.r = correct / n_true
        pr = self.p_mixed + self.r
        self.f1 = 2 * self.p_mixed * self.r / pr if pr else 0.0
