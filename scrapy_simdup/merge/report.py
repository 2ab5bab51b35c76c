"""What a batch merge reports: its summary, the ``--pairs`` and ``--clusters``
files and the duplicate clusters (union-find)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from scrapy_simdup.fingerprint.sketch import similarity
from scrapy_simdup.merge.collection import Collection
from scrapy_simdup.merge.output import open_output


def n_distinct(values: np.ndarray) -> int:
    """How many distinct values ``values`` holds."""
    if len(values) == 0:
        return 0
    if not np.all(values[1:] >= values[:-1]):     # (a merge's pairs come sorted)
        values = np.sort(values)
    return int(1 + np.count_nonzero(values[1:] != values[:-1]))


@dataclass
class MergeSummary:
    """What one ``merge()`` did (``simdup merge`` prints it; ``--json``: :meth:`as_dict`)."""

    method: str
    distance: int
    probes: int | None
    #: header bits of the PSM join (None: exact)
    header_bits: int | None = None
    #: the share of the near-duplicates an exact merge finds that this merge
    #: is expected to find (:func:`scrapy_simdup.merge.probes.expected_recall`;
    #: 1.0 exact, None where the model is not calibrated)
    expected_recall: float | None = None
    #: the estimated Jaccard similarity a candidate needed (0: keys alone)
    min_similarity: float = 0.0
    batches: int = 0
    fingerprints: int = 0
    collection_before: int = 0
    collection_after: int = 0
    chunks_scanned: int = 0
    pairs: int = 0
    duplicates: int = 0
    distance_histogram: dict = field(default_factory=dict)
    seconds: float = 0.0
    skipped_unfinished: list = field(default_factory=list)
    #: damaged pending batches left pending (``skip_damaged``):
    #: ``{"batch": header path, "file": the damaged file, "problem": ...}``
    damaged: list = field(default_factory=list)
    #: pairs committed by an earlier merge that never finished writing its
    #: --pairs file: written with this run's (--pairs) or still pending
    earlier_unreported_pairs: int = 0
    #: where the collection was scanned: None in-process, else the Dask cluster
    cluster: str | None = None
    pairs_array: np.ndarray | None = field(default=None, repr=False)

    @property
    def throughput(self) -> float:
        return self.fingerprints / self.seconds if self.seconds > 0 else float("inf")

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d.pop("pairs_array", None)
        d["throughput"] = round(self.throughput, 1) if self.seconds > 0 else None
        d["seconds"] = round(self.seconds, 3)
        return d


def write_pairs(coll: Collection, pairs: np.ndarray, target, revisits: bool = True) -> int:
    """JSON Lines ``{"url", "duplicate_of", "distance", "similarity",
    "revisit"}``, one per pair: ``distance`` the smaller of the two key
    distances, ``similarity`` the estimated Jaccard similarity of the two
    pages (from their equal sketch bins, 3 decimals), ``revisit`` whether
    both are the same URL (a page crawled again); ``revisits=False`` leaves
    those out. ``coll``: anything with ``urls(ids)``. Returns the lines written."""
    written = 0
    with open_output(target) as handle:
        step = 100_000
        for s in range(0, len(pairs), step):
            part = pairs[s:s + step]
            a = coll.urls(part["id"])
            b = coll.urls(part["duplicate_of"])
            sims = np.round(similarity(part["matches"]), 3).tolist()
            for u, v, d, sim in zip(a, b, part["distance"].tolist(), sims):
                if u == v and not revisits:
                    continue
                handle.write(json.dumps({"url": u, "duplicate_of": v, "distance": d,
                                         "similarity": sim, "revisit": u == v},
                                        ensure_ascii=False) + "\n")
                written += 1
    return written


def components(n_ids: np.ndarray, a: np.ndarray, b: np.ndarray) -> dict:
    """Union-find over pairs ``(a[i], b[i])``: {root: sorted members} for components of size >= 2."""
    parent: dict = {}

    def find(x):
        root = x
        while parent.get(root, root) != root:
            root = parent[root]
        while parent.get(x, x) != root:
            parent[x], x = root, parent[x]
        return root

    for x, y in zip(a.tolist(), b.tolist()):
        rx, ry = find(x), find(y)
        if rx != ry:
            if rx < ry:
                parent[ry] = rx
            else:
                parent[rx] = ry
    groups: dict = {}
    for x in parent:
        groups.setdefault(find(x), set()).add(x)
    for root in list(groups):
        groups[root].add(root)
    return {root: sorted(members) for root, members in groups.items()}


#: what a cluster is, as ``simdup stats``, ``--clusters`` and the report say it
CLUSTER_DEFINITION = ("a cluster is a connected group of near-duplicate pairs holding at "
                      "least two distinct URLs; a URL crawled more than once counts once, and "
                      "a page met again only under its own URL (a revisit) is no cluster")


def clusters(coll, pairs: np.ndarray) -> list[dict]:
    """The clusters of ``pairs`` (see :data:`CLUSTER_DEFINITION`), in the
    order of their earliest id: ``{"ids", "urls", "representative",
    "size"}``. A URL is listed once, at its earliest id (``ids`` holds those
    ids, ``urls`` their URLs); the representative is the earliest page;
    ``size`` is ``len(urls)``. ``coll``: anything with ``urls(ids)``."""
    if not len(pairs):
        return []
    groups = components(None, pairs["id"], pairs["duplicate_of"])
    roots = sorted(groups)
    every = [i for root in roots for i in groups[root]]
    url_of = dict(zip(every, coll.urls(every)))     # (one read for all)
    out = []
    for root in roots:
        first: dict = {}
        for i in groups[root]:
            first.setdefault(url_of[i], i)
        if len(first) < 2:
            continue
        out.append({"ids": list(first.values()), "urls": list(first),
                    "representative": next(iter(first)), "size": len(first)})
    return out


def write_clusters(coll: Collection, pairs: np.ndarray, target) -> int:
    """JSON Lines ``{"representative", "size", "urls"}`` per cluster (see
    :func:`clusters`); returns the clusters written."""
    found = clusters(coll, pairs)
    with open_output(target) as handle:
        for c in found:
            handle.write(json.dumps({"representative": c["representative"], "size": c["size"],
                                     "urls": c["urls"]}, ensure_ascii=False) + "\n")
    return len(found)
