"""Distance distributions of unrelated pairs by type, for the 1M-page projection.
  SxD = spot page x distractor page (different sources and years: the 'random web' population)
  SxS' = spot pages of different folders (same news week, same sites: unlabelled duplicates and shared boilerplate)
  DxD = distractor pairs (contain real duplicates: same site / identical text)"""
import sys
sys.path.insert(0, "/tmp/r19/scripts")
from common import *
from verifiers import get
d = Data(); iu = d.iu
a, b = iu
sd = d.distractor[a] ^ d.distractor[b]
ss = ~d.distractor[a] & ~d.distractor[b] & ~d.same[iu]
dd = d.distractor[a] & d.distractor[b]
K = get("S1")[iu]
print("pairs: SxD", sd.sum(), "SxS'", ss.sum(), "DxD", dd.sum())
for nm, m in (("SxD", sd), ("SxS'", ss), ("DxD", dd)):
    x = K[m]; x = x[x < INF]
    print(f"key64 {nm}: mean {x.mean():.2f} sd {x.std():.2f} (random: 32, 4.00); min {x.min():.0f}")
print("\n  h | binomial P(d<=h) x1e6 | normal fit SxD x1e6 | empirical SxD count (x1e6/pairs) | empirical SxS' | empirical DxD")
xs = K[sd]; xs = xs[xs < INF]
for h in range(8, 27, 2):
    print(f" {h:>2} | {binom_tail(h)*1e6:>10.3g} | {normal_tail(xs, h)*1e6:>10.3g} | {int((xs<=h).sum()):>6} ({(xs<=h).mean()*1e6:.3g}) | {int((K[ss]<=h).sum()):>5} ({(K[ss]<=h).mean()*1e6:.3g}) | {int((K[dd]<=h).sum()):>5} ({(K[dd]<=h).mean()*1e6:.3g})")
print("\nverifiers: pass counts of SxD / SxS' / DxD pairs")
for nm, thr in (("COS", [0.5, 0.3, 0.1]), ("JAC", [0.5, 0.3, 0.1]), ("OPH64b8", [0.3, 0.2, 0.1]), ("OPH128b8", [0.3, 0.2, 0.1]), ("S6", [135, 150])):
    V = get(nm)[iu]
    for t in thr:
        tt = t if nm.startswith("S") else 1 - t + 1e-6
        print(f"  {nm:<9} {'<=' if nm.startswith('S') else '>='} {t:<5}: SxD {int((V[sd]<=tt).sum()):>5}  SxS' {int((V[ss]<=tt).sum()):>5}  DxD {int((V[dd]<=tt).sum()):>5}")
# what are the SxD pairs passing cos >= 0.3?
C = get("COS")[iu]
texts = extract(d.html, "main")
sel = np.flatnonzero(sd & (C <= 0.7 + 1e-6))[:6]
for s in sel:
    i, j = a[s], b[s]
    print(f"  SxD cos {1-C[s]:.2f} key {int(K[s])}: {d.ids[i]} ({len(texts[i])} chars) ~ {d.ids[j]} ({len(texts[j])} chars) | {texts[i][:60]!r} | {texts[j][:60]!r}")
