"""Crash-safe persistence of the in-memory index in ``SIMDUP_DIR``.

What is kept (per namespace directory: ``SIMDUP_DIR`` for pages,
``SIMDUP_DIR/items`` for items):

``index.values``
    Raw ``<u8``: the fingerprints the index stored, in insertion order (index
    id ``i`` is record ``i``). Append-only.
``index.keys``
    UTF-8, one key (URL or item id) per line, in the same order. Append-only.
``index.json``
    The commit record, replaced atomically after the appends are fsynced:
    ``format`` (``"simdup-index"``), ``version``, ``count``, the byte length and
    running CRC-32 of both files, the index settings (``search``,
    ``distance``, ``fingerprint``: the Fingerprinter recipe, checked on
    restore), ``saved``.

``idf-<pages>.bin``
    With ``SIMDUP_WEIGHTING = "idf"``: the IDF table the fingerprints were
    weighed with (``fingerprint.idf``), one file per state it was committed in. A new
    table is saved at start-up (``idf-00000.bin``, so its id is on disk
    before any batch names it); while it learns, each snapshot saves the
    table first and ``index.json`` names it (``idf_file``), so the index and
    the table always commit together and a restart goes on with exactly the
    committed table (older and uncommitted generations are removed).

A snapshot is taken at every batch flush and at close, so a ``kill -9`` loses
at most what was checked since the last flush. Bytes past the recorded
lengths (an append cut short) are ignored and overwritten; a length or
checksum mismatch inside them is a :class:`CorruptFileError` naming the file.
On start the index is rebuilt from the values (``add`` in order, so ids and
keys line up) with the *current* settings.
"""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from zlib import crc32

import numpy as np

from scrapy_simdup.exceptions import (
    BatchWriteError,
    CorruptFileError,
    DirectoryBusyError,
    ParameterError,
)
from scrapy_simdup.fingerprint.idf import IdfTable
from scrapy_simdup.index.backend import StatCallback
from scrapy_simdup.storage.atomic import (
    atomic_write_json,
    fsync_dir,
    lock_directory,
    read_json,
    remove_stale_temporaries,
)
from scrapy_simdup.storage.batchfile import escape_url
from scrapy_simdup.storage.batchwriter import BatchWriter

logger = logging.getLogger("scrapy_simdup")

FORMAT = "simdup-index"
VERSION = 1
IDF_GLOB = "idf-*.bin"


def idf_file_name(table: IdfTable) -> str:
    return f"idf-{table.pages:05d}.bin"


def _read_json(path: Path, kind: str) -> dict:
    """``read_json``, with any OSError but a missing file (a directory in its
    place, no permission, an I/O error) a CorruptFileError naming ``path``,
    whichever errors ``read_json`` itself turns into one."""
    try:
        return read_json(path, kind)
    except FileNotFoundError:
        raise CorruptFileError(path, f"{kind} is missing") from None
    except CorruptFileError:
        raise
    except OSError as exc:
        raise CorruptFileError(path, _unreadable(path, kind, exc)) from None


def _unreadable(path: Path, kind: str, exc: OSError) -> str:
    if isinstance(exc, IsADirectoryError) or path.is_dir():
        return f"is a directory, not {'an' if kind[:1] in 'aeiou' else 'a'} {kind}"
    return f"{kind} cannot be read ({exc.strerror or exc})"


