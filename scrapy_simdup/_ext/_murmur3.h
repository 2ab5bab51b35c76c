/* MurmurHash3_x64_128 (Austin Appleby's public-domain algorithm), first
 * 64-bit word only: equal to mmh3.hash64(key, seed, signed=False)[0].
 * Reads blocks with memcpy so unaligned keys are fine; little-endian order
 * as in the reference (all platforms we build on are little-endian). */
#ifndef SIMDUP_MURMUR3_H
#define SIMDUP_MURMUR3_H
#include <stdint.h>
#include <string.h>

static inline uint64_t simdup_rotl64(uint64_t x, int r) {
    return (x << r) | (x >> (64 - r));
}

static inline uint64_t simdup_fmix64(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

static inline uint64_t simdup_murmur3_64(const void *key, Py_ssize_t len, uint32_t seed) {
    const uint8_t *data = (const uint8_t *)key;
    const Py_ssize_t nblocks = len / 16;
    uint64_t h1 = seed, h2 = seed;
    const uint64_t c1 = 0x87c37b91114253d5ULL;
    const uint64_t c2 = 0x4cf5ad432745937fULL;
    uint64_t k1, k2;
    Py_ssize_t i;

    for (i = 0; i < nblocks; i++) {
        memcpy(&k1, data + i * 16, 8);
        memcpy(&k2, data + i * 16 + 8, 8);
        k1 *= c1; k1 = simdup_rotl64(k1, 31); k1 *= c2; h1 ^= k1;
        h1 = simdup_rotl64(h1, 27); h1 += h2; h1 = h1 * 5 + 0x52dce729;
        k2 *= c2; k2 = simdup_rotl64(k2, 33); k2 *= c1; h2 ^= k2;
        h2 = simdup_rotl64(h2, 31); h2 += h1; h2 = h2 * 5 + 0x38495ab5;
    }

    /* Tail: the last len % 16 bytes as two little-endian words, read with
     * fixed-size loads that stay inside the key (overlapping reads shifted
     * into place), then mixed branch-free. Both the reference's fall-through
     * switch (a jump table that mispredicts when lengths vary, as words do)
     * and a variable-length memcpy (a libc call per feature) cost more. */
    const Py_ssize_t rem = len & 15;
    uint64_t lo, hi;
    k1 = 0; k2 = 0;
    if (rem) {
        if (nblocks) {                 /* the 16 bytes ending at the key's end */
            const unsigned s = 8u * (unsigned)(16 - rem);      /* 8..120 */
            memcpy(&lo, data + len - 16, 8);
            memcpy(&hi, data + len - 8, 8);
            if (s >= 64) {
                k1 = hi >> (s - 64);
            } else {
                k1 = (lo >> s) | (hi << (64 - s));
                k2 = hi >> s;
            }
        } else if (len >= 8) {
            memcpy(&k1, data, 8);
            if (len > 8) {
                memcpy(&hi, data + len - 8, 8);
                k2 = hi >> (8u * (unsigned)(16 - len));
            }
        } else if (len >= 4) {
            uint32_t a, b;
            memcpy(&a, data, 4);
            memcpy(&b, data + len - 4, 4);
            k1 = (uint64_t)a | ((uint64_t)b << (8u * (unsigned)(len - 4)));
        } else {
            k1 = (uint64_t)data[0] | ((uint64_t)data[len / 2] << (8u * (unsigned)(len / 2)))
                 | ((uint64_t)data[len - 1] << (8u * (unsigned)(len - 1)));
        }
    }
    k2 *= c2; k2 = simdup_rotl64(k2, 33); k2 *= c1;
    h2 ^= rem > 8 ? k2 : 0;
    k1 *= c1; k1 = simdup_rotl64(k1, 31); k1 *= c2;
    h1 ^= rem > 0 ? k1 : 0;

    h1 ^= (uint64_t)len;
    h2 ^= (uint64_t)len;
    h1 += h2;
    h2 += h1;
    h1 = simdup_fmix64(h1);
    h2 = simdup_fmix64(h2);
    h1 += h2;
    return h1;
}

#endif
