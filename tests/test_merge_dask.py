"""``simdup merge --workers/--scheduler``: the collection scan on a real Dask
cluster (``LocalCluster``, worker processes) gives the in-process merge's
pairs and collection, byte for byte; a worker killed mid-merge is recomputed
or stops the merge before its commit."""
import gzip
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

from scrapy_simdup.cli import main  # noqa: E402
from scrapy_simdup.exceptions import CorruptFileError  # noqa: E402
from scrapy_simdup.fingerprint.fingerprinter import Fingerprinter  # noqa: E402
from scrapy_simdup.merge import distributed as distributed_module  # noqa: E402
from scrapy_simdup.merge import merge, sharedir  # noqa: E402
from scrapy_simdup.merge.collection import Collection  # noqa: E402
from scrapy_simdup.merge.distributed import ClusterError, DaskScan  # noqa: E402
from scrapy_simdup.storage.batchfile import list_batches  # noqa: E402
from scrapy_simdup.storage.batchwriter import BatchWriter  # noqa: E402
from tests.data_root import by_data  # noqa: E402

# several runs, so several chunks per merge and PSM-F across chunks
CHUNK = by_data(48, 10)
FILES = ("H.bin", "H2.bin", "pairs.bin", "urls.bin", "urls.idx")
RUNS = {"psm-f": dict(first=True), "psm-a": dict(first=False), "exact": dict(exact=True)}


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=":0")
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


@pytest.fixture(scope="module")
def crawls(pages_root, tmp_path_factory):
    """A collection of real pages (spotsigs-dev stories and distractors,
    merged in several runs) and a crawl of more pages of the same stories."""
    stories = sorted(p for p in (pages_root / "spotsigs-dev").iterdir() if p.is_dir())[:8]
    files = [f for s in stories for f in sorted(s.glob("*.gz"))]
    files += sorted((pages_root / "distractors-dragnet").glob("*.gz"))[:60]
    random.Random(11).shuffle(files)
    fp = Fingerprinter()
    pages = [(f"https://{f.parent.name}.example/{f.name}",
              fp.fingerprint_html(gzip.decompress(f.read_bytes()))) for f in files]
    root = tmp_path_factory.mktemp("dask")
    half = len(pages) // 2
    for name, part in (("old", pages[:half]), ("new", pages[half:])):
        with BatchWriter(root / name, batch_size=20) as w:
            for url, page in part:
                w.append(page, url)
    merge([root / "old"], root / "collection", chunk_size=CHUNK, progress=False)
    return root


def _copy(crawls, tmp_path, name):
    shutil.copytree(crawls / "collection", tmp_path / name)
    return tmp_path / name


def _state(path):
    """The collection's files and header, without the time of the commit."""
    meta = json.loads((path / "collection.json").read_text())
    meta.pop("updated")
    return meta, {name: (path / name).read_bytes() for name in FILES}


@pytest.fixture(scope="module")
def in_process(crawls, tmp_path_factory):
    """``in_process(method)``: the in-process merge of the new crawl into a
    copy of the collection, ``(summary, its _state)``, merged once a method."""
    done = {}

    def result(method="psm-f"):
        if method not in done:
            coll = _copy(crawls, tmp_path_factory.mktemp("in-process"), method)
            summary = merge([crawls / "new"], coll, chunk_size=CHUNK, progress=False,
                            **RUNS[method])
            done[method] = (summary, _state(coll))
        return done[method]

    return result


def _assert_as_in_process(in_process, there, coll, method="psm-f"):
    """The Dask merge ``there`` into ``coll`` gave the in-process pairs and
    collection."""
    here, state = in_process(method)
    assert np.array_equal(here.pairs_array, there.pairs_array)
    assert _state(coll) == state


