"""Compute and cache verifier distance matrices on the default features (mixed page list).

Names: S{k}   sum of k seeded 64-bit simhash distances (S1 = the key alone), bits 64k
       OPH{K}b{b}  one-permutation minhash, K bins, b-bit values: 1 - J_hat
       KMH128b32   128-permutation minhash, 32-bit values (datasketch-like reference)
       COS, JAC    exact weighted cosine / exact Jaccard of the feature sets (no sketch)
"""
import sys, time
sys.path.insert(0, "/tmp/r19/scripts")
from common import *

BYTES = {}


def get(name, feat=None, tag="default"):
    p = CACHE / f"V_{tag}_{name}.npy"
    if p.exists():
        return np.load(p, mmap_mode=None)
    if feat is None:
        d = Data(); feat = features(d.html)
    valid = np.array([f is not None for f in feat])
    if name.startswith("K") and name[1:].isdigit():   # K{seed}: one seeded 64-bit key
        s = int(name[1:])
        v, W, _ = simhashes(feat, s)
        D = hamming_matrix(v, valid)
    elif name.startswith("S"):
        k = int(name[1:])
        D = sum(get(f"K{s}", feat, tag) for s in range(k)).astype(np.float32)
        D[D >= INF] = INF
    elif name.startswith("OPH"):
        K, b = map(int, name[3:].split("b"))
        M = get_oph(feat, K, tag)
        D = minhash_dist(M, valid, b)
    elif name == "KMH128b32":
        M = kperm_minhash(feat, 128)
        D = minhash_dist(M, valid, 32)
    elif name == "COS":
        D = cosine_dist(feat)
    elif name == "JAC":
        D = jaccard_dist(feat)
    np.save(p, D)
    return D


_OPH = {}


def get_oph(feat, K, tag):
    p = CACHE / f"OPH_{tag}_{K}.npy"
    if p.exists():
        return np.load(p)
    M = oph(feat, K)
    np.save(p, M)
    return M


def nbytes(name):
    if name.startswith("S"):
        return 8 * int(name[1:])
    if name.startswith("OPH"):
        K, b = map(int, name[3:].split("b"))
        return K * b // 8
    if name == "KMH128b32":
        return 512
    return None


if __name__ == "__main__":
    t = time.time()
    d = Data(); feat = features(d.html)
    names = ["S1", "S2", "S4", "S6", "S8", "OPH64b8", "OPH128b4", "OPH128b8", "OPH128b16",
             "OPH256b8", "OPH256b16", "OPH256b32", "KMH128b32", "COS", "JAC"]
    for nm in names:
        get(nm, feat); print(nm, f"{time.time()-t:.0f}s", flush=True)
