"""Starting afresh (``SIMDUP_RESET``): removing a crawl's saved index.

Only the index snapshot (:mod:`scrapy_simdup.index.snapshot`: ``index.json``,
``index.values``, ``index.keys``) is removed: the batch files are the
crawl's record for ``simdup merge`` and stay, as does the IDF table they
were weighed with (so that the new batches merge with the old ones).
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from scrapy_simdup.exceptions import CorruptFileError
from scrapy_simdup.index.snapshot import HEADER_FILE
from scrapy_simdup.storage.atomic import fsync_dir, is_count, read_json

__all__ = ["reset_snapshot", "SNAPSHOT_FILES"]

#: the snapshot's files; the commit record first, so that an interrupted
#: reset leaves no header naming data that is gone
SNAPSHOT_FILES = (HEADER_FILE, "index.values", "index.keys")


def reset_snapshot(directory) -> tuple[int | None, list[str]]:
    """Remove the index snapshot of ``directory``; returns how many
    fingerprints it held (None: its header was damaged) and the files removed."""
    directory = Path(directory)
    count: int | None = 0
    if os.path.lexists(directory / HEADER_FILE):
        try:
            count = read_json(directory / HEADER_FILE, "index snapshot header").get("count")
        except CorruptFileError:
            count = None
        if not is_count(count):
            count = None
    removed = []
    for name in SNAPSHOT_FILES:
        path = directory / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.unlink(path)
        else:
            continue
        removed.append(name)
    if removed:
        fsync_dir(directory)
    return count, removed
