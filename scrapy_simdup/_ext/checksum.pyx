# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""Compiled CRC-32: zlib's checksum (the same values as ``zlib.crc32``), with
carry-less multiplication where the CPU has it (``_crc32.h``), else zlib's.

It checks the batch files and the collection's runs as a merge reads them.
"""
from libc.stdint cimport uint32_t

import zlib

from scrapy_simdup._ext.crc32 cimport (simdup_crc32_init_table, simdup_crc32_level,
                                       simdup_crc32_update)

simdup_crc32_init_table()
cdef int _level = simdup_crc32_level()


def crc32_level() -> int:
    """1 when the folding kernel runs on this CPU (PCLMULQDQ), 0 when
    :func:`crc32` is zlib's."""
    return _level


def crc32(data, value=0):
    """``zlib.crc32(data, value)``: the CRC-32 of a bytes-like object
    (C-contiguous), continuing ``value``."""
    cdef const unsigned char[::1] view
    cdef uint32_t crc
    if _level == 0:
        return zlib.crc32(data, value)
    try:
        view = memoryview(data).cast("B")
    except TypeError:       # (not C-contiguous)
        return zlib.crc32(data, value)
    crc = <uint32_t>(value & 0xFFFFFFFF)
    if view.shape[0] == 0:
        return crc
    with nogil:
        crc = simdup_crc32_update(crc, &view[0], <size_t>view.shape[0])
    return crc
