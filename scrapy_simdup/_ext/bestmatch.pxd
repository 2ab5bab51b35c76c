# The order of verified matches, for the one-page look-ups of the PSM tables
# (psm_best.pxi) and the sketch bands (bands.pyx); VerifiedIndex.query sorts
# its arrays the same way.
from libc.stdint cimport int64_t


cdef inline bint better_match(int agree, int dist, int64_t row, int best_agree, int best_dist,
                              int64_t best_row) noexcept nogil:
    """Is ``(agree, dist, row)`` better than the best so far: the most agreeing
    bins, then the smaller key distance, then the earlier row."""
    if agree != best_agree:
        return agree > best_agree
    if dist != best_dist:
        return dist < best_dist
    return row < best_row
