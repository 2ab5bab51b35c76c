"""The URL a page declares canonical, and meta["simdup"]["canonical"]."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scrapy.http import HtmlResponse, Request

from benchmarks._data import load_all
from scrapy_simdup import SimdupDownloaderMiddleware
from scrapy_simdup._ext.htmlscan import head_link_tags
from scrapy_simdup.fingerprint.canonical import HEAD_BYTES, declared_canonical
from tests.data_root import PAGES_ROOT
from tests.reference.canonical import head_link_tags_py
from tests.scrapy_crawler import make_crawler

URL = "http://site.example/news/story?id=3"


@pytest.mark.parametrize("head, expected", [
    ('<link rel="canonical" href="https://site.example/story-3">', "https://site.example/story-3"),
    ("<LINK REL=Canonical HREF=/story-3>", "http://site.example/story-3"),
    ("<link href='../s?a=1&amp;b=2' rel='alternate canonical'>", "http://site.example/s?a=1&b=2"),
    ('<base href="https://cdn.example/x/"><link rel=canonical href="y">', "https://cdn.example/x/y"),
    ('<link rel="alternate" href="/amp"><link rel="canonical" href=" /c ">',
     "http://site.example/c"),
    ('<link rel="canonical" href="javascript:alert(1)">', None),
    ('<link rel="canonical" href="">', None),
    ('<link rel="canonical">', None),
    ('<link rel="stylesheet" href="/s.css">', None),
])
def test_declared_in_the_head(head, expected):
    html = f"<html><head><title>t</title>{head}</head><body><p>text</p></body></html>"
    assert declared_canonical(html.encode(), URL, "utf-8") == expected


def test_a_link_in_the_body_or_past_the_head_bytes_is_not_read():
    body = b"<html><head></head><body><link rel=canonical href=/body></body>"
    assert declared_canonical(body, URL) is None
    late = b"<html><head>" + b"<meta name=x>" * (HEAD_BYTES // 13) + \
        b"<link rel=canonical href=/late></head>"
    assert declared_canonical(late, URL) is None


def test_the_link_header_when_the_page_declares_none():
    header = b'<https://site.example/a>; rel="alternate", </c2>; rel="canonical"'
    assert declared_canonical(b"<html></html>", URL, link_header=header) == \
        "http://site.example/c2"
    page = b'<head><link rel=canonical href="/in-page"></head>'
    assert declared_canonical(page, URL, link_header=header) == "http://site.example/in-page"


def test_an_encoded_page():
    body = '<head><link rel="canonical" href="/ü"></head>'.encode("utf-16-le")
    assert declared_canonical(body, URL, "utf-16-le") == "http://site.example/ü"
    assert declared_canonical(b"<head><link rel=canonical href=/a>", URL, "no-such-codec") == \
        "http://site.example/a"
    # a single-byte and a multi-byte legacy encoding: the head is found in the bytes
    for codec in ("cp1251", "shift_jis"):
        page = ('<HEAD><link rel="stylesheet" href="/s.css"><link rel="canonical" '
                'href="/новости-ニュース"></HEAD><BODY><link rel=canonical href=/b>')
        assert declared_canonical(page.encode(codec, "ignore"), URL, codec) == \
            "http://site.example/" + "/новости-ニュース".encode(codec, "ignore").decode(codec)[1:]


def test_only_a_tag_name_followed_by_a_separator_counts():
    page = ("<head><link-x rel=canonical href=/dash><linké rel=canonical href=/accent>"
            "<link\u00a0rel=canonical href=/nbsp><bodyguard><link\nrel=canonical href=/ok>")
    for body, encoding in ((page.encode(), "utf-8"), (page.encode("utf-16-le"), "utf-16-le"),
                           (page, None)):
        # '-' ends a name for the scan (as for a regex's \b); a letter, a digit
        # or any character beyond ASCII does not
        assert declared_canonical(body, URL, encoding) == "http://site.example/dash"
    assert declared_canonical(page.replace("<link-x", "<linkx"), URL) == "http://site.example/ok"


_HEAD_SOUP = st.lists(st.sampled_from([
    "<link", "<LINK", "<base", "<BaSe", "</head", "</HEAD", "<\x0fhead", "<body", "<bodyx",
    "</heads", ">", "<",
    " rel=canonical", " REL='Canonical'", " href=/a", ' href="http://o.example/x"', " href='b/c'",
    "CANONICAL", "canonica", "l", "é", "\u00a0", "-", "_", "1", " ", "\n", '"', "'", "=",
    "<!--", "-->", "<script>", "</script>", "x"]), max_size=16).map("".join)


@settings(max_examples=400, deadline=None)
@given(_HEAD_SOUP, st.integers(0, 200))
def test_head_link_tags_match_their_reference_on_any_markup(text, limit):
    data = text.encode()
    for cut in (limit, len(data)):
        assert head_link_tags(data, cut) == head_link_tags_py(data, cut)
    for start, end in head_link_tags(data, len(data)):
        assert data[start:start + 1] == b"<" and data[end - 1:end] == b">"


def test_head_link_tags_on_real_pages():
    records = load_all(PAGES_ROOT)
    assert records
    for record in records:
        for limit in (HEAD_BYTES, 2048):
            assert head_link_tags(record.html, limit) == head_link_tags_py(record.html, limit)


def _text(seed: int) -> str:
    rng = np.random.default_rng(seed)
    return " ".join(f"w{int(w)}" for w in rng.integers(0, 5000, 120))


def test_meta_simdup_carries_the_canonical_url():
    middleware = SimdupDownloaderMiddleware.from_crawler(make_crawler({"SIMDUP_ENABLED": True,
                                                                       "SIMDUP_ACTION": "tag"}))
    html = f"<html><head><link rel=canonical href=/a></head><body><p>{_text(1)}</p></body></html>"
    metas = []
    for url, headers in (("http://h/a?utm=1", {}), ("http://h/b", {"Link": "</b>; rel=canonical"}),
                         ("http://h/c", {})):
        body = html if url != "http://h/b" else html.replace("<link rel=canonical href=/a>", "")
        request = Request(url)
        response = HtmlResponse(url, body=body.encode(), encoding="utf-8", request=request,
                                headers=headers)
        asyncio.run(middleware.process_response(request, response))
        metas.append(request.meta["simdup"])
    assert [m["canonical"] for m in metas] == ["http://h/a", "http://h/b", "http://h/a"]
    assert metas[1]["duplicate_of"] == "http://h/a?utm=1"
    # a page not checked says nothing about it
    request = Request("http://h/d", meta={"dont_simdup": True})
    asyncio.run(middleware.process_response(request, HtmlResponse(
        "http://h/d", body=html.encode(), encoding="utf-8", request=request)))
    assert request.meta["simdup"]["canonical"] is None
