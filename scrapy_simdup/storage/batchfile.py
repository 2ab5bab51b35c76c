"""Batch file format (version 3): what a crawl flushes for the offline merge.

A batch named ``B`` (``batch-<seq:08d>-<pid>``: the directory's batch
sequence number and the id of the writing process, see
:mod:`scrapy_simdup.storage.batchwriter`) is three or four files in ``SIMDUP_DIR``:

``B.npy``
    A plain NumPy ``.npy`` file (``np.load`` reads it) holding a structured
    array of ``count`` records with dtype :data:`BATCH_DTYPE`:

    ========  ==============  ===============================================
    field     type            meaning
    ========  ==============  ===============================================
    value     ``<u8``         key 1: the 64-bit simhash
    value2    ``<u8``         key 2: the second 64-bit key of the same features
    id        ``<i8``         record id, unique within the directory, increasing
    wrms      ``<f4``         ``rms(W) = sqrt(mean(W ** 2))`` over all 64 weights
    wrms2     ``<f4``         the same for ``W2`` (the weights of key 2)
    cq        ``u1`` x 32     ``round(32 * |W[63 - i]| / rms(W))`` clipped to
                              255, for ``i = 0..31``: the normalised weight
                              ``c = |W| / rms(W)`` (what the volatility model
                              reads) of the 32 most significant bits, the only
                              bits a PSM header can use, in steps of 1/32
    cq2       ``u1`` x 32     the same for ``W2``
    sketch    ``u1`` x 32     the page's MinHash sketch (32 bins of 8 bits)
    ========  ==============  ===============================================

    128 bytes per page: PSM batch mode needs the volatility of the header bits
    only (``p_j`` is a function of ``c_j``), of each key; the sketch verifies
    a candidate. Version 1 (key 1 and its weights alone) is refused with
    :class:`OutdatedBatchError`: the second key and the sketch cannot be
    computed from it.
``B.urls``
    The records' URLs, UTF-8, one per line in record order, each ending in
    ``\\n`` (a URL containing a raw newline or carriage return has it
    percent-escaped).
``B.canonical``
    Only when a record has one: the ``rel=canonical`` URL each page declared,
    one line per record as in ``B.urls``, an empty line for none.
``B.json``
    The header, written last (its presence commits the batch): ``format``
    (``"simdup-batch"``), ``version`` (3), ``count``, ``first_id``,
    ``header_bits`` (32), ``dtype`` (the NumPy descr), ``npy_bytes``,
    ``npy_crc32``, ``urls_bytes``, ``urls_crc32``, ``sketch_bytes`` (32),
    ``created`` (Unix time)
    and, when the writer gives them, ``fingerprint`` (the
    ``Fingerprinter.version`` recipe the values were made with),
    ``distance`` (the crawl's SIMDUP_DISTANCE) and ``online_duplicates``
    (``{distance: count}`` of the records the crawl's online index found a
    near-duplicate for; the keys are strings); ``canonical_bytes`` and
    ``canonical_crc32`` when there is a ``B.canonical``; and last
    ``header_crc32``, the CRC-32 of the header itself (:func:`header_crc32`).

Version 2 (the same without ``B.canonical`` and ``header_crc32``) is read
as it is: its header has no checksum of its own.

Each file is written to a temporary name, fsynced and renamed into place, so
a crash leaves either no batch or a complete one; a ``.npy``/``.urls`` without
its ``.json`` is an unfinished flush and is ignored. On load, sizes and CRC-32
are checked and a damaged batch raises :class:`CorruptFileError` naming the file
(also when a directory, a FIFO or a dangling symlink stands in for one).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scrapy_simdup._ext import checksum
from scrapy_simdup.exceptions import CorruptFileError
from scrapy_simdup.storage.atomic import (
    atomic_write,
    atomic_write_json,
    crc32_file,
    crc32_stream,
    is_count,
    open_regular,
    read_header,
    read_json,
)

FORMAT = "simdup-batch"
VERSION = 3
#: versions read: 2 has no header checksum and no canonical URLs
READ_VERSIONS = (2, 3)
HEADER_BITS = 32
CQ_SCALE = 32.0
SKETCH_BYTES = 32       # fingerprint.sketch.SKETCH_BYTES (checked by the tests)
BATCH_DTYPE = np.dtype([("value", "<u8"), ("value2", "<u8"), ("id", "<i8"),
                        ("wrms", "<f4"), ("wrms2", "<f4"),
                        ("cq", "u1", (HEADER_BITS,)), ("cq2", "u1", (HEADER_BITS,)),
                        ("sketch", "u1", (SKETCH_BYTES,))])

OUTDATED_HINT = ("it has no second key and no verification sketch, and they cannot be "
                 "computed from the file: re-crawl with this version of scrapy-simdup "
                 "(or merge these batches with the version that wrote them)")


class OutdatedBatchError(CorruptFileError):
    """A batch file (or a collection) written by an earlier scrapy-simdup,
    without what this version decides matches with. Not damage: a merge
    refuses it even with ``skip_damaged``."""


def check_version(path, meta: dict, format: str, version: int, what: str) -> None:
    """An OutdatedBatchError for a ``format`` header of a version older than
    ``version`` (the oldest one read)."""
    old = meta.get("version") if isinstance(meta, dict) else None
    if isinstance(meta, dict) and meta.get("format") == format and isinstance(old, int) \
            and not isinstance(old, bool) and 0 < old < version:
        raise OutdatedBatchError(path, f"{what} format version {old} was written by an "
                                 f"earlier scrapy-simdup (this one reads version {version}): "
                                 f"{OUTDATED_HINT}")


def header_weights(W) -> tuple[np.ndarray, np.ndarray]:
    """``(cq, wrms)``: the quantised normalised weights of the 32 most significant
    bits (uint8, most significant first, see the format) and ``rms(W)`` (float32).

    ``W`` is one weight vector ``(64,)`` or many ``(n, 64)``.
    """
    W = np.asarray(W, dtype=np.float64)
    if W.shape[-1] != 64:
        raise ValueError(f"W must have 64 weights per fingerprint, got shape {W.shape}")
    if not np.all(np.isfinite(W)):
        raise ValueError("W must be finite (no NaN or infinity)")
    rms = np.sqrt(np.mean(W * W, axis=-1))
    top = np.abs(W[..., 63:63 - HEADER_BITS:-1])
    scale = np.where(rms > 0, CQ_SCALE / np.where(rms > 0, rms, 1.0), 0.0)
    cq = np.minimum(np.rint(top * np.expand_dims(scale, -1)), 255).astype(np.uint8)
    return cq, rms.astype(np.float32)


def escape_url(url) -> str:
    if isinstance(url, bytes):
        url = url.decode("utf-8", "surrogateescape")
    elif not isinstance(url, str):
        raise TypeError(f"url must be str, not {type(url).__name__}")
    if "\n" in url or "\r" in url:
        url = url.replace("\r", "%0D").replace("\n", "%0A")
    if not url.isascii():
        try:
            url.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            # a lone surrogate (e.g. an item id "bad-\ud800") has no UTF-8 form:
            # written as its \uXXXX escape, so one odd key never stops a batch
            url = "".join(c if not "\ud800" <= c <= "\udfff" or "\udc80" <= c <= "\udcff"
                          else f"\\u{ord(c):04x}" for c in url)
    return url


def header_crc32(meta: dict) -> int:
    """The CRC-32 a version-3 header records of itself (``header_crc32``):
    of its JSON without that field, keys sorted, as
    ``json.dumps(meta, sort_keys=True, separators=(",", ":"))`` writes it
    (ASCII, UTF-8)."""
    body = {k: v for k, v in meta.items() if k != "header_crc32"}
    return checksum.crc32(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


@dataclass
class Batch:
    """A batch read from disk: ``records`` (BATCH_DTYPE array), ``urls``
    (list of str) and ``canonicals`` (the ``rel=canonical`` URL of each
    record or None; read with the URLs)."""

    name: str
    path: Path
    records: np.ndarray
    urls: list
    meta: dict
    canonicals: list | None = None

    def __len__(self) -> int:
        return len(self.records)


def write_batch(directory, name: str, records: np.ndarray, urls,
                fingerprint: str | None = None, distance: int | None = None,
                online_duplicates: dict | None = None, canonicals=None) -> Path:
    """Write one batch atomically; returns the path of its ``.json`` header.

    ``fingerprint`` (``Fingerprinter.version``) names the recipe the values
    were made with; ``simdup merge`` refuses to mix recipes. ``distance``: the
    crawl's SIMDUP_DISTANCE (``simdup merge``'s default). ``online_duplicates``:
    ``{distance: count}`` of the records the crawl's online index found a
    near-duplicate for (``simdup stats``). ``canonicals``: the
    ``rel=canonical`` URL of each record, or None (written to ``B.canonical``
    when any record has one)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    records = np.ascontiguousarray(records)
    if records.dtype != BATCH_DTYPE:
        raise TypeError(f"records must have dtype {BATCH_DTYPE}, got {records.dtype}")
    urls = [escape_url(u) for u in urls]
    if len(urls) != len(records):
        raise ValueError(f"{len(urls)} URLs for {len(records)} records")
    npy_path = directory / f"{name}.npy"
    with atomic_write(npy_path) as handle:
        np.save(handle, records, allow_pickle=False)
    url_bytes = "".join(u + "\n" for u in urls).encode("utf-8", "surrogateescape")
    urls_path = directory / f"{name}.urls"
    with atomic_write(urls_path) as handle:
        handle.write(url_bytes)
    canonical_bytes = None
    if canonicals is not None and any(canonicals):
        canonicals = [escape_url(c) if c else "" for c in canonicals]
        if len(canonicals) != len(records):
            raise ValueError(f"{len(canonicals)} canonical URLs for {len(records)} records")
        canonical_bytes = "".join(c + "\n" for c in canonicals).encode("utf-8", "surrogateescape")
        with atomic_write(directory / f"{name}.canonical") as handle:
            handle.write(canonical_bytes)
    meta = {
        "format": FORMAT,
        "version": VERSION,
        "count": int(len(records)),
        "first_id": int(records["id"][0]) if len(records) else 0,
        "header_bits": HEADER_BITS,
        "dtype": BATCH_DTYPE.descr,
        "npy_bytes": npy_path.stat().st_size,
        "npy_crc32": crc32_file(npy_path),
        "urls_bytes": len(url_bytes),
        "urls_crc32": checksum.crc32(url_bytes),
        "sketch_bytes": SKETCH_BYTES,
        "created": time.time(),
    }
    if fingerprint:
        meta["fingerprint"] = fingerprint
    if distance is not None:
        meta["distance"] = int(distance)
    if online_duplicates is not None:
        meta["online_duplicates"] = {str(int(d)): int(c)
                                     for d, c in sorted(online_duplicates.items())}
    if canonical_bytes is not None:
        meta["canonical_bytes"] = len(canonical_bytes)
        meta["canonical_crc32"] = checksum.crc32(canonical_bytes)
    meta["header_crc32"] = header_crc32(meta)
    json_path = directory / f"{name}.json"
    atomic_write_json(json_path, meta)
    return json_path


