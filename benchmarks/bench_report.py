"""Re-scoring (``simdup rescore``) and the report (``simdup report``) of 10^5 fingerprints.

    python benchmarks/bench_report.py            # n = 100,000, thresholds 0.15, 0.3, 0.6
    python benchmarks/bench_report.py --n 20000  # smaller

Workload: ``n`` fingerprints written as crawl batch files (10,000 per batch)
at the default radius 22: half are distinct pages (random keys, weights
and sketches), half are near-duplicates of one of them, each key with 0-19
bits flipped (the low-|W| bits more likely, as in real edits) and 0-31 of
its 32 sketch bins redrawn, so similarities cover (0, 1] and every
threshold cuts somewhere. URLs spread over 50 hosts.

For each threshold: the seconds of :func:`rescore` (a fresh merge of every
batch into a throwaway collection) and a check that its pairs are exactly
those of ``merge`` into a new collection at that threshold (the reference);
then the seconds of the whole report (the re-scoring, each page's best
earlier match, the HTML). Single-threaded: wall seconds on a shared
machine may be inflated, CPU seconds are printed beside them.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from scrapy_simdup.merge import merge
from scrapy_simdup.merge.rescore import rescore
from scrapy_simdup.report import gather, render
from scrapy_simdup.storage.batchfile import BATCH_DTYPE, header_weights, write_batch

WORK = HERE / ".cache" / "bench_report"


def _signed(values, W):
    """Weights whose signs agree with the bits of ``values``."""
    bits = ((values[:, None] >> np.arange(64, dtype=np.uint64)) & np.uint64(1)).astype(bool)
    return np.where(bits, np.abs(W), -np.abs(W))


def _flip(values, W, k, rng):
    """Flip ``k[i]`` bits of each value, a bit with weight w with odds 1 / (|w| + 0.3)."""
    p = 1.0 / (np.abs(W) + 0.3)
    p /= p.sum(axis=1, keepdims=True)
    keys = -np.log(rng.random(p.shape)) / p            # weighted sampling without replacement
    order = np.argsort(keys, axis=1)
    mask = np.arange(64)[None, :] < k[:, None]
    flip = np.zeros(p.shape, dtype=bool)
    np.put_along_axis(flip, order, mask, axis=1)
    out = values ^ (flip.astype(np.uint64) << np.arange(64, dtype=np.uint64)).sum(
        axis=1, dtype=np.uint64)
    return out, np.where(flip, -W, W)


def build(n: int, seed: int = 1, per_batch: int = 10_000) -> Path:
    directory = WORK / f"n{n}-s{seed}"
    if (directory / "done").exists():
        return directory
    shutil.rmtree(directory, ignore_errors=True)
    rng = np.random.default_rng(seed)
    n_base = n // 2
    keys, weights = [], []
    for _ in range(2):
        v = rng.integers(0, 2**64, n_base, dtype=np.uint64)
        keys.append(v)
        weights.append(_signed(v, rng.normal(0, 1, (n_base, 64))))
    sketch = rng.integers(0, 256, (n_base, 32), dtype=np.uint8)
    src = rng.integers(0, n_base, n - n_base)
    var = [_flip(keys[k][src], weights[k][src], rng.integers(0, 20, len(src)), rng)
           for k in range(2)]
    vsk = sketch[src].copy()
    redraw = rng.random(vsk.shape) < rng.integers(0, 32, len(src))[:, None] / 32
    vsk[redraw] = rng.integers(0, 256, int(redraw.sum()), dtype=np.uint8)
    values = [np.concatenate([keys[k], var[k][0]]) for k in range(2)]
    W = [np.concatenate([weights[k], var[k][1]]) for k in range(2)]
    sk = np.concatenate([sketch, vsk])
    owner = np.concatenate([np.arange(n_base), src])
    order = rng.permutation(n)
    for s in range(0, n, per_batch):
        sel = order[s:s + per_batch]
        rec = np.zeros(len(sel), dtype=BATCH_DTYPE)
        rec["value"], rec["value2"], rec["sketch"] = values[0][sel], values[1][sel], sk[sel]
        rec["id"] = np.arange(s, s + len(sel))
        rec["cq"], rec["wrms"] = header_weights(W[0][sel])
        rec["cq2"], rec["wrms2"] = header_weights(W[1][sel])
        urls = [f"https://site{owner[i] % 50}.example/story/{owner[i]}?v={i}" for i in sel]
        write_batch(directory, f"batch-{s // per_batch + 1:08d}-1", rec, urls, distance=22)
    (directory / "done").write_text("ok")
    return directory


def _timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--thresholds", default="0.15,0.3,0.6")
    args = ap.parse_args()
    t0 = time.perf_counter()
    d = build(args.n)
    print(f"workload: {args.n:,} fingerprints in {d.relative_to(HERE.parent)} ({time.perf_counter() - t0:.1f} s to "
          f"build or find), distance 22")
    ok = True
    for s in (float(x) for x in args.thresholds.split(",")):
        res, wall, cpu = _timed(lambda s=s: rescore([d], distance=22, min_similarity=s))
        with tempfile.TemporaryDirectory() as tmp:
            fresh = merge([d], Path(tmp) / "fresh", distance=22, min_similarity=s)
        same = np.array_equal(res.pairs, fresh.pairs_array)
        ok &= same
        print(f"rescore --min-similarity {s:<5g} {wall:6.2f} s ({cpu:6.2f} CPU-s): "
              f"{len(res.pairs):,} pairs, {res.summary.duplicates:,} pages with an earlier "
              f"match; same pairs as a fresh merge: {'yes' if same else 'NO'}")
    data, wall, cpu = _timed(lambda: gather([d], distance=22, min_similarity=0.15))
    page, rwall, _ = _timed(lambda: render(data))
    print(f"report at 0.15: {wall:.2f} s ({cpu:.2f} CPU-s) to gather (re-scoring, best "
          f"earlier matches, hosts, patterns, clusters), {rwall:.2f} s to render "
          f"{len(page) / 1024:.0f} KiB of HTML; {data.totals['near_duplicates']:,} "
          f"near-duplicates, {data.n_clusters:,} clusters")
    if not ok:
        sys.exit("re-scoring and a fresh merge disagree")


if __name__ == "__main__":
    main()
