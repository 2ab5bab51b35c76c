"""Crash-safe persistence of a crawl's state in ``SIMDUP_DIR``: what ties
the index snapshot (:mod:`~scrapy_simdup.index.snapshot`), the batch files
and the IDF table together for a crawl.

Per namespace directory (``SIMDUP_DIR`` for pages, ``SIMDUP_DIR/items`` for
items), besides the batch files and the snapshot's ``index.*`` files:

``idf-<pages>.bin``
    With ``SIMDUP_WEIGHTING = "idf"``: the IDF table the fingerprints were
    weighed with (``fingerprint.idf``), one file per state it was committed in. A new
    table is saved at start-up (``idf-00000.bin``, so its id is on disk
    before any batch names it); while it learns, each snapshot saves the
    table first and ``index.json`` names it (``idf_file``), so the index and
    the table always commit together and a restart goes on with exactly the
    committed table (older and uncommitted generations are removed).

A snapshot is taken at every batch flush and at close, so a ``kill -9`` loses
at most what was checked since the last flush. On start the index is rebuilt
from the snapshot's values (``add`` in order, so ids and keys line up) with
the *current* settings (:func:`restore`).
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from scrapy_simdup.exceptions import BatchWriteError, CorruptFileError, ParameterError
from scrapy_simdup.fingerprint.idf import IdfTable
from scrapy_simdup.index.backend import StatCallback
from scrapy_simdup.index.crawldir import move_state_aside
from scrapy_simdup.index.snapshot import FILES_GLOB, HEADER_FILE, IndexStore, records
from scrapy_simdup.storage.atomic import read_json
from scrapy_simdup.storage.batchwriter import BatchWriter

logger = logging.getLogger("scrapy_simdup")

IDF_GLOB = "idf-*.bin"
# what a damaged IDF table takes with it; "collection" is where `simdup merge`
# puts its collection by default
_WEIGHED_STATE = (FILES_GLOB, IDF_GLOB, "batch-*", "collection")


def idf_file_name(table: IdfTable) -> str:
    return f"idf-{table.pages:05d}.bin"


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
        if backend is not None:
            backend.log_stored()     # what it stores goes to the snapshot
        self.lost = 0
        self.batches = BatchWriter(self.directory, batch_size, on_flush=[self._on_flush],
                                   fingerprint=self.index_meta.get("fingerprint"),
                                   distance=self.index_meta.get("distance"),
                                   crawl={k: v for k, v in self.index_meta.items()
                                          if k in ("distance", "min_similarity", "search")})

    def add(self, page, key, match, revisit: bool = False, canonical: str | None = None) -> None:
        """One checked page (a Fingerprint); ``match``: what the backend found
        (None: a new page). A ``revisit`` (``match`` is the page itself,
        stored before) goes to the batch as no near-duplicate. ``canonical``:
        the page's declared ``rel=canonical`` URL, kept in the batch."""
        self.batches.append(page, key,                 # may flush (and snapshot)
                            match.distance if match is not None and not revisit else None,
                            canonical=canonical, revisit=revisit)

    def skipped(self, reason: str) -> None:
        """A page not fingerprinted (counted in the crawl record by ``reason``)."""
        self.batches.skipped(reason)

    def _on_flush(self, path) -> None:
        # the batch is on disk: counted before the snapshot, which may fail
        # (a full disk) and must not hide a batch that was written
        if self.on_stat is not None:
            self.on_stat("batches_flushed", self.batches.flushed_batches)
            self.on_stat("batch_records_flushed", self.batches.flushed_records)
        self.snapshot()

    def snapshot(self) -> None:
        """Append what the backend stored since the last snapshot."""
        if self.store is None or not self.backend.stored_pending:
            return
        # the table first, then the index that names it: a kill between the two
        # leaves the previous commit (index and table) in force
        name = idf_file_name(self.idf) if self.idf is not None else None
        changed = name is not None and name != self.index_meta.get("idf_file")
        if changed:
            self.idf.save(self.directory / name)
            self.index_meta = {**self.index_meta, "idf_file": name}
        stored = self.backend.take_stored()
        values, values2, sketches, keys, kept = zip(*stored)
        sketch_rows = np.frombuffer(b"".join(sketches), dtype=np.uint8)
        try:
            self.store.append(records(values, values2, sketch_rows, kept), list(keys),
                              self.index_meta)
        except BaseException:
            self.backend.put_back_stored(stored)    # tried again at the next snapshot
            raise
        if changed:
            _remove_idf_files(self.directory, keep=name)

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
        self.lost = self.backend.stored_pending if self.backend is not None else 0
        raise BatchWriteError(error.errno, f"{self.lost:,} stored fingerprints could not be added "
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
        name = read_json(directory / HEADER_FILE, "index snapshot header").get("idf_file")
    except CorruptFileError:        # no index yet, or a damaged one (restore reports it)
        name = None
    generations = sorted(p.name for p in directory.glob(IDF_GLOB))
    if name is None and generations:
        name = generations[0]
    if name is None:
        return None
    path = directory / str(name)
    try:
        table = _load_table(path)
    except CorruptFileError as exc:
        _saved_file_corrupt(exc, "IDF table (the index and batches need it)", on_error,
                            on_stat, lambda: move_state_aside(directory, _WEIGHED_STATE))
        return None
    _remove_idf_files(directory, keep=path.name)
    return table


def _load_table(path: Path) -> IdfTable:
    """``IdfTable.load``, with a read error a CorruptFileError too (its
    ``open_regular`` names the rest)."""
    try:
        return IdfTable.load(path)
    except OSError as exc:
        raise CorruptFileError(path, f"IDF table cannot be read ({exc.strerror or exc})") from None


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
    ``on_stat("index_restored", n)``: the integration's start-up line says
    it). A corrupt snapshot is counted (``on_stat("index_corrupt", 1)``); with ``on_error="stop"`` it raises
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
    if store.outdated is not None:
        raise ParameterError("dir", f"the index in {store.directory} was saved by an older "
                             f"scrapy-simdup (index format {store.outdated}: fingerprints "
                             f"without the verification sketch this version matches with); "
                             f"its pages cannot be re-fingerprinted from it. Use a new "
                             f"directory, or move {store.directory} away to start over")
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
    backend.load(values["value"], values["value2"], values["sketch"], keys, values["kept"])
    if on_stat is not None:
        on_stat("index_restored", len(values))
    return len(values)