def read_meta(json_path) -> dict:
    """Read and validate a batch header (not the data): a version-3 header
    must match its ``header_crc32``."""
    json_path = Path(json_path)
    raw = read_json(json_path, "batch header")
    check_version(json_path, raw, FORMAT, READ_VERSIONS[0], "batch")
    version = raw.get("version")
    if version not in READ_VERSIONS or isinstance(version, bool):
        version = VERSION       # read_header names what is wrong
    meta = read_header(json_path, "batch header", FORMAT, version,
                       ("count", "npy_bytes", "npy_crc32", "urls_bytes", "urls_crc32"))
    # every header that has a checksum is checked (a version changed to 2 too)
    if version >= 3 or "header_crc32" in meta:
        if not is_count(meta.get("header_crc32")):
            raise CorruptFileError(json_path, "batch header field 'header_crc32' is missing "
                                   "or invalid")
        if header_crc32(meta) != meta["header_crc32"]:
            raise CorruptFileError(json_path, "batch header checksum mismatch (corrupt file)")
    if ("canonical_bytes" in meta or "canonical_crc32" in meta) and not (
            is_count(meta.get("canonical_bytes")) and is_count(meta.get("canonical_crc32"))):
        raise CorruptFileError(json_path, "batch header fields 'canonical_*' are invalid")
    if "first_id" in meta and not is_count(meta["first_id"]):
        raise CorruptFileError(json_path, "batch header field 'first_id' is invalid")
    if meta.get("fingerprint") is not None and not isinstance(meta["fingerprint"], str):
        raise CorruptFileError(json_path, "batch header field 'fingerprint' is invalid")
    return meta