@pytest.mark.parametrize("method", sorted(RUNS))
def test_the_same_pairs_and_collection_as_in_process(crawls, tmp_path, client, in_process,
                                                     method):
    here, _ = in_process(method)
    there = merge([crawls / "new"], _copy(crawls, tmp_path, "there"), chunk_size=CHUNK,
                  progress=False, scheduler=client, **RUNS[method])
    assert here.chunks_scanned == there.chunks_scanned > 4
    assert here.pairs > by_data(90, 20)
    _assert_as_in_process(in_process, there, tmp_path / "there", method)
    assert there.cluster == "dask" and here.cluster is None
    if method == "psm-a":
        # pages with matches in more than one chunk of the old collection:
        # PSM-F's first chunk must win over later ones
        coll = Collection(crawls / "collection")
        starts = [start for start, _ in coll.chunk_plan(CHUNK)]
        p = here.pairs_array
        old = p["duplicate_of"] < coll.count
        chunk_of = np.searchsorted(starts, p["duplicate_of"][old], side="right")
        spans = {}
        for i, c in zip(p["id"][old].tolist(), chunk_of.tolist()):
            spans.setdefault(i, set()).add(c)
        assert sum(len(c) > 1 for c in spans.values()) > by_data(20, 3)


def test_the_cli_with_workers(crawls, tmp_path):
    outs = {}
    for name, extra in (("here", []), ("there", ["--workers", "2"])):
        coll = _copy(crawls, tmp_path, name)
        args = ["merge", str(crawls / "new"), "--collection", str(coll), "--batch-size",
                str(CHUNK), "--pairs", str(tmp_path / f"{name}.pairs"), "--clusters",
                str(tmp_path / f"{name}.clusters"), "--no-progress"]
        assert main(args + extra) == 0
        outs[name] = [(tmp_path / f"{name}.{x}").read_text() for x in ("pairs", "clusters")]
    assert outs["here"] == outs["there"]
    assert outs["here"][0].count("\n") > by_data(90, 20)
    assert _state(tmp_path / "here") == _state(tmp_path / "there")


class ExitOnScan(distributed.WorkerPlugin):
    """Kills its worker process when a task starts (a chunk scan, or the
    tasks named ``prefix``): once (a marker file says it happened) or every
    time."""

    def __init__(self, marker, always=False, prefix="simdup-scan-"):
        self.marker = str(marker)
        self.always = always
        self.prefix = prefix

    def transition(self, key, start, finish, **kwargs):
        name = key if isinstance(key, str) else str(key)
        if finish == "executing" and name.startswith(self.prefix):
            if self.always or not os.path.exists(self.marker):
                Path(self.marker).write_text(name)
                os._exit(1)


@pytest.mark.parametrize("task", ["simdup-build-", "simdup-scan-", "simdup-self-"])
def test_a_killed_worker_is_recomputed(crawls, tmp_path, client, in_process, task):
    client.register_plugin(ExitOnScan(tmp_path / "killed", prefix=task), name="exit-once")
    try:
        there = merge([crawls / "new"], _copy(crawls, tmp_path, "there"), chunk_size=CHUNK,
                      progress=False, scheduler=client)
    finally:
        client.unregister_worker_plugin("exit-once")
    assert (tmp_path / "killed").read_text().startswith(task)   # a worker died mid-merge
    _assert_as_in_process(in_process, there, tmp_path / "there")


def test_workers_that_keep_dying_leave_the_collection_intact(crawls, tmp_path, in_process):
    import dask

    coll = _copy(crawls, tmp_path, "coll")
    before = _state(coll)
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                           dashboard_address=":0")
        with cluster, distributed.Client(cluster) as c:
            c.register_plugin(ExitOnScan(tmp_path / "killed", always=True), name="exit")
            with pytest.raises(ClusterError, match="nothing of this batch was committed"):
                merge([crawls / "new"], coll, chunk_size=CHUNK, progress=False, scheduler=c)
    assert (tmp_path / "killed").exists()
    assert _state(coll) == before
    # and the next merge (in-process) takes the batches as if nothing happened
    again = merge([crawls / "new"], coll, chunk_size=CHUNK, progress=False)
    assert np.array_equal(again.pairs_array, in_process()[0].pairs_array)


class RecordTasks(distributed.WorkerPlugin):
    """Appends the key of each task its worker starts to a file."""

    def __init__(self, path):
        self.path = str(path)

    def transition(self, key, start, finish, **kwargs):
        if finish == "executing":
            with open(self.path, "a") as f:
                f.write(f"{key}\n")


def _on_connect(monkeypatch, plugins: dict):
    """Register ``plugins`` (``{name: WorkerPlugin}``) on the cluster a
    ``--workers`` merge starts, before its first task."""
    real = DaskScan._connect

    def connect(self):
        new = self.client is None
        client = real(self)
        if new:
            for name, plugin in plugins.items():
                client.register_plugin(plugin, name=name)
        return client

    monkeypatch.setattr(DaskScan, "_connect", connect)


