"""Batch file format: round trip, NumPy readability, damaged files named in the error."""
import json
import os

import numpy as np
import pytest

from scrapy_simdup.exceptions import CorruptFileError
from scrapy_simdup.storage.atomic import atomic_write
from scrapy_simdup.storage.batchfile import (
    BATCH_DTYPE,
    header_crc32,
    list_batches,
    read_batch,
    read_canonicals,
    read_meta,
    unfinished_batches,
    verify_batch,
    write_batch,
)
from scrapy_simdup.storage.batchwriter import BatchWriter
from tests.batch_pages import features_page, raw_page


def _fingerprints(n, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        words = [f"w{int(x)}" for x in rng.integers(0, 500, 40)]
        out.append((features_page(words), f"https://example.com/page/{i}?q=ü"))
    return out


def test_round_trip_and_numpy_readable(tmp_path):
    items = _fingerprints(25)
    writer = BatchWriter(tmp_path, batch_size=10)
    ids = [writer.append(p, u) for p, u in items]
    assert ids == list(range(25))
    assert len(writer) == 5 and writer.flushed_batches == 2
    writer.close()
    headers = list_batches(tmp_path)
    assert len(headers) == 3
    batches = [read_batch(p) for p in headers]
    records = np.concatenate([b.records for b in batches])
    urls = [u for b in batches for u in b.urls]
    assert records["value"].tolist() == [p.value for p, _ in items]
    assert records["value2"].tolist() == [p.value2 for p, _ in items]
    assert [bytes(s) for s in records["sketch"]] == [p.sketch for p, _ in items]
    assert records["id"].tolist() == ids
    assert urls == [u for _, u in items]
    for field, suffix in (("W", ""), ("W2", "2")):
        W = np.array([getattr(p, field) for p, _ in items])
        rms = np.sqrt((W ** 2).mean(axis=1))
        assert np.allclose(records["wrms" + suffix], rms, rtol=1e-6)
        c = np.abs(W[:, 63:31:-1]) / rms[:, None]          # normalised header weights
        assert np.all(np.abs(records["cq" + suffix] / 32.0 - np.minimum(c, 255 / 32))
                      <= 1 / 64 + 1e-9)
    # plain NumPy reads the data file, and the header documents it
    raw = np.load(headers[0].with_suffix(".npy"))
    assert raw.dtype == BATCH_DTYPE and len(raw) == 10
    meta = json.loads(headers[0].read_text())
    assert meta["format"] == "simdup-batch" and meta["version"] == 3 and meta["count"] == 10
    assert BATCH_DTYPE.itemsize == 128 and meta["sketch_bytes"] == 32


def test_restart_continues_ids_and_names(tmp_path):
    items = _fingerprints(7)
    with BatchWriter(tmp_path, batch_size=4) as w:
        for p, u in items:
            w.append(p, u)
    w2 = BatchWriter(tmp_path, batch_size=4)
    assert w2.next_id == 7
    assert w2.append(items[0][0], "again") == 7
    w2.close()
    names = [p.name for p in list_batches(tmp_path)]
    assert len(names) == 3 and len(set(names)) == 3
    assert read_batch(list_batches(tmp_path)[-1]).records["id"].tolist() == [7]


def test_urls_with_newlines_are_escaped(tmp_path):
    page, _ = _fingerprints(1)[0]
    with BatchWriter(tmp_path, batch_size=10) as w:
        w.append(page, "http://a/\nb\r")
        w.append(page, b"http://bytes/")
    batch = read_batch(list_batches(tmp_path)[0])
    assert batch.urls == ["http://a/%0Ab%0D", "http://bytes/"]


def test_keys_without_a_utf8_form_are_escaped_not_fatal(tmp_path):
    """A lone surrogate (an item id like "bad-\\ud800") used to fail every
    flush of its batch; it is written as its escape, the batch as a whole."""
    page, _ = _fingerprints(1)[0]
    with BatchWriter(tmp_path, batch_size=10) as w:
        w.append(page, "bad-\ud800")
        w.append(page, b"http://raw/\xff".decode("utf-8", "surrogateescape"))
        w.append(page, "https://example.com/caf\u00e9")
    batch = read_batch(list_batches(tmp_path)[0])
    assert batch.urls == ["bad-\\ud800", "http://raw/\udcff", "https://example.com/caf\u00e9"]


def _one_batch(tmp_path):
    with BatchWriter(tmp_path, batch_size=100) as w:
        for p, u in _fingerprints(20):
            w.append(p, u)
    return list_batches(tmp_path)[0]


def test_truncated_data_names_the_file(tmp_path):
    header = _one_batch(tmp_path)
    npy = header.with_suffix(".npy")
    with open(npy, "r+b") as f:
        f.truncate(npy.stat().st_size - 7)
    with pytest.raises(CorruptFileError, match="truncated") as err:
        read_batch(header)
    assert str(npy) in str(err.value)


def test_flipped_byte_is_a_checksum_error(tmp_path):
    header = _one_batch(tmp_path)
    npy = header.with_suffix(".npy")
    data = bytearray(npy.read_bytes())
    data[-3] ^= 0xFF
    npy.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError, match="checksum") as err:
        read_batch(header)
    assert err.value.path == str(npy)


