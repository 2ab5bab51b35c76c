"""Online near-duplicate indexes: PSM (probabilistic, one copy) and BPHS (exact).

``PSMIndex`` implements Probabilistic Simhash Matching (Sood & Loguinov 2011)
on the compiled table of ``psm.pyx``; ``BPHSIndex`` is Manku's block-permuted
tables (``_ext/bphs.pyx``), exact for distances up to ``distance``. Both take
fingerprints as Python ints or uint64 arrays and ids as int64 (a PSM table
stores them as uint32: below ``2**32 - 1``).
"""
from __future__ import annotations

import json
import os
import struct
from math import comb

import numpy as np

from scrapy_simdup._ext import bphs, checksum, psm
from scrapy_simdup._limits import DEFAULT_RECALL, MAX_DISTANCE
from scrapy_simdup.exceptions import CorruptIndexError
from scrapy_simdup.index.volatility import VolatilityModel
from scrapy_simdup.storage.atomic import atomic_write

__all__ = ["PSMIndex", "BPHSIndex", "flip_masks"]

MAX_HEADER_BITS = 30
MAX_BLOCKS = 24   # BPHS blocks G (_ext/bphs.pyx MAX_G)


# ------------------------------------------------------------ validation
def _check_distance(distance) -> int:
    if isinstance(distance, bool) or not isinstance(distance, (int, np.integer)):
        raise TypeError(f"distance must be an int, got {type(distance).__name__}")
    if not 0 <= distance <= MAX_DISTANCE:
        raise ValueError(f"distance must be in [0, {MAX_DISTANCE}], got {distance}")
    return int(distance)


def _check_header_bits(header_bits, name="header_bits") -> int:
    if isinstance(header_bits, bool) or not isinstance(header_bits, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(header_bits).__name__}")
    if not 1 <= header_bits <= MAX_HEADER_BITS:
        raise ValueError(f"{name} must be in [1, {MAX_HEADER_BITS}], got {header_bits}")
    return int(header_bits)


def _as_values(values, name="values") -> np.ndarray:
    """Python int / sequence / array -> contiguous uint64 array (1-D)."""
    if isinstance(values, (int, np.integer)) and not isinstance(values, bool):
        if not 0 <= int(values) < 1 << 64:
            raise ValueError(f"{name} must be in [0, 2**64), got {values}")
        return np.array([int(values)], dtype=np.uint64)
    if isinstance(values, np.ndarray):
        if values.dtype == np.uint64:
            arr = values
        elif values.dtype.kind in "iu":
            if values.size and values.min() < 0:
                raise ValueError(f"{name} must be non-negative")
            arr = values.astype(np.uint64)
        elif values.dtype == object:
            arr = _as_values(values.tolist(), name)
        else:
            raise TypeError(f"{name} must hold integers, got dtype {values.dtype}")
    else:
        try:
            seq = list(values)
        except TypeError:
            raise TypeError(f"{name} must be an int or a sequence of ints, got "
                            f"{type(values).__name__}") from None
        for v in seq:
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"{name} must hold ints, got {type(v).__name__}")
            if not 0 <= int(v) < 1 << 64:
                raise ValueError(f"{name} must be in [0, 2**64), got {v}")
        arr = np.array([int(v) for v in seq], dtype=np.uint64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    return np.ascontiguousarray(arr)


def _as_ids(ids, n: int, start: int) -> np.ndarray:
    if ids is None:
        return np.arange(start, start + n, dtype=np.int64)
    if isinstance(ids, (int, np.integer)) and not isinstance(ids, bool):
        ids = [int(ids)]
    arr = np.asarray(ids)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"ids must be integers, got dtype {arr.dtype}")
    if arr.dtype == np.uint64 and arr.size and arr.max() > np.iinfo(np.int64).max:
        raise ValueError("ids must fit in int64")
    arr = np.ascontiguousarray(arr.astype(np.int64, copy=False))
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"ids must have one entry per value ({n}), got shape {arr.shape}")
    if arr.size and arr.min() < 0:
        raise ValueError("ids must be >= 0 (query_many answers -1 for 'no match')")
    return arr


def _as_W_many(W, n: int):
    if W is None:
        return None
    arr = np.ascontiguousarray(W, dtype=np.float64)
    if arr.ndim == 1 and n == 1:
        arr = arr.reshape(1, -1)
    if arr.shape != (n, 64):
        raise ValueError(f"W must have shape ({n}, 64), got {arr.shape}")
    return arr  # finiteness is checked per row in the compiled loop


