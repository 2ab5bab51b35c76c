# Declarations of _sketch.h (the one-permutation MinHash verification sketch).
from libc.stdint cimport uint8_t, uint64_t

cdef extern from "_sketch.h" nogil:
    enum: SIMDUP_SKETCH_BINS
    void simdup_sketch(const uint64_t *hashes, Py_ssize_t n, uint8_t *out)
    int simdup_sketch_matches(const uint8_t *a, const uint8_t *b)
