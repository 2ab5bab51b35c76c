"""``simdup merge --workers N`` / ``--scheduler ADDRESS``: the matching of each batch on Dask.

Dask is optional (``pip install "scrapy-simdup[dask]"``): nothing here
imports it until a cluster is asked for, so an in-process merge never does.

The tasks of a batch ``Q`` (the steps of :mod:`~scrapy_simdup.merge.batchscan`):

* **build**, one per key (one for both on a local cluster of one worker
  and thread, as ``--workers 1`` starts: ``Q`` is then read once): a worker
  reads ``Q``'s batch files, sorts ``Q`` by the key and builds its matcher
  (the probe table) once, and keeps it in memory. Unless the cluster is
  such a local one, it also writes the matcher's arrays and ``Q``'s keys to
  a share directory, where the other workers map them copy-on-write, once
  per batch (on one machine the workers then share the pages, where sending
  them would copy hundreds of megabytes into each). The share directory is
  in ``/dev/shm`` when every worker runs on this machine and it has room,
  else beside the collection (storage every worker sees, as the collection
  and the batch directories must be);
* **scan**, one per chunk of the collection and key, submitted when that
  key's build is done, and run in chunk order (task priority, which also
  lets a later merge sharing the cluster run its first chunks before an
  earlier merge's last ones): the worker reads the chunk's runs
  itself from the collection's path and matches every element of ``Q``
  against it, returning the verified pairs;
* **self**, one per key: the pairs within ``Q`` on that key.

A worker without a side in memory maps it from the share directory, or,
when there is none (the worker that replaced the lost one of a local
cluster of one), builds it itself; one thread of a worker does it, the
others wait for it.

Meanwhile the client reads the batches too (for the commit, and to find a
damaged one: the tasks are then cancelled and started again without it).
It reduces the chunks' pairs in chunk order. With PSM-F an element is
dropped at its first match: a task does not know what earlier chunks
matched, so it answers for every element, and the client keeps an
element's pairs only from the first chunk (and key 1 before key 2) that
matched it; the pairs within ``Q`` are then kept for the elements no chunk
matched. An element's matches in a chunk or within ``Q`` do not depend on
the other elements, so the pairs are the in-process merge's. The commit
(with the collection's lock) stays on the client.

A worker lost mid-merge: the scheduler runs its tasks again on another
worker (a scan or self task only reads, and gets the description of the
side it needs as a value, not from the lost worker; a build run again
writes new files); when
it gives up (a task killed its workers
``distributed.scheduler.allowed-failures`` times) the merge stops with
:class:`ClusterError` before this batch's commit, so the collection is the
one of the last completed batch.
"""
from __future__ import annotations

import asyncio
import logging
import os
import shutil
import threading
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from scrapy_simdup.merge.batchscan import Side, SideSpec, match_chunk, match_self, read_q
from scrapy_simdup.merge.collection import H_DTYPE, Collection
from scrapy_simdup.merge.sharedir import new_share_directory, remove_share, sweep_stale

#: seconds to wait for a scheduler given by address
CONNECT_TIMEOUT = 30
INSTALL_HINT = ('install Dask for --workers/--scheduler: pip install "scrapy-simdup[dask]" '
                'or, from a checkout, pip install -e ".[dask]"')
#: what the workers of a local cluster import when they start, not in the first task
WORKER_PRELOAD = ("scrapy_simdup.merge.distributed",)
#: where a batch's share directory goes (memory, not disk) when every worker
#: sees it and it has room
LOCAL_SHARE = Path("/dev/shm")


class ClusterError(RuntimeError):
    """The Dask cluster could not be used or lost the merge's work; the
    collection is unchanged since the last completed batch."""


#: on a worker: each task thread's chunk buffer, kept from task to task of a
#: batch (a fresh buffer per chunk costs a page fault per 4 KiB)
_worker_buffers: dict = {}
#: on a worker: ``{job tag: {key n: (side, Q's keys)}}`` of the batches being
#: matched (merges may share a cluster): built here, or mapped once
_worker_sides: dict = {}
#: on a worker: the tags of batches that are over (a cancelled task still
#: running must not keep or map their sides again)
_worker_forgotten: deque = deque(maxlen=256)
#: on a worker: ``{job tag: share directory}`` of the batches whose sides it
#: holds: a batch whose directory is gone is over (its merge was killed
#: before it could say so), and its sides are dropped
_worker_directories: dict = {}
#: on a worker: ``{(job tag, key n): Event}`` of the sides a thread is
#: building or mapping (the others wait for it rather than make their own)
_worker_making: dict = {}
_worker_lock = threading.Lock()


