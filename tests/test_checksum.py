"""The compiled CRC-32 (``_ext/checksum``) gives zlib's values: the reference
is ``zlib.crc32`` itself, on every length around the kernel's block sizes,
at unaligned starts, continuing any value, on any C-contiguous buffer."""
import zlib

import numpy as np
import pytest

from scrapy_simdup._ext.checksum import crc32, crc32_level

RNG = np.random.default_rng(20261125)
DATA = RNG.integers(0, 256, 1 << 20, dtype=np.uint8).tobytes()


def test_the_folding_kernel_runs_on_x86_64_with_pclmul():
    import platform

    with open("/proc/cpuinfo") as f:
        pclmul = " pclmulqdq" in f.read()
    assert crc32_level() == int(platform.machine() == "x86_64" and pclmul)


@pytest.mark.parametrize("start", [0, 1, 7, 15])
def test_every_short_length_at_unaligned_starts(start):
    for n in range(0, 400):
        d = DATA[start:start + n]
        for value in (0, 1, 0xFFFFFFFF, 0x9E3779B9):
            assert crc32(d, value) == zlib.crc32(d, value), (start, n, value)


@pytest.mark.parametrize("n", [4095, 4096, 4097, 65536 + 63, 1 << 20])
def test_long_buffers_and_continuing(n):
    d = DATA[:n]
    assert crc32(d) == zlib.crc32(d)
    for cut in (1, 63, 64, n // 3, n - 1):
        assert crc32(d[cut:], crc32(d[:cut])) == zlib.crc32(d)


def test_buffers_of_every_kind():
    records = np.zeros(1000, dtype=[("value", "<u8"), ("sketch", "u1", (32,))])
    records["value"] = RNG.integers(0, 2**63, 1000)
    for data in (bytearray(DATA[:5000]), memoryview(DATA)[3:9000],
                 memoryview(records).cast("B"), records, np.arange(77, dtype=np.int64)):
        assert crc32(data) == zlib.crc32(data)
    with pytest.raises((TypeError, BufferError, ValueError)):
        zlib.crc32(np.arange(100)[::2])       # (zlib refuses a strided buffer too)
    with pytest.raises((TypeError, BufferError, ValueError)):
        crc32(np.arange(100)[::2])