def read_batch(json_path, with_urls: bool = True, verify: bool = True, out=None) -> Batch:
    """Load a batch, checking lengths and checksums. Raises CorruptFileError naming the bad file.

    ``out``: a BATCH_DTYPE array of the batch's ``count`` records to read the
    data into (a merge reads its batches into one array, without a copy);
    the batch's ``records`` is then ``out``.
    """
    json_path = Path(json_path)
    meta = read_meta(json_path)
    name = json_path.name[: -len(".json")]
    npy_path = json_path.with_name(name + ".npy")
    with open_regular(npy_path, "batch data file", buffering=0) as handle:
        _check_size(npy_path, handle, meta["npy_bytes"], "batch data is")
        if out is not None and (out.dtype != BATCH_DTYPE or out.shape != (meta["count"],)):
            raise ValueError(f"out must be {meta['count']} records of {BATCH_DTYPE}")
        records = _read_records(handle, npy_path, meta, verify, out)
    batch = Batch(name, json_path, records, [], meta)
    if with_urls:
        batch.urls = read_urls(batch, verify=verify)
        batch.canonicals = read_canonicals(batch, verify=verify)
    return batch


def verify_batch(json_path) -> dict:
    """Check a batch as :func:`read_batch` does (header, lengths, the ``.npy``
    header, both CRC-32s, the URL count) without loading it: one read of its
    files, in blocks. Returns its header; a CorruptFileError names the bad file."""
    json_path = Path(json_path)
    meta = read_meta(json_path)
    npy_path = json_path.with_suffix(".npy")
    with open_regular(npy_path, "batch data file", buffering=0) as handle:
        _check_size(npy_path, handle, meta["npy_bytes"], "batch data is")
        try:
            problem = _npy_problem(handle, meta)
            handle.seek(0)
            crc = crc32_stream(handle)
        except OSError as exc:
            raise CorruptFileError(npy_path, f"cannot be read ({exc.strerror or exc})") from None
    if crc != meta["npy_crc32"]:
        raise CorruptFileError(npy_path, "batch data checksum mismatch (corrupt file)")
    if problem is not None:
        raise CorruptFileError(npy_path, problem)
    urls_path = json_path.with_suffix(".urls")
    with open_regular(urls_path, "batch URL file") as handle:
        _check_size(urls_path, handle, meta["urls_bytes"], "URL file is")
        crc, lines, last = 0, 0, b"\n"
        try:
            while chunk := handle.read(1 << 22):
                crc = checksum.crc32(chunk, crc)
                lines += chunk.count(b"\n")
                last = chunk[-1:]
        except OSError as exc:
            raise CorruptFileError(urls_path, f"cannot be read ({exc.strerror or exc})") from None
    if crc != meta["urls_crc32"]:
        raise CorruptFileError(urls_path, "URL file checksum mismatch (corrupt file)")
    lines += last != b"\n"         # a last URL without its newline (as read_urls counts)
    if lines != meta["count"]:
        raise CorruptFileError(urls_path, f"{lines} URLs for {meta['count']} records")
    if "canonical_bytes" in meta:
        _read_lines(json_path.with_suffix(".canonical"), meta, "canonical", "canonical URL file",
                    "canonical URLs", verify=True)
    return meta


