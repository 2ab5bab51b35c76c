"""Shared loading, feature caching, seeded simhash, sketches and the online protocol.

Measurement only (scrapy-simdup at /tmp/r19/src, HEAD ef0e145)."""
from __future__ import annotations
import gzip, os, pickle, random, re, sys, time
from math import comb, erfc, sqrt
from pathlib import Path
import numpy as np

os.environ.setdefault("OMP_NUM_THREADS", "1")
from scrapy_simdup import Fingerprinter, SkippedPage, _core
from scrapy_simdup._features import fmix64, weighted_features, _SALT
from scrapy_simdup._fingerprinter import text_token_hashes
from scrapy_simdup._idf import IdfTable

SPOT = Path("/work/shared/data/spotsigs-dev")
DIST = Path("/work/shared/data/distractors-dragnet")
CACHE = Path("/tmp/r19/cache")
INF = np.float32(1e9)
U64 = np.uint64


def load_pages():
    """[(id, folder, bytes)]: spotsigs sorted by (folder, file), then distractors by file."""
    out = []
    for d in sorted(p for p in SPOT.iterdir() if p.is_dir()):
        for f in sorted(d.iterdir()):
            out.append((f"{d.name}/{f.name}", d.name, gzip.decompress(f.read_bytes())))
    for f in sorted(DIST.glob("*.gz"), key=lambda p: p.name):
        out.append((f"_distractor/{f.name}", "_D:" + f.name, gzip.decompress(f.read_bytes())))
    return out


class Data:
    """Pages + labels + the online order. mixed=False: spotsigs only."""

    def __init__(self, mixed=True, strict=False):
        p = CACHE / "pages.pkl"
        if p.exists():
            pages = pickle.loads(p.read_bytes())
        else:
            pages = load_pages()
            p.write_bytes(pickle.dumps(pages))
        if not mixed:
            pages = [x for x in pages if not x[1].startswith("_D:")]
        self.mixed = mixed
        self.ids = [x[0] for x in pages]
        self.folder = [x[1] for x in pages]
        self.html = [x[2] for x in pages]
        self.n = len(pages)
        self.distractor = np.array([f.startswith("_D:") for f in self.folder])
        fid = {f: i for i, f in enumerate(sorted(set(self.folder)))}
        self.cl = np.array([fid[f] for f in self.folder])
        order = list(range(self.n))
        random.Random(7).shuffle(order)
        self.order = np.array(order)
        pos = np.empty(self.n, int)
        pos[self.order] = np.arange(self.n)
        self.pos = pos
        self.earlier = pos[None, :] < pos[:, None]          # [i, j]: j arrived before i
        self.same = (self.cl[:, None] == self.cl[None, :]) & ~self.distractor[:, None]
        np.fill_diagonal(self.same, False)
        self.et = self.earlier & self.same                    # true earlier pairs
        # false earlier pairs. Distractor-distractor pairs are left out unless strict: the
        # distractor set holds real duplicates (identical texts, same site); the issue's
        # "P 0.90 at h = 18 with distractors" is this protocol (checked: 0.904).
        DD = self.distractor[:, None] & self.distractor[None, :]
        self.ef = self.earlier & ~self.same & (~DD if not strict else True)
        self.DD = DD
        self.has_true = self.et.any(1)
        iu = np.triu_indices(self.n, 1)
        self.iu = iu
        self.unrel_pairs = ~self.same[iu]
        self.tag = ("mixed-strict" if strict else "mixed") if mixed else "spot"


# ------------------------------------------------------------------ features
def extract(data_html, mode):
    """Cached (text, tags) per page for extract mode 'main'/'visible' (on the full mixed list)."""
    p = CACHE / f"text_{mode}.pkl"
    if p.exists():
        return pickle.loads(p.read_bytes())
    fp = Fingerprinter(extract=mode, min_features=1)
    out = []
    for h in data_html:
        try:
            t, _, _ = fp.extract_text_html(h)
        except SkippedPage:
            t = None
        out.append(t)
    p.write_bytes(pickle.dumps(out))
    return out


