"""Share directories of a merge on Dask: where a batch's build tasks write
the arrays every worker maps (see :mod:`~scrapy_simdup.merge.distributed`).

Each is ``<root>/.simdup-scan-XXXXXXXX`` with a lock file that its merge
holds while the batch runs; a merge killed outright leaves its directory
behind, and the next one that looks in the same root removes those no
process holds.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import time
from pathlib import Path

#: share directories: ``<root>/.simdup-scan-XXXXXXXX``, each with a lock file
#: its merge holds while it runs
SHARE_PREFIX = ".simdup-scan-"
SHARE_LOCK = ".lock"
#: a share directory without its lock file is left alone this long (its
#: merge may be about to take the lock)
SHARE_GRACE_SECONDS = 600


def new_share_directory(root: Path) -> tuple[Path, int]:
    """A new share directory in ``root`` and the descriptor holding its lock."""
    directory = Path(tempfile.mkdtemp(prefix=SHARE_PREFIX, dir=root))
    fd = os.open(directory / SHARE_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return directory, fd


def sweep_stale(root: Path) -> None:
    """Remove the share directories in ``root`` that killed merges left (no
    process holds their lock): a merge killed outright cannot remove its
    own, and in ``/dev/shm`` they hold memory."""
    try:
        entries = [e for e in root.iterdir() if e.name.startswith(SHARE_PREFIX)]
    except OSError:
        return
    for entry in entries:
        if entry.is_symlink() or not entry.is_dir():
            continue
        if entry.name.endswith("-removed"):     # a removal cut short
            shutil.rmtree(entry, ignore_errors=True)
            continue
        try:
            fd = os.open(entry / SHARE_LOCK, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            try:
                young = time.time() - entry.stat().st_mtime < SHARE_GRACE_SECONDS
            except OSError:
                continue
            if not young:
                remove_directory(entry)
            continue
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue                # its merge is running
        finally:
            os.close(fd)
        remove_directory(entry)


def remove_directory(directory: Path) -> None:
    """Remove a share directory, renamed first: a cancelled build task may
    still be running, and can then no longer create files in it."""
    gone = directory.with_name(directory.name + "-removed")
    try:
        os.rename(directory, gone)
    except OSError:
        gone = directory
    shutil.rmtree(gone, ignore_errors=True)


def remove_share(directory: Path, fd: int) -> None:
    """Remove a merge's own share directory, then let its lock go."""
    try:
        remove_directory(directory)
    finally:
        os.close(fd)