@pytest.mark.parametrize("damage", ["fortran", "version", "dtype", "count"])
@pytest.mark.parametrize("verify", [True, False])
def test_odd_npy_headers_are_named(tmp_path, damage, verify):
    """A .npy header the batch header does not describe (rewritten with a
    consistent length and checksum, so only the header check can catch it)."""
    header = _one_batch(tmp_path)
    npy = header.with_suffix(".npy")
    records = np.load(npy)
    if damage == "fortran":
        data = npy.read_bytes().replace(b"'fortran_order': False", b"'fortran_order': True ")
    elif damage == "version":
        data = bytearray(npy.read_bytes())
        data[6] = 4                                  # format version 4.0
        data = bytes(data)
    else:
        import io
        buf = io.BytesIO()
        np.save(buf, records[:-1] if damage == "count" else records.astype(
            [(n, "<f8" if n == "value" else records.dtype[n]) for n in records.dtype.names]))
        data = buf.getvalue()
    npy.write_bytes(data)
    meta = read_meta(header)
    import zlib
    meta.update(npy_bytes=len(data), npy_crc32=zlib.crc32(data) & 0xFFFFFFFF)
    meta["header_crc32"] = header_crc32(meta)       # a consistent header
    header.write_text(json.dumps(meta))
    want = {"fortran": "Fortran", "version": "version", "dtype": "unexpected array",
            "count": "unexpected array"}[damage]
    with pytest.raises(CorruptFileError, match=want) as err:
        read_batch(header, verify=verify)
    assert err.value.path == str(npy)
    # a merge reading it into its own array says the same
    out = np.empty(meta["count"], dtype=BATCH_DTYPE)
    with pytest.raises(CorruptFileError, match=want):
        read_batch(header, verify=verify, out=out)


def test_damaged_urls_and_header(tmp_path):
    header = _one_batch(tmp_path)
    urls = header.with_suffix(".urls")
    urls.write_bytes(urls.read_bytes()[:-5])
    with pytest.raises(CorruptFileError, match=str(urls)):
        read_batch(header)
    header.write_text("{not json")
    with pytest.raises(CorruptFileError, match="not valid JSON"):
        read_batch(header)
    header.write_text(json.dumps({"format": "simdup-batch", "version": 99}))
    with pytest.raises(CorruptFileError, match="version 99"):
        read_batch(header)


def test_unfinished_flush_is_ignored(tmp_path):
    header = _one_batch(tmp_path)
    os.unlink(header)       # the crash came before the header was written
    assert list_batches(tmp_path) == []
    assert unfinished_batches(tmp_path) == [header.with_suffix(".npy")]


def test_bad_input(tmp_path):
    w = BatchWriter(tmp_path, batch_size=2)
    page, u = _fingerprints(1)[0]
    v, W = page.value, page.W
    with pytest.raises(ValueError, match="shape"):
        w.append(page._replace(W=W[:10]), u)
    with pytest.raises(ValueError, match="shape"):
        w.append(page._replace(W2=None), u)
    with pytest.raises(ValueError, match="64-bit"):
        w.append(page._replace(value=-1), u)
    with pytest.raises(ValueError, match="value2 must be a 64-bit"):
        w.append(page._replace(value2=1 << 64), u)
    with pytest.raises(ValueError, match="finite"):
        w.append(page._replace(W2=np.full(64, np.nan)), u)
    with pytest.raises(ValueError, match="sketch"):
        w.append(page._replace(sketch=b"short"), u)
    with pytest.raises(TypeError, match="a page"):
        w.append(v, W, u)           # the earlier API: a bare value and weights
    with pytest.raises(TypeError, match="url"):
        w.append(page, 123)
    assert len(w) == 0
    with pytest.raises(ValueError, match="batch_size"):
        BatchWriter(tmp_path, batch_size=0)
    with pytest.raises(TypeError, match="dtype"):
        write_batch(tmp_path, "batch-x", np.zeros(2), ["a", "b"])
    w.close()
    with pytest.raises(RuntimeError, match="closed"):
        w.append(page, u)


