"""A crawl's directory (``SIMDUP_DIR``): preparing it, the crawl's lock on it,
where each namespace keeps its files, and moving damaged state aside."""
from __future__ import annotations

import os
import time
from pathlib import Path

from scrapy_simdup.exceptions import DirectoryBusyError
from scrapy_simdup.storage.atomic import fsync_dir, lock_directory


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


def move_state_aside(directory: Path, patterns) -> list[str]:
    """Move what the glob ``patterns`` match in ``directory`` into a new
    ``corrupt-<time>/`` subdirectory; returns what was moved."""
    target = directory / f"corrupt-{time.strftime('%Y%m%dT%H%M%S')}"
    target.mkdir()
    moved = []
    for pattern in patterns:
        for path in sorted(directory.glob(pattern)):
            os.replace(path, target / path.name)
            moved.append(path.name)
    fsync_dir(target)
    fsync_dir(directory)
    return [f"{target}/: {', '.join(moved)}"]