def prepare_directory(directory) -> Path:
    """Create ``directory`` if needed and check that files can be written
    there: a ValueError naming the directory otherwise (at start-up, not at
    the first batch)."""
    path = Path(directory)
    if path.exists() and not path.is_dir():     # mkdir would say "File exists"
        raise ValueError(f"{str(directory)!r} is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"{str(directory)!r} cannot be used: {exc.strerror or exc}") from None
    if not path.is_dir():
        raise ValueError(f"{str(directory)!r} is not a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"{str(directory)!r} is not writable")
    return path


def lock_crawl_directory(directory):
    """The crawl's lock on its directory (one per namespace): two crawls
    writing one directory would interleave record ids and index snapshots.
    A ValueError naming the directory and the holder when another crawl
    holds it."""
    try:
        return lock_directory(directory, ".crawl.lock")
    except DirectoryBusyError as exc:
        holder = ("another crawl in this process" if exc.holder == f"process {os.getpid()}"
                  else exc.holder)
        raise ValueError(f"{str(directory)!r} is in use by another crawl ({holder}): give "
                         f"each crawl its own directory, and merge their batches with "
                         f"`simdup merge DIR...`") from None
    except OSError as exc:      # a full disk, a .crawl.lock that is a directory, ...
        raise ValueError(f"{str(directory)!r} cannot be used: cannot write its .crawl.lock: "
                         f"{exc.strerror or exc}") from None


def namespace_dir(directory, namespace: str = "pages") -> Path:
    """Where a namespace keeps its files: pages in ``directory`` itself,
    anything else (items) in a subdirectory of that name."""
    directory = Path(directory)
    return directory if namespace == "pages" else directory / namespace


class IndexStore:
    """The append-only on-disk copy of what an in-memory index stores."""

    def __init__(self, directory):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(self.directory)
        self.meta_path = self.directory / "index.json"
        self.values_path = self.directory / "index.values"
        self.keys_path = self.directory / "index.keys"
        self.meta = {"format": FORMAT, "version": VERSION, "count": 0, "values_bytes": 0,
                     "values_crc32": 0, "keys_bytes": 0, "keys_crc32": 0}
        if self.meta_path.exists():
            try:   # continue appending after what is committed (load() verifies it)
                meta = _read_json(self.meta_path, "index snapshot header")
                if meta.get("format") == FORMAT and meta.get("version") == VERSION:
                    self.meta = meta
            except CorruptFileError:
                pass

    def exists(self) -> bool:
        """A snapshot is here (also a damaged one: data files without header)."""
        return self.meta_path.exists() or any(
            p.exists() and p.stat().st_size > 0 for p in (self.values_path, self.keys_path))

    def load(self) -> tuple[np.ndarray, list[str]]:
        """The stored ``(values, keys)``; raises CorruptFileError naming a bad file."""
        meta = _read_json(self.meta_path, "index snapshot header")
        if meta.get("format") != FORMAT:
            raise CorruptFileError(self.meta_path, f"not a {FORMAT} header")
        if meta.get("version") != VERSION:
            raise CorruptFileError(self.meta_path, f"index snapshot version {meta.get('version')!r}"
                                   f" is not supported (this scrapy-simdup reads {VERSION})")
        for key in ("count", "values_bytes", "values_crc32", "keys_bytes", "keys_crc32"):
            if not isinstance(meta.get(key), int) or meta[key] < 0:
                raise CorruptFileError(self.meta_path, f"field {key!r} is missing or invalid")
        if meta["values_bytes"] != 8 * meta["count"]:
            raise CorruptFileError(self.meta_path, "values length does not match the count")
        values_data = self._read_prefix(self.values_path, meta["values_bytes"], meta["values_crc32"])
        keys_data = self._read_prefix(self.keys_path, meta["keys_bytes"], meta["keys_crc32"])
        values = np.frombuffer(values_data, dtype="<u8").astype(np.uint64)
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
        try:
            with open(path, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                # a damaged header must not make us allocate what it claims
                data = handle.read(length) if size >= length else b""
        except FileNotFoundError:
            raise CorruptFileError(path, "index snapshot file is missing") from None
        except OSError as exc:
            raise CorruptFileError(path, _unreadable(path, "index snapshot file", exc)) from None
        if len(data) != length:
            raise CorruptFileError(path, f"index snapshot file is {size} bytes, the header "
                                   f"needs {length} (truncated)")
        if crc32(data) != crc:
            raise CorruptFileError(path, "index snapshot checksum mismatch (corrupt file)")
        return data

    def append(self, values: np.ndarray, keys: list[str], settings: dict | None = None) -> None:
        """Append stored fingerprints and commit (fsync, then the header atomically)."""
        values_data = np.ascontiguousarray(values, dtype="<u8").tobytes()
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
            meta[f"{field}_crc32"] = crc32(data, meta[f"{field}_crc32"])
        fsync_dir(self.directory)
        meta["count"] = self.meta["count"] + len(values)
        meta["saved"] = time.time()
        if settings:
            meta.update(settings)
        atomic_write_json(self.meta_path, meta)
        self.meta = meta

    def move_aside(self) -> list[str]:
        """Rename the (corrupt) snapshot files to ``*.corrupt-<time>``; returns the new names."""
        stamp = time.strftime("%Y%m%dT%H%M%S")
        moved = []
        for path in (self.meta_path, self.values_path, self.keys_path):
            if path.exists():
                target = path.with_name(f"{path.name}.corrupt-{stamp}")
                os.replace(path, target)
                moved.append(str(target))
        fsync_dir(self.directory)
        self.meta = {"format": FORMAT, "version": VERSION, "count": 0, "values_bytes": 0,
                     "values_crc32": 0, "keys_bytes": 0, "keys_crc32": 0}
        return moved


class PersistentBatchWriter:
    """What a crawl feeds every checked fingerprint to (its directory, usually
    the ``SIMDUP_DIR`` setting).

    * Every checked page goes into the batch ``Q`` (:class:`BatchWriter`),
      flushed as a batch file every ``batch_size`` pages and at close.
    * With a memory ``backend``, the fingerprints the index stored (the checks
      that returned no match) are appended to the index snapshot at the same
      moments, so a restart rebuilds the index (:func:`restore`).

    ``index_meta``: what the snapshot header records with the index
    (``search``, ``distance``, ``fingerprint``). ``on_stat(name, value)`` is
    told ``batches_flushed`` and ``batch_records_flushed`` at every flush.
    ``lost``: after a :meth:`close` that failed, how many fingerprints were
    not saved.
    """

    def __init__(self, directory, batch_size: int, backend=None,
                 index_meta: dict | None = None, on_stat: StatCallback | None = None,
                 idf: IdfTable | None = None):
        self.directory = Path(directory)
        self.backend = backend
        self.idf = idf
        self.index_meta = index_meta or {}
        if idf is not None:
            # the table's id goes to disk before any batch file names it
            name = idf_file_name(idf)
            if not (self.directory / name).exists():
                idf.save(self.directory / name)
            self.index_meta = {**self.index_meta, "idf_file": name}
        self.on_stat = on_stat
        self.store = IndexStore(self.directory) if backend is not None else None
        self._stored_values: list[int] = []
        self._stored_keys: list[str] = []
        self.lost = 0
        self.batches = BatchWriter(self.directory, batch_size, on_flush=[self._on_flush],
                                   fingerprint=self.index_meta.get("fingerprint"),
                                   distance=self.index_meta.get("distance"))

    def add(self, value, W, key, match, revisit: bool = False) -> None:
        """One checked fingerprint; ``match``: what the backend found (None:
        it stored the fingerprint). A ``revisit`` (``match`` is the page
        itself, stored before) goes to the batch as no near-duplicate."""
        if self.store is not None and match is None:   # the backend stored it
            self._stored_values.append(int(value))
            self._stored_keys.append(str(key))
        self.batches.append(value, W, key,             # may flush (and snapshot)
                            match.distance if match is not None and not revisit else None)

    def _on_flush(self, path) -> None:
        self.snapshot()
        if self.on_stat is not None:
            self.on_stat("batches_flushed", self.batches.flushed_batches)
            self.on_stat("batch_records_flushed", self.batches.flushed_records)

    def snapshot(self) -> None:
        if self.store is None or not self._stored_values:
            return
        # the table first, then the index that names it: a kill between the two
        # leaves the previous commit (index and table) in force
        name = idf_file_name(self.idf) if self.idf is not None else None
        changed = name is not None and name != self.index_meta.get("idf_file")
        if changed:
            self.idf.save(self.directory / name)
            self.index_meta = {**self.index_meta, "idf_file": name}
        self.store.append(np.array(self._stored_values, dtype=np.uint64), self._stored_keys,
                          self.index_meta)
        if changed:
            _remove_idf_files(self.directory, keep=name)
        self._stored_values, self._stored_keys = [], []

    def flush(self) -> None:
        """Write the pending batch (if any) and snapshot the index."""
        if self.batches.flush() is None:
            self.snapshot()

    async def close(self) -> None:
        """Write what is left. Nothing is tried again after this: when a write
        fails, :class:`BatchWriteError` says how many fingerprints are lost
        (also in ``lost``) and where."""
        try:
            self.batches.close()    # a batch written snapshots the index with it
        except OSError as exc:
            if len(self.batches):   # the batch was not written
                self.lost = len(self.batches)
                try:
                    self.snapshot()     # still try: it is a separate file
                except OSError:
                    pass                # same directory: the batch error tells it
                raise BatchWriteError(exc.errno, f"{self.lost:,} checked fingerprints could "
                                      f"not be written to {self.directory} and are lost: "
                                      f"{_root_cause(exc)}") from exc
            error = exc             # the batch was written, its snapshot failed
        else:
            try:
                self.snapshot()     # nothing was left to flush
                return
            except OSError as exc:
                error = exc
        self.lost = len(self._stored_values)
        raise BatchWriteError(error.errno, f"{self.lost:,} kept fingerprints could not be added "
                              f"to the index snapshot in {self.directory} and are lost to the "
                              f"next crawl (the batch files have them): "
                              f"{_root_cause(error)}") from error


def _root_cause(exc: BaseException) -> str:
    """What the system said about the write that failed, without the
    messages wrapped around it."""
    while isinstance(exc.__cause__, OSError):
        exc = exc.__cause__
    return (exc.strerror if isinstance(exc, OSError) and exc.strerror else None) or str(exc)


def _remove_idf_files(directory: Path, keep: str | None) -> None:
    for path in directory.glob(IDF_GLOB):
        if path.name != keep:
            try:
                path.unlink()
            except OSError:
                pass


def load_idf(directory, on_error: str = "keep",
             on_stat: StatCallback | None = None) -> IdfTable | None:
    """The IDF table committed in ``directory``, or None (a new crawl).

    The table is the one ``index.json`` names, or before the first snapshot
    the one saved at start-up; other generations (a kill before their
    snapshot committed) are removed. A named table that is missing or
    corrupt cannot be rebuilt, and every batch file and the collection in
    the directory were weighed with it: with ``on_error="stop"`` that is a
    :class:`CorruptFileError` (the caller reports it), otherwise all of them
    are moved into a ``corrupt-<time>/`` subdirectory (still a directory
    ``simdup merge`` can merge on its own), logged, and the crawl starts
    afresh. Either way ``on_stat("index_corrupt", 1)`` is called.
    """
    directory = Path(directory)
    try:
        name = _read_json(directory / "index.json", "index snapshot header").get("idf_file")
    except CorruptFileError:        # no index yet, or a damaged one (restore reports it)
        name = None
    generations = sorted(p.name for p in directory.glob(IDF_GLOB))
    if name is None and generations:
        name = generations[0]
    if name is None:
        return None
    path = directory / str(name)
    try:
        if path.is_dir():
            raise CorruptFileError(path, "is a directory, not the IDF table the saved index "
                                         "was weighed with")
        if not path.is_file():
            raise CorruptFileError(path, "the IDF table the saved index was weighed with is "
                                         "missing")
        try:
            table = IdfTable.load(path)
        except FileNotFoundError:
            raise CorruptFileError(path, "the IDF table the saved index was weighed with is "
                                         "missing") from None
        except OSError as exc:
            raise CorruptFileError(path, _unreadable(path, "IDF table", exc)) from None
    except CorruptFileError as exc:
        _saved_file_corrupt(exc, "IDF table (the index and batches need it)", on_error,
                            on_stat, lambda: _move_state_aside(directory))
        return None
    _remove_idf_files(directory, keep=path.name)
    return table


def _move_state_aside(directory: Path) -> list[str]:
    """Move the index, IDF tables, batch files and collection of ``directory``
    into a new ``corrupt-<time>/`` subdirectory; returns what was moved."""
    target = directory / f"corrupt-{time.strftime('%Y%m%dT%H%M%S')}"
    target.mkdir()
    moved = []
    for pattern in ("index.*", IDF_GLOB, "batch-*", "collection"):
        for path in sorted(directory.glob(pattern)):
            os.replace(path, target / path.name)
            moved.append(path.name)
    fsync_dir(target)
    fsync_dir(directory)
    return [f"{target}/: {', '.join(moved)}"]


def _saved_file_corrupt(exc, what: str, on_error: str, on_stat, move_aside) -> None:
    """A saved file is corrupt: counted, then raised (``on_error="stop"``) or
    moved aside with ``move_aside()`` and logged by name (no traceback)."""
    if on_stat is not None:
        on_stat("index_corrupt", 1)
    if on_error == "stop":
        raise exc
    moved = move_aside()
    logger.error("Simdup: the saved %s is corrupt: %s; moved aside (%s), starting with an "
                 "empty index", what, exc, ", ".join(moved))


def restore(backend, directory, on_error: str = "keep", on_stat: StatCallback | None = None,
            fingerprint: str | None = None) -> int:
    """Load a memory backend's index from its snapshot in ``directory``.

    Returns the number of fingerprints restored (also told to
    ``on_stat("index_restored", n)``). A corrupt snapshot is counted
    (``on_stat("index_corrupt", 1)``); with ``on_error="stop"`` it raises
    :class:`CorruptFileError` (the caller reports it), otherwise it is logged
    by file name (no traceback), its files are moved aside and the crawl
    starts with an empty index. A snapshot whose fingerprints were made with
    another recipe than ``fingerprint`` (``Fingerprinter.version``: features,
    weights, extraction) is a :class:`ParameterError` (``"fingerprint"``):
    its fingerprints and this crawl's cannot be compared.
    """
    store = IndexStore(directory)
    if not store.exists():
        return 0
    saved = store.meta.get("fingerprint")
    if fingerprint and saved and saved != fingerprint:
        raise ParameterError("fingerprint", f"the index in {store.meta_path.parent} holds "
                             f"fingerprints made with {saved!r}, this crawl makes "
                             f"{fingerprint!r}; they cannot be compared")
    try:
        values, keys = store.load()
    except CorruptFileError as exc:
        _saved_file_corrupt(exc, "index", on_error, on_stat, store.move_aside)
        return 0
    if len(values):
        ids = backend.index.add(values)
        for i, key in zip(np.asarray(ids).tolist(), keys):
            backend.keys[int(i)] = key
    logger.info("Simdup: restored %d fingerprints from %s", len(values), store.meta_path)
    if on_stat is not None:
        on_stat("index_restored", len(values))
    return len(values)