def _check_size(path: Path, handle, size: int, what: str) -> None:
    have = os.fstat(handle.fileno()).st_size
    if have != size:
        raise CorruptFileError(path, f"{what} {have} bytes, header says {size} "
                               "(truncated or overwritten)")


def _npy_problem(handle, meta: dict) -> str | None:
    """What is wrong with the ``.npy`` header of a batch's data (None: it
    describes the batch's records); ``handle`` is left at the data."""
    count = meta["count"]
    try:
        version = np.lib.format.read_magic(handle)
        if version not in ((1, 0), (2, 0), (3, 0)):
            raise ValueError(f"unknown .npy format version {version}")
        read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                       else np.lib.format.read_array_header_2_0)
        shape, fortran, dtype = read_header(handle)
    except Exception as exc:  # noqa: BLE001 - any parse failure is corruption
        return f"not a readable .npy file ({exc})"
    if dtype != BATCH_DTYPE or shape != (count,):
        return f"unexpected array {dtype} {shape}, expected {count} records of {BATCH_DTYPE}"
    if fortran:
        return "unexpected Fortran-order array"
    if handle.tell() + count * BATCH_DTYPE.itemsize != meta["npy_bytes"]:
        return "batch data length does not match its .npy header"
    return None


def _read_records(handle, npy_path: Path, meta: dict, verify: bool, out) -> np.ndarray:
    """The records of a batch's ``.npy`` file (open in ``handle``), read
    once: the checksum is taken over the bytes as they are read into the array."""
    count = meta["count"]
    try:
        problem = _npy_problem(handle, meta)
        if problem is not None:
            # a damaged file is reported as such, whatever part of it broke
            if verify and crc32_file(npy_path) != meta["npy_crc32"]:
                raise CorruptFileError(npy_path, "batch data checksum mismatch (corrupt file)")
            raise CorruptFileError(npy_path, problem)
        start = handle.tell()
        handle.seek(0)
        crc = checksum.crc32(handle.read(start))
        records = np.empty(count, dtype=BATCH_DTYPE) if out is None else out
        view = memoryview(records).cast("B")
        got = 0
        while got < len(view):
            n = handle.readinto(view[got:])
            if not n:
                raise CorruptFileError(npy_path, "batch data ends early (truncated)")
            got += n
    except OSError as exc:
        raise CorruptFileError(npy_path, f"cannot be read ({exc.strerror or exc})") from None
    if verify and checksum.crc32(view, crc) != meta["npy_crc32"]:
        raise CorruptFileError(npy_path, "batch data checksum mismatch (corrupt file)")
    return records


