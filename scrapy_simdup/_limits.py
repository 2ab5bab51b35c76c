"""Limits and defaults of the values more than one layer checks (the settings,
the index, the Redis store, the ``simdup`` command): each range is defined
here once (import-light: no NumPy, no compiled modules)."""

# Largest Hamming threshold: it covers every threshold at which the features'
# page-level F1 is worth having (benchmarks/eval_quality.py); PSM flips at
# most 8 header bits per probe.
MAX_DISTANCE = 16
# The crawl default (SIMDUP_DISTANCE, `simdup merge --distance`), chosen on
# the tune half by benchmarks/eval_quality.py: the best page F1 among the h
# whose projected false matches stay below 0.01 per page in a crawl of a
# million pages (unrelated pages' distances are about N(32, 4)). Smaller
# crawls can afford more (docs/usage.rst, "Choosing SIMDUP_DISTANCE").
DEFAULT_DISTANCE = 9
# Target recall of the probe budget when neither recall nor max_probes is
# given to the crawl's index: probing every flip set of up to 8 header bits
# is ~10^5 probes per look-up at a million pages.
DEFAULT_RECALL = 0.99
# ... and of the shared Redis index's: over the network each probe costs a
# bucket read, so it aims a little lower, by the calibrated volatility model.
DEFAULT_REDIS_RECALL = 0.98
# A probe budget (buckets probed per look-up) is at least 1: the own bucket.
MIN_PROBES = 1
# Header bits t of the shared Redis index (2**t bucket keys), fixed when the
# index is created (SIMDUP_REDIS_HEADER_BITS; the Redis store checks the same).
MIN_REDIS_HEADER_BITS = 4
MAX_REDIS_HEADER_BITS = 24
DEFAULT_REDIS_HEADER_BITS = 14
# Fingerprints per batch file (SIMDUP_BATCH_SIZE).
MIN_BATCH_SIZE = 1
DEFAULT_BATCH_SIZE = 100_000
