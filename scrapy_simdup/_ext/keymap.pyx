# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""A hash table from 64-bit hashes to rows: a replica's URL index.

Open addressing with linear probing over two NumPy arrays (the keys, uint64,
and the rows, uint32: ``EMPTY`` marks a free slot), at most 3/4 full and
grown by half (not doubled: 16 to 24 bytes a key rather than 16 to 32); the
keys are hashes already (MurmurHash3 of the URL), so a multiply maps one onto
its first slot. 12 bytes a slot.
"""
from libc.stdint cimport uint32_t, uint64_t, int64_t

from scrapy_simdup._ext.fastrange cimport simdup_fastrange64

import numpy as np

from scrapy_simdup._ext import mapped

#: a free slot's row
cdef uint32_t EMPTY = 0xFFFFFFFF
#: the largest row a map holds
MAX_ROW = 0xFFFFFFFE


cdef class KeyMap:
    """uint64 key -> row (0 .. ``MAX_ROW``); a key put again takes the new row."""

    cdef object _keys_arr
    cdef object _rows_arr
    cdef uint64_t[::1] _keys
    cdef uint32_t[::1] _rows
    cdef Py_ssize_t _count
    cdef uint64_t _cap

    def __cinit__(self, Py_ssize_t capacity=1024):
        cdef Py_ssize_t cap = 1024
        while cap < capacity:
            cap *= 2
        self._alloc(cap)
        self._count = 0

    cdef void _alloc(self, Py_ssize_t cap):
        # (in mappings of their own: the arrays a growth replaces go back to the system)
        self._keys_arr = mapped.zeros(cap, np.uint64)
        self._rows_arr = mapped.full(cap, EMPTY, np.uint32)
        self._keys = self._keys_arr
        self._rows = self._rows_arr
        self._cap = <uint64_t>cap

    def __len__(self):
        return self._count

    @property
    def nbytes(self):
        return self._keys_arr.nbytes + self._rows_arr.nbytes

    cdef inline Py_ssize_t _slot(self, uint64_t key) noexcept nogil:
        cdef uint64_t i = simdup_fastrange64(key, self._cap)
        while self._rows[i] != EMPTY and self._keys[i] != key:
            i += 1
            if i == self._cap:
                i = 0
        return <Py_ssize_t>i

    cdef void _grow(self):
        cdef uint64_t[::1] old_keys = self._keys
        cdef uint32_t[::1] old_rows = self._rows
        cdef Py_ssize_t n = old_keys.shape[0], i, s
        self._alloc(n + n // 2)
        for i in range(n):
            if old_rows[i] != EMPTY:
                s = self._slot(old_keys[i])
                self._keys[s] = old_keys[i]
                self._rows[s] = old_rows[i]

    def get(self, uint64_t key):
        """The row of ``key``, or None."""
        cdef Py_ssize_t s = self._slot(key)
        if self._rows[s] == EMPTY:
            return None
        return <int64_t>self._rows[s]

    cdef void _put(self, uint64_t key, uint32_t row):
        """``key -> row``, a row checked by the caller."""
        if 4 * (self._count + 1) > 3 * self._keys.shape[0]:
            self._grow()
        cdef Py_ssize_t s = self._slot(key)
        if self._rows[s] == EMPTY:
            self._count += 1
            self._keys[s] = key
        self._rows[s] = row

    def put(self, uint64_t key, int64_t row):
        """Put ``key -> row`` (the row it had before is replaced)."""
        if row < 0 or row > MAX_ROW:
            raise OverflowError(f"a row must be in 0..{MAX_ROW}, got {row}")
        self._put(key, <uint32_t>row)

    def put_many(self, const uint64_t[::1] keys, const int64_t[::1] rows):
        """Put ``keys[i] -> rows[i]`` in order (a later row of a key wins)."""
        cdef Py_ssize_t n = keys.shape[0], i
        if rows.shape[0] != n:
            raise ValueError(f"keys and rows differ in length: {n} and {rows.shape[0]}")
        for i in range(n):
            if rows[i] < 0 or rows[i] > MAX_ROW:
                raise OverflowError(f"a row must be in 0..{MAX_ROW}, got {rows[i]}")
        for i in range(n):
            self._put(keys[i], <uint32_t>rows[i])
