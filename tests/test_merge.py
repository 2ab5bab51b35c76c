"""PSM batch merge against brute force on real simhash clusters."""
import json
import os
import random
import re
from pathlib import Path

import numpy as np
import pytest

from scrapy_simdup._limits import DEFAULT_MIN_SIMILARITY
from scrapy_simdup.exceptions import CorruptFileError
from scrapy_simdup.fingerprint.sketch import matches_needed
from scrapy_simdup.merge import merge, stats
from scrapy_simdup.merge.collection import H_DTYPE, Collection
from scrapy_simdup.merge.report import components
from scrapy_simdup.storage.batchwriter import BatchWriter
from tests.batch_pages import features_page
from tests.data_root import PAGES_ROOT

DATA = PAGES_ROOT / "article-extraction-benchmark" / "ground-truth.json"
H = 3


def _shingles(text, k=3):
    words = re.findall(r"\w+", text.lower())
    return [" ".join(words[i:i + k]) for i in range(max(1, len(words) - k + 1))]


def _variants(text, rng, others):
    sentences = re.split(r"(?<=[.!?])\s+", text)
    out = [text]
    if len(sentences) > 3:      # a sentence dropped
        drop = rng.randrange(len(sentences))
        out.append(" ".join(s for i, s in enumerate(sentences) if i != drop))
    words = text.split()        # a few words changed (a timestamp, a count)
    for _ in range(3):
        words[rng.randrange(len(words))] = str(rng.randrange(10 ** 6))
    out.append(" ".join(words))
    out.append(text + " " + rng.choice(others)[:300])   # a block added
    return out


@pytest.fixture(scope="module")
def corpus():
    """(url, page) for real articles and their near-duplicate variants, shuffled."""
    texts = [v["articleBody"] for v in json.loads(DATA.read_text()).values()
             if len(v["articleBody"].split()) > 150]
    rng = random.Random(7)
    docs = []
    for a, text in enumerate(texts):
        for v, variant in enumerate(_variants(text, rng, texts)):
            docs.append((f"https://site{v}.example/article/{a}", variant))
    rng.shuffle(docs)
    out = []
    for url, text in docs:
        out.append((url, features_page(_shingles(text))))
    return out


def reference_pairs(pages, h, min_similarity=DEFAULT_MIN_SIMILARITY):
    """``{(i, j)}``, ``j < i``: the pages ``j`` a page ``i`` matches by the
    rule (either key within ``h`` bits, the two distances adding up to at most
    ``h + 26``, at least ``matches_needed`` equal sketch bytes), by brute
    force in NumPy."""
    v1 = np.array([p.value for p in pages], dtype=np.uint64)
    v2 = np.array([p.value2 for p in pages], dtype=np.uint64)
    sk = np.frombuffer(b"".join(p.sketch for p in pages), dtype=np.uint8).reshape(-1, 32)
    need = matches_needed(min_similarity)
    out = set()
    for i in range(len(pages)):
        d1 = np.bitwise_count(v1[:i] ^ v1[i]).astype(int)
        d2 = np.bitwise_count(v2[:i] ^ v2[i]).astype(int)
        near = ((d1 <= h) | (d2 <= h)) & (d1 + d2 <= h + 26)
        agree = (sk[:i] == sk[i]).sum(axis=1)
        out.update((i, int(j)) for j in np.flatnonzero(near & (agree >= need)))
    return out


def _brute_pairs(corpus):
    urls = [u for u, _ in corpus]
    return {frozenset((urls[i], urls[j]))
            for i, j in reference_pairs([p for _, p in corpus], H)}


def _write(directory, items, batch_size=200, fingerprint=None):
    with BatchWriter(directory, batch_size=batch_size, fingerprint=fingerprint) as w:
        for url, page in items:
            w.append(page, url)


def _read_pairs(path):
    rows = [json.loads(line) for line in Path(path).read_text().splitlines()]
    return rows, {frozenset((r["url"], r["duplicate_of"])) for r in rows}


