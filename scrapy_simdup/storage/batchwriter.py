"""BatchWriter: accumulate checked fingerprints in memory, flush them as batch files.

Every fingerprint the crawl checks goes into the in-memory batch ``Q``; at
``batch_size`` entries (and at ``close()``) ``Q`` is written to the directory as
one batch (see :mod:`scrapy_simdup.storage.batchfile` for the format). A crash loses
at most the unflushed part of ``Q``. A batch that cannot be written (disk
full, directory gone) stays in memory and is tried again after another
``batch_size`` records and at ``close()``; the write raises
:class:`BatchWriteError` naming the directory each time it fails.

With ``crawl`` (a crawl's writer) the crawl's own verdicts are kept beside
its batches in a *crawl record*, ``crawl-<started>-<pid>.json``, rewritten
atomically at every flush and at ``close()``: ``format``
(``"simdup-crawl"``), ``version`` (1), ``started``, ``updated`` (Unix
times), ``closed``, ``pid``, ``batches`` (the names of the batches it wrote),
``checked``, ``near_duplicates`` and ``revisits`` (of the records in those
batches), ``skipped`` (``{reason: pages}`` not fingerprinted, so in no
batch) and ``settings`` (what the crawl gave, e.g. its distance). ``simdup
report`` reads it; a crawl killed loses the counts since its last flush,
and a record that cannot be written is tried again at the next flush
(the batches and the crawl's stats hold the same counts).
"""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

import numpy as np

from scrapy_simdup.exceptions import BatchWriteError, CorruptFileError
from scrapy_simdup.storage.atomic import (
    atomic_write_json,
    is_count,
    read_json,
    remove_stale_temporaries,
)
from scrapy_simdup.storage.batchfile import (
    BATCH_DTYPE,
    SKETCH_BYTES,
    OutdatedBatchError,
    escape_url,
    header_weights,
    list_batches,
    read_meta,
    write_batch,
)

_NAME_RE = re.compile(r"^batch-(\d+)-")
CRAWL_FORMAT = "simdup-crawl"
CRAWL_VERSION = 1
CRAWL_GLOB = "crawl-*.json"


