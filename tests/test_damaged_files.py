"""Damage in a SIMDUP_DIR or a collection beyond bad bytes: a directory, a
FIFO or a dangling symlink where a file should be, a --collection that is a
file; `simdup merge --skip-damaged` and `simdup stats` finding damaged
batches (issue 20, section 3)."""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from scrapy_simdup.cli import EXIT_DAMAGED, build_parser, main
from scrapy_simdup.exceptions import CorruptFileError
from scrapy_simdup.index.snapshot import IndexStore
from scrapy_simdup.merge import merge, stats
from scrapy_simdup.storage.atomic import read_json
from scrapy_simdup.storage.batchfile import (
    list_batches,
    read_batch,
    unfinished_batches,
    verify_batch,
)
from scrapy_simdup.storage.batchwriter import BatchWriter
from tests.batch_pages import features_page

BIN = Path(sys.executable).parent


@pytest.fixture(autouse=True)
def no_hang():
    """A FIFO read with a blocking open would hang: fail instead."""
    def timeout(*_):
        raise TimeoutError("blocked (reading a FIFO?)")
    old = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _replace(path: Path, how: str) -> None:
    """Put a directory, a FIFO or a dangling symlink where ``path`` was."""
    path.unlink()
    if how == "directory":
        path.mkdir()
        (path / "x").write_text("x")
    elif how == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(path.with_name("gone-" + path.name))


_WHAT = {"directory": "is a directory, not a", "fifo": "is a FIFO, not a",
         "dangling": "is a dangling symlink"}


def _cli(args, capsys):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------- batch files

@pytest.mark.parametrize("how", ["directory", "fifo", "dangling"])
@pytest.mark.parametrize("suffix", [".json", ".npy", ".urls"])
def test_a_batch_file_that_is_no_file_is_named(crawl, suffix, how):
    header = list_batches(crawl)[0]
    damaged = header.with_suffix(suffix)
    _replace(damaged, how)
    for read in (read_batch, verify_batch):
        with pytest.raises(CorruptFileError) as err:
            read(header)
        assert err.value.path == str(damaged)
        assert _WHAT[how] in err.value.problem
        assert "4096" not in err.value.problem and "Errno" not in str(err.value)
    if suffix == ".json":
        # not an interrupted flush either: the header is there, damaged
        assert unfinished_batches(crawl) == []


def test_read_json_names_what_stands_in_for_the_file(tmp_path):
    for how in ("directory", "fifo", "dangling"):
        path = tmp_path / f"{how}.json"
        path.write_text("{}")
        _replace(path, how)
        with pytest.raises(CorruptFileError, match=_WHAT[how]) as err:
            read_json(path, "index snapshot header")
        assert err.value.path == str(path)
    os.mkdir(tmp_path / "index.json")
    with pytest.raises(CorruptFileError, match="is a directory, not an index snapshot header"):
        read_json(tmp_path / "index.json", "index snapshot header")


@pytest.mark.parametrize("error", [PermissionError(13, "Permission denied"),
                                   OSError(5, "Input/output error")])
def test_read_json_names_any_os_error(tmp_path, monkeypatch, error):
    """What open_regular does not name (a failed read, ...) is corrupt too."""
    path = tmp_path / "index.json"
    path.write_text("{}")

    def open_regular(path, kind="file"):
        raise error
    monkeypatch.setattr("scrapy_simdup.storage.atomic.open_regular", open_regular)
    with pytest.raises(CorruptFileError, match=f"index snapshot header cannot be read "
                                               f"\\({error.strerror}\\)") as err:
        read_json(path, "index snapshot header")
    assert err.value.path == str(path)


@pytest.mark.parametrize("suffix", [".json", ".npy"])
def test_merge_of_a_batch_replaced_by_a_directory_is_one_named_line(crawl, capsys, suffix):
    header = list_batches(crawl)[1]
    damaged = header.with_suffix(suffix)
    _replace(damaged, "directory")
    code, out, err = _cli(["merge", crawl], capsys)
    assert code == 2
    assert f"{damaged}: is a directory, not a batch" in err
    assert err.rstrip().endswith("use --skip-damaged to merge the other batches")
    assert "Errno" not in err and "4096 bytes" not in err and len(err.splitlines()) == 1
    code, out, err = _cli(["stats", crawl], capsys)
    assert code == EXIT_DAMAGED and "Errno" not in err
    assert f"CORRUPT: {damaged}: is a directory" in out


