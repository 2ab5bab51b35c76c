# Declarations of _resvec.h (the growable result vectors of psm and bphs).
from libc.stdint cimport int64_t, uint8_t

cdef extern from "_resvec.h" nogil:
    ctypedef struct resvec:
        int64_t *q
        int64_t *ids
        uint8_t *d
        Py_ssize_t n, cap
    int res_push(resvec *r, int64_t q, int64_t id_, int d)
    void res_free(resvec *r)