def _as_W1(W):
    if W is None:
        return None
    arr = np.ascontiguousarray(W, dtype=np.float64)
    if arr.shape != (64,):
        raise ValueError(f"W must have shape (64,), got {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError("W must be finite (no NaN or infinity)")
    return arr


def flip_masks(W, header_bits: int, distance: int, max_probes=None, model=None):
    """Header XOR masks in decreasing p(S), for a remote bucketed store.

    Returns ``(masks uint64[k], flipped uint8[k])``: each mask is already
    shifted into the top ``header_bits`` bits; the first is 0 (the query's own
    header, flipped 0), then every set of 1..``distance`` header bits in
    decreasing probability under ``model`` (default: the shipped model; W None
    means uniform). ``max_probes`` caps ``k`` (None = all sets). Probe bucket
    ``(value ^ mask) >> (64 - header_bits)`` and accept entries within
    ``distance`` of ``value``.
    """
    header_bits = _check_header_bits(header_bits)
    distance = _check_distance(distance)
    if max_probes is not None and (isinstance(max_probes, bool)
                                   or not isinstance(max_probes, (int, np.integer))
                                   or max_probes < 1):
        raise ValueError(f"max_probes must be an int >= 1 or None, got {max_probes!r}")
    if max_probes is not None:
        max_probes = min(int(max_probes), 1 << 62)
    model = VolatilityModel.default() if model is None else model
    if not isinstance(model, VolatilityModel):
        raise TypeError(f"model must be a VolatilityModel, got {type(model).__name__}")
    return psm.flip_masks_c(model.compiled, _as_W1(W), header_bits, distance,
                             -1 if max_probes is None else int(max_probes))


# ------------------------------------------------------------ persistence
_MAGIC = b"SIMDPSM\x00"
_VERSION = 2            # 1 stored the ids as int64
_ID_LIMIT = (1 << 32) - 1
# magic, version, flags, n, header_bits, distance, model_len, data_crc, meta_crc
_HEAD = struct.Struct("<8sIIQIIQII")
_ALIGN = 64


def _pad(n: int) -> int:
    return (-n) % _ALIGN


# ------------------------------------------------------------ PSM
class PSMIndex(psm.PSMCore):
    """Probabilistic Simhash Matching over one bucketed copy of the data.

    ``distance``: Hamming threshold ``h``. ``max_probes``: buckets probed per
    query (own header included). ``recall``: pick ``max_probes`` from the
    calibrated model for the current header size (re-picked whenever the
    header grows); without either, the crawl's default recall
    (``DEFAULT_RECALL``); ``recall=1.0`` probes every set of <= h header bits.
    ``header_bits``: fix ``t`` (default: ``floor(log2 n) - 2``, growing).
    ``model``: a :class:`VolatilityModel` (default: the shipped one).
    """

    def __init__(self, distance=3, recall=None, max_probes=None, header_bits=None,
                 model=None):
        distance = _check_distance(distance)
        if header_bits is not None:
            header_bits = _check_header_bits(header_bits)
        if recall is not None and max_probes is not None:
            raise ValueError("give recall or max_probes, not both")
        if recall is None and max_probes is None:
            recall = DEFAULT_RECALL
        if recall is not None:
            if isinstance(recall, bool) or not isinstance(recall, (int, float)) or \
                    not 0.0 < float(recall) <= 1.0:
                raise ValueError(f"recall must be in (0, 1], got {recall!r}")
            recall = float(recall)
        model = VolatilityModel.default() if model is None else model
        if not isinstance(model, VolatilityModel):
            raise TypeError(f"model must be a VolatilityModel, got {type(model).__name__}")
        self.model = model
        self.recall = recall
        self._core_init(distance, header_bits or 0, model.compiled)
        self.max_probes = max_probes
        self._on_rebuild()

    def _on_rebuild(self):
        if getattr(self, "recall", None) is not None:
            self.max_probes = self.model.probes_for_recall(
                self.recall, self.header_bits, self.distance)

    def add(self, values, ids=None) -> np.ndarray:
        """Store one or many fingerprints; returns the int64 ids assigned
        (below ``2**32 - 1``: the table stores them in 4 bytes)."""
        vals = _as_values(values)
        id_arr = _as_ids(ids, vals.shape[0], len(self))
        if id_arr.size and id_arr.max() >= _ID_LIMIT:
            raise ValueError(f"PSMIndex ids must be below 2**32 - 1, got {int(id_arr.max())}")
        self._add_arrays(vals, id_arr.astype(np.uint32))
        return id_arr

    def query_many(self, values, W=None, first=True):
        """Batch query in one compiled loop.

        ``first=True``: ``(ids int64[n], distances int8[n])``, -1 where no
        match. ``first=False``: ``(query_index, ids, distances)`` of every match,
        sorted by query, distance, id."""
        vals = _as_values(values)
        return self._query_many(vals, _as_W_many(W, vals.shape[0]), bool(first))

    def __repr__(self):
        return (f"PSMIndex(n={len(self)}, distance={self.distance}, "
                f"header_bits={self.header_bits}, max_probes={self.max_probes})")

    # -- persistence ----------------------------------------------------
    def save(self, path) -> None:
        """Write one self-checking file atomically (temp file, fsync, rename)."""
        if self._n_buffered():
            self._merge()
        vals, ids, offsets = self._main_arrays()
        model = json.dumps({"model": self.model.to_dict(), "recall": self.recall,
                            "max_probes": self.max_probes,
                            "fixed_header_bits": self._fixed_header_bits()}).encode()
        data_crc = 0
        for a in (vals, ids, offsets):
            data_crc = checksum.crc32(memoryview(np.ascontiguousarray(a)).cast("B"), data_crc)
        head = _HEAD.pack(_MAGIC, _VERSION, 0, vals.shape[0], self.header_bits,
                          self.distance, len(model), data_crc, 0)
        meta_crc = checksum.crc32(head[:-4] + model)
        head = head[:-4] + struct.pack("<I", meta_crc)
        first = head + model
        chunks = [first, b"\0" * _pad(len(first))]
        for a in (vals, ids, offsets):
            b = memoryview(np.ascontiguousarray(a)).cast("B")
            chunks += [b, b"\0" * _pad(len(b))]
        with atomic_write(path) as handle:
            for chunk in chunks:
                handle.write(chunk)

    @classmethod
    def load(cls, path, mmap=True, verify=True) -> PSMIndex:
        """Open a saved index (memory-mapped read-only by default; adding to
        it copies). Raises :class:`CorruptIndexError` naming the file if it is
        truncated, corrupt or not a PSM index file."""
        path = os.fspath(path)

        def bad(why):
            return CorruptIndexError(path, f"not a valid PSM index file ({why})")

        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(_HEAD.size)
            if len(head) < _HEAD.size:
                raise bad(f"truncated: {size} bytes")
            magic, version, _flags, n, t, distance, mlen, data_crc, meta_crc = \
                _HEAD.unpack(head)
            if magic != _MAGIC:
                raise bad("bad magic")
            if version not in (1, _VERSION):
                raise bad(f"unsupported version {version}")
            if not (1 <= t <= MAX_HEADER_BITS and 0 <= distance <= MAX_DISTANCE
                    and mlen < 1 << 24):
                raise bad("bad header fields")
            model_bytes = f.read(mlen)
        if len(model_bytes) != mlen or checksum.crc32(head[:-4] + model_bytes) != meta_crc:
            raise bad("header checksum mismatch")
        pos = _HEAD.size + mlen
        pos += _pad(pos)
        layout = []
        id_type = np.int64 if version == 1 else np.uint32
        for dtype, count in ((np.uint64, n), (id_type, n), (np.uint32, (1 << t) + 1)):
            nbytes = count * np.dtype(dtype).itemsize
            layout.append((dtype, count, pos))
            pos += nbytes + _pad(nbytes)
        if size != pos:
            raise bad(f"size {size} bytes, expected {pos}")
        try:
            meta = json.loads(model_bytes)
            model = VolatilityModel.from_dict(meta["model"])
        except (ValueError, KeyError, TypeError) as exc:
            raise bad(f"bad model: {exc}") from None
        arrays = []
        for dtype, count, offset in layout:
            if mmap and count:
                a = np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=(count,))
            else:
                with open(path, "rb") as f:
                    f.seek(offset)
                    a = np.fromfile(f, dtype=dtype, count=count)
            arrays.append(a)
        vals, ids, offsets = arrays
        if verify:
            crc = 0
            for a in arrays:
                crc = checksum.crc32(memoryview(np.ascontiguousarray(a)).cast("B"), crc)
            if crc != data_crc:
                raise bad("data checksum mismatch")
        if version == 1:
            if n and not (0 <= ids.min() and ids.max() < _ID_LIMIT):
                raise bad("ids out of range")
            ids = np.asarray(ids).astype(np.uint32)
        # the query loops trust the offsets: they must be a non-decreasing
        # 0..n run (anything else reads out of bounds), and with verify every
        # value must sit in its header's bucket
        if offsets[0] != 0 or offsets[-1] != n \
                or (n and not np.all(offsets[1:] >= offsets[:-1])):
            raise bad("bad bucket offsets")
        if verify and n:
            headers = np.asarray(vals) >> np.uint64(64 - t)
            counts = np.bincount(headers.astype(np.int64), minlength=1 << t)
            if not np.array_equal(np.cumsum(counts), np.asarray(offsets[1:])):
                raise bad("fingerprints are not in their header buckets")
        fixed = meta.get("fixed_header_bits") or None
        self = cls(distance=distance, header_bits=fixed, model=model)
        self.recall = meta.get("recall")
        self._set_main(vals, ids, t, offsets)
        if self.recall is None:
            self.max_probes = meta.get("max_probes")
        else:
            self._on_rebuild()
        return self


