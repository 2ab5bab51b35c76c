# Declarations of _vosh.h (the VOSH flip-set generator of psm and batchjoin).
from libc.stdint cimport uint64_t

cdef extern from "_vosh.h" nogil:
    enum:
        VOSH_MAX_H
    ctypedef struct vosh_node:
        pass
    ctypedef struct vosh_gen:
        pass
    int vosh_init(vosh_gen *g, const double *lw, const uint64_t *mask,
                  int t, int h, vosh_node *heap, long cap)
    int vosh_next(vosh_gen *g, uint64_t *mask_out, int *size_out)
    void vosh_limit(vosh_gen *g, long k)
    long vosh_total(int t, int h)