class BatchWriter:
    """Append ``(page, url)`` records; write a batch file every ``batch_size`` records.

    ``page`` is anything with the attributes of a
    :class:`~scrapy_simdup.fingerprint.Fingerprint`: ``value``, ``W``,
    ``value2``, ``W2``, ``sketch`` (a Fingerprint, or ``index.backend.Page``).

    ``on_flush`` callables are called with the path of each new batch header
    (the persistence layer uses this to snapshot the index at the same moment).
    """

    def __init__(self, directory, batch_size: int = 100_000, on_flush=None,
                 fingerprint: str | None = None, distance: int | None = None,
                 crawl: dict | None = None):
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(self.directory)
        self.batch_size = batch_size
        self.on_flush = list(on_flush or [])
        self.fingerprint = fingerprint     # recorded in every batch header
        self.distance = distance           # (the crawl's SIMDUP_DISTANCE) likewise
        self._rows: list = []              # one BATCH_DTYPE record (no id yet) per page
        self._urls: list = []
        self._canonicals: list = []        # the rel=canonical URL of each page, or None
        self._online: dict = {}            # distance -> records the online index matched
        self.flushed_batches = 0
        self.flushed_records = 0
        self._seq, self._next_id = self._scan_existing()
        self._closed = False
        self._flush_at = batch_size     # pending records that trigger the next write
        self._revisit_rows = 0          # pending records that were revisits
        self.crawl_path = None
        if crawl is not None:           # the crawl record (module docstring)
            started = time.time()
            stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(started))
            self.crawl_path = self.directory / f"crawl-{stamp}-{os.getpid()}.json"
            self.crawl = {"format": CRAWL_FORMAT, "version": CRAWL_VERSION, "started": started,
                          "updated": started, "closed": False, "pid": os.getpid(),
                          "batches": [], "checked": 0, "near_duplicates": 0, "revisits": 0,
                          "skipped": {}, "settings": dict(crawl)}

    def _scan_existing(self) -> tuple[int, int]:
        seq = 0
        next_id = 0
        for header in list_batches(self.directory):
            match = _NAME_RE.match(header.name)
            if match:
                seq = max(seq, int(match.group(1)))
            try:
                meta = read_meta(header)
            except OutdatedBatchError:
                # (refused by the merge) its ids are still taken
                meta = read_json(header, "batch header")
                if not (is_count(meta.get("first_id")) and is_count(meta.get("count"))):
                    continue
            except CorruptFileError:
                continue  # reported by `simdup stats` / the merge, not fatal for writing
            next_id = max(next_id, meta.get("first_id", 0) + meta["count"])
        return seq, next_id

    def __len__(self) -> int:
        """Records waiting in memory (not yet flushed)."""
        return len(self._rows)

    @property
    def next_id(self) -> int:
        """The record id the next appended fingerprint gets."""
        return self._next_id + len(self._rows)

    def append(self, page, url, duplicate_distance: int | None = None,
               canonical: str | None = None, revisit: bool = False) -> int:
        """Add one checked page (its keys, weights and sketch); returns its
        record id. Flushes when the batch is full.

        ``duplicate_distance``: the distance of the near-duplicate the online
        index found for it (None: new), counted in the batch header.
        ``canonical``: the ``rel=canonical`` URL the page declared (None: none);
        ``revisit``: the page met again under its own URL (crawl record)."""
        if self._closed:
            raise RuntimeError("BatchWriter is closed")
        if isinstance(page, (int, np.integer)) or not hasattr(page, "sketch"):
            raise TypeError("append() takes a page (a Fingerprint or anything with .value "
                            ".W .value2 .W2 .sketch) and its URL, not a bare value")
        row = np.zeros((), dtype=BATCH_DTYPE)
        for field, name in (("value", "value"), ("value2", "value2")):
            value = getattr(page, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
                    or not 0 <= int(value) < 1 << 64:
                raise ValueError(f"{name} must be a 64-bit unsigned int, got {value!r}")
            row[field] = int(value)
        for cq_field, rms_field, name in (("cq", "wrms", "W"), ("cq2", "wrms2", "W2")):
            W = getattr(page, name)
            W = np.asarray(W) if W is not None else None
            if W is None or W.shape != (64,):
                raise ValueError(f"{name} must have shape (64,), got "
                                 f"{None if W is None else W.shape}")
            row[cq_field], row[rms_field] = header_weights(W)
        sketch = page.sketch
        if not isinstance(sketch, (bytes, bytearray, memoryview, np.ndarray)) \
                or len(bytes(sketch)) != SKETCH_BYTES:
            raise ValueError(f"sketch must be {SKETCH_BYTES} bytes")
        row["sketch"] = np.frombuffer(bytes(sketch), dtype=np.uint8)
        url = escape_url(url)          # validate everything before changing state
        canonical = escape_url(canonical) if canonical else None
        record_id = self.next_id
        self._rows.append(row)
        self._urls.append(url)
        self._canonicals.append(canonical)
        if duplicate_distance is not None:
            d = int(duplicate_distance)
            self._online[d] = self._online.get(d, 0) + 1
        self._revisit_rows += bool(revisit)
        if len(self._rows) >= self._flush_at:
            self.flush()
        return record_id

    def flush(self) -> Path | None:
        """Write the pending records as one batch file; returns its header path (None if empty)."""
        if not self._rows:
            return None
        n = len(self._rows)
        records = np.stack(self._rows)
        records["id"] = np.arange(self._next_id, self._next_id + n, dtype=np.int64)
        name = f"batch-{self._seq + 1:08d}-{os.getpid()}"
        try:
            path = write_batch(self.directory, name, records, self._urls, self.fingerprint,
                               self.distance, self._online, canonicals=self._canonicals)
        except OSError as exc:
            # keep the records; try again after another batch (not at every record)
            self._flush_at = n + self.batch_size
            raise BatchWriteError(exc.errno, f"cannot write batch {name} to {self.directory} "
                                  f"({n:,} fingerprints kept in memory, tried again later): "
                                  f"{exc.strerror or exc}") from exc
        self._seq += 1
        self._flush_at = self.batch_size
        self._next_id += n
        if self.crawl_path is not None:
            c = self.crawl
            c["batches"].append(name)
            c["checked"] += n
            c["near_duplicates"] += sum(self._online.values())
            c["revisits"] += self._revisit_rows
        self._rows, self._urls, self._canonicals = [], [], []
        self._online = {}
        self._revisit_rows = 0
        self.flushed_batches += 1
        self.flushed_records += n
        self._write_crawl()     # (again at the next flush, and at close)
        for callback in self.on_flush:
            callback(path)
        return path

    def skipped(self, reason: str) -> None:
        """Count a page the crawl did not fingerprint, by ``reason`` (crawl record)."""
        if self.crawl_path is not None:
            skipped = self.crawl["skipped"]
            skipped[reason] = skipped.get(reason, 0) + 1

    def _write_crawl(self) -> None:
        """Write the crawl record. A failure is not reported: the batches
        hold the pages, the next flush or the close tries again, and the
        crawl's stats and log say what the record would."""
        c = self.crawl if self.crawl_path is not None else None
        if c is None or not (c["batches"] or c["skipped"]):     # (nothing to say)
            return
        c["updated"] = time.time()
        try:
            atomic_write_json(self.crawl_path, c)
        except OSError:
            pass

    def close(self) -> Path | None:
        """Flush what is left and refuse further appends (also when that
        write fails: the error says how many fingerprints were not written)."""
        if self._closed:
            return None
        self._closed = True
        try:
            path = self.flush()
        except BatchWriteError as exc:
            raise BatchWriteError(exc.errno, f"{len(self._rows):,} fingerprints were not "
                                  f"written to {self.directory}: {exc.strerror}") from exc
        if self.crawl_path is not None:
            self.crawl["closed"] = True
            self._write_crawl()
        return path

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
