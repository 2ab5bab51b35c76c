"""Output files of the ``simdup`` commands: paths checked before a merge, written atomically.

An output (``--pairs``, ``--clusters``) is a path or an open text file. A
regular file is replaced atomically; a FIFO or a device is written directly;
``/dev/stdout``, ``/dev/stderr`` and ``/dev/fd/N`` go through the descriptor
this process already holds.
"""
from __future__ import annotations

import io
import os
import re
import stat
import sys
from contextlib import contextmanager
from pathlib import Path

from scrapy_simdup.storage.atomic import atomic_write

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
def open_output(target):
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
    with atomic_write(path, "wb") as raw:     # (a new file: the umask's mode)
        if st is not None:
            os.fchmod(raw.fileno(), stat.S_IMODE(st.st_mode))
        text = io.TextIOWrapper(raw, encoding="utf-8", newline="\n", write_through=False)
        try:
            yield text
            text.flush()
        finally:
            text.detach()


def check_output_path(target, option: str, collection=None, dirs=()) -> None:
    """Fail before merging, not after, when an output file cannot be written
    (or would land in the ``collection`` directory, over its own files, or
    inside one of the crawl directories ``dirs``, over a batch or the index
    snapshot)."""
    if target is None or hasattr(target, "write"):
        return
    path = Path(target)
    if _own_descriptor(target) is None:     # (stdout/stderr: written, never replaced)
        resolved = path.resolve()
        for d in dirs:
            d = Path(d).resolve()
            if resolved == d or d in resolved.parents:
                raise ValueError(f"{option} {path}: inside the crawl directory {d} being "
                                 f"merged, over its files; write it somewhere else")
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
