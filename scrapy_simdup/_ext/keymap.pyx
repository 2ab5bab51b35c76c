# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Hash tables from 64-bit hashes to rows: the URL indexes of a crawl and a replica.

Open addressing with linear probing, at most 3/4 full and grown by half (not
doubled); the keys are hashes already (MurmurHash3 of the URL), so a multiply
maps one onto its first slot. ``KeyMap`` keeps each slot's key beside its row
(``EMPTY`` marks a free slot): 12 bytes a slot, 16 to 24 a key. ``RowMap``
keeps rows alone, for a caller that keeps every row's key anyway (a replica
keeps its rows' URL hashes): 4 bytes a slot, 5.3 to 8 a key, a probe reading
the key of the row it meets.
"""
from libc.stdint cimport uint32_t, uint64_t, int64_t

from scrapy_simdup._ext.fastrange cimport simdup_fastrange64

import numpy as np

from scrapy_simdup._ext import mapped

#: a free slot's row
cdef uint32_t EMPTY = 0xFFFFFFFF
#: the largest row a map holds
MAX_ROW = 0xFFFFFFFE


cdef class _Slots:
    """The slots' rows (``EMPTY``: free) of an open-addressing table."""

    cdef object _rows_arr
    cdef uint32_t[::1] _rows
    cdef Py_ssize_t _count
    cdef uint64_t _cap

    def __cinit__(self, Py_ssize_t capacity=1024):
        cdef Py_ssize_t cap = 1024
        while cap < capacity:
            cap *= 2
        self._new_rows(cap)
        self._count = 0

    cdef void _new_rows(self, Py_ssize_t cap):
        # (in mappings of their own: the arrays a growth replaces go back to the system)
        self._rows_arr = mapped.full(cap, EMPTY, np.uint32)
        self._rows = self._rows_arr
        self._cap = <uint64_t>cap

    cdef inline bint _full(self) noexcept:
        """Whether one more key would take the table past 3/4 full."""
        return 4 * (self._count + 1) > 3 * self._rows.shape[0]

    def __len__(self):
        return self._count


cdef class KeyMap(_Slots):
    """uint64 key -> row (0 .. ``MAX_ROW``); a key put again takes the new row."""

    cdef object _keys_arr
    cdef uint64_t[::1] _keys

    def __cinit__(self, Py_ssize_t capacity=1024):
        self._new_keys(self._cap)

    cdef void _new_keys(self, Py_ssize_t cap):
        self._keys_arr = mapped.zeros(cap, np.uint64)
        self._keys = self._keys_arr

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
        self._new_rows(n + n // 2)
        self._new_keys(n + n // 2)
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
        if self._full():
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


cdef class RowMap(_Slots):
    """uint64 key -> row where the caller keeps every row's key (``keys[row]``,
    given to each call): the slots hold rows alone, 4 bytes a slot instead of
    12, and a probe compares ``keys[row]``. A key put again takes the new row.
    At most 3/4 full, grown by half."""

    cdef Py_ssize_t _known      # rows below this are held: a put needs their keys

    @property
    def nbytes(self):
        return self._rows_arr.nbytes

    cdef inline Py_ssize_t _slot(self, uint64_t key, const uint64_t *keys,
                                 Py_ssize_t nkeys) noexcept nogil:
        """The slot of ``key``, or the free slot where it would go. A row
        past ``nkeys`` (not the caller's) never matches."""
        cdef uint64_t i = simdup_fastrange64(key, self._cap)
        cdef uint32_t r
        while True:
            r = self._rows[i]
            if r == EMPTY or (r < nkeys and keys[r] == key):
                return <Py_ssize_t>i
            i += 1
            if i == self._cap:
                i = 0

    cdef void _grow(self, const uint64_t *keys, Py_ssize_t nkeys):
        cdef uint32_t[::1] old = self._rows
        cdef Py_ssize_t n = old.shape[0], i
        self._new_rows(n + n // 2)
        for i in range(n):
            if old[i] != EMPTY:
                self._rows[self._slot(keys[old[i]], keys, nkeys)] = old[i]

    def get(self, uint64_t key, const uint64_t[::1] keys):
        """The row of ``key`` (``keys``: every row's key), or None."""
        cdef Py_ssize_t s = self._slot(key, &keys[0] if keys.shape[0] else NULL,
                                       keys.shape[0])
        if self._rows[s] == EMPTY:
            return None
        return <int64_t>self._rows[s]

    def put_many(self, const int64_t[::1] rows, const uint64_t[::1] keys):
        """Put ``keys[rows[i]] -> rows[i]`` in order (a later row of a key
        wins); ``keys``: every row's key."""
        cdef Py_ssize_t n = rows.shape[0], nkeys = keys.shape[0], i, s, known = self._known
        if nkeys < known:       # (a growth re-places every row held by its key)
            raise ValueError(f"the keys of rows 0..{known - 1} are needed, {nkeys} given")
        for i in range(n):
            if not 0 <= rows[i] < nkeys or rows[i] > MAX_ROW:
                raise IndexError(f"row {rows[i]} has no key (rows 0..{nkeys - 1} have)")
            if rows[i] >= known:
                known = rows[i] + 1
        self._known = known
        cdef const uint64_t *kp = &keys[0] if nkeys else NULL
        for i in range(n):
            if self._full():
                self._grow(kp, nkeys)
            s = self._slot(kp[rows[i]], kp, nkeys)
            if self._rows[s] == EMPTY:
                self._count += 1
            self._rows[s] = <uint32_t>rows[i]
