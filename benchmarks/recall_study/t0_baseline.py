"""Table 0: reproduce the issue's figures (protocol check), spot-only and mixed."""
import sys, time
sys.path.insert(0, "/tmp/r19/scripts")
from common import *
t0 = time.time()
dm = Data(mixed=True)
feat = features(dm.html)
vals, W, valid = simhashes(feat)
# check against the product's fingerprint_html
fp = Fingerprinter()
bad = 0
for i in range(0, dm.n, 50):
    try:
        f = fp.fingerprint_html(dm.html[i]); ok = valid[i] and f.value == int(vals[i])
    except SkippedPage:
        ok = not valid[i]
    bad += not ok
print(f"check vs Fingerprinter().fingerprint_html on {len(range(0, dm.n, 50))} pages: {bad} mismatches; skipped pages {int((~valid).sum())} (spot {int((~valid & ~dm.distractor).sum())})")
K = hamming_matrix(vals, valid)
C = cosine_dist(feat)
for mixed in (False, True):
    d = Data(mixed=mixed)
    idx = np.arange(dm.n) if mixed else np.flatnonzero(~dm.distractor)
    oK = Online(d, sub(K, idx)); oC = Online(d, sub(C, idx))
    print(f"\n== {d.tag}: n={d.n}, pages with an earlier same-folder page {d.has_true.sum()}")
    print(" method            thr |  P     R     F1   | flags correct flags-on-distractors")
    for h in (6, 9, 12, 14, 16, 18, 20):
        p, r, f, nf, nc, fd = oK.prf(h); print(f" key64 h<=        {h:>4} | {fmt(p,r,f)} | {nf} {nc} {fd}")
    for c in (0.7, 0.5, 0.4, 0.3, 0.2):
        p, r, f, nf, nc, fd = oC.prf(1 - c + 1e-6); print(f" cosine>=        {c:>5} | {fmt(p,r,f)} | {nf} {nc} {fd}")
print(f"{time.time()-t0:.0f}s")
