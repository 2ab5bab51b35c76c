# Declarations of _joinscan.h (the candidate sweep of the batch join: scalar,
# AVX2 or AVX-512, picked at run time).
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t

cdef extern from "_joinscan.h" nogil:
    ctypedef int64_t (*simdup_block_fn)(const uint32_t *y, int ny, const uint32_t *low,
                                        int64_t i, int64_t n, uint32_t h, uint32_t *masks)
    simdup_block_fn simdup_next_block
    ctypedef int64_t (*simdup_block64_fn)(const uint64_t *y, int ny, const uint64_t *v,
                                          int64_t i, int64_t n, uint32_t h, uint32_t *masks)
    simdup_block64_fn simdup_next_block64
    ctypedef int64_t (*simdup_collect64_fn)(const uint64_t *y, const uint64_t *yp, int ny,
                                            const uint64_t *v, const uint64_t *vp, int64_t i,
                                            int64_t n, uint32_t h, uint32_t limit, int width,
                                            int64_t *ce, uint8_t *cs, int cap,
                                            int *count)
    simdup_collect64_fn simdup_collect_pair64
    int simdup_block_width
    int simdup_block_slots
    int simdup_join_select(int level)
    int simdup_join_level()
