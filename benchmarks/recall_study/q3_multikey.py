"""Q3: L independent 64-bit simhash keys (seeds: fmix64(h ^ C_s) of the feature hashes),
each searched at radius r; candidates = union. Verifier OPH128b8 J >= 0.15 (default features).
PSM: t = 17 (1M pages), VOSH order of the shipped model on each key's own W, the same
per-key budget P for every key (total probes L x P)."""
import sys, time
sys.path.insert(0, "/tmp/r19/scripts")
from common import *
from verifiers import get

t0 = time.time()
d = Data()
feat = features(d.html)
V = get("OPH128b8") <= 0.85 + 1e-6
Vd = np.where(V, np.float32(0), INF)
r_all = Online(d, Vd).prf(0)[1]
n_true = d.has_true.sum()
Ks, Rs = [], []
for s in range(4):
    vals, W, valid = simhashes(feat, s)
    Ks.append(get(f"K{s}"))
    Rs.append(psm_ranks(vals, W, valid, 17, f"default_s{s}"))
print(f"verifier all pairs R {r_all:.3f}; built in {time.time() - t0:.0f}s")
print("\n  L  r | cand.recall  P     R     F1   | 1M false cand./query (L x binomial) | total probes (t=17) for: 95% of exhaustive | R>=0.95 | R at total probes 64 / 256 / 1024 / 4096 / all")
for L in (1, 2, 3, 4):
    for r in (10, 12, 14, 16, 18, 20, 22):
        gate = union_gate(Ks[:L], r)
        o = Online(d, np.where(gate, Vd, INF))
        p, rr, f, *_ = o.prf(0)
        ok = d.et & V
        need = np.full(d.n, NOT_REACHED, np.int64)
        for k in range(L):
            best = np.where(ok & (Ks[k] <= r), Rs[k], NOT_REACHED).min(1)
            need = np.minimum(need, best)
        found_any = need < NOT_REACHED
        ex = found_any.sum()
        s_ = np.sort(need[found_any])
        n95rel = L * int(s_[int(np.ceil(0.95 * ex)) - 1])
        tgt = int(np.ceil(0.95 * n_true))
        n95abs = L * int(s_[tgt - 1]) if tgt <= s_.size else None
        at = lambda T: (need <= T // L).sum() / n_true
        print(f"  {L}  {r:>2} | {rr / r_all:.3f}      {fmt(p, rr, f)} | {L * binom_tail(r) * 1e6:10.3g} | {n95rel:>8} | {str(n95abs) if n95abs else '-':>8} | "
              f"{at(64):.3f} {at(256):.3f} {at(1024):.3f} {at(4096):.3f} {ex / n_true:.3f}", flush=True)
print(f"\n{time.time() - t0:.0f}s")
