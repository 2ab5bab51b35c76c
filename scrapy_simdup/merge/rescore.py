"""Re-scoring: the pairs and clusters of crawls at another threshold, from their batch files alone.

``simdup rescore`` and ``simdup report`` match every batch of the given
directories as a fresh ``simdup merge`` would, into a throwaway collection
in a temporary directory: the crawls' own collection (``DIR/collection``)
is never opened, and the pairs are those of a fresh merge at that threshold
by construction. With ``best=True`` a second pass (PSM-A, every earlier
candidate whose sketch agrees in at least :data:`FLOOR_BINS` bins) gives
each page its *best earlier match*: the most similar earlier page among
its candidates, with its distance. A page is a near-duplicate at a
threshold ``S`` exactly when its best earlier match has a similarity of at
least ``S`` (PSM-F stops at the first match; a match exists when the best
one passes), so the distribution of the best matches shows where every
threshold above the floor cuts.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from scrapy_simdup.fingerprint.sketch import matches_needed, similarity
from scrapy_simdup.merge.collection import H_DTYPE, PAIR_DTYPE, Collection
from scrapy_simdup.merge.report import MergeSummary
from scrapy_simdup.merge.run import DEFAULT_CHUNK, merge
from scrapy_simdup.storage.batchfile import read_batch, read_canonicals

#: equal sketch bins of the weakest match the best-match pass keeps (an
#: estimated similarity of 0.09; unrelated pages agree in 3 of 32 bins with
#: probability 3e-4)
FLOOR_BINS = 3


class UrlTable:
    """The URLs of a re-scored collection by id, in memory (what
    :func:`~scrapy_simdup.merge.report.write_pairs` and ``write_clusters``
    read through ``urls(ids)``)."""

    def __init__(self, urls: list[str]):
        self.all = urls

    def urls(self, ids) -> list[str]:
        return [self.all[i] for i in np.asarray(ids, dtype=np.int64).tolist()]

    def __len__(self) -> int:
        return len(self.all)


@dataclass
class Rescored:
    """What :func:`rescore` found. Ids number the fingerprints in merge order."""

    #: the merge at the threshold (``pairs_array`` holds its pairs)
    summary: MergeSummary
    #: PAIR_DTYPE: ``id`` matched ``duplicate_of`` (an earlier id)
    pairs: np.ndarray
    urls: UrlTable
    #: ``(batch header path, first id, count)`` of every batch, in id order
    batches: list = field(default_factory=list)
    #: H_DTYPE records by id (both keys and the sketch of every page)
    records: np.ndarray | None = field(default=None, repr=False)
    #: per id: the equal sketch bins of its best earlier match (-1: none at
    #: the floor), and that match's distance (-1: none); None without ``best``
    best_matches: np.ndarray | None = None
    best_distance: np.ndarray | None = None
    #: the similarity of :data:`FLOOR_BINS` bins (or fewer, for a lower threshold)
    floor_similarity: float | None = None
    best_seconds: float = 0.0
    #: per id: the ``rel=canonical`` URL the page declared (None: none);
    #: None when no batch carries any
    canonicals: list | None = None

    @property
    def count(self) -> int:
        return len(self.urls)


def _read_urls(coll: Collection) -> list[str]:
    """Every URL of ``coll`` in id order (one read of its URL files)."""
    if coll.count == 0:
        return []
    ends = np.fromfile(coll.path / "urls.idx", dtype="<i8", count=coll.count)
    with open(coll.path / "urls.bin", "rb") as handle:
        data = handle.read(int(ends[-1]))
    starts = np.concatenate(([0], ends[:-1])).tolist()
    return [data[s:e].decode("utf-8", "surrogateescape") for s, e in zip(starts, ends.tolist())]


def _batches_in_order(coll: Collection) -> list:
    """``(header path, first id, count)`` of the batches merged into ``coll``:
    its ``merged`` entries are recorded in commit order, and a group's
    batches in the order their fingerprints were numbered."""
    out, start = [], 0
    for entry in coll.meta["merged"].values():
        out.append((Path(entry["path"]), start, int(entry["count"])))
        start += int(entry["count"])
    return out


def _canonicals(batches, n: int, verify: bool) -> list | None:
    """The declared canonical URL of each id, from the batches' files (None
    when no batch has any)."""
    out: list = [None] * n
    found = False
    for path, first, count in batches:
        try:
            batch = read_batch(path, with_urls=False, verify=verify)
            canonicals = read_canonicals(batch, verify=verify)
        except (OSError, ValueError):   # moved since the merge read it: shown without
            continue
        for i, canonical in enumerate(canonicals[:count]):
            if canonical:
                out[first + i] = canonical
                found = True
    return out if found else None


def _records_by_id(coll: Collection) -> np.ndarray:
    """The records of ``coll`` (H.bin) in id order."""
    stored = np.fromfile(coll.path / "H.bin", dtype=H_DTYPE, count=coll.count)
    out = np.empty_like(stored)
    out[stored["id"]] = stored
    return out


def best_earlier(pairs: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(matches, distance)`` per id in ``[0, n)``: the most equal bins of
    its pairs (then the smallest distance), -1 where it has none."""
    matches = np.full(n, -1, dtype=np.int16)
    dist = np.full(n, -1, dtype=np.int16)
    if len(pairs):
        # sorted by id, then matches, then smaller distance first: the last of
        # each id is its best
        order = np.lexsort((-pairs["distance"].astype(np.int16), pairs["matches"], pairs["id"]))
        ids = pairs["id"][order]
        last = np.flatnonzero(np.concatenate((ids[1:] != ids[:-1], [True])))
        matches[ids[last]] = pairs["matches"][order][last]
        dist[ids[last]] = pairs["distance"][order][last]
    return matches, dist


