"""``simdup stats``: what the crawl directories and the collection hold."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from scrapy_simdup.exceptions import CorruptFileError
from scrapy_simdup.index.snapshot import HEADER_FILE, verify_snapshot
from scrapy_simdup.merge.collection import (
    SIDE_FILES,
    Collection,
    check_collection_path,
    is_merged,
    merged_before,
)
from scrapy_simdup.merge.report import clusters, n_distinct
from scrapy_simdup.storage.atomic import read_json
from scrapy_simdup.storage.batchfile import list_batches, read_meta, unfinished_batches, verify_batch

_VERIFY_CHUNK = 1 << 20     # records of H.bin read at a time by the check


def _add_damaged(entry: dict, header: Path, exc: CorruptFileError, file=None) -> None:
    entry["corrupt"].append(str(exc))
    entry["damaged"].append({"batch": str(header), "file": str(file or exc.path),
                             "problem": exc.problem})


def stats(dirs, collection=None, verify: bool = True) -> dict:
    """What the directories and the collection hold (``simdup stats``).

    With ``verify`` every pending batch is checked as a merge would read it
    (lengths and checksums: one read of its files); each directory's
    ``damaged`` lists those a merge would refuse (``{"batch", "file",
    "problem"}``), left out of its batch counts, and the index snapshot is
    checked as a crawl restores it (``index_damaged``: ``{"file",
    "problem"}`` or None). ``corrupt`` says, in one line each, every damaged
    file (also a header damaged after its batch was merged, which is not
    counted as damaged). The collection's files are checked against the
    checksums of its header: a CorruptFileError naming the file."""
    dirs = [Path(d) for d in dirs]
    out: dict = {"directories": [], "collection": None}
    coll = None
    cpath = Path(collection) if collection is not None else (dirs[0] / "collection" if dirs else None)
    if cpath is not None:
        check_collection_path(cpath, "--collection" if collection is not None else None)
    if cpath is not None and os.path.lexists(cpath / "collection.json"):
        coll = Collection(cpath)
    for d in dirs:
        if not d.is_dir():
            raise ValueError(f"{d}: not a directory")
        entry = {"path": str(d), "batches": 0, "fingerprints": 0, "pending_batches": 0,
                 "pending_fingerprints": 0, "unfinished": [], "corrupt": [], "damaged": [],
                 "online_duplicates": 0, "online_histogram": {},
                 "bytes": sum(p.stat().st_size for p in d.rglob("*") if p.is_file())}
        merged = coll.meta["merged"] if coll is not None else {}
        for p in list_batches(d):
            try:
                meta = read_meta(p)
            except CorruptFileError as exc:
                if merged_before(p, merged):    # its data is in the collection
                    entry["corrupt"].append(str(exc))
                else:
                    _add_damaged(entry, p, exc)
                continue
            pending = not is_merged(p, meta, merged)
            parts = [p.with_suffix(".npy"), p.with_suffix(".urls")]
            if "canonical_bytes" in meta:
                parts.append(p.with_suffix(".canonical"))
            missing = [q.name for q in parts if not os.path.lexists(q)]
            if missing:
                exc = CorruptFileError(p, f"batch data missing ({', '.join(missing)})")
                if pending:
                    _add_damaged(entry, p, exc, p.with_name(missing[0]))
                else:
                    entry["corrupt"].append(str(exc))
                continue
            if pending and verify:
                try:
                    verify_batch(p)
                except CorruptFileError as exc:
                    _add_damaged(entry, p, exc)
                    continue
            entry["batches"] += 1
            entry["fingerprints"] += meta["count"]
            online = meta.get("online_duplicates")
            if isinstance(online, dict):      # batches written before it was recorded: none
                hist = entry["online_histogram"]
                for dist, count in online.items():
                    hist[str(dist)] = hist.get(str(dist), 0) + int(count)
            if pending:
                entry["pending_batches"] += 1
                entry["pending_fingerprints"] += meta["count"]
        entry["unfinished"] = [str(p) for p in unfinished_batches(d)]
        index_meta = d / HEADER_FILE
        entry["index_damaged"] = None
        if os.path.lexists(index_meta):
            try:
                entry["index"] = read_json(index_meta, "index snapshot header")
                if verify:
                    verify_snapshot(d)
            except CorruptFileError as exc:
                entry["corrupt"].append(str(exc))
                entry["index_damaged"] = {"file": str(exc.path), "problem": exc.problem}
        entry["online_histogram"] = dict(sorted(entry["online_histogram"].items(),
                                                key=lambda kv: int(kv[0])))
        entry["online_duplicates"] = sum(entry["online_histogram"].values())
        out["directories"].append(entry)
    if coll is not None:
        # every collection file, as a merge would (H.bin run by run); the
        # pairs, read below, always
        coll.verify_files(SIDE_FILES if verify else ("pairs.bin",))
        if verify:
            for _ in coll.chunks(_VERIFY_CHUNK):
                pass
        pairs = coll.pairs()
        hist = np.bincount(pairs["distance"]) if len(pairs) else np.zeros(0, dtype=np.int64)
        found = clusters(coll, pairs)     # (report.CLUSTER_DEFINITION)
        out["collection"] = {
            "path": str(coll.path), "count": coll.count, "runs": len(coll.meta["runs"]),
            "merged_batches": len(coll.meta["merged"]),
            "bytes": sum(p.stat().st_size for p in coll.path.iterdir() if p.is_file()),
            "pairs": int(len(pairs)), "duplicates": n_distinct(pairs["id"]),
            "clusters": len(found),
            "distance_histogram": {str(i): int(c) for i, c in enumerate(hist) if c},
        }
    return out
