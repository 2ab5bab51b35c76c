"""Q3b: PSM probes with a volatility model calibrated on LOOSE near-duplicate pairs,
cross-fitted by story (2 folds of the 34 folders: the model used for a query is fitted on
the pairs of the other fold's folders). The shipped model was fitted on workload pairs
within Hamming distance 3 (3-shingles, unit weights).

Fit: VolatilityModel.fit(W_a, W_b) on both directions of every same-folder pair with
key distance <= 24 that the verifier (OPH128b8 J >= 0.15) accepts, for each seed's key."""
import sys, time
sys.path.insert(0, "/tmp/r19/scripts")
from common import *
from verifiers import get
from scrapy_simdup._volatility import VolatilityModel

t0 = time.time()
d = Data()
feat = features(d.html)
V = get("OPH128b8") <= 0.85 + 1e-6
n_true = d.has_true.sum()
fold = np.where(d.distractor, 0, d.cl % 2)          # distractor queries use fold-0's "other" = model 1
Ks, Rcf, Rdef = [], [], []
for s in range(4):
    vals, W, valid = simhashes(feat, s)
    K = get(f"K{s}")
    Ks.append(K)
    models = []
    for f in (0, 1):
        m = (~d.distractor) & (fold == f)
        pair = np.triu(d.same & V & (K <= 24) & m[:, None] & m[None, :], 1)
        a, b = np.nonzero(pair)
        Wa = np.concatenate([W[a], W[b]]); Wb = np.concatenate([W[b], W[a]])
        models.append(VolatilityModel.fit(Wa, Wb, meta={"source": f"r19 fold {f} seed {s}"}))
        if s == 0:
            print(f"seed {s} fold {f}: {a.size} pairs; model {models[-1]}")
    R0 = psm_ranks(vals, W, valid, 17, f"default_s{s}_calfold0", models[0])
    R1 = psm_ranks(vals, W, valid, 17, f"default_s{s}_calfold1", models[1])
    Rcf.append(np.where((fold == 0)[:, None], R1, R0))   # the other fold's model
    Rdef.append(psm_ranks(vals, W, valid, 17, f"default_s{s}"))
print(f"built in {time.time() - t0:.0f}s")
if True:
    vals, W, valid = simhashes(feat, 0)
    mdl = VolatilityModel.default()
    pd_ = mdl.flip_probabilities(W[valid]).mean()
    print(f"mean predicted flip probability per bit (shipped model) {pd_:.3f}")
print("\n  model     L  r | R exhaustive | total probes (t=17) for R>=0.95 | for 95% of exhaustive | R at total probes 64 / 256 / 1024 / 4096")
ok = d.et & V
for name, RR in (("shipped", Rdef), ("loose-cf", Rcf)):
    for L in (1, 2, 3, 4):
        for r in (14, 16, 18, 20, 22):
            need = np.full(d.n, NOT_REACHED, np.int64)
            for k in range(L):
                need = np.minimum(need, np.where(ok & (Ks[k] <= r), RR[k], NOT_REACHED).min(1))
            fa = need < NOT_REACHED
            s_ = np.sort(need[fa])
            tgt = int(np.ceil(0.95 * n_true))
            n95 = L * int(s_[tgt - 1]) if tgt <= s_.size else None
            rel = L * int(s_[int(np.ceil(0.95 * fa.sum())) - 1])
            at = lambda T: (need <= T // L).sum() / n_true
            print(f"  {name:<9} {L}  {r:>2} | {fa.sum() / n_true:.3f}        | {str(n95) if n95 else '-':>8} | {rel:>8} | {at(64):.3f} {at(256):.3f} {at(1024):.3f} {at(4096):.3f}", flush=True)
print(f"\n{time.time() - t0:.0f}s")