def rescore(dirs, *, distance: int, min_similarity: float, probes: int | None = None,
            recall: float | None = None, first: bool = True, exact: bool = False,
            chunk_size: int = DEFAULT_CHUNK, verify: bool = True, skip_damaged: bool = False,
            best: bool = False, progress: bool | None = None, tmpdir=None) -> Rescored:
    """Match every batch of ``dirs`` at ``distance``/``min_similarity`` as a
    fresh merge does (same options as :func:`~scrapy_simdup.merge.merge`),
    in a temporary collection (under ``tmpdir``, default the system's) that
    is removed afterwards; see the module docstring for ``best``."""
    with tempfile.TemporaryDirectory(prefix="simdup-rescore-", dir=tmpdir) as tmp:
        summary = merge(dirs, Path(tmp) / "threshold", distance=distance,
                        min_similarity=min_similarity, probes=probes, recall=recall,
                        first=first, exact=exact, chunk_size=chunk_size, verify=verify,
                        skip_damaged=skip_damaged, progress=progress)
        coll = Collection(Path(tmp) / "threshold")
        pairs = coll.pairs() if summary.pairs_array is None else summary.pairs_array
        out = Rescored(summary, np.ascontiguousarray(pairs, dtype=PAIR_DTYPE),
                       UrlTable(_read_urls(coll)), _batches_in_order(coll),
                       _records_by_id(coll))
        out.canonicals = _canonicals(out.batches, out.count, verify)
        if best:
            floor = min(FLOOR_BINS, max(1, matches_needed(min_similarity)))
            out.floor_similarity = float(similarity(floor))
            # (the bins' similarity rounds up to the same count of bins)
            wide = merge(dirs, Path(tmp) / "best", distance=distance,
                         min_similarity=out.floor_similarity, probes=probes, recall=recall,
                         first=False, exact=exact, chunk_size=chunk_size, verify=verify,
                         skip_damaged=skip_damaged, progress=progress)
            out.best_seconds = wide.seconds
            out.best_matches, out.best_distance = best_earlier(wide.pairs_array, out.count)
    return out
