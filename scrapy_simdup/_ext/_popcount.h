/* Set-bit counts: the Hamming distance of two fingerprints is the popcount
 * of their XOR. */
#ifndef SIMDUP_POPCOUNT_H
#define SIMDUP_POPCOUNT_H
#include <stdint.h>

static inline int simdup_popcount64(uint64_t x) {
    return __builtin_popcountll(x);
}

static inline int simdup_popcount32(uint32_t x) {
#if defined(__GNUC__) || defined(__clang__)
    return __builtin_popcount(x);
#else
    int c = 0;
    while (x) { x &= x - 1; c++; }
    return c;
#endif
}

#endif