def test_atomic_write_keeps_old_file_on_error(tmp_path):
    target = tmp_path / "f.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with atomic_write(target) as f:
            f.write(b"new partial")
            raise RuntimeError("killed")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin"]


def test_writer_keeps_a_batch_it_cannot_write_and_writes_it_later(tmp_path):
    from scrapy_simdup.exceptions import BatchWriteError
    d = tmp_path / "q"
    w = BatchWriter(d, batch_size=3)
    W = np.ones(64)
    for i in range(3):
        w.append(raw_page(i, W), f"u{i}")
    assert len(list_batches(d)) == 1
    d.rename(tmp_path / "away")
    d.write_text("a file where the directory was")     # a real failing write
    w.append(raw_page(3, W), "u3")
    w.append(raw_page(4, W), "u4")
    with pytest.raises(BatchWriteError, match="3 fingerprints kept in memory"):
        w.append(raw_page(5, W), "u5")
    assert len(w) == 3
    w.append(raw_page(6, W), "u6")        # not retried at every record: after another batch
    d.unlink()
    (tmp_path / "away").rename(d)
    w.append(raw_page(7, W), "u7")
    w.append(raw_page(8, W), "u8")        # 6 pending: written now, in one batch
    assert len(w) == 0
    urls = [u for p in list_batches(d) for u in read_batch(p).urls]
    assert sorted(urls) == [f"u{i}" for i in range(9)]
    d.rename(tmp_path / "away2")
    d.write_text("again")
    w.append(raw_page(9, W), "u9")
    with pytest.raises(BatchWriteError, match="1 fingerprints were not written"):
        w.close()


@pytest.mark.parametrize("field, value", [("first_id", "abc"), ("first_id", -1),
                                          ("fingerprint", [1]), ("count", True)])
def test_damaged_header_fields_are_corrupt_for_readers_and_writers(tmp_path, field, value):
    """A header field of the wrong type is a CorruptFileError for the merge
    (it was a TypeError traceback), and a new writer in the directory just
    passes the batch by (it was a TypeError at start-up)."""
    import json
    header = _one_batch(tmp_path)
    meta = json.loads(header.read_text())
    meta[field] = value
    meta["header_crc32"] = header_crc32(meta)       # the field is wrong, not the checksum
    header.write_text(json.dumps(meta))
    with pytest.raises(CorruptFileError, match=field):
        read_meta(header)
    with BatchWriter(tmp_path, batch_size=10) as w:
        page, _ = _fingerprints(1)[0]
        w.append(page, "https://example.com/after")


def write_version1_batch(directory, name="batch-00000001-1", count=3):
    """A batch as scrapy-simdup wrote it before the second key and the
    sketch (format version 1: value, id, wrms, cq), checksums and all."""
    import zlib
    directory.mkdir(parents=True, exist_ok=True)
    dtype = np.dtype([("value", "<u8"), ("id", "<i8"), ("wrms", "<f4"), ("cq", "u1", (32,))])
    records = np.zeros(count, dtype=dtype)
    records["value"] = np.arange(count, dtype=np.uint64) * 12345
    records["id"] = np.arange(count)
    npy = directory / f"{name}.npy"
    np.save(npy, records)
    urls = "".join(f"https://old.example/{i}\n" for i in range(count)).encode()
    (directory / f"{name}.urls").write_bytes(urls)
    header = directory / f"{name}.json"
    header.write_text(json.dumps({
        "format": "simdup-batch", "version": 1, "count": count, "first_id": 0,
        "header_bits": 32, "dtype": dtype.descr, "npy_bytes": npy.stat().st_size,
        "npy_crc32": zlib.crc32(npy.read_bytes()), "urls_bytes": len(urls),
        "urls_crc32": zlib.crc32(urls), "created": 0.0}))
    return header