def test_exact_equals_brute_force_and_psm_is_precise(corpus, tmp_path):
    truth = _brute_pairs(corpus)
    assert len(truth) > 100                      # the corpus has real clusters
    d = tmp_path / "crawl"
    _write(d, corpus)
    results = {}
    for name, kw in {"exact": dict(exact=True, first=False), "psm-a": dict(first=False),
                     "psm-f": dict(first=True)}.items():
        out = tmp_path / f"{name}.jsonl"
        summary = merge([d], tmp_path / f"coll-{name}", distance=H, chunk_size=256,
                        pairs_out=out, **kw)
        assert summary.fingerprints == len(corpus) and summary.batches >= 4
        rows, pairs = _read_pairs(out)
        assert all(0 <= r["distance"] <= H for r in rows)
        results[name] = (rows, pairs)
    assert results["exact"][1] == truth
    rows_a, pairs_a = results["psm-a"]
    assert pairs_a <= truth                      # precision 1.0
    assert len(pairs_a) >= 0.95 * len(truth)     # recall at the default probes
    rows_f, pairs_f = results["psm-f"]
    assert pairs_f <= truth
    assert len({r["url"] for r in rows_f}) == len(rows_f)       # one per duplicate
    dup_truth = {u for p in truth for u in p}
    assert len({r["url"] for r in rows_f}) >= 0.95 * len(
        {r["url"] for r in results["exact"][0]})
    assert {r["url"] for r in rows_f} <= dup_truth


def test_several_directories_and_incremental_merges(corpus, tmp_path):
    truth = _brute_pairs(corpus)
    third = len(corpus) // 3
    a, b = tmp_path / "crawl-a", tmp_path / "crawl-b"
    _write(a, corpus[:third], batch_size=100)
    _write(b, corpus[third:2 * third], batch_size=150)
    coll = tmp_path / "coll"
    out1 = tmp_path / "p1.jsonl"
    s1 = merge([a, b], coll, distance=H, exact=True, first=False, chunk_size=128, pairs_out=out1)
    assert s1.collection_after == 2 * third
    # nothing pending: a second run merges nothing
    s_again = merge([a, b], coll, distance=H, exact=True, first=False)
    assert s_again.fingerprints == 0 and s_again.collection_after == 2 * third
    # the crawl goes on: new batches in b are matched against the whole collection
    _write(b, corpus[2 * third:], batch_size=150)
    st = stats([a, b], coll)
    assert st["directories"][1]["pending_fingerprints"] == len(corpus) - 2 * third
    out2 = tmp_path / "p2.jsonl"
    clusters = tmp_path / "clusters.jsonl"
    merge([a, b], coll, distance=H, exact=True, first=False, chunk_size=128, pairs_out=out2,
          clusters_out=clusters)
    found = _read_pairs(out1)[1] | _read_pairs(out2)[1]
    assert found == truth
    # clusters: the connected components of the truth graph
    rows = [json.loads(line) for line in clusters.read_text().splitlines()]
    got = {frozenset(r["urls"]) for r in rows}
    urls = sorted({u for p in truth for u in p})
    index = {u: i for i, u in enumerate(urls)}
    pa = np.array([index[min(p)] for p in truth])
    pb = np.array([index[max(p)] for p in truth])
    want = {frozenset(urls[i] for i in members) for members in components(None, pa, pb).values()}
    assert got == want
    assert all(r["size"] == len(r["urls"]) and r["representative"] in r["urls"] for r in rows)
    st = stats([a, b], coll)
    assert st["collection"]["count"] == len(corpus)
    assert st["collection"]["pairs"] == len(truth)
    assert sum(st["collection"]["distance_histogram"].values()) == len(truth)
    assert st["directories"][1]["pending_batches"] == 0


