# Declarations of _popcount.h (set-bit counts).
from libc.stdint cimport uint32_t, uint64_t

cdef extern from "_popcount.h" nogil:
    int simdup_popcount64(uint64_t x)
    int simdup_popcount32(uint32_t x)
