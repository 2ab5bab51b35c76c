"""Why precision falls with distractors: distractor-distractor near-duplicates vs spot->distractor flags."""
import sys
sys.path.insert(0, "/tmp/r19/scripts")
from common import *
d = Data(mixed=True)
feat = features(d.html)
vals, W, valid = simhashes(feat)
K = hamming_matrix(vals, valid)
C = cosine_dist(feat)
J = jaccard_dist(feat)
texts = extract(d.html, "main")
o = Online(d, K)
DD = d.distractor[:, None] & d.distractor[None, :]
Df_spot = np.where(d.ef & ~DD, K, INF).min(1)   # false earlier pairs excluding distractor-distractor
for h in (6, 9, 12, 14, 16, 18, 20):
    flagged = np.minimum(o.Dt, o.Df) <= h
    corr = o.Dt <= h
    fs = flagged & ~d.distractor
    # variant A: only spot pages are queried (distractors only fill the index)
    pA = corr.sum() / max(1, fs.sum())
    # variant B: every page queried, distractor->distractor flags not counted
    fB = (np.minimum(o.Dt, Df_spot) <= h)
    pB = corr.sum() / max(1, fB.sum())
    print(f"h={h:>2}: all-pages P {corr.sum()/flagged.sum():.3f} | spot-pages-only P {pA:.3f} (flags {fs.sum()}, of which wrong {fs.sum()-corr.sum()}) | excl. D-D pairs P {pB:.3f} | flags on distractors {int((flagged & d.distractor).sum())}")
iu = d.iu
dd = DD[iu]
kk = K[iu][dd]; cc = 1 - C[iu][dd]; jj = 1 - J[iu][dd]
print("\ndistractor-distractor pairs within key distance 6:", (kk <= 6).sum(), " with cosine>=0.5:", ((kk <= 6) & (cc >= .5)).sum(), " jaccard>=0.5:", ((kk<=6)&(jj>=.5)).sum())
print("distractor-distractor pairs with cosine>=0.5:", (cc >= .5).sum(), " jaccard>=0.3:", (jj >= .3).sum())
a, b = iu[0][dd], iu[1][dd]
sel = np.flatnonzero(kk <= 6)[:8]
for s in sel:
    i, j = a[s], b[s]
    print(f"  {d.ids[i]} ~ {d.ids[j]}: key {int(kk[s])} cos {cc[s]:.2f} jac {jj[s]:.2f} len {len(texts[i])}/{len(texts[j])} | {texts[i][:70]!r} | {texts[j][:70]!r}")
