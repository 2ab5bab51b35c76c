"""SIMDUP_DIR: the index survives a stop, a restart and a kill -9; batch files are written.

Real crawls in fresh processes (tests/crawl_runner.py) against a local HTTP server.
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from scrapy_simdup.exceptions import CorruptFileError
from scrapy_simdup.fingerprint.fingerprinter import fingerprint_features
from scrapy_simdup.fingerprint.idf import IdfTable
from scrapy_simdup.index.backend import MemoryBackend
from scrapy_simdup.index.snapshot import RECORD_BYTES, IndexStore, records
from scrapy_simdup.index.verified import VerifiedIndex
from scrapy_simdup.storage.batchfile import list_batches, read_batch
from tests.crawl_jobs import checkout_env, run_job, start_job, write_job
from tests.data_root import PAGES_ROOT
from tests.http_server import PageServer

DATA = PAGES_ROOT / "article-extraction-benchmark" / "ground-truth.json"
N_PAGES = 40

pytestmark = pytest.mark.slow


def _page(title, paragraphs):
    body = "\n".join(f"<p>{p}</p>" for p in paragraphs)
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title></head>"
            f"<body><article><h1>{title}</h1>{body}</article></body></html>").encode()


@pytest.fixture(scope="module")
def site():
    truth = json.loads(DATA.read_text("utf-8"))
    pages = {}
    for key in sorted(truth):
        paragraphs = [p.strip() for p in truth[key]["articleBody"].split("\n")
                      if len(p.split()) >= 8]
        if sum(len(p.split()) for p in paragraphs) >= 300:
            pages[f"p{len(pages)}"] = _page(paragraphs[0][:60], paragraphs)
        if len(pages) == N_PAGES:
            break
    assert len(pages) == N_PAGES
    with PageServer(pages) as server:
        server.names = sorted(pages, key=lambda n: int(n[1:]))
        yield server


def _job(tmp_path, site, simdup_dir, extra=None, name="job", **job_extra):
    # every request of these crawls is a start request (crawl_runner's start()),
    # which is not dropped by default: these tests check dropping
    settings = {"LOG_LEVEL": "INFO", "SIMDUP_ENABLED": True, "SIMDUP_DIR": str(simdup_dir),
                "SIMDUP_BATCH_SIZE": 5, "CONCURRENT_REQUESTS": 1,
                "SIMDUP_DROP_START_REQUESTS": True,
                "ADDONS": {"scrapy_simdup.Addon": 0}, **(extra or {})}
    job = {"settings": settings, "mode": "pages",
           "requests": [{"url": site.url(f"/page/{n}")} for n in site.names], **job_extra}
    return write_job(tmp_path / f"{name}.json", job), tmp_path / f"{name}-result.json"


def _crawl(tmp_path, site, simdup_dir, extra=None, name="job", **job_extra):
    job_path, result_path = _job(tmp_path, site, simdup_dir, extra, name, **job_extra)
    return run_job(job_path, result_path, cwd=tmp_path)


def test_restart_recognises_pages_and_flushes_batches(site, tmp_path):
    d = tmp_path / "simdup"
    first = _crawl(tmp_path, site, d, name="first")
    assert first["error"] is None
    assert first["stats"].get("simdup/checked") == N_PAGES
    assert first["stats"].get("simdup/duplicates", 0) == 0
    # every checked page is in a batch file: 8 full batches of 5
    batches = [read_batch(p) for p in list_batches(d)]
    assert sum(len(b) for b in batches) == N_PAGES and len(batches) == N_PAGES // 5
    urls = [u for b in batches for u in b.urls]
    assert sorted(urls) == sorted(site.url(f"/page/{n}") for n in site.names)
    assert IndexStore(d).load()[0].shape == (N_PAGES,)
    recipe = IndexStore(d).meta["fingerprint"]     # the Fingerprinter recipe, everywhere
    assert recipe and all(b.meta.get("fingerprint") == recipe for b in batches)
    # a re-crawl with the same SIMDUP_DIR recognises every page: as a revisit
    # (kept), and the gzip copies of 5 pages, under other URLs, as near-duplicates
    copies = [site.url(f"/gz/{n}") for n in site.names[:5]]
    second = _crawl(tmp_path, site, d, name="second", requests=[
        {"url": site.url(f"/page/{n}")} for n in site.names] + [{"url": u} for u in copies])
    assert second["stats"].get("simdup/index_restored") == N_PAGES
    assert second["stats"].get("simdup/revisits") == N_PAGES
    assert second["stats"].get("simdup/duplicates") == 5
    assert len(second["responses"]) == N_PAGES
    assert all(r["simdup"]["duplicate_of"] is None for r in second["responses"])
    dropped = {r["url"]: r for r in second["dropped"]}
    assert sorted(dropped) == sorted(copies)
    assert all(r["duplicate_of"] == url.replace("/gz/", "/page/") and r["distance"] == 0
               for url, r in dropped.items())
    # a revisit is not stored again; a near-duplicate is, under its own key
    stored, keys = IndexStore(d).load()
    assert stored.shape == (N_PAGES + 5,)
    assert sorted(keys[N_PAGES:]) == sorted(copies)
    # and the offline merge finds each page twice: pairs across the two crawls
    n_second = N_PAGES + 5
    out = subprocess.run([sys.executable, "-m", "scrapy_simdup.cli", "merge", str(d), "--json"],
                         capture_output=True, text=True, env=checkout_env(), timeout=120)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["fingerprints"] == N_PAGES + n_second
    assert summary["duplicates"] == n_second
    # `simdup stats` also tells what the crawls found online, from the batch
    # headers: the near-duplicates, not the revisits
    out = subprocess.run([sys.executable, "-m", "scrapy_simdup.cli", "stats", str(d), "--json"],
                         capture_output=True, text=True, env=checkout_env(), timeout=120)
    (entry,) = json.loads(out.stdout)["directories"]
    assert entry["online_duplicates"] == 5 and entry["online_histogram"] == {"0": 5}
    out = subprocess.run([sys.executable, "-m", "scrapy_simdup.cli", "stats", str(d)],
                         capture_output=True, text=True, env=checkout_env(), timeout=120)
    assert f"found online: 5 of {N_PAGES + n_second} checked" in out.stdout, out.stdout


def test_unwritable_dir_mid_crawl_keeps_pages_and_fingerprints(site, tmp_path):
    """SIMDUP_DIR stops being writable for a while (here: replaced by a file):
    every page still reaches the spider, the failed writes are counted and
    logged, and the batches are written once it is back: nothing is lost."""
    d = tmp_path / "simdup"
    result = _crawl(tmp_path, site, d, block_path={"path": str(d), "from": 7, "to": 23})
    assert result["error"] is None
    assert len(result["responses"]) == N_PAGES
    assert result["stats"].get("simdup/checked") == N_PAGES
    assert result["stats"].get("simdup/errors", 0) >= 1
    assert result["stats"].get("finish_reason") == "finished"
    assert any("cannot write batch" in line for line in result["log"])
    assert "Traceback" not in result["stderr"]    # an expected I/O failure: its message only
    batches = [read_batch(p) for p in list_batches(d)]
    urls = sorted(u for b in batches for u in b.urls)
    assert urls == sorted(site.url(f"/page/{n}") for n in site.names)
    assert IndexStore(d).load()[0].shape == (N_PAGES,)


def test_unwritable_dir_at_close_is_reported(site, tmp_path):
    """Still unwritable when the spider closes: an ERROR says how many
    fingerprints are lost and where, counted in simdup/lost (no traceback
    from a signal handler); mid-crawl the failed batch was kept for later."""
    d = tmp_path / "simdup"
    result = _crawl(tmp_path, site, d, block_path={"path": str(d), "from": 37, "to": -1})
    assert result["error"] is None
    assert len(result["responses"]) == N_PAGES
    assert result["stats"].get("simdup/errors", 0) >= 1
    # pages 36 to 40: their batch failed at the 40th, and again at close
    assert result["stats"].get("simdup/lost") == 5
    mid = [line for line in result["log"] if "tried again later" in line]
    assert mid and all(line.startswith("ERROR") for line in mid)
    (close,) = [line for line in result["log"] if "at close" in line]
    assert close.startswith("ERROR") and "5 checked fingerprints" in close
    assert "are lost" in close and str(d) in close and "tried again later" not in close
    assert "Error caught on signal handler" not in result["stderr"]


def test_sigkill_mid_crawl_then_restart(site, tmp_path):
    d = tmp_path / "simdup"
    job_path, result_path = _job(tmp_path, site, d, {"DOWNLOAD_DELAY": 0.15}, name="killed")
    proc = start_job(job_path, result_path, cwd=tmp_path, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while len(list_batches(d)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
            assert proc.poll() is None, "the crawl ended before it could be killed"
        time.sleep(0.1)   # let it get into the middle of the next batch
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not result_path.exists()           # it really died mid-run
    flushed = [read_batch(p) for p in list_batches(d)]   # every committed batch is intact
    n_flushed = sum(len(b) for b in flushed)
    assert 15 <= n_flushed < N_PAGES and n_flushed % 5 == 0
    values, keys = IndexStore(d).load()       # the snapshot is intact
    flushed_urls = {u for b in flushed for u in b.urls}
    # it holds the flushed pages (the kill can only fall between a batch file
    # and its snapshot append: at most one batch of difference)
    assert len(values) >= 15 and abs(len(values) - n_flushed) <= 5
    assert set(keys) <= flushed_urls or flushed_urls <= set(keys)
    # restart: exactly the pages in the snapshot are recognised, the rest is new
    again = _crawl(tmp_path, site, d, {"SIMDUP_ON_REVISIT": "drop"}, name="restart")
    assert again["error"] is None
    assert again["stats"].get("simdup/index_restored") == len(values)
    assert again["stats"].get("simdup/revisits") == len(values)
    dropped = {r["url"] for r in again["dropped"]}
    assert dropped == set(keys)
    assert all(r["distance"] == 0 for r in again["dropped"])
    assert again["stats"].get("simdup/checked") == N_PAGES


def test_restart_with_other_feature_settings_is_refused(site, tmp_path):
    d = tmp_path / "simdup"
    _crawl(tmp_path, site, d, name="first")
    assert "shingles" in IndexStore(d).meta["fingerprint"]
    # other features make other fingerprints: comparing them would silently find nothing
    other = _crawl(tmp_path, site, d, {"SIMDUP_SHINGLE_SIZE": 2}, name="other")
    assert other["error"] and "ValueError" in other["error"] and "SIMDUP_DIR" in other["error"]
    assert not other["responses"]
    # the saved index is untouched: the original settings still recognise every page
    again = _crawl(tmp_path, site, d, name="again")
    assert again["error"] is None and again["stats"].get("simdup/revisits") == N_PAGES


# the recipe of the version that wrote format 1 (before the sketch's ".s1")
FORMAT_1_RECIPE = "simdup-fp/t2.x3.f1:shingles+spots:k3:logtf:main:::lxml"


def _format_1_snapshot(directory: Path, keys: list[str]) -> dict[str, bytes]:
    """An index snapshot as the version before the verification sketch wrote
    it: index.values holds key 1 alone (8 bytes a page). Returns its files."""
    from zlib import crc32
    directory.mkdir(parents=True, exist_ok=True)
    values = np.random.default_rng(1).integers(0, 2**63, len(keys), dtype=np.int64)
    values_data = values.astype("<u8").tobytes()
    keys_data = "".join(k + "\n" for k in keys).encode()
    header = {"format": "simdup-index", "version": 1, "count": len(keys),
              "values_bytes": len(values_data), "values_crc32": crc32(values_data),
              "keys_bytes": len(keys_data), "keys_crc32": crc32(keys_data),
              "saved": 1_700_000_000.0, "search": "psm", "distance": 9,
              "fingerprint": FORMAT_1_RECIPE}
    files = {"index.values": values_data, "index.keys": keys_data,
             "index.json": json.dumps(header).encode()}
    for name, data in files.items():
        (directory / name).write_bytes(data)
    return files


def test_a_format_1_index_is_refused_below_the_integration_naming_no_setting(tmp_path):
    from scrapy_simdup import SimdupConfig, VerifiedIndex
    from scrapy_simdup.exceptions import ParameterError
    from scrapy_simdup.index.backend import MemoryBackend
    from scrapy_simdup.index.persist import restore
    from scrapy_simdup.integration.backends import make_backend
    files = _format_1_snapshot(tmp_path, [f"k{i}" for i in range(5)])
    for on_error in ("keep", "stop"):       # not a corrupt file: never moved aside
        with pytest.raises(ParameterError, match="index format 1") as err:
            restore(MemoryBackend(VerifiedIndex()), tmp_path, on_error=on_error,
                    fingerprint=FORMAT_1_RECIPE)
        assert err.value.parameter == "dir" and "SIMDUP_" not in str(err.value)
    config = SimdupConfig.from_settings({"SIMDUP_DIR": str(tmp_path)})
    with pytest.raises(ValueError, match="^SIMDUP_DIR: .*index format 1"):
        make_backend(config, None)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == files


def test_a_format_1_index_is_refused_at_start_up_and_left_as_it_is(site, tmp_path):
    """A SIMDUP_DIR saved before the verification sketch: its pages cannot be
    verified, nor fingerprinted again from 8 bytes. The crawl stops at
    start-up naming SIMDUP_DIR and saying what to do; the files are not
    moved aside as a corrupt snapshot would be (SIMDUP_ON_ERROR = "keep", the
    default), and following the advice starts a crawl afresh."""
    d = tmp_path / "simdup"
    files = _format_1_snapshot(d, [site.url(f"/page/{n}") for n in site.names])
    refused = _crawl(tmp_path, site, d, name="refused")
    error = refused["error"]
    assert error and error.startswith("ValueError: SIMDUP_DIR: "), error
    assert f"the index in {d} was saved by an older scrapy-simdup (index format 1" in error
    assert f"Use a new directory, or move {d} away to start over" in error
    assert not refused["responses"] and not refused["dropped"]
    assert "simdup/checked" not in refused["stats"]
    # untouched: same bytes, nothing moved aside, no batch written
    assert {name: (d / name).read_bytes() for name in files} == files
    assert sorted(p.name for p in d.glob("index.*")) == sorted(files)
    assert not list(d.glob("*corrupt*")) and not list_batches(d)
    # what the message says: moved away, the crawl starts over with a new index
    d.rename(tmp_path / "simdup-format-1")
    fresh = _crawl(tmp_path, site, d, name="fresh")
    assert fresh["error"] is None and fresh["stats"]["simdup/checked"] == N_PAGES
    assert IndexStore(d).meta["version"] == 2 and len(IndexStore(d).load()[0]) == N_PAGES


def test_corrupt_index_is_reported_by_name(site, tmp_path):
    d = tmp_path / "simdup"
    _crawl(tmp_path, site, d, name="first")
    values_file = d / "index.values"
    data = bytearray(values_file.read_bytes())
    data[3] ^= 0x55
    values_file.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError, match="index.values.*checksum"):
        IndexStore(d).load()
    # SIMDUP_ON_ERROR=keep (default): logged by name, moved aside, the crawl runs with a fresh index
    again = _crawl(tmp_path, site, d, name="again")
    assert again["error"] is None
    assert again["stats"].get("simdup/index_corrupt") == 1
    assert again["stats"].get("simdup/duplicates", 0) == 0
    assert any("index.values" in line and "corrupt" in line for line in again["log"])
    assert "Traceback" not in again["stderr"]
    assert list(d.glob("index.values.corrupt-*"))
    # the fresh index was saved again and is valid
    assert len(IndexStore(d).load()[0]) == N_PAGES


@pytest.mark.parametrize("name", ["index.values", "index.keys"])
def test_dangling_symlink_in_place_of_a_snapshot_file_is_moved_aside(site, tmp_path, name):
    """A dangling symlink where index.values/keys was is damage like any other:
    reported and moved aside (the link itself), so this crawl's saves work and
    the next crawl restores them (left in place, every save failed and every
    later crawl restored 0 and lost all it checked)."""
    d = tmp_path / "simdup"
    _crawl(tmp_path, site, d, name="first")
    (d / name).unlink()
    (d / name).symlink_to(tmp_path / "gone" / name)     # no write can follow it
    again = _crawl(tmp_path, site, d, name="again")
    assert again["error"] is None and "Traceback" not in again["stderr"]
    assert again["stats"].get("simdup/index_corrupt") == 1
    assert "simdup/lost" not in again["stats"]
    assert any(name in line and "dangling symlink" in line for line in again["log"])
    (aside,) = d.glob(f"{name}.corrupt-*")
    assert aside.is_symlink() and not (d / name).is_symlink()
    third = _crawl(tmp_path, site, d, name="third")
    assert third["error"] is None and "simdup/lost" not in third["stats"]
    assert third["stats"].get("simdup/index_restored") == N_PAGES
    assert "simdup/index_corrupt" not in third["stats"]


def test_corrupt_index_with_stop_ends_the_crawl_without_a_traceback(site, tmp_path):
    d = tmp_path / "simdup"
    _crawl(tmp_path, site, d, name="first")
    data = bytearray((d / "index.values").read_bytes())
    data[3] ^= 0x55
    (d / "index.values").write_bytes(bytes(data))
    stopped = _crawl(tmp_path, site, d, {"SIMDUP_ON_ERROR": "stop"}, name="stopped")
    assert stopped["error"] is None
    assert stopped["stats"].get("finish_reason") == "simdup_corrupt_index"
    assert not stopped["responses"]                 # no page reached the spider unchecked
    assert any("index.values" in line and "corrupt" in line for line in stopped["log"])
    assert "Traceback" not in stopped["stderr"]
    assert (d / "index.values").read_bytes() == bytes(data)     # left as it was


def test_simdup_dir_that_cannot_be_a_directory(tmp_path):
    from scrapy_simdup.index.crawldir import prepare_directory
    a_file = tmp_path / "settings.py"
    a_file.write_text("")
    with pytest.raises(ValueError, match="settings.py' is not a directory") as err:
        prepare_directory(a_file)
    assert "SIMDUP_" not in str(err.value)      # the integration names the setting
    with pytest.raises(ValueError, match="below' cannot be used"):
        prepare_directory(a_file / "below")
    assert prepare_directory(tmp_path / "new" / "dir").is_dir()


def test_items_folder_that_is_a_file_fails_at_start_up_naming_simdup_dir(site, tmp_path):
    d = tmp_path / "simdup"
    d.mkdir()
    (d / "items").write_text("not a folder")
    result = _crawl(tmp_path, site, d)     # the add-on enables the item pipeline too
    assert result["error"].startswith("ValueError")
    assert "SIMDUP_DIR (items folder)" in result["error"] and "is not a directory" in result["error"]


def test_a_simdup_dir_in_use_by_another_crawl_is_refused_at_start_up(site, tmp_path):
    """Two crawls writing one SIMDUP_DIR would interleave record ids and index
    snapshots: the second one stops at start-up, naming the setting and the
    process holding the directory; once it is free, a crawl uses it."""
    from scrapy_simdup.index.crawldir import lock_crawl_directory
    d = tmp_path / "simdup"
    held = lock_crawl_directory(d)            # another crawl, in this test's process
    try:
        result = _crawl(tmp_path, site, d)
        assert result["error"].startswith("ValueError")
        assert "SIMDUP_DIR" in result["error"] and "in use by another crawl" in result["error"]
        assert f"process {os.getpid()}" in result["error"]
        assert not result["responses"] and not list_batches(d)
    finally:
        held.close()
    result = _crawl(tmp_path, site, d)
    assert result["error"] is None and result["stats"]["simdup/checked"] == N_PAGES
    other = tmp_path / "other"
    (other / ".crawl.lock").mkdir(parents=True)     # cannot be opened as a file
    with pytest.raises(ValueError, match="other.* cannot be used") as err:
        lock_crawl_directory(other)
    assert "SIMDUP_" not in str(err.value)
    # a symlink is not followed: the lock file is truncated and written
    linked = tmp_path / "linked"
    linked.mkdir()
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    (linked / ".crawl.lock").symlink_to(target)
    with pytest.raises(ValueError, match="linked.* symbolic link"):
        lock_crawl_directory(linked)
    assert target.read_text() == "keep me\n"


def test_index_store_append_and_truncated_tail(tmp_path):
    store = IndexStore(tmp_path)
    store.append(records([1, 2, 3]), ["a", "b", "c"])
    store.append(records([4]), ["d\n"])
    # an append cut short by a crash: bytes past the committed length are ignored
    with open(tmp_path / "index.values", "ab") as f:
        f.write(b"\x07" * 5)
    values, keys = IndexStore(tmp_path).load()
    assert values["value"].tolist() == [1, 2, 3, 4] and keys == ["a", "b", "c", "d%0A"]
    IndexStore(tmp_path).append(records([5]), ["e"])
    assert IndexStore(tmp_path).load()[0]["value"].tolist() == [1, 2, 3, 4, 5]
    with open(tmp_path / "index.keys", "r+b") as f:
        f.truncate(3)
    with pytest.raises(CorruptFileError, match="index.keys.*truncated"):
        IndexStore(tmp_path).load()


def test_damaged_snapshot_headers_and_files_are_corrupt_not_crashes(tmp_path):
    """A header claiming 10**12 fingerprints is reported as corrupt before
    anything is allocated (it was a MemoryError at start-up); an index file
    replaced by a directory likewise (it was an IsADirectoryError)."""
    import json as _json
    IndexStore(tmp_path).append(records(np.arange(1, 4, dtype=np.uint64)), ["a", "b", "c"])
    header = _json.loads((tmp_path / "index.json").read_text())
    huge = {**header, "count": 10 ** 12, "values_bytes": RECORD_BYTES * 10 ** 12}
    (tmp_path / "index.json").write_text(_json.dumps(huge))
    with pytest.raises(CorruptFileError, match="index.values.*truncated"):
        IndexStore(tmp_path).load()
    (tmp_path / "index.json").write_text(_json.dumps(header))
    (tmp_path / "index.keys").unlink()
    (tmp_path / "index.keys").mkdir()
    with pytest.raises(CorruptFileError, match="index.keys.*directory"):
        IndexStore(tmp_path).load()


def test_index_data_without_its_header_is_corrupt_not_empty(tmp_path):
    """index.json deleted, index.values/keys left: reported (and moved aside),
    never silently taken for an empty index and overwritten."""
    from scrapy_simdup.index.persist import restore
    store = IndexStore(tmp_path)
    store.append(records(np.arange(1, 6, dtype=np.uint64)), [f"k{i}" for i in range(5)])
    (tmp_path / "index.json").unlink()
    assert IndexStore(tmp_path).exists()
    with pytest.raises(CorruptFileError, match="index.json"):
        restore(None, tmp_path, on_error="stop")
    assert restore(None, tmp_path, on_error="keep") == 0
    assert list(tmp_path.glob("index.values.corrupt-*"))
    assert not IndexStore(tmp_path).exists()


def test_idf_table_is_saved_and_a_restart_goes_on_with_it(site, tmp_path):
    d = tmp_path / "simdup"
    extra = {"SIMDUP_WEIGHTING": "idf", "SIMDUP_IDF_PAGES": 15}
    first = _crawl(tmp_path, site, d, extra, name="first")
    assert first["error"] is None and first["stats"].get("simdup/duplicates", 0) == 0
    assert [p.name for p in d.glob("idf-*.bin")] == ["idf-00015.bin"]
    table = IdfTable.load(d / "idf-00015.bin")
    assert table.frozen and table.pages == 15
    meta = IndexStore(d).meta
    assert meta["idf_file"] == "idf-00015.bin" and f"{table.table_id:016x}" in meta["fingerprint"]
    second = _crawl(tmp_path, site, d, {**extra, "SIMDUP_ON_REVISIT": "drop"}, name="second")
    assert second["error"] is None
    assert second["stats"].get("simdup/index_restored") == N_PAGES
    # every page is recognised: those checked after the table froze at distance 0,
    # the 15 it learned from within a few bits (each was weighed by the table so far)
    distances = sorted(r["distance"] for r in second["dropped"])
    assert len(distances) == N_PAGES
    assert distances.count(0) >= N_PAGES - 15 and distances[-1] <= 3
    assert IdfTable.load(d / "idf-00015.bin").table_id == table.table_id
    # a damaged table cannot be rebuilt and every batch was weighed with it: with
    # SIMDUP_ON_ERROR=keep the whole state goes into corrupt-<time>/ and the crawl starts afresh
    data = bytearray((d / "idf-00015.bin").read_bytes())
    data[4000] ^= 0x10
    (d / "idf-00015.bin").write_bytes(bytes(data))
    third = _crawl(tmp_path, site, d, extra, name="third")
    assert third["error"] is None and third["stats"].get("simdup/index_corrupt") == 1
    assert third["stats"].get("simdup/duplicates", 0) == 0
    assert any("idf-00015.bin" in line and "checksum" in line for line in third["log"])
    assert "Traceback" not in third["stderr"]
    (aside,) = d.glob("corrupt-*")
    assert (aside / "index.json").exists() and len(list_batches(aside)) == 2 * N_PAGES // 5
    assert IdfTable.load(next(d.glob("idf-*.bin"))).table_id != table.table_id
    # both directories still merge, each with its own table's fingerprints
    for directory, expected in ((d, N_PAGES), (aside, 2 * N_PAGES)):
        out = subprocess.run([sys.executable, "-m", "scrapy_simdup.cli", "merge",
                              str(directory), "--json"], capture_output=True, text=True,
                             env=checkout_env(), timeout=120)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["fingerprints"] == expected


def test_idf_table_commits_with_the_index(site, tmp_path):
    """While it learns, the saved table holds exactly the kept pages of the
    saved index; a missing table is reported like a corrupt one."""
    d = tmp_path / "simdup"
    extra = {"SIMDUP_WEIGHTING": "idf", "SIMDUP_IDF_PAGES": 100}
    first = _crawl(tmp_path, site, d, extra, name="first")
    assert first["error"] is None
    assert [p.name for p in d.glob("idf-*.bin")] == [f"idf-{N_PAGES:05d}.bin"]
    assert IdfTable.load(d / f"idf-{N_PAGES:05d}.bin").pages == len(IndexStore(d).load()[0])
    (d / f"idf-{N_PAGES:05d}.bin").unlink()
    again = _crawl(tmp_path, site, d, {**extra, "SIMDUP_ON_ERROR": "stop"}, name="again")
    assert again["error"] is None and not again["responses"]
    assert again["stats"].get("finish_reason") == "simdup_corrupt_index"
    assert any("idf-00040.bin" in line and "missing" in line for line in again["log"])
    assert "Traceback" not in again["stderr"]


def _corrupt_saved_index(directory):
    IndexStore(directory).append(records(np.arange(1, 6)), [f"k{i}" for i in range(5)],
                                 {"fingerprint": "recipe-A"})
    data = bytearray((directory / "index.values").read_bytes())
    data[3] ^= 0x55
    (directory / "index.values").write_bytes(bytes(data))
    return bytes(data)


def test_a_corrupt_index_restored_with_stop_names_no_setting_below_the_integration(
        tmp_path, caplog):
    """restore() raises the file's error and counts it through its callback;
    the integration's make_backend() logs it naming SIMDUP_ON_ERROR."""
    from scrapy_simdup import VerifiedIndex
    from scrapy_simdup.index.backend import MemoryBackend
    from scrapy_simdup.index.persist import restore
    data = _corrupt_saved_index(tmp_path)
    told = {}
    with pytest.raises(CorruptFileError, match="index.values.*checksum") as err:
        restore(MemoryBackend(VerifiedIndex()), tmp_path, on_error="stop",
                on_stat=told.__setitem__, fingerprint="recipe-A")
    assert "SIMDUP_" not in str(err.value) and "SIMDUP_" not in caplog.text
    assert told == {"index_corrupt": 1}
    assert (tmp_path / "index.values").read_bytes() == data      # left as it was

    from scrapy_simdup import SimdupConfig
    from scrapy_simdup.integration.backends import make_backend

    class Stats(dict):
        set_value = dict.__setitem__

    class Crawler:
        stats = Stats()
    config = SimdupConfig.from_settings({"SIMDUP_DIR": str(tmp_path), "SIMDUP_ON_ERROR": "stop"})
    with pytest.raises(CorruptFileError):
        make_backend(config, Crawler(), fingerprint="recipe-A")
    assert "index.values" in caplog.text and "SIMDUP_ON_ERROR=stop" in caplog.text
    assert Crawler.stats == {"simdup/index_corrupt": 1}


