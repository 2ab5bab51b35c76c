# Declarations of _crc32.h (zlib's CRC-32, folded with carry-less multiplication).
from libc.stdint cimport uint32_t

cdef extern from "_crc32.h" nogil:
    int simdup_crc32_level()
    void simdup_crc32_init_table()
    uint32_t simdup_crc32_update(uint32_t crc, const unsigned char *buf, size_t len)
