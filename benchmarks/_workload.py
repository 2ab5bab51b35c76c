"""Realistic index workload: simhashes of documents and web-like edits.

Every fingerprint here is a real simhash computation (``hashing.simhash_hashes
_many``) over word 3-shingles with unit weight per occurrence, so flipped bits
between a page and its edited variant follow the volatile bits, as on the web.

Documents
  * *real seeds*: the visible text (lxml ``text_content()``, scripts and styles
    dropped) of the pages in ``../shared/data``, split into sentences;
    ``split()`` of ``example_project/news/sitedata.py`` (``benchmarks._data``) decides the half (tune = calibration,
    report = benchmark).
  * *synthetic*: a site template (boilerplate sentences shared by all pages of
    a site: navigation, footer) plus body sentences of 6..30 words drawn from a
    Zipf(1.1) vocabulary of 200,000 words. Sites are Zipf-sized too.

Edits (``edit()``), mixing what the web does to a page: add, delete or replace
1..k sentences of the body, change a boilerplate sentence (a new ad slot,
date, comment count), swap two sentences, re-headline (replace the first
body sentence). The intensity is drawn per pair; pairs are kept by Hamming
distance (``pairs()``), so the benchmark gets near-duplicates at distances
1..h from real computations, not from random bit flips.

Words are token ids (uint64): synthetic words are their vocabulary rank, real
words the 64-bit murmur3 of the lower-cased word. A shingle's feature hash is
a 64-bit mix of its three ids. Large corpora are generated in vectorised
chunks and cached under ``benchmarks/.cache/``.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from scrapy_simdup._ext import hashing

CACHE = HERE / ".cache"
VOCAB = 200_000
ZIPF_S = 1.1
_K1 = np.uint64(0x9E3779B97F4A7C15)
_K2 = np.uint64(0xC2B2AE3D27D4EB4F)
_K3 = np.uint64(0x165667B19E3779F9)


def _fmix(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(0xFF51AFD7ED558CCD)
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(0xC4CEB9FE1A85EC53)
    return h ^ (h >> np.uint64(33))


class Zipf:
    """Inverse-CDF sampler of word ranks (fast: one table lookup per word)."""

    def __init__(self, n=VOCAB, s=ZIPF_S, table_bits=20):
        w = 1.0 / np.arange(1, n + 1) ** s
        cdf = np.cumsum(w) / w.sum()
        u = (np.arange(1 << table_bits) + 0.5) / (1 << table_bits)
        self.table = np.searchsorted(cdf, u).astype(np.uint64)
        self.bits = table_bits

    def sample(self, rng, size) -> np.ndarray:
        return self.table[rng.integers(0, 1 << self.bits, size=size)]


def shingle_hashes(tokens: np.ndarray) -> np.ndarray:
    """Feature hashes of the word 3-shingles of one token sequence."""
    tokens = np.asarray(tokens, dtype=np.uint64)
    if tokens.size < 3:
        tokens = np.concatenate([tokens, np.zeros(3 - tokens.size, np.uint64)])
    with np.errstate(over="ignore"):
        return _fmix(tokens[:-2] * _K1 ^ tokens[1:-1] * _K2 ^ tokens[2:] * _K3)


def simhash_docs(docs) -> tuple[np.ndarray, np.ndarray]:
    """(values, W) of token sequences (one simhash per document)."""
    hashes = [shingle_hashes(d) for d in docs]
    offsets = np.zeros(len(hashes) + 1, np.int64)
    offsets[1:] = np.cumsum([h.size for h in hashes])
    flat = np.concatenate(hashes) if hashes else np.zeros(0, np.uint64)
    return hashing.simhash_hashes_many(flat, offsets)


# ----------------------------------------------------------------- documents
class Site:
    def __init__(self, boiler_head, boiler_tail):
        self.head = boiler_head     # list of sentences (token arrays)
        self.tail = boiler_tail


class Doc:
    """A page: boilerplate head + body sentences + boilerplate tail."""

    __slots__ = ("head", "body", "tail")

    def __init__(self, head, body, tail):
        self.head, self.body, self.tail = list(head), list(body), list(tail)

    def tokens(self) -> np.ndarray:
        parts = self.head + self.body + self.tail
        return np.concatenate(parts) if parts else np.zeros(0, np.uint64)


class Corpus:
    def __init__(self, seed=0, n_sites=2000):
        self.rng = np.random.default_rng(seed)
        self.zipf = Zipf()
        self.sites = [Site([self.sentence(3, 12) for _ in range(self.rng.integers(2, 6))],
                           [self.sentence(3, 12) for _ in range(self.rng.integers(1, 5))])
                      for _ in range(n_sites)]

    def sentence(self, lo=6, hi=30) -> np.ndarray:
        return self.zipf.sample(self.rng, int(self.rng.integers(lo, hi + 1)))

    def doc(self) -> Doc:
        site = self.sites[min(int(self.rng.zipf(1.3)) - 1, len(self.sites) - 1)]
        n = int(np.clip(self.rng.lognormal(np.log(14), 0.7), 3, 150))
        return Doc(site.head, [self.sentence() for _ in range(n)], site.tail)

    # -- edits ---------------------------------------------------------
    def edit(self, doc: Doc, intensity: float) -> Doc:
        """An edited variant; ``intensity`` ~ the fraction of sentences touched."""
        rng = self.rng
        head, body, tail = list(doc.head), list(doc.body), list(doc.tail)
        n_ops = max(1, int(rng.poisson(max(intensity * len(body), 0.3))))
        for _ in range(n_ops):
            op = rng.random()
            if op < 0.25 and body:                                # replace
                body[int(rng.integers(len(body)))] = self.sentence()
            elif op < 0.45:                                       # add
                body.insert(int(rng.integers(len(body) + 1)), self.sentence())
            elif op < 0.6 and len(body) > 2:                      # delete
                del body[int(rng.integers(len(body)))]
            elif op < 0.75 and len(body) > 2:                     # swap
                i, j = rng.integers(len(body), size=2)
                body[i], body[j] = body[j], body[i]
            elif op < 0.85 and body:                              # re-headline
                body[0] = self.sentence(4, 12)
            else:                                                 # boilerplate
                part = head if (rng.random() < 0.5 and head) or not tail else tail
                if part:
                    part[int(rng.integers(len(part)))] = self.sentence(2, 10)
                else:
                    head.append(self.sentence(2, 10))
        return Doc(head, body, tail)


# ----------------------------------------------------------------- real pages
_SENT = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"\w+", re.UNICODE)


class RealSeeds:
    """Pages seeded from real ones: each real page once as it is, then new
    pages made of a real page's boilerplate (first/last sentences) and body
    sentences drawn from the pool of all real sentences of the half, so the
    text statistics are real but no page is stored many times."""

    def __init__(self, docs: list[Doc], rng):
        self.docs = docs
        self.pool = [s for d in docs for s in d.body]
        self.rng = rng
        self.next = 0

    def __len__(self):
        return len(self.docs)

    def doc(self) -> Doc:
        if self.next < len(self.docs):
            self.next += 1
            return self.docs[self.next - 1]
        tmpl = self.docs[int(self.rng.integers(len(self.docs)))]
        n = int(np.clip(self.rng.lognormal(np.log(20), 0.7), 3, 200))
        body = [self.pool[int(i)] for i in self.rng.integers(len(self.pool), size=n)]
        return Doc(tmpl.head, body, tmpl.tail)


def real_docs(half: str) -> list[Doc]:
    """Docs from the real pages of one hold-out half ("tune" or "report")."""
    from _data import load_all, parse_html, split
    tune, report = split(load_all())
    out = []
    for rec in (tune if half == "tune" else report):
        try:
            doc = parse_html(rec.html)
        except Exception:  # noqa: BLE001 - a page lxml cannot parse is skipped
            continue
        for bad in doc.xpath("//script|//style|//noscript"):
            bad.drop_tree()
        text = doc.text_content()
        sents = []
        for s in _SENT.split(text):
            words = _WORD.findall(s.lower())
            if words:
                sents.append(hashing.hash_features(words))
        if sum(len(s) for s in sents) < 50:
            continue
        # the first and last sentences of a page's visible text are its
        # navigation and footer: edits treat them as boilerplate
        k = max(1, len(sents) // 10)
        out.append(Doc(sents[:k], sents[k:-k] or sents[k:], sents[-k:]))
    return out


# ----------------------------------------------------------------- pairs
def pairs(corpus: Corpus, n_pairs: int, max_distance: int, real: list[Doc] = (),
          real_fraction=0.2, min_distance=1, batch=2000):
    """Near-duplicate pairs (base, variant) with Hamming distance in
    [min_distance, max_distance]: returns dict of arrays base_value, base_W,
    var_value, var_W, distance, real (bool)."""
    rng = corpus.rng
    seeds = RealSeeds(list(real), rng) if len(real) else None
    out = {k: [] for k in ("base_value", "base_W", "var_value", "var_W", "distance", "real")}
    have = 0
    while have < n_pairs:
        bases, variants, is_real = [], [], []
        for _ in range(batch):
            use_real = seeds is not None and rng.random() < real_fraction
            d = seeds.doc() if use_real else corpus.doc()
            intensity = float(rng.choice([0.01, 0.03, 0.06, 0.1, 0.2]))
            bases.append(d.tokens())
            variants.append(corpus.edit(d, intensity).tokens())
            is_real.append(bool(use_real))
        bv, bW = simhash_docs(bases)
        vv, vW = simhash_docs(variants)
        dist = np.bitwise_count(bv ^ vv)
        keep = (dist >= min_distance) & (dist <= max_distance)
        for k, a in (("base_value", bv), ("base_W", bW), ("var_value", vv),
                     ("var_W", vW), ("distance", dist), ("real", np.array(is_real))):
            out[k].append(a[keep])
        have += int(keep.sum())
    res = {k: np.concatenate(v)[:n_pairs] for k, v in out.items()}
    return res


# ----------------------------------------------------------------- background
def background(n: int, seed: int = 1, chunk: int = 100_000, log=print) -> np.ndarray:
    """``n`` simhash values of synthetic documents (vectorised, cached)."""
    path = CACHE / f"background-{n}-{seed}.npy"
    if path.exists():
        return np.load(path)
    CACHE.mkdir(exist_ok=True)
    # reuse a larger cached file with the same seed
    for other in sorted(CACHE.glob(f"background-*-{seed}.npy")):
        m = int(other.name.split("-")[1])
        if m >= n:
            return np.load(other, mmap_mode="r")[:n].copy()
    rng = np.random.default_rng(seed)
    zipf = Zipf()
    n_sites = 20000
    # boilerplate blocks of every site, concatenated
    blen = rng.integers(20, 80, size=n_sites)
    boff = np.zeros(n_sites + 1, np.int64)
    boff[1:] = np.cumsum(blen)
    boiler = zipf.sample(rng, int(boff[-1]))
    out = np.empty(n, np.uint64)
    done = 0
    while done < n:
        m = min(chunk, n - done)
        site = np.minimum(rng.zipf(1.3, size=m) - 1, n_sites - 1)
        body = np.clip(rng.lognormal(np.log(150), 0.8, size=m), 20, 3000).astype(np.int64)
        L = blen[site] + body
        starts = np.zeros(m + 1, np.int64)
        starts[1:] = np.cumsum(L)
        total = int(starts[-1])
        doc_of = np.repeat(np.arange(m), L)
        k = np.arange(total) - starts[:-1][doc_of]
        isb = k < blen[site][doc_of]
        tokens = zipf.sample(rng, total)
        src = boff[site][doc_of] + np.minimum(k, blen[site][doc_of] - 1)
        tokens[isb] = boiler[src[isb]]
        with np.errstate(over="ignore"):
            h = _fmix(tokens[:-2] * _K1 ^ tokens[1:-1] * _K2 ^ tokens[2:] * _K3)
        # shingles starting in doc i and ending inside it
        ends = np.minimum(starts[1:] - 2, total - 2)
        # feed [start_i, end_i): build compact arrays via offsets with gaps
        keep = np.ones(total - 2, bool)
        for g in (1, 2):  # the two shingles that straddle a boundary
            idx = starts[1:-1] - g
            keep[idx[idx >= 0]] = False
        hk = h[keep]
        counts = np.maximum(ends - starts[:-1], 0)
        o2 = np.zeros(m + 1, np.int64)
        o2[1:] = np.cumsum(counts)
        vals, _ = hashing.simhash_hashes_many(np.ascontiguousarray(hk), o2)
        out[done:done + m] = vals
        done += m
        if log and done % (10 * chunk) == 0:
            log(f"  background: {done:,}/{n:,}")
    np.save(path, out)
    return out


def query_set(n_queries: int, distance: int, seed: int = 2, log=print):
    """Queries, half with a true near-duplicate to store.

    Returns dict: stored_dup (values to add to the index: the bases),
    q_value, q_W (queries: variants first, then fresh docs), has_dup (bool),
    base_index (index into stored_dup or -1), distance, real.
    """
    path = CACHE / f"queries-{n_queries}-{distance}-{seed}.npz"
    if path.exists():
        return dict(np.load(path))
    CACHE.mkdir(exist_ok=True)
    corpus = Corpus(seed)
    real = real_docs("report")
    half = n_queries // 2
    log(f"  queries: {half:,} near-duplicate pairs ({len(real)} real seed pages)")
    p = pairs(corpus, half, distance, real=real)
    fresh = [corpus.doc().tokens() for _ in range(n_queries - half)]
    fv, fW = simhash_docs(fresh)
    res = {
        "stored_dup": p["base_value"],
        "q_value": np.concatenate([p["var_value"], fv]),
        "q_W": np.concatenate([p["var_W"], fW]),
        "has_dup": np.concatenate([np.ones(half, bool), np.zeros(n_queries - half, bool)]),
        "base_index": np.concatenate([np.arange(half), -np.ones(n_queries - half, np.int64)]),
        "distance": np.concatenate([p["distance"], np.zeros(n_queries - half, np.int64)]),
        "real": np.concatenate([p["real"], np.zeros(n_queries - half, bool)]),
    }
    np.savez(path, **res)
    return res


if __name__ == "__main__":
    import time
    t = time.time()
    v = background(200_000, seed=99)
    print("background 200k", time.time() - t, np.bitwise_count(v[:1000] ^ v[1:1001]).mean())
    t = time.time()
    q = query_set(2000, 3, seed=99)
    print("queries 2k", time.time() - t, np.bincount(q["distance"][q["has_dup"]]),
          q["real"].sum())
