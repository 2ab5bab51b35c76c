# Declarations of _fastrange.h (a hash onto 0 .. n - 1).
from libc.stdint cimport uint64_t

cdef extern from "_fastrange.h" nogil:
    uint64_t simdup_fastrange64(uint64_t hash, uint64_t n)
