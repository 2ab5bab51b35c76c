"""Sanity checks: (1) psm_ranks agrees with scrapy_simdup._psm.ranks_of; (2) the shipped
model's own probes_for_recall(0.95, t=17, h); (3) what the strict protocol's extra false
flags are (distractor pairs flagged by the recommended design: exact Jaccard / same text)."""
import sys
sys.path.insert(0, "/tmp/r19/scripts")
from common import *
from verifiers import get
from scrapy_simdup import _psm
from scrapy_simdup._volatility import VolatilityModel
d = Data(); feat = features(d.html)
vals, W, valid = simhashes(feat, 0)
R = psm_ranks(vals, W, valid, 17, "default_s0")
m = VolatilityModel.default()
rng = np.random.default_rng(0)
K0 = get("K0")
ii, jj = np.nonzero(d.et & (K0 <= 22))
sel = rng.choice(ii.size, 300, replace=False)
a = np.ascontiguousarray(vals[ii[sel]]); b = np.ascontiguousarray(vals[jj[sel]])
ref = _psm.ranks_of(m._c, np.ascontiguousarray(W[ii[sel]]), a, b, 17, 8, -1)
mine = R[ii[sel], jj[sel]].astype(np.int64); mine[mine == NOT_REACHED] = -1
print("(1) ranks_of vs psm_ranks on 300 true pairs within 22 bits (t=17):", int((ref == mine).sum()), "equal of 300")
print("(2) shipped model probes_for_recall(0.95, header_bits=17, distance=h) [calibrated on pairs within 3 bits]:",
      {h: m.probes_for_recall(0.95, 17, h) for h in (3, 6, 9, 12, 14, 16)})
# (3) recommended design, exhaustive: 2 keys r = 22, OPH128b8 J >= 0.15
V = get("OPH128b8") <= 0.85 + 1e-6
gate = ((get("K0") <= 22) | (get("K1") <= 22)) & V & d.earlier
J = 1 - get("JAC")
dd_flag = d.distractor & (gate & d.DD).any(1) & ~(gate & ~d.DD).any(1)
print(f"(3) distractor pages flagged only through D-D pairs (strict-protocol false flags): {dd_flag.sum()}")
texts = extract(d.html, "main")
jm = np.where(gate & d.DD, J, -1).max(1)[dd_flag]
same_text = sum(any(texts[i] == texts[j] for j in np.flatnonzero((gate & d.DD)[i])) for i in np.flatnonzero(dd_flag))
print(f"    their best D-D match: exact Jaccard quantiles 10/50/90% {np.quantile(jm, [.1, .5, .9]).round(2)}; identical extracted text: {same_text}")
