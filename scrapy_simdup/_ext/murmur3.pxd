# Declarations of _murmur3.h (the first 64-bit word of MurmurHash3_x64_128).
from libc.stdint cimport uint32_t, uint64_t

cdef extern from "_murmur3.h" nogil:
    uint64_t simdup_murmur3_64(const void *key, Py_ssize_t length, uint32_t seed)
    uint64_t simdup_fmix64(uint64_t k)