def test_an_index_of_another_recipe_names_simdup_dir_only_in_the_integration(tmp_path):
    from scrapy_simdup import SimdupConfig, VerifiedIndex
    from scrapy_simdup.exceptions import ParameterError
    from scrapy_simdup.index.backend import MemoryBackend
    from scrapy_simdup.index.persist import restore
    from scrapy_simdup.integration.backends import make_backend
    IndexStore(tmp_path).append(records(np.arange(1, 6)), [f"k{i}" for i in range(5)],
                                {"fingerprint": "recipe-A"})
    with pytest.raises(ParameterError, match="made with 'recipe-A'.*cannot be compared") as err:
        restore(MemoryBackend(VerifiedIndex()), tmp_path, fingerprint="recipe-B")
    assert err.value.parameter == "fingerprint" and "SIMDUP_" not in str(err.value)
    config = SimdupConfig.from_settings({"SIMDUP_DIR": str(tmp_path)})
    with pytest.raises(ValueError, match="SIMDUP_DIR: .*made with 'recipe-A'"):
        make_backend(config, None, fingerprint="recipe-B")
    told = {}
    backend = MemoryBackend(VerifiedIndex())
    assert restore(backend, tmp_path, on_stat=told.__setitem__, fingerprint="recipe-A") == 5
    assert told == {"index_restored": 5} and len(backend) == 5


