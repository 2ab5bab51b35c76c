"""Huge bodies: the fingerprinter reads no more than LOOK_FACTOR * max_bytes
of any page, so its work is bounded by the setting, not by the body."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import tracemalloc

import numpy as np
import pytest
from scrapy.http import HtmlResponse

from scrapy_simdup import Fingerprinter, SkippedPage
from scrapy_simdup.fingerprint.decode import LOOK_FACTOR
from tests.data_root import CHECKOUT

MAX_BYTES = 16_384
BOUND = LOOK_FACTOR * MAX_BYTES


def paragraphs(start: int, stop: int) -> str:
    return "".join(f"<p>Item {i} of the long listing says what happened on day {i} "
                   f"at the meeting of group {i % 97}.</p>" for i in range(start, stop))


def huge_page(n_bytes: int) -> bytes:
    """An HTML page of at least ``n_bytes``: inline-image and script bulk
    (which taming removes) between runs of text, so that the head tames to
    more than max_bytes only well into the bound."""
    parts, i = ["<html><head><title>Listing</title></head><body><article>"], 0
    size = len(parts[0])
    while size < n_bytes:
        chunk = (f'<img src="data:image/png;base64,{"QUJD" * 2000}"><script>'
                 f'{"var x = 1;" * 400}</script>' + paragraphs(i, i + 10))
        parts.append(chunk)
        size += len(chunk)
        i += 10
    return "".join(parts).encode()


def same(a, b) -> bool:
    return a.value == b.value and np.array_equal(a.W, b.W)


@pytest.fixture(scope="module")
def fingerprinter():
    return Fingerprinter(max_bytes=MAX_BYTES)


@pytest.fixture(scope="module")
def body():
    return huge_page(50 * MAX_BYTES)


def test_a_huge_body_is_fingerprinted_by_its_head(fingerprinter, body):
    """50 x max_bytes: the same fingerprint as its first LOOK_FACTOR *
    max_bytes, marked truncated, on the bytes, str, memoryview and response
    paths; what lies past the head (binary garbage, another page) changes
    nothing."""
    assert len(body) >= 50 * MAX_BYTES
    head = body[:BOUND]
    want = fingerprinter.fingerprint_html(head)
    assert want.n_features > 100
    garbage = np.random.default_rng(1).integers(0, 256, len(body) - BOUND, np.uint8).tobytes()
    other = huge_page(50 * MAX_BYTES).replace(b"Item", b"Meti")[BOUND:]
    for tail in (body[BOUND:], garbage, other, b"\x00" * len(garbage)):
        page = head + tail
        for got in (fingerprinter.fingerprint_html(page),
                    fingerprinter.fingerprint_html(memoryview(page)),
                    fingerprinter.fingerprint_html(bytearray(page)),
                    fingerprinter.fingerprint_response(
                        HtmlResponse("https://example.com/", body=page, encoding="utf-8"))):
            assert same(got, want) and got.truncated
    text = body.decode()
    got = fingerprinter.fingerprint_html(text[:BOUND] + "\x00\x01 garbage \ufffd" * 100_000)
    assert same(got, fingerprinter.fingerprint_html(text[:BOUND])) and got.truncated


def test_pages_up_to_the_bound_are_read_whole(fingerprinter):
    """Up to LOOK_FACTOR * max_bytes nothing changes: a page whose text comes
    after more than max_bytes of bulk is still fingerprinted from that text."""
    bulk = '<img src="data:image/png;base64,' + "QUJD" * (MAX_BYTES * (LOOK_FACTOR - 2) // 4) + '">'
    text = paragraphs(0, 40)
    page = f"<html><body>{bulk}<article>{text}</article></body></html>"
    assert MAX_BYTES * (LOOK_FACTOR - 2) < len(page) <= BOUND
    got = fingerprinter.fingerprint_html(page)
    want = fingerprinter.fingerprint_html(f"<html><body><img src=''><article>{text}</article>"
                                          "</body></html>")
    assert same(got, want) and not got.truncated


def test_a_huge_body_with_a_blank_head(fingerprinter):
    page = b" " * BOUND + b"<p>" + b"text " * 100_000
    with pytest.raises(SkippedPage) as info:
        fingerprinter.fingerprint_html(page)
    assert info.value.reason == "empty"
    skip = Fingerprinter(max_bytes=MAX_BYTES, on_too_large="skip")
    for call in (lambda: skip.fingerprint_html(page),
                 lambda: skip.fingerprint_response(HtmlResponse("https://e.com/", body=page))):
        with pytest.raises(SkippedPage) as info:
            call()
        assert info.value.reason == "too_large" and str(len(page)) in info.value.detail


def test_no_copy_of_a_huge_body_is_made(fingerprinter):
    """What Python allocates while fingerprinting a 200 x max_bytes body (the
    head, its tamed copy, the decoded text) stays a small multiple of the
    bound, whatever the body's size."""
    body = huge_page(200 * MAX_BYTES)
    response = HtmlResponse("https://example.com/", body=body, encoding="utf-8")
    text = body.decode()
    for call in (lambda: fingerprinter.fingerprint_html(body),
                 lambda: fingerprinter.fingerprint_html(text),
                 lambda: fingerprinter.fingerprint_response(response)):
        call()
        tracemalloc.start()
        try:
            call()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 6 * BOUND < len(body) // 4


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mprotect through ctypes")
def test_bytes_past_the_bound_are_never_read():
    """The body's memory past the bound is made unreadable (PROT_NONE): any
    read of it would kill the process with SIGSEGV."""
    code = textwrap.dedent("""
        import ctypes, mmap
        import numpy as np
        from scrapy_simdup import Fingerprinter
        from tests.test_huge_body import BOUND, MAX_BYTES, huge_page

        head = huge_page(BOUND)[:BOUND]
        total = BOUND + 50 * MAX_BYTES
        mm = mmap.mmap(-1, total)
        mm[:BOUND] = head
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        addr = ctypes.addressof(ctypes.c_char.from_buffer(mm))
        assert addr % mmap.PAGESIZE == 0 and BOUND % mmap.PAGESIZE == 0
        PROT_NONE = 0
        assert libc.mprotect(addr + BOUND, total - BOUND, PROT_NONE) == 0, ctypes.get_errno()
        f = Fingerprinter(max_bytes=MAX_BYTES)
        got = f.fingerprint_html(memoryview(mm))
        want = f.fingerprint_html(head)
        assert got.value == want.value and np.array_equal(got.W, want.W) and got.truncated
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", code], cwd=CHECKOUT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]