def test_a_version1_batch_is_refused_with_what_to_do(tmp_path):
    from scrapy_simdup.storage.batchfile import OutdatedBatchError
    header = write_version1_batch(tmp_path)
    for read in (read_meta, read_batch):
        with pytest.raises(OutdatedBatchError, match="re-crawl with this version") as err:
            read(header)
        assert err.value.path == str(header)
        assert "version 1" in str(err.value) and "sketch" in str(err.value)
        assert "cannot be computed" in str(err.value)
    # a writer in the same directory goes on after its ids
    with BatchWriter(tmp_path, batch_size=10) as w:
        assert w.append(_fingerprints(1)[0][0], "https://example.com/new") == 3


# -- version 3: the header's own checksum, canonical URLs; version 2 still read ----------

def _as_version2(header):
    """Rewrite a batch as version 2 wrote it: no canonical file, no header checksum."""
    meta = json.loads(header.read_text())
    meta["version"] = 2
    for key in ("header_crc32", "canonical_bytes", "canonical_crc32"):
        meta.pop(key, None)
    header.with_suffix(".canonical").unlink(missing_ok=True)
    header.write_text(json.dumps(meta))


@pytest.mark.parametrize("old, new", [(b'"fingerprint"', b'"fing0rprint"'),
                                      (b'"distance": 22', b'"distance": 23'),
                                      (b'"version": 3', b'"version": 2'),
                                      (b'"count": 10', b'"count": 19')])
def test_a_one_byte_change_in_a_header_is_corruption(tmp_path, old, new):
    pages = _fingerprints(10)
    w = BatchWriter(tmp_path, batch_size=10, fingerprint="recipe-1", distance=22)
    for page, url in pages:
        w.append(page, url)
    (header,) = list_batches(tmp_path)
    data = header.read_bytes()
    assert data.count(old) == 1
    header.write_bytes(data.replace(old, new))
    for read in (read_meta, read_batch, verify_batch):
        with pytest.raises(CorruptFileError, match="batch header") as err:
            read(header)
        assert err.value.path == str(header)


def test_canonical_urls_round_trip(tmp_path):
    pages = _fingerprints(4)
    w = BatchWriter(tmp_path, batch_size=4)
    canon = ["https://example.com/c0", None, "https://example.com/c\n2", ""]
    for (page, url), c in zip(pages, canon):
        w.append(page, url, canonical=c)
    (header,) = list_batches(tmp_path)
    batch = read_batch(header)
    assert batch.canonicals == ["https://example.com/c0", None, "https://example.com/c%0A2", None]
    assert verify_batch(header)["canonical_bytes"] == header.with_suffix(".canonical").stat().st_size
    # a batch of no declared canonical has no file
    w2 = BatchWriter(tmp_path / "none", batch_size=2)
    for page, url in pages[:2]:
        w2.append(page, url)
    (header2,) = list_batches(tmp_path / "none")
    assert not header2.with_suffix(".canonical").exists()
    assert read_batch(header2).canonicals == [None, None]
    # damage to the canonical file is named
    path = header.with_suffix(".canonical")
    path.write_bytes(path.read_bytes().replace(b"c0", b"cX"))
    with pytest.raises(CorruptFileError, match="canonical URL file checksum") as err:
        read_batch(header)
    assert err.value.path == str(path)
    with pytest.raises(CorruptFileError, match="canonical URL file checksum"):
        verify_batch(header)


def test_a_version2_batch_is_still_read(tmp_path):
    pages = _fingerprints(6)
    w = BatchWriter(tmp_path, batch_size=6, fingerprint="recipe-1")
    for i, (page, url) in enumerate(pages):
        w.append(page, url, canonical=f"https://example.com/c{i}")
    (header,) = list_batches(tmp_path)
    before = read_batch(header)
    _as_version2(header)
    assert read_meta(header)["version"] == 2 and verify_batch(header)["count"] == 6
    after = read_batch(header)
    assert np.array_equal(after.records, before.records) and after.urls == before.urls
    assert after.canonicals == [None] * 6 and read_canonicals(after) == [None] * 6
    # a writer goes on after its ids, writing version 3
    w = BatchWriter(tmp_path, batch_size=1)
    assert w.append(pages[0][0], "https://example.com/next") == 6
    assert [read_meta(h)["version"] for h in list_batches(tmp_path)] == [2, 3]
