# Declarations of _utf8.h (the strict UTF-8 check of bytes.decode("utf-8")).

cdef extern from "_utf8.h" nogil:
    int simdup_utf8_valid(const unsigned char *p, Py_ssize_t n)
