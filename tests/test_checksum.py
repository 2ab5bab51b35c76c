"""The compiled CRC-32 against zlib's, every kernel, and its folding constants
derived from the polynomial."""
import os
import re
import zlib
from pathlib import Path

import numpy as np
import pytest

from scrapy_simdup._ext import checksum

# every kernel this CPU has (2 VPCLMULQDQ, 1 PCLMULQDQ, 0 byte table)
KERNELS = list(range(checksum.crc32_kernel() + 1))


@pytest.mark.parametrize("level", KERNELS)
def test_crc32_is_zlibs(level):
    """Every length around the kernels' block sizes (16, 64, 256 bytes),
    start values, offsets into a buffer, and large buffers."""
    rng = np.random.default_rng(level)
    assert checksum.crc32_kernel(level) == level
    try:
        lengths = list(range(0, 600)) + [1023, 1024, 1025, 4096 + 7, 1 << 20, 3_000_001]
        for n in lengths:
            data = rng.integers(0, 256, n + 3, dtype=np.uint8).tobytes()
            start = int(rng.integers(0, 2**32))
            for off in (0, 3) if n < 600 else (1,):
                part = memoryview(data)[off:off + n]
                assert checksum.crc32(part) == zlib.crc32(part), (n, off)
                assert checksum.crc32(part, start) == zlib.crc32(part, start), (n, off)
        # incremental: the CRC of a+b from the CRC of a
        a, b = os.urandom(1000), os.urandom(777)
        assert checksum.crc32(b, checksum.crc32(a)) == zlib.crc32(a + b)
    finally:
        checksum.crc32_kernel()


def test_crc32_takes_buffers_and_refuses_gaps():
    rec = np.zeros(1000, dtype=[("value", "<u8"), ("id", "<i8")])
    rec["value"] = np.arange(1000)
    assert checksum.crc32(rec) == zlib.crc32(rec.tobytes())
    assert checksum.crc32(bytearray(b"scrapy")) == zlib.crc32(b"scrapy")
    assert checksum.crc32(np.arange(12, dtype=np.uint16).reshape(3, 4)) == \
        zlib.crc32(np.arange(12, dtype=np.uint16).tobytes())
    assert checksum.crc32(b"", 12345) == 12345
    with pytest.raises(ValueError, match="contiguous"):
        checksum.crc32(rec["value"])
    # start values as zlib takes them: any int modulo 2^32, no floats
    for start in (-1, 2**32 + 5, 2**40, True, np.uint32(5), np.int64(-1)):
        assert checksum.crc32(b"x", start) == zlib.crc32(b"x", start)
    with pytest.raises(TypeError):
        checksum.crc32(b"x", 1.5)
    stamps = np.arange(10).astype("datetime64[s]")     # no buffer format for these
    assert checksum.crc32(stamps) == zlib.crc32(stamps)


def _residue_constant(e):
    """bit-reflected (x^e mod P) shifted left by one: a folding constant"""
    p = 0x104C11DB7
    a = 1 << e
    while a.bit_length() > 32:
        a ^= p << (a.bit_length() - 33)
    return int(f"{a:032b}"[::-1], 2) << 1


def test_folding_constants_are_the_residues():
    """_crc32.h's constants are x^e mod P (reflected, << 1) for the folding
    distances it uses: 128 bits (e = 160, 96), 512 (544, 480), 2048 (2080, 2016)."""
    header = (Path(checksum.__file__).parent / "_crc32.h").read_text()
    found = {int(c, 16) for c in re.findall(r"0x([0-9a-f]{9,})LL", header)}
    assert found == {_residue_constant(e) for e in (160, 96, 544, 480, 2080, 2016)}
