"""The compact per-page columns of a backend against plain-Python references."""
import os
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scrapy_simdup.index.columns import ChunkedColumn, Column, KeyColumn, KeySet

KEYS = st.text(min_size=0, max_size=30) | st.sampled_from(
    ["http://a/", "http://a/?x=\udcff", "https://\u00e9t\u00e9.example/\U0001f600", ""])


@settings(max_examples=100, deadline=None)
@given(ops=st.lists(st.tuples(st.integers(0, 3), KEYS), max_size=60),
       block_rows=st.sampled_from([1, 2, 4, 64]))
def test_key_column_is_a_dict_of_rows_and_newest_rows(ops, block_rows):
    column, rows, newest = KeyColumn(block_rows), {}, {}
    for jump, key in ops:
        row = len(column) + (jump if jump < 3 else -min(len(column), 1))  # next, later, or earlier
        row = max(row, 0)
        column[row] = key
        for r in range(len(rows), row):
            rows.setdefault(r, None)
        old = rows.get(row)
        rows[row] = key
        if old is not None and newest.get(old) == row:
            del newest[old]
        newest[key] = row
        assert len(column) == max(rows) + 1
    for row, key in rows.items():
        assert column.get(row) == key
    for key, row in newest.items():
        assert column.row_of(key) == row
    assert list(column.values()) == [k for _, k in sorted(rows.items()) if k is not None]
    assert column.get(len(column) + 5, "none") == "none"