# --------------------------------------------------------------- --skip-damaged

def _flip(path: Path) -> bytes:
    data = path.read_bytes()
    damaged = bytearray(data)
    damaged[-3] ^= 0xFF
    path.write_bytes(bytes(damaged))
    return data


def test_skip_damaged_merges_the_others_and_leaves_the_damaged_pending(crawl, capsys):
    headers = list_batches(crawl)
    npy = headers[0].with_suffix(".npy")
    good = _flip(npy)
    code, out, err = _cli(["merge", crawl, "--json"], capsys)      # refused, with the hint
    assert code == 2 and str(npy) in err and "checksum" in err and "--skip-damaged" in err
    code, out, err = _cli(["merge", crawl, "--skip-damaged", "--json"], capsys)
    assert code == EXIT_DAMAGED, err
    summary = json.loads(out)
    assert summary["fingerprints"] == 35 and summary["batches"] == 2
    assert summary["damaged"] == [{"batch": str(headers[0]), "file": str(npy),
                                   "problem": "batch data checksum mismatch (corrupt file)"}]
    # stats: the damaged batch is pending, listed apart, and the exit status says so
    code, out, err = _cli(["stats", crawl, "--json"], capsys)
    assert code == EXIT_DAMAGED, err
    entry = json.loads(out)["directories"][0]
    assert entry["pending_batches"] == 0 and entry["batches"] == 2
    assert [d["file"] for d in entry["damaged"]] == [str(npy)]
    # repaired, it is merged by the next merge
    npy.write_bytes(good)
    code, out, err = _cli(["stats", crawl, "--json"], capsys)
    assert code == 0 and json.loads(out)["directories"][0]["pending_batches"] == 1
    code, out, err = _cli(["merge", crawl, "--json"], capsys)
    assert code == 0, err
    summary = json.loads(out)
    assert summary["fingerprints"] == 25 and summary["collection_after"] == 60
    assert summary["damaged"] == []


def test_skip_damaged_text_summary_names_each_damaged_batch(crawl, capsys):
    headers = list_batches(crawl)
    _replace(headers[0], "directory")                   # an unreadable header
    urls = headers[2].with_suffix(".urls")
    urls.write_bytes(urls.read_bytes()[:-4])            # a truncated URL file
    code, out, err = _cli(["merge", crawl, "--skip-damaged"], capsys)
    assert code == EXIT_DAMAGED and err == ""
    lines = [line for line in out.splitlines() if "damaged batch, left pending" in line]
    assert len(lines) == 2
    assert f"{headers[0]}: is a directory, not a batch header" in lines[0]
    assert f"{urls}: URL file is" in lines[1] and "truncated" in lines[1]
    assert "fingerprints merged: 25" in out
    code, out, err = _cli(["stats", crawl], capsys)
    assert code == EXIT_DAMAGED and "damaged:        2 batches, not counted" in out


def test_skip_damaged_with_every_batch_damaged(crawl):
    for header in list_batches(crawl):
        _flip(header.with_suffix(".npy"))
    summary = merge([crawl], skip_damaged=True)
    assert summary.batches == 0 and summary.collection_after == 0
    assert len(summary.damaged) == 3
    assert stats([crawl])["directories"][0]["pending_batches"] == 0


def test_stats_verifies_the_checksums_of_pending_batches_only(crawl, capsys):
    code, out, err = _cli(["merge", crawl], capsys)
    assert code == 0, err
    _flip(list_batches(crawl)[0].with_suffix(".npy"))    # merged: its data is in the collection
    with BatchWriter(crawl, batch_size=10) as w:
        page = features_page(["a", "new", "page"] * 20)
        w.append(page, "https://example.com/new")
    code, out, err = _cli(["stats", crawl, "--json"], capsys)
    assert code == 0, out
    new = list_batches(crawl)[-1]
    _flip(new.with_suffix(".urls"))
    code, out, err = _cli(["stats", crawl, "--json"], capsys)
    assert code == EXIT_DAMAGED
    entry = json.loads(out)["directories"][0]
    assert entry["damaged"] == [{"batch": str(new), "file": str(new.with_suffix(".urls")),
                                 "problem": "URL file checksum mismatch (corrupt file)"}]
    assert entry["pending_batches"] == 0


