# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled batch scan for PSM batch mode (the offline merge).

In batch mode a chunk of the collection ``H`` arrives already *sorted* (every
batch is sorted before it is appended), so its ``t``-bit header buckets are
contiguous ranges: the bucket table is a ``2^t + 1`` offset array built in
one linear pass (:func:`bucket_offsets`), no hashing. The batch ``Q`` brings
its probe headers precomputed once per merge (the flip sets the VOSH order
gives for each element, as the paper advises: "pre-process Q by identifying
the volatile bits"), so the scan of every chunk is a tight loop:

    for each active x in Q, for each probe mask f of x (f = 0 first):
        for y in bucket((x ^ f) >> (64 - t)):
            if popcount(x ^ y) <= h: report (x, y)

Within a bucket reached with ``i`` header bits flipped, ``popcount(x ^ y) <= h``
is the paper's test "at most ``h - i`` differing bits in the other ``64 - t``".
``first_only`` is PSM-F: an element is reported once and then deactivated
(``active[i] = 0``), so later chunks skip it. Given the sketches of both
sides, :func:`join_chunk` also verifies each pair within ``h`` (enough
equal sketch bins) before reporting or deactivating anything. The pure NumPy reference is
``tests/reference/batch.py``.
"""
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t, int32_t
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memset

from scrapy_simdup._ext.cbuiltins cimport __builtin_prefetch, ctz32
from scrapy_simdup._ext.joinscan cimport (simdup_block64_fn, simdup_block_fn,
                                          simdup_block_slots, simdup_block_width,
                                          simdup_join_level, simdup_join_select,
                                          simdup_next_block, simdup_next_block64,
                                          simdup_collect64_fn, simdup_collect_pair64)
from scrapy_simdup._ext.popcount cimport simdup_popcount64
from scrapy_simdup._ext.sketch cimport SIMDUP_SKETCH_BINS, simdup_sketch_matches
from scrapy_simdup._ext.topflips cimport (TOPFLIPS_MAX_CAND, TOPFLIPS_MAX_H, TOPFLIPS_MAX_T,
                                          TOPFLIPS_SEL_MAX_CAND, TOPFLIPS_SEL_MAX_H,
                                          topflips_avx512, topflips_level, topflips_plan,
                                          topflips_row16_avx512, topflips_sel_plan,
                                          topflips_select_arrays_avx512,
                                          topflips_select_row16_avx512, topflips_use_level)
from scrapy_simdup._ext.vosh cimport (vosh_gen, vosh_init, vosh_limit, vosh_next, vosh_node,
                                      vosh_total)

import math

import numpy as np

from scrapy_simdup._limits import MAX_DISTANCE


ctypedef fused mask_t:
    uint16_t
    uint32_t
    uint64_t


include "batchjoin_flips.pxi"
include "batchjoin_cq.pxi"
include "batchjoin_scan.pxi"
include "batchjoin_join.pxi"
