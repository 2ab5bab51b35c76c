"""``simdup merge --workers N`` / ``--scheduler ADDRESS``: the collection scan on Dask.

Dask is optional (``pip install "scrapy-simdup[dask]"``): nothing here
imports it until a cluster is asked for, so an in-process merge never does.

What runs where, per batch ``Q`` (see :mod:`scrapy_simdup.merge.run`):

* the client builds ``Q``'s matchers (the probe table of each key) once and
  shares them with every worker, once: their arrays are written beside the
  collection (storage every worker sees, as the collection must be) and each
  worker maps them copy-on-write, once per batch; the few values left go with
  every task (a worker lost mid-merge loses nothing the others need). On one
  machine the workers share the pages of the files, where a broadcast would
  copy hundreds of megabytes into every worker;
* each chunk of the collection is a task: the worker reads the chunk's runs
  itself from the collection's path (so the collection must be on storage
  every worker sees) and matches every element of ``Q`` against it on both
  keys, returning the verified pairs;
* the client reduces the chunks' pairs in chunk order. With PSM-F an element
  is dropped at its first match: a task does not know what earlier chunks
  matched, so it answers for every element (key 2 for those key 1 did not
  match in the same chunk, as in-process), and the client keeps an element's
  pairs only from the first chunk that matched it. An element's first match
  within a chunk does not depend on the other elements, so the pairs are the
  in-process merge's;
* ``Q`` against itself and the commit (with the collection's lock) stay on
  the client.

A worker lost mid-merge: the scheduler runs its tasks again on another
worker (a task is pure: it only reads); when it gives up (the task killed its
workers ``distributed.scheduler.allowed-failures`` times) the merge stops with
:class:`ClusterError` before this batch's commit, so the collection is the one
of the last completed batch.
"""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import uuid
from pathlib import Path

import numpy as np

from scrapy_simdup.merge.collection import H_DTYPE, Collection
from scrapy_simdup.merge.matchers import PSMBatchMatcher

#: seconds to wait for a scheduler given by address
CONNECT_TIMEOUT = 30
INSTALL_HINT = 'install Dask for --workers/--scheduler: pip install "scrapy-simdup[dask]"'
#: what a task returns of a matched chunk record (no sketch: the pair needs none)
OTHER_DTYPE = np.dtype([(name, H_DTYPE.fields[name][0]) for name in ("value", "value2", "id")])


class ClusterError(RuntimeError):
    """The Dask cluster could not be used or lost the merge's work; the
    collection is unchanged since the last completed batch."""


#: a worker thread's chunk buffers, kept from task to task: a fresh buffer per
#: chunk costs a page fault per 4 KiB (slow on virtual machines)
_worker_buffers = threading.local()


#: the arrays of a PSMBatchMatcher written to files for the workers
_SHARED_ARRAYS = ("values", "sketch", "offsets", "low", "idx")
#: on a worker: the matchers of the batch being scanned, by share directory
_worker_sides: dict = {}
_worker_lock = threading.Lock()


def _share_sides(sides: list, directory: Path) -> list:
    """``sides`` with each arrival order and PSMBatchMatcher replaced by what
    a worker needs to map it: the files of its arrays (and the matcher's plain
    attributes). What is left is small enough to go with every task."""
    out = []
    for n, (key, order, matcher) in enumerate(sides):
        order_file = str(directory / f"{n}-order.npy")
        np.save(order_file, np.asarray(order))
        order = ("mapped", order_file)
        if isinstance(matcher, PSMBatchMatcher):
            files = {}
            for name in _SHARED_ARRAYS:
                files[name] = str(directory / f"{n}-{name}.npy")
                np.save(files[name], getattr(matcher, name))
            plain = {k: v for k, v in vars(matcher).items() if k not in _SHARED_ARRAYS}
            matcher = ("mapped", plain, files)
        out.append((key, order, matcher))
    return out


def _mapped_sides(shared: dict) -> list:
    """The batch's matchers on this worker, mapped from their files once."""
    directory = shared["directory"]
    with _worker_lock:
        sides = _worker_sides.get(directory)
        if sides is None:
            _worker_sides.clear()          # one batch at a time: drop the last one's maps
            sides = []
            for key, order, matcher in shared["sides"]:
                order = np.load(order[1], mmap_mode="r")
                if isinstance(matcher, tuple) and matcher[0] == "mapped":
                    _, plain, files = matcher
                    mapped = PSMBatchMatcher.__new__(PSMBatchMatcher)
                    vars(mapped).update(plain)
                    for name, file in files.items():
                        # copy-on-write: the compiled join takes writable buffers
                        setattr(mapped, name, np.load(file, mmap_mode="c"))
                    matcher = mapped
                sides.append((key, order, matcher))
            _worker_sides[directory] = sides
        return sides


