"""The on-disk collection of a batch merge: its format, the lock, the commit.

The collection (a directory, by default ``<first DIR>/collection``):

``H.bin``
    The collection ``H``: raw little-endian records of :data:`H_DTYPE`
    (``value <u8``, ``value2 <u8``, ``id <i8``, ``sketch u1 x 32``: both
    keys and the verification sketch), a sequence of *runs*, each sorted by
    ``value`` (every merged batch is sorted and appended as one run).
    ``np.fromfile("H.bin", dtype=H_DTYPE)`` reads it.
``H2.bin``
    The same runs, each sorted by ``value2`` (the merge scans a chunk by
    each key).
``urls.bin`` / ``urls.idx``
    URL of collection id ``i``: bytes ``idx[i-1]:idx[i]`` (``idx[-1] = 0``) of
    ``urls.bin``; ``urls.idx`` is raw ``<i8`` end offsets.
``pairs.bin``
    Every duplicate pair found so far: raw :data:`PAIR_DTYPE` records
    (``id``, ``duplicate_of``, ``distance``, ``matches``), ``duplicate_of``
    the earlier record, ``distance`` the smaller of the two key distances,
    ``matches`` the equal sketch bins (the similarity is
    ``fingerprint.sketch.similarity(matches)``).
``collection.json``
    Written last, atomically, after the appends above are fsynced: ``format``
    (``"simdup-collection"``), ``version`` (2), ``count``, byte lengths and a
    CRC-32 per run and file (``crc32``, ``crc32_2``), the merged batches (so they are not merged twice), and
    ``crc32``: the CRC-32 of each of ``urls.bin``, ``urls.idx`` and
    ``pairs.bin`` up to its recorded length (kept up to date incrementally;
    checked before a merge appends and before URLs or pairs are read).
    Bytes past the recorded lengths (an append cut by a crash) are ignored
    and overwritten by the next merge. A version 1 collection (key 1 alone)
    is refused with :class:`~scrapy_simdup.storage.batchfile.OutdatedBatchError`.

Also here: which batches of a directory the collection already holds
(:func:`pending_batches`), and the ranges of ``pairs.bin`` a ``--pairs``
merge committed but never wrote out (:func:`unreported_ranges`).
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from scrapy_simdup._ext import checksum
from scrapy_simdup.exceptions import CorruptFileError, DirectoryBusyError
from scrapy_simdup.storage.atomic import (
    atomic_write_json,
    check_regular,
    crc32_file,
    crc32_stream,
    file_type_name,
    fsync_dir,
    is_count,
    lock_directory,
    open_regular,
    read_header,
    read_json,
)
from scrapy_simdup.storage.batchfile import (
    SKETCH_BYTES,
    OutdatedBatchError,
    check_version,
    list_batches,
    read_meta,
)

FORMAT = "simdup-collection"
VERSION = 2
H_DTYPE = np.dtype([("value", "<u8"), ("value2", "<u8"), ("id", "<i8"),
                    ("sketch", "u1", (SKETCH_BYTES,))])
SIDE_FILES = ("urls.bin", "urls.idx", "pairs.bin")      # CRC-32 in the header
PAIR_DTYPE = np.dtype([("id", "<i8"), ("duplicate_of", "<i8"), ("distance", "u1"),
                       ("matches", "u1")])
#: the runs sorted by key 1 and by key 2: (file, its run CRC field, the key)
RUN_FILES = (("H.bin", "crc32", "value"), ("H2.bin", "crc32_2", "value2"))


class Collection:
    """The on-disk collection ``H`` (see the module docstring)."""

    def __init__(self, path, create: bool = False):
        self.path = Path(path)
        self.meta_path = self.path / "collection.json"
        if not os.path.lexists(self.meta_path):   # (a dangling symlink is damage, read below)
            if not create:
                raise CorruptFileError(self.meta_path, "no collection here (run `simdup merge` first)")
            self.path.mkdir(parents=True, exist_ok=True)
            self.meta = {"format": FORMAT, "version": VERSION, "count": 0, "runs": [],
                         "urls_bytes": 0, "pairs": 0, "merged": {}, "created": time.time(),
                         "crc32": {name: 0 for name in SIDE_FILES}}
            for name in ("H.bin", "H2.bin", "urls.bin", "urls.idx", "pairs.bin"):
                (self.path / name).touch()
            atomic_write_json(self.meta_path, self.meta)
        else:
            self.meta = self._load_meta()
        self._check_lengths()

    def _load_meta(self) -> dict:
        try:
            check_version(self.meta_path, read_json(self.meta_path, "collection header"),
                          FORMAT, VERSION, "collection")
        except OutdatedBatchError as exc:
            raise OutdatedBatchError(exc.path, exc.problem.replace(
                "(or merge these batches with the version that wrote them)",
                "and merge the new batches into a new collection (move this one away or "
                "give --collection another path)")) from None
        meta = read_header(self.meta_path, "collection header", FORMAT, VERSION,
                           ("count", "urls_bytes", "pairs"))
        if not isinstance(meta.get("runs"), list) or not isinstance(meta.get("merged"), dict):
            raise CorruptFileError(self.meta_path, "fields 'runs'/'merged' are missing or invalid")
        if not all(isinstance(r, dict) and is_count(r.get("count")) and is_count(r.get("crc32"))
                   and is_count(r.get("crc32_2")) for r in meta["runs"]):
            raise CorruptFileError(self.meta_path, "a run entry is missing or invalid")
        if sum(r["count"] for r in meta["runs"]) != meta["count"]:
            raise CorruptFileError(self.meta_path, "run lengths do not add up to the count")
        return meta

    def _check_lengths(self) -> None:
        need = {
            "H.bin": self.count * H_DTYPE.itemsize,
            "H2.bin": self.count * H_DTYPE.itemsize,
            "urls.idx": self.count * 8,
            "urls.bin": self.meta["urls_bytes"],
            "pairs.bin": self.meta["pairs"] * PAIR_DTYPE.itemsize,
        }
        for name, size in need.items():
            path = self.path / name
            have = check_regular(path, "collection file").st_size
            if have < size:
                raise CorruptFileError(path, f"collection file is {have} bytes, the header "
                                       f"needs {size} (truncated)")

    @property
    def count(self) -> int:
        return int(self.meta["count"])

    def _recorded_length(self, name: str) -> int:
        return {"urls.bin": self.meta["urls_bytes"], "urls.idx": self.count * 8,
                "pairs.bin": self.meta["pairs"] * PAIR_DTYPE.itemsize}[name]

    def verify_files(self, names=SIDE_FILES) -> None:
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

    def chunk_plan(self, chunk_size: int) -> list[tuple[int, list[dict]]]:
        """``(start, runs)`` of each chunk :meth:`chunks` yields: what
        :func:`read_chunk` needs to read one chunk alone (a Dask task)."""
        plan, start = [], 0
        for group in self._groups(chunk_size):
            plan.append((start, [dict(r) for r in group]))
            start += sum(r["count"] for r in group)
        return plan

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
        except OSError as exc:      # (its .lock is a directory, no permission, ...)
            raise ValueError(f"{path}: cannot take the collection's lock "
                             f"{exc.filename or path}: {exc.strerror or exc}") from None

    def chunks(self, chunk_size: int, verify: bool = True):
        """Yield ``(start, by_key1, by_key2)``: consecutive runs, at most
        ``chunk_size`` records (a run longer than that is one chunk of its
        own), the same records sorted by ``value`` and by ``value2``.

        Both are views of buffers that the next chunk overwrites (a fresh
        buffer per chunk costs a page fault per 4 KiB, slow on virtual
        machines): copy what must outlive the iteration.
        """
        groups = self._groups(chunk_size)
        size = max((sum(r["count"] for r in g) for g in groups), default=0)
        bufs = [np.empty(size, dtype=H_DTYPE) for _ in RUN_FILES]
        handles = [open(self.path / name, "rb", buffering=0) for name, _, _ in RUN_FILES]
        try:
            start = 0
            for group in groups:
                out = []
                for (name, crc_field, key), handle, buf in zip(RUN_FILES, handles, bufs):
                    at = self._read_group(handle, self.path / name, crc_field, group, buf,
                                          start, verify)
                    out.append(self._sorted_chunk(buf[:at], group, key))
                yield start, out[0], out[1]
                start += at
        finally:
            for handle in handles:
                handle.close()

    @staticmethod
    def _sorted_chunk(records: np.ndarray, group: list[dict], key: str) -> np.ndarray:
        """A chunk's ``records`` (its runs, each sorted by ``key``) sorted by ``key``."""
        if len(group) > 1:
            records = records[np.argsort(records[key], kind="stable")]
        return records

    @staticmethod
    def _read_group(handle, path, crc_field, group, buf, start, verify) -> int:
        """Read the runs of ``group`` from ``handle`` into ``buf``; their records."""
        raw = memoryview(buf).cast("B")
        at = 0
        for run in group:
            nbytes = run["count"] * H_DTYPE.itemsize
            part = raw[at * H_DTYPE.itemsize:at * H_DTYPE.itemsize + nbytes]
            got = 0
            while got < nbytes:
                k = handle.readinto(part[got:])
                if not k:
                    raise CorruptFileError(path, "collection data ends early (truncated)")
                got += k
            if verify and checksum.crc32(part) != run[crc_field]:
                raise CorruptFileError(path, f"checksum mismatch in the run starting at "
                                       f"record {start + at}")
            at += run["count"]
        return at

    @classmethod
    def read_chunk(cls, path, start: int, group: list[dict], key: int, verify: bool = True,
                   buf=None) -> np.ndarray:
        """The chunk of the runs ``group`` starting at record ``start`` of the
        collection at ``path`` (from :meth:`chunk_plan`), sorted by key
        ``key`` (0: ``value``, 1: ``value2``): the records :meth:`chunks`
        yields for it. ``buf``: an :data:`H_DTYPE` array to read into when
        large enough (the result may then be a view of it), else a fresh one."""
        count = sum(r["count"] for r in group)
        name, crc_field, field = RUN_FILES[key]
        buf = buf[:count] if buf is not None and len(buf) >= count \
            else np.empty(count, dtype=H_DTYPE)
        with open(Path(path) / name, "rb", buffering=0) as handle:
            handle.seek(start * H_DTYPE.itemsize)
            cls._read_group(handle, Path(path) / name, crc_field, group, buf, start, verify)
        return cls._sorted_chunk(buf, group, field)

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

    def append(self, run: np.ndarray, urls: list[str], pairs: np.ndarray,
               merged: dict, recipe: str | None = None, extra: dict | None = None) -> None:
        """Append a run (:data:`H_DTYPE` records, any order: it is stored
        sorted by each key) with its URLs (in the order of the records' ids)
        and pairs; commit by rewriting the header. ``recipe``: the
        fingerprint recipe of the run (kept in the header); ``extra``: more
        header fields committed with the run."""
        run = np.ascontiguousarray(run, dtype=H_DTYPE)
        data = run[np.argsort(run["value"], kind="stable")].tobytes()
        data2 = run[np.argsort(run["value2"], kind="stable")].tobytes()
        self._append("H.bin", self.count * H_DTYPE.itemsize, data)
        self._append("H2.bin", self.count * H_DTYPE.itemsize, data2)
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
            meta["crc32"] = {name: checksum.crc32(appended[name], crc)
                             for name, crc in self.meta["crc32"].items()}
        meta["runs"] = self.meta["runs"] + ([{"count": len(run), "crc32": checksum.crc32(data),
                                              "crc32_2": checksum.crc32(data2)}] if len(run) else [])
        meta["count"] = self.count + len(run)
        meta["urls_bytes"] = int(ends[-1]) if len(ends) else self.meta["urls_bytes"]
        meta["pairs"] = self.meta["pairs"] + len(pairs)
        meta["merged"] = {**self.meta["merged"], **merged}
        if recipe:
            meta["fingerprint"] = recipe
        meta.update(extra or {})
        meta["updated"] = time.time()
        atomic_write_json(self.meta_path, meta)
        self.meta = meta


