# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled PSM core: VOSH flip-set generation and the bucketed online table.

Layout (one copy of the data, DESIGN.md "PSM online"):

* ``main``: ``vals`` uint64[n_main] and ``ids`` uint32[n_main] grouped by the
  ``t``-bit header (the top ``t`` bits), plus ``offsets`` uint32[2**t + 1]:
  bucket ``b`` is ``vals[offsets[b]:offsets[b+1]]``. A packed table keeps the
  ids' low ``t`` bits in the values' header bits (the bucket says the header)
  and only the ids' other bits beside them, in 0, 1, 2 or 4 bytes.
* ``buffer``: recent inserts, appended in O(1) and chained per header
  (``head`` int32[2**tb], ``next`` int32[]), ``tb <= t`` bits. A query walks the
  chain of every bucket it probes, so it sees every value added so far. When
  the buffer holds more than a quarter of ``main`` it is merged with a
  counting sort by header (O(n + 2**t)), so inserts are amortised O(1); ``t``
  is re-chosen from the new size at each merge.

The Python facade (``scrapy_simdup/index/memory.py``) validates arguments that are not on the hot
path; the query entry points here validate their own (W shape, NaN) in C so a
single ``query`` stays a few microseconds.
"""
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t, int32_t, int8_t
from libc.stdlib cimport malloc, free
from libc.math cimport fabs, sqrt, log, isfinite

from scrapy_simdup._ext.cbuiltins cimport __builtin_prefetch
from scrapy_simdup._ext.popcount cimport simdup_popcount64
from scrapy_simdup._ext.resvec cimport res_free, res_push, resvec
from scrapy_simdup._ext.sketch cimport SIMDUP_SKETCH_BINS, simdup_sketch_matches
from scrapy_simdup._ext.vosh cimport (vosh_gen, vosh_init, vosh_limit, vosh_next, vosh_node,
                                      vosh_total)

import numpy as np

from scrapy_simdup._ext import mapped


cdef enum:
    MAX_T = 32
    STACK_HEAP = 600
    BATCH = 8
    CAND_CAP = 256  # candidates of one batch of probes checked in a second pass
    VERIFY_AHEAD = 8     # candidates whose sketch is prefetched ahead
    GROUP = 8       # queries pipelined together in query_many
    FIRST_STAGE = 4 # PSM-F probes of the first pipelined stage
    KPIPE = 64      # probes per query up to which query_many pipelines


include "psm_model.pxi"
include "psm_flips.pxi"
include "psm_table.pxi"
include "psm_best.pxi"
