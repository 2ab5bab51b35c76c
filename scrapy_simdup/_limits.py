"""Limits and defaults of the values more than one layer checks (the settings,
the index, the Redis store, the ``simdup`` command): each range is defined
here once (import-light: no NumPy, no compiled modules)."""

# Largest search radius (Hamming distance of a key): beyond 24 bits an
# unrelated page is a candidate more often than one time in 30, and the
# candidates, not the probes, become the cost. PSM flips at most 8 header bits
# per probe.
MAX_DISTANCE = 24
# The search radius of each key (SIMDUP_DISTANCE, `simdup merge --distance`)
# and the estimated Jaccard similarity a candidate needs
# (SIMDUP_MIN_SIMILARITY), chosen on spotsigs-dev + distractors by
# benchmarks/eval_quality.py (docs/algorithms.rst, "Choosing the defaults").
DEFAULT_DISTANCE = 22
DEFAULT_MIN_SIMILARITY = 0.18     # 6 equal bins of 32: bench_chance.py
# the other key's distance a candidate may have beyond the radius's rest
PAIR_SLACK = 26


def pair_limit(distance: int) -> int:
    """The largest sum of a candidate's two key distances at search radius
    ``distance``. Both keys measure the same pair of pages, so a candidate
    found on one key must be near on the other too: within 26 bits (an
    unrelated page's key is 32 +- 4 bits away) plus what the first key left
    of the radius. At a wide radius this rejects most chance candidates
    before their sketch is read (docs/algorithms.rst)."""
    return distance + PAIR_SLACK


# Sketch bands (pairs of bins, exact-match tables) of the verified index: a
# candidate they find has two bins equal already, which makes the sketch test
# easier to pass by chance, so it needs one equal bin more than a candidate
# of the keys, and both its keys near too, more loosely than for a candidate
# of the keys' own search: their distances add up to at most pair_limit +
# BAND_PAIR_SLACK (56 at the default radius), which a random page passes 9%
# of the time and a real near-duplicate nearly always
# (benchmarks/study_sketch_bands.py, bench_chance.py --bands).
MAX_BANDS = 16
BAND_PAIR_SLACK = 8
# Bands of the crawl's index (SIMDUP_BANDS, when the sketch test is on) and
# its probes per key with them: at ten and a hundred million pages they find
# what 512 probes and no bands miss, in less time (bench_index_default.py).
DEFAULT_BANDS = 12
BANDED_PROBES_PER_KEY = 128


# Buckets probed per key and look-up by the verified index, whose header is
# floor(log2 n) - VERIFIED_HEADER_DROP bits (buckets of 128-256 pages): at
# the radius of loose near-duplicates a few large buckets find more of them
# in less time than many small ones (docs/algorithms.rst, "Stated recall").
DEFAULT_PROBES_PER_KEY = 512
VERIFIED_HEADER_DROP = 7
# The shipped volatility model gives probe budgets for a target recall up to
# this distance (SIMDUP_RECALL); wider radii take a budget (SIMDUP_MAX_PROBES).
MAX_CALIBRATED_DISTANCE = 16
# The most buckets per key a target recall (SIMDUP_RECALL) may spend at the
# verified index's radius: the look-up's time budget, about 10 ms at ten
# million pages. A target that needs more is not held, and the crawl says so.
MAX_RECALL_PROBES = 16384
# Target recall of the probe budget when neither recall nor max_probes is
# given to the crawl's index: probing every flip set of up to 8 header bits
# is ~10^5 probes per look-up at a million pages.
DEFAULT_RECALL = 0.99
# A probe budget (buckets probed per look-up) is at least 1: the own bucket,
# and at most the buckets of the largest header (2**30): a larger one probes
# no more.
MIN_PROBES = 1
MAX_PROBES = 1 << 30
# Pages a replica of the shared Redis index can hold: a log entry names the
# entry its writer's look-up reached in 32 bits (index/replica.py).
MAX_REPLICA_PAGES = (1 << 32) - 1
# Fingerprints per batch file (SIMDUP_BATCH_SIZE).
MIN_BATCH_SIZE = 1
DEFAULT_BATCH_SIZE = 100_000
# a batch is held in memory until it is written (128 bytes a page plus its
# URL): beyond this, a crash loses more than a crawl should risk
MAX_BATCH_SIZE = 10_000_000