def batch_key(path: Path, meta: dict) -> str:
    """What a merged batch is remembered by: its name and the checksums of its
    data, not where it lies (a SIMDUP_DIR moved or copied after a merge is not
    merged again)."""
    return (f"{path.name}|{meta['count']}|{int(meta['npy_crc32']):08x}|"
            f"{int(meta.get('urls_crc32', 0)):08x}")


def is_merged(path: Path, meta: dict, merged: dict) -> bool:
    # collections written before content keys remember batches by absolute path
    return batch_key(path, meta) in merged or str(path.resolve()) in merged


def unreported_ranges(coll: Collection) -> list[list[int]]:
    """The ``[start, stop)`` ranges of pairs.bin that a --pairs merge
    committed but never wrote to its file (see ``merge``)."""
    ranges = coll.meta.get("pairs_unreported")
    if not isinstance(ranges, list):
        return []
    total = coll.meta["pairs"]
    return [[int(r[0]), int(r[1])] for r in ranges
            if isinstance(r, list) and len(r) == 2 and all(isinstance(x, int) for x in r)
            and 0 <= r[0] <= r[1] <= total]


def check_collection_path(path, option: str | None = None) -> None:
    """A collection path that is there but no directory (a file, a dangling
    symlink, ...) is a ValueError saying so; ``option`` names the option that
    gave it (``mkdir`` would say only "File exists")."""
    path = Path(path)
    if not os.path.lexists(path) or path.is_dir():
        return
    what = file_type_name(os.stat(path).st_mode) if path.exists() else "a dangling symlink"
    if option:
        raise ValueError(f"{option} {path} is {what}; give a directory (new or an existing "
                         f"collection)")
    raise ValueError(f"{path} is {what}, not a collection directory: move it away or give "
                     f"--collection PATH")


