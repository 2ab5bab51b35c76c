"""Q5: candidate designs end to end: L keys at radius r (PSM, shipped model, per-key budget),
verification sketch + threshold. Online P/R/F1 on spotsigs-dev + distractors (D-D pairs
not counted), strict (D-D counted) and spot-only; projected 1M-page costs.

1M projections (N = 1e6, t = header bits, b = N / 2^t entries per bucket):
  * entries scanned / query = L * P * b
  * unrelated candidates verified / query = L * sum over the first P probes of
    b * P[Binomial(64 - t, 1/2) <= r - s_k]  (s_k = header bits flipped by probe k; VOSH
    order of each query's own W, averaged over the spot queries) -- unrelated keys are
    binomial (SxD distances: mean 32.02, sd 3.99)
  * chance false flags / query = candidates verified x P(sketch passes | unrelated), with
    the sketch's pass probability from the binomial of b-bit matches given the exact
    Jaccard of each SxD pair within key distance 24 (OPH), or a normal fit (S6)."""
import sys, time
from math import comb
from scipy.stats import binom
sys.path.insert(0, "/tmp/r19/scripts")
from common import *
from verifiers import get, nbytes
from scrapy_simdup import _psm
from scrapy_simdup._volatility import VolatilityModel

t0 = time.time()
d = Data(); ds = Data(mixed=False); dst = Data(strict=True)
spot_idx = np.flatnonzero(~d.distractor)
feat = features(d.html)
N = 1_000_000
Ks, VW = [], []
for s in range(4):
    vals, W, valid = simhashes(feat, s)
    Ks.append(get(f"K{s}")); VW.append((vals, W, valid))
RANKS = {}


def ranks(s, t):
    if (s, t) not in RANKS:
        vals, W, valid = VW[s]
        RANKS[(s, t)] = psm_ranks(vals, W, valid, t, f"default_s{s}")
    return RANKS[(s, t)]


# ---- chance pass probability of each sketch for an unrelated candidate
a_, b_ = d.iu
sd = d.distractor[a_] ^ d.distractor[b_]
cand_sd = sd & (Ks[0][d.iu] <= 24)
Jsd = 1 - get("JAC")[d.iu][cand_sd]
Jsd = np.clip(Jsd, 0, 1)
print(f"SxD pairs within key distance 24: {cand_sd.sum()}; exact Jaccard mean {Jsd.mean():.4f}, 99.9% {np.quantile(Jsd, .999):.3f}, max {Jsd.max():.3f}")


def chance_pass(sketch, thr):
    if sketch.startswith("OPH"):
        K, b = map(int, sketch[3:].split("b"))
        c = 2.0 ** -b
        f = thr * (1 - c) + c                       # match fraction needed
        m = int(np.ceil(f * K - 1e-9))
        p = Jsd + (1 - Jsd) * c
        return float(binom.sf(m - 1, K, p).mean())
    if sketch.startswith("S"):
        x = get(sketch)[d.iu][cand_sd]
        return normal_tail(x, thr)
    return float("nan")


# ---- unrelated candidates verified per probe (analytic) at 1M
_FC = {}


def fc_per_query(t, r, P, nq=150):
    key = (t, r, P)
    if key in _FC:
        return _FC[key]
    model = VolatilityModel.default()
    vals, W, valid = VW[0]
    q = spot_idx[:nq]
    cdf = binom.cdf(np.arange(0, 65), 64 - t, 0.5)
    tot = 0.0
    for i in q:
        masks, fl = _psm.flip_masks_c(model._c, np.ascontiguousarray(W[i]), t, 8, P)
        rem = r - fl.astype(int)
        tot += np.where(rem >= 0, cdf[np.clip(rem, 0, 64)], 0).sum()
    _FC[key] = tot / len(q) * N / 2 ** t
    return _FC[key]


