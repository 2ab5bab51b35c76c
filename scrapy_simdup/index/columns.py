"""Growable columns of a backend's per-page state, compact in memory.

A long crawl keeps a little about every page it checked: its key (URL), where
it is in the index, whether it was kept. Python objects would cost several
hundred bytes a page; these keep it to the data plus a few bytes.
"""
from __future__ import annotations

import zlib
from collections import OrderedDict

import numpy as np

from scrapy_simdup._ext import keymap, mapped

__all__ = ["ChunkedColumn", "Column", "KeyColumn", "KeySet"]

#: rows per chunk of a :class:`ChunkedColumn`
CHUNK_ROWS = 1 << 14
#: keys per compressed block of a :class:`KeyColumn` (it divides CHUNK_ROWS,
#: so a block's lengths are one slice of a chunk)
BLOCK_ROWS = 64
#: a row's length entry: no key, or a key too long for 16 bits (kept apart)
_NO_KEY = 0xFFFF
_LONG = 0xFFFE
#: zlib looks back this far: the part of the first block it can use
_ZDICT_BYTES = 32 * 1024
#: compressed blocks are packed into buffers of this size: a small object
#: per block, allocated among a crawl's short-lived ones, would keep a page
#: of the heap each from being given back
_ARENA_BYTES = 1 << 20
#: blocks kept decompressed, the least recently read dropped first
_CACHED_BLOCKS = 8