def test_a_kill_between_table_and_index_commits_keeps_the_previous_pair(tmp_path):
    from scrapy_simdup.index.persist import PersistentBatchWriter, load_idf

    backend = MemoryBackend(VerifiedIndex())
    table = IdfTable(learn_pages=50, bits=10)
    writer = PersistentBatchWriter(tmp_path, batch_size=3, backend=backend, idf=table)
    writer.store = IndexStore(tmp_path)
    assert (tmp_path / "idf-00000.bin").exists()          # the id is on disk at once
    pages = [fingerprint_features([f"w{i}-{j}" for j in range(40)]) for i in range(6)]
    for i in range(3):
        table.learn(np.array([i << 54], np.uint64))
        writer.add(pages[i], f"u{i}", asyncio.run(backend.check_and_add(pages[i], f"u{i}")))
        # (the third add flushes a batch and snapshots the index)
    assert IndexStore(tmp_path).meta["idf_file"] == "idf-00003.bin"
    assert [p.name for p in tmp_path.glob("idf-*.bin")] == ["idf-00003.bin"]

    def killed(*args, **kwargs):
        raise OSError("killed before the index committed")
    writer.store.append = killed
    for i in range(3, 6):
        table.learn(np.array([i << 54], np.uint64))
        try:
            writer.add(pages[i], f"u{i}", asyncio.run(backend.check_and_add(pages[i], f"u{i}")))
        except OSError:
            pass
    assert (tmp_path / "idf-00006.bin").exists()          # saved, never committed
    back = load_idf(tmp_path)
    assert back.pages == 3 == len(IndexStore(tmp_path).load()[0])
    assert [p.name for p in tmp_path.glob("idf-*.bin")] == ["idf-00003.bin"]