def test_stats_help_says_what_the_check_costs(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["stats", "--help"])
    assert "one read of its files" in capsys.readouterr().out


def test_scrapy_simdup_merge_takes_skip_damaged(crawl, tmp_path):
    from scrapy.settings import Settings

    from scrapy_simdup.integration.command import Command

    command = Command()
    command.settings = Settings()
    parser = argparse.ArgumentParser()
    command.add_options(parser)
    assert parser.parse_args(["--skip-damaged"]).skip_damaged is True
    scrapy = [str(BIN / "scrapy")] if (BIN / "scrapy").exists() else [sys.executable, "-m", "scrapy"]
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    run = dict(capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    out = subprocess.run(scrapy + ["simdup", "merge", "--help"], **run)
    assert out.returncode == 0 and "--skip-damaged" in out.stdout
    _flip(list_batches(crawl)[0].with_suffix(".npy"))
    out = subprocess.run(scrapy + ["simdup", "merge", str(crawl), "--skip-damaged", "--json"],
                         **run)
    assert out.returncode == EXIT_DAMAGED, out.stderr
    assert len(json.loads(out.stdout)["damaged"]) == 1


# ---------------------------------------------------------------- the collection

def test_collection_that_is_a_file(crawl, tmp_path, capsys):
    target = tmp_path / "coll.txt"
    target.write_text("not a collection")
    code, out, err = _cli(["merge", crawl, "--collection", target], capsys)
    assert code == 2 and "Errno" not in err
    assert f"--collection {target} is a file; give a directory (new or an existing " \
           "collection)" in err
    code, out, err = _cli(["stats", crawl, "--collection", target], capsys)
    assert code == 2 and f"--collection {target} is a file" in err
    (crawl / "collection").write_text("")          # the default place, taken by a file
    code, out, err = _cli(["merge", crawl], capsys)
    assert code == 2 and f"{crawl / 'collection'} is a file, not a collection directory" in err
    dangling = tmp_path / "link"
    dangling.symlink_to(tmp_path / "nowhere")
    code, out, err = _cli(["merge", crawl, "--collection", dangling], capsys)
    assert code == 2 and "is a dangling symlink; give a directory" in err


@pytest.mark.parametrize("name", ["collection.json", "H.bin", "urls.bin", "pairs.bin", ".lock"])
@pytest.mark.parametrize("how", ["directory", "fifo"])
def test_collection_file_that_is_no_file_is_named(crawl, capsys, name, how):
    code, out, err = _cli(["merge", crawl], capsys)
    assert code == 0, err
    path = crawl / "collection" / name
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    path.touch()
    _replace(path, how)
    with BatchWriter(crawl, batch_size=10) as w:
        page = features_page(["a", "new", "page"] * 20)
        w.append(page, "https://example.com/new")
    code, out, err = _cli(["merge", crawl, "--pairs", crawl.parent / "p.jsonl"], capsys)
    assert code == 2 and str(path) in err and "Traceback" not in err
    if name == ".lock":
        assert "cannot take the collection's lock" in err
    else:
        kind = {"directory": "a directory", "fifo": "a FIFO"}[how]
        assert f"is {kind}, not a collection" in err and "Errno" not in err
        code, out, err = _cli(["stats", crawl], capsys)
        assert code == 2 and f"{path}: is {kind}" in err


# ------------------------------------------- a header damaged after its merge

@pytest.mark.parametrize("moved", [False, True])
def test_header_damaged_after_its_merge_is_only_reported(crawl, capsys, moved):
    code, out, err = _cli(["merge", crawl], capsys)
    assert code == 0, err
    if moved:       # matched by name and data checksum, not by where it lay
        crawl = crawl.rename(crawl.with_name("moved"))
    header = list_batches(crawl)[0]
    header.write_bytes(b"")
    for extra in ([], ["--skip-damaged"]):
        code, out, err = _cli(["merge", crawl, "--json", *extra], capsys)
        assert code == 0, err
        summary = json.loads(out)
        assert summary["damaged"] == [] and summary["batches"] == 0
    code, out, err = _cli(["stats", crawl, "--json"], capsys)
    assert code == 0, out
    entry = json.loads(out)["directories"][0]
    assert entry["damaged"] == [] and entry["pending_batches"] == 0
    assert any(str(header) in line for line in entry["corrupt"])
    # a batch of another crawl with the same name but other data is not taken for it
    other = crawl.with_name("other")
    other.mkdir()
    for suffix in (".json", ".npy", ".urls"):
        shutil.copy(header.with_suffix(suffix), other / header.with_suffix(suffix).name)
    _flip(other / header.with_suffix(".npy").name)
    code, out, err = _cli(["merge", crawl, other, "--skip-damaged", "--json"], capsys)
    assert code == EXIT_DAMAGED and [d["batch"] for d in json.loads(out)["damaged"]] == \
        [str(other / header.name)]


# ------------------------------------------------- outputs inside a crawl dir

@pytest.mark.parametrize("option", ["--pairs", "--clusters"])
def test_output_inside_a_crawl_directory_is_refused(crawl, tmp_path, capsys, option):
    other = tmp_path / "other"
    other.mkdir()
    (crawl / "index.values").write_bytes(b"snapshot")
    (tmp_path / "link").symlink_to(crawl)
    npy = list_batches(crawl)[0].with_suffix(".npy")
    before = {p: p.read_bytes() for p in crawl.iterdir()}
    for target in (crawl / "index.values", npy, crawl / "new.jsonl",
                   other / ".." / "crawl" / "x.jsonl", tmp_path / "link" / "x.jsonl"):
        code, out, err = _cli(["merge", other, crawl, option, target], capsys)
        assert code == 2 and f"inside the crawl directory {crawl}" in err, (target, err)
    assert {p: p.read_bytes() for p in crawl.iterdir()} == before    # nothing merged or written
    code, out, err = _cli(["merge", crawl, option, tmp_path / "out.jsonl"], capsys)
    assert code == 0, err


# ------------------------------------------- bad bytes in a collection file

@pytest.mark.parametrize("name", ["H.bin", "urls.bin", "urls.idx", "pairs.bin"])
def test_damaged_collection_stops_merge_and_stats_before_appending(crawl, capsys, name):
    code, out, err = _cli(["merge", crawl], capsys)
    assert code == 0, err
    coll = crawl / "collection"
    path = coll / name
    with open(path, "r+b") as handle:
        handle.seek(16)
        handle.write(os.urandom(8) if name != "urls.bin" else b"\xff" * 8)
    with BatchWriter(crawl, batch_size=10) as w:
        page = features_page(["a", "new", "page"] * 20)
        w.append(page, "https://example.com/new")
    before = {p.name: p.read_bytes() for p in coll.iterdir() if p.is_file()}
    # stats reads every file; a merge reads the URL files only for --pairs/--clusters
    merges = [["merge", crawl], ["merge", crawl, "--skip-damaged"]]
    if name.startswith("urls"):
        merges = [["merge", crawl, "--clusters", str(crawl.parent / "clusters.jsonl")]]
    for command in [["stats", crawl], *merges]:
        code, out, err = _cli(command, capsys)
        assert code == 2 and f"{path}: checksum mismatch" in err, (command, err)
    assert {p.name: p.read_bytes() for p in coll.iterdir() if p.is_file()} == before


# ----------------------------------------------------- a damaged index snapshot

def _snapshot(crawl):
    IndexStore(crawl).append(np.arange(1, 6, dtype=np.uint64),
                             [f"https://example.com/{i}" for i in range(5)])


@pytest.mark.parametrize("damage", ["header", "values-flip", "values-dir", "keys-short"])
def test_stats_checks_the_index_snapshot_files(crawl, capsys, damage):
    _snapshot(crawl)
    code, out, err = _cli(["stats", crawl, "--json"], capsys)
    assert code == 0, out
    entry = json.loads(out)["directories"][0]
    assert entry["index"]["count"] == 5 and entry["index_damaged"] is None
    values, keys = crawl / "index.values", crawl / "index.keys"
    if damage == "header":
        (crawl / "index.json").write_text("{not json")
        bad = crawl / "index.json"
    elif damage == "values-flip":
        _flip(values)
        bad = values
    elif damage == "values-dir":
        _replace(values, "directory")
        bad = values
    else:
        keys.write_bytes(keys.read_bytes()[:-5])
        bad = keys
    code, out, err = _cli(["stats", crawl], capsys)
    assert code == 2 and f"CORRUPT: {bad}: " in out, out
    code, out, err = _cli(["stats", crawl, "--json"], capsys)
    assert code == 2 and json.loads(out)["directories"][0]["index_damaged"]["file"] == str(bad)
    code, out, err = _cli(["merge", crawl], capsys)     # the batches are not affected
    assert code == 0, err


# ------------------------- no file in place of an index snapshot file (a crawl's restore)

def _stand_in(path: Path, how: str) -> Path | None:
    """Put something other than a regular file where ``path`` was; returns what
    a symlink points to (which must be left alone)."""
    if path.exists():
        path.unlink()
    target = None
    if how == "dangling":
        target = path.with_name("gone-" + path.name)
    elif how == "dangling-dir":         # into a directory that does not exist: no write can follow it
        target = path.parent / "no-such-dir" / path.name
    elif how == "dir-symlink":
        target = path.parent.parent / f"elsewhere-{path.name}"
        target.mkdir()
        (target / "keep").write_text("not ours")
    elif how == "directory":
        path.mkdir()
        (path / "x").write_text("x")
    elif how == "fifo":
        os.mkfifo(path)
    if target is not None:
        path.symlink_to(target)
    return target


@pytest.mark.parametrize("header", [True, False])
@pytest.mark.parametrize("how", ["dangling", "dangling-dir", "dir-symlink", "directory", "fifo"])
@pytest.mark.parametrize("name", ["index.values", "index.keys"])
def test_restore_moves_aside_whatever_stands_in_for_a_snapshot_file(tmp_path, name, how,
                                                                    header):
    """A symlink (dangling or to a directory), a directory or a FIFO in place of
    index.values/index.keys is reported and moved aside itself, like any other
    damage, so the crawl's saves work again and the next restore finds them
    (it was left in place: every later save failed, every restart restored 0)."""
    from scrapy_simdup.index.backend import MemoryBackend
    from scrapy_simdup.index.persist import restore
    from scrapy_simdup.index.snapshot import records
    from scrapy_simdup.index.verified import VerifiedIndex

    d = tmp_path / "crawl"
    d.mkdir()
    _snapshot(d)
    if not header:
        (d / "index.json").unlink()
    bad = d / name
    target = _stand_in(bad, how)
    assert IndexStore(d).exists()       # damage, never taken for a fresh directory
    with pytest.raises(CorruptFileError) as err:
        restore(MemoryBackend(VerifiedIndex()), d, on_error="stop")
    assert err.value.path == str(d / ("index.json" if not header else name))
    assert os.path.lexists(bad)         # "stop" leaves everything as it was
    stats = {}
    assert restore(MemoryBackend(VerifiedIndex()), d, on_error="keep",
                   on_stat=stats.__setitem__) == 0
    assert stats == {"index_corrupt": 1}
    assert not os.path.lexists(bad)
    (aside,) = d.glob(f"{name}.corrupt-*")
    if target is not None:              # the link was moved, not what it points to
        assert aside.is_symlink() and os.readlink(aside) == str(target)
        if how == "dir-symlink":
            assert (target / "keep").read_text() == "not ours"
    assert not IndexStore(d).exists()
    # the crawl's saves work, and a restart restores what they saved
    store = IndexStore(d)
    store.append(records(np.arange(10, 13, dtype=np.uint64)), ["a", "b", "c"])
    store.append(records(np.arange(13, 15, dtype=np.uint64)), ["d", "e"])
    backend = MemoryBackend(VerifiedIndex())
    assert restore(backend, d, on_error="stop") == 5
    assert bad.is_file() and not bad.is_symlink()