class Column:
    """A growable contiguous 1-d array, grown by half (1 to 1.5 times its
    data, in a mapping of its own once large: the array it replaces goes back
    to the system)."""

    def __init__(self, dtype) -> None:
        self._a = np.zeros(64, dtype)
        self.n = 0

    def _grow(self, need: int) -> None:
        size = self._a.shape[0]
        grown = mapped.zeros(max(need, size + size // 2), self._a.dtype)
        grown[: self.n] = self._a[: self.n]
        self._a = grown

    def extend(self, values) -> None:
        need = self.n + len(values)
        if need > self._a.shape[0]:
            self._grow(need)
        self._a[self.n: need] = values
        self.n = need

    @property
    def array(self) -> np.ndarray:
        """The stored values (a view: valid until the next extend)."""
        return self._a[: self.n]

    @property
    def dtype(self) -> np.dtype:
        return self._a.dtype

    @property
    def nbytes(self) -> int:
        return self._a.nbytes

    def append(self, value) -> None:
        if self.n == self._a.shape[0]:
            self._grow(self.n + 1)
        self._a[self.n] = value
        self.n += 1

    def __getitem__(self, i: int):
        if not 0 <= i < self.n:
            raise IndexError(i)
        return self._a[i].item()


class ChunkedColumn:
    """A growable 1-d array kept in fixed-size chunks: growing copies
    nothing and leaves no freed arrays behind, and the slack is at most one
    chunk. Not contiguous (no view of all values): for per-row state read a
    row at a time."""

    def __init__(self, dtype, chunk: int = CHUNK_ROWS) -> None:
        if chunk <= 0 or chunk & (chunk - 1):
            raise ValueError(f"chunk must be a power of two, got {chunk}")
        self._dtype = np.dtype(dtype)
        self._chunk = chunk
        self._shift = chunk.bit_length() - 1
        self._chunks: list[np.ndarray] = []
        self.n = 0

    def _room(self) -> np.ndarray:
        """The chunk the next value goes in (a new one when the last is full)."""
        if self.n == len(self._chunks) << self._shift:
            self._chunks.append(np.zeros(self._chunk, self._dtype))
        return self._chunks[-1]

    def append(self, value) -> None:
        self._room()[self.n & (self._chunk - 1)] = value
        self.n += 1

    def extend(self, values) -> None:
        values = np.asarray(values, self._dtype)
        done = 0
        while done < values.shape[0]:
            chunk, at = self._room(), self.n & (self._chunk - 1)
            take = min(self._chunk - at, values.shape[0] - done)
            chunk[at: at + take] = values[done: done + take]
            done += take
            self.n += take

    def __getitem__(self, i: int):
        if not 0 <= i < self.n:
            raise IndexError(i)
        return self._chunks[i >> self._shift].item(i & (self._chunk - 1))

    def __setitem__(self, i: int, value) -> None:
        if not 0 <= i < self.n:
            raise IndexError(i)
        self._chunks[i >> self._shift][i & (self._chunk - 1)] = value

    def within_chunk(self, start: int, stop: int) -> np.ndarray:
        """Values ``start..stop-1`` as a view; they must lie in one chunk."""
        if not 0 <= start <= stop <= self.n or (start >> self._shift) != ((stop - 1) >> self._shift):
            raise IndexError(f"{start}..{stop} is not within one chunk")
        at = start & (self._chunk - 1)
        return self._chunks[start >> self._shift][at: at + stop - start]

    @property
    def array(self) -> np.ndarray:
        """The stored values (a copy)."""
        if not self._chunks:
            return np.zeros(0, self._dtype)
        return np.concatenate(self._chunks)[: self.n]

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def nbytes(self) -> int:
        return len(self._chunks) * self._chunk * self._dtype.itemsize


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
    """The key (a string) of each row, and from a key its newest row.

    Keys are stored as UTF-8, 64 rows to a block, and each row keeps its
    key's length. The first full block stays as it is and is the preset
    dictionary of zlib for every later one (the URLs of one crawl share most
    of their bytes: hosts, paths, the words of their slugs), which are
    packed into arenas. A compiled table maps a key's hash to its newest
    row, checked against the key, so a hash collision is a miss, not a
    wrong row. Rows without a key (pages added to the index directly) read
    as missing."""

    def __init__(self, block_rows: int = BLOCK_ROWS) -> None:
        if block_rows <= 0 or CHUNK_ROWS % block_rows:
            raise ValueError(f"block_rows must divide {CHUNK_ROWS}, got {block_rows}")
        self._block_rows = block_rows
        self._zdict = b""                       # the first full block, raw
        self._arenas: list[bytearray] = []      # the later blocks, compressed
        self._arena_used = 0                    # bytes used in the last arena
        self._starts = ChunkedColumn(np.uint64)  # block b + 1: arena * _ARENA_BYTES + offset
        self._sizes = ChunkedColumn(np.uint32)   # ... and its compressed bytes
        self._open = bytearray()                # the keys of the block being filled
        self._lengths = ChunkedColumn(np.uint16)   # a key's bytes, or _NO_KEY / _LONG
        self._long: dict[int, int] = {}         # rows whose key has _LONG bytes or more
        self._rows = keymap.KeyMap()
        self._moved: dict[int, str] = {}        # rows given another key later (rare)
        self._preset = b""                      # zlib's preset dictionary: _zdict's tail
        self._cached: OrderedDict[int, bytes] = OrderedDict()   # blocks decompressed lately

    def __len__(self) -> int:
        return self._lengths.n

    @property
    def nbytes(self) -> int:
        return (len(self._zdict) + len(self._arenas) * _ARENA_BYTES + len(self._open)
                + self._starts.nbytes + self._sizes.nbytes
                + self._lengths.nbytes + self._rows.nbytes)

    def _block(self, b: int) -> bytes | bytearray:
        if b == self._lengths.n // self._block_rows:
            return self._open           # (read in place: only the key is copied)
        if b == 0:
            return self._zdict
        data = self._cached.get(b)
        if data is not None:
            self._cached.move_to_end(b)
            return data
        start, size = self._starts[b - 1], self._sizes[b - 1]
        if not size:            # a block of rows without keys
            return b""
        arena, at = divmod(start, _ARENA_BYTES)
        inflate = zlib.decompressobj(zdict=self._preset)
        data = inflate.decompress(self._arenas[arena][at:at + size]) + inflate.flush()
        # (a crawl's copies of one page often come close together: their
        # matches read the same few blocks)
        self._cached[b] = data
        if len(self._cached) > _CACHED_BLOCKS:
            self._cached.popitem(last=False)
        return data

    def _empty_blocks(self, count: int) -> None:
        """``count`` full blocks of rows without keys (no bytes stored)."""
        self._starts.extend(np.zeros(count, np.uint64))
        self._sizes.extend(np.zeros(count, np.uint32))

    def _gap(self, rows: int) -> None:
        """``rows`` rows without keys: whole blocks at once (pages added to
        the index directly can leave millions)."""
        # (row by row up to a block's end, and through the whole first block:
        # it becomes the zlib dictionary, raw)
        while rows and (self._lengths.n % self._block_rows or not self._lengths.n):
            self._append(None)
            rows -= 1
        blocks = rows // self._block_rows
        if blocks:
            self._lengths.extend(np.full(blocks * self._block_rows, _NO_KEY, np.uint16))
            self._empty_blocks(blocks)
        for _ in range(rows % self._block_rows):
            self._append(None)

    def _pack(self, block: bytes) -> None:
        """Append a compressed block to the arenas."""
        if not self._arenas or self._arena_used + len(block) > len(self._arenas[-1]):
            self._arenas.append(bytearray(max(_ARENA_BYTES, len(block))))
            self._arena_used = 0
        # (an arena longer than _ARENA_BYTES holds one block: the next starts anew)
        self._starts.append((len(self._arenas) - 1) * _ARENA_BYTES + self._arena_used)
        self._sizes.append(len(block))
        self._arenas[-1][self._arena_used:self._arena_used + len(block)] = block
        self._arena_used += len(block)

    def _key(self, row: int) -> str | None:
        if row in self._moved:
            return self._moved[row]
        if not 0 <= row < self._lengths.n:
            return None
        first = row - row % self._block_rows
        # (a block's few lengths as ints: a crawl reads one key per duplicate,
        # where NumPy calls would each run with cold caches)
        lengths = self._lengths.within_chunk(first, row + 1).tolist()
        if lengths[-1] == _NO_KEY:
            return None
        sizes = [self._long[first + i] if length == _LONG else 0 if length == _NO_KEY else length
                 for i, length in enumerate(lengths)]
        start = sum(sizes[:-1])
        data = self._block(row // self._block_rows)
        return data[start:start + sizes[-1]].decode("utf-8", "surrogatepass")

    def __getitem__(self, row: int) -> str:
        key = self._key(int(row))
        if key is None:
            raise KeyError(row)
        return key

    def get(self, row: int, default=None):
        key = self._key(int(row))
        return default if key is None else key

    def _append(self, data: bytes | None) -> None:
        row = self._lengths.n
        if data is None:
            self._lengths.append(_NO_KEY)
        else:
            if len(data) >= _LONG:
                self._long[row] = len(data)
            self._lengths.append(min(len(data), _LONG))
            self._open += data
        if (row + 1) % self._block_rows == 0:
            if row + 1 == self._block_rows:
                self._zdict = bytes(self._open)
                self._preset = self._zdict[-_ZDICT_BYTES:]
            elif not self._open:
                self._empty_blocks(1)
            else:
                deflate = zlib.compressobj(zdict=self._preset)
                self._pack(deflate.compress(self._open) + deflate.flush())
            self._open.clear()

    def __setitem__(self, row: int, key: str) -> None:
        """Store ``key`` for ``row``: the next row, or a later one (rows in
        between have none), or an earlier one (it takes the new key)."""
        row = int(row)
        if row < self._lengths.n:
            self._moved[row] = key
        else:
            self._gap(row - self._lengths.n)
            self._append(key.encode("utf-8", "surrogatepass"))
        self._rows.put(_key_hash(key), row)

    def row_of(self, key: str) -> int | None:
        """The newest row stored under ``key``, or None."""
        row = self._rows.get(_key_hash(key))
        if row is None or self._key(row) != key:
            return None
        return row

    def values(self):
        for row in range(self._lengths.n):
            key = self._key(row)
            if key is not None:
                yield key
