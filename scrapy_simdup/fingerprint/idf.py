"""Inverse document frequencies learned from the crawl (``weighting="idf"``).

A feature's weight is ``(1 + ln tf) * idf`` with the smoothed
``idf = 1 + ln((1 + N) / (1 + df))``: ``N`` pages learned from, ``df`` of them
holding the feature. Phrases every page repeats (boilerplate the extractor
kept, stock phrases of a site) weigh less than the phrases that make a page
what it is.

Learning is online and then stops, so fingerprints stay comparable:

* the table learns from the pages the crawl *keeps* (no near-duplicate in
  the index): a duplicate tells nothing new about the language, and counting
  the copies of one story would make its own words look common;
* each page is weighed with the table as it stood before the page was
  learned (deterministic in crawl order);
* after ``learn_pages`` pages the table is frozen: from then on the same page
  always gives the same fingerprint.

Document frequencies are counted per bucket of ``2**bits`` (the top bits of
the 64-bit feature hash), so the table has a fixed size (4 MB) whatever the
vocabulary; a rare feature sharing a bucket looks a little more common.

Each table has a random ``table_id``; ``Fingerprinter.version`` includes it,
so fingerprints made with different tables are never mixed (a restart with
``SIMDUP_DIR`` loads the same table; ``simdup merge`` refuses batches of two
crawls that learned separately).

File format (``idf-<pages>.bin`` in ``SIMDUP_DIR``, see
``scrapy_simdup.index.persist``; little-endian, written atomically): a 48-byte header
``magic b"SIMDUPDF"``, ``u4 format version``, ``u4 bits``, ``u8 pages``,
``u8 learn_pages``, ``u8 table_id``, ``u4 CRC-32 of the counts``, ``u4 0``;
then ``u2[2**bits]`` document counts.
"""
from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np

from scrapy_simdup._ext import checksum
from scrapy_simdup.exceptions import CorruptFileError
from scrapy_simdup.storage.atomic import atomic_write_bytes, open_regular

MAGIC = b"SIMDUPDF"
FORMAT_VERSION = 1
DEFAULT_BITS = 21
DEFAULT_LEARN_PAGES = 1000
MAX_LEARN_PAGES = 65535          # document counts are uint16
_HEADER = struct.Struct("<8sIIQQQII")


class IdfTable:
    """Document frequencies of hashed features; see the module docstring."""

    def __init__(self, learn_pages: int = DEFAULT_LEARN_PAGES, bits: int = DEFAULT_BITS,
                 table_id: int | None = None, pages: int = 0, counts: np.ndarray | None = None):
        if isinstance(learn_pages, bool) or not isinstance(learn_pages, int) \
                or not 1 <= learn_pages <= MAX_LEARN_PAGES:
            raise ValueError(f"idf_pages must be an int in 1..{MAX_LEARN_PAGES}, got {learn_pages!r}")
        if not 8 <= bits <= 26:
            raise ValueError(f"bits must be in 8..26, got {bits!r}")
        self.learn_pages = learn_pages
        self.bits = bits
        self.table_id = table_id if table_id is not None else int.from_bytes(os.urandom(8), "little")
        self.pages = pages
        self.counts = counts if counts is not None else np.zeros(1 << bits, np.uint16)
        self._shift = np.uint64(64 - bits)

    @property
    def frozen(self) -> bool:
        return self.pages >= self.learn_pages

    def weights(self, hashes: np.ndarray, tf: np.ndarray) -> np.ndarray:
        """``(1 + ln tf) * idf`` for distinct feature ``hashes`` with counts ``tf``."""
        df = self.counts[hashes >> self._shift].astype(np.float64)
        n = float(self.pages)
        np.minimum(df, n, out=df)          # a shared bucket can count past N
        return (1.0 + np.log(tf)) * (1.0 + np.log((1.0 + n) / (1.0 + df)))

    def learn(self, hashes: np.ndarray) -> bool:
        """Count one kept page's distinct features; False once frozen."""
        if self.frozen:
            return False
        buckets = np.unique(hashes >> self._shift)
        self.counts[buckets] += np.uint16(1)
        self.pages += 1
        return True

    # ------------------------------------------------------------------ files

    def to_bytes(self) -> bytes:
        counts = np.ascontiguousarray(self.counts, dtype="<u2").tobytes()
        head = _HEADER.pack(MAGIC, FORMAT_VERSION, self.bits, self.pages, self.learn_pages,
                            self.table_id, checksum.crc32(counts), 0)
        return head + counts

    def save(self, path) -> None:
        atomic_write_bytes(path, self.to_bytes())

    @classmethod
    def load(cls, path) -> IdfTable:
        """Read ``path``; a truncated, corrupt or foreign file is a CorruptFileError."""
        path = Path(path)
        with open_regular(path, "IDF table") as handle:   # a directory or FIFO is named, not read
            data = handle.read()
        if len(data) < _HEADER.size:
            raise CorruptFileError(path, f"IDF table is truncated ({len(data)} bytes)")
        magic, version, bits, pages, learn_pages, table_id, crc, _ = _HEADER.unpack_from(data)
        if magic != MAGIC:
            raise CorruptFileError(path, "not a scrapy-simdup IDF table")
        if version != FORMAT_VERSION:
            raise CorruptFileError(path, f"IDF table format {version} is not supported "
                                         f"(this version reads {FORMAT_VERSION})")
        if not 8 <= bits <= 26 or not 1 <= learn_pages <= MAX_LEARN_PAGES or pages > learn_pages:
            raise CorruptFileError(path, "IDF table header is corrupt")
        body = data[_HEADER.size:]
        if len(body) != 2 << bits:
            raise CorruptFileError(path, f"IDF table is truncated ({len(body)} of {2 << bits} "
                                         f"bytes of counts)")
        if checksum.crc32(body) != crc:
            raise CorruptFileError(path, "IDF table checksum mismatch")
        counts = np.frombuffer(body, dtype="<u2").astype(np.uint16)
        return cls(int(learn_pages), int(bits), int(table_id), int(pages), counts)

    def __repr__(self) -> str:
        return (f"IdfTable(id={self.table_id:016x}, pages={self.pages}/{self.learn_pages}"
                f"{', frozen' if self.frozen else ''})")
