# Declarations of _topflips.h (flip sets from a fixed candidate list: ranked
# at h <= 3, selected in any order up to 8 flips; AVX-512F).
from libc.stdint cimport int32_t, uint8_t, uint16_t, uint32_t, uint64_t

cdef extern from "_topflips.h" nogil:
    enum:
        TOPFLIPS_MAX_H
        TOPFLIPS_MAX_CAND
        TOPFLIPS_MAX_T
    ctypedef struct topflips_plan:
        int n
        int k
        int32_t idx[TOPFLIPS_MAX_H][TOPFLIPS_MAX_CAND]
        uint64_t present[TOPFLIPS_MAX_H]
    int topflips_avx512(const topflips_plan *P, const int32_t *lwq, const uint32_t *bits,
                        uint32_t *out)
    int topflips_row16_avx512(const topflips_plan *P, const uint8_t *cq_row,
                              const int32_t *qtable, int t, uint32_t *out)
    int topflips_use_level(int level)
    int topflips_level()
    enum:
        TOPFLIPS_SEL_MAX_H
        TOPFLIPS_SEL_MAX_CAND
    ctypedef struct topflips_sel_plan:
        int n
        int k
        int h
        int nv
        const int32_t *idx
        const uint16_t *present
    int topflips_select_row16_avx512(const topflips_sel_plan *P, const uint8_t *cq_row,
                                     const int32_t *qtable, int t, int32_t *u, uint32_t *m,
                                     uint32_t *out)
    int topflips_select_arrays_avx512(const topflips_sel_plan *P, const int32_t *lwq,
                                      const uint32_t *bits, int32_t *u, uint32_t *m,
                                      uint32_t *out)