def test_a_recrawl_lists_each_page_once_in_its_cluster(corpus, tmp_path):
    """Two crawls of the same pages: a page and its re-crawl are one page of
    its cluster, and a page with no other near-duplicate than its own
    re-crawl is in no cluster."""
    pages = corpus[:60]
    a, b = tmp_path / "a", tmp_path / "b"
    _write(a, pages, batch_size=25)
    _write(b, pages[::-1], batch_size=30)      # (other files: not taken for a's)
    coll, out = tmp_path / "coll", tmp_path / "clusters.jsonl"
    merge([a], coll, distance=H, exact=True, first=False, clusters_out=out)
    once = [json.loads(line) for line in out.read_text().splitlines()]
    merge([b], coll, distance=H, exact=True, first=False, clusters_out=out)
    twice = [json.loads(line) for line in out.read_text().splitlines()]
    assert once and twice == once
    assert all(len(set(r["urls"])) == r["size"] == len(r["urls"]) >= 2 for r in twice)
    assert Collection(coll).count == 2 * len(pages)


def test_duplicate_of_is_the_earlier_record(corpus, tmp_path):
    d = tmp_path / "crawl"
    _write(d, corpus[:300], batch_size=64)
    out = tmp_path / "p.jsonl"
    merge([d], tmp_path / "coll", distance=H, first=False, chunk_size=64, pairs_out=out)
    order = {u: i for i, (u, _) in enumerate(corpus[:300])}
    rows, _ = _read_pairs(out)
    assert rows and all(order[r["duplicate_of"]] < order[r["url"]] for r in rows)


def test_index_engine_agrees_with_batch_scan(corpus, tmp_path):
    d = tmp_path / "crawl"
    _write(d, corpus)
    pairs = {}
    for engine in ("join", "index"):
        out = tmp_path / f"{engine}.jsonl"
        merge([d], tmp_path / f"coll-{engine}", distance=H, first=False, chunk_size=256,
              pairs_out=out, engine=engine)
        pairs[engine] = _read_pairs(out)[1]
    truth = _brute_pairs(corpus)
    assert pairs["index"] <= truth and pairs["join"] <= truth
    assert len(pairs["index"]) >= 0.95 * len(truth)


def test_crash_during_append_and_corrupt_collection(corpus, tmp_path):
    d = tmp_path / "crawl"
    _write(d, corpus[:200], batch_size=100)
    coll = tmp_path / "coll"
    merge([d], coll, distance=H, first=False)
    # a merge killed mid-append leaves bytes past the committed length: ignored
    with open(coll / "H.bin", "ab") as f:
        f.write(b"\x01" * 24)
    _write(d, corpus[200:300], batch_size=100)
    s = merge([d], coll, distance=H, first=False)
    assert s.collection_after == 300
    assert (coll / "H.bin").stat().st_size == 300 * H_DTYPE.itemsize
    # a truncated data file is reported by name
    with open(coll / "H.bin", "r+b") as f:
        f.truncate(100)
    with pytest.raises(CorruptFileError, match="H.bin"):
        Collection(coll)
    # a flipped byte is caught by the per-run checksum
    with open(coll / "H.bin", "r+b") as f:
        f.truncate(0)
    (coll / "H.bin").write_bytes(b"\x00" * (300 * H_DTYPE.itemsize))
    _write(d, corpus[300:310])
    with pytest.raises(CorruptFileError, match="checksum"):
        merge([d], coll)


def test_batches_of_different_fingerprint_recipes_are_not_mixed(corpus, tmp_path):
    a, b, coll = tmp_path / "a", tmp_path / "b", tmp_path / "coll"
    _write(a, corpus[:100], fingerprint="recipe-1")
    _write(b, corpus[100:200], fingerprint="recipe-2")
    with pytest.raises(ValueError, match="recipe-1.*recipe-2|recipe-2.*recipe-1"):
        merge([a, b], coll, distance=H)
    assert not (coll / "H.bin").exists() or Collection(coll).count == 0
    s = merge([a], coll, distance=H)               # one recipe: merged, and recorded
    assert s.fingerprints == 100 and Collection(coll).meta["fingerprint"] == "recipe-1"
    with pytest.raises(ValueError, match="recipe-2"):
        merge([b], coll, distance=H)                # the collection remembers its recipe


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="not a directory"):
        merge([tmp_path / "missing"])
    with pytest.raises(ValueError, match="distance"):
        merge([tmp_path], distance=99)
    with pytest.raises(ValueError, match="probes"):
        merge([tmp_path], probes=-1)
    with pytest.raises(ValueError, match="engine"):
        merge([tmp_path], engine="nope")