def merged_before(path: Path, merged: dict) -> bool:
    """A batch whose header is damaged was merged before: its data is in the
    collection. The collection remembers where it lay and, in its key, its
    file name and the CRC-32 of its data: a directory moved or copied after
    the merge is matched by name, and by the data file when that can be read
    (a data file that cannot be read was merged if the name was)."""
    path = Path(path)
    resolved = str(path.resolve())
    if resolved in merged or any(isinstance(v, dict) and v.get("path") == resolved
                                 for v in merged.values()):
        return True
    crcs = {key.split("|")[2] for key in merged
            if key.count("|") == 3 and key.split("|", 1)[0] == path.name}
    if not crcs:
        return False
    try:
        with open_regular(path.with_suffix(".npy"), "batch data file", buffering=0) as handle:
            return f"{crc32_stream(handle):08x}" in crcs
    except (CorruptFileError, OSError):
        return True


def pending_batches(dirs, collection: Collection | None,
                    damaged: list | None = None) -> list[tuple[Path, dict]]:
    """``(header path, header)`` of every batch of ``dirs`` not merged yet.

    A batch whose header cannot be read raises its CorruptFileError, or with
    a ``damaged`` list is appended to it as ``(header path, error)``; a
    batch of an earlier format raises its OutdatedBatchError either way."""
    merged = collection.meta["merged"] if collection is not None else {}
    out, seen = [], set()
    for d in dirs:
        for p in list_batches(d):
            try:
                meta = read_meta(p)
            except OutdatedBatchError:
                raise           # not damage: never skipped
            except CorruptFileError as exc:
                if merged_before(p, merged):
                    continue
                if damaged is None:
                    raise
                resolved = str(p.resolve())
                if resolved not in seen:                                # (a DIR given twice)
                    seen.add(resolved)
                    damaged.append((p, exc))
                continue
            key = batch_key(p, meta)
            if not is_merged(p, meta, merged) and key not in seen:  # (a DIR given twice)
                seen.add(key)
                out.append((p, meta))
    return out
