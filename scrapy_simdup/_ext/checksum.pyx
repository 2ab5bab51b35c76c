# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""CRC-32 of batch files and collection runs, the value ``zlib.crc32`` gives
(the stored checksums stay zlib's), computed about 4x faster on large
buffers with carry-less multiplies (``_crc32.h``)."""
from libc.stdint cimport uint8_t, uint32_t

import operator

import numpy as np


cdef extern from "_crc32.h" nogil:
    uint32_t simdup_crc32(uint32_t crc, const uint8_t *p, size_t n)
    int simdup_crc32_select(int level)


simdup_crc32_select(-1)     # the table, and the best kernel, before any thread asks


def crc32(data, value=0):
    """``zlib.crc32(data, value)`` for any contiguous buffer (bytes,
    bytearray, memoryview, NumPy array of any dtype); like zlib, ``value``
    is an int taken modulo 2^32."""
    cdef const uint8_t[::1] view
    cdef uint32_t out, start
    # as zlib: anything with __index__ (NumPy integers too), no floats
    value = operator.index(value) & 0xFFFFFFFF
    try:
        mv = memoryview(data)
    except (TypeError, ValueError):
        # NumPy dtypes the buffer protocol cannot describe (datetime64, ...):
        # their bytes, as zlib reads them
        if not isinstance(data, np.ndarray):
            raise
        if not data.flags.c_contiguous:
            raise ValueError("crc32 needs a contiguous buffer") from None
        mv = memoryview(data.reshape(-1).view(np.uint8))
    if not mv.c_contiguous:
        raise ValueError("crc32 needs a contiguous buffer")
    if mv.nbytes == 0:
        return value
    view = mv.cast("B") if (mv.format != "B" or mv.ndim != 1) else mv
    start = value
    with nogil:
        out = simdup_crc32(start, &view[0], view.shape[0])
    return out


def crc32_kernel(int level=-1):
    """2: carry-less multiply folding on 512-bit registers (VPCLMULQDQ), 1: on
    128-bit ones (PCLMULQDQ), 0: byte table, -1 the best this CPU has.
    Returns the level in use. For tests; all give zlib's value."""
    return simdup_crc32_select(level)