def _scan_task(shared: dict, path: str, start: int, group: list, verify: bool) -> list:
    """One chunk against ``Q`` on both keys, on a worker: per key ``(elements
    of Q in arrival order, the chunk records they matched, equal sketch bins)``."""
    count = sum(r["count"] for r in group)
    bufs = getattr(_worker_buffers, "bufs", None)
    if bufs is None or len(bufs[0]) < count:
        bufs = _worker_buffers.bufs = [np.empty(count, dtype=H_DTYPE) for _ in range(2)]
    by_key1, by_key2 = Collection.read_chunk(path, start, group, verify, bufs)
    active = np.ones(shared["m"], dtype=np.uint8)    # arrival order, shared by both keys
    out = []
    for (key, order, matcher), chunk in zip(_mapped_sides(shared), (by_key1, by_key2)):
        side_active = np.ascontiguousarray(active[order])
        # (the join reads the sketches of its candidates in place)
        sketches = chunk["sketch"] if isinstance(matcher, PSMBatchMatcher) \
            else np.ascontiguousarray(chunk["sketch"])
        qi, yi, _dd, aa = matcher.scan(np.ascontiguousarray(chunk[key]), sketches, side_active)
        qa = order[qi]
        if shared["psm_f"]:
            active[qa] = 0
        other = np.empty(len(yi), dtype=OTHER_DTYPE)
        for name in OTHER_DTYPE.names:
            other[name] = chunk[name][yi]
        out.append((qa, other, aa))
    return out


class DaskScan:
    """The collection scan of a merge on a Dask cluster: a new
    ``LocalCluster`` of ``workers`` processes, or the scheduler at
    ``scheduler`` (an address, or a ``dask.distributed.Client``, used as is
    and left open). Connects at the first scan; :meth:`close` ends what it
    started."""

    def __init__(self, workers: int | None = None, scheduler=None):
        if workers is not None and scheduler is not None:
            raise ValueError("--workers and --scheduler are exclusive")
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                    or workers < 1):
            raise ValueError(f"workers must be a positive int, got {workers!r}")
        if workers is None and scheduler is None:
            raise ValueError("give workers or scheduler")
        self.workers = workers
        self.scheduler = scheduler
        self.client = None
        self._owned: list = []

    def _connect(self):
        if self.client is not None:
            return self.client
        try:
            from dask import distributed  # noqa: PLC0415 (optional: the dask install extra)
        except ImportError as exc:
            raise ClusterError(f"{INSTALL_HINT} ({exc})") from None
        if self.scheduler is not None and not isinstance(self.scheduler, str):
            self.client = self.scheduler
            return self.client
        try:
            if self.scheduler is not None:
                client = distributed.Client(self.scheduler, timeout=CONNECT_TIMEOUT)
            else:
                cluster = distributed.LocalCluster(
                    n_workers=self.workers, threads_per_worker=1, processes=True,
                    dashboard_address=":0", silence_logs=logging.ERROR)
                self._owned.append(cluster)
                client = distributed.Client(cluster)
        except OSError as exc:      # (a timeout is one)
            where = self.scheduler or f"a local cluster of {self.workers} workers"
            raise ClusterError(f"cannot start or reach the Dask scheduler ({where}): "
                               f"{exc}") from None
        self._owned.insert(0, client)
        self.client = client
        return client

    def close(self) -> None:
        for thing in self._owned:
            thing.close()
        self._owned = []
        self.client = None

    def scan(self, coll: Collection, chunk_size: int, verify: bool, sides: list, m: int,
             active: np.ndarray, psm_f: bool, bar) -> list:
        """Match ``Q`` (``m`` elements; ``sides``: ``(key, order, matcher)``
        per key) against every chunk of ``coll``: the ``(elements, matched
        records, equal bins)`` parts the in-process scan finds, ``active``
        updated as it would be (PSM-F)."""
        plan = coll.chunk_plan(chunk_size)
        if not plan:
            return []
        client = self._connect()
        path = os.path.abspath(coll.path)
        tag = uuid.uuid4().hex[:12]
        # beside the collection: storage the workers see
        directory = Path(tempfile.mkdtemp(prefix=f".simdup-scan-{tag}-",
                                          dir=Path(path).parent))
        try:
            # small: it goes with every task, so a lost worker loses nothing
            shared = {"m": m, "psm_f": psm_f, "directory": str(directory),
                      "sides": _share_sides(sides, directory)}
            return self._scan(client, shared, path, tag, plan, verify, m, active, psm_f, bar)
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    def _scan(self, client, shared, path, tag, plan, verify, m, active, psm_f, bar) -> list:
        from dask.distributed import as_completed  # noqa: PLC0415 (optional: the dask install extra)

        futures = [client.submit(_scan_task, shared, path, start, group, verify,
                                 key=f"simdup-scan-{tag}-{i}", pure=False)
                   for i, (start, group) in enumerate(plan)]
        position = {f.key: i for i, f in enumerate(futures)}
        done: dict = {}
        found, next_i = [], 0
        try:
            for future in as_completed(futures):
                done[position[future.key]] = self._result(future)
                bar.update(m)
                # in chunk order: an element's pairs from the first chunk that matched it
                while next_i in done:
                    for qa, other, aa in done.pop(next_i):
                        if psm_f:
                            keep = active[qa].astype(bool)
                            qa, other, aa = qa[keep], other[keep], aa[keep]
                            active[qa] = 0
                        found.append((qa, other, aa))
                    next_i += 1
        finally:
            client.cancel(futures)
        return found

    @staticmethod
    def _result(future):
        from dask.distributed import KilledWorker  # noqa: PLC0415 (optional: the dask install extra)

        try:
            return future.result()
        except KilledWorker as exc:
            raise ClusterError(f"Dask workers died running a chunk of the merge ({exc}); "
                               f"nothing of this batch was committed") from None