def _check_live(tag: str) -> None:
    """Raise when batch ``tag`` is over (call with the lock held)."""
    if tag in _worker_forgotten:
        raise RuntimeError("this batch is over (a cancelled task)")


def _build_sides(job: dict, keys) -> dict:
    """``{n: (side n, Q's keys)}`` for the ``keys`` of ``job``'s batch ``Q``,
    read from its batch files (``job["batches"]``: ``(path, count)``)."""
    # (the client reads and checks them too, and starts again without a damaged one)
    records, _, damaged = read_q(job["batches"], with_urls=False, verify=False)
    if damaged:
        raise damaged[0][1]
    q = {"value": np.ascontiguousarray(records["value"]),
         "value2": np.ascontiguousarray(records["value2"])}
    sides = {}
    for n in keys:
        with _worker_lock:
            _check_live(job["tag"])     # (a cancelled build stops early)
        sides[n] = (job["spec"].build(records, n), q)
    return sides


def _keep(job: dict, n: int, mapped: tuple) -> tuple:
    """Keep side ``n`` of ``job``'s batch on this worker for its other tasks;
    the one kept first when two threads raced."""
    with _worker_lock:
        _check_live(job["tag"])
        if job["directory"] is not None:
            _worker_directories[job["tag"]] = job["directory"]
        return _worker_sides.setdefault(job["tag"], {}).setdefault(n, mapped)


def _drop_orphans(running: str) -> None:
    """Drop the sides of batches (other than ``running``, the caller's)
    whose share directory is gone: a merge killed outright never tells its
    workers that its batch is over, and the next merge sweeps its directory
    (a long-lived worker would otherwise hold the sides until it restarts)."""
    with _worker_lock:
        held = list(_worker_directories.items())
    for tag, directory in held:
        if tag != running and not os.path.isdir(directory):
            _forget(tag)


def _publish(side: Side, q: dict, n: int, directory: str) -> dict:
    """Write side ``n`` and ``Q``'s keys to the share directory: ``{array
    name: file}``. New names each run: a build run again (its worker lost)
    must not rewrite files other workers have mapped."""
    plain, arrays = side.matcher.shared_parts()
    # (both keys write Q's keys: a key's scans then need only their own build)
    arrays = {"order": side.order, "q-value": q["value"], "q-value2": q["value2"], **arrays}
    run = f"{n}-{uuid.uuid4().hex[:8]}"
    files = {}
    for name, array in arrays.items():
        files[name] = os.path.join(directory, f"{run}-{name}.npy")
        np.save(files[name], array)
    return files


def _build_task(job: dict, keys: list) -> list:
    """Build the sides ``keys`` of ``job``'s batch and keep them on this
    worker; with a share directory (other workers), write them there too.
    What :func:`_side` needs, per key."""
    _drop_orphans(job["tag"])
    directory = job["directory"]
    out = []
    for n, (side, q) in _build_sides(job, keys).items():
        _keep(job, n, (side, q))
        plain, _ = side.matcher.shared_parts()
        out.append({"n": n, "key": side.key, "cls": type(side.matcher), "plain": plain,
                    "pair_limit": side.pair_limit,
                    "files": _publish(side, q, n, directory) if directory else None})
    return out


def _side(job: dict, info: dict) -> tuple[Side, dict]:
    """The side ``info`` describes and ``Q``'s keys on this worker: kept from
    its build, else mapped from the share directory (copy-on-write: the
    compiled join takes writable buffers), else (no share directory: the
    worker that replaced the lost one of a local cluster of one) built here."""
    _drop_orphans(job["tag"])
    tag, n = job["tag"], info["n"]
    while True:
        with _worker_lock:
            _check_live(tag)
            mapped = _worker_sides.get(tag, {}).get(n)
            if mapped is not None:
                return mapped
            making = _worker_making.get((tag, n))
            if making is None:      # this thread makes it
                making = _worker_making[(tag, n)] = threading.Event()
                break
        making.wait()
    try:
        if info["files"] is None:
            return _keep(job, n, _build_sides(job, [n])[n])
        arrays = {name: np.load(file, mmap_mode="c") for name, file in info["files"].items()}
        order = arrays.pop("order")
        q = {"value": arrays.pop("q-value"), "value2": arrays.pop("q-value2")}
        side = Side(info["key"], order, info["cls"].from_shared(info["plain"], arrays),
                    info["pair_limit"])
        return _keep(job, n, (side, q))
    finally:
        with _worker_lock:
            del _worker_making[(tag, n)]
        making.set()


