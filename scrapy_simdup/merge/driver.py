"""PSM batch mode: merge crawl batches into one on-disk collection, find every near-duplicate.

The collection (a directory, by default ``<first DIR>/collection``):

``H.bin``
    The collection ``H``: raw little-endian records of :data:`H_DTYPE`
    (``value <u8``, ``id <i8``), a sequence of *runs*, each sorted by value
    (every merged batch is sorted and appended as one run).
    ``np.fromfile("H.bin", dtype=[("value", "<u8"), ("id", "<i8")])`` reads it.
``urls.bin`` / ``urls.idx``
    URL of collection id ``i``: bytes ``idx[i-1]:idx[i]`` (``idx[-1] = 0``) of
    ``urls.bin``; ``urls.idx`` is raw ``<i8`` end offsets.
``pairs.bin``
    Every duplicate pair found so far: raw :data:`PAIR_DTYPE` records
    (``id``, ``duplicate_of``, ``distance``), ``duplicate_of`` the earlier record.
``collection.json``
    Written last, atomically, after the appends above are fsynced: ``format``
    (``"simdup-collection"``), ``version``, ``count``, byte lengths and a
    CRC-32 per run, the merged batches (so they are not merged twice), and
    ``crc32``: the CRC-32 of each of ``urls.bin``, ``urls.idx`` and
    ``pairs.bin`` up to its recorded length (kept up to date incrementally;
    checked before a merge appends and before URLs or pairs are read).
    Bytes past the recorded lengths (an append cut by a crash) are ignored
    and overwritten by the next merge.

The merge of a pending batch ``Q`` (at most ``m`` fingerprints): read ``H``
chunk by chunk (runs, each already sorted; at most ``m`` records per chunk),
match every still-active element of ``Q`` against the chunk with the online
PSM scan (PSM-F deactivates an element at its first match), match ``Q``
against its own earlier elements, then sort ``Q`` and append it to ``H``.
``exact`` uses BPHS batch mode instead (tables built over ``Q``, each chunk
element looked up in them), the reference for recall.
"""
from __future__ import annotations

import io
import json
import math
import os
import re
import stat
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from scrapy_simdup._ext import batchjoin
from scrapy_simdup.storage.atomic import atomic_write, atomic_write_json, crc32_file, fsync_dir, lock_directory, read_json
from scrapy_simdup.exceptions import CorruptFileError, DirectoryBusyError
from scrapy_simdup.storage.batchfile import (BATCH_DTYPE, list_batches, read_batch, read_meta, read_urls,
                         unfinished_batches)
from scrapy_simdup.merge.probes import probe_masks, probes_for_recall
from zlib import crc32
from scrapy_simdup._limits import DEFAULT_DISTANCE, MAX_DISTANCE

FORMAT = "simdup-collection"
VERSION = 1
H_DTYPE = np.dtype([("value", "<u8"), ("id", "<i8")])
_SIDE_FILES = ("urls.bin", "urls.idx", "pairs.bin")      # CRC-32 in the header
PAIR_DTYPE = np.dtype([("id", "<i8"), ("duplicate_of", "<i8"), ("distance", "u1")])

DEFAULT_PROBES = 20      # when the volatility model has no calibration to ask
# the model's target when no --probes/--recall is given; it is conservative by a
# few points for PSM-F (bench_batch measures recall against exact BPHS)
DEFAULT_MERGE_RECALL = 0.98
DEFAULT_CHUNK = 1 << 20


# ----------------------------------------------------------------------------- collection


