"""The compiled libxml2 walk (``htmlscan``) against the pure Python reference on
trees the shared pages do not have: comments, PIs, CDATA, entity references,
namespaces, hidden elements, odd attributes, deep nesting, non-element roots.
(The comparison on every real page is in ``test_extract.py``.)"""
from __future__ import annotations

import lxml.html
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lxml import etree

from benchmarks._data import load_all
from scrapy_simdup._ext.htmlscan import (
    long_tag_bytes,
    scan_lxml_raw,
    tame_html,
    utf8_visible_points,
)
from scrapy_simdup.fingerprint import extract as _extract
from scrapy_simdup.fingerprint.extract import scan_lxml
from tests.data_root import PAGES_ROOT
from tests.reference.extract import long_tag_bytes_py, main_text_py, scan_lxml_py, tame_html_py


def _blocks(b):
    return (b.texts, b.nchars, b.lchars, b.owner, b.parent, b.end, b.unl, b.tags)


def _same(root):
    for mode in ("main", "visible"):
        for want_tags in (False, True):
            reference = scan_lxml_py(root, mode, want_tags)
            assert _blocks(scan_lxml(root, mode, want_tags)) == _blocks(reference), (mode, want_tags)
            for params in ({}, {"min_block_chars": 1, "min_main_chars": 1, "keep_block_chars": 1},
                           {"max_link_density": 0.0, "min_main_chars": 3}):
                assert reference.main_text(**params) == main_text_py(reference, **params), params
    return scan_lxml(root, "main", True)


HTML_CASES = {
    "white space of every kind (block and link sizes count visible characters)": (
        "<body><p>a\u00a0b\u2003c\u3000d\x1c e\u0085f \t\n g</p>"
        "<div><a href=x>\u00a0li\u3000nk\u2028 \U0001F600</a> t\u00e9xt \u4e2d\u6587</div>"
        "<p>\u00a0\u3000 \u2003</p></body>"),
    "comments and PIs": (
        "<html><body><div>one <!-- c --> two<?pi x?> three</div>"
        "<p>para <a href=x>link <!-- in --> text</a> tail</p></body></html>"),
    "hidden": (
        "<div><p hidden>secret</p><p aria-hidden='true'>no</p><p aria-hidden=false>yes</p>"
        "<p hidden=''>gone</p>after</div>"),
    "classes and ids": (
        "<body><div class=''>e</div><div id=''>f</div><div class='  '>g</div>"
        "<div class='sidebar' id='x'>side</div><div id='comments'>c</div>"
        "<div class='article-body sidebar'>keep</div><nav class=main>n</nav>"
        "<form><p>in a form</p></form><header>h</header></body>"),
    "links and tails": (
        "<p><a>a<a>b</a>c</a>d<b>e<a>f</a></b>g<br>h<a>i<p>j</p>k</a>l</p>"),
    "invisible blocks": (
        "<div>x<table><tr><td>cell</td><script>s()</script>y</tr></table>"
        "<style>p{}</style>z<svg><text>t</text></svg>w</div>"),
    "unicode and whitespace": (
        "<p>\u00a0\u2003 caf\u00e9 \U0001F600 \u4e2d\u6587 \u200b</p><p>\u3000</p>"
        "<div> \n\t </div><p>x\u00a0</p>"),
    "entities": "<p>&amp; &lt;b&gt; &nbsp; &eacute; &#x1F600; &bogus;</p>",
    "empty": "<html></html>",
}


@pytest.mark.parametrize("name", sorted(HTML_CASES))
def test_html_trees_match_reference(name):
    html = HTML_CASES[name]
    _same(etree.fromstring(html, etree.HTMLParser()))          # comments kept (parsel)
    _same(etree.fromstring(html, etree.HTMLParser(remove_comments=True, remove_pis=True)))
    _same(lxml.html.fromstring(html))                            # HtmlElement subclasses


def test_hidden_and_boilerplate_are_handled():
    b = _same(etree.fromstring(HTML_CASES["hidden"], etree.HTMLParser()))
    text = " ".join(b.texts)
    assert "secret" not in text and "gone" not in text and "no" not in text.split()
    assert "yes" in text and "after" in text


def test_xml_tree_with_cdata_entities_namespaces_and_pis():
    xml = (b"<?xml version='1.0'?><!DOCTYPE r [<!ENTITY e 'ent'>]>"
           b"<r xmlns:x='urn:x'><x:div>ns <![CDATA[cdata <b>]]> text</x:div>"
           b"<div>before &e; after<?pi data?>pi-tail<!-- c -->c-tail</div>"
           b"<p x:class='sidebar' class='content'>attrs</p></r>")
    root = etree.fromstring(xml, etree.XMLParser(resolve_entities=False, strip_cdata=False))
    entity = [n for n in root.iter() if n.tag is etree.Entity]
    assert entity                        # a real entity reference node is in the tree
    # The Python reference cannot read attributes of an entity node; the
    # compiled walk treats it like a comment (its tail is text). Compare on
    # the same tree with the entity replaced by its text.
    b = scan_lxml(root, "visible", True)
    assert b.texts == ["ns cdata <b> text", "before  afterpi-tailc-tail", "attrs"]
    for node in entity:
        node.getparent().remove(node)    # the tail goes with it (lxml semantics)
    _same(root)
    resolved = etree.fromstring(xml, etree.XMLParser(strip_cdata=False))
    b = _same(resolved)
    assert any("cdata <b>" in t for t in b.texts)
    assert "{urn:x}div" in b.tags


