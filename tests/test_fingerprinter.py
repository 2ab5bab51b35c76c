"""Fingerprinter: contract, determinism, Scrapy responses, bad input."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys

import numpy as np
import pytest
from scrapy.http import HtmlResponse, Response, TextResponse, XmlResponse

import scrapy_simdup
from benchmarks._data import build_near_duplicate_site, load_all, load_article_benchmark
from scrapy_simdup import (
    Fingerprint,
    Fingerprinter,
    SkippedPage,
    fingerprint_html,
    fingerprint_response,
    hamming,
)
from scrapy_simdup._ext.htmlscan import long_tag_bytes
from scrapy_simdup.fingerprint import decode as _decode
from scrapy_simdup.fingerprint import fingerprinter as _fingerprinter
from scrapy_simdup.fingerprint.decode import HUGE_TAGS, LONG_TAG, strip_invisible_bulk
from tests.data_root import CHECKOUT, PAGES_ROOT, every
from tests.reference.extract import long_tag_bytes_py
from tests.reference.fingerprint import fingerprint_html_py

ARTICLE = " ".join(f"Paragraph sentence {i} tells the readers what happened at the meeting."
                   for i in range(60))
PAGE = (f"<html><head><title>Title</title></head><body><nav><a href='/'>Home</a></nav>"
        f"<article><p>{ARTICLE}</p></article><footer>footer</footer></body></html>")


@pytest.fixture(scope="module")
def pages():
    return [r.html for r in load_article_benchmark(PAGES_ROOT)[:12]]


def test_public_names():
    for name in ("Fingerprint", "Fingerprinter", "SkippedPage", "fingerprint_html",
                 "fingerprint_response"):
        assert name in scrapy_simdup.__all__
        assert getattr(scrapy_simdup, name) is getattr(_fingerprinter, name)


def test_fingerprint_unpacks_as_value_and_W():
    fp = fingerprint_html(PAGE)
    assert isinstance(fp, Fingerprint)
    value, W = fp
    assert value == fp.value and W is fp.W and len(fp) == 2
    assert isinstance(value, int) and 0 <= value < 2 ** 64
    assert W.dtype == np.float64 and W.shape == (64,)
    assert value == sum(1 << j for j in range(64) if W[j] >= 0)
    assert fp.n_features > 100 and fp.main_found
    with pytest.raises(ValueError):
        a, b, c = fp


def test_fingerprint_equals_simhash_of_its_features():
    f = Fingerprinter()
    hashes, weights = f.features_html(PAGE)
    from scrapy_simdup._ext import hashing
    value, W = hashing.simhash_hashes(hashes, weights)
    fp = f.fingerprint_html(PAGE)
    assert fp.value == value and np.array_equal(fp.W, W)
    assert np.all(weights > 0)


@pytest.mark.parametrize("kwargs, name", [
    (dict(features="words"), "features"), (dict(features="shingles+bogus"), "features"),
    (dict(features=""), "features"), (dict(features="shingles+shingles"), "features"),
    (dict(shingle_size=0), "shingle_size"),
    (dict(shingle_size=2.5), "shingle_size"), (dict(weighting="tfidf"), "weighting"),
    (dict(extract="article"), "extract"), (dict(parser="html5lib"), "parser"),
    (dict(min_features=0), "min_features"), (dict(max_bytes=10), "max_bytes"),
    (dict(on_too_large="explode"), "on_too_large"), (dict(content_xpath="//div["), "content_xpath"),
    (dict(content_css="div[[["), "content_css"), (dict(content_css=""), "content_css"),
    (dict(content_css="p", content_xpath="//p"), "content_xpath"),
])
def test_bad_options_raise_value_error_naming_the_option(kwargs, name):
    with pytest.raises(ValueError, match=name):
        Fingerprinter(**kwargs)


def test_same_page_same_fingerprint_for_bytes_str_and_response(pages):
    f = Fingerprinter()
    for html in pages:
        a = f.fingerprint_html(html)
        text = HtmlResponse("https://example.com/a", body=html).text
        b = f.fingerprint_html(text)
        c = f.fingerprint_response(HtmlResponse("https://example.com/b", body=html))
        assert a == b == c


def test_own_parse_and_scrapy_tree_agree_on_all_datasets():
    # fingerprint_html parses without comments/PIs; the response path uses
    # parsel's tree with them: the fingerprints must still be identical
    f = Fingerprinter(features="shingles+structure")
    for record in every(load_all(PAGES_ROOT), 5):
        try:
            a = f.fingerprint_html(record.html)
        except SkippedPage as exc:
            with pytest.raises(SkippedPage) as info:
                f.fingerprint_response(HtmlResponse("https://e.com/", body=record.html))
            assert info.value.reason == exc.reason
            continue
        assert a == f.fingerprint_response(HtmlResponse("https://e.com/", body=record.html)), record.id


def test_response_reuses_the_cached_selector_tree(pages, monkeypatch):
    response = HtmlResponse("https://example.com/", body=pages[0])
    titles = response.css("title::text").getall()        # the spider parses first
    root = response.selector.root
    before = root.getroottree().getroot().__copy__()
    expected = fingerprint_html(pages[0])

    def no_parse(*args, **kwargs):
        raise AssertionError("the page was parsed a second time")
    monkeypatch.setattr(_fingerprinter, "parse_html_text", no_parse)
    fp = fingerprint_response(response)
    assert fp == expected
    assert response.selector.root is root                  # same tree, not rebuilt
    from lxml import etree
    assert etree.tostring(root) == etree.tostring(before)  # and not modified
    assert response.css("title::text").getall() == titles


def test_non_html_responses_are_skipped():
    for response in (Response("https://e.com/x.png", body=b"\x89PNG\r\n\x1a\n...."),
                     XmlResponse("https://e.com/feed", body=b"<rss><item>x</item></rss>"),
                     TextResponse("https://e.com/a.json", body=b'{"a": 1}',
                                  headers={"Content-Type": "application/json"})):
        with pytest.raises(SkippedPage) as info:
            fingerprint_response(response)
        assert info.value.reason == "not_html"
    # a TextResponse that says text/html is fingerprinted
    r = TextResponse("https://e.com/", body=PAGE.encode(), headers={"Content-Type": "text/html"})
    assert fingerprint_response(r) == fingerprint_html(PAGE)


def test_response_kinds_follow_the_scrapy_classes_without_importing_scrapy():
    """The fingerprint layer tells Scrapy's response classes apart by name:
    subclasses count as their Scrapy base, and an object that is not a
    Scrapy response is not HTML (whatever its class is called)."""
    class SpiderHtml(HtmlResponse):
        pass

    class SpiderXml(XmlResponse):
        pass

    assert fingerprint_response(SpiderHtml("https://e.com/", body=PAGE.encode())) == \
        fingerprint_html(PAGE)
    html_like = type("HtmlResponse", (), {"body": PAGE.encode(), "headers": {}})()
    for response in (SpiderXml("https://e.com/feed", body=PAGE.encode()), html_like):
        with pytest.raises(SkippedPage) as info:
            fingerprint_response(response)
        assert info.value.reason == "not_html"
    res = subprocess.run([sys.executable, "-X", "importtime", "-c",
                          "import scrapy_simdup.fingerprint.fingerprinter"],
                         capture_output=True, text=True, timeout=60, cwd=CHECKOUT)
    assert res.returncode == 0, res.stderr
    imported = [line.rsplit("|", 1)[-1].strip() for line in res.stderr.splitlines()]
    assert "scrapy_simdup.fingerprint.fingerprinter" in imported
    assert not [m for m in imported if m == "scrapy" or m.startswith("scrapy.")]


@pytest.mark.parametrize("html, reason", [
    (b"", "empty"), (b"   \n\t ", "empty"), ("", "empty"),
    (b"<html><body></body></html>", "empty"),
    (b"<html><body><p>just a few words here</p></body></html>", "too_few_features"),
    (b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4, "binary"),
    (b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj", "binary"),
    (b"<html>" + b"\x00\x01\x02\x03" * 300, "binary"),
    (gzip.compress(PAGE.encode()), "binary"),
])
def test_bad_pages_are_skipped_with_a_reason(html, reason):
    with pytest.raises(SkippedPage) as info:
        fingerprint_html(html)
    assert info.value.reason == reason
    assert isinstance(info.value, ValueError)
    assert info.value.reason in _fingerprinter.SKIP_REASONS


def test_a_page_lxml_cuts_at_its_depth_limit_is_too_deep_not_empty():
    """An article after 100 000 nested <div>: lxml (libxml2) stops at its
    depth limit and finds no text; the page is skipped as "too_deep" on the
    byte, str and response paths (the response's own tree too), while
    parser="bs4" reads the article. A page under the limit is fingerprinted."""
    def nested(depth: int, before: str = "") -> str:
        return (f"<html><head><title>Deep</title></head><body>{before}" + "<div>" * depth
                + f"<p>{ARTICLE}</p>" + "</div>" * depth + "</body></html>")

    f = Fingerprinter()
    deep = nested(100_000)
    for before in ("", "<p>a few words</p>"):
        page = nested(100_000, before)
        response = HtmlResponse("https://example.com/", body=page.encode(), encoding="utf-8")
        for call, arg in ((f.fingerprint_html, page), (f.fingerprint_html, page.encode()),
                          (f.fingerprint_response, response)):
            with pytest.raises(SkippedPage) as info:
                call(arg)
            assert info.value.reason == "too_deep", info.value
            assert "depth" in info.value.detail
    assert "too_deep" in _fingerprinter.SKIP_REASONS
    want = f.fingerprint_html(PAGE)
    assert Fingerprinter(parser="bs4").fingerprint_html(deep).n_features == want.n_features
    shallow = nested(1_000)
    response = HtmlResponse("https://example.com/", body=shallow.encode(), encoding="utf-8")
    assert f.fingerprint_html(shallow).value == f.fingerprint_response(response).value
    assert f.fingerprint_html(shallow).n_features == want.n_features
    # a deep page without text is still "empty" (nothing was cut)
    with pytest.raises(SkippedPage) as info:
        f.fingerprint_response(HtmlResponse("https://example.com/", body=(
            "<html><body>" + "<div>" * 1_000 + "</div>" * 1_000 + "</body></html>").encode()))
    assert info.value.reason == "empty"


def test_unknown_encoding_is_a_decode_error_and_wrong_type_a_type_error():
    with pytest.raises(SkippedPage) as info:
        fingerprint_html(PAGE.encode(), encoding="no-such-codec")
    assert info.value.reason == "decode_error"
    with pytest.raises(TypeError, match="html"):
        fingerprint_html(12345)
    with pytest.raises(TypeError, match="text"):
        Fingerprinter().fingerprint_text(b"bytes")


@pytest.mark.parametrize("codec", ["base64", "rot13", "zlib", "hex", "uu", "bz2", "idna"])
def test_a_codec_that_does_not_decode_text_is_a_decode_error(codec):
    for html, encoding in ((PAGE.encode(), codec),
                           (PAGE.replace("<head>", f"<head><meta charset='{codec}'>").encode(),
                            None)):
        try:
            fingerprint_html(html, encoding=encoding)
        except SkippedPage as exc:
            assert exc.reason == "decode_error"


def test_encodings_decode_like_scrapy():
    text = PAGE.replace("Paragraph", "Café naïve Paragraph")
    utf8 = fingerprint_html(text.encode("utf-8"))
    meta = text.replace("<head>", '<head><meta charset="iso-8859-1">')
    assert fingerprint_html(meta.encode("latin-1")) == utf8
    assert fingerprint_html(text.encode("latin-1"), encoding="latin-1") == utf8
    assert fingerprint_html(text.encode("utf-16")) == utf8            # BOM
    # wrong declared encoding: decoded with replacement, never an exception
    wrong = fingerprint_html(text.encode("utf-8"), encoding="ascii")
    assert wrong.n_features > 100 and wrong != utf8


def test_malformed_html_never_crashes():
    for html in ("<p>" + ARTICLE + "<div><span></p></div>" * 50, "<<<>>>" + ARTICLE,
                 "<html><body><table><tr><td>" + ARTICLE, "</div></span>" + ARTICLE + "<script>",
                 "<?xml version='1.0' encoding='utf-8'?><html><body><p>" + ARTICLE + "</p></body></html>",
                 ARTICLE):
        fp = fingerprint_html(html)
        assert fp.n_features > 100
    # everything inside an unclosed comment is no text at all
    with pytest.raises(SkippedPage):
        fingerprint_html("<!-- unclosed comment " + ARTICLE)


def test_huge_pages_are_truncated_or_skipped():
    big = ("<html><body>" + "".join(f"<p>{ARTICLE} {i}</p>" for i in range(400)) + "</body></html>").encode()
    assert len(big) > 1_500_000
    fp = Fingerprinter(max_bytes=1_000_000).fingerprint_html(big)
    assert fp.truncated and fp.n_features > 100
    assert not Fingerprinter(max_tokens=10**6).fingerprint_html(big).truncated
    with pytest.raises(SkippedPage) as info:
        Fingerprinter(max_bytes=1_000_000, on_too_large="skip").fingerprint_html(big)
    assert info.value.reason == "too_large"
    r = HtmlResponse("https://e.com/", body=big)
    assert Fingerprinter(max_bytes=1_000_000).fingerprint_response(r).truncated
    assert Fingerprinter(max_tokens=1000).fingerprint_html(big).truncated


def test_content_selectors_override_extraction():
    page = (f"<html><body><div id='main'><p>{ARTICLE}</p></div>"
            f"<div class='other'><p>{ARTICLE.upper().replace('SENTENCE', 'CLAUSE')}</p></div></body></html>")
    only_main = Fingerprinter(content_css="#main").fingerprint_html(page)
    assert only_main == Fingerprinter(content_xpath="//div[@id='main']").fingerprint_html(page)
    assert only_main == Fingerprinter().fingerprint_text(ARTICLE)
    other = Fingerprinter(content_css="div.other").fingerprint_html(page)
    assert hamming(only_main.value, other.value) > 10
    # a selector that matches nothing falls back to the extractor
    assert Fingerprinter(content_css="#missing").fingerprint_html(page) == fingerprint_html(page)


def test_fingerprint_text_and_features_text():
    f = Fingerprinter()
    fp = f.fingerprint_text(ARTICLE)
    hashes, weights = f.features_text(ARTICLE)
    assert fp.n_features == len(hashes) and fp.value == simhash_of(hashes, weights)
    with pytest.raises(SkippedPage):
        f.fingerprint_text("   ")
    with pytest.raises(ValueError, match="text features"):
        Fingerprinter(features="structure").fingerprint_text(ARTICLE)


def simhash_of(hashes, weights):
    from scrapy_simdup._ext import hashing
    return int(hashing.simhash_hashes(hashes, weights)[0])


def test_feature_options_change_the_fingerprint():
    values = {Fingerprinter(features=feat, shingle_size=k, weighting=w,
                            min_features=1).fingerprint_html(PAGE).value
              for feat, k, w in [("shingles", 3, "logtf"), ("shingles", 2, "logtf"),
                                 ("spots", 3, "logtf"), ("shingles+structure", 3, "logtf")]}
    assert len(values) == 4
    s = Fingerprinter(features="structure", min_features=2).fingerprint_html(PAGE)
    assert s.n_features >= 2


def test_state_round_trip_and_version_mismatch():
    f = Fingerprinter()
    state = json.loads(json.dumps(f.state()))
    Fingerprinter().load_state(state)
    with pytest.raises(ValueError, match="fingerprint state"):
        Fingerprinter(shingle_size=4).load_state(state)
    assert "shingles" in f.version and "logtf" in f.version


def test_module_functions_cache_their_fingerprinter():
    a = _fingerprinter.get_fingerprinter(shingle_size=4)
    assert a is _fingerprinter.get_fingerprinter(shingle_size=4)
    assert fingerprint_html(PAGE, shingle_size=4) == a.fingerprint_html(PAGE)
    with pytest.raises(ValueError, match="weighting"):
        fingerprint_html(PAGE, weighting="nope")


def test_bs4_parser_and_soup_give_the_same_fingerprint(pages):
    from bs4 import BeautifulSoup
    lx, bs = Fingerprinter(), Fingerprinter(parser="bs4")
    for html in pages:
        a, b = lx.fingerprint_html(html), bs.fingerprint_html(html)
        # block sizes count visible characters, so BeautifulSoup's handling
        # of whitespace-only strings changes nothing (all 543 shared pages)
        assert a == b
        soup = BeautifulSoup(HtmlResponse("https://e.com/", body=html).text, "lxml")
        assert bs.fingerprint_soup(soup) == b
    assert bs.fingerprint_response(HtmlResponse("https://e.com/", body=pages[0])) == \
        bs.fingerprint_html(pages[0])


def test_reindenting_a_page_does_not_change_its_fingerprint(pages):
    """Copies of a page re-indented by a mirror, a CDN or a CMS re-render
    differ only in the white space between tags (at least one character of
    it stays: between inline elements it separates words)."""
    import re
    f = Fingerprinter()
    for html in pages:
        squeezed = re.sub(rb">[ \t\r\n]+<", b">\n<", html)
        spread = re.sub(rb">[ \t\r\n]+<", b">\n            <", html)
        assert f.fingerprint_html(squeezed) == f.fingerprint_html(html) == \
            f.fingerprint_html(spread)


def test_near_duplicates_are_closer_than_unrelated_pages():
    records = load_article_benchmark(PAGES_ROOT)[:20]
    site = build_near_duplicate_site(records, seed=3)
    f = Fingerprinter()
    fps = {}
    for p in site:
        try:
            fps[p.path] = (p.cluster_id, f.fingerprint_html(p.html).value)
        except SkippedPage:
            pass
    same, diff = [], []
    items = list(fps.values())
    for i, (ci, vi) in enumerate(items):
        for cj, vj in items[:i]:
            (same if ci == cj else diff).append(hamming(vi, vj))
    assert np.median(same) <= 7 and min(diff) >= 17
    assert np.median(diff) >= 26


DETERMINISM_SCRIPT = r"""
import sys, json, hashlib, pathlib
from benchmarks._data import load_article_benchmark
from scrapy_simdup import Fingerprinter, SkippedPage
out = []
for options in ({}, {"features": "spots", "weighting": "count"}, {"features": "shingles+structure"}):
    f = Fingerprinter(**options)
    for r in load_article_benchmark(pathlib.Path(sys.argv[1]))[:15]:
        try:
            fp = f.fingerprint_html(r.html)
        except SkippedPage as exc:
            out.append(exc.reason)
            continue
        out.append([fp.value, hashlib.sha256(fp.W.tobytes()).hexdigest(), fp.n_features])
print(json.dumps(out))
"""


def test_fingerprints_are_identical_across_processes():
    runs = []
    for seed in ("0", "12345"):
        env = {"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"}
        # python -c puts the working directory (the checkout) first on the path
        res = subprocess.run([sys.executable, "-c", DETERMINISM_SCRIPT, str(PAGES_ROOT)],
                             capture_output=True, text=True, env=env, timeout=120,
                             cwd=CHECKOUT)
        assert res.returncode == 0, res.stderr
        runs.append(json.loads(res.stdout))
    assert runs[0] == runs[1]
    assert sum(isinstance(x, list) for x in runs[0]) >= 40
    # and equal to this process
    f = Fingerprinter()
    first = load_article_benchmark(PAGES_ROOT)[0]
    assert runs[0][0][0] == f.fingerprint_html(first.html).value


@pytest.mark.parametrize("options", [
    {},
    {"features": "shingles+spots+structure", "weighting": "count"},
    {"features": "spots", "extract": "visible", "weighting": "binary", "shingle_size": 2},
])
def test_compiled_paths_give_bit_identical_fingerprints(options):
    """The compiled walk, selection, tokenizer and features (htmlscan, textfeat)
    change no fingerprint: value and W equal the pure Python/NumPy pipeline's
    (tests/reference/fingerprint.py)."""
    f = Fingerprinter(**options)
    fast = []
    for r in every(load_article_benchmark(PAGES_ROOT), 6):
        try:
            fp = f.fingerprint_html(r.html)
            got = (fp.value, fp.W.tobytes(), fp.n_features)
        except SkippedPage as exc:
            got = exc.reason
        try:
            value, W, n = fingerprint_html_py(f, r.html)
            want = (value, W.tobytes(), n)
        except SkippedPage as exc:
            want = exc.reason
        assert got == want, r.id
        fast.append(got)
    assert sum(isinstance(x, tuple) for x in fast) >= 0.8 * len(fast)


def test_utf8_shortcut_parses_the_same_tree():
    """Clean UTF-8 pages are parsed from their own bytes, without decoding
    them: the bytes must be exactly what the decoded text would give, and the
    tree the same."""
    from lxml import etree
    from w3lib.encoding import html_to_unicode

    f = Fingerprinter()
    used = 0
    for record in every(load_all(PAGES_ROOT), 3):
        for encoding in (None, "utf-8", "cp1252"):
            text, _, utf8 = f._decode(record.html, encoding)
            assert text == html_to_unicode(
                None if encoding is None else f"text/html; charset={encoding}", record.html)[1]
            if utf8 is None:
                continue
            used += 1
            assert encoding != "cp1252"
            assert f._decode(record.html, encoding, need_text=False) == (None, False, utf8)
            assert utf8 == text.strip().replace("\x00", "").encode("utf-8"), record.id
            assert etree.tostring(_decode.parse_html_text(text, utf8)) == etree.tostring(
                _decode.parse_html_text(text)), record.id
    assert used >= 50


@pytest.mark.parametrize("raw", [
    b"\xef\xbb\xbf<p>bom</p>",                        # BOM: decoded text drops it
    b"\xc2\xa0<p>nbsp at the start</p>",              # str.strip() removes U+00A0
    b"<p>" + b"x" * 2000 + b"</p>\x1c",               # ... and \x1c-\x1f
    b"<p>bad \xff utf-8</p>",                         # would be replaced characters
    b"<p>" + b"x" * 2000 + b"nul\x00inside</p>",      # NULs are removed from the text
    b"<meta charset=latin-1><p>caf\xc3\xa9</p>",       # declared otherwise
    b"<?xml version='1.0' encoding='iso-8859-2'?><p>x</p>",
])
def test_utf8_shortcut_is_not_taken_when_bytes_and_text_differ(raw):
    assert _decode._utf8_parse_bytes(raw, None) is None
    text, _, utf8 = Fingerprinter()._decode(raw, None, need_text=False)
    assert utf8 is None and text is not None


def test_utf8_shortcut_follows_the_given_encoding():
    raw = "<meta charset=utf-8><p>caf\u00e9 \ufffd ok</p>".encode()
    assert _decode._utf8_parse_bytes(raw, None) == raw
    assert _decode._utf8_parse_bytes(raw, "UTF8") == raw
    assert _decode._utf8_parse_bytes(raw, "latin-1") is None     # the header wins
    page = raw + PAGE.encode()
    assert Fingerprinter().fingerprint_html(page) == Fingerprinter().fingerprint_html(page.decode())


def test_utf8_shortcut_strips_ascii_whitespace_like_str_strip():
    raw = " \n\t<p>caf\xc3\xa9 \xe2\x80\x94 ok</p>\r\n ".encode("latin-1")
    text, _, utf8 = Fingerprinter()._decode(raw, None)
    assert utf8 == text.strip().encode("utf-8") == raw.strip()


def test_a_stray_nul_byte_does_not_make_a_page_binary():
    page = PAGE.encode()
    cut = page.index(b"<body>")
    with_nul = page[:cut] + b"\x00" + page[cut:]
    assert fingerprint_html(with_nul) == fingerprint_html(page)   # NULs are dropped, as by parsel


def test_bytes_that_mostly_do_not_decode_are_a_decode_error_not_empty():
    page = PAGE.replace("Title", "Caf\xe9 tr\xe8s bien").encode("latin-1")
    with pytest.raises(SkippedPage) as info:
        fingerprint_html(page, encoding="utf-32")
    assert info.value.reason == "decode_error"
    fingerprint_html(page, encoding="latin-1")       # the right encoding still works


def test_a_page_over_max_bytes_loses_its_invisible_bulk_before_it_is_cut():
    """Over max_bytes, script/style bodies, comments and long attribute values
    go first: a page whose text then fits is fingerprinted whole (the same as
    without the bulk), on the str, bytes and response paths alike."""
    f = Fingerprinter(max_bytes=100_000)
    bulk = ('<script>' + "var x = 1;" * 20_000 + '</script><!--' + "c" * 50_000 + '-->'
            '<img src="data:image/png;base64,' + "A" * 200_000 + '">')
    big = PAGE.replace("<body>", "<body>" + bulk, 1)
    small = PAGE.replace("<body>", '<body><script></script><img src="">', 1)
    assert len(big) > 3 * f.max_bytes
    want = f.fingerprint_html(small)
    for got in (f.fingerprint_html(big), f.fingerprint_html(big.encode()),
                f.fingerprint_response(HtmlResponse("https://example.com/", body=big.encode(),
                                                    encoding="utf-8"))):
        assert (got.value, got.truncated) == (want.value, False)
    response = HtmlResponse("https://example.com/", body=big.encode(), encoding="utf-8")
    _ = response.selector   # a tree the spider built first changes nothing
    assert f.fingerprint_response(response).value == want.value
    text_too_big = PAGE.replace("<body>", "<body>" + "".join(
        f"<p>word{i} and more words of item {i}</p>" for i in range(5000)), 1)
    assert f.fingerprint_html(text_too_big).truncated


def test_tags_with_200000_attributes_are_not_handed_to_libxml2(monkeypatch):
    """libxml2 parses a tag's attributes in quadratic time: this 2.6 MB page
    took 140 s, and a '>' in a quoted value or sixteen tags of 22 000
    attributes each did as badly. Such a page keeps only the attributes the
    extraction reads before it is parsed, on the bytes, str and response
    paths (it is fingerprinted like the page without the attributes)."""
    f = Fingerprinter()
    want = f.fingerprint_html(PAGE.replace("<body>", "<body><div class=x></div>", 1)).value
    seen = []
    parse = _fingerprinter.parse_html_text
    monkeypatch.setattr(_fingerprinter, "parse_html_text",
                        lambda text, utf8=None: seen.append(utf8 or text) or parse(text, utf8))
    one = " ".join(f"a{i}=x" for i in range(200_000))
    sixteen = " ".join(f"a{i}=x" for i in range(22_000))
    for attacks in (f'<div class=x {one}></div>', f'<div class=x q=">" {one}></div>',
                    f'<div class=x q="<" {one}></div>', f'<div class=x {sixteen}></div>' * 16):
        page = PAGE.replace("<body>", "<body>" + attacks, 1)
        assert long_tag_bytes(page, LONG_TAG) == long_tag_bytes_py(page, LONG_TAG) > HUGE_TAGS
        assert len(page) < f.max_bytes
        if attacks.count("<div") > 1:
            want_many = f.fingerprint_html(
                PAGE.replace("<body>", "<body>" + "<div class=x></div>" * 16, 1)).value
        else:
            want_many = want
        assert f.fingerprint_html(page).value == want_many
        assert f.fingerprint_html(page.encode()).value == want_many
        response = HtmlResponse("https://example.com/", body=page.encode(), encoding="utf-8")
        assert f.fingerprint_response(response).value == want_many
        # what libxml2 is given has no long tag left (so it cannot be slow)
        assert seen and all(long_tag_bytes(html, LONG_TAG) == 0 for html in seen)
        seen.clear()


def test_taming_a_page_keeps_its_fingerprint():
    """What a page loses before it is parsed (when it is over max_bytes, or
    has too much in long tags) is never visible text: the default
    fingerprint of every real page is the same with and without it."""
    f = Fingerprinter()
    checked = 0
    records = load_all(PAGES_ROOT)
    for record in records:
        try:
            value = f.fingerprint_html(record.html).value
        except SkippedPage:
            continue
        assert f.fingerprint_html(strip_invisible_bulk(record.html)).value == value
        checked += 1
    assert checked > 0.7 * len(records)


@pytest.mark.parametrize("options, parameter", [
    ({"features": "words"}, "features"),
    ({"shingle_size": 0}, "shingle_size"),
    ({"parser": "regex"}, "parser"),
    ({"content_xpath": "//div[@"}, "content_xpath"),
    ({"content_xpath": "//p", "content_css": "p"}, "content_xpath,content_css"),
    ({"max_bytes": 10}, "max_bytes"),
])
def test_option_errors_name_the_option_not_a_setting(options, parameter):
    from scrapy_simdup.exceptions import ParameterError
    with pytest.raises(ParameterError) as info:
        Fingerprinter(**options)
    assert info.value.parameter == parameter
    assert isinstance(info.value, ValueError) and "SIMDUP_" not in str(info.value)


@pytest.mark.parametrize("codec, declared", [
    ("utf-16-be", "utf-16be"), ("utf-16-le", "utf-16-le"), ("utf-16-be", "UTF-16BE"),
    ("utf-16-be", "utf-16"),        # no BOM: big-endian, as w3lib decodes it
    ("utf-32-le", "utf-32le"), ("utf-32-be", "utf-32-be")])
def test_a_declared_utf16_or_utf32_page_without_a_bom_is_decoded_like_scrapy(codec, declared):
    """Its ASCII bytes are NUL-separated: it was skipped as "binary", where
    Scrapy's response.text decodes it."""
    text = PAGE.replace("Paragraph", "Café naïve Paragraph")
    utf8 = fingerprint_html(text.encode("utf-8"))
    body = text.encode(codec)
    assert fingerprint_html(body, encoding=declared) == utf8
    response = HtmlResponse("https://example.com/", body=body,
                            headers={"Content-Type": f"text/html; charset={declared}"})
    assert response.text == text
    assert Fingerprinter().fingerprint_response(response) == utf8
    # over max_bytes (decoded, then tamed as text), with a code unit cut at the end
    small = Fingerprinter(max_bytes=len(text) // 2)
    cut = body[:-1]
    assert small.fingerprint_html(cut, encoding=declared).truncated
    assert small.fingerprint_html(cut, encoding=declared) == small.fingerprint_html(text[:-1])
    # a binary file with such a header is still binary, and bytes that do not decode
    # an error
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
    for f in (lambda: fingerprint_html(png, encoding=declared),
              lambda: Fingerprinter().fingerprint_response(HtmlResponse(
                  "https://example.com/", body=png,
                  headers={"Content-Type": f"text/html; charset={declared}"}))):
        with pytest.raises(SkippedPage) as info:
            f()
        assert info.value.reason == "binary"
    if "32" in codec:
        with pytest.raises(SkippedPage) as info:
            fingerprint_html(text.encode("latin-1"), encoding=declared)
        assert info.value.reason == "decode_error"