def test_load_idf_corrupt_table_stops_or_goes_aside_with_the_index(tmp_path):
    from scrapy_simdup.index.persist import load_idf
    assert load_idf(tmp_path) is None                  # a new crawl
    table = IdfTable(learn_pages=3, bits=10)
    path = tmp_path / "idf-00000.bin"
    table.save(path)
    IndexStore(tmp_path).append(records([5, 6]), ["a", "b"],
                                {"idf_file": path.name})
    (tmp_path / "idf-00002.bin").write_bytes(b"never committed")
    assert load_idf(tmp_path).table_id == table.table_id
    assert not (tmp_path / "idf-00002.bin").exists()      # a stale generation is removed
    path.write_bytes(path.read_bytes()[:-1])
    with pytest.raises(CorruptFileError, match="idf-00000.bin.*truncated"):
        load_idf(tmp_path, on_error="stop")
    assert path.exists() and (tmp_path / "index.json").exists()      # untouched
    assert load_idf(tmp_path, on_error="keep") is None
    assert not path.exists() and not IndexStore(tmp_path).exists()
    (aside,) = tmp_path.glob("corrupt-*")
    assert sorted(p.name for p in aside.iterdir()) == [
        "idf-00000.bin", "index.json", "index.keys", "index.values"]


@pytest.mark.parametrize("damage", ["missing", "directory", "read error"])
def test_a_named_idf_table_that_cannot_be_read_is_corrupt(tmp_path, monkeypatch, damage):
    from scrapy_simdup.index.persist import load_idf
    path = tmp_path / "idf-00002.bin"
    IndexStore(tmp_path).append(records([5, 6]), ["a", "b"],
                                {"idf_file": path.name})
    if damage == "directory":
        path.mkdir()
    elif damage == "read error":
        IdfTable(learn_pages=3, bits=10).save(path)

        def load(cls, path):
            raise OSError(5, "Input/output error")
        monkeypatch.setattr(IdfTable, "load", classmethod(load))
    problem = {"missing": "IDF table is missing", "directory": "is a directory",
               "read error": r"IDF table cannot be read \(Input/output error\)"}[damage]
    with pytest.raises(CorruptFileError, match=problem) as err:
        load_idf(tmp_path, on_error="stop")
    assert err.value.path == str(path)
    stats = {}
    assert load_idf(tmp_path, on_error="keep", on_stat=stats.__setitem__) is None
    assert stats == {"index_corrupt": 1} and not IndexStore(tmp_path).exists()
