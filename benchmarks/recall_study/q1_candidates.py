"""Q1: candidate generation with the default 64-bit key (shingles+spots k=3 logtf main).

For radii r = 12..24: candidate recall of verified matches, candidates per query here and
projected to a 1M-page index, and PSM probes (shipped volatility model) for recall targets."""
import sys, time
from math import comb
sys.path.insert(0, "/tmp/r19/scripts")
from common import *
from verifiers import get

t0 = time.time()
d = Data()
feat = features(d.html)
vals, W, valid = simhashes(feat, 0)
K0 = get("S1")
VER = {"COS>=0.3 (exact, no sketch)": get("COS") <= 0.7 + 1e-6,
       "S6<=135 (48 B)": get("S6") <= 135,
       "OPH128b8 J>=0.15 (128 B)": get("OPH128b8") <= 0.85 + 1e-6}
RADII = list(range(12, 25, 2))
n_true = d.has_true.sum()
print(f"pages {d.n}, queries with an earlier same-folder page {n_true}")

print("\n-- Table 1a: candidate recall (R with key<=r and verification / R of the verification on all pairs) and P/R/F1 (mixed)")
for vn, vm in VER.items():
    V = np.where(vm, np.float32(0), INF)
    o_all = Online(d, V)
    p, r_all, f, *_ = o_all.prf(0)
    print(f"\n verifier {vn}: all pairs P {p:.3f} R {r_all:.3f} F1 {f:.3f}")
    print("   r | cand.recall | P     R     F1")
    for r in RADII:
        o = Online(d, gated(K0, r, V))
        p, rr, f, *_ = o.prf(0)
        print(f"  {r:>2} | {rr / r_all:.3f}       | {fmt(p, rr, f)}")

print("\n-- Table 1b: candidates per query (online: earlier pages within r of the key, mean over all 2,498 queries)")
print("  and projected false candidates per query in a 1M-page index")
a_, b_ = d.iu
sd = (d.distractor[a_] ^ d.distractor[b_])
Ksd = K0[d.iu][sd]
print("   r | here: all   true  SxS'  SxD   DxD  | 1M: binomial sum_{k<=r}C(64,k)/2^64*N | 1M: empirical SxD-pair rate*N | exhaustive 64-bit flips sum_{k<=r}C(64,k)")
for r in RADII:
    within = (K0 <= r) & d.earlier
    tot = within.sum(1).mean()
    tr = (within & d.same).sum(1).mean()
    dd = (within & d.DD).sum(1).mean()
    sdm = (within & (d.distractor[:, None] ^ d.distractor[None, :])).sum(1).mean()
    ssx = tot - tr - dd - sdm
    ex = sum(comb(64, k) for k in range(r + 1))
    print(f"  {r:>2} | {tot:7.2f} {tr:6.2f} {ssx:5.2f} {sdm:6.2f} {dd:5.2f} | {binom_tail(r) * 1e6:12.3g} | {(Ksd <= r).mean() * 1e6:10.3g} | {ex:.3g}")

print("\n-- Table 1c: PSM probes (VOSH, shipped model, <= 8 header bits) for the verified matches within r")
print("   (verifier S6<=135). t = 17 is the header of a 1M-page index (floor(log2 n) - 2); t = 9 of this 2.5k set.")
vm = VER["S6<=135 (48 B)"]
for t in (17, 9):
    R = psm_ranks(vals, W, valid, t, f"default_s0")
    hdr_total = sum(comb(t, k) for k in range(9))
    print(f"\n  t = {t}: exhaustive header probes sum_(k<=8) C({t},k) = {hdr_total}")
    print("   r | R exhaustive | R@10   R@100  R@1k   R@10k  R@all-header | probes for 95% of exhaustive | probes for R>=0.95 | pages whose match differs in >8 header bits")
    for r in RADII:
        ok = d.et & (K0 <= r) & vm
        best = np.where(ok, R, NOT_REACHED).min(1)
        ex = ok.any(1).sum()
        cnt = lambda P: (best <= P).sum()
        s = np.sort(best[ok.any(1)])
        need95rel = int(s[int(np.ceil(0.95 * ex)) - 1]) if ex else 0
        tgt = int(np.ceil(0.95 * n_true))
        need95abs = (int(s[tgt - 1]) if tgt <= s.size and s[tgt - 1] < NOT_REACHED else None)
        unreach = int((ok.any(1) & (best == NOT_REACHED)).sum())
        rel = lambda P: f"{cnt(P) / n_true:.3f}"
        n95 = str(need95rel) if need95rel < NOT_REACHED else "unreachable"
        print(f"  {r:>2} | {ex / n_true:.3f}        | {rel(10)}  {rel(100)}  {rel(1000)}  {rel(10000)}  {rel(10**7)}        | {n95:>10} | {str(need95abs) if need95abs else 'not reachable':>14} | {unreach}")
print(f"\n{time.time() - t0:.0f}s")
