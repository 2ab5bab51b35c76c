"""The numbers of a report, from the batch files and crawl records alone.

Three sources, all in the crawl directories:

* the *crawl records* (``crawl-*.json``, :mod:`~scrapy_simdup.storage.batchwriter`):
  what each crawl decided online (near-duplicates, revisits, pages skipped
  by reason); batches written without one (older versions, tools) are
  shown as such, with the online near-duplicates of their headers;
* a re-scoring at the report's threshold (:func:`~scrapy_simdup.merge.rescore.rescore`):
  the pairs and clusters a fresh ``simdup merge`` finds, PSM-F;
* each page's best earlier match (the re-scoring's ``best`` pass), for the
  distribution of similarities and distances the threshold cuts.
"""
from __future__ import annotations

import re
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import numpy as np

from scrapy_simdup.exceptions import CorruptFileError
from scrapy_simdup.fingerprint.sketch import SKETCH_BYTES, matches_needed, similarity
from scrapy_simdup.merge.report import CLUSTER_DEFINITION, clusters
from scrapy_simdup.merge.rescore import Rescored, rescore
from scrapy_simdup.storage.atomic import read_json
from scrapy_simdup.storage.batchfile import read_meta
from scrapy_simdup.storage.batchwriter import CRAWL_FORMAT, CRAWL_GLOB

#: rows of the host and URL-pattern tables, clusters shown, sample URLs per cluster
TOP_ROWS = 15
TOP_CLUSTERS = 10
SAMPLES = 8

_DIGITS = re.compile(r"\d+")
_ID_SEGMENT = re.compile(r"^(?=.*\d)[0-9a-zA-Z_-]{16,}$")
_HEX_RUN = re.compile(r"(?<![0-9a-zA-Z])(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{8,}(?![0-9a-zA-Z])")


@dataclass
class ReportData:
    """Everything :func:`~scrapy_simdup.report.page.render` shows (``as_dict``: JSON)."""

    dirs: list
    distance: int
    min_similarity: float
    #: equal sketch bins the threshold needs
    needed: int
    probes: int | None
    generated: float = field(default_factory=time.time)
    title: str = "scrapy-simdup report"
    #: one row per crawl (see :func:`_crawl_rows`), and their sums
    crawls: list = field(default_factory=list)
    totals: dict = field(default_factory=dict)
    #: pages whose best earlier match has ``i`` equal sketch bins (i = 0..32)
    best_hist: list = field(default_factory=list)
    #: pages with no earlier match of at least ``floor_bins`` bins
    no_match: int = 0
    floor_bins: int = 0
    #: best matches by distance: at or above the threshold / below it
    distance_near: list = field(default_factory=list)
    distance_below: list = field(default_factory=list)
    hosts: list = field(default_factory=list)
    patterns: list = field(default_factory=list)
    #: the largest clusters, and how many there are in all
    clusters: list = field(default_factory=list)
    n_clusters: int = 0
    clustered_pages: int = 0
    cluster_definition: str = CLUSTER_DEFINITION
    #: URLs met again (the most often first)
    revisited: list = field(default_factory=list)
    seconds: float = 0.0
    notes: list = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


def _crawl_records(directory: Path, notes: list) -> list[tuple[str, dict]]:
    out = []
    for path in sorted(directory.glob(CRAWL_GLOB)):
        try:
            record = read_json(path, "crawl record")
        except CorruptFileError as exc:
            notes.append(f"crawl record left out: {exc}")
            continue
        if record.get("format") != CRAWL_FORMAT or not isinstance(record.get("batches"), list):
            notes.append(f"crawl record left out: {path}: not a simdup crawl record")
            continue
        out.append((path.name, record))
    return out