def read_urls(batch: Batch, verify: bool = True) -> list[str]:
    """The URLs of a batch (from its ``.urls`` file), checked against its header."""
    return _read_lines(batch.path.with_name(batch.name + ".urls"), batch.meta, "urls",
                       "URL file", "URLs", verify)


def read_canonicals(batch: Batch, verify: bool = True) -> list[str | None]:
    """The ``rel=canonical`` URL of each record of a batch (None: it declared
    none, or the batch has no ``.canonical`` file: version 2, or none declared)."""
    if "canonical_bytes" not in batch.meta:
        return [None] * batch.meta["count"]
    lines = _read_lines(batch.path.with_name(batch.name + ".canonical"), batch.meta, "canonical",
                        "canonical URL file", "canonical URLs", verify)
    return [line or None for line in lines]


def _read_lines(path: Path, meta: dict, field: str, kind: str, what: str,
                verify: bool) -> list[str]:
    """The lines of a batch's ``.urls`` or ``.canonical`` file, checked
    against the header's ``<field>_bytes`` and ``<field>_crc32``."""
    size = meta[f"{field}_bytes"]
    with open_regular(path, f"batch {kind}") as handle:
        _check_size(path, handle, size, f"{kind} is")
        try:
            data = handle.read()
        except OSError as exc:
            raise CorruptFileError(path, f"cannot be read ({exc.strerror or exc})") from None
    if len(data) != size:     # changed while it was read
        raise CorruptFileError(path, f"{kind} is {len(data)} bytes, header says "
                               f"{size} (truncated or overwritten)")
    if verify and checksum.crc32(data) != meta[f"{field}_crc32"]:
        raise CorruptFileError(path, f"{kind} checksum mismatch (corrupt file)")
    lines = data.decode("utf-8", "surrogateescape").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) != meta["count"]:
        raise CorruptFileError(path, f"{len(lines)} {what} for {meta['count']} records")
    return lines


def list_batches(directory) -> list[Path]:
    """Committed batch headers in ``directory``, oldest first (by name)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.glob("batch-*.json") if not p.name.startswith("."))


def unfinished_batches(directory) -> list[Path]:
    """Data files whose header was never written (a flush interrupted by a crash)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    # (a header that is a dangling symlink is a damaged batch, not an unfinished one)
    return [p for p in sorted(directory.glob("batch-*.npy"))
            if not os.path.lexists(p.with_suffix(".json"))]