_SENT = re.compile(r"(?<=[.!?])\s+|\n+")
_SALT_SENT = U64(0x53454E54454E4345)
_M = U64(0x9E3779B97F4A7C15)


def sentence_hashes(text):
    """Sentence signatures: one hash per sentence (>= 4 tokens) of its normalised token sequence."""
    hs = []
    for s in _SENT.split(text):
        th = text_token_hashes(s)
        if th.shape[0] < 4:
            continue
        x = U64(0) ^ _SALT_SENT
        with np.errstate(over="ignore"):
            for t in th:
                x = x * _M + t
        hs.append(x)
    return fmix64(np.array(hs, dtype=U64)) if hs else np.empty(0, U64)


def features(pages_html, feats="shingles+spots", k=3, weighting="logtf", mode="main",
             min_features=16, order=None):
    """Cached list of (hashes uint64, weights float64) or None (skipped), over the full mixed list.

    weighting 'idf': package IdfTable learned online in `order` from the first 1000 pages
    (each page weighed with the table before it learns it), as the Fingerprinter does."""
    key = f"feat_{feats}_{k}_{weighting}_{mode}_{min_features}.pkl"
    p = CACHE / key
    if p.exists():
        return pickle.loads(p.read_bytes())
    texts = extract(pages_html, mode)
    out = [None] * len(texts)
    sets = tuple(feats.split("+"))
    idf = IdfTable() if weighting == "idf" else None
    seq = order if order is not None else range(len(texts))
    for i in seq:
        t = texts[i]
        if not t:
            continue
        if sets == ("sentences",):
            raw = sentence_hashes(t)
            if raw.size == 0:
                continue
            u, c = np.unique(raw, return_counts=True)
            w = 1.0 + np.log(c) if weighting != "binary" else np.ones(u.size)
            h = u
        else:
            th = text_token_hashes(t)
            wt = "logtf" if weighting == "idf" else weighting
            h, w = weighted_features(th, sets, k, None, wt)
            if weighting == "idf":
                if idf.pages:
                    df = idf.counts[h >> idf._shift].astype(np.float64)
                    nn = float(idf.pages)
                    w = w * (1.0 + np.log((1.0 + nn) / (1.0 + np.minimum(df, nn))))
                idf.learn(h)
        if h.size < min_features:
            continue
        out[i] = (np.ascontiguousarray(h, U64), np.ascontiguousarray(w, np.float64))
    p.write_bytes(pickle.dumps(out))
    return out


SEED_XOR = [0, 0x243F6A8885A308D3, 0x13198A2E03707344, 0xA4093822299F31D0, 0x082EFA98EC4E6C89,
            0x452821E638D01377, 0xBE5466CF34E90C6C, 0xC0AC29B7C97C50DD, 0x3F84D5B5B5470917]


def remix(h, seed):
    """Seed 0: the product's feature hash; seed s > 0: fmix64(h ^ C_s) (a bijection)."""
    if seed == 0:
        return h
    return fmix64(h ^ U64(SEED_XOR[seed]))


def simhashes(feat, seed=0):
    """(values uint64[n], W float64[n, 64], valid bool[n]) of the 64-bit weighted simhash."""
    n = len(feat)
    valid = np.array([f is not None for f in feat])
    hs = [remix(f[0], seed) for f in feat if f is not None]
    ws = [f[1] for f in feat if f is not None]
    offs = np.zeros(len(hs) + 1, np.int64)
    offs[1:] = np.cumsum([x.size for x in hs])
    v, W = _core.simhash_hashes_many(np.ascontiguousarray(np.concatenate(hs)), offs,
                                     np.ascontiguousarray(np.concatenate(ws)))
    vals = np.zeros(n, U64)
    WW = np.zeros((n, 64))
    vals[valid] = v
    WW[valid] = W
    return vals, WW, valid


