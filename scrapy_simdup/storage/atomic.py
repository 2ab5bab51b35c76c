"""Crash-safe file utilities: atomic replace, fsync, checksums.

Every file scrapy-simdup writes for later (batch files, the collection, the
index snapshot) goes through here, so that a ``kill -9`` at any instant leaves
either the old complete file or the new complete file, never a torn one:
write to a temporary file in the same directory, flush + fsync it, rename it
over the target with ``os.replace`` (atomic on POSIX), then fsync the
directory so the rename itself is durable. The file gets the mode any file
created by ``open()`` gets (``0o666`` less the umask), not ``mkstemp``'s
``0o600``.

Files are read through :func:`open_regular`: a directory, a FIFO, a device
or a dangling symlink where a file should be is a :class:`CorruptFileError`
saying so, like any other damage (and a FIFO does not hang the reader).
"""
from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path

from scrapy_simdup._ext import checksum
from scrapy_simdup.exceptions import CorruptFileError, DirectoryBusyError


def _proc_umask() -> int | None:
    """The umask from /proc/self/status (Linux 4.7+), read without changing
    it (``os.umask`` sets it to read it: not safe with other threads)."""
    try:
        with open("/proc/self/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return None


_IMPORT_UMASK = _proc_umask()
if _IMPORT_UMASK is None:   # no /proc: set and restore it once, at import
    _IMPORT_UMASK = os.umask(0o022)
    os.umask(_IMPORT_UMASK)


def new_file_mode() -> int:
    """The mode ``open()`` gives a new file: ``0o666`` less the umask (the
    current one where /proc says it, else the one at import)."""
    umask = _proc_umask()
    return 0o666 & ~(_IMPORT_UMASK if umask is None else umask)


def file_type_name(mode: int) -> str:
    """``"a directory"``, ``"a FIFO"``, ... for an ``st_mode``."""
    for test, name in ((stat.S_ISREG, "a file"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device")):
        if test(mode):
            return name
    return "a special file"  # pragma: no cover


def _article(kind: str) -> str:
    return f"an {kind}" if kind[:1].lower() in "aeiou" else f"a {kind}"


def _missing(path: Path, kind: str) -> str:
    if os.path.islink(path):
        return f"{kind} is a dangling symlink (to {os.readlink(path)})"
    return f"{kind} is missing"


def check_regular(path, kind: str = "file") -> os.stat_result:
    """``os.stat(path)`` of a regular file (through symlinks); a missing file,
    a dangling symlink, a directory, a FIFO or a device is a
    :class:`CorruptFileError` naming ``path`` and saying which."""
    path = Path(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise CorruptFileError(path, _missing(path, kind)) from None
    except OSError as exc:
        raise CorruptFileError(path, f"{kind} cannot be read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(st.st_mode):
        raise CorruptFileError(path, f"is {file_type_name(st.st_mode)}, not {_article(kind)}")
    return st


def open_regular(path, kind: str = "file", buffering: int = -1):
    """Open ``path`` for reading (binary) if it is a regular file; otherwise
    the :class:`CorruptFileError` of :func:`check_regular`. Opened without
    blocking, so a FIFO in its place is reported, not waited on."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise CorruptFileError(path, _missing(path, kind)) from None
    except OSError as exc:
        check_regular(path, kind)     # a socket (ENXIO) is named as one
        raise CorruptFileError(path, f"{kind} cannot be read ({exc.strerror or exc})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise CorruptFileError(path, f"is {file_type_name(mode)}, not {_article(kind)}")
        return os.fdopen(fd, "rb", buffering=buffering)
    except BaseException:
        os.close(fd)
        raise


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
            os.fchmod(handle.fileno(), new_file_mode())
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
    """Read a JSON object; a missing, empty or unparsable file, no file (a
    directory, ...: :func:`open_regular`) or any other OSError is a
    CorruptFileError naming ``path``."""
    path = Path(path)
    try:
        with open_regular(path, kind) as handle:
            data = handle.read()
    except OSError as exc:      # what open_regular does not name: a read error, ...
        raise CorruptFileError(path, f"{kind} cannot be read ({exc.strerror or exc})") from None
    try:
        obj = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptFileError(path, f"{kind} is not valid JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise CorruptFileError(path, f"{kind} is not a JSON object")
    return obj


def is_count(value) -> bool:
    """A JSON integer >= 0 (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def read_header(path, kind: str, format: str, version: int, int_fields=()) -> dict:
    """:func:`read_json` of a file header whose ``format`` and ``version`` must
    match and whose ``int_fields`` must be integers >= 0; a CorruptFileError
    naming ``path`` and what is wrong otherwise."""
    meta = read_json(path, kind)
    if meta.get("format") != format:
        raise CorruptFileError(path, f"not a {format} header (format={meta.get('format')!r})")
    if meta.get("version") != version:
        raise CorruptFileError(path, f"{format} version {meta.get('version')!r} is not supported "
                               f"(this scrapy-simdup reads version {version})")
    for key in int_fields:
        if not is_count(meta.get(key)):
            raise CorruptFileError(path, f"{kind} field {key!r} is missing or invalid")
    return meta


def crc32_stream(handle, length: int | None = None, crc: int = 0, block: int = 1 << 22) -> int:
    """CRC-32 (continuing ``crc``) of the next ``length`` bytes of an open
    binary file (to its end if None)."""
    remaining = length
    while remaining is None or remaining > 0:
        chunk = handle.read(block if remaining is None else min(block, remaining))
        if not chunk:
            break
        crc = checksum.crc32(chunk, crc)
        if remaining is not None:
            remaining -= len(chunk)
    return crc


def crc32_file(path, length: int | None = None, block: int = 1 << 22) -> int:
    """CRC-32 of the first ``length`` bytes of ``path`` (all of it if None)."""
    with open(path, "rb") as handle:
        return crc32_stream(handle, length, block=block)


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
    path = directory / name
    try:
        # not through a symlink: the lock file is truncated and written
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NONBLOCK
                     | os.O_NOFOLLOW, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.EINVAL, "is a symbolic link, not a lock file", str(path)) from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):      # (a directory fails in os.open)
        os.close(fd)
        raise OSError(errno.EINVAL, f"is {file_type_name(mode)}, not a lock file", str(path))
    handle = open(fd, "a+")
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