def evaluate(L, r, sketch, thr, t=None, P=None):
    D = get(sketch)
    Vm = D <= thr
    gate = np.zeros((d.n, d.n), bool)
    for k in range(L):
        g = Ks[k] <= r
        if P is not None:
            g &= ranks(k, t) <= P
        gate |= g
    Dg = np.where(gate & Vm, np.float32(0), INF)
    out = []
    for dd, M in ((d, Dg), (dst, Dg), (ds, sub(Dg, spot_idx))):
        out.append(Online(dd, M).prf(0))
    return out


DESIGNS = [  # L, r, sketch, threshold (distance units: 1 - J for OPH, bits for S)
    (1, 16, "OPH128b8", 0.85 + 1e-6),
    (1, 22, "OPH128b8", 0.85 + 1e-6),
    (2, 20, "OPH128b8", 0.85 + 1e-6),
    (2, 22, "OPH128b8", 0.85 + 1e-6),
    (3, 20, "OPH128b8", 0.85 + 1e-6),
    (4, 18, "OPH128b8", 0.85 + 1e-6),
    (2, 22, "OPH64b8", 0.85 + 1e-6),
    (2, 22, "OPH128b8", 0.80 + 1e-6),
    (2, 22, "OPH128b8", 0.75 + 1e-6),
    (2, 22, "S6", 135),
    (2, 22, "S6", 150),
]


def lab(sk, thr):
    return f"{sk} {'J>=' + format(1 - thr + 1e-6, '.2f') if sk.startswith('OPH') else '<=' + str(thr)}"


print("\n-- Table 5a: exhaustive radius search (every stored page within r of any key is verified)")
print(f"{'L':>2} {'r':>3} {'sketch':<18} {'bytes':>5} | mixed P R F1       | strict(D-D counted) | spot-only          | 1M: FC/q exhaustive  chance-pass/cand  false flags/q")
for L, r, sk, thr in DESIGNS:
    (m, st, sp) = evaluate(L, r, sk, thr)
    fcq = L * binom_tail(r) * N
    cp = chance_pass(sk, thr)
    by = L * 16 + nbytes(sk)
    print(f"{L:>2} {r:>3} {lab(sk, thr):<18} {by:>5} | {fmt(*m[:3])} | {fmt(*st[:3])} | {fmt(*sp[:3])} | {fcq:10.3g} {cp:12.2g} {fcq * cp:10.2g}", flush=True)
print("   bytes = L x 16 (uint64 key + int64 id per PSM table, as PSMIndex stores them) + sketch")

print("\n-- Table 5b: PSM with a per-key probe budget P (total L x P), header t; 1M costs")
print(f"{'L':>2} {'r':>3} {'sketch':<18} {'t':>3} {'P/key':>6} {'total':>6} | mixed P R F1       | strict             | spot-only          | 1M: entries scanned/q  unrelated cand. verified/q  chance false flags/q")
for L, r, sk, thr in [(1, 22, "OPH128b8", 0.85 + 1e-6), (2, 22, "OPH128b8", 0.85 + 1e-6),
                      (3, 20, "OPH128b8", 0.85 + 1e-6), (2, 20, "OPH128b8", 0.85 + 1e-6)]:
    for t in (17, 14, 12):
        for P in (256, 1024, 2048, 4096, 8192):
            if t == 12 and P > 4096:
                continue
            (m, st, sp) = evaluate(L, r, sk, thr, t, P)
            hdr = sum(comb(t, k) for k in range(9))
            Pe = min(P, hdr)
            scanned = L * Pe * N / 2 ** t
            fcv = L * fc_per_query(t, r, Pe)
            cp = chance_pass(sk, thr)
            print(f"{L:>2} {r:>3} {lab(sk, thr):<18} {t:>3} {Pe:>6} {L * Pe:>6} | {fmt(*m[:3])} | {fmt(*st[:3])} | {fmt(*sp[:3])} | {scanned:10.3g} {fcv:12.3g} {fcv * cp:14.2g}", flush=True)
print(f"\n{time.time() - t0:.0f}s")
