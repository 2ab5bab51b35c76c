"""weighting="idf": the IDF table learned from the crawl, its file, and the Fingerprinter."""
from __future__ import annotations

import gzip
import os

import numpy as np
import pytest

from scrapy_simdup import Fingerprinter, fingerprint_html
from scrapy_simdup.exceptions import CorruptFileError
from scrapy_simdup.fingerprint.idf import IdfTable
from scrapy_simdup.integration.config import SimdupConfig


def _html(path):
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        data = gzip.decompress(data)
    return data


@pytest.fixture(scope="module")
def pages(pages_root):
    paths = sorted((pages_root / "article-extraction-benchmark" / "html").glob("*.html*"))[:12]
    assert len(paths) == 12
    return [_html(p) for p in paths]


def test_weights_are_logtf_times_smoothed_idf():
    table = IdfTable(learn_pages=10, bits=8)
    # bucket = top 8 bits of the hash
    a, b, c = (np.uint64(x << 56) for x in (1, 2, 3))
    table.learn(np.array([a, b], np.uint64))
    table.learn(np.array([a], np.uint64))
    hashes = np.array([a, b, c], np.uint64)
    tf = np.array([1.0, 2.0, 3.0])
    n = 2
    df = np.array([2, 1, 0])
    expected = (1 + np.log(tf)) * (1 + np.log((1 + n) / (1 + df)))
    np.testing.assert_allclose(table.weights(hashes, tf), expected)


def test_a_page_counts_once_per_bucket_and_the_table_freezes():
    table = IdfTable(learn_pages=2, bits=8)
    h = np.array([5 << 56, (5 << 56) + 1, 7 << 56], np.uint64)   # two share a bucket
    assert table.learn(h) and table.counts[5] == 1 and table.counts[7] == 1
    assert not table.frozen
    assert table.learn(h) and table.frozen
    before = table.counts.copy()
    assert not table.learn(h)
    np.testing.assert_array_equal(table.counts, before)
    assert table.pages == 2


def test_shared_buckets_never_count_past_the_pages():
    table = IdfTable(learn_pages=5, bits=8)
    for _ in range(3):
        table.learn(np.array([9 << 56], np.uint64))
    table.counts[9] = 50                      # as if many features collided
    w = table.weights(np.array([9 << 56], np.uint64), np.array([1.0]))
    assert w[0] == pytest.approx(1.0)         # idf floor: 1 + ln(1) when df = N


def test_save_load_round_trip(tmp_path):
    table = IdfTable(learn_pages=3)
    rng = np.random.default_rng(1)
    for _ in range(3):
        table.learn(rng.integers(0, 2**63, 500, dtype=np.uint64) * np.uint64(2))
    table.save(tmp_path / "idf.bin")
    back = IdfTable.load(tmp_path / "idf.bin")
    assert (back.table_id, back.pages, back.learn_pages, back.bits) == \
        (table.table_id, 3, 3, table.bits)
    np.testing.assert_array_equal(back.counts, table.counts)
    assert back.frozen


@pytest.mark.parametrize("damage, message", [
    (lambda d: d[:20], "truncated"),
    (lambda d: d[:-7], "truncated"),
    (lambda d: b"NOTSIMDU" + d[8:], "not a scrapy-simdup IDF table"),
    (lambda d: d[:8] + (9).to_bytes(4, "little") + d[12:], "format 9"),
    (lambda d: d[:100] + bytes([d[100] ^ 1]) + d[101:], "checksum"),
    (lambda d: d[:16] + (70000).to_bytes(8, "little") + d[24:], "header is corrupt"),
])
def test_a_damaged_table_is_a_corrupt_file_error_naming_it(tmp_path, damage, message):
    path = tmp_path / "idf.bin"
    table = IdfTable(learn_pages=4, bits=10)
    table.learn(np.arange(1, 200, dtype=np.uint64) << np.uint64(40))
    path.write_bytes(damage(table.to_bytes()))
    with pytest.raises(CorruptFileError, match=message) as err:
        IdfTable.load(path)
    assert "idf.bin" in str(err.value)


