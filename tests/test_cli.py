"""The `simdup` console script and `scrapy simdup`, in subprocesses."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from scrapy_simdup.storage.batchwriter import BatchWriter
from tests.batch_pages import features_page, raw_page

BIN = Path(sys.executable).parent


def _env():
    root = str(Path(__file__).resolve().parent.parent)
    return {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}


def _run(args, cwd=None):
    return subprocess.run(args, capture_output=True, text=True, cwd=cwd, env=_env(), timeout=120)


def _simdup():
    exe = BIN / "simdup"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "scrapy_simdup.cli"]


def test_console_script_merge_and_stats(crawl, tmp_path):
    pairs, clusters = tmp_path / "pairs.jsonl", tmp_path / "clusters.jsonl"
    out = _run(_simdup() + ["merge", str(crawl), "--all", "--pairs", str(pairs),
                            "--clusters", str(clusters)])
    assert out.returncode == 0, out.stderr
    assert "fingerprints merged: 60" in out.stdout
    rows = [json.loads(line) for line in pairs.read_text().splitlines()]
    assert rows and all(set(r) == {"url", "duplicate_of", "distance", "similarity", "revisit"}
                    for r in rows)
    assert all(r["url"].rsplit("/", 2)[1] == r["duplicate_of"].rsplit("/", 2)[1] for r in rows)
    assert not any(r["revisit"] for r in rows)
    groups = [json.loads(line) for line in clusters.read_text().splitlines()]
    assert len(groups) == 20 and all(g["size"] == 3 for g in groups)
    assert "distance 22, min similarity 0.18" in out.stdout     # the defaults
    # a small merge probes every flip set of its short header, and says what it expects
    assert "15 probes on 4 header bits, expected recall 1.000" in out.stdout
    stats = _run(_simdup() + ["stats", str(crawl), "--json"])
    assert stats.returncode == 0, stats.stderr
    info = json.loads(stats.stdout)
    assert info["collection"]["count"] == 60
    assert info["directories"][0]["pending_batches"] == 0
    assert info["collection"]["clusters"] == 20
    text = _run(_simdup() + ["stats", str(crawl)])
    assert "distance histogram" in text.stdout and "60 in" in text.stdout


def test_console_script_errors_are_one_line(crawl, tmp_path):
    header = sorted(crawl.glob("batch-*.json"))[0]
    npy = header.with_suffix(".npy")
    npy.write_bytes(npy.read_bytes()[:-10])
    out = _run(_simdup() + ["merge", str(crawl)])
    assert out.returncode == 2
    assert str(npy) in out.stderr and "truncated" in out.stderr
    assert "Traceback" not in out.stderr
    out = _run(_simdup() + ["merge", str(tmp_path / "nope")])
    assert out.returncode == 2 and "not a directory" in out.stderr
    out = _run(_simdup() + ["merge", str(crawl), "--probes", "3", "--recall", "0.9"])
    assert out.returncode == 2 and "not allowed with" in out.stderr


def _project(tmp_path, settings: str):
    """A Scrapy project with ``settings`` in its settings.py; (dir, scrapy command)."""
    project = tmp_path / "proj"
    (project / "myproj").mkdir(parents=True)
    (project / "scrapy.cfg").write_text("[settings]\ndefault = myproj.settings\n")
    (project / "myproj" / "__init__.py").write_text("")
    (project / "myproj" / "settings.py").write_text(f"BOT_NAME = 'myproj'\n{settings}")
    scrapy = [str(BIN / "scrapy")] if (BIN / "scrapy").exists() else \
        [sys.executable, "-m", "scrapy"]
    return project, scrapy


def test_scrapy_command_reads_simdup_dir_from_the_project(crawl, tmp_path):
    project, scrapy = _project(tmp_path, f"SIMDUP_DIR = {str(crawl)!r}\nSIMDUP_DISTANCE = 5\n")
    out = _run(scrapy + ["simdup", "merge", "--exact", "--json"], cwd=project)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["method"] == "bphs" and summary["fingerprints"] == 60
    assert summary["distance"] == 5     # no distance recorded: the project's SIMDUP_DISTANCE
    assert summary["duplicates"] == 40                 # two of each three are duplicates
    out = _run(scrapy + ["simdup", "stats"], cwd=project)
    assert out.returncode == 0 and "fingerprints:" in out.stdout
    out = _run(scrapy + ["simdup", "stats", "--exact", "--pairs", "x.jsonl"], cwd=project)
    assert out.returncode != 0 and "--exact, --pairs: merge options" in out.stdout + out.stderr
    assert not (project / "x.jsonl").exists()


def test_scrapy_command_falls_back_on_a_project_distance_of_zero(crawl, tmp_path):
    project, scrapy = _project(tmp_path, f"SIMDUP_DIR = {str(crawl)!r}\nSIMDUP_DISTANCE = 0\n")
    out = _run(scrapy + ["simdup", "merge", "--exact", "--json"], cwd=project)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["distance"] == 0      # not the default 9


def test_scrapy_command_merges_at_the_distance_the_crawl_recorded(tmp_path):
    """Like `simdup merge`: the batches' distance wins over the project's
    SIMDUP_DISTANCE; `-s SIMDUP_DISTANCE=H` overrides it like --distance."""
    d = tmp_path / "crawl"
    rng = np.random.default_rng(5)
    with BatchWriter(d, batch_size=10, distance=9) as w:     # crawled with -s SIMDUP_DISTANCE=9
        for i in range(20):
            page = features_page([f"w{int(x)}" for x in rng.integers(0, 10_000, 200)])
            w.append(page, f"https://example.com/{i}")
    project, scrapy = _project(tmp_path, f"SIMDUP_DIR = {str(d)!r}\nSIMDUP_DISTANCE = 12\n")
    out = _run(scrapy + ["simdup", "merge", "--exact", "--json"], cwd=project)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["distance"] == 9
    out = _run(scrapy + ["simdup", "merge", "--exact", "--json", "-s", "SIMDUP_DISTANCE=7"],
               cwd=project)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["distance"] == 7
    out = _run(scrapy + ["simdup"], cwd=project)
    assert out.returncode != 0 and "merge, stats, rescore or report" in (out.stdout + out.stderr)
    # other scrapy commands still work with the command registered
    out = _run(scrapy + ["version"], cwd=project)
    assert out.returncode == 0 and "Scrapy" in out.stdout


def test_merge_uses_the_distance_recorded_by_the_crawl(tmp_path):
    d = tmp_path / "crawl"
    rng = np.random.default_rng(5)
    with BatchWriter(d, batch_size=10, distance=12) as w:    # a crawl with SIMDUP_DISTANCE = 12
        for i in range(20):
            page = features_page([f"w{int(x)}" for x in rng.integers(0, 10_000, 200)])
            w.append(page, f"https://example.com/{i}")
    out = _run(_simdup() + ["merge", str(d), "--json"])
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["distance"] == 12
    other = tmp_path / "other"
    with BatchWriter(other, batch_size=10, distance=5) as w:
        w.append(raw_page(1, np.ones(64)), "https://example.com/x")
    out = _run(_simdup() + ["merge", str(d), str(other)])
    assert out.returncode == 2 and "different distances" in out.stderr
    out = _run(_simdup() + ["merge", str(d), str(other), "--distance", "7", "--json"])
    assert out.returncode == 0 and json.loads(out.stdout)["distance"] == 7


def test_unwritable_output_fails_before_merging(crawl, tmp_path):
    bad = tmp_path / "no" / "such" / "pairs.jsonl"
    for option in ("--pairs", "--clusters"):
        out = _run(_simdup() + ["merge", str(crawl), option, str(bad)])
        assert out.returncode == 2 and "does not exist" in out.stderr
    out = _run(_simdup() + ["stats", str(crawl), "--json"])
    assert json.loads(out.stdout)["directories"][0]["pending_batches"] == 3   # nothing merged


def test_a_moved_directory_is_not_merged_again(crawl, tmp_path):
    out = _run(_simdup() + ["merge", str(crawl), "--json"])
    assert json.loads(out.stdout)["fingerprints"] == 60
    moved = tmp_path / "moved"
    crawl.rename(moved)
    out = _run(_simdup() + ["merge", str(moved), "--json"])
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["fingerprints"] == 0 and summary["collection_after"] == 60


def test_merge_of_a_directory_without_batches_is_an_error(tmp_path):
    out = _run(_simdup() + ["merge", str(tmp_path)])
    assert out.returncode == 2 and "no batch files" in out.stderr
    assert not (tmp_path / "collection").exists()


def test_scrapy_command_with_a_bad_project_setting_is_one_line(crawl, tmp_path):
    project, scrapy = _project(tmp_path, f"SIMDUP_DIR = {str(crawl)!r}\n"
                                         f"SIMDUP_DISTANCE = 'far'\n")
    out = _run(scrapy + ["simdup", "merge"], cwd=project)
    assert out.returncode != 0 and "SIMDUP_DISTANCE" in out.stderr + out.stdout
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("name", ["urls.bin", "urls.idx", "pairs.bin"])
def test_damaged_collection_files_are_reported_before_anything_is_appended(crawl, tmp_path,
                                                                           name):
    out = _run(_simdup() + ["merge", str(crawl)])
    assert out.returncode == 0, out.stderr
    path = crawl / "collection" / name
    data = bytearray(path.read_bytes())
    assert data
    data[len(data) // 2] ^= 0xFF                          # one flipped byte
    path.write_bytes(bytes(data))
    with BatchWriter(crawl, batch_size=10) as w:           # a new pending batch
        page = features_page(["a", "new", "page"] * 20)
        w.append(page, "https://example.com/new")
    out = _run(_simdup() + ["merge", str(crawl), "--pairs", str(tmp_path / "p.jsonl")])
    assert out.returncode == 2 and name in out.stderr and "checksum" in out.stderr
    assert "Traceback" not in out.stderr
    meta = json.loads((crawl / "collection" / "collection.json").read_text())
    assert meta["count"] == 60                           # nothing appended
    if name == "pairs.bin":
        out = _run(_simdup() + ["stats", str(crawl)])
        assert out.returncode == 2 and name in out.stderr


def test_stats_reports_a_batch_whose_data_is_gone(crawl):
    header = sorted(crawl.glob("batch-*.json"))[0]
    header.with_suffix(".npy").unlink()
    out = _run(_simdup() + ["stats", str(crawl)])
    assert out.returncode == 3 and "CORRUPT" in out.stdout and "batch data missing" in out.stdout
    assert "2 batches (" in out.stdout
    out = _run(_simdup() + ["stats", str(crawl), "--json"])
    damaged = json.loads(out.stdout)["directories"][0]["damaged"]
    assert out.returncode == 3 and damaged == [{
        "batch": str(header), "file": str(header.with_suffix(".npy")),
        "problem": f"batch data missing ({header.with_suffix('.npy').name})"}]


@pytest.mark.parametrize("append", [False, True])
def test_pairs_to_dev_stdout_redirected_to_a_file(crawl, tmp_path, append):
    """``simdup merge --pairs /dev/stdout > out`` (or ``>> out``): the pairs and
    the summary both land in the file, after what it held; the file is not
    replaced (the shell's descriptor would then write into a deleted file)."""
    out_file = tmp_path / "out.txt"
    out_file.write_text("PRE\n")
    with open(out_file, "a" if append else "w") as stdout:
        done = subprocess.run(_simdup() + ["merge", str(crawl), "--pairs", "/dev/stdout"],
                              stdout=stdout, stderr=subprocess.PIPE, text=True, env=_env(),
                              timeout=120)
    assert done.returncode == 0, done.stderr
    lines = out_file.read_text().splitlines()
    assert (lines[0] == "PRE") == append
    rows = [json.loads(line) for line in lines if line.startswith("{")]
    assert len(rows) == 40          # 20 clusters of 3: two later pages each
    assert any(line.startswith("simdup merge") for line in lines)
    assert lines.index(next(line for line in lines if line.startswith("{"))) < \
        lines.index(next(line for line in lines if line.startswith("simdup merge")))


def test_stats_after_a_merge_that_failed_says_none_yet(crawl):
    """A merge stopped by a corrupt batch leaves an empty collection header:
    stats still says there is no collection yet, not "0 fingerprints"."""
    header = sorted(crawl.glob("batch-*.json"))[0]
    header.write_text("{ damaged")
    out = _run(_simdup() + ["merge", str(crawl)])
    assert out.returncode == 2 and "corrupt" in out.stderr
    out = _run(_simdup() + ["stats", str(crawl)])
    assert out.returncode == 3 and "collection: none yet" in out.stdout, out.stdout


def test_pairs_to_a_descriptor_the_shell_did_not_open_is_refused(crawl):
    """--pairs /dev/fd/3 with no descriptor 3 from the shell: the merge's own
    files get that number later (the collection's lock), so it is refused."""
    out = _run(_simdup() + ["merge", str(crawl), "--pairs", "/dev/fd/3"])
    assert out.returncode == 2 and "not an open file descriptor" in out.stderr
    assert not (crawl / "collection" / "pairs.jsonl").exists()


def test_pairs_through_a_shell_process_substitution(crawl, tmp_path):
    """`--pairs >(gzip > x)` names /dev/fd/63, a pipe the shell opened."""
    counted = tmp_path / "lines.txt"
    cmd = " ".join(_simdup()) + f" merge {crawl} --pairs >(wc -l > {counted})"
    done = subprocess.run(["bash", "-c", cmd + "; wait"], capture_output=True, text=True,
                          env=_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    for _ in range(50):
        if counted.exists() and counted.read_text().strip():
            break
        time.sleep(0.1)
    assert int(counted.read_text()) == 40


@pytest.mark.parametrize("command", ["stats", "merge"])
def test_a_reader_that_goes_away_is_not_an_error(crawl, command):
    """`simdup stats DIR | head -1`: the closed pipe ends the command quietly
    (exit 141, like SIGPIPE), without an error message or a traceback."""
    proc = subprocess.Popen(_simdup() + [command, str(crawl)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=_env())
    proc.stdout.close()             # the reader is gone before anything is written
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 141, err
    assert err == b""


def test_a_batch_header_damaged_after_its_merge_does_not_block_later_merges(crawl):
    out = _run(_simdup() + ["merge", str(crawl), "--json"])
    assert json.loads(out.stdout)["fingerprints"] == 60
    sorted(crawl.glob("batch-*.json"))[0].write_text("{ damaged")
    with BatchWriter(crawl, batch_size=10) as w:
        page = features_page(["another", "new", "page"] * 20)
        w.append(page, "https://example.com/another")
    out = _run(_simdup() + ["merge", str(crawl), "--json"])
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["fingerprints"] == 1


def test_pairs_to_dev_stdout(crawl, tmp_path):
    """--pairs /dev/stdout writes through the pipe (not a temp file beside it)."""
    out = _run(_simdup() + ["merge", str(crawl), "--pairs", "/dev/stdout"])
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert rows and all(set(r) == {"url", "duplicate_of", "distance", "similarity", "revisit"}
                    for r in rows)
    assert Path("/dev/stdout").is_symlink() or not Path("/dev/stdout").is_file()


def test_min_similarity_decides_which_candidates_are_duplicates(crawl, tmp_path):
    """--min-similarity: 0 lets the keys alone decide; 1 keeps only pages
    whose sketches agree in every byte. Each pair carries its similarity."""
    found = {}
    for sim in ("0", "0.15", "1"):
        pairs = tmp_path / f"pairs-{sim}.jsonl"
        out = _run(_simdup() + ["merge", str(crawl), "--exact", "--json",
                                "--min-similarity", sim, "--pairs", str(pairs),
                                "--collection", str(tmp_path / f"coll-{sim}")])
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["min_similarity"] == float(sim)
        found[sim] = [json.loads(line) for line in pairs.read_text().splitlines()]
    assert len(found["0"]) >= len(found["0.15"]) >= len(found["1"])
    assert all(r["similarity"] >= 0.15 for r in found["0.15"])
    assert all(r["similarity"] == 1.0 for r in found["1"])
    bad = _run(_simdup() + ["merge", str(crawl), "--min-similarity", "1.5"])
    assert bad.returncode == 2 and "--min-similarity" in bad.stderr


def test_pairs_mark_a_page_crawled_again(tmp_path):
    """A URL in two crawls, its page unchanged or nearly: the pair is listed,
    marked as a revisit, beside the near-duplicates of other URLs."""
    from scrapy_simdup.cli import main

    page = features_page(f"w{i} w{i + 1} w{i + 2}" for i in range(300))
    other = features_page(f"w{i} w{i + 1} w{i + 2}" for i in range(1, 300))
    for name in ("monday", "tuesday"):
        with BatchWriter(tmp_path / name, batch_size=10) as w:
            w.append(page, "https://a.example/story")
            if name == "tuesday":
                w.append(other, "https://b.example/story")
    out = tmp_path / "pairs.jsonl"
    assert main(["merge", str(tmp_path / "monday"), str(tmp_path / "tuesday"), "--all",
                 "--pairs", str(out), "--no-progress"]) == 0
    rows = {(r["url"], r["duplicate_of"]): r
            for r in map(json.loads, out.read_text().splitlines())}
    same = ("https://a.example/story", "https://a.example/story")
    assert rows[same]["revisit"] is True and rows[same]["distance"] == 0
    assert rows[("https://b.example/story", "https://a.example/story")]["revisit"] is False


def _recipe_crawl(directory, recipe, seed):
    rng = np.random.default_rng(seed)
    with BatchWriter(directory, batch_size=10, fingerprint=recipe) as w:
        for i in range(10):
            w.append(features_page([f"w{int(x)}" for x in rng.integers(0, 10_000, 200)]),
                     f"https://{recipe}.example/{i}")
    return directory


def test_a_one_byte_change_in_a_batch_header_is_found_by_stats_and_merge(tmp_path):
    a = _recipe_crawl(tmp_path / "a", "recipe-a", 1)
    b = _recipe_crawl(tmp_path / "b", "recipe-b", 2)
    coll = tmp_path / "coll"
    out = _run(_simdup() + ["merge", str(a), "--collection", str(coll)])
    assert out.returncode == 0, out.stderr
    (header,) = sorted(b.glob("batch-*.json"))
    header.write_bytes(header.read_bytes().replace(b'"fingerprint"', b'"fing0rprint"'))
    out = _run(_simdup() + ["stats", str(b)])
    assert out.returncode == 3 and "batch header checksum mismatch" in out.stdout
    # the other recipe's batch is not merged into the collection as if it had none
    out = _run(_simdup() + ["merge", str(b), "--collection", str(coll)])
    assert out.returncode != 0 and str(header) in out.stderr
    assert "batch header checksum mismatch" in out.stderr and "Traceback" not in out.stderr
    stats = json.loads(_run(_simdup() + ["stats", str(a), "--collection", str(coll),
                                         "--json"]).stdout)
    assert stats["collection"]["count"] == 10


def test_version2_batches_still_merge(crawl, tmp_path):
    for header in sorted(crawl.glob("batch-*.json")):
        meta = json.loads(header.read_text())
        meta["version"] = 2
        del meta["header_crc32"]
        header.write_text(json.dumps(meta))
    out = _run(_simdup() + ["stats", str(crawl)])
    assert out.returncode == 0, out.stdout + out.stderr
    out = _run(_simdup() + ["merge", str(crawl), "--json"])
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["fingerprints"] == 60
