"""The merge driver: merge crawl batches into the collection, find every near-duplicate.

The merge of a pending batch ``Q`` (at most ``m`` fingerprints): read ``H``
chunk by chunk (runs, each already sorted; at most ``m`` records per chunk),
match every still-active element of ``Q`` against the chunk with the online
PSM scan on each key (its chunk sorted by that key; each pair within the
distance verified by the sketches; PSM-F deactivates an element at its
first verified match, for both keys), match ``Q`` against its own earlier
elements, then append ``Q`` to ``H`` (sorted by each key). ``exact`` uses
BPHS batch mode instead (tables built over ``Q`` for each key, each chunk
element looked up in them, every pair verified), the reference for recall. The collection's
format is described in :mod:`scrapy_simdup.merge.collection`.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from scrapy_simdup._limits import DEFAULT_DISTANCE, DEFAULT_MIN_SIMILARITY, MAX_DISTANCE
from scrapy_simdup.exceptions import CorruptFileError
from scrapy_simdup.fingerprint.sketch import check_min_similarity, matches_needed
from scrapy_simdup.index.snapshot import HEADER_FILE
from scrapy_simdup.merge.batchscan import SideSpec, match_chunk, match_self, read_q
from scrapy_simdup.merge.collection import (
    H_DTYPE,
    PAIR_DTYPE,
    SIDE_FILES,
    Collection,
    batch_key,
    check_collection_path,
    pending_batches,
    unreported_ranges,
)
from scrapy_simdup.merge.output import check_output_path
from scrapy_simdup.merge.probes import expected_recall, header_bits, merge_probes
from scrapy_simdup.merge.report import MergeSummary, n_distinct, write_clusters, write_pairs
from scrapy_simdup.storage.atomic import read_json
from scrapy_simdup.storage.batchfile import (
    list_batches,
    unfinished_batches,
)

DEFAULT_CHUNK = 1 << 20
SKIP_HINT = "use --skip-damaged to merge the other batches"


def _damaged_batch(header: Path, exc: CorruptFileError, skip: bool) -> dict:
    """The summary entry of a damaged pending batch with ``skip``; without,
    its error again, ending with how to merge the others."""
    if not skip:
        raise CorruptFileError(exc.path, f"{exc.problem}; {SKIP_HINT}") from exc
    return {"batch": str(header), "file": exc.path, "problem": exc.problem}


def _sort_pairs(pairs: np.ndarray) -> np.ndarray:
    """Pairs ordered by ``(id, duplicate_of)``. When every ``id`` is
    distinct (PSM-F: one pair per element) and they are dense, a placement
    by ``id``; else one 64-bit key and a SIMD sort when both ids fit in 32
    bits (a collection under 4G fingerprints), else a lexsort."""
    if not len(pairs):
        return pairs
    ids, dups = pairs["id"], pairs["duplicate_of"]
    lo, hi = int(ids.min()), int(ids.max())
    if hi - lo < 4 * len(ids):
        slot = np.full(hi - lo + 1, -1, dtype=np.int64)
        slot[ids - lo] = np.arange(len(ids))
        order = slot[slot >= 0]
        if len(order) == len(ids):      # (else some ids repeat)
            return np.take(pairs, order)
    if lo >= 0 and dups.min() >= 0 and hi < 2**32 and dups.max() < 2**32:
        key = (ids.astype(np.uint64) << np.uint64(32)) | dups.astype(np.uint64)
        order = np.argsort(key)
    else:
        order = np.lexsort((dups, ids))
    return np.take(pairs, order)      # (several times faster than pairs[order] on records)


def _self_pairs(parts: list, base: int, active: np.ndarray, psm_f: bool) -> np.ndarray:
    """The pairs within ``Q`` from :func:`match_self` (one part per key),
    ``duplicate_of`` numbered from ``base``; with PSM-F only for elements
    still ``active`` (no match in the collection) and one each, the first
    found."""
    pairs = np.concatenate(parts)
    if psm_f:
        # (np.take: several times faster than indexing on records)
        pairs = np.take(pairs, np.flatnonzero(active[pairs["id"]]))
        pairs = np.take(pairs, _first_occurrences(pairs["id"], len(active)))
    pairs["duplicate_of"] += base
    return pairs


def _match_in_process(coll: Collection, chunk_size: int, verify: bool, records: np.ndarray,
                      spec: SideSpec, bar) -> tuple[list, list, np.ndarray]:
    """``Q`` (``records``) against every chunk of ``coll`` and against
    itself, here: ``(pairs found in the chunks, pairs within Q per key,
    active)``, see :mod:`~scrapy_simdup.merge.batchscan`."""
    m = len(records)
    sides = [spec.build(records, n) for n in range(2)]
    active = np.ones(m, dtype=np.uint8)     # arrival order, shared by both keys
    found = []
    for _start, *chunks in coll.chunks(chunk_size, verify=verify):
        found += match_chunk(sides, chunks, records, active, spec.psm_f)
        bar.update(m)
    inner = [match_self(side, records, active if spec.psm_f else None) for side in sides]
    return found, inner, active


def _unique_pairs(sorted_pairs: np.ndarray) -> np.ndarray:
    """Each ``(id, duplicate_of)`` of pairs sorted by them once (a pair both keys found)."""
    if len(sorted_pairs) < 2:
        return sorted_pairs
    ids, dups = sorted_pairs["id"], sorted_pairs["duplicate_of"]
    again = (ids[1:] == ids[:-1]) & (dups[1:] == dups[:-1])
    if not again.any():
        return sorted_pairs
    return np.take(sorted_pairs, np.flatnonzero(np.concatenate(([True], ~again))))


def _first_occurrences(keys: np.ndarray, n: int) -> np.ndarray:
    """Indices of the first occurrence of each distinct key in ``keys`` (all in [0, n))."""
    first = np.full(n, -1, dtype=np.int64)
    first[keys[::-1]] = np.arange(len(keys) - 1, -1, -1, dtype=np.int64)  # last write wins
    return np.sort(first[first >= 0])


class Progress:
    """A one-line progress bar on stderr (no dependency); silent when not a TTY unless forced."""

    def __init__(self, total: int, label: str = "merge", enabled: bool | None = None, stream=None):
        self.total = max(int(total), 1)
        self.done = 0
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.started = time.monotonic()
        self._last = 0.0

    def update(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if self.enabled and (now - self._last >= 0.2 or self.done >= self.total):
            self._last = now
            frac = min(self.done / self.total, 1.0)
            bar = "#" * int(30 * frac)
            elapsed = now - self.started
            eta = elapsed / frac - elapsed if frac > 0 else 0.0
            self.stream.write(f"\r{self.label} [{bar:<30}] {100 * frac:5.1f}% "
                              f"{self.done:,}/{self.total:,} eta {eta:5.0f}s")
            self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


def _single_recipe(coll: Collection, metas) -> str | None:
    """The one fingerprint recipe of the collection and the pending batches
    (None when none is recorded: files written before recipes were). Two
    recipes make incomparable fingerprints: a ValueError naming them."""
    recipes = {m["fingerprint"]: p for p, m in metas if m.get("fingerprint")}
    if coll.meta.get("fingerprint"):
        recipes.setdefault(coll.meta["fingerprint"], coll.meta_path)
    if len(recipes) > 1:
        listing = "; ".join(f"{r!r} ({p})" for r, p in recipes.items())
        raise ValueError(f"these fingerprints were made with different feature settings and "
                         f"cannot be compared: {listing}. Merge each into its own collection "
                         f"(--collection).")
    return next(iter(recipes), None)


def available_memory() -> int | None:
    """Bytes of memory the system can give without swapping (Linux's
    ``MemAvailable``), or None where it does not say."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _group_batches(pending: list, chunk_size: int) -> list:
    """The pending batches ``(path, meta)`` in groups, one ``Q`` each, of at
    most ``chunk_size`` fingerprints (a larger batch is a group of its own)."""
    groups, cur, cur_n = [], [], 0
    for p, m in pending:
        if cur and cur_n + m["count"] > chunk_size:
            groups.append(cur)
            cur, cur_n = [], 0
        cur.append(p)
        cur_n += m["count"]
    if cur:
        groups.append(cur)
    return groups