def _count(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _crawl_rows(dirs: list[Path], res: Rescored, near: np.ndarray, revisit: np.ndarray,
                notes: list) -> list[dict]:
    """One row per crawl: ``dir``, ``crawl`` (its record's name, "" for
    batches without one), ``started``, ``closed``, ``batches``, ``checked``,
    ``online_near_duplicates``, ``online_revisits`` (None when unknown),
    ``skipped`` ({reason: pages}), and at the report's threshold
    ``near_duplicates`` and ``revisits``."""
    rows: dict = {}
    owner: dict = {}        # (dir, batch name) -> row key
    for d in dirs:
        for name, record in _crawl_records(d, notes):
            key = (str(d), name)
            skipped = record.get("skipped") if isinstance(record.get("skipped"), dict) else {}
            rows[key] = {"dir": str(d), "crawl": name, "started": record.get("started"),
                         "closed": bool(record.get("closed")), "batches": 0, "checked": 0,
                         "online_near_duplicates": _count(record.get("near_duplicates")),
                         "online_revisits": _count(record.get("revisits")),
                         "skipped": {str(k): _count(v) for k, v in skipped.items()},
                         "near_duplicates": 0, "revisits": 0}
            for batch in record["batches"]:
                owner[(str(d), str(batch))] = key
    for path, start, count in res.batches:
        d = str(next((x for x in dirs if path.parent.resolve() == x.resolve()), path.parent))
        key = owner.get((d, path.name[:-len(".json")]))
        if key is None:
            key = (d, "")
            if key not in rows:
                rows[key] = {"dir": d, "crawl": "", "started": None, "closed": None,
                             "batches": 0, "checked": 0, "online_near_duplicates": 0,
                             "online_revisits": None, "skipped": {},
                             "near_duplicates": 0, "revisits": 0}
            try:
                online = read_meta(path).get("online_duplicates")
            except CorruptFileError:
                online = None
            if isinstance(online, dict):
                rows[key]["online_near_duplicates"] += sum(_count(v) for v in online.values())
        row = rows[key]
        row["batches"] += 1
        row["checked"] += count
        row["near_duplicates"] += int(np.count_nonzero(near[start:start + count]))
        row["revisits"] += int(np.count_nonzero(revisit[start:start + count]))
    return sorted(rows.values(), key=lambda r: (r["dir"], r["started"] or 0, r["crawl"]))


def url_pattern(url: str) -> str:
    """The URL's path template and query parameter names: digits become
    ``{n}``, hexadecimal runs of 8 or more and id-like path segments (16
    or more letters and digits) ``{id}``, parameter values are dropped
    (``/story/2024/a-123?page=2&utm_source=x`` -> ``/story/{n}/a-{n}?page&utm_source``)."""
    parts = urlsplit(url)
    segments = ["{id}" if _ID_SEGMENT.match(s) else _DIGITS.sub("{n}", _HEX_RUN.sub("{id}", s))
                for s in parts.path.split("/")]
    pattern = "/".join(segments) or "/"
    names = sorted({k for k, _ in parse_qsl(parts.query, keep_blank_values=True)})
    return pattern + ("?" + "&".join(names) if names else "")


def _shares(keys: list[str], near: np.ndarray, revisit: np.ndarray) -> list[dict]:
    pages = Counter(keys)
    dups = Counter(k for k, n in zip(keys, near.tolist()) if n)
    again = Counter(k for k, r in zip(keys, revisit.tolist()) if r)
    rows = [{"name": k, "pages": pages[k], "near_duplicates": dups[k], "revisits": again[k],
             "share": dups[k] / pages[k]} for k in pages]
    rows.sort(key=lambda r: (-r["near_duplicates"], -r["pages"], r["name"]))
    return rows[:TOP_ROWS]


def _cluster_rows(res: Rescored, pairs: np.ndarray) -> tuple[list[dict], int, int]:
    found = clusters(res.urls, pairs)
    found.sort(key=lambda c: (-c["size"], c["ids"][0]))
    rec = res.records
    # the page's declared canonical URL, where the batches carry one
    canonical = res.canonicals
    rows = []
    for c in found[:TOP_CLUSTERS]:
        rep = c["ids"][0]
        samples = []
        for i, url in zip(c["ids"][1:SAMPLES + 1], c["urls"][1:SAMPLES + 1]):
            equal = int(np.count_nonzero(rec["sketch"][i] == rec["sketch"][rep]))
            dist = min(int(rec["value"][i] ^ rec["value"][rep]).bit_count(),
                       int(rec["value2"][i] ^ rec["value2"][rep]).bit_count())
            samples.append({"url": url, "similarity": round(similarity(equal), 3),
                            "distance": dist})
            if canonical is not None and canonical[i]:
                samples[-1]["canonical"] = canonical[i]
        rows.append({"size": c["size"], "representative": c["representative"],
                     "samples": samples, "more": max(0, c["size"] - 1 - len(samples))})
    return rows, len(found), sum(c["size"] for c in found)


def gather(dirs, *, distance: int, min_similarity: float, probes: int | None = None,
           recall: float | None = None, chunk_size: int | None = None, verify: bool = True,
           skip_damaged: bool = False, title: str | None = None,
           progress: bool | None = None) -> ReportData:
    """The report of the batch files of ``dirs`` at ``distance`` and
    ``min_similarity`` (see the module docstring)."""
    dirs = [Path(d) for d in dirs]
    started = time.perf_counter()
    options = {} if chunk_size is None else {"chunk_size": chunk_size}
    res = rescore(dirs, distance=distance, min_similarity=min_similarity, probes=probes,
                  recall=recall, verify=verify, skip_damaged=skip_damaged, best=True,
                  progress=progress, **options)
    n = res.count
    pairs = res.pairs
    urls = res.urls.all
    dup_of = np.full(n, -1, dtype=np.int64)
    dup_of[pairs["id"]] = pairs["duplicate_of"]     # (PSM-F: one pair per page)
    has = dup_of >= 0
    # a revisit: a page with an earlier match whose URL was met before (the
    # match PSM-F found first may be another page of its cluster)
    revisit = np.zeros(n, dtype=bool)
    seen: set = set()
    for i, url in enumerate(urls):
        revisit[i] = has[i] and url in seen
        seen.add(url)
    near = has & ~revisit
    needed = matches_needed(min_similarity)
    data = ReportData(dirs=[str(d) for d in dirs], distance=distance,
                      min_similarity=min_similarity, needed=needed, probes=res.summary.probes)
    if title:
        data.title = title
    for entry in res.summary.damaged:
        data.notes.append(f"damaged batch left out: {entry['file']}: {entry['problem']}")
    for path in res.summary.skipped_unfinished:
        data.notes.append(f"unfinished batch (interrupted flush) left out: {path}")
    data.crawls = _crawl_rows(dirs, res, near, revisit, data.notes)
    skipped: Counter = Counter()
    for row in data.crawls:
        skipped.update(row["skipped"])
    data.totals = {"crawls": len(data.crawls), "checked": n,
                   "near_duplicates": int(np.count_nonzero(near)),
                   "revisits": int(np.count_nonzero(revisit)),
                   "online_near_duplicates": sum(r["online_near_duplicates"] for r in data.crawls),
                   "online_revisits": sum(r["online_revisits"] or 0 for r in data.crawls),
                   "skipped": dict(skipped.most_common()), "pairs": int(len(pairs))}
    best, best_d = res.best_matches, res.best_distance
    data.floor_bins = matches_needed(res.floor_similarity)
    data.best_hist = np.bincount(best[best >= 0], minlength=SKETCH_BYTES + 1).tolist()
    data.no_match = int(np.count_nonzero(best < 0))
    passed = best >= needed
    data.distance_near = np.bincount(best_d[(best >= 0) & passed],
                                     minlength=distance + 1).tolist()
    data.distance_below = np.bincount(best_d[(best >= 0) & ~passed],
                                      minlength=distance + 1).tolist()
    data.hosts = _shares([urlsplit(u).hostname or "(no host)" for u in urls], near, revisit)
    data.patterns = _shares([url_pattern(u) for u in urls], near, revisit)
    data.clusters, data.n_clusters, data.clustered_pages = _cluster_rows(res, pairs)
    again = Counter(urls[i] for i in np.flatnonzero(revisit).tolist())
    data.revisited = [{"url": u, "times": c} for u, c in again.most_common(SAMPLES)]
    data.seconds = time.perf_counter() - started
    return data