def _sides_held() -> int:
    """On a worker: how many batches it holds sides of."""
    return len(distributed_module._worker_sides)


@pytest.mark.parametrize("method", sorted(RUNS))
def test_one_worker_builds_once_a_batch_and_shares_nothing(crawls, tmp_path, monkeypatch,
                                                            in_process, method):
    """``--workers 1``: both sides of a batch built by one task (``Q`` read
    once), kept in the worker's memory, no share directory."""
    made = _share_dirs(monkeypatch)
    _on_connect(monkeypatch, {"record": RecordTasks(tmp_path / "tasks")})
    there = merge([crawls / "new"], _copy(crawls, tmp_path, "there"), chunk_size=CHUNK,
                  progress=False, workers=1, **RUNS[method])
    assert there.cluster == "dask, 1 local worker"
    _assert_as_in_process(in_process, there, tmp_path / "there", method)
    assert made == []
    started = (tmp_path / "tasks").read_text().split()
    builds = [key for key in started if key.startswith("simdup-build-")]
    batches = {key.split("-")[2] for key in started}
    assert len(batches) > 1 and len(builds) == len(batches)


@pytest.mark.parametrize("task", ["simdup-build-", "simdup-scan-", "simdup-self-"])
def test_the_worker_replacing_a_lost_one_builds_its_own_sides(crawls, tmp_path, monkeypatch,
                                                             in_process, task):
    """``--workers 1`` shares nothing, so the worker that replaces a killed
    one builds the sides it needs itself."""
    _on_connect(monkeypatch, {"exit-once": ExitOnScan(tmp_path / "killed", prefix=task)})
    there = merge([crawls / "new"], _copy(crawls, tmp_path, "there"), chunk_size=CHUNK,
                  progress=False, workers=1)
    assert (tmp_path / "killed").read_text().startswith(task)
    _assert_as_in_process(in_process, there, tmp_path / "there")


def test_a_worker_of_two_threads(crawls, tmp_path, in_process):
    """Two task threads share their worker's sides (one maps or builds each,
    the other waits), with every method; the sides are dropped after."""
    cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=True,
                                       dashboard_address=":0")
    with cluster, distributed.Client(cluster) as c:
        for method, kw in sorted(RUNS.items()):
            here, _ = in_process(method)
            there = merge([crawls / "new"], _copy(crawls, tmp_path, f"there-{method}"),
                          chunk_size=CHUNK, progress=False, scheduler=c, **kw)
            assert np.array_equal(here.pairs_array, there.pairs_array), method
        _assert_sides_dropped(c)


def test_sides_of_a_killed_merge_are_dropped_by_the_next(crawls, tmp_path, client, monkeypatch):
    """A merge killed outright never tells the workers that its batch is
    over; once its share directory is gone (the next merge sweeps it), the
    next merge's tasks drop its sides."""
    with monkeypatch.context() as m:
        # (a lambda goes to the workers by value: they are never told)
        m.setattr(distributed_module, "_forget_batch", lambda tag: None)
        merge([crawls / "new"], _copy(crawls, tmp_path, "killed"), chunk_size=CHUNK,
              progress=False, scheduler=client)
    assert any(client.run(_sides_held).values())
    merge([crawls / "new"], _copy(crawls, tmp_path, "next"), chunk_size=CHUNK,
          progress=False, scheduler=client)
    _assert_sides_dropped(client)


def _assert_sides_dropped(client, seconds=20):
    """Every worker drops the sides of a merge's batches (told without
    waiting for an answer, so it may take a moment)."""
    deadline = time.monotonic() + seconds
    while any(client.run(_sides_held).values()):
        assert time.monotonic() < deadline, client.run(_sides_held)
        time.sleep(0.05)