def _check_table_memory(spec: SideSpec, m: int) -> None:
    """Refuse, before anything is read, a merge whose probe tables alone
    (for its largest ``Q``, of ``m``) would not fit in the memory available.
    (The OOM killer would otherwise end it halfway, with nothing said.)"""
    need = spec.table_bytes(m)
    have = available_memory()
    if have is None or need <= have:
        return
    fits = max(1, have // spec.table_bytes(1))
    raise ValueError(
        f"the probe tables of a batch of {m:,} fingerprints at distance {spec.distance} "
        f"({spec.probes} probes per key) need about {need / 2**30:.1f} GiB, and this machine has "
        f"{have / 2**30:.1f} GiB available: give --batch-size {fits:,} or less "
        f"(or fewer --probes, or a smaller --distance)")


def crawl_distance(dirs) -> int | None:
    """The SIMDUP_DISTANCE the crawls of ``dirs`` used (batch headers, index
    snapshot); None when none says; a ValueError when they disagree."""
    found: dict[int, Path] = {}
    for d in map(Path, dirs):
        sources = list(list_batches(d)) + [d / HEADER_FILE]
        for p in sources:
            try:
                meta = read_json(p, "header") if p.exists() else {}
            except CorruptFileError:
                continue        # reported by the merge itself
            value = meta.get("distance")
            if isinstance(value, int) and not isinstance(value, bool):
                found.setdefault(value, p)
    if len(found) > 1:
        listing = ", ".join(f"{h} ({p})" for h, p in sorted(found.items()))
        raise ValueError(f"the crawls used different distances ({listing}): give --distance")
    return next(iter(found), None)


def merge(dirs, collection=None, *, distance: int = DEFAULT_DISTANCE,
          min_similarity: float = DEFAULT_MIN_SIMILARITY, probes: int | None = None,
          recall: float | None = None,
          first: bool = True, exact: bool = False, chunk_size: int = DEFAULT_CHUNK,
          pairs_out=None, clusters_out=None, progress: bool | None = None,
          verify: bool = True, tables: int | None = None,
          engine: str = "join", commit: bool = True,
          skip_damaged: bool = False, workers: int | None = None,
          scheduler=None, revisits: bool = True) -> MergeSummary:
    """Merge every pending batch of ``dirs`` into ``collection``; see the module docstring.

    A stored record is a candidate for a new one when either key is within
    ``distance`` bits, and a match when their sketches agree in at least
    ``matches_needed(min_similarity)`` bins (0: the keys alone decide).
    ``first`` is PSM-F (one earlier duplicate per fingerprint, an element
    dropped at its first verified match) vs PSM-A (all); ``exact`` is BPHS
    batch mode (every pair within ``distance`` on either key, verified).
    ``pairs_out``/``clusters_out`` are paths (or open text files) for JSON Lines;
    ``revisits=False`` leaves the revisits (both URLs the same) out of ``pairs_out``.
    ``tables``: BPHS tables for ``exact`` (default ``distance + 1``).
    ``engine``: ``"join"`` (the compiled batch scan) or ``"index"`` (a
    :class:`PSMIndex` per chunk, the online index's own query loop).
    ``commit=False`` matches without appending anything (benchmarks): each
    group of batches against the collection as it is, not against the
    groups before it, its fingerprints numbered as a commit would number
    them; the pairs found are in ``summary.pairs_array`` either way.

    A damaged pending batch (its header, data or URL file) is a
    CorruptFileError naming the file; with ``skip_damaged`` the other
    batches are merged and the damaged ones are left pending (a later merge
    tries them again) and listed in ``summary.damaged``.

    ``workers`` (a new Dask ``LocalCluster`` of that many processes) or
    ``scheduler`` (a Dask scheduler's address, or a ``dask.distributed.Client``)
    match each batch on Dask (:mod:`scrapy_simdup.merge.distributed`): the
    same pairs and collection; reading the batches for the commit, and the
    commit, stay here.
    """
    if engine not in ("join", "index"):
        raise ValueError(f"engine must be 'join' or 'index', got {engine!r}")
    dirs = [Path(d) for d in dirs]
    if not dirs:
        raise ValueError("merge needs at least one directory")
    for d in dirs:
        if not d.is_dir():
            raise ValueError(f"{d}: not a directory")
    cpath = Path(collection) if collection is not None else dirs[0] / "collection"
    check_collection_path(cpath, "--collection" if collection is not None else None)
    check_output_path(pairs_out, "--pairs", cpath, dirs)
    check_output_path(clusters_out, "--clusters", cpath, dirs)
    if isinstance(distance, bool) or not isinstance(distance, int) \
            or not 0 <= distance <= MAX_DISTANCE:
        raise ValueError(f"distance must be an int in 0..{MAX_DISTANCE}, got {distance!r}")
    min_similarity = check_min_similarity(min_similarity)
    needed = matches_needed(min_similarity)
    if probes is not None and (isinstance(probes, bool) or not isinstance(probes, int)
                               or probes < 0):
        raise ValueError(f"probes must be a non-negative int, got {probes!r}")
    if recall is not None and probes is not None:
        raise ValueError("probes and recall are exclusive")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
    if collection is None and not any(list_batches(d) for d in dirs) \
            and not (dirs[0] / "collection" / "collection.json").exists():
        raise ValueError(f"no batch files in {', '.join(map(str, dirs))} "
                         "(is it a crawl directory with batch files?)")
    cluster = None
    if workers is not None or scheduler is not None:
        if engine != "join":
            raise ValueError("the index engine runs in-process only (no --workers/--scheduler)")
        from scrapy_simdup.merge.distributed import DaskScan  # noqa: PLC0415 (imports Dask when asked)

        cluster = DaskScan(workers, scheduler)
    lock = Collection.lock_directory(cpath)
    try:
        coll = Collection(cpath, create=True)
        damaged_headers: list = []
        pending = pending_batches(dirs, coll, damaged_headers)
        damaged = [_damaged_batch(p, exc, skip_damaged) for p, exc in damaged_headers]
        # header bits from what will really be read (chunks of at most the
        # collection after this merge), not from a huge requested chunk_size
        t = header_bits(min(chunk_size, max(1, coll.count + sum(m["count"] for _, m in pending))),
                        distance)
        if probes is None and not exact:
            probes = merge_probes(distance, t, recall)
        spec = SideSpec(distance=distance, needed=needed, first=first, probes=probes, t=t,
                        exact=exact, tables=tables, engine=engine)
        sizes = {p: m["count"] for p, m in pending}
        groups = _group_batches(pending, chunk_size)
        if not exact and engine == "join" and cluster is None and groups:
            _check_table_memory(spec, max(sum(sizes[p] for p in g) for g in groups))
        if verify:      # the pairs before appending; the URL files when they are read
            # (a full read of the URL files per merge would cost more than the
            # merge itself at scale: `simdup stats` verifies them)
            coll.verify_files(("pairs.bin",) if pairs_out is None and clusters_out is None
                              else SIDE_FILES)
        method = "bphs" if exact else ("psm-f" if first else "psm-a") + (
            "(index)" if engine == "index" else "")
        summary = MergeSummary(method=method, distance=distance, probes=None if exact else probes,
                               header_bits=None if exact else t,
                               expected_recall=1.0 if exact else expected_recall(distance, t,
                                                                                 probes),
                               collection_before=coll.count, min_similarity=min_similarity)
        if cluster is not None:
            summary.cluster = (f"dask, {workers} local worker{'s' if workers > 1 else ''}"
                               if workers is not None else
                               f"dask, scheduler {scheduler}" if isinstance(scheduler, str)
                               else "dask")
        summary.damaged += damaged
        # --pairs is written at the end, groups commit one by one: each group
        # of a --pairs merge commits, with its run, the ranges of pairs.bin
        # not yet written to a --pairs file, so the pairs of a --pairs merge
        # killed before writing its file come out with the next --pairs merge
        # (merges without --pairs leave the ranges alone)
        earlier = unreported_ranges(coll)
        summary.earlier_unreported_pairs = sum(b - a for a, b in earlier)
        own_from = coll.meta["pairs"]     # where this merge's pairs start in pairs.bin
        for d in dirs:
            summary.skipped_unfinished += [str(p) for p in unfinished_batches(d)]
        started = time.perf_counter()
        recipe = _single_recipe(coll, pending)
        run_pairs = []
        uncommitted = 0     # fingerprints matched and not appended (commit=False)
        chunks0 = coll.n_chunks(chunk_size)
        bar = Progress(sum(sum(sizes[p] for p in g) * (chunks0 + i + 1)
                           for i, g in enumerate(groups)), "simdup merge", progress)
        for gi, group in enumerate(groups):
            # on Dask the workers start on the batches while this process reads
            # them too, for the commit and to find damage (a job an error
            # leaves behind is cancelled by cluster.close())
            q_files = [(p, sizes[p]) for p in group]
            job = None if cluster is None else cluster.submit_batch(
                coll, chunk_size, verify, q_files, spec)
            records, batches, damaged_here = read_q(q_files, commit, verify)
            for path, exc in damaged_here:
                summary.damaged.append(_damaged_batch(path, exc, skip_damaged))
                bar.update(sizes[path] * (chunks0 + gi + 1))
            m = len(records)
            if job is not None and damaged_here:
                cluster.cancel(job)     # started on a damaged batch: again without it
                job = cluster.submit_batch(coll, chunk_size, verify,
                                           [(b.path, len(b)) for b in batches],
                                           spec) if batches else None
            if not batches:
                continue
            base = coll.count + uncommitted
            if job is not None:
                found, inner, active = cluster.collect(job, m, bar)
            else:
                found, inner, active = _match_in_process(coll, chunk_size, verify, records,
                                                         spec, bar)
            summary.chunks_scanned += coll.n_chunks(chunk_size)
            found.append(_self_pairs(inner, base, active, spec.psm_f))
            bar.update(m)
            pairs = np.concatenate(found)
            pairs["id"] += base
            pairs = _unique_pairs(_sort_pairs(pairs))
            if commit:
                run = np.empty(m, dtype=H_DTYPE)
                for name in ("value", "value2", "sketch"):
                    run[name] = records[name]
                run["id"] = base + np.arange(m, dtype=np.int64)     # arrival order
                urls = [u for b in batches for u in b.urls]
                extra = None
                if pairs_out is not None:
                    extra = {"pairs_unreported": earlier + [
                        [own_from, coll.meta["pairs"] + len(pairs)]]}
                coll.append(run, urls, pairs, {batch_key(b.path, b.meta): {
                    "count": len(b), "crc32": b.meta["npy_crc32"],
                    "path": str(b.path.resolve())} for b in batches}, recipe, extra)
            else:
                uncommitted += m
            run_pairs.append(pairs)
            summary.batches += len(batches)
            summary.fingerprints += m
        bar.close()
        summary.damaged.sort(key=lambda entry: entry["batch"])
        all_run = np.concatenate(run_pairs) if run_pairs else np.zeros(0, dtype=PAIR_DTYPE)
        summary.seconds = time.perf_counter() - started
        summary.pairs_array = all_run
        summary.collection_after = coll.count
        summary.pairs = len(all_run)
        summary.duplicates = n_distinct(all_run["id"])
        hist = np.bincount(all_run["distance"], minlength=distance + 1) if len(all_run) else []
        summary.distance_histogram = {str(i): int(c) for i, c in enumerate(hist) if c}
        if pairs_out is not None:
            # this merge's own pairs are all_run (stored unchanged), so only
            # the ones an earlier interrupted merge owes are read back
            owed = [coll.pairs(a, b) for a, b in earlier] if commit else []
            write_pairs(coll, np.concatenate(owed + [all_run]), pairs_out, revisits)
            if commit and "pairs_unreported" in coll.meta:
                coll.set_meta(pairs_unreported=None)
        if clusters_out is not None:
            write_clusters(coll, coll.pairs(), clusters_out)
        return summary
    finally:
        # the cluster first: tasks of a failed batch may still read the collection
        try:
            if cluster is not None:
                cluster.close()
        finally:
            lock.close()
