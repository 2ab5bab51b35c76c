"""Q2b: candidate recall at EQUAL projected false candidates per query at 1M pages.

A key whose unrelated pages are closer (unigrams: SxD mean 26 instead of 32) finds more
near-duplicates at a given r but also more unrelated pages. For each configuration pick the
largest r whose projected false candidates per query at 1M (normal fit to its SxD distances,
and the empirical SxD rate) stay below the default key's at r = 16 / 18 / 20 / 22
(normal fit of its SxD distances: 49 / 347 / 1,930 / 8,460), and report candidate recall there (fixed verifier
OPH128b8 J >= 0.15 on the default features)."""
import sys
sys.path.insert(0, "/tmp/r19/scripts")
from common import *
from verifiers import get

d = Data()
Vfix = np.where(get("OPH128b8") <= 0.85 + 1e-6, np.float32(0), INF)
r_fix = Online(d, Vfix).prf(0)[1]
a_, b_ = d.iu
sd = d.distractor[a_] ^ d.distractor[b_]
_f = features(d.html)
_v, _, _ok = simhashes(_f, 0)
_x = get("S1")[d.iu][sd]; _x = _x[_x < INF]
BUDGETS = [(r0, normal_tail(_x, r0) * 1e6) for r0 in (16, 18, 20, 22)]
CONFIGS = [("shingles+spots", 3, "logtf", "main", 16), ("shingles+spots", 2, "logtf", "main", 16),
           ("shingles", 2, "logtf", "main", 16), ("shingles", 2, "binary", "main", 16),
           ("shingles", 1, "logtf", "main", 16), ("shingles", 1, "binary", "main", 16),
           ("shingles", 3, "logtf", "main", 16), ("spots", 3, "logtf", "main", 16)]
print("budget = projected false candidates/query at 1M of the default key at r0 (normal fit of its SxD distances)")
print(f"{'configuration':<34} | " + " | ".join(f"r0={r0} ({b:.3g}): r  FC(fit) FC(emp)  cand.R" for r0, b in BUDGETS))
for feats, k, w, mode, mf in CONFIGS:
    feat = features(d.html, feats, k, w, mode, mf, order=d.order)
    vals, W, valid = simhashes(feat, 0)
    K = hamming_matrix(vals, valid)
    x = K[d.iu][sd]; x = x[x < INF]
    s = f"{feats + ' k=' + str(k) + ' ' + w:<34}"
    for r0, b in BUDGETS:
        r = max(rr for rr in range(0, 40) if normal_tail(x, rr) * 1e6 <= b * 1.0001)
        cr = Online(d, gated(K, r, Vfix)).prf(0)[1] / r_fix
        s += f" | {'':>8}{r:>2} {normal_tail(x, r) * 1e6:7.3g} {(x <= r).mean() * 1e6:7.3g}  {cr:.3f}"
    print(s, flush=True)