class Collection:
    """The on-disk collection ``H`` (see the module docstring)."""

    def __init__(self, path, create: bool = False):
        self.path = Path(path)
        self.meta_path = self.path / "collection.json"
        if not self.meta_path.exists():
            if not create:
                raise CorruptFileError(self.meta_path, "no collection here (run `simdup merge` first)")
            self.path.mkdir(parents=True, exist_ok=True)
            self.meta = {"format": FORMAT, "version": VERSION, "count": 0, "runs": [],
                         "urls_bytes": 0, "pairs": 0, "merged": {}, "created": time.time(),
                         "crc32": {name: 0 for name in _SIDE_FILES}}
            for name in ("H.bin", "urls.bin", "urls.idx", "pairs.bin"):
                (self.path / name).touch()
            atomic_write_json(self.meta_path, self.meta)
        else:
            self.meta = self._load_meta()
        self._check_lengths()

    def _load_meta(self) -> dict:
        meta = read_json(self.meta_path, "collection header")
        if meta.get("format") != FORMAT:
            raise CorruptFileError(self.meta_path, f"not a {FORMAT} header")
        if meta.get("version") != VERSION:
            raise CorruptFileError(self.meta_path, f"collection version {meta.get('version')!r} "
                                   f"is not supported (this scrapy-simdup reads {VERSION})")
        for key in ("count", "urls_bytes", "pairs"):
            if not isinstance(meta.get(key), int) or meta[key] < 0:
                raise CorruptFileError(self.meta_path, f"field {key!r} is missing or invalid")
        if not isinstance(meta.get("runs"), list) or not isinstance(meta.get("merged"), dict):
            raise CorruptFileError(self.meta_path, "fields 'runs'/'merged' are missing or invalid")
        if not all(isinstance(r, dict) and isinstance(r.get("count"), int) and r["count"] >= 0
                   for r in meta["runs"]):
            raise CorruptFileError(self.meta_path, "a run entry is missing or invalid")
        if sum(r["count"] for r in meta["runs"]) != meta["count"]:
            raise CorruptFileError(self.meta_path, "run lengths do not add up to the count")
        return meta

    def _check_lengths(self) -> None:
        need = {
            "H.bin": self.count * H_DTYPE.itemsize,
            "urls.idx": self.count * 8,
            "urls.bin": self.meta["urls_bytes"],
            "pairs.bin": self.meta["pairs"] * PAIR_DTYPE.itemsize,
        }
        for name, size in need.items():
            path = self.path / name
            try:
                have = path.stat().st_size
            except FileNotFoundError:
                raise CorruptFileError(path, "collection file is missing") from None
            if have < size:
                raise CorruptFileError(path, f"collection file is {have} bytes, the header "
                                       f"needs {size} (truncated)")

    @property
    def count(self) -> int:
        return int(self.meta["count"])

    def _recorded_length(self, name: str) -> int:
        return {"urls.bin": self.meta["urls_bytes"], "urls.idx": self.count * 8,
                "pairs.bin": self.meta["pairs"] * PAIR_DTYPE.itemsize}[name]

    def verify_files(self, names=_SIDE_FILES) -> None:
        """Check ``names`` against the CRC-32s of the header: CorruptFileError
        naming the file on a mismatch (collections written before these CRCs
        were recorded are not checked)."""
        crcs = self.meta.get("crc32")
        if not isinstance(crcs, dict):
            return
        for name in names:
            # (a file shorter than recorded is refused when the collection opens)
            if name in crcs and crc32_file(self.path / name,
                                           self._recorded_length(name)) != crcs[name]:
                raise CorruptFileError(self.path / name, "checksum mismatch: the collection "
                                       "file was changed or damaged after it was written")

    def _groups(self, chunk_size: int) -> list[list[dict]]:
        runs = self.meta["runs"]
        groups, i = [], 0
        while i < len(runs):
            group = [runs[i]]
            i += 1
            while i < len(runs) and sum(r["count"] for r in group) + runs[i]["count"] <= chunk_size:
                group.append(runs[i])
                i += 1
            groups.append(group)
        return groups

    def n_chunks(self, chunk_size: int) -> int:
        return len(self._groups(chunk_size))

    def lock(self):
        """An exclusive lock on the collection (one merge at a time); raises
        ValueError if another process holds it."""
        return self.lock_directory(self.path)

    @staticmethod
    def lock_directory(path):
        """:meth:`lock` before the header is read or created (``merge`` takes
        it first, so a merge never works on a header another one replaced)."""
        try:
            return lock_directory(path)
        except DirectoryBusyError as exc:
            raise ValueError(f"{path}: another merge is running on this collection "
                             f"({exc.holder})") from None

    def chunks(self, chunk_size: int, verify: bool = True):
        """Yield ``(start, records)``: consecutive runs, each chunk sorted, at most
        ``chunk_size`` records (a run longer than that is one chunk of its own).

        ``records`` is a view of one buffer that the next chunk overwrites (a
        fresh buffer per chunk costs a page fault per 4 KiB, slow on virtual
        machines): copy what must outlive the iteration.
        """
        path = self.path / "H.bin"
        groups = self._groups(chunk_size)
        size = max((sum(r["count"] for r in g) for g in groups), default=0)
        buf = np.empty(size, dtype=H_DTYPE)
        raw = memoryview(buf).cast("B")
        with open(path, "rb", buffering=0) as handle:
            start = 0
            for group in groups:
                at = 0          # records of this group read so far
                for run in group:
                    nbytes = run["count"] * H_DTYPE.itemsize
                    part = raw[at * H_DTYPE.itemsize:at * H_DTYPE.itemsize + nbytes]
                    got = 0
                    while got < nbytes:
                        k = handle.readinto(part[got:])
                        if not k:
                            raise CorruptFileError(path, "collection data ends early (truncated)")
                        got += k
                    if verify and crc32(part) != run["crc32"]:
                        raise CorruptFileError(path, f"checksum mismatch in the run starting at "
                                               f"record {start + at}")
                    at += run["count"]
                records = buf[:at]
                if len(group) > 1:
                    records = records[np.argsort(records["value"], kind="stable")]
                yield start, records
                start += at

    def urls(self, ids) -> list[str]:
        """URLs of collection ids (random access through ``urls.idx``)."""
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) == 0:
            return []
        idx = np.memmap(self.path / "urls.idx", dtype="<i8", mode="r", shape=(self.count,))
        ends = idx[ids]
        starts = np.where(ids > 0, idx[np.maximum(ids - 1, 0)], 0)
        out = []
        with open(self.path / "urls.bin", "rb") as handle:
            for s, e in zip(starts.tolist(), ends.tolist()):
                handle.seek(s)
                out.append(handle.read(e - s).decode("utf-8", "surrogateescape"))
        del idx
        return out

    def pairs(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """The committed pairs ``start`` to ``stop`` (default: all)."""
        n = min(self.meta["pairs"], self.meta["pairs"] if stop is None else stop) - start
        if n <= 0:
            return np.zeros(0, dtype=PAIR_DTYPE)
        return np.fromfile(self.path / "pairs.bin", dtype=PAIR_DTYPE, count=n,
                           offset=start * PAIR_DTYPE.itemsize)

    def set_meta(self, **fields) -> None:
        """Change header fields (None removes one) and commit the header."""
        meta = {k: v for k, v in {**self.meta, **fields}.items() if v is not None}
        atomic_write_json(self.meta_path, meta)
        self.meta = meta

    def _append(self, name: str, offset: int, data: bytes) -> None:
        with open(self.path / name, "r+b") as handle:
            handle.seek(offset)
            handle.write(data)
            handle.truncate()
            handle.flush()
            os.fsync(handle.fileno())

    def append(self, sorted_q: np.ndarray, urls: list[str], pairs: np.ndarray,
               merged: dict, recipe: str | None = None, extra: dict | None = None) -> None:
        """Append a sorted run with its URLs and pairs; commit by rewriting the header.
        ``recipe``: the fingerprint recipe of the run (kept in the header);
        ``extra``: more header fields committed with the run."""
        data = np.ascontiguousarray(sorted_q, dtype=H_DTYPE).tobytes()
        self._append("H.bin", self.count * H_DTYPE.itemsize, data)
        encoded = [u.encode("utf-8", "surrogateescape") for u in urls]
        lengths = np.fromiter((len(b) for b in encoded), dtype=np.int64, count=len(encoded))
        ends = self.meta["urls_bytes"] + np.cumsum(lengths)
        appended = {"urls.bin": b"".join(encoded), "urls.idx": ends.astype("<i8").tobytes(),
                     "pairs.bin": np.ascontiguousarray(pairs, dtype=PAIR_DTYPE).tobytes()}
        for name, blob in appended.items():
            self._append(name, self._recorded_length(name), blob)
        fsync_dir(self.path)
        meta = dict(self.meta)
        if isinstance(self.meta.get("crc32"), dict):
            meta["crc32"] = {name: crc32(appended[name], crc)
                             for name, crc in self.meta["crc32"].items()}
        meta["runs"] = self.meta["runs"] + ([{"count": len(sorted_q), "crc32": crc32(data)}]
                                            if len(sorted_q) else [])
        meta["count"] = self.count + len(sorted_q)
        meta["urls_bytes"] = int(ends[-1]) if len(ends) else self.meta["urls_bytes"]
        meta["pairs"] = self.meta["pairs"] + len(pairs)
        meta["merged"] = {**self.meta["merged"], **merged}
        if recipe:
            meta["fingerprint"] = recipe
        meta.update(extra or {})
        meta["updated"] = time.time()
        atomic_write_json(self.meta_path, meta)
        self.meta = meta


# ----------------------------------------------------------------------------- matching


#: header bits below log2(chunk size): 5 with a SIMD join kernel (AVX2 or
#: AVX-512), 3 with the scalar one (see header_bits)
HEADER_SLACK = 5
HEADER_SLACK_SCALAR = 3


def header_bits(chunk_size: int) -> int:
    """PSM header length for chunks of ``chunk_size``: ``t = log2(m) - 5`` (4..30),
    or ``log2(m) - 3`` on a CPU without AVX2.

    Fewer header bits need fewer probes for the same recall (k(t) grows with
    t) and put more chunk entries in each bucket, each one more comparison in
    the join's sweep. With SIMD, about 32 entries per bucket is best; the
    scalar sweep, 4x slower per comparison, is best at about 8 (tuned on the
    bench_batch workload at m = 1M, n = 10M, in-process timings not kept in
    the results file: with AVX-512, t = 15 beat t = 17 and t = 13 by 20%
    and 15%; scalar, t = 17 beat t = 15 by 35%). So which near-duplicates a merge
    finds (it is probabilistic) can differ between CPUs with and without
    AVX2; on one machine it is deterministic.
    """
    slack = HEADER_SLACK if batchjoin.join_kernel_level() > 0 else HEADER_SLACK_SCALAR
    return int(min(30, max(4, round(math.log2(max(chunk_size, 2))) - slack)))


def default_probes(distance: int, chunk_size: int) -> int:
    """Flipped probes per fingerprint when none are asked for: enough for
    ``DEFAULT_MERGE_RECALL`` by the calibrated volatility model (it grows with
    the distance), else ``DEFAULT_PROBES``."""
    return merge_probes(distance, header_bits(chunk_size))


#: the most flipped probes per fingerprint a merge builds a probe table for
#: (the table holds m * (k + 1) entries); beyond, exact search is the tool
MAX_MERGE_PROBES = 4096


def merge_probes(distance: int, t: int, recall: float | None = None) -> int:
    """Flipped probes per fingerprint for a target ``recall`` (None: the
    default target, falling back to ``DEFAULT_PROBES`` without a calibration)
    with ``t`` header bits. A recall the model can only promise with every
    flip set (1.0, or beyond its calibration) gets every flip set when there
    are at most ``MAX_MERGE_PROBES``, else a ValueError that points to
    ``--exact``."""
    k = probes_for_recall(DEFAULT_MERGE_RECALL if recall is None else recall, t, distance)
    if k is not None:
        return k
    if recall is None:
        return DEFAULT_PROBES
    every = batchjoin.flip_set_count(t, distance)
    if every > MAX_MERGE_PROBES:
        raise ValueError(f"recall {recall} needs every flip set of {t} header bits at distance "
                         f"{distance} ({every:,} probes per fingerprint): use --exact for "
                         f"complete results, or a lower --recall")
    return every


#: distances from which the probe table is split in runs by flipped bits
PROBE_RUNS_FROM = 6


def probe_runs(t: int, distance: int) -> int:
    """Runs per bucket of the probe table: one per number of flipped header
    bits (0..min(h, 8)), so that the join filters an entry whose probe
    flipped ``s`` bits at ``h - s`` differing low bits instead of ``h``.

    Worth it only where false candidates cost: random low bits pass an
    ``h``-bit filter with probability 1e-6 at h = 3 but 1e-3 at h = 7 and
    1e-2 at h = 9 (there the runs make about 15x fewer of them, by these
    pass rates and the mix of flip counts; a merge of 1M
    against 2M went from 16.8 s to about 12 s), while more, shorter sweeps cost
    about 5% at h = 3. One run below PROBE_RUNS_FROM, and when the offsets
    would pass 2^24 entries (128 MiB)."""
    if distance < PROBE_RUNS_FROM:
        return 1
    runs = min(distance, 8) + 1
    return runs if (runs << t) <= 1 << 24 else 1


class PSMBatchMatcher:
    """Online PSM matching of a batch against sorted chunks (compiled scan).

    The probes of every element (its header and its ``probes`` most likely
    flipped headers, VOSH order) are computed once per batch and inverted into
    a header-ordered probe table; each sorted chunk is then matched by walking
    its bucket offsets and the probe table side by side. With PSM-F matched
    elements are deactivated and periodically compacted out of the table.
    """

    def __init__(self, q_values, q_cq, distance, probes, first, t, rows=None):
        """``q_cq[rows]`` are the stored weights of ``q_values`` (``rows``: None for all)."""
        self.values = np.ascontiguousarray(q_values, dtype=np.uint64)
        self.t = t
        self.h = distance
        self.first = first
        # the smallest masks that hold the flips: the header bits alone when t <= 16
        # the probe table does not need each element's sets in VOSH order
        masks, nprobes = probe_masks(q_cq, t, distance, probes, high32=t > 16, header16=t <= 16,
                                     rows=rows, ordered=False)
        self.offsets, self.low, self.idx = batchjoin.probe_table(
            self.values, masks, nprobes, t, runs=probe_runs(t, distance))
        del masks
        self._active_at_compaction = len(self.values)

    def match(self, chunk_values, active):
        chunk_offsets = batchjoin.bucket_offsets(chunk_values, self.t)
        result = batchjoin.join_chunk(chunk_values, chunk_offsets, self.offsets, self.low,
                                       self.idx, self.values, self.h, active, self.first)
        n_active = int(np.count_nonzero(active))
        if n_active < 0.5 * self._active_at_compaction:
            n = batchjoin.compact_probe_table(self.offsets, self.low, self.idx, active)
            # views: a copy would only add a page-faulting allocation (the
            # peak is already reached, and the table lives until the batch ends)
            self.low, self.idx = self.low[:n], self.idx[:n]
            self._active_at_compaction = n_active
        return result


class ExactBatchMatcher:
    """BPHS batch mode (the exact reference): the index module's :class:`BPHSIndex`
    (``tables`` permuted sorted copies) is built over ``Q``, and every element of
    a chunk is looked up in it. BPHS-F and BPHS-A are the same in batch mode."""

    def __init__(self, q_values, distance, tables=None):
        from scrapy_simdup.index.memory import BPHSIndex  # noqa: PLC0415

        self.values = np.ascontiguousarray(q_values, dtype=np.uint64)
        self.index = BPHSIndex(distance=distance, tables=tables)
        self.index.add(self.values)

    def match(self, chunk_values, active):
        qi, yi, dd = self.index.query_many(chunk_values, first=False)
        # query_many answers for chunk elements: swap to (batch element, chunk element)
        qi, yi = np.asarray(yi, dtype=np.int64), np.asarray(qi, dtype=np.int64)
        keep = active[qi].astype(bool)
        return qi[keep], yi[keep], np.asarray(dd, dtype=np.uint8)[keep]


def _pseudo_W(cq: np.ndarray, wrms: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Full 64-weight vectors carrying the stored header weights (signs from the
    value bits) and the stored RMS, for the online index's query API."""
    from scrapy_simdup.storage.batchfile import CQ_SCALE  # noqa: PLC0415

    n = len(values)
    W = np.zeros((n, 64), dtype=np.float64)
    top = cq.astype(np.float64) / CQ_SCALE * wrms.astype(np.float64)[:, None]
    bits = 63 - np.arange(top.shape[1])
    signs = np.where((values[:, None] >> bits.astype(np.uint64)) & np.uint64(1), 1.0, -1.0)
    W[:, bits] = top * signs
    rest = 64 - top.shape[1]
    fill = np.sqrt(np.maximum(64.0 * wrms.astype(np.float64) ** 2 - (top ** 2).sum(axis=1), 0) / rest)
    low = np.arange(rest)
    lsigns = np.where((values[:, None] >> low.astype(np.uint64)) & np.uint64(1), 1.0, -1.0)
    W[:, low] = fill[:, None] * lsigns
    return W


class IndexChunkMatcher:
    """PSM batch mode through the online index itself: a :class:`PSMIndex` is
    built over each chunk and ``Q`` is answered with ``query_many`` (the
    index's compiled query loop, VOSH probes recomputed per chunk). Slower than
    :class:`PSMBatchMatcher`; kept as the cross-check of the batch scan."""

    def __init__(self, q_values, q_cq, q_wrms, distance, probes, first, t):
        self.values = np.ascontiguousarray(q_values, dtype=np.uint64)
        self.W = _pseudo_W(q_cq, q_wrms, self.values)
        self.h = distance
        self.first = first
        self.t = t
        self.probes = probes

    def match(self, chunk_values, active):
        from scrapy_simdup.index.memory import PSMIndex  # noqa: PLC0415

        index = PSMIndex(distance=self.h, max_probes=self.probes + 1, header_bits=self.t)
        index.add(chunk_values, np.arange(len(chunk_values), dtype=np.int64))
        sel = np.flatnonzero(active)
        if len(sel) == 0:
            return (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.uint8))
        if self.first:
            ids, dist = index.query_many(self.values[sel], self.W[sel], first=True)
            hit = ids >= 0
            qi = sel[hit]
            active[qi] = 0
            return qi, ids[hit].astype(np.int64), dist[hit].astype(np.uint8)
        qidx, ids, dist = index.query_many(self.values[sel], self.W[sel], first=False)
        return sel[qidx], ids.astype(np.int64), dist.astype(np.uint8)


# ----------------------------------------------------------------------------- driver


def _stable_argsort(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(order, values[order])``: the sort order of uint64 ``values``, equal
    values in their original order. NumPy's stable sort of 64-bit keys is a
    timsort (4x its SIMD quicksort), so the quicksort runs and only the runs
    of equal values (exact duplicate pages) are put back in order."""
    # contiguous first: a batch's value field is strided, and the sort and the
    # gather below are twice as slow on it as the copy costs
    values = np.ascontiguousarray(values, dtype=np.uint64)
    order = np.argsort(values)
    ordered = values[order]
    tie = np.flatnonzero(ordered[1:] == ordered[:-1])
    if len(tie):
        pos = np.union1d(tie, tie + 1)          # positions inside runs of equal values
        starts = np.ones(len(pos), dtype=bool)
        starts[1:] = (pos[1:] != pos[:-1] + 1) | (ordered[pos[1:]] != ordered[pos[:-1]])
        run = np.cumsum(starts)
        order[pos] = order[pos][np.lexsort((order[pos], run))]
    return order, np.ascontiguousarray(ordered)


def _sort_pairs(pairs: np.ndarray) -> np.ndarray:
    """Pairs ordered by ``(id, duplicate_of)``: one 64-bit key and a SIMD
    sort when both ids fit in 32 bits (a collection under 4G fingerprints),
    else a lexsort."""
    if not len(pairs):
        return pairs
    ids, dups = pairs["id"], pairs["duplicate_of"]
    if ids.min() >= 0 and dups.min() >= 0 and ids.max() < 2**32 and dups.max() < 2**32:
        key = (ids.astype(np.uint64) << np.uint64(32)) | dups.astype(np.uint64)
        return pairs[np.argsort(key)]
    return pairs[np.lexsort((dups, ids))]


def _first_occurrences(keys: np.ndarray, n: int) -> np.ndarray:
    """Indices of the first occurrence of each distinct key in ``keys`` (all in [0, n))."""
    first = np.full(n, -1, dtype=np.int64)
    first[keys[::-1]] = np.arange(len(keys) - 1, -1, -1, dtype=np.int64)  # last write wins
    return np.sort(first[first >= 0])


def _n_distinct(values: np.ndarray) -> int:
    if len(values) == 0:
        return 0
    s = np.sort(values)
    return int(1 + np.count_nonzero(s[1:] != s[:-1]))



@dataclass
class MergeSummary:
    method: str
    distance: int
    probes: int | None
    batches: int = 0
    fingerprints: int = 0
    collection_before: int = 0
    collection_after: int = 0
    chunks_scanned: int = 0
    pairs: int = 0
    duplicates: int = 0
    distance_histogram: dict = field(default_factory=dict)
    seconds: float = 0.0
    skipped_unfinished: list = field(default_factory=list)
    #: pairs committed by an earlier merge that never finished writing its
    #: --pairs file: written with this run's (--pairs) or still pending
    earlier_unreported_pairs: int = 0
    pairs_array: np.ndarray | None = field(default=None, repr=False)

    @property
    def throughput(self) -> float:
        return self.fingerprints / self.seconds if self.seconds > 0 else float("inf")

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d.pop("pairs_array", None)
        d["throughput"] = round(self.throughput, 1) if self.seconds > 0 else None
        d["seconds"] = round(self.seconds, 3)
        return d


class Progress:
    """A one-line progress bar on stderr (no dependency); silent when not a TTY unless forced."""

    def __init__(self, total: int, label: str = "merge", enabled: bool | None = None, stream=None):
        self.total = max(int(total), 1)
        self.done = 0
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.started = time.monotonic()
        self._last = 0.0

    def update(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if self.enabled and (now - self._last >= 0.2 or self.done >= self.total):
            self._last = now
            frac = min(self.done / self.total, 1.0)
            bar = "#" * int(30 * frac)
            elapsed = now - self.started
            eta = elapsed / frac - elapsed if frac > 0 else 0.0
            self.stream.write(f"\r{self.label} [{bar:<30}] {100 * frac:5.1f}% "
                              f"{self.done:,}/{self.total:,} eta {eta:5.0f}s")
            self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


def _batch_key(path: Path, meta: dict) -> str:
    """What a merged batch is remembered by: its name and the checksums of its
    data, not where it lies (a SIMDUP_DIR moved or copied after a merge is not
    merged again)."""
    return (f"{path.name}|{meta['count']}|{int(meta['npy_crc32']):08x}|"
            f"{int(meta.get('urls_crc32', 0)):08x}")


def _is_merged(path: Path, meta: dict, merged: dict) -> bool:
    # collections written before content keys remember batches by absolute path
    return _batch_key(path, meta) in merged or str(path.resolve()) in merged


def _single_recipe(coll: Collection, metas) -> str | None:
    """The one fingerprint recipe of the collection and the pending batches
    (None when none is recorded: files written before recipes were). Two
    recipes make incomparable fingerprints: a ValueError naming them."""
    recipes = {m["fingerprint"]: p for p, m in metas if m.get("fingerprint")}
    if coll.meta.get("fingerprint"):
        recipes.setdefault(coll.meta["fingerprint"], coll.meta_path)
    if len(recipes) > 1:
        listing = "; ".join(f"{r!r} ({p})" for r, p in recipes.items())
        raise ValueError(f"these fingerprints were made with different feature settings and "
                         f"cannot be compared: {listing}. Merge each into its own collection "
                         f"(--collection).")
    return next(iter(recipes), None)


def crawl_distance(dirs) -> int | None:
    """The SIMDUP_DISTANCE the crawls of ``dirs`` used (batch headers, index
    snapshot); None when none says; a ValueError when they disagree."""
    found: dict[int, Path] = {}
    for d in map(Path, dirs):
        sources = list(list_batches(d)) + [d / "index.json"]
        for p in sources:
            try:
                meta = read_json(p, "header") if p.exists() else {}
            except CorruptFileError:
                continue        # reported by the merge itself
            value = meta.get("distance")
            if isinstance(value, int) and not isinstance(value, bool):
                found.setdefault(value, p)
    if len(found) > 1:
        listing = ", ".join(f"{h} ({p})" for h, p in sorted(found.items()))
        raise ValueError(f"the crawls used different distances ({listing}): give --distance")
    return next(iter(found), None)


def _unreported_ranges(coll: Collection) -> list[list[int]]:
    """The ``[start, stop)`` ranges of pairs.bin that a --pairs merge
    committed but never wrote to its file (see ``merge``)."""
    ranges = coll.meta.get("pairs_unreported")
    if not isinstance(ranges, list):
        return []
    total = coll.meta["pairs"]
    return [[int(r[0]), int(r[1])] for r in ranges
            if isinstance(r, list) and len(r) == 2 and all(isinstance(x, int) for x in r)
            and 0 <= r[0] <= r[1] <= total]


def check_output_path(target, option: str, collection=None) -> None:
    """Fail before merging, not after, when an output file cannot be written
    (or would land in the ``collection`` directory, over its own files)."""
    if target is None or hasattr(target, "write"):
        return
    path = Path(target)
    fd = _fd_number(target)
    if fd is not None:  # /dev/fd/N: only a descriptor open now (the shell's), not one we open later
        try:
            os.fstat(fd)
        except OSError:
            raise ValueError(f"{option} {path}: not an open file descriptor") from None
    if collection is not None and path.resolve().parent == Path(collection).resolve():
        raise ValueError(f"{option} {path}: inside the collection directory; write it "
                         f"somewhere else")
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise ValueError(f"{option} {path}: is a directory")
    if not parent.is_dir():
        raise ValueError(f"{option} {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ValueError(f"{option} {path}: not writable")


def pending_batches(dirs, collection: Collection | None) -> list[tuple[Path, dict]]:
    """``(header path, header)`` of every batch of ``dirs`` not merged yet."""
    merged = collection.meta["merged"] if collection is not None else {}
    merged_paths = {v.get("path") for v in merged.values() if isinstance(v, dict)}
    out, seen = [], set()
    for d in dirs:
        for p in list_batches(d):
            try:
                meta = read_meta(p)
            except CorruptFileError:
                resolved = str(p.resolve())
                if resolved in merged_paths or resolved in merged:
                    continue    # damaged after it was merged: its data is in the collection
                raise
            key = _batch_key(p, meta)
            if not _is_merged(p, meta, merged) and key not in seen:  # (a DIR given twice)
                seen.add(key)
                out.append((p, meta))
    return out


def merge(dirs, collection=None, *, distance: int = DEFAULT_DISTANCE, probes: int | None = None,
          recall: float | None = None,
          first: bool = True, exact: bool = False, chunk_size: int = DEFAULT_CHUNK,
          pairs_out=None, clusters_out=None, progress: bool | None = None,
          verify: bool = True, tables: int | None = None,
          engine: str = "join", commit: bool = True) -> MergeSummary:
    """Merge every pending batch of ``dirs`` into ``collection``; see the module docstring.

    ``first`` is PSM-F (one earlier duplicate per fingerprint) vs PSM-A (all);
    ``exact`` is BPHS batch mode (all pairs within ``distance``, exact).
    ``pairs_out``/``clusters_out`` are paths (or open text files) for JSON Lines.
    ``tables``: BPHS tables for ``exact`` (default ``distance + 1``).
    ``engine``: ``"join"`` (the compiled batch scan) or ``"index"`` (a
    :class:`PSMIndex` per chunk, the online index's own query loop).
    ``commit=False`` matches without appending anything (benchmarks); the
    pairs found are in ``summary.pairs_array`` either way.
    """
    if engine not in ("join", "index"):
        raise ValueError(f"engine must be 'join' or 'index', got {engine!r}")
    dirs = [Path(d) for d in dirs]
    if not dirs:
        raise ValueError("merge needs at least one directory")
    for d in dirs:
        if not d.is_dir():
            raise ValueError(f"{d}: not a directory")
    cpath = Path(collection) if collection is not None else dirs[0] / "collection"
    check_output_path(pairs_out, "--pairs", cpath)
    check_output_path(clusters_out, "--clusters", cpath)
    if isinstance(distance, bool) or not isinstance(distance, int) \
            or not 0 <= distance <= MAX_DISTANCE:
        raise ValueError(f"distance must be an int in 0..{MAX_DISTANCE}, got {distance!r}")
    if probes is not None and (isinstance(probes, bool) or not isinstance(probes, int)
                               or probes < 0):
        raise ValueError(f"probes must be a non-negative int, got {probes!r}")
    if recall is not None and probes is not None:
        raise ValueError("probes and recall are exclusive")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
    if collection is None and not any(list_batches(d) for d in dirs) \
            and not (dirs[0] / "collection" / "collection.json").exists():
        raise ValueError(f"no batch files in {', '.join(map(str, dirs))} (is it a SIMDUP_DIR?)")
    lock = Collection.lock_directory(cpath)
    try:
        coll = Collection(cpath, create=True)
        pending = pending_batches(dirs, coll)
        # header bits from what will really be read (chunks of at most the
        # collection after this merge), not from a huge requested chunk_size
        t = header_bits(min(chunk_size, max(1, coll.count + sum(m["count"] for _, m in pending))))
        if probes is None and not exact:
            probes = merge_probes(distance, t, recall)
        if verify:      # the pairs before appending; the URL files when they are read
            coll.verify_files(("pairs.bin",) if pairs_out is None and clusters_out is None
                              else _SIDE_FILES)
        method = "bphs" if exact else ("psm-f" if first else "psm-a") + ("(index)" if engine == "index" else "")
        summary = MergeSummary(method=method, distance=distance, probes=None if exact else probes,
                               collection_before=coll.count)
        # --pairs is written at the end, groups commit one by one: each group
        # of a --pairs merge commits, with its run, the ranges of pairs.bin
        # not yet written to a --pairs file, so the pairs of a --pairs merge
        # killed before writing its file come out with the next --pairs merge
        # (merges without --pairs leave the ranges alone)
        earlier = _unreported_ranges(coll)
        summary.earlier_unreported_pairs = sum(b - a for a, b in earlier)
        own_from = coll.meta["pairs"]     # where this merge's pairs start in pairs.bin
        for d in dirs:
            summary.skipped_unfinished += [str(p) for p in unfinished_batches(d)]
        started = time.perf_counter()
        recipe = _single_recipe(coll, pending)
        run_pairs = []
        # group pending batches into Q's of at most chunk_size fingerprints
        groups, cur, cur_n = [], [], 0
        for p, m in pending:
            if cur and cur_n + m["count"] > chunk_size:
                groups.append(cur)
                cur, cur_n = [], 0
            cur.append(p)
            cur_n += m["count"]
        if cur:
            groups.append(cur)
        sizes = {p: m["count"] for p, m in pending}
        chunks0 = coll.n_chunks(chunk_size)
        bar = Progress(sum(sum(sizes[p] for p in g) * (chunks0 + i + 1)
                           for i, g in enumerate(groups)), "simdup merge", progress)
        for group in groups:
            # the group's batches read into one array (no per-batch arrays to join)
            m = sum(sizes[p] for p in group)
            records = np.empty(m, dtype=BATCH_DTYPE)
            bounds = np.cumsum([0] + [sizes[p] for p in group])
            batches = [read_batch(p, with_urls=False, verify=verify, out=records[a:b])
                       for p, a, b in zip(group, bounds[:-1], bounds[1:])]
            base = coll.count
            gids = base + np.arange(m, dtype=np.int64)      # arrival order
            # Q is worked on sorted by value (it is appended sorted anyway): the
            # probe table is then built with mostly sequential writes. Matcher
            # indices are sorted positions; `order` maps them to arrival order.
            order, sorted_q = _stable_argsort(records["value"])
            active = np.ones(m, dtype=np.uint8)
            if exact:
                matcher = ExactBatchMatcher(sorted_q, distance, tables)
            elif engine == "index":
                matcher = IndexChunkMatcher(sorted_q, np.ascontiguousarray(records["cq"][order]),
                                            np.ascontiguousarray(records["wrms"][order]),
                                            distance, probes, first, t)
            else:
                matcher = PSMBatchMatcher(sorted_q, records["cq"], distance, probes, first, t,
                                          rows=order)
            found_q, found_dup, found_d = [], [], []
            for _start, chunk in coll.chunks(chunk_size, verify=verify):
                if not active.any():
                    bar.update(m)
                    continue
                chunk_values = np.ascontiguousarray(chunk["value"])
                qi, yi, dd = matcher.match(chunk_values, active)
                found_q.append(order[qi])
                found_dup.append(chunk["id"][yi])
                found_d.append(dd)
                summary.chunks_scanned += 1
                bar.update(m)
            # pairs inside Q (every pair is looked at, then the earlier record kept)
            if exact:
                qi, yi, dd = matcher.match(sorted_q, np.ones(m, dtype=np.uint8))
            else:
                self_active = active.copy() if first else np.ones(m, dtype=np.uint8)
                matcher.first = False
                qi, yi, dd = matcher.match(sorted_q, self_active)
                matcher.first = first
            qi, yi = order[qi], order[yi]
            keep = yi < qi
            qi, yi, dd = qi[keep], yi[keep], dd[keep]
            if first and len(qi):
                # one match per element (the first found), and only for elements not matched in H
                sel = _first_occurrences(qi, m)
                qi, yi, dd = qi[sel], yi[sel], dd[sel]
            found_q.append(qi)
            found_dup.append(gids[yi])
            found_d.append(dd)
            bar.update(m)
            fq = np.concatenate(found_q)
            pairs = np.empty(len(fq), dtype=PAIR_DTYPE)
            pairs["id"] = gids[fq]
            pairs["duplicate_of"] = np.concatenate(found_dup)
            pairs["distance"] = np.concatenate(found_d)
            pairs = _sort_pairs(pairs)
            if commit:
                run = np.empty(m, dtype=H_DTYPE)
                run["value"] = sorted_q
                run["id"] = gids[order]
                urls = [u for b in batches for u in read_urls(b, verify=verify)]
                extra = None
                if pairs_out is not None:
                    extra = {"pairs_unreported": earlier + [
                        [own_from, coll.meta["pairs"] + len(pairs)]]}
                coll.append(run, urls, pairs, {_batch_key(b.path, b.meta): {
                    "count": len(b), "crc32": b.meta["npy_crc32"],
                    "path": str(b.path.resolve())} for b in batches}, recipe, extra)
            run_pairs.append(pairs)
            summary.batches += len(batches)
            summary.fingerprints += m
        bar.close()
        all_run = np.concatenate(run_pairs) if run_pairs else np.zeros(0, dtype=PAIR_DTYPE)
        summary.seconds = time.perf_counter() - started
        summary.pairs_array = all_run
        summary.collection_after = coll.count
        summary.pairs = len(all_run)
        summary.duplicates = _n_distinct(all_run["id"])
        hist = np.bincount(all_run["distance"], minlength=distance + 1) if len(all_run) else []
        summary.distance_histogram = {str(i): int(c) for i, c in enumerate(hist) if c}
        if pairs_out is not None:
            # this merge's own pairs are all_run (stored unchanged), so only
            # the ones an earlier interrupted merge owes are read back
            owed = [coll.pairs(a, b) for a, b in earlier] if commit else []
            write_pairs(coll, np.concatenate(owed + [all_run]), pairs_out)
            if commit and "pairs_unreported" in coll.meta:
                coll.set_meta(pairs_unreported=None)
        if clusters_out is not None:
            write_clusters(coll, coll.pairs(), clusters_out)
        return summary
    finally:
        lock.close()


# ----------------------------------------------------------------------------- outputs


_OWN_FD = re.compile(r"/(?:dev/fd|proc/self/fd)/(\d+)")


def _fd_number(target) -> int | None:
    """N when ``target`` is ``/dev/fd/N`` or ``/proc/self/fd/N``."""
    match = _OWN_FD.fullmatch(os.path.normpath(os.fspath(target)))
    return int(match.group(1)) if match else None


def _own_descriptor(target) -> int | None:
    """The descriptor (1 or 2) that ``/dev/stdout``, ``/dev/stderr``,
    ``/dev/fd/1`` or ``/proc/self/fd/2`` (...) names, if it is open. Other
    descriptors go the path's way (a pipe from the shell is written
    directly, a regular file checked like any other)."""
    fd = {"/dev/stdout": 1, "/dev/stderr": 2}.get(os.path.normpath(os.fspath(target)))
    if fd is None:
        fd = _fd_number(target)
    if fd not in (1, 2):    # any other descriptor may be one this command opened itself
        return None
    try:
        os.fstat(fd)
    except OSError:
        return None
    return fd


@contextmanager
def _output(target):
    """A text handle for ``target`` (a path or an open file). A regular file
    (new or existing, through symlinks) is written to a temporary file beside
    it and renamed over it, with the old file's mode or the umask's, so a
    merge killed while writing leaves no half file; a FIFO or a device is
    written directly, and ``/dev/stdout`` or ``/dev/stderr`` through the
    descriptor this process already holds (at its offset: a
    shell's ``> file`` or ``>> file`` is continued, not truncated or replaced)."""
    if hasattr(target, "write"):
        yield target
        return
    fd = _own_descriptor(target)
    if fd is not None:
        for stream in (sys.stdout, sys.stderr):     # keep what was printed first, first
            if stream is not None:
                stream.flush()
        with open(os.dup(fd), "w", encoding="utf-8", newline="\n") as handle:
            yield handle
        return
    try:
        st = os.stat(target)       # through symlinks (/dev/stdout -> a pipe)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        with open(target, "w", encoding="utf-8", newline="\n") as handle:
            yield handle
        return
    path = os.path.realpath(target)   # replace the file a symlink points to
    if st is not None:
        mode = stat.S_IMODE(st.st_mode)
    else:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    with atomic_write(path, "wb") as raw:
        os.fchmod(raw.fileno(), mode)
        text = io.TextIOWrapper(raw, encoding="utf-8", newline="\n", write_through=False)
        try:
            yield text
            text.flush()
        finally:
            text.detach()


def write_pairs(coll: Collection, pairs: np.ndarray, target) -> int:
    """JSON Lines ``{"url", "duplicate_of", "distance"}``, one per pair."""
    with _output(target) as handle:
        step = 100_000
        for s in range(0, len(pairs), step):
            part = pairs[s:s + step]
            a = coll.urls(part["id"])
            b = coll.urls(part["duplicate_of"])
            for u, v, d in zip(a, b, part["distance"].tolist()):
                handle.write(json.dumps({"url": u, "duplicate_of": v, "distance": d},
                                        ensure_ascii=False) + "\n")
    return len(pairs)


def components(n_ids: np.ndarray, a: np.ndarray, b: np.ndarray) -> dict:
    """Union-find over pairs ``(a[i], b[i])``: {root: sorted members} for components of size >= 2."""
    parent: dict = {}

    def find(x):
        root = x
        while parent.get(root, root) != root:
            root = parent[root]
        while parent.get(x, x) != root:
            parent[x], x = root, parent[x]
        return root

    for x, y in zip(a.tolist(), b.tolist()):
        rx, ry = find(x), find(y)
        if rx != ry:
            if rx < ry:
                parent[ry] = rx
            else:
                parent[rx] = ry
    groups: dict = {}
    for x in parent:
        groups.setdefault(find(x), set()).add(x)
    for root in list(groups):
        groups[root].add(root)
    return {root: sorted(members) for root, members in groups.items()}


def write_clusters(coll: Collection, pairs: np.ndarray, target) -> int:
    """JSON Lines ``{"representative", "size", "urls"}`` per connected component.

    The representative is the earliest record (lowest collection id) of the cluster.
    """
    groups = components(None, pairs["id"], pairs["duplicate_of"])
    with _output(target) as handle:
        for root in sorted(groups):
            members = groups[root]
            urls = coll.urls(members)
            handle.write(json.dumps({"representative": urls[0], "size": len(members),
                                     "urls": urls}, ensure_ascii=False) + "\n")
    return len(groups)


# ----------------------------------------------------------------------------- stats


def stats(dirs, collection=None) -> dict:
    """What the directories and the collection hold (``simdup stats``)."""
    dirs = [Path(d) for d in dirs]
    out: dict = {"directories": [], "collection": None}
    coll = None
    cpath = Path(collection) if collection is not None else (dirs[0] / "collection" if dirs else None)
    if cpath is not None and (cpath / "collection.json").exists():
        coll = Collection(cpath)
    for d in dirs:
        if not d.is_dir():
            raise ValueError(f"{d}: not a directory")
        entry = {"path": str(d), "batches": 0, "fingerprints": 0, "pending_batches": 0,
                 "pending_fingerprints": 0, "unfinished": [], "corrupt": [],
                 "online_duplicates": 0, "online_histogram": {},
                 "bytes": sum(p.stat().st_size for p in d.rglob("*") if p.is_file())}
        merged = coll.meta["merged"] if coll is not None else {}
        for p in list_batches(d):
            try:
                meta = read_meta(p)
            except CorruptFileError as exc:
                entry["corrupt"].append(str(exc))
                continue
            missing = [q.name for q in (p.with_suffix(".npy"), p.with_suffix(".urls"))
                       if not q.exists()]
            if missing:
                entry["corrupt"].append(f"{p}: batch data missing ({', '.join(missing)})")
                continue
            entry["batches"] += 1
            entry["fingerprints"] += meta["count"]
            online = meta.get("online_duplicates")
            if isinstance(online, dict):      # batches written before it was recorded: none
                hist = entry["online_histogram"]
                for dist, count in online.items():
                    hist[str(dist)] = hist.get(str(dist), 0) + int(count)
            if not _is_merged(p, meta, merged):
                entry["pending_batches"] += 1
                entry["pending_fingerprints"] += meta["count"]
        entry["unfinished"] = [str(p) for p in unfinished_batches(d)]
        index_meta = d / "index.json"
        if index_meta.exists():
            try:
                entry["index"] = read_json(index_meta, "index snapshot header")
            except CorruptFileError as exc:
                entry["corrupt"].append(str(exc))
        entry["online_histogram"] = dict(sorted(entry["online_histogram"].items(),
                                                key=lambda kv: int(kv[0])))
        entry["online_duplicates"] = sum(entry["online_histogram"].values())
        out["directories"].append(entry)
    if coll is not None:
        coll.verify_files(("pairs.bin",))
        pairs = coll.pairs()
        hist = np.bincount(pairs["distance"]) if len(pairs) else np.zeros(0, dtype=np.int64)
        clusters = components(None, pairs["id"], pairs["duplicate_of"]) if len(pairs) else {}
        out["collection"] = {
            "path": str(coll.path), "count": coll.count, "runs": len(coll.meta["runs"]),
            "merged_batches": len(coll.meta["merged"]),
            "bytes": sum(p.stat().st_size for p in coll.path.iterdir() if p.is_file()),
            "pairs": int(len(pairs)), "duplicates": _n_distinct(pairs["id"]),
            "clusters": len(clusters),
            "distance_histogram": {str(i): int(c) for i, c in enumerate(hist) if c},
        }
    return out
