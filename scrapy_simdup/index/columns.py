"""Growable columns of a backend's per-page state, compact in memory.

A long crawl keeps a little about every page it checked: its key (URL), where
it is in the index, whether it was kept. Python objects would cost several
hundred bytes a page; these keep it to the data plus a few bytes.
"""
from __future__ import annotations

import numpy as np

from scrapy_simdup._ext import keymap

__all__ = ["Column", "KeyColumn", "KeySet"]


class Column:
    """A growable 1-d array (amortised doubling)."""

    def __init__(self, dtype) -> None:
        self._a = np.zeros(64, dtype)
        self.n = 0

    def extend(self, values) -> None:
        need = self.n + len(values)
        if need > self._a.shape[0]:
            grown = np.zeros(max(need, 2 * self._a.shape[0]), self._a.dtype)
            grown[: self.n] = self._a[: self.n]
            self._a = grown
        self._a[self.n: need] = values
        self.n = need

    @property
    def array(self) -> np.ndarray:
        """The stored values (a view: valid until the next extend)."""
        return self._a[: self.n]

    @property
    def nbytes(self) -> int:
        return self._a.nbytes

    def append(self, value) -> None:
        if self.n == self._a.shape[0]:
            grown = np.zeros(2 * self._a.shape[0], self._a.dtype)
            grown[: self.n] = self._a
            self._a = grown
        self._a[self.n] = value
        self.n += 1

    def __getitem__(self, i: int):
        if not 0 <= i < self.n:
            raise IndexError(i)
        return self._a[i].item()


def _key_hash(key: str) -> int:
    # the interpreter's string hash (SipHash): well mixed, and nothing here
    # outlives the process
    return hash(key) & 0xFFFFFFFFFFFFFFFF


class KeySet:
    """Strings seen, as 64-bit hashes in a compiled table (about 20 bytes
    each). Two strings with one hash count as one: one time in 2**64 a pair."""

    def __init__(self) -> None:
        self._map = keymap.KeyMap()

    def add(self, key: str) -> None:
        self._map.put(_key_hash(key), 0)

    def __contains__(self, key: str) -> bool:
        return self._map.get(_key_hash(key)) is not None

    def __len__(self) -> int:
        return len(self._map)


class KeyColumn:
    """The key (a string) of each row: the keys' UTF-8 in one buffer and where
    each ends, and a compiled table from a key's hash to the newest row stored
    under it (checked against the key, so a hash collision is a miss, not a
    wrong row). Rows without a key (pages added to the index directly) read
    as missing."""

    def __init__(self) -> None:
        self._data = bytearray()
        self._ends = Column(np.int64)
        self._has_key = Column(np.uint8)
        self._rows = keymap.KeyMap()
        self._moved: dict[int, str] = {}    # rows given another key later (rare)

    def __len__(self) -> int:
        return self._ends.n

    @property
    def nbytes(self) -> int:
        return len(self._data) + self._ends.nbytes + self._has_key.nbytes + self._rows.nbytes

    def _key(self, row: int) -> str | None:
        if row in self._moved:
            return self._moved[row]
        if not 0 <= row < self._ends.n or not self._has_key.array[row]:
            return None
        ends = self._ends.array
        start = int(ends[row - 1]) if row else 0
        return self._data[start:int(ends[row])].decode("utf-8", "surrogatepass")

    def __getitem__(self, row: int) -> str:
        key = self._key(int(row))
        if key is None:
            raise KeyError(row)
        return key

    def get(self, row: int, default=None):
        key = self._key(int(row))
        return default if key is None else key

    def __setitem__(self, row: int, key: str) -> None:
        """Store ``key`` for ``row``: the next row, or a later one (rows in
        between have none), or an earlier one (it takes the new key)."""
        row = int(row)
        n = self._ends.n
        if row < n:
            self._moved[row] = key
        else:
            if row > n:         # rows without a key
                self._ends.extend(np.full(row - n, len(self._data), np.int64))
                self._has_key.extend(np.zeros(row - n, np.uint8))
            self._data += key.encode("utf-8", "surrogatepass")
            self._ends.append(len(self._data))
            self._has_key.append(1)
        self._rows.put(_key_hash(key), row)

    def row_of(self, key: str) -> int | None:
        """The newest row stored under ``key``, or None."""
        row = self._rows.get(_key_hash(key))
        if row is None or self._key(row) != key:
            return None
        return row

    def values(self):
        for row in range(self._ends.n):
            key = self._key(row)
            if key is not None:
                yield key
