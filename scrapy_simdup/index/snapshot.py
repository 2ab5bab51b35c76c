"""The index snapshot: the on-disk copy of what an in-memory index stores.

Per namespace directory (``SIMDUP_DIR`` for pages, ``SIMDUP_DIR/items`` for
items):

``index.values``
    The pages the index stored, in insertion order (index id ``i`` is record
    ``i``), ``RECORD_BYTES`` each: key 1 and key 2 (``<u8``), the
    ``SKETCH_BYTES``-byte sketch and a byte: 1 for a kept page, 0 for a
    near-duplicate (stored too, under its own key). Append-only.
``index.keys``
    UTF-8, one key (URL or item id) per line, in the same order. Append-only.
``index.json``
    The commit record, replaced atomically after the appends are fsynced:
    ``format`` (``"simdup-index"``), ``version``, ``count``, the byte length and
    running CRC-32 of both files, the index settings (``search``,
    ``distance``, ``fingerprint``: the Fingerprinter recipe, checked on
    restore), ``saved``, and with IDF weighting ``idf_file``
    (:mod:`scrapy_simdup.index.persist`).

A snapshot of an older format (version 1 kept key 1 alone) is refused by
``restore`` with what to do: its pages cannot be verified.
Bytes past the recorded lengths (an append cut short) are ignored and
overwritten; a length or checksum mismatch inside them is a
:class:`CorruptFileError` naming the file.
"""
from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import numpy as np

from scrapy_simdup._ext import checksum
from scrapy_simdup.exceptions import CorruptFileError
from scrapy_simdup.fingerprint.sketch import SKETCH_BYTES
from scrapy_simdup.storage.atomic import (
    atomic_write_json,
    crc32_stream,
    fsync_dir,
    open_regular,
    read_header,
    read_json,
    remove_stale_temporaries,
)
from scrapy_simdup.storage.batchfile import escape_url

FORMAT = "simdup-index"
VERSION = 2
#: one record of ``index.values``: key 1, key 2, sketch, and whether the page
#: was kept (1) or stored as a near-duplicate of an earlier page (0)
RECORD = np.dtype([("value", "<u8"), ("value2", "<u8"), ("sketch", "u1", (SKETCH_BYTES,)),
                   ("kept", "u1")])
RECORD_BYTES = RECORD.itemsize
HEADER_FILE = "index.json"
FILES_GLOB = "index.*"          # the snapshot's files
_INT_FIELDS = ("count", "values_bytes", "values_crc32", "keys_bytes", "keys_crc32")
#: the snapshot's data files and their header fields
_DATA_FILES = (("index.values", "values"), ("index.keys", "keys"))
_KIND = "index snapshot file"


def read_snapshot_header(path: Path) -> dict:
    """The snapshot header at ``path``, checked (format, version, fields, the
    values length against the count): a CorruptFileError naming it."""
    meta = read_header(path, "index snapshot header", FORMAT, VERSION, _INT_FIELDS)
    if meta["values_bytes"] != RECORD_BYTES * meta["count"]:
        raise CorruptFileError(path, "values length does not match the count")
    return meta


def _truncated(path: Path, size: int, length: int) -> CorruptFileError:
    return CorruptFileError(path, f"{_KIND} is {size} bytes, the header needs {length} "
                            "(truncated)")


def _unreadable(path: Path, exc: OSError) -> CorruptFileError:
    return CorruptFileError(path, f"{_KIND} cannot be read ({exc.strerror or exc})")


def _mismatch(path: Path) -> CorruptFileError:
    return CorruptFileError(path, "index snapshot checksum mismatch (corrupt file)")


def verify_snapshot(directory) -> dict:
    """Check the snapshot of ``directory`` as :meth:`IndexStore.load` does
    (header, lengths, CRC-32s), reading its files in blocks, and return its
    header: a CorruptFileError naming a bad file. Read only, where an
    ``IndexStore`` also deletes the directory's temporaries, which a running
    crawl may be writing (``simdup stats`` uses it)."""
    directory = Path(directory)
    meta = read_snapshot_header(directory / HEADER_FILE)
    for name, field in _DATA_FILES:
        path, length = directory / name, meta[f"{field}_bytes"]
        with open_regular(path, _KIND, buffering=0) as handle:
            size = os.fstat(handle.fileno()).st_size
            if size < length:
                raise _truncated(path, size, length)
            try:
                crc = crc32_stream(handle, length)
            except OSError as exc:
                raise _unreadable(path, exc) from None
        if crc != meta[f"{field}_crc32"]:
            raise _mismatch(path)
    return meta


def _empty_header() -> dict:
    return {"format": FORMAT, "version": VERSION, **dict.fromkeys(_INT_FIELDS, 0)}


def records(values, values2=None, sketches=None, kept=None) -> np.ndarray:
    """A ``RECORD`` array of key 1 (and key 2 and sketches, zero when None;
    ``kept``, every page when None)."""
    values = np.asarray(values, dtype=np.uint64).reshape(-1)
    out = np.zeros(values.shape[0], dtype=RECORD)
    out["value"] = values
    out["kept"] = 1 if kept is None else np.asarray(kept, dtype=np.uint8).reshape(-1)
    if values2 is not None:
        out["value2"] = np.asarray(values2, dtype=np.uint64).reshape(-1)
    if sketches is not None:
        out["sketch"] = np.asarray(sketches, dtype=np.uint8).reshape(-1, SKETCH_BYTES)
    return out