def hamming_matrix(vals, valid):
    n = vals.shape[0]
    D = np.empty((n, n), np.float32)
    v = np.ascontiguousarray(vals, U64)
    for i in range(n):
        D[i] = _core.hamming_many(v, v[i])
    D[:, ~valid] = INF
    D[~valid, :] = INF
    np.fill_diagonal(D, INF)
    return D


def sub(D, idx):
    return D[np.ix_(idx, idx)]


# ------------------------------------------------------------------ exact similarities
def sparse_rows(feat, binary=False):
    import scipy.sparse as sp
    rows, cols, vals = [], [], []
    allh = np.unique(np.concatenate([f[0] for f in feat if f is not None]))
    for i, f in enumerate(feat):
        if f is None:
            continue
        c = np.searchsorted(allh, f[0])
        rows.append(np.full(c.size, i))
        cols.append(c)
        vals.append(np.ones(c.size) if binary else f[1])
    X = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                      shape=(len(feat), allh.size))
    return X


def cosine_dist(feat):
    """1 - cosine of the weighted feature vectors (INF for skipped)."""
    X = sparse_rows(feat)
    nrm = np.sqrt(np.asarray(X.multiply(X).sum(1)).ravel())
    nrm[nrm == 0] = np.inf
    import scipy.sparse as sp
    Xn = sp.diags(1 / nrm) @ X
    S = (Xn @ Xn.T).toarray().astype(np.float32)
    valid = np.array([f is not None for f in feat])
    D = 1 - S
    D[:, ~valid] = INF
    D[~valid, :] = INF
    np.fill_diagonal(D, INF)
    return D


def jaccard_dist(feat):
    X = sparse_rows(feat, binary=True)
    inter = (X @ X.T).toarray().astype(np.float32)
    sz = np.asarray(X.sum(1)).ravel().astype(np.float32)
    union = sz[:, None] + sz[None, :] - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        D = 1 - inter / union
    valid = np.array([f is not None for f in feat])
    D[:, ~valid] = INF
    D[~valid, :] = INF
    np.fill_diagonal(D, INF)
    return D.astype(np.float32)


# ------------------------------------------------------------------ minhash sketches
def oph(feat, K=256, seed=11):
    """One-permutation minhash with K bins and optimal densification (Shrivastava 2017).
    Returns uint64[n, K] full-width minima (b-bit values are taken later)."""
    logk = int(np.log2(K))
    n = len(feat)
    out = np.zeros((n, K), U64)
    rng = np.random.default_rng(seed)
    # densification: for empty bin b, attempt t: hash(b, t) -> bin
    dens = rng.integers(0, 2**63, size=(K, 64), dtype=np.int64).astype(U64)
    for i, f in enumerate(feat):
        if f is None:
            continue
        h = fmix64(f[0] ^ U64(0x9F1D2C3B4A596877 + seed))
        b = (h >> U64(64 - logk)).astype(np.int64)
        v = h & U64((1 << (64 - logk)) - 1)
        m = np.full(K, np.iinfo(np.uint64).max, U64)
        np.minimum.at(m, b, v)
        empty = m == np.iinfo(np.uint64).max
        if empty.any():
            full = m.copy()
            for e in np.flatnonzero(empty):
                for t in range(64):
                    src = int(fmix64(np.array([dens[e, t]], U64))[0] % U64(K))
                    if not empty[src]:
                        m[e] = full[src]
                        break
        out[i] = m
    return out


def kperm_minhash(feat, K=128, seed=21):
    """Classic K-permutation minhash (K independent fmix64 remixes)."""
    n = len(feat)
    out = np.zeros((n, K), U64)
    consts = np.random.default_rng(seed).integers(0, 2**63, size=K, dtype=np.int64).astype(U64)
    for i, f in enumerate(feat):
        if f is None:
            continue
        H = fmix64(f[0][None, :] ^ consts[:, None])
        out[i] = H.min(1)
    return out


