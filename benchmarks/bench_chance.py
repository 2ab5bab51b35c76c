"""Chance matches: distinct pages wrongly matched as near-duplicates, by index size.

    .venv/bin/python benchmarks/bench_chance.py [--n 1e5,1e6] [--queries 5000] [--bands 12]

An index is filled with ``n`` distinct synthetic articles (a Zipf(1.1)
vocabulary of 200,000 words, 30% of the words from a list of 120 stop words,
150-900 words an article, fingerprinted by ``Fingerprinter().fingerprint_text``),
then distinct pages are looked up in it, one at a time, with the crawl's
defaults: ``--queries`` fresh synthetic articles, and the real pages of
distractors-dragnet (``../shared/data``, when present). Every match of a
look-up is a chance match: no two of these pages share a text.

For each look-up the benchmark counts the *candidates*: stored pages that pass
the key part of the rule (within the radius on either key, and, with the pair
rule, both distances adding up to at most ``h + 26``) and whose sketch is
therefore compared; then the matches among them at 5 equal bins of 32
(``SIMDUP_MIN_SIMILARITY = 0.15``, the earlier default) and at 6 (0.18, the
default now). Rows: the rule without the pair limit (the rule before), with
it, and with it and ``--bands B`` sketch bands (12 by default, the crawl's;
0 leaves the row out), whose candidates (equal on a band, both key distances
within the looser limit) count too, passing with one equal bin more (6 and
7), as the index takes them.

Projection to 10^7 pages: the candidates per look-up grow with ``n`` (fitted
as a power of ``n`` between the two sizes), and a candidate passes the sketch
test at the rate measured over all sizes (pooled; with no pass, the binomial
tail of a Jaccard-0 pair is shown instead, marked ``binomial``, with the 95%
upper bound that no pass among that many candidates allows, ``3 / candidates``).
Chance matches per look-up at 10^7 = projected candidates x rate. Target (the
defaults: the last row, 6 bins): at most 1e-3.
"""
from __future__ import annotations

import argparse
import gzip
import os
import sys
import time
from math import comb
from multiprocessing import Pool
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from _workload import Zipf

from scrapy_simdup import Fingerprinter, SkippedPage, VerifiedIndex
from scrapy_simdup._limits import DEFAULT_BANDS, DEFAULT_MIN_SIMILARITY
from scrapy_simdup.fingerprint.sketch import SKETCH_BYTES, matches_needed

DATA = Path(os.environ.get("SIMDUP_DATA", HERE.parents[1] / "shared" / "data"))
STOP = ("the of and to a in is that for it as was with be by on not he i this are or his from at "
        "which but have an they you were her she there been one all we their has would when "
        "if so no will more can who them some its into only other than then up could what about "
        "out my do new also these two may after first any our any most over such even made like "
        "many before must well back through years much where your way down should because each "
        "just those people how too little state good very make world still own see men work "
        "long get here between both life being under never day same another know while last "
        "might us great old year off come since against go came right used take three").split()
PASSES = {5: "0.15 (5 of 32 bins)", 6: "0.18 (6 of 32 bins)"}
DEFAULT_NEED = matches_needed(DEFAULT_MIN_SIMILARITY)
_WORDS = None


def _words():
    global _WORDS
    if _WORDS is None:
        rng = np.random.default_rng(99)
        letters = np.array(list("etaoinshrdlcumwfgypbvkjxqz"))
        p = np.array([12.7, 9.1, 8.2, 7.5, 7.0, 6.7, 6.3, 6.1, 6.0, 4.3, 4.0, 2.8, 2.8, 2.4,
                      2.4, 2.2, 2.0, 2.0, 1.9, 1.5, 1.0, 0.8, 0.2, 0.2, 0.1, 0.1])
        p /= p.sum()
        seen, words = set(STOP), []
        while len(words) < 200_000:
            w = "".join(rng.choice(letters, int(rng.integers(3, 11)), p=p))
            if w not in seen:
                seen.add(w)
                words.append(w)
        _WORDS = np.array(words)
    return _WORDS


def _articles(args):
    """Fingerprints ``(value, value2, sketch)`` of articles ``seed``, ``count``."""
    seed, count = args
    rng = np.random.default_rng(seed)
    words, zipf, fp = _words(), Zipf(), Fingerprinter()
    stop = np.array(STOP)
    out = np.zeros(count, dtype=[("v", "<u8"), ("v2", "<u8"), ("sk", "u1", SKETCH_BYTES)])
    for i in range(count):
        n = int(rng.integers(150, 900))
        body = words[zipf.sample(rng, n).astype(np.int64)]
        is_stop = rng.random(n) < 0.3
        body[is_stop] = stop[rng.integers(0, len(stop), int(is_stop.sum()))]
        text = " ".join(" ".join(body[j:j + 18]) + "." for j in range(0, n, 18))
        f = fp.fingerprint_text(text)
        out[i] = (f.value, f.value2, np.frombuffer(f.sketch, np.uint8))
    return out


def articles(n, seed, procs=2):
    step = 2_000
    jobs = [(seed * 1_000_003 + k, min(step, n - k)) for k in range(0, n, step)]
    with Pool(procs) as pool:
        return np.concatenate(pool.map(_articles, jobs))


