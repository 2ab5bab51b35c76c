"""Large arrays in memory mappings of their own.

glibc serves a large allocation from its own mapping only above a threshold
that rises (up to 32 MiB) each time such a mapping is freed. After that, the
arrays an index rebuilds as it grows (each a little larger than the one it
replaces) come from the heap, and the ones they replace stay there: free,
but still held by the process. An array in its own anonymous mapping goes
back to the system when it is freed, whatever the allocator has done, and
its pages cost nothing until written (a new mapping reads as zeros).

The mappings are private. ``huge=True`` asks for transparent huge pages
(from HUGE_BYTES on): an index's look-ups read its tables at random, and with
4 KiB pages nearly every bucket they read costs a TLB miss as well as a cache
miss. Only for arrays written in full: a huge page is backed whole as soon as
one byte of it is written, so an array filled bit by bit (a buffer with room
to grow) would hold up to a huge page more than it uses.
"""
from __future__ import annotations

import math
import mmap

import numpy as np

__all__ = ["HUGE_BYTES", "MAPPED_BYTES", "empty", "full", "zeros"]

#: arrays of at least this many bytes get a mapping of their own (glibc's
#: threshold before it rises)
MAPPED_BYTES = 128 * 1024
#: mapped arrays of at least this many bytes may ask for transparent huge pages
HUGE_BYTES = 4 * 1024 * 1024

# (Windows' mmap takes no flags; its anonymous mappings are the process's own)
_PRIVATE = {"flags": mmap.MAP_PRIVATE} if hasattr(mmap, "MAP_PRIVATE") else {}


def _layout(shape, dtype) -> tuple[tuple, np.dtype, int]:
    """``(shape as a tuple, dtype, bytes)`` of an array."""
    dtype = np.dtype(dtype)
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    return shape, dtype, math.prod(shape) * dtype.itemsize


def zeros(shape, dtype, huge: bool = False) -> np.ndarray:
    """``np.zeros(shape, dtype)``, in its own mapping when it is large."""
    shape, dtype, nbytes = _layout(shape, dtype)
    if nbytes < MAPPED_BYTES:
        return np.zeros(shape, dtype)
    m = mmap.mmap(-1, nbytes, **_PRIVATE)
    if huge and nbytes >= HUGE_BYTES and hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            m.madvise(mmap.MADV_HUGEPAGE)
        except OSError:     # a kernel without transparent huge pages: small pages it is
            pass
    return np.frombuffer(m, dtype).reshape(shape)


def empty(shape, dtype, huge: bool = False) -> np.ndarray:
    """An array to be filled (zeros when it is mapped)."""
    shape, dtype, nbytes = _layout(shape, dtype)
    return np.empty(shape, dtype) if nbytes < MAPPED_BYTES else zeros(shape, dtype, huge)


def full(shape, value, dtype) -> np.ndarray:
    """``np.full(shape, value, dtype)``, in its own mapping when it is large."""
    out = zeros(shape, dtype, huge=True)      # written in full
    out.fill(value)
    return out