def bbit(M, b):
    """Low b bits of each minimum (b = 64: the full value)."""
    if b >= 64:
        return M
    return M & U64((1 << b) - 1)


def minhash_dist(S, valid, b):
    """1 - estimated Jaccard from match fraction of b-bit values (bias-corrected)."""
    n, K = S.shape
    D = np.empty((n, n), np.float32)
    c = 0.0 if b >= 32 else 2.0 ** -b
    dt = np.uint8 if b <= 8 else (np.uint16 if b <= 16 else U64)
    Sb = bbit(S, b).astype(dt)
    for i in range(n):
        f = (Sb == Sb[i]).mean(1)
        D[i] = 1 - (f - c) / (1 - c)
    D[:, ~valid] = INF
    D[~valid, :] = INF
    np.fill_diagonal(D, INF)
    return D


# ------------------------------------------------------------------ online protocol
class Online:
    """Nearest earlier true / false distance per page for a distance matrix."""

    def __init__(self, data: Data, D):
        self.d = data
        self.Dt = np.where(data.et, D, INF).min(1)
        self.Df = np.where(data.ef, D, INF).min(1)

    def prf(self, thr):
        d = self.d
        flagged = np.minimum(self.Dt, self.Df) <= thr
        correct = self.Dt <= thr
        nf, nc, nt = flagged.sum(), correct.sum(), d.has_true.sum()
        p = nc / nf if nf else 1.0
        r = nc / nt
        f1 = 2 * p * r / (p + r) if p + r else 0.0
        fd = (flagged & d.distractor).sum()
        return p, r, f1, int(nf), int(nc), int(fd)


def gated(K, r, V):
    """Verification distances V where the key distance K <= r, else INF."""
    return np.where(K <= r, V, INF)


def union_gate(Ks, r):
    m = Ks[0] <= r
    for K in Ks[1:]:
        m |= K <= r
    return m


def binom_tail(h, bits=64):
    return sum(comb(bits, i) for i in range(h + 1)) / 2 ** bits


def normal_tail(d, h):
    mu, sd = float(d.mean()), float(d.std())
    return 0.5 * erfc((mu - h - 0.5) / (sd * sqrt(2)))


def fmt(p, r, f1):
    return f"{p:.3f} {r:.3f} {f1:.3f}"


# ------------------------------------------------------------------ PSM probe ranks
NOT_REACHED = np.int32(2**31 - 1)


def psm_ranks(vals, W, valid, t, tag, model=None):
    """R[i, j]: the 1-based PSM probe (VOSH order of the shipped volatility model on query
    i's weights W[i], t header bits, at most 8 flipped header bits) at which query i
    probes j's bucket; NOT_REACHED if j's header differs in more than 8 bits. Cached."""
    from scrapy_simdup import _psm
    from scrapy_simdup._volatility import VolatilityModel
    p = CACHE / f"R_{tag}_t{t}.npy"
    if p.exists():
        return np.load(p)
    model = VolatilityModel.default() if model is None else model
    n = vals.shape[0]
    R = np.full((n, n), NOT_REACHED, np.int32)
    hshift = U64(64 - t)
    heads = (vals >> hshift)
    for i in range(n):
        if not valid[i]:
            continue
        masks, _ = _psm.flip_masks_c(model._c, np.ascontiguousarray(W[i]), t, 8, -1)
        m = masks >> hshift
        orderm = np.argsort(m)
        ms = m[orderm]
        target = heads ^ heads[i]
        k = np.searchsorted(ms, target)
        k[k >= ms.size] = 0
        hit = ms[k] == target
        R[i, hit] = (orderm[k[hit]] + 1).astype(np.int32)
    R[:, ~valid] = NOT_REACHED
    np.save(p, R)
    return R


def auto_t(n):
    return max(4, min(30, int(np.floor(np.log2(n))) - 2))