def distractors():
    folder = DATA / "distractors-dragnet"
    if not folder.is_dir():
        return None
    fp = Fingerprinter()
    rows = []
    for path in sorted(folder.glob("*.gz")):
        try:
            f = fp.fingerprint_html(gzip.open(path).read())
        except SkippedPage:
            continue
        rows.append((f.value, f.value2, np.frombuffer(f.sketch, np.uint8)))
    out = np.zeros(len(rows), dtype=[("v", "<u8"), ("v2", "<u8"), ("sk", "u1", SKETCH_BYTES)])
    for i, r in enumerate(rows):
        out[i] = r
    return out


def count(index, queries, banded=None):
    """(candidates, matches at 5 bins, matches at 6 bins) summed over the
    look-ups. ``banded``: an index with sketch bands over the same pages,
    whose bands' candidates count too (passing with one bin more, as the
    index takes them)."""
    cand = np.zeros(3, np.int64)
    for q in queries:
        found = index.query(int(q["v"]), int(q["v2"]), q["sk"].tobytes(), first=False)
        cand[0] += len(found)
        for m in found:
            agree = int(round(m.similarity * (1 - 1 / 256) * 32 + 32 / 256))
            cand[1] += agree >= 5
            cand[2] += agree >= 6
        if banded is not None:
            _, agree, _ = banded.bands.query(q["sk"], int(q["v"]), int(q["v2"]),
                                             banded.band_pair_limit, 0)
            cand[0] += len(agree)
            cand[1] += int((agree >= 6).sum())
            cand[2] += int((agree >= 7).sum())
    return cand


def binomial(need):
    c = 1 / 256
    return sum(comb(32, k) * c ** k * (1 - c) ** (32 - k) for k in range(need, 33))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", default="1e5,1e6")
    ap.add_argument("--queries", type=int, default=5000)
    ap.add_argument("--bands", type=int, default=DEFAULT_BANDS,
                    help=f"the index with B sketch bands too (default {DEFAULT_BANDS}, the "
                         "crawl's; 0: none)")
    args = ap.parse_args(argv)
    if not 0 <= args.bands <= 16:
        ap.error("--bands: 0..16")
    variants = [("before (no pair rule)", 128, 0), ("pair rule", None, 0)]
    if args.bands:
        variants.append((f"pair rule + {args.bands} bands", None, args.bands))
    sizes = [int(float(x)) for x in args.n.split(",")]
    print(f"# run {time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime())} on {os.cpu_count()} cores")
    t0 = time.time()
    stored = articles(max(sizes), seed=1)
    fresh = articles(args.queries, seed=2)
    real = distractors()
    print(f"fingerprinted {len(stored) + len(fresh):,} synthetic articles"
          f"{'' if real is None else f' and {len(real):,} distractors'} in {time.time() - t0:.0f}s")
    groups = {"synthetic": fresh}
    if real is not None:
        groups["distractors"] = real
    rows = {}
    for n in sizes:
        for label, limit, bands in variants:
            index = VerifiedIndex(min_similarity=0.0, pair_limit=limit)
            index.add(stored["v"][:n], stored["v2"][:n], stored["sk"][:n])
            banded = None
            if bands:
                banded = VerifiedIndex(bands=bands)
                banded.add(stored["v"][:n], stored["v2"][:n], stored["sk"][:n])
            for g, queries in groups.items():
                t = time.time()
                c = count(index, queries, banded)
                rows[label, g, n] = (c, len(queries))
                print(f"n {n:>10,}  {label:<24} {g:<12} look-ups {len(queries):>5}  "
                      f"candidates/look-up {c[0] / len(queries):8.1f}  matches at 5 bins {c[1]:4d}"
                      f"  at 6 bins {c[2]:4d}  ({time.time() - t:.0f}s)", flush=True)
    print("\nprojected to 10^7 pages (candidates per look-up as a power of n; pass rate pooled):")
    target_ok = True
    for label, _, _ in variants:
        for g in groups:
            per = [rows[label, g, n][0][0] / rows[label, g, n][1] for n in sizes]
            if len(sizes) > 1 and per[0] > 0 and per[-1] > 0:
                slope = np.log(per[-1] / per[0]) / np.log(sizes[-1] / sizes[0])
            else:
                slope = 1.0
            cand7 = per[-1] * (1e7 / sizes[-1]) ** slope
            total = sum(rows[label, g, n][0][0] for n in sizes)
            for need, name in PASSES.items():
                passed = sum(rows[label, g, n][0][need - 4] for n in sizes)
                rate, src = (passed / total, "measured") if passed and total else \
                    (binomial(need), "binomial")
                proj = cand7 * rate
                if label == variants[-1][0] and need == DEFAULT_NEED:
                    target_ok = target_ok and proj <= 1e-3
                bound = f", at most {cand7 * 3 / total:.1e} (95%)" if not passed and total else ""
                print(f"  {label:<24} {g:<12} min_similarity {name}: {cand7:9.1f} candidates x "
                      f"{rate:.2e} ({src}, {passed} passes in {total:,}) = {proj:.2e} per look-up"
                      f"{bound}  (growth n^{slope:.2f})")
    print(f"target (the defaults: {variants[-1][0]}, {DEFAULT_NEED} bins): <= 1e-3 chance "
          f"matches per look-up at 10^7: {'PASS' if target_ok else 'FAIL'}")


if __name__ == "__main__":
    main()