def test_key_column_at_scale_and_missing_keys():
    column = KeyColumn()
    urls = [f"https://site{i % 97}.example/{i}/\u00e9" for i in range(50_000)]
    for row, url in enumerate(urls):
        column[row] = url
    rng = random.Random(3)
    for row in rng.sample(range(len(urls)), 500):
        assert column[row] == urls[row] and column.row_of(urls[row]) == row
    # rows of a few blocks read again and again (kept decompressed), and of
    # more blocks than are kept, in turn
    for blocks in (3, 12):
        for row in [rng.randrange(64 * b, 64 * b + 64) for b in range(100, 100 + blocks)] * 3:
            assert column[row] == urls[row]
    assert column.row_of("https://nowhere.example/") is None
    column[len(urls)] = urls[7]                 # a key stored again: its newest row
    assert column.row_of(urls[7]) == len(urls)
    # compressed URL bytes, 2 bytes of length and the hash table: no Python object per key
    assert column.nbytes < 50_000 * (len(urls[-1].encode()) // 2 + 2 + 48)


def test_key_column_keys_of_any_length():
    column = KeyColumn(block_rows=2)
    rng = random.Random(5)      # (incompressible: a block larger than an arena)
    noise = "".join(chr(rng.randrange(0x100, 0xD000)) for _ in range(400_000))
    keys = ["a" * 0xFFFD, "b" * 0xFFFE, "", "\u00e9" * 70_000, "c", "d" * 0xFFFF, noise, "e",
            noise[::-1], "f"]
    for row, key in enumerate(keys):
        column[row] = key
    column[len(keys) + 3] = "after a gap"
    assert [column.get(r) for r in range(len(keys))] == keys
    assert column.get(len(keys) + 1) is None and column[len(keys) + 3] == "after a gap"
    # a gap of whole blocks (pages added to the index directly), then keys again
    wide = KeyColumn()
    wide[3] = ""
    wide[200_003] = "far"
    wide[200_004] = "next"
    assert len(wide) == 200_005 and wide[3] == "" and wide.get(150_000) is None
    assert wide.row_of("far") == 200_003 and wide[200_004] == "next"
    assert list(wide.values())[:2] == ["", "far"]
    assert all(column.row_of(k) == r for r, k in enumerate(keys))
    with pytest.raises(ValueError, match="block_rows"):
        KeyColumn(block_rows=3)


@settings(max_examples=50, deadline=None)
@given(parts=st.lists(st.lists(st.integers(0, 2**16 - 1), max_size=40), max_size=8))
def test_chunked_column_is_a_list(parts):
    column, reference = ChunkedColumn(np.uint16, chunk=16), []
    for values in parts:
        if len(values) == 1:
            column.append(values[0])
        else:
            column.extend(values)
        reference += values
    assert column.n == len(reference) and column.array.tolist() == reference
    assert [column[i] for i in range(column.n)] == reference
    if reference:
        column[len(reference) - 1] = 7
        assert column[len(reference) - 1] == 7
        first = (len(reference) - 1) // 16 * 16
        assert column.within_chunk(first, len(reference)).tolist() == \
            reference[first:-1] + [7]
    with pytest.raises(IndexError):
        column[len(reference)]
    with pytest.raises(IndexError):
        column.within_chunk(0, 17)
    assert column.nbytes == -(-len(reference) // 16) * 16 * 2


def test_key_set_and_column():
    seen = KeySet()
    for i in range(10_000):
        seen.add(f"k{i}")
    assert "k5" in seen and "k10000" not in seen and len(seen) == 10_000
    c = Column(np.uint64)
    for i in range(1000):
        c.append(i * 3)
    c.extend(np.arange(5, dtype=np.uint64))
    assert c.n == 1005 and c[999] == 2997 and c.array[-1] == 4


def test_large_arrays_have_mappings_of_their_own():
    """Arrays from ``_ext.mapped`` at MAPPED_BYTES or more sit in an anonymous
    mapping (given back when freed), smaller ones are plain NumPy arrays; both
    hold what np.zeros / np.full would."""
    import mmap

    from scrapy_simdup._ext import mapped

    def mapping_of(a):
        while isinstance(a, np.ndarray):
            a = a.base
        return a.obj if isinstance(a, memoryview) else a

    big = mapped.MAPPED_BYTES // 8
    for shape, dtype in (((big,), np.uint64), ((big // 4, 32), np.uint8), ((10,), np.int64)):
        z = mapped.zeros(shape, dtype)
        f = mapped.full(shape, 7, dtype)
        e = mapped.empty(shape, dtype)
        assert z.shape == f.shape == e.shape == shape and z.dtype == f.dtype == e.dtype == dtype
        assert not z.any() and (f == 7).all()
        z[-1] = 3
        assert z.reshape(-1)[-1] == 3
        assert isinstance(mapping_of(z), mmap.mmap) == (z.nbytes >= mapped.MAPPED_BYTES)
    assert mapped.zeros(big, np.uint32).nbytes < mapped.MAPPED_BYTES    # (half: not mapped)


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux's /proc/self/smaps")
def test_large_mapped_arrays_are_private_and_ask_for_huge_pages():
    """A mapped array is the process's own (a shared mapping would be shmem,
    which gets no transparent huge pages), and a large one asked to be is
    marked for them."""
    from scrapy_simdup._ext import mapped

    def mapping(a):
        """(permissions, VmFlags) of the mapping holding ``a``."""
        start = a.ctypes.data
        fields = None
        with open("/proc/self/smaps") as f:
            for line in f:
                head = line.split()
                if "-" in head[0] and len(head) >= 5 and ":" not in head[0]:
                    if fields is not None:      # its block had no VmFlags line
                        pytest.skip("this kernel's smaps has no VmFlags")
                    lo, hi = (int(x, 16) for x in head[0].split("-"))
                    fields = head if lo <= start < hi else None
                elif fields is not None and line.startswith("VmFlags:"):
                    return fields[1], set(line.split()[1:])
        if fields is not None:
            pytest.skip("this kernel's smaps has no VmFlags")
        raise AssertionError("no mapping holds the array")

    n = mapped.HUGE_BYTES // 8
    huge, plain = mapped.empty(n, np.uint64, huge=True), mapped.zeros(n, np.uint64)
    (perms, flags), (plain_perms, plain_flags) = mapping(huge), mapping(plain)
    assert perms.endswith("p") and plain_perms.endswith("p")   # rw-p: private
    assert "hg" not in plain_flags
    thp = "/sys/kernel/mm/transparent_hugepage/enabled"
    if os.path.exists(thp) and "[never]" not in open(thp).read():
        assert "hg" in flags                                    # MADV_HUGEPAGE
