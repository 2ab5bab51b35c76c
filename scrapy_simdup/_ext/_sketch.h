/* The verification sketch beside each fingerprint: a one-permutation MinHash
 * of the page's distinct feature hashes, SIMDUP_SKETCH_BINS bins of 8 bits.
 *
 * A feature hash h is remixed as x = fmix64(h ^ SALT); the top 5 bits of x
 * pick the bin, the other 59 bits are the value, and each bin keeps the
 * minimum value. An empty bin e borrows the minimum of the first non-empty
 * bin among fmix64(DENSIFY + 64 e + i) mod BINS, i = 0..63 ("optimal
 * densification", Shrivastava 2017); a page with no feature has all bins 0.
 * Each bin stores the low 8 bits of its minimum. Two sketches agree in a bin
 * with probability J + (1 - J) / 256 (J: the Jaccard similarity of the two
 * feature sets), so the count of equal bytes estimates J. */
#ifndef SIMDUP_SKETCH_H
#define SIMDUP_SKETCH_H
#include <stdint.h>
#include <string.h>
#include "_murmur3.h"
#include "_popcount.h"

#define SIMDUP_SKETCH_BINS 32
#define SIMDUP_SKETCH_SALT 0x9F1D2C3B4A596877ULL
#define SIMDUP_SKETCH_DENSIFY 0x5851F42D4C957F2DULL

static inline void simdup_sketch(const uint64_t *hashes, Py_ssize_t n,
                                 uint8_t out[SIMDUP_SKETCH_BINS]) {
    const uint64_t empty = UINT64_MAX;
    const uint64_t low = ((uint64_t)1 << 59) - 1;
    uint64_t m[SIMDUP_SKETCH_BINS];
    for (int b = 0; b < SIMDUP_SKETCH_BINS; b++) m[b] = empty;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t x = simdup_fmix64(hashes[i] ^ SIMDUP_SKETCH_SALT);
        int b = (int)(x >> 59);
        uint64_t v = x & low;
        if (v < m[b]) m[b] = v;
    }
    for (int e = 0; e < SIMDUP_SKETCH_BINS; e++) {
        uint64_t v = m[e];
        if (v == empty) {
            v = 0;
            if (n > 0) {
                for (int i = 0; i < 64; i++) {
                    uint64_t s = simdup_fmix64(SIMDUP_SKETCH_DENSIFY + 64 * (uint64_t)e + (uint64_t)i)
                                 % SIMDUP_SKETCH_BINS;
                    if (m[s] != empty) { v = m[s]; break; }
                }
            }
        }
        out[e] = (uint8_t)(v & 0xff);
    }
}

/* Bins in which two sketches hold the same byte: zero bytes of their XOR,
 * eight at a time. */
static inline int simdup_sketch_matches(const uint8_t *a, const uint8_t *b) {
    const uint64_t low7 = 0x7F7F7F7F7F7F7F7FULL;
    int count = 0;
    for (int w = 0; w < SIMDUP_SKETCH_BINS / 8; w++) {
        uint64_t x, y;
        memcpy(&x, a + 8 * w, 8);
        memcpy(&y, b + 8 * w, 8);
        x ^= y;
        /* high bit of each byte set iff that byte of x is non-zero */
        uint64_t nonzero = (((x & low7) + low7) | x) & ~low7;
        count += 8 - simdup_popcount64(nonzero);
    }
    return count;
}

#endif
