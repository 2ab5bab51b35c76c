"""Load pages, extract main/visible text once (cached)."""
import sys, time
sys.path.insert(0, "/tmp/r19/scripts")
from common import *
t = time.time()
d = Data(mixed=True)
print(d.n, "pages", d.distractor.sum(), "distractors", d.has_true.sum(), "with earlier same-folder page")
for m in ("main", "visible"):
    tx = extract(d.html, m); print(m, sum(x is None for x in tx), "no text", f"{time.time()-t:.0f}s")