def _forget(tag: str) -> None:
    with _worker_lock:
        _worker_forgotten.append(tag)
        _worker_sides.pop(tag, None)
        _worker_directories.pop(tag, None)
        if not _worker_sides:
            _worker_buffers.clear()


async def _forget_batch(tag: str) -> None:
    """Drop the sides of batch ``tag`` (its share files are deleted) and the
    chunk buffers. Run on the worker's event loop, so the client need not
    wait; the lock is taken in a thread, not on the loop."""
    await asyncio.get_running_loop().run_in_executor(None, _forget, tag)


def _scan_task(job: dict, info: dict, path: str, start: int, group: list,
               verify: bool) -> np.ndarray:
    """One chunk of the collection against ``Q`` on one key (every element
    active): the pairs found."""
    side, q = _side(job, info)
    count = sum(r["count"] for r in group)
    buf = _worker_buffers.get(threading.get_ident())
    if buf is None or len(buf) < count:
        buf = _worker_buffers[threading.get_ident()] = np.empty(count, dtype=H_DTYPE)
    chunk = Collection.read_chunk(path, start, group, info["n"], verify, buf)
    return match_chunk([side], [chunk], q, None, False, keep_table=True)[0]


def _self_task(job: dict, info: dict) -> np.ndarray:
    """The pairs within ``Q`` on one key (every element active)."""
    side, q = _side(job, info)
    return match_self(side, q, keep_table=True)


def _share_bytes(m: int, spec: SideSpec) -> int:
    """A generous estimate of the share directory's size for ``m`` elements:
    per key the order, keys and sketches, and the probe table."""
    return 2 * m * (8 + 8 + 32) + spec.table_bytes(m)


def _reasons(exc: BaseException) -> str:
    """What ``exc`` and the exceptions that caused it say, outermost first,
    without repeats ("Nanny failed to start: Nanny failed to start worker
    process")."""
    said: list[str] = []
    while exc is not None and len(said) < 5:
        text = str(exc).strip().rstrip(".") or type(exc).__name__
        if not any(text in s for s in said):
            said.append(text)
        exc = exc.__cause__ or exc.__context__
    return ": ".join(said)


@dataclass
class _Job:
    """The tasks matching one batch ``Q``, and what their submission needs."""

    directory: Path | None  # the share directory (None: a local cluster of one worker)
    lock: int | None        # the descriptor holding its lock (None without one)
    task: dict              # what every task gets: the tag, the batch files, the spec
    path: str               # the collection
    plan: list              # its chunks
    verify: bool
    futures: list = field(default_factory=list)

    @property
    def tag(self) -> str:
        """The batch's name in the task keys and on the workers."""
        return self.task["tag"]


