/* A well-mixed 64-bit hash mapped onto 0 .. n - 1 without a division
 * (multiply, keep the high word), for tables whose size is not a power of
 * two. */
#ifndef SIMDUP_FASTRANGE_H
#define SIMDUP_FASTRANGE_H
#include <stdint.h>

static inline uint64_t simdup_fastrange64(uint64_t hash, uint64_t n) {
#if defined(__SIZEOF_INT128__)
    return (uint64_t)(((unsigned __int128)hash * n) >> 64);
#else
    uint64_t a_lo = (uint32_t)hash, a_hi = hash >> 32;
    uint64_t b_lo = (uint32_t)n, b_hi = n >> 32;
    uint64_t lo_lo = a_lo * b_lo, hi_lo = a_hi * b_lo;
    uint64_t lo_hi = a_lo * b_hi, hi_hi = a_hi * b_hi;
    uint64_t cross = (lo_lo >> 32) + (uint32_t)hi_lo + lo_hi;
    return (hi_lo >> 32) + (cross >> 32) + hi_hi;
#endif
}

#endif