def test_fingerprints_learn_in_crawl_order_then_stay_fixed(pages):
    logtf = Fingerprinter()
    a = Fingerprinter(weighting="idf", idf_pages=5)
    b = Fingerprinter(weighting="idf", idf_pages=5)
    # an empty table weighs every feature alike: the first page is its log-tf fingerprint
    assert a.fingerprint_html(pages[0]).value == logtf.fingerprint_html(pages[0]).value
    values_a, values_b = [], []
    for fp, out in ((a, values_a), (b, values_b)):
        for html in pages:
            f = fp.fingerprint_html(html)
            out.append(f.value)
            fp.learn(f)
    assert values_a == values_b                  # deterministic in crawl order
    assert a.idf.frozen and a.idf.pages == 5
    # frozen: the same page gives the same fingerprint from now on
    again = [a.fingerprint_html(h).value for h in pages]
    assert again == [a.fingerprint_html(h).value for h in pages]
    assert again[5:] == values_a[5:]             # pages after the freeze were already final
    assert again != [logtf.fingerprint_html(h).value for h in pages]


def test_the_version_names_the_table_and_a_saved_table_gives_the_same_fingerprints(pages, tmp_path):
    a = Fingerprinter(weighting="idf", idf_pages=4)
    for html in pages[:4]:
        a.learn(a.fingerprint_html(html))
    a.idf.save(tmp_path / "idf.bin")
    b = Fingerprinter(weighting="idf", idf_pages=4, idf=IdfTable.load(tmp_path / "idf.bin"))
    assert b.version == a.version and f"{a.idf.table_id:016x}" in a.version
    assert Fingerprinter(weighting="idf", idf_pages=4).version != a.version
    assert [b.fingerprint_html(h).value for h in pages] == \
        [a.fingerprint_html(h).value for h in pages]


def test_idf_options_are_checked():
    with pytest.raises(ValueError, match="weighting='idf'"):
        Fingerprinter(weighting="logtf", idf=IdfTable())
    with pytest.raises(ValueError, match="idf_pages"):
        Fingerprinter(weighting="idf", idf_pages=0)
    with pytest.raises(ValueError, match="idf_pages is 10.*learns from 4"):
        Fingerprinter(weighting="idf", idf_pages=10, idf=IdfTable(learn_pages=4))
    # a one-off fingerprint has no crawl to learn from
    with pytest.raises(ValueError, match="learns from the pages of a crawl"):
        fingerprint_html(b"<html><body><p>some words here</p></body></html>", weighting="idf")
    # learn() is a no-op for the other weightings
    fp = Fingerprinter()
    assert not fp.learn(fp.fingerprint_text(" ".join(f"word{i}" for i in range(40))))


def test_idf_settings_are_checked(caplog):
    config = SimdupConfig.from_settings({"SIMDUP_WEIGHTING": "idf", "SIMDUP_IDF_PAGES": 50})
    fp = config.make_fingerprinter()
    assert fp.idf.learn_pages == 50
    with pytest.raises(ValueError, match="SIMDUP_IDF_PAGES"):
        SimdupConfig.from_settings({"SIMDUP_IDF_PAGES": "many"})
    # set without idf weighting: it does nothing, and says so
    with caplog.at_level("WARNING"):
        fp = SimdupConfig.from_settings({"SIMDUP_IDF_PAGES": 70000}).make_fingerprinter()
    assert fp.idf is None and "SIMDUP_IDF_PAGES has no effect" in caplog.text
    with pytest.raises(ValueError, match="SIMDUP_IDF_PAGES"):
        SimdupConfig.from_settings({"SIMDUP_WEIGHTING": "idf",
                                    "SIMDUP_IDF_PAGES": 100000}).make_fingerprinter()
    with pytest.raises(ValueError, match="SIMDUP_WEIGHTING.*Redis"):
        SimdupConfig.from_settings({"SIMDUP_WEIGHTING": "idf",
                                    "SIMDUP_INDEX": "redis://localhost:6379/0"})


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_an_idf_file_that_is_not_a_file_is_named_as_corrupt(tmp_path, kind):
    path = tmp_path / "idf-1000.bin"
    if kind == "directory":
        path.mkdir()
    else:
        os.mkfifo(path)
    with pytest.raises(CorruptFileError, match=f"is a {'FIFO' if kind == 'fifo' else kind}"):
        IdfTable.load(path)