class DaskScan:
    """The matching of a merge's batches on a Dask cluster: a new
    ``LocalCluster`` of ``workers`` processes, or the scheduler at
    ``scheduler`` (an address, or a ``dask.distributed.Client``, used as is
    and left open). Connects at the first batch; :meth:`close` ends what it
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
        self._jobs: list = []
        self._cleanups: list = []

    def _connect(self):
        if self.client is not None:
            return self.client
        try:
            from dask import distributed  # noqa: PLC0415 (optional: the dask install extra)
        except ImportError as exc:
            raise ClusterError(f"{INSTALL_HINT} ({exc})") from None
        where = self.scheduler or f"a local cluster of {self.workers} workers"
        if self.scheduler is not None and not isinstance(self.scheduler, str):
            client = self.scheduler
        else:
            try:
                if self.scheduler is not None:
                    client = distributed.Client(self.scheduler, timeout=CONNECT_TIMEOUT)
                else:
                    try:
                        cluster = distributed.LocalCluster(
                            n_workers=self.workers, threads_per_worker=1, processes=True,
                            dashboard_address=":0", silence_logs=logging.ERROR,
                            preload=list(WORKER_PRELOAD))
                    except Exception as exc:    # noqa: BLE001 (closed by Dask: any is a failed start)
                        # e.g. a worker process that died starting: "Nanny failed to start."
                        raise ClusterError(f"cannot start the Dask cluster ({where}): "
                                           f"{_reasons(exc)}; nothing was merged") from None
                    self._owned.append(cluster)
                    client = distributed.Client(cluster)
            except OSError as exc:      # (a timeout is one)
                raise ClusterError(f"cannot start or reach the Dask scheduler ({where}): "
                                   f"{exc}") from None
            self._owned.insert(0, client)
        self.client = client
        try:
            client.wait_for_workers(1, timeout=CONNECT_TIMEOUT)
        except (TimeoutError, OSError):
            raise ClusterError(f"the Dask cluster ({where}) has no workers after "
                               f"{CONNECT_TIMEOUT} s") from None
        return client

    def close(self) -> None:
        """Cancel what is still running, remove the share directories, and
        close the cluster and client this object started."""
        for job in list(self._jobs):
            self.cancel(job)
        self._join_cleanups()
        for thing in self._owned:
            thing.close()
        self._owned = []
        self.client = None

    def _join_cleanups(self) -> None:
        for thread in self._cleanups:
            thread.join()
        self._cleanups = []

    def _alone(self) -> bool:
        """The cluster is a local one (in this process) of one worker running
        one task at a time, as ``--workers 1`` starts: its builds keep the
        sides, nothing is shared, and one build reads ``Q`` once. (A cluster
        given by address may grow, or its workers run several threads.)"""
        from dask.distributed import LocalCluster  # noqa: PLC0415 (optional: the dask install extra)

        return (isinstance(getattr(self.client, "cluster", None), LocalCluster)
                and sum(self.client.nthreads().values()) == 1)

    def _workers_see(self, directory: Path) -> bool:
        """Every worker sees ``directory`` (at least one worker answers)."""
        if self.workers is not None:
            return True         # our own local cluster
        try:
            seen = self.client.run(os.path.isdir, str(directory))
        except Exception:   # noqa: BLE001 (no answer is no)
            return False
        return bool(seen) and all(seen.values())

    def _share_directory(self, coll: Collection, need: int) -> tuple[Path, int]:
        """A new share directory for a batch, and its lock: in ``/dev/shm``
        when every worker sees it there and it has room for ``need`` bytes
        twice, else beside the collection. Those killed merges left there
        go first."""
        self._join_cleanups()       # (the last batch's share memory, freed)
        beside = Path(os.path.abspath(coll.path)).parent
        sweep_stale(beside)
        if LOCAL_SHARE.is_dir() and os.access(LOCAL_SHARE, os.W_OK | os.X_OK):
            sweep_stale(LOCAL_SHARE)
            if shutil.disk_usage(LOCAL_SHARE).free > 2 * need:
                directory, lock = new_share_directory(LOCAL_SHARE)
                if self._workers_see(directory):
                    return directory, lock
                remove_share(directory, lock)       # workers on other machines
        directory, lock = new_share_directory(beside)
        if not self._workers_see(directory):
            remove_share(directory, lock)
            raise ClusterError(f"the Dask workers cannot see {beside}: the collection and "
                               f"the batch directories must be on storage every worker "
                               f"sees, under the same path")
        return directory, lock

    def submit_batch(self, coll: Collection, chunk_size: int, verify: bool, batches: list,
                     spec: SideSpec) -> _Job:
        """Start matching ``Q`` (the batch files ``batches``: ``(path,
        count)``) against every chunk of ``coll`` and against itself: the
        build tasks run while the client goes on. :meth:`collect` waits."""
        client = self._connect()
        m = sum(count for _, count in batches)
        alone = self._alone()
        directory = lock = None
        if not alone:
            directory, lock = self._share_directory(coll, _share_bytes(m, spec))
        tag = uuid.uuid4().hex[:12]
        task = {"tag": tag, "spec": spec, "directory": directory and str(directory),
                "batches": [(os.path.abspath(path), count) for path, count in batches]}
        job = _Job(directory, lock, task, os.path.abspath(coll.path),
                   coll.chunk_plan(chunk_size), verify)
        self._jobs.append(job)
        keys = [[0, 1]] if alone else [[0], [1]]
        job.futures = [client.submit(_build_task, task, k,
                                     key=f"simdup-build-{tag}-{i}", pure=False)
                       for i, k in enumerate(keys)]
        return job

    def _submit_key(self, job: _Job, info: dict) -> list:
        """The scan tasks of the key ``info`` describes (one per chunk) and
        its self task, given its built side. The side's description goes
        with each task as a value, so a worker lost later loses nothing the
        others need. (Not restricted to the worker that has the side in
        memory: a task restricted to a worker that is lost waits for it
        forever, even when other workers are allowed.)"""
        n = info["n"]
        # (in chunk order: the client reduces the chunks' pairs in that order)
        tasks = [self.client.submit(_scan_task, job.task, info, job.path, start, group,
                                    job.verify, key=f"simdup-scan-{job.tag}-{i}-{n}",
                                    pure=False, priority=-i)
                 for i, (start, group) in enumerate(job.plan)]
        tasks.append(self.client.submit(_self_task, job.task, info,
                                        key=f"simdup-self-{job.tag}-{n}", pure=False,
                                        priority=-len(job.plan)))
        job.futures += tasks
        return tasks

    def collect(self, job: _Job, m: int, bar) -> tuple[list, list, np.ndarray]:
        """What the in-process merge finds for ``job``'s ``Q`` (``m``
        elements): ``(pairs found in the chunks, pairs within Q per key,
        active)``. A key's scans start as soon as its side is built; the
        chunks' pairs are reduced in chunk order as they arrive."""
        from dask.distributed import as_completed  # noqa: PLC0415 (optional: the dask install extra)

        try:
            # what a finished task is: (kind, key n, chunk i)
            what = {f.key: ("build", None, None) for f in job.futures}
            done: dict = {}         # slot 2 * chunk + key -> pairs, until reduced
            keys_done: dict = {}    # chunk -> its keys' tasks done
            found, inner, next_slot = [], [None, None], 0
            active = np.ones(m, dtype=np.uint8)     # arrival order, shared by both keys
            # (our client's loop: as_completed takes the default client's, which
            # in a process with several clients may be another one)
            tasks = as_completed(job.futures, loop=self.client.loop)
            for future in tasks:
                kind, n, i = what[future.key]
                result = self._result(future)
                if kind == "build":
                    # (released: the sides go with the tasks, nothing needs the future)
                    job.futures.remove(future)
                    for info in result:
                        new = self._submit_key(job, info)
                        what.update({f.key: ("scan", info["n"], c)
                                     for c, f in enumerate(new[:-1])})
                        what[new[-1].key] = ("self", info["n"], None)
                        tasks.update(new)
                    continue
                if kind == "self":
                    inner[n] = result
                    continue
                done[2 * i + n] = result
                keys_done[i] = keys_done.get(i, 0) + 1
                if keys_done[i] == 2:
                    bar.update(m)
                # in chunk order, key 1 before key 2 in a chunk: an element's
                # pairs come from the first chunk that matched it
                while next_slot in done:
                    pairs = done.pop(next_slot)
                    if job.task["spec"].psm_f:
                        pairs = np.take(pairs, np.flatnonzero(active[pairs["id"]]))
                        active[pairs["id"]] = 0
                    found.append(pairs)
                    next_slot += 1
            return found, inner, active
        finally:
            self.cancel(job)

    def cancel(self, job: _Job) -> None:
        """Stop ``job``'s tasks and drop the workers' sides of its batch and
        its share directory (if any), in the background (:meth:`close`
        waits): freeing hundreds of megabytes takes a while, and the client
        has the pairs to sort meanwhile."""
        if job not in self._jobs:
            return
        self._jobs.remove(job)
        try:
            self.client.cancel(job.futures)
        except Exception:   # noqa: BLE001 (a lost cluster runs nothing more)
            pass
        try:
            self.client.run(_forget_batch, job.tag, wait=False)
        except Exception:   # noqa: BLE001 (a lost worker forgets by itself)
            pass
        job.futures = []
        if job.directory is None:
            return
        thread = threading.Thread(target=remove_share, args=(job.directory, job.lock),
                                  name="simdup-share-cleanup")
        thread.start()
        self._cleanups.append(thread)

    @staticmethod
    def _result(future):
        from dask.distributed import KilledWorker  # noqa: PLC0415 (optional: the dask install extra)

        try:
            return future.result()
        except KilledWorker as exc:
            raise ClusterError(f"Dask workers died running a task of the merge ({exc}); "
                               f"nothing of this batch was committed") from None
        except OSError as exc:
            raise ClusterError(
                f"a Dask worker could not use {exc.filename or 'a file'}: "
                f"{exc.strerror or exc}. The collection, the batch directories and the share "
                f"directory beside the collection must be on storage every worker sees, "
                f"under the same path, and the workers must run as the merge's user; "
                f"nothing of this batch was committed") from None