class IndexStore:
    """The append-only on-disk copy of what an in-memory index stores."""

    def __init__(self, directory):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(self.directory)
        self.meta_path = self.directory / HEADER_FILE
        self.values_path = self.directory / "index.values"
        self.keys_path = self.directory / "index.keys"
        self.meta = _empty_header()
        #: the format version of a snapshot this version cannot read, or None
        self.outdated: int | None = None
        if os.path.lexists(self.meta_path):
            try:   # continue appending after what is committed (load() verifies it)
                self.meta = self._read_header()
            except CorruptFileError:
                self.outdated = _older_version(self.meta_path)

    def _read_header(self) -> dict:
        return read_snapshot_header(self.meta_path)

    def exists(self) -> bool:
        """A snapshot is here (also a damaged one: data files without header,
        or anything but a regular file in a file's place, :meth:`load` names it)."""
        return os.path.lexists(self.meta_path) or any(
            _occupied(p) for p in (self.values_path, self.keys_path))

    def load(self) -> tuple[np.ndarray, list[str]]:
        """The stored records (``RECORD`` array: value, value2, sketch) and
        keys; raises CorruptFileError naming a bad file."""
        meta = self._read_header()
        values_data = self._read_prefix(self.values_path, meta["values_bytes"], meta["values_crc32"])
        keys_data = self._read_prefix(self.keys_path, meta["keys_bytes"], meta["keys_crc32"])
        values = np.frombuffer(values_data, dtype=RECORD)
        keys = keys_data.decode("utf-8", "surrogateescape").split("\n")
        if keys and keys[-1] == "":
            keys.pop()
        if len(keys) != meta["count"]:
            raise CorruptFileError(self.keys_path, f"{len(keys)} keys for {meta['count']} "
                                   "fingerprints")
        self.meta = meta
        return values, keys

    @staticmethod
    def _read_prefix(path: Path, length: int, crc: int) -> bytes:
        with open_regular(path, _KIND) as handle:
            size = os.fstat(handle.fileno()).st_size
            try:
                # a damaged header must not make us allocate what it claims
                data = handle.read(length) if size >= length else b""
            except OSError as exc:
                raise _unreadable(path, exc) from None
        if len(data) != length:
            raise _truncated(path, size, length)
        if checksum.crc32(data) != crc:
            raise _mismatch(path)
        return data

    def append(self, values: np.ndarray, keys: list[str], settings: dict | None = None) -> None:
        """Append stored pages (a ``RECORD`` array) and commit (fsync, then the
        header atomically)."""
        values_data = np.ascontiguousarray(values, dtype=RECORD).tobytes()
        keys_data = "".join(escape_url(k) + "\n" for k in keys).encode("utf-8", "surrogateescape")
        meta = dict(self.meta)
        for path, offset, data, field in ((self.values_path, meta["values_bytes"], values_data,
                                           "values"),
                                          (self.keys_path, meta["keys_bytes"], keys_data, "keys")):
            mode = "r+b" if path.exists() else "w+b"
            with open(path, mode) as handle:
                handle.seek(offset)
                handle.write(data)
                handle.truncate()
                handle.flush()
                os.fsync(handle.fileno())
            meta[f"{field}_bytes"] = offset + len(data)
            meta[f"{field}_crc32"] = checksum.crc32(data, meta[f"{field}_crc32"])
        fsync_dir(self.directory)
        meta["count"] = self.meta["count"] + len(values)
        meta["saved"] = time.time()
        if settings:
            meta.update(settings)
        atomic_write_json(self.meta_path, meta)
        self.meta = meta

    def move_aside(self) -> list[str]:
        """Rename the (corrupt) snapshot files, or whatever stands in their
        place (a symlink itself, not its target), to ``*.corrupt-<time>``;
        returns the new names."""
        stamp = time.strftime("%Y%m%dT%H%M%S")
        moved = []
        for path in (self.meta_path, self.values_path, self.keys_path):
            # lexists: a dangling symlink left in place would fail every later append
            if os.path.lexists(path):
                target = path.with_name(f"{path.name}.corrupt-{stamp}")
                os.replace(path, target)
                moved.append(str(target))
        fsync_dir(self.directory)
        self.meta = _empty_header()
        return moved


def _occupied(path: Path) -> bool:
    """Data in ``path``: a non-empty file, or anything else in its place (a
    symlink to nowhere, a directory, a FIFO, ...: damage)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return os.path.islink(path)     # a dangling symlink
    except OSError:
        return True                     # a symlink loop, no access, ...: load() says which
    return not stat.S_ISREG(st.st_mode) or st.st_size > 0


def _older_version(path: Path) -> int | None:
    """The version of a snapshot header of an older format, else None."""
    try:
        meta = read_json(path, "index snapshot header")
    except CorruptFileError:
        return None
    version = meta.get("version")
    if meta.get("format") == FORMAT and isinstance(version, int) and 0 < version < VERSION:
        return version
    return None
