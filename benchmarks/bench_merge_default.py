"""``simdup merge`` at the crawls' default rule, on real near-duplicates among many pages.

    .venv/bin/python benchmarks/bench_merge_default.py [--n 1e7] [--m 1e6] [--configs 15:127,13:34]
        [--baseline ../base] [--repeat 3]

The real labelled pages (spotsigs-dev stories among distractors-dragnet
pages, in the online protocol's order) are split in two: the first half goes
into the collection ``H`` among ``n`` unrelated background pages (random keys
and sketches), the second half into one pending batch ``Q`` among ``m``
background pages. ``Q`` is merged against ``H`` at the defaults (radius 22,
the pair rule, 6 of 32 sketch bins; PSM-F, no commit), in a child process
(CPU time, peak RSS), and the real pages of ``Q`` that found a match are
compared with the ones an exact merge (``--exact``) finds among the real
pages alone (the background pages never pass the rule). Printed: CPU
seconds, header bits and probes per key, element recall against the exact
merge, the recall the merge states (``MergeSummary.expected_recall``), and
precision (a match of the page's story).

``--configs T:K,...`` runs the merge at other header lengths and probe
counts too (``--grid``: a grid of them; a smaller workload is enough to
rank them).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
# a worker of --baseline runs the merge of another checkout (built in place)
sys.path.insert(0, os.environ.get("BENCH_MERGE_CODE") or str(HERE.parent))

from scrapy_simdup.merge.collection import H_DTYPE, PAIR_DTYPE, Collection
from scrapy_simdup.storage.batchfile import BATCH_DTYPE, header_weights, write_batch

WORK = HERE / ".cache" / "bench_merge_default"


def log(*a):
    print(*a, flush=True)


def _background(k: int, rng):
    """Keys, weights and sketches of ``k`` unrelated pages."""
    v1 = rng.integers(0, 2**63, k, dtype=np.int64).astype(np.uint64) * np.uint64(2) + \
        rng.integers(0, 2, k, dtype=np.int64).astype(np.uint64)
    v2 = rng.integers(0, 2**63, k, dtype=np.int64).astype(np.uint64) * np.uint64(2) + \
        rng.integers(0, 2, k, dtype=np.int64).astype(np.uint64)
    sk = rng.integers(0, 256, (k, 32), dtype=np.uint8)
    return v1, v2, sk


def _real():
    """(stories, values, values2, W, W2, sketches) of the real pages, protocol order."""
    cache = WORK / "real.npz"
    if cache.exists():
        z = np.load(cache, allow_pickle=True)
        return [z[k] for k in ("stories", "v1", "v2", "W", "W2", "sk")]
    from bench_index_default import real_pages

    pages = [(s, fp) for s, fp in real_pages(log) if fp is not None]
    out = [np.array([s or "" for s, _ in pages], dtype=object),
           np.array([fp.value for _, fp in pages], dtype=np.uint64),
           np.array([fp.value2 for _, fp in pages], dtype=np.uint64),
           np.array([fp.W for _, fp in pages], dtype=np.float64),
           np.array([fp.W2 for _, fp in pages], dtype=np.float64),
           np.array([np.frombuffer(fp.sketch, np.uint8) for _, fp in pages], dtype=np.uint8)]
    WORK.mkdir(parents=True, exist_ok=True)
    np.savez(cache, stories=out[0], v1=out[1], v2=out[2], W=out[3], W2=out[4], sk=out[5])
    return out


def build(n: int, m: int, seed: int = 3):
    """Write H (``n`` pages: background, then the first half of the real
    ones at random rows) and Q (``m`` pages: the second half among
    background); returns (crawl dir, collection dir, Q positions of the
    real pages, H ids of the real pages)."""
    stories, v1, v2, W, W2, sk = _real()
    half = len(v1) // 2
    root = WORK / f"n{n}-m{m}-s{seed}"
    meta_path = root / "real.json"
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        return root / "crawl", root / "collection", meta["q_pos"], meta["h_ids"]
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    h_ids = np.sort(rng.choice(n, half, replace=False))
    q_pos = np.sort(rng.choice(m, len(v1) - half, replace=False))
    coll = Collection(root / "collection", create=True)
    chunk = 1 << 20
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        run = np.empty(e - s, dtype=H_DTYPE)
        run["value"], run["value2"], run["sketch"] = _background(e - s, rng)
        run["id"] = np.arange(s, e)
        inside = (h_ids >= s) & (h_ids < e)
        rows = h_ids[inside] - s
        real = np.flatnonzero(inside)
        run["value"][rows], run["value2"][rows], run["sketch"][rows] = v1[real], v2[real], sk[real]
        coll.append(run, [f"https://bg{i % 997}.example/h/{i}" for i in range(s, e)],
                    np.zeros(0, dtype=PAIR_DTYPE), {})
        log(f"  H: {e:,}/{n:,}")
    rec = np.empty(m, dtype=BATCH_DTYPE)
    rec["value"], rec["value2"], rec["sketch"] = _background(m, rng)
    Wq = rng.normal(0, 1, (m, 64))
    W2q = rng.normal(0, 1, (m, 64))
    rec["value"][q_pos], rec["value2"][q_pos], rec["sketch"][q_pos] = \
        v1[half:], v2[half:], sk[half:]
    Wq[q_pos], W2q[q_pos] = W[half:], W2[half:]
    rec["cq"], rec["wrms"] = header_weights(Wq)
    rec["cq2"], rec["wrms2"] = header_weights(W2q)
    rec["id"] = np.arange(m)
    write_batch(root / "crawl", "batch-00000001-0", rec,
                [f"https://bg{i % 997}.example/q/{i}" for i in range(m)])
    meta_path.write_text(json.dumps({"q_pos": q_pos.tolist(), "h_ids": h_ids.tolist()}))
    return root / "crawl", root / "collection", q_pos.tolist(), h_ids.tolist()


def exact_reference() -> set:
    """The real pages of Q (by their index in the second half) that an exact
    merge of the real pages alone matches."""
    stories, v1, v2, W, W2, sk = _real()
    half = len(v1) // 2
    crawl, coll_dir, q_pos, h_ids = build(half, len(v1) - half, seed=0)
    from scrapy_simdup.merge import merge

    s = merge([crawl], coll_dir, exact=True, first=False, commit=False, progress=False,
              chunk_size=1 << 20)
    pairs = s.pairs_array
    return {int(q) - half for q in pairs["id"]}


def worker(args) -> None:
    from scrapy_simdup.merge import merge
    from scrapy_simdup.merge import run as run_mod

    if args.t is not None:
        run_mod.header_bits = lambda *_: args.t
    kw = {}
    if args.probes is not None:
        kw["probes"] = args.probes
    c0 = time.process_time()
    s = merge([args.crawl], args.collection, commit=False, progress=False, first=True,
              chunk_size=args.chunk, **kw)
    cpu = time.process_time() - c0
    pairs = s.pairs_array
    print(json.dumps({"cpu": cpu, "probes": s.probes, "t": getattr(s, "header_bits", None),
                      "expected_recall": getattr(s, "expected_recall", None),
                      "ids": pairs["id"].tolist(), "dup": pairs["duplicate_of"].tolist(),
                      "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def run_one(crawl, coll_dir, chunk, t=None, probes=None, code=None) -> dict:
    cmd = [sys.executable, __file__, "--worker", "--crawl", str(crawl), "--collection",
           str(coll_dir), "--chunk", str(chunk)]
    if t is not None:
        cmd += ["--t", str(t)]
    if probes is not None:
        cmd += ["--probes", str(probes)]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "BENCH_MERGE_CODE": code or ""}
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=float, default=1e7)
    ap.add_argument("--m", type=float, default=1e6)
    ap.add_argument("--grid", action="store_true")
    ap.add_argument("--configs", default="", help="T:K,... header bits and probes to run too")
    ap.add_argument("--baseline", help="a checkout of the code before (built in place): its "
                    "merge at its defaults, in the same run, and the ratio")
    ap.add_argument("--repeat", type=int, default=1, help="run the defaults (and the "
                    "baseline) this many times, alternating; the ratio takes the least CPU")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--crawl", help=argparse.SUPPRESS)
    ap.add_argument("--collection", help=argparse.SUPPRESS)
    ap.add_argument("--chunk", type=int, default=1 << 20, help=argparse.SUPPRESS)
    ap.add_argument("--t", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--probes", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    if args.worker:
        return worker(args)
    n, m = int(args.n), int(args.m)
    stories = _real()[0]
    half = len(stories) // 2
    exact = exact_reference()
    log(f"# bench_merge_default: Q = {m:,} pages ({len(stories) - half:,} real) merged into "
        f"H = {n:,} ({half:,} real), radius 22, PSM-F, one process")
    log(f"exact merge of the real pages alone: {len(exact)} of Q's real pages have a match")
    t0 = time.perf_counter()
    crawl, coll_dir, q_pos, h_ids = build(n, m)
    log(f"workload ready in {time.perf_counter() - t0:.0f} s")
    pos_to_real = {p: i for i, p in enumerate(q_pos)}
    h_story = {h: stories[i] for i, h in enumerate(h_ids)}
    # the defaults (and the baseline's) --repeat times, alternating: the ratio
    # takes the least CPU of each, as CPU time on a shared machine only grows
    configs = []
    for _ in range(args.repeat):
        configs.append((None, None, None))
        if args.baseline:
            configs.append((None, None, args.baseline))
    if args.grid:
        configs += [(t, k, None) for t in (10, 11, 12, 13, 14, 15) for k in (16, 32, 64, 128)]
    configs += [(*(int(x) for x in c.split(":")), None) for c in args.configs.split(",") if c]
    log(f"{'t':>3} {'probes':>6}  {'CPU s':>7}  {'recall':>6} {'stated':>6}  {'P':>5}  "
        f"{'pairs':>6}  {'peak MB':>7}")
    cpu = {}
    for t, k, code in configs:
        r = run_one(crawl, coll_dir, 1 << 20, t, k, code)
        if t is None:       # the defaults, of this code or of the baseline
            cpu[code] = min(cpu.get(code, r["cpu"]), r["cpu"])
        found, correct, flagged = set(), 0, 0
        for qid, dup in zip(r["ids"], r["dup"]):
            pos = qid - n
            if pos not in pos_to_real:
                continue
            i = pos_to_real[pos]
            found.add(i)
            flagged += 1
            other = h_story.get(dup)
            if other is None and dup >= n and (dup - n) in pos_to_real:
                other = stories[half + pos_to_real[dup - n]]
            mine = stories[half + i]
            if not mine and not other:
                flagged -= 1        # two distractors: no label says (as spotsigs-dev/README)
                continue
            correct += bool(other) and other == mine
        recall = len(found & exact) / max(1, len(exact))
        stated = r["expected_recall"]
        log(f"{r['t'] if r['t'] is not None else '-':>3} {r['probes']:>6}  {r['cpu']:7.1f}  "
            f"{recall:6.3f} {'-' if stated is None else format(stated, '.3f'):>6}  "
            f"{correct / max(1, flagged):5.3f}  {len(r['ids']):>6}  {r['rss_mb']:7.0f}"
            + ("  (defaults)" if t is None and code is None else "")
            + ("  (defaults of the baseline)" if code else ""))
    if args.baseline:
        log(f"defaults: {cpu[args.baseline] / cpu[None]:.2f}x faster than the baseline's "
            f"(CPU seconds, same run{f', least of {args.repeat} each' if args.repeat > 1 else ''})")


if __name__ == "__main__":
    main()