def test_an_in_process_merge_does_not_import_dask(crawls, tmp_path):
    coll = _copy(crawls, tmp_path, "coll")
    code = ("import sys; from scrapy_simdup.cli import main; "
            f"code = main(['merge', {str(crawls / 'new')!r}, '--collection', {str(coll)!r}, "
            "'--json']); "
            "assert not [m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')]; "
            "sys.exit(code)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["cluster"] is None


def _share_dirs(monkeypatch):
    """The share directories the Dask merges of this test make."""
    made = []
    real = DaskScan._share_directory

    def spy(self, *args):
        directory, lock = real(self, *args)
        made.append(directory)
        return directory, lock

    monkeypatch.setattr(DaskScan, "_share_directory", spy)
    return made


@pytest.mark.parametrize("where", ["memory", "beside the collection"])
def test_the_share_directory_is_removed_after_the_merge(crawls, tmp_path, client, monkeypatch,
                                                         in_process, where):
    if where == "memory" and not distributed_module.LOCAL_SHARE.is_dir():
        pytest.skip("no /dev/shm on this machine")
    if where != "memory":       # as for workers on other machines
        monkeypatch.setattr(distributed_module, "LOCAL_SHARE", tmp_path / "absent")
    made = _share_dirs(monkeypatch)
    there = merge([crawls / "new"], _copy(crawls, tmp_path, "there"), chunk_size=CHUNK,
                  progress=False, scheduler=client)
    assert np.array_equal(in_process()[0].pairs_array, there.pairs_array)
    root = distributed_module.LOCAL_SHARE if where == "memory" else tmp_path
    assert made and all(d.parent == root and d.name.startswith(".simdup-scan-") for d in made)
    assert not any(d.exists() for d in made)
    _assert_sides_dropped(client)


def test_a_damaged_batch_is_left_out_as_in_process(crawls, tmp_path, client, monkeypatch):
    # groups of two batches (of 20): the damaged second batch is in the first
    # group, so that nothing is appended before the damage is found
    chunk = max(CHUNK, 40)
    new = tmp_path / "new"
    shutil.copytree(crawls / "new", new)
    npy = list_batches(new)[1].with_suffix(".npy")
    data = bytearray(npy.read_bytes())
    data[-3] ^= 0xFF
    npy.write_bytes(bytes(data))
    here = merge([new], _copy(crawls, tmp_path, "here"), chunk_size=chunk, progress=False,
                 skip_damaged=True)
    made = _share_dirs(monkeypatch)
    there = merge([new], _copy(crawls, tmp_path, "there"), chunk_size=chunk, progress=False,
                  skip_damaged=True, scheduler=client)
    assert len(there.damaged) == 1 and there.damaged == here.damaged
    assert np.array_equal(here.pairs_array, there.pairs_array)
    assert _state(tmp_path / "here") == _state(tmp_path / "there")
    # without --skip-damaged: refused, the started tasks cancelled, nothing committed
    before = _state(_copy(crawls, tmp_path, "refused"))
    with pytest.raises(CorruptFileError, match="--skip-damaged"):
        merge([new], tmp_path / "refused", chunk_size=chunk, progress=False, scheduler=client)
    assert _state(tmp_path / "refused") == before
    assert not [p for d in made for p in d.parent.glob(d.name + "*")]


def test_the_index_engine_runs_in_process_only(crawls, tmp_path):
    with pytest.raises(ValueError, match="in-process only"):
        merge([crawls / "new"], _copy(crawls, tmp_path, "c"), engine="index", workers=1,
              progress=False)


def test_share_directories_of_killed_merges_are_swept(crawls, tmp_path, client, monkeypatch):
    share = tmp_path / "shm"
    share.mkdir()
    monkeypatch.setattr(distributed_module, "LOCAL_SHARE", share)
    prefix = sharedir.SHARE_PREFIX
    stale = share / f"{prefix}killed"           # its lock file, held by no one
    stale.mkdir()
    (stale / sharedir.SHARE_LOCK).write_text("")
    (stale / "0-x-low.npy").write_bytes(b"left")
    beside = tmp_path / f"{prefix}killed2"      # beside the collection
    beside.mkdir()
    (beside / sharedir.SHARE_LOCK).write_text("")
    cut = share / f"{prefix}cut-removed"        # a removal cut short
    cut.mkdir()
    old = share / f"{prefix}nolock-old"         # killed before it took its lock
    old.mkdir()
    os.utime(old, (1, 1))
    young = share / f"{prefix}nolock-young"     # about to take its lock
    young.mkdir()
    running, lock = sharedir.new_share_directory(share)  # a merge still running
    other = share / "simdup-scan-not-ours"
    other.mkdir()
    try:
        merge([crawls / "new"], _copy(crawls, tmp_path, "c"), chunk_size=CHUNK,
              progress=False, scheduler=client)
        assert not stale.exists() and not beside.exists() and not cut.exists()
        assert not old.exists()
        assert young.exists() and running.exists() and other.exists()
    finally:
        sharedir.remove_share(running, lock)


def test_the_workers_are_asked_whether_they_see_the_share_directory(tmp_path, client):
    scan = DaskScan(scheduler=client)
    scan._connect()
    assert scan._workers_see(tmp_path)
    assert not scan._workers_see(tmp_path / "not-there")
    scan.close()


def test_a_file_a_worker_cannot_open_is_explained(tmp_path, client):
    future = client.submit(open, str(tmp_path / "not-there"), pure=False)
    with pytest.raises(ClusterError, match="not-there.*storage every worker sees"):
        DaskScan._result(future)


def test_two_merges_share_a_cluster(crawls, tmp_path, client, in_process):
    """Two merges at once on one cluster (their batches' sides side by side
    on the workers) each give the in-process result."""
    from concurrent.futures import ThreadPoolExecutor

    methods = ("psm-f", "psm-a")
    with ThreadPoolExecutor(2) as pool:
        got = {method: pool.submit(merge, [crawls / "new"], _copy(crawls, tmp_path, method),
                                   chunk_size=CHUNK, progress=False, scheduler=client,
                                   **RUNS[method])
               for method in methods}
        for method, future in got.items():
            assert np.array_equal(future.result().pairs_array,
                                  in_process(method)[0].pairs_array)


def test_an_unreachable_scheduler_is_a_clear_error(crawls, tmp_path, monkeypatch, capsys):
    import socket

    with socket.socket() as s:          # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(distributed_module, "CONNECT_TIMEOUT", 2)
    coll = _copy(crawls, tmp_path, "coll")
    before = _state(coll)
    code = main(["merge", str(crawls / "new"), "--collection", str(coll), "--scheduler",
                 f"tcp://127.0.0.1:{port}", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "cannot start or reach the Dask scheduler" in err, err
    assert _state(coll) == before


def test_a_cluster_without_workers_is_a_clear_error(crawls, tmp_path, monkeypatch):
    monkeypatch.setattr(distributed_module, "CONNECT_TIMEOUT", 2)
    cluster = distributed.LocalCluster(n_workers=0, processes=True, dashboard_address=":0")
    with cluster, distributed.Client(cluster) as c:
        with pytest.raises(ClusterError, match="has no workers"):
            merge([crawls / "new"], _copy(crawls, tmp_path, "coll"), chunk_size=CHUNK,
                  progress=False, scheduler=c)


_DIE_AT_START = """
import os
import signal


def dask_setup(worker):
    os.kill(os.getpid(), signal.{signal})
"""


@pytest.mark.parametrize("signal", ["SIGKILL", "SIGTERM"])
def test_a_worker_killed_while_the_cluster_starts_is_a_clear_error(tmp_path, signal):
    """``--workers 2`` whose worker processes are killed as they start (a Dask
    preload script that kills its own process): exit 2 and one line saying
    the cluster could not start, no traceback, nothing merged."""
    from tests.batch_pages import features_page

    crawl = tmp_path / "crawl"
    with BatchWriter(crawl, batch_size=10) as w:
        for i in range(15):
            w.append(features_page([f"word{i}", "some", "page", "text"] * 20),
                     f"https://example.com/{i}")
    preload = tmp_path / "die_at_start.py"
    preload.write_text(_DIE_AT_START.format(signal=signal))
    # (the workers get the merge's own preload list, as WORKER_PRELOAD gives it)
    code = ("import sys; from scrapy_simdup.merge import distributed; "
            "distributed.WORKER_PRELOAD += (sys.argv[1],); "
            "from scrapy_simdup.cli import main; sys.exit(main(sys.argv[2:]))")
    coll = tmp_path / "collection"
    proc = subprocess.run([sys.executable, "-c", code, str(preload), "merge", str(crawl),
                           "--collection", str(coll), "--workers", "2", "--no-progress"],
                          capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("simdup: error: cannot start the Dask cluster (a local "
                                  "cluster of 2 workers): "), proc.stderr
    assert proc.stderr.rstrip().endswith("nothing was merged"), proc.stderr
    assert Collection(coll).count == 0
    # the same merge without the failing workers goes through
    assert main(["merge", str(crawl), "--collection", str(coll), "--workers", "2",
                 "--no-progress"]) == 0