def test_non_element_roots_and_subtrees():
    root = etree.fromstring("<div><!-- c --><p>a</p>tail<p>b</p></div>", etree.HTMLParser())
    comment = root.xpath("//comment()")[0]
    assert _blocks(scan_lxml(comment)) == _blocks(scan_lxml_py(comment))
    p = root.xpath("//p")[0]
    b = _same(p)                         # a subtree: the root's tail is not its text
    assert b.texts == ["a"]
    _same(etree.ElementTree(root).getroot())
    with pytest.raises(TypeError):
        scan_lxml_raw("<p>", True, False, frozenset(), frozenset(), frozenset(),
                           frozenset(), {}, _extract.unlikely_label)


def test_deep_nesting_does_not_recurse():
    # built with the API: the HTML parser itself stops at depth 2048
    root = node = etree.Element("div")
    for i in range(20_000):
        node = etree.SubElement(node, "div" if i % 3 else "span")
    node.text = "deep"
    node.tail = "tail"
    b = scan_lxml(root, "main")
    assert b.texts == ["deep", "tail"]      # the innermost element is a block
    assert _blocks(b) == _blocks(scan_lxml_py(root, "main"))


def test_many_distinct_tag_names_overflow_the_cache():
    body = "".join(f"<t{i} class='c{i % 7}'>w{i}</t{i}>" for i in range(2000))
    _same(etree.fromstring(f"<html><body><p>{body}</p></body></html>", etree.HTMLParser()))


@pytest.mark.parametrize("html", [
    "<a href='x'>b</a>", "<<<>", "x<y", "", "<a " + "x" * 300 + ">",
    "<script>if (a<b) x = '" + "y" * 100 + "';</script><p>", "<!-- <<<< -->",
    "<style>a<b{}</STYLE ><i>", "<scripts a=1>", "<SCRIPT src=x></Script><b>",
    "<!-- unclosed <<<", "<script>never closed <<<<", "<a" + " b=c" * 1000,
    "<a title='x>y' b=c>", '<a t=">>>" u="<<<">text', "<a t=\"unclosed>", "<a b = 'c>d'>",
    "<p " + "é" * 10 + "€>", "<script>aaaaaaaaaa<div " + "x" * 20 + ">",
])
@pytest.mark.parametrize("min_length", [0, 5, 100])
def test_long_tag_bytes_matches_its_reference(html, min_length):
    for value in (html, html.encode()):
        assert long_tag_bytes(value, min_length) == long_tag_bytes_py(value, min_length)


def test_long_tag_bytes_on_real_pages():
    for record in load_all(PAGES_ROOT)[::2]:
        for min_length in (0, 4096):
            total = long_tag_bytes_py(record.html, min_length)
            assert long_tag_bytes(record.html, min_length) == total
            for limit in (total // 2, total, 1 << 17):
                assert (long_tag_bytes(record.html, min_length, limit) > limit) == (total > limit)


TAME_CASES = [
    b'<html><head><meta charset="gbk"><script src=x>var a="</div>";</script></head><body>'
    b'<div class="main x" id=top data-x="1>2" hidden><img src="' + b"A" * 2000 + b'" alt=\'hi\'/>'
    b"<p CLASS='c'>Text a < b = c</p><!-- unclosed",
    b"<a" + b"a" * 10, b"x<", b"<", b"", b"<script>never", b"<a class='x>y' b=1>t</a>",
    b"<a b = 'c>d' class = k>", b"<a =x class=y>", b'<a class="unclosed>', b"</p <x>",
    b"<!doctype html>", b"<?xml v?>", b"<STYLE media=x>a{}</style ><i>",
    # inputs that made the former regexes backtrack for tens of seconds
    b"<x" + b"a" * 3000, b"<!--" * 400, b"<script>" * 300,
]


@pytest.mark.parametrize("data", TAME_CASES)
def test_tame_html_matches_its_reference(data):
    assert tame_html(data) == tame_html_py(data)


def test_tame_html_on_real_pages():
    for record in load_all(PAGES_ROOT)[::2]:
        tamed = tame_html(record.html)
        assert tamed == tame_html_py(record.html)
        assert len(tamed) <= len(record.html) and long_tag_bytes(tamed, 4096) == 0


_MARKUP = st.text(alphabet=st.sampled_from(list("<>/!-='\" \nabcsriptyleCLASidhn\u00e9\u20ac?")),
                  max_size=120)


@settings(max_examples=300, deadline=None)
@given(_MARKUP)
def test_tame_html_and_long_tag_bytes_match_their_references_on_any_markup(text):
    """Random markup soup (unclosed tags, quotes, comments, scripts): the
    compiled scans agree with their references and never read past the end."""
    data = text.encode("utf-8")
    assert tame_html(data) == tame_html_py(data)
    for min_length in (0, 3):
        total = long_tag_bytes_py(data, min_length)
        assert long_tag_bytes(data, min_length) == total
        assert long_tag_bytes(text, min_length) == long_tag_bytes_py(text, min_length)
        for limit in (0, 5, total - 1, total, len(data)):
            # with a limit only the side of it is exact
            assert (long_tag_bytes(data, min_length, limit) > limit) == (total > limit)


_TEXT = st.text(alphabet=st.sampled_from(
    [chr(c) for c in range(0x00, 0x80)] + list("\x85\xa0\u1680\u2002\u2028\u202f\u3000"
                                              "\xe9\u20ac\U0001f600")), max_size=80)


@settings(max_examples=500, deadline=None)
@given(_TEXT)
def test_utf8_visible_points_counts_as_python(text):
    # eight ASCII bytes are counted at once, the rest one character at a time
    for value in (text, "abcdefgh" + text, text * 3):
        assert utf8_visible_points(value.encode()) == (len("".join(value.split())), len(value))
