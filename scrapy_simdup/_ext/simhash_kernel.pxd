# Declarations of _simhash_kernel.h (the weighted simhash accumulation: scalar,
# AVX2 or AVX-512F, picked at run time; bit-identical W).
from libc.stdint cimport uint64_t

cdef extern from "_simhash_kernel.h" nogil:
    void simdup_simhash_tables()
    int simdup_simhash_select(int level)
    void simdup_accumulate(const uint64_t *hashes, const double *weights, Py_ssize_t n,
                           double *W)