def test_probe_tables_too_large_for_the_memory_are_refused(corpus, tmp_path, monkeypatch):
    """A merge whose probe tables cannot fit in the memory available is
    refused before it reads a batch, with the --batch-size that fits; the
    batches stay pending and a merge that fits then takes them."""
    import scrapy_simdup.merge.run as run

    d = tmp_path / "crawl"
    _write(d, corpus[:200], batch_size=50)
    need = 2 * 200 * (16 + 1) * 8
    monkeypatch.setattr(run, "available_memory", lambda: need // 2)
    with pytest.raises(ValueError, match=r"--batch-size (\d+) or less") as exc:
        merge([d], distance=H, probes=16)
    fits = int(re.search(r"--batch-size (\d+)", str(exc.value)).group(1))
    assert fits == 100 and "GiB" in str(exc.value)
    assert stats([d])["directories"][0]["pending_fingerprints"] == 200
    s = merge([d], distance=H, probes=16, chunk_size=fits)
    assert s.fingerprints == 200
    monkeypatch.setattr(run, "available_memory", lambda: None)     # not Linux: no check
    _write(d, corpus[200:260], batch_size=60)
    assert merge([d], distance=H, probes=16).fingerprints == 60


def test_probe_tables_at_a_wide_radius_take_four_bytes_an_entry():
    """The memory a merge asks for follows its probe tables: at the crawls'
    default radius they hold no low bits (the join gathers every bucket),
    as the table the matcher builds shows."""
    from scrapy_simdup.merge.batchscan import SideSpec
    from scrapy_simdup.merge.matchers import PSMBatchMatcher
    from scrapy_simdup.storage.batchfile import HEADER_BITS

    wide = SideSpec(distance=22, needed=6, first=True, probes=34, t=13)
    narrow = SideSpec(distance=3, needed=6, first=True, probes=16, t=13)
    assert wide.table_bytes(1000) == 2 * 1000 * 4 * 35
    assert narrow.table_bytes(1000) == 2 * 1000 * 8 * 17
    assert SideSpec(distance=22, needed=6, first=True, exact=True).table_bytes(10) == 2 * 10 * 8
    rng = np.random.default_rng(1)
    m = 500
    values = rng.integers(0, 2**64, m, dtype=np.uint64)
    cq = rng.integers(1, 256, (m, HEADER_BITS)).astype(np.uint8)
    for spec, low in ((wide, 0), (narrow, m * 17)):
        matcher = PSMBatchMatcher(values, cq, np.zeros((m, 32), np.uint8), spec.distance,
                                  spec.probes, True, spec.t, 6)
        assert len(matcher.low) == low and len(matcher.idx) == m * (spec.probes + 1)


def test_one_merge_at_a_time(corpus, tmp_path):
    d = tmp_path / "crawl"
    _write(d, corpus[:50])
    coll = Collection(tmp_path / "coll", create=True)
    held = coll.lock()
    try:
        with pytest.raises(ValueError, match="another merge"):
            merge([d], tmp_path / "coll")
    finally:
        held.close()
    assert merge([d], tmp_path / "coll").fingerprints == 50


def test_the_lock_comes_before_the_collection_header(corpus, tmp_path):
    """A merge must not read (or create) the header another merge may be
    about to replace: it waits for nothing and touches nothing while locked."""
    d = tmp_path / "crawl"
    _write(d, corpus[:50])
    held = Collection.lock_directory(tmp_path / "coll")
    try:
        with pytest.raises(ValueError, match="another merge"):
            merge([d], tmp_path / "coll")
        assert not (tmp_path / "coll" / "collection.json").exists()
    finally:
        held.close()
    assert merge([d], tmp_path / "coll").fingerprints == 50


def test_recall_one_probes_every_flip_set_and_sizes_follow_the_data(corpus, tmp_path,
                                                                     monkeypatch):
    d = tmp_path / "crawl"
    _write(d, corpus)
    exact = merge([d], tmp_path / "exact", distance=H, exact=True, first=False, commit=False)
    # a huge chunk size must not size the tables: the header bits follow the data
    full = merge([d], tmp_path / "full", distance=H, recall=1.0, first=False, commit=False,
                 chunk_size=1 << 40)
    from scrapy_simdup._ext.batchjoin import flip_set_count
    from scrapy_simdup.merge.probes import header_bits
    t = header_bits(len(corpus))
    assert full.probes == flip_set_count(t, H)          # every flip set, not a fallback
    got = {(int(a), int(b)) for a, b in zip(full.pairs_array["id"],
                                           full.pairs_array["duplicate_of"])}
    want = {(int(a), int(b)) for a, b in zip(exact.pairs_array["id"],
                                            exact.pairs_array["duplicate_of"])}
    assert got == want
    # where every flip set is too many, a clear error points to --exact
    import scrapy_simdup.merge.probes as merge_module
    monkeypatch.setattr(merge_module, "MAX_MERGE_PROBES", full.probes - 1)
    with pytest.raises(ValueError, match="--exact"):
        merge([d], tmp_path / "wide", distance=H, recall=1.0, commit=False)


def test_a_damaged_run_entry_is_a_corrupt_file_error(corpus, tmp_path):
    d = tmp_path / "crawl"
    _write(d, corpus[:50])
    merge([d], tmp_path / "coll")
    meta_path = tmp_path / "coll" / "collection.json"
    meta = json.loads(meta_path.read_text())
    for runs in (["x"], [{"start": 0}], [{"count": "50"}]):
        meta_path.write_text(json.dumps({**meta, "runs": runs}))
        with pytest.raises(CorruptFileError, match="run entry"):
            Collection(tmp_path / "coll")


def test_pairs_of_an_interrupted_merge_are_not_lost(corpus, tmp_path, monkeypatch):
    """The groups commit as they go, --pairs is written at the end: a merge
    killed in between used to lose those pairs from every --pairs output."""
    d = tmp_path / "crawl"
    _write(d, corpus)
    out = tmp_path / "pairs.jsonl"
    real_urls = Collection.urls
    calls = []

    def dies_while_writing(self, ids):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("killed while writing --pairs")
        return real_urls(self, ids)
    monkeypatch.setattr(Collection, "urls", dies_while_writing)
    with pytest.raises(RuntimeError):
        merge([d], tmp_path / "coll", distance=H, chunk_size=256, pairs_out=out)
    monkeypatch.setattr(Collection, "urls", real_urls)
    assert not out.exists()                          # no half-written file
    committed = Collection(tmp_path / "coll").meta["pairs"]
    assert committed > 0 and stats([d], tmp_path / "coll")["directories"][0][
        "pending_batches"] == 0
    # nothing left to merge: the next --pairs run writes the pairs never written
    again = merge([d], tmp_path / "coll", distance=H, pairs_out=out)
    rows, _ = _read_pairs(out)
    assert again.fingerprints == 0 and again.earlier_unreported_pairs == committed == len(rows)
    # once written, they are not written again
    merge([d], tmp_path / "coll", distance=H, pairs_out=tmp_path / "later.jsonl")
    assert (tmp_path / "later.jsonl").read_text() == ""
    # an output over the collection's own files is refused before merging
    with pytest.raises(ValueError, match="inside the collection"):
        merge([d], tmp_path / "coll", pairs_out=tmp_path / "coll" / "pairs.bin")


def test_unreported_pairs_are_exactly_those_of_the_interrupted_merge(corpus, tmp_path,
                                                                     monkeypatch):
    """Only what a --pairs merge committed is owed to a later --pairs file:
    not the pairs of merges without --pairs, nor anything when the --pairs
    merge failed before committing."""
    a, b, c = (tmp_path / n for n in "abc")
    _write(a, corpus[:200])
    _write(b, corpus[200:400])
    _write(c, corpus[400:])
    coll = tmp_path / "coll"
    # fails before committing anything: nothing is owed
    real_append = Collection.append

    def dies(self, *args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(Collection, "append", dies)
    with pytest.raises(KeyboardInterrupt):
        merge([a], coll, distance=H, pairs_out=tmp_path / "p0.jsonl")
    monkeypatch.setattr(Collection, "append", real_append)
    assert "pairs_unreported" not in Collection(coll).meta
    # a --pairs merge killed after committing, then a plain merge, then --pairs
    real_write = merge.__globals__["write_pairs"]

    def killed(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setitem(merge.__globals__, "write_pairs", killed)
    with pytest.raises(KeyboardInterrupt):
        merge([a], coll, distance=H, chunk_size=64, pairs_out=tmp_path / "p1.jsonl")
    monkeypatch.setitem(merge.__globals__, "write_pairs", real_write)
    owed = Collection(coll).meta["pairs"]
    plain = merge([a, b], coll, distance=H)
    assert plain.earlier_unreported_pairs == owed
    last = merge([a, b, c], coll, distance=H, pairs_out=tmp_path / "p2.jsonl")
    rows, _ = _read_pairs(tmp_path / "p2.jsonl")
    assert last.earlier_unreported_pairs == owed
    assert len(rows) == owed + last.pairs                # not the plain merge's pairs
    assert "pairs_unreported" not in Collection(coll).meta


def test_pairs_go_through_symlinks_and_to_fifos(corpus, tmp_path):
    import stat
    import threading
    d = tmp_path / "crawl"
    _write(d, corpus[:300])
    real = tmp_path / "real.jsonl"
    real.write_text("old\n")
    real.chmod(0o644)
    link = tmp_path / "latest.jsonl"
    link.symlink_to(real)
    merge([d], tmp_path / "coll", distance=H, pairs_out=link)
    assert link.is_symlink() and real.read_text().count("\n") > 0
    assert "old" not in real.read_text() and stat.S_IMODE(real.stat().st_mode) == 0o644
    fifo = tmp_path / "pairs.fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(Path(fifo).read_text()))
    reader.start()
    _write(tmp_path / "more", corpus[300:400])
    merge([tmp_path / "more"], tmp_path / "coll", distance=H, pairs_out=fifo)
    reader.join(timeout=30)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and got


@pytest.mark.parametrize("seed", range(5))
def test_stable_argsort_keeps_equal_values_in_arrival_order(seed):
    """The merge's SIMD argsort puts runs of equal values (exact duplicate
    pages) back in arrival order: the same order as NumPy's stable sort."""
    from scrapy_simdup.merge.batchscan import stable_argsort

    rng = np.random.default_rng(seed)
    values = rng.integers(0, 2**64, 5000, dtype=np.uint64)
    # runs of equal values, some adjacent in sorted order
    values[rng.integers(0, 5000, 1500)] = values[rng.integers(0, 50, 1500)]
    values[:3] = [7, 7, 8]
    order, ordered = stable_argsort(values)
    want = np.argsort(values, kind="stable")
    assert np.array_equal(order, want)
    assert np.array_equal(ordered, values[want])
    empty, _ = stable_argsort(np.zeros(0, dtype=np.uint64))
    assert len(empty) == 0


def test_pairs_are_sorted_by_id_then_duplicate_of():
    from scrapy_simdup.merge.collection import PAIR_DTYPE
    from scrapy_simdup.merge.run import _sort_pairs

    rng = np.random.default_rng(3)
    # repeated ids (one 64-bit key), ids beyond 32 bits (the lexsort), and
    # distinct dense ids as PSM-F finds them (placed by id)
    for ids, hi in ((rng.integers(0, 1000, 3000), 1000),
                    (rng.integers(0, 2**40, 3000), 2**40),
                    (rng.permutation(5000)[:3000] + 10**6, 10**6)):
        pairs = np.zeros(3000, dtype=PAIR_DTYPE)
        pairs["id"] = ids
        pairs["duplicate_of"] = rng.integers(0, hi, 3000)
        pairs["distance"] = rng.integers(0, 4, 3000)
        got = _sort_pairs(pairs)
        want = pairs[np.lexsort((pairs["duplicate_of"], pairs["id"]))]
        assert np.array_equal(got[["id", "duplicate_of"]], want[["id", "duplicate_of"]])
        assert sorted(got.tolist()) == sorted(pairs.tolist())
    assert len(_sort_pairs(np.zeros(0, dtype=PAIR_DTYPE))) == 0


def test_header_bits_follow_the_join_kernel():
    """A scalar join sweeps 4x slower: it gets 2 more header bits (fewer
    entries per bucket) than a SIMD one."""
    from scrapy_simdup._ext import batchjoin
    from scrapy_simdup.merge.probes import header_bits

    best = batchjoin.join_kernel_level()
    try:
        batchjoin.join_kernel(0)
        assert header_bits(2**20) == 17
        if best > 0:
            batchjoin.join_kernel(best)
            assert header_bits(2**20) == 15
        assert header_bits(10) == 4               # the floor
    finally:
        batchjoin.join_kernel()


def test_the_default_rule_takes_its_probes_from_the_recall_calibration():
    """At the verified rule's radius a merge uses buckets of about 64 pages
    and the fewest probes whose calibrated recall reaches the target (0.95
    by default), and states that recall; a target the calibration cannot
    promise within the probe table's bound points to --exact."""
    from scrapy_simdup.merge.probes import (
        DEFAULT_WIDE_MERGE_RECALL,
        MAX_MERGE_PROBES,
        expected_recall,
        header_bits,
        merge_probes,
    )

    assert header_bits(2**20, 22) == 14 and header_bits(2**20, 3) <= 17
    for t in (8, 13, 16, 19):
        for target in (None, 0.9, 0.97):
            want = DEFAULT_WIDE_MERGE_RECALL if target is None else target
            k = merge_probes(22, t, target)
            assert expected_recall(22, t, k) >= want
            assert k == 15 or expected_recall(22, t, k - 1) < want      # the fewest
    assert merge_probes(22, 4) == 15            # every flip set of a short header
    assert expected_recall(22, 13, 34) is not None and expected_recall(3, 13, 34) is None
    with pytest.raises(ValueError, match="--exact"):
        merge_probes(22, 19, 0.9999)
    assert merge_probes(22, 16, 0.99) <= MAX_MERGE_PROBES


def test_probe_runs_change_the_speed_not_the_pairs(corpus, tmp_path, monkeypatch):
    """At h >= 6 the probe table is split in runs by flipped header bits, with
    a tighter low-bit filter per run: the same pairs as one run per bucket."""
    from scrapy_simdup.merge import matchers as _merge

    d = tmp_path / "crawl"
    _write(d, corpus)
    assert _merge.probe_runs(4, 9) == 9 and _merge.probe_runs(4, 3) == 1

    def pairs(name, **kw):
        s = merge([d], tmp_path / name, distance=9, chunk_size=256, commit=False, **kw)
        return set(zip(s.pairs_array["id"].tolist(), s.pairs_array["duplicate_of"].tolist()))

    exact = pairs("exact", exact=True, first=False)
    with_runs = pairs("runs", first=False)
    monkeypatch.setattr(_merge, "probe_runs", lambda t, distance: 1)
    one_run = pairs("one", first=False)
    assert with_runs == one_run and with_runs <= exact and len(with_runs) >= 0.9 * len(exact)


def test_a_merge_without_commit_numbers_each_group_as_a_commit_would(corpus, tmp_path):
    """commit=False over several groups of batches: the new fingerprints
    are numbered one after the other, as committed, never twice the same
    id; the collection is left as it was."""
    d = tmp_path / "crawl"
    _write(d, corpus)
    dry = merge([d], tmp_path / "dry", distance=H, chunk_size=256, commit=False)
    assert dry.batches >= 3                    # batches of 200: a group each
    ids = dry.pairs_array["id"]
    assert len(ids) > 50 and len(np.unique(ids)) == len(ids)       # PSM-F: one pair each
    assert ids.min() >= 0 and ids.max() < dry.fingerprints
    assert Collection(tmp_path / "dry").count == 0
    # the first group's pairs are the committed merge's
    done = merge([d], tmp_path / "done", distance=H, chunk_size=256)
    first = lambda s: s.pairs_array[s.pairs_array["id"] < 200]    # noqa: E731
    assert np.array_equal(first(dry), first(done))
