"""The merge decides matches by the verified rule (either key within h, the
sketches agreeing), checked against a brute-force NumPy reference on real
pages: spotsigs-dev stories (the same wire story on other sites) mixed with
unrelated distractor pages, fingerprinted by the Fingerprinter."""
import gzip
import json
import random

import numpy as np
import pytest

from scrapy_simdup._limits import DEFAULT_DISTANCE, DEFAULT_MIN_SIMILARITY
from scrapy_simdup.fingerprint.fingerprinter import Fingerprinter
from scrapy_simdup.fingerprint.sketch import similarity
from scrapy_simdup.merge import merge
from scrapy_simdup.merge.collection import Collection
from scrapy_simdup.storage.batchfile import OutdatedBatchError
from scrapy_simdup.storage.batchwriter import BatchWriter
from tests.batch_pages import raw_page
from tests.data_root import FULL_DATA
from tests.test_batchfile import write_version1_batch
from tests.test_merge import reference_pairs

H = DEFAULT_DISTANCE


@pytest.fixture(scope="module")
def pages(pages_root):
    """(url, Fingerprint) of 14 spotsigs-dev stories and 120 distractors, shuffled."""
    stories = sorted(p for p in (pages_root / "spotsigs-dev").iterdir() if p.is_dir())[:14]
    files = [f for s in stories for f in sorted(s.glob("*.gz"))]
    files += sorted((pages_root / "distractors-dragnet").glob("*.gz"))[:120]
    random.Random(7).shuffle(files)
    fp = Fingerprinter()
    return [(f"https://{f.parent.name}.example/{f.name}",
             fp.fingerprint_html(gzip.decompress(f.read_bytes()))) for f in files]


def _write(directory, items, batch_size=37):
    with BatchWriter(directory, batch_size=batch_size) as w:
        for url, page in items:
            w.append(page, url)


def _pairs(summary):
    p = summary.pairs_array
    return set(zip(p["id"].tolist(), p["duplicate_of"].tolist()))


@pytest.mark.parametrize("min_similarity", [DEFAULT_MIN_SIMILARITY, 0.0, 0.5])
def test_verdicts_agree_with_the_numpy_reference(pages, tmp_path, min_similarity):
    want = reference_pairs([p for _, p in pages], H, min_similarity)
    dups = {i for i, _ in want}
    # real near-duplicates, found at the wide radius
    assert len(dups) > (100 if FULL_DATA else 40)
    d = tmp_path / "crawl"
    _write(d, pages)
    runs = {"exact": dict(exact=True), "psm-a": dict(first=False, recall=1.0),
            "psm-f": dict(first=True, recall=1.0),
            "psm-a-index": dict(first=False, recall=1.0, engine="index"),
            "psm-f-index": dict(first=True, recall=1.0, engine="index")}
    for name, kw in runs.items():
        s = merge([d], tmp_path / name, distance=H, min_similarity=min_similarity,
                  chunk_size=128, progress=False, **kw)
        assert s.min_similarity == min_similarity
        got = _pairs(s)
        if name.startswith("psm-f"):
            # one verified earlier match per page that has any
            assert got <= want, name
            assert len({i for i, _ in got}) == len(got)
            assert {i for i, _ in got} == dups, name
        else:
            assert got == want, name


def test_default_probes_find_the_reference_pairs_here(pages, tmp_path):
    """At the default probes a small merge probes every flip set of its short
    header: the same verdicts as the reference."""
    want = reference_pairs([p for _, p in pages], H)
    d = tmp_path / "crawl"
    _write(d, pages)
    s = merge([d], tmp_path / "coll", first=True, chunk_size=256, progress=False)
    assert s.distance == H
    got = _pairs(s)
    assert got <= want and {i for i, _ in got} == {i for i, _ in want}


