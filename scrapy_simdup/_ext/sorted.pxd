# Declarations of _sorted.h (look-up in an ascending uint64 array).
from libc.stdint cimport uint64_t

cdef extern from "_sorted.h" nogil:
    Py_ssize_t simdup_find_u64(const uint64_t *a, Py_ssize_t n, uint64_t x)
