"""Fit the default bit-volatility model shipped with scrapy-simdup.

    .venv/bin/python benchmarks/calibrate_volatility.py [--pairs 20000] [--out PATH]

writes ``scrapy_simdup/data/volatility_default.json`` (see ``scrapy_simdup/index/volatility.py`` for
the model and how it is estimated). Data: near-duplicate pairs (page, edited
variant) from ``benchmarks/_workload.py``: the *tune* half of the real pages
in ``../shared/data`` (20% of pairs) and synthetic Zipf-vocabulary pages,
fingerprinted with word 3-shingles, unit weight per occurrence. The benchmark
(`bench_index.py`) uses the *report* half and other seeds.

Re-fit on the production feature pipeline: pass ``--features pipeline`` to
fingerprint the real pages' variants with ``scrapy_simdup.Fingerprinter``
(main-content extraction, log-tf weights) instead of the workload's shingles.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from _workload import Corpus, pairs, real_docs

from scrapy_simdup import VolatilityModel
from scrapy_simdup.index.volatility import _DEFAULT_PATH, RECALL_LEVELS, normalise


def pipeline_pairs(n_pairs, max_distance, seed):
    """Pairs fingerprinted by the production Fingerprinter on edited text."""
    from _data import load_all, split

    from scrapy_simdup import Fingerprinter
    from scrapy_simdup._ext import hashing
    fp = Fingerprinter()
    tune, _ = split(load_all())
    rng = np.random.default_rng(seed)
    texts = []
    for rec in tune:
        try:
            text, _, _ = fp.extract_text_html(rec.html)
        except Exception:  # noqa: BLE001
            continue
        sents = [s for s in text.replace("\n", ". ").split(". ") if s.strip()]
        if len(sents) >= 5:
            texts.append(sents)
    out = {k: [] for k in ("base_value", "base_W", "var_value", "var_W", "distance")}
    tries = 0
    while len(out["distance"]) < n_pairs and tries < 50 * n_pairs:
        tries += 1
        sents = list(texts[int(rng.integers(len(texts)))])
        other = texts[int(rng.integers(len(texts)))]
        edited = list(sents)
        for _ in range(max(1, int(rng.poisson(0.05 * len(sents))))):
            op = rng.random()
            i = int(rng.integers(len(edited)))
            if op < 0.35:
                edited[i] = other[int(rng.integers(len(other)))]
            elif op < 0.7:
                edited.insert(i, other[int(rng.integers(len(other)))])
            elif len(edited) > 3:
                del edited[i]
        try:
            h1, w1 = fp.features_text(". ".join(sents))
            h2, w2 = fp.features_text(". ".join(edited))
        except ValueError:  # a skipped page (too few features)
            continue
        va, Wa = hashing.simhash_hashes(h1, w1)
        vb, Wb = hashing.simhash_hashes(h2, w2)
        d = bin(int(va) ^ int(vb)).count("1")
        if d <= max_distance:
            for k, v in (("base_value", va), ("base_W", Wa), ("var_value", vb),
                         ("var_W", Wb), ("distance", d)):
                out[k].append(v)
    return {k: np.array(v) for k, v in out.items()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=12345)
    ap.add_argument("--features", choices=("workload", "pipeline"), default="workload")
    ap.add_argument("--out", default=_DEFAULT_PATH)
    ap.add_argument("--max-distance", type=int, default=16,
                    help="calibrate probe budgets for distances 1..N (default 16)")
    args = ap.parse_args(argv)
    t0 = time.time()
    max_d = args.max_distance
    if args.features == "workload":
        corpus = Corpus(args.seed)
        real = real_docs("tune")
        print(f"{len(real)} real pages (tune half) + synthetic pages")
        p = pairs(corpus, args.pairs, max_d, real=real, min_distance=0)
    else:
        p = pipeline_pairs(args.pairs, max_d, args.seed)
    print(f"{len(p['distance'])} pairs within distance {max_d} "
          f"(histogram {np.bincount(p['distance'], minlength=max_d + 1).tolist()}) "
          f"in {time.time() - t0:.0f}s")
    # both directions: the query may be either page of a pair
    W_self = np.concatenate([p["base_W"], p["var_W"]])
    W_other = np.concatenate([p["var_W"], p["base_W"]])
    v_self = np.concatenate([p["base_value"], p["var_value"]]).astype(np.uint64)
    v_other = np.concatenate([p["var_value"], p["base_value"]]).astype(np.uint64)
    dist = np.concatenate([p["distance"], p["distance"]])
    fit_rows = dist <= 3
    model = VolatilityModel.fit(W_self[fit_rows], W_other[fit_rows], meta={
        "source": f"benchmarks/calibrate_volatility.py --features {args.features} "
                  f"--pairs {args.pairs} --seed {args.seed}",
        "features": "word 3-shingles, unit weights" if args.features == "workload"
                    else "scrapy_simdup.Fingerprinter defaults",
        "fit_pairs": "pairs within Hamming distance 3, both directions",
    })
    # stability of the normalised change across page sizes
    rms = np.sqrt(np.mean(W_self[fit_rows] ** 2, axis=1))
    y = np.abs(W_other[fit_rows] - W_self[fit_rows]) / rms[:, None]
    edges = np.quantile(rms, [0, 0.25, 0.5, 0.75, 1.0])
    print("normalised |Y| quantiles (50/90/99%) by page size (rms(W) quartile):")
    for lo, hi in zip(edges[:-1], edges[1:]):
        sel = (rms >= lo) & (rms <= hi)
        q = np.quantile(y[sel], [0.5, 0.9, 0.99])
        print(f"  rms {lo:8.1f}..{hi:8.1f}: {q[0]:.3f} {q[1]:.3f} {q[2]:.3f}")
    # calibration check: predicted vs observed flip rate by predicted p bin
    c = normalise(W_self[fit_rows])
    pred = model.p(c)
    flipped = np.sign(W_self[fit_rows]) != np.sign(W_other[fit_rows])
    print("predicted p vs observed flip rate:")
    for lo, hi in ((0, 1e-3), (1e-3, 1e-2), (1e-2, 0.05), (0.05, 0.1), (0.1, 0.2), (0.2, 0.5)):
        sel = (pred >= lo) & (pred < hi)
        if sel.any():
            print(f"  p in [{lo:g}, {hi:g}): mean p {pred[sel].mean():.4f}  "
                  f"observed {flipped[sel].mean():.4f}  ({sel.sum()} bits)")
    for d in range(1, max_d + 1):
        rows = (dist >= 1) & (dist <= d)
        n = int(min(rows.sum(), 20000))
        sel = np.nonzero(rows)[0][:n]
        model.fit_probes(W_self[sel], v_self[sel], v_other[sel], d, header_bits=range(8, 31))
        tab = model.probes[d]
        print(f"distance {d}: probes for recall {RECALL_LEVELS[3]} at t=16/20/24/28: "
              f"{[tab.get(t, [None] * 9)[3] for t in (16, 20, 24, 28)]} ({n} pairs)")
    model.save(args.out)
    print(f"wrote {args.out} in {time.time() - t0:.0f}s: {model!r}")
    print("the verified index's recall table depends on this probe order: run "
          "benchmarks/calibrate_recall.py next")


if __name__ == "__main__":
    main()