def test_incremental_merges_and_the_pairs_file(pages, tmp_path):
    """Three crawls merged one after the other (later chunks hold several
    runs): every pair of the reference, each written with its distance (the
    smaller key distance) and its verified similarity."""
    want = reference_pairs([p for _, p in pages], H)
    n = len(pages)
    dirs = [tmp_path / f"crawl-{k}" for k in range(3)]
    cuts = [0, n // 4, n // 2, n]
    coll = tmp_path / "coll"
    found = []
    for k, d in enumerate(dirs):
        _write(d, pages[cuts[k]:cuts[k + 1]], batch_size=29)
        out = tmp_path / f"pairs-{k}.jsonl"
        merge(dirs[:k + 1], coll, distance=H, exact=(k == 1), first=False, recall=1.0
              if k != 1 else None, chunk_size=64 if k < 2 else 4096, pairs_out=out,
              progress=False)
        found += [json.loads(line) for line in out.read_text().splitlines()]
    index = {u: i for i, (u, _) in enumerate(pages)}
    assert {(index[r["url"]], index[r["duplicate_of"]]) for r in found} == want
    assert len(found) == len(want)
    for r in found:
        a, b = pages[index[r["url"]]][1], pages[index[r["duplicate_of"]]][1]
        dist = min((a.value ^ b.value).bit_count(), (a.value2 ^ b.value2).bit_count())
        agree = int(np.count_nonzero(np.frombuffer(a.sketch, np.uint8)
                                     == np.frombuffer(b.sketch, np.uint8)))
        assert r["distance"] == dist <= H
        assert r["similarity"] == round(similarity(agree), 3) >= DEFAULT_MIN_SIMILARITY - 1e-3
    st = Collection(coll)
    assert st.count == n and st.meta["pairs"] == len(want)


@pytest.mark.parametrize("engine", ["join", "index"])
@pytest.mark.parametrize("bad_first", [True, False])
def test_psm_f_drops_an_element_only_at_a_verified_match(tmp_path, engine, bad_first):
    """A candidate whose sketch disagrees (near on the key, another page) must
    not end the search of PSM-F: the verified candidate is found, in either
    order in the chunk."""
    W = np.linspace(-1.0, 1.0, 64)
    good = bytes(range(32))
    other = bytes(range(100, 132))
    x = 0x5A5A_0000_0000_0000
    bad_v, good_v = (x ^ 0b11, x ^ 0b1100) if bad_first else (x ^ 0b1100, x ^ 0b11)
    stored = tmp_path / "stored"
    with BatchWriter(stored, batch_size=10) as w:
        w.append(raw_page(bad_v if bad_first else good_v, W, value2=1,
                          sketch=other if bad_first else good), "https://a/first")
        w.append(raw_page(good_v if bad_first else bad_v, W, value2=2,
                          sketch=good if bad_first else other), "https://a/second")
    coll = tmp_path / "coll"
    merge([stored], coll, distance=3, progress=False)
    new = tmp_path / "new"
    with BatchWriter(new, batch_size=10) as w:
        w.append(raw_page(x, W, value2=3, sketch=good), "https://a/query")
    s = merge([new], coll, distance=3, first=True, engine=engine, progress=False)
    good_id = 1 if bad_first else 0
    assert _pairs(s) == {(2, good_id)}


def test_a_version1_batch_stops_the_merge_with_what_to_do(pages, tmp_path):
    d = tmp_path / "crawl"
    _write(d, pages[:20])
    write_version1_batch(d, "batch-00000099-1")
    for skip in (False, True):      # not damage: never skipped
        with pytest.raises(OutdatedBatchError, match="re-crawl with this version"):
            merge([d], tmp_path / "coll", skip_damaged=skip, progress=False)
    assert not (tmp_path / "coll" / "collection.json").exists() \
        or Collection(tmp_path / "coll").count == 0


def test_a_version1_collection_is_refused_with_what_to_do(pages, tmp_path):
    d = tmp_path / "crawl"
    _write(d, pages[:20])
    coll = tmp_path / "coll"
    merge([d], coll, progress=False)
    meta = json.loads((coll / "collection.json").read_text())
    meta["version"] = 1
    (coll / "collection.json").write_text(json.dumps(meta))
    with pytest.raises(OutdatedBatchError, match="new collection") as err:
        merge([d], coll, progress=False)
    assert "collection format version 1" in str(err.value)
