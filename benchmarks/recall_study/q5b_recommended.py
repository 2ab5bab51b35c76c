"""Q5b: the recommended design and its neighbours under PSM (t = 17, i.e. a 1M-page index;
t = 9 = this 2.5k set's own header, where 2048 probes are exhaustive), threshold / sketch /
budget sensitivity."""
import sys
sys.path.insert(0, "/tmp/r19/scripts")
from common import *
from verifiers import get, nbytes
d = Data(); ds = Data(mixed=False)
spot_idx = np.flatnonzero(~d.distractor)
feat = features(d.html)
Ks = [get(f"K{s}") for s in range(2)]
R = {}
for s in range(2):
    vals, W, valid = simhashes(feat, s)
    for t in (17, 9):
        R[(s, t)] = psm_ranks(vals, W, valid, t, f"default_s{s}")
print(f"{'sketch':<10} {'J>=':>4} {'r':>3} {'t':>3} {'P/key':>6} | mixed P R F1       | spot-only P R F1   | flags on distractors")
for sk in ("OPH128b8", "OPH64b8", "OPH256b8"):
    for J in (0.1, 0.15, 0.2, 0.25):
        Vm = get(sk) <= 1 - J + 1e-6
        for r in (20, 22, 24):
            for t, P in ((9, 2048), (17, 1024), (17, 2048), (17, 4096)):
                if (sk != "OPH128b8" or r != 22) and (t, P) not in ((17, 2048),):
                    continue
                gate = ((Ks[0] <= r) & (R[(0, t)] <= P)) | ((Ks[1] <= r) & (R[(1, t)] <= P))
                M = np.where(gate & Vm, np.float32(0), INF)
                p, rr, f, nf, nc, fd = Online(d, M).prf(0)
                ps, rs, fs, *_ = Online(ds, sub(M, spot_idx)).prf(0)
                print(f"{sk:<10} {J:>4} {r:>3} {t:>3} {P:>6} | {fmt(p, rr, f)} | {fmt(ps, rs, fs)} | {fd}", flush=True)