# ------------------------------------------------------------ BPHS
class BPHSIndex(bphs.BPHSCore):
    """Manku's Block-Permuted Hamming Search: exact for distances <= h.

    64 bits are split into ``blocks`` (G) blocks; each of the ``tables``
    (T = C(G, g)) tables keeps its own sorted copy with ``g = G - h``
    blocks leading. Give ``tables`` (e.g. 4 or 10 for h = 3) or ``blocks``;
    the default is G = h + 1 (T = h + 1 tables). ``lookup``: "offsets"
    (default; a bucket offset array per table, like PSM) or "binary" (a
    binary search per table, as in Manku et al. and the PSM paper).
    """

    def __init__(self, distance=3, blocks=None, tables=None, lookup="offsets"):
        distance = _check_distance(distance)
        if lookup not in ("offsets", "binary"):
            raise ValueError(f"lookup must be 'offsets' or 'binary', got {lookup!r}")
        self.binary = lookup == "binary"
        if tables is not None and (isinstance(tables, bool)
                                   or not isinstance(tables, (int, np.integer))):
            raise TypeError(f"tables must be an int, got {tables!r}")
        if blocks is not None:
            if isinstance(blocks, bool) or not isinstance(blocks, (int, np.integer)):
                raise TypeError("blocks must be an int")
            if not distance + 1 <= blocks <= MAX_BLOCKS:
                raise ValueError(
                    f"blocks must be in [{distance + 1}, {MAX_BLOCKS}] for distance "
                    f"{distance}, got {blocks}")
            G = int(blocks)
            if tables is not None and comb(G, G - distance) != tables:
                raise ValueError(
                    f"tables={tables} does not match blocks={G} "
                    f"(C({G}, {G - distance}) = {comb(G, G - distance)})")
        elif tables is not None:
            G = None
            for g in range(1, 64 - distance + 1):
                if comb(g + distance, g) == tables:
                    G = g + distance
                    break
                if comb(g + distance, g) > tables:
                    break
            if G is None:
                raise ValueError(
                    f"tables must be C(g + {distance}, g) for some g >= 1 "
                    f"(e.g. {distance + 1}, {comb(distance + 2, 2)}), got {tables}")
        else:
            G = distance + 1
        self._core_init(distance, G)

    def add(self, values, ids=None) -> np.ndarray:
        vals = _as_values(values)
        id_arr = _as_ids(ids, vals.shape[0], len(self))
        self._add_arrays(vals, id_arr)
        return id_arr

    def query(self, value, W=None, first=True):
        """Exact: all (``first=False``) or one (``first=True``) stored
        fingerprints within ``distance``; W is accepted and ignored."""
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
                or not 0 <= int(value) < 1 << 64:
            raise ValueError(f"value must be an int in [0, 2**64), got {value!r}")
        if W is not None:
            _as_W1(W)
        return self._query1(int(value), bool(first))

    def query_many(self, values, W=None, first=True):
        vals = _as_values(values)
        _as_W_many(W, vals.shape[0])
        return self._query_many(vals, bool(first))

    def __repr__(self):
        return (f"BPHSIndex(n={len(self)}, distance={self.distance}, "
                f"blocks={self.blocks}, tables={self.tables})")
