"""Crash-safe file utilities: atomic replace, fsync, checksums.

Every file scrapy-simdup writes for later (batch files, the collection, the
index snapshot) goes through here, so that a ``kill -9`` at any instant leaves
either the old complete file or the new complete file, never a torn one:
write to a temporary file in the same directory, flush + fsync it, rename it
over the target with ``os.replace`` (atomic on POSIX), then fsync the
directory so the rename itself is durable.
"""
from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

from zlib import crc32
from scrapy_simdup.exceptions import CorruptFileError, DirectoryBusyError


def fsync_dir(directory) -> None:
    """fsync a directory so a rename or a new file in it is durable."""
    try:
        fd = os.open(str(directory), os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


@contextmanager
def atomic_write(path, mode: str = "wb"):
    """Open a temporary file beside ``path``; on success fsync and rename it over ``path``.

    On an exception the temporary file is removed and ``path`` is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=str(path.parent))
    try:
        with os.fdopen(fd, mode) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(path.parent)


def atomic_write_bytes(path, data: bytes) -> None:
    with atomic_write(path, "wb") as handle:
        handle.write(data)


def atomic_write_json(path, obj) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode())


def read_json(path, kind: str = "file") -> dict:
    """Read a JSON object; a missing, empty or unparsable file is a CorruptFileError."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CorruptFileError(path, f"{kind} is missing") from None
    try:
        obj = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptFileError(path, f"{kind} is not valid JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise CorruptFileError(path, f"{kind} is not a JSON object")
    return obj


def crc32_file(path, length: int | None = None, block: int = 1 << 22) -> int:
    """CRC-32 of the first ``length`` bytes of ``path`` (all of it if None)."""
    crc = 0
    remaining = length
    with open(path, "rb") as handle:
        while remaining is None or remaining > 0:
            size = block if remaining is None else min(block, remaining)
            chunk = handle.read(size)
            if not chunk:
                break
            crc = crc32(chunk, crc)
            if remaining is not None:
                remaining -= len(chunk)
    return crc


def remove_stale_temporaries(directory) -> int:
    """Delete ``.*.tmp`` files left by a process killed mid-write; return how many."""
    removed = 0
    directory = Path(directory)
    if not directory.is_dir():
        return 0
    for tmp in directory.glob(".*.tmp"):
        try:
            tmp.unlink()
            removed += 1
        except OSError:
            pass
    return removed


def lock_directory(directory, name: str = ".lock"):
    """Take the exclusive lock ``directory/name`` (an advisory ``flock``, freed
    by the kernel when the process ends, also on ``kill -9``); returns the
    open handle, which holds it until closed. Raises
    :class:`DirectoryBusyError` (its ``holder`` says which process) when
    another process has it."""
    import fcntl  # noqa: PLC0415 (POSIX only, like the rest of the locking)

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    handle = open(directory / name, "a+")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read(200).strip() or "another process"
            raise DirectoryBusyError(f"{directory} is locked by {holder}", holder) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"process {os.getpid()}\n")   # who holds it, for the error above
        handle.flush()
    except BaseException:
        handle.close()
        raise
    return handle
