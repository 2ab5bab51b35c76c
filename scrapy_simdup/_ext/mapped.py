"""Large arrays in memory mappings of their own.

glibc serves a large allocation from its own mapping only above a threshold
that rises (up to 32 MiB) each time such a mapping is freed. After that, the
arrays an index rebuilds as it grows (each a little larger than the one it
replaces) come from the heap, and the ones they replace stay there: free,
but still held by the process. An array in its own anonymous mapping goes
back to the system when it is freed, whatever the allocator has done, and
its pages cost nothing until written (a new mapping reads as zeros).
"""
from __future__ import annotations

import math
import mmap

import numpy as np

__all__ = ["MAPPED_BYTES", "empty", "full", "zeros"]

#: arrays of at least this many bytes get a mapping of their own (glibc's
#: threshold before it rises)
MAPPED_BYTES = 128 * 1024


def zeros(shape, dtype) -> np.ndarray:
    """``np.zeros(shape, dtype)``, in its own mapping when it is large."""
    dtype = np.dtype(dtype)
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    count = math.prod(shape)
    if count * dtype.itemsize < MAPPED_BYTES:
        return np.zeros(shape, dtype)
    return np.frombuffer(mmap.mmap(-1, count * dtype.itemsize), dtype, count).reshape(shape)


def empty(shape, dtype) -> np.ndarray:
    """An array to be filled (zeros when it is mapped)."""
    dtype = np.dtype(dtype)
    count = math.prod((shape,) if isinstance(shape, (int, np.integer)) else shape)
    return zeros(shape, dtype) if count * dtype.itemsize >= MAPPED_BYTES else \
        np.empty(shape, dtype)


def full(shape, value, dtype) -> np.ndarray:
    """``np.full(shape, value, dtype)``, in its own mapping when it is large."""
    out = zeros(shape, dtype)
    out.fill(value)
    return out
