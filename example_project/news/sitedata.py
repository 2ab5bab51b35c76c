"""Shared loaders, hold-out split and near-duplicate variant builder.

Used by the example project's site (``site.py``), the quality evaluation, the
benchmarks and the tests (which import it as ``benchmarks._data``).

Datasets (``shared/data`` beside the checkout, override with ``SIMDUP_DATA``):

* ``article-extraction-benchmark``: 181 news pages (``html/<id>.html.gz``)
  with the article body and URL in ``ground-truth.json``.
* ``readability-test-pages``: 130 pages (``pages/<name>/source.html``) with
  their readable content (``expected.html``) and metadata.
* ``trafilatura-cache``: 110 pages (``pages/<site>.<slug>.html``), no
  reference text.

Everything here is deterministic: records are sorted by id, the split is a
stable hash of the id, and the variant builder only uses ``random.Random(seed)``.

Quick use::

    from benchmarks._data import load_all, split, build_near_duplicate_site
    tune, report = split(load_all())
    pages = build_near_duplicate_site(report, seed=0)
    for page in pages:        # SitePage(path, html, cluster_id, kind, ...)
        ...

Two pages are labelled near-duplicates iff they have the same ``cluster_id``.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
import re
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from html import escape as html_escape
from pathlib import Path
from typing import NamedTuple

import lxml.html
from lxml import etree
from w3lib.encoding import html_to_unicode

# the shared development data beside the checkout, unless SIMDUP_DATA names it
DATA = Path(os.environ.get("SIMDUP_DATA", Path(__file__).resolve().parents[3] / "shared" / "data"))

__all__ = [
    "DATA", "Record", "SitePage", "load_article_benchmark", "load_readability",
    "load_trafilatura_cache", "load_all", "split", "stable_hash",
    "build_near_duplicate_site", "decode_html", "parse_html",
]


@dataclass(frozen=True)
class Record:
    """One real page."""

    id: str                    # unique, e.g. "aeb:042bb7b5..." or "rtp:ars-1"
    dataset: str               # "article-extraction-benchmark", "readability-test-pages", ...
    site: str                  # domain (or site name) the page belongs to
    url: str | None
    html: bytes
    main_text: str | None = None          # reference article text, if the dataset has it
    paragraphs: tuple[str, ...] = ()      # the reference text split into paragraphs
    readable_html: bytes | None = field(default=None, repr=False)  # readability's expected.html


class SitePage(NamedTuple):
    """One page of the generated near-duplicate site."""

    path: str          # "/<template-site>/<slug>-<kind>.html", unique
    html: bytes        # UTF-8 HTML
    cluster_id: str    # pages with equal cluster_id are near-duplicates
    kind: str          # how the page was made (see build_near_duplicate_site)
    source_id: str     # Record.id of the article the content comes from
    template_id: str   # Record.id of the page whose template (boilerplate) is used


# --------------------------------------------------------------------------- helpers

_WORD = re.compile(r"\w+", re.UNICODE)
_XML_DECL = re.compile(r"^\s*<\?xml[^>]*>", re.I)


def stable_hash(text: str) -> int:
    """A 64-bit hash of ``text`` that is the same on every run and machine."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


def decode_html(html: bytes, content_type: str | None = None) -> str:
    """Decode HTML bytes the way Scrapy does (BOM, header, meta, then utf-8)."""
    _, text = html_to_unicode(content_type, html)
    return text


def parse_html(html: bytes | str):
    """Parse to an lxml.html document (``str`` or bytes)."""
    text = decode_html(html) if isinstance(html, bytes) else html
    text = _XML_DECL.sub("", text, count=1)
    return lxml.html.document_fromstring(text or "<html></html>")


def _site_from_url(url: str) -> str:
    host = urllib.parse.urlsplit(url).hostname or ""
    return host[4:] if host.startswith("www.") else host


_TLDS = {"de", "com", "org", "net", "at", "ch", "fr", "eu", "info", "uk", "me", "blog", "io", "co"}


def _site_from_filename(name: str) -> str:
    parts = name[:-5].split(".") if name.endswith(".html") else name.split(".")
    for i, part in enumerate(parts):
        if i > 0 and part in _TLDS:
            return ".".join(parts[: i + 1])
    return parts[0]


def _paragraphs_from_text(text: str) -> tuple[str, ...]:
    paras = [re.sub(r"\s+", " ", p).strip() for p in re.split(r"\n\s*\n|\n", text)]
    return tuple(p for p in paras if p)


_BLOCKS = {"p", "li", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "blockquote", "td", "dd", "dt", "figcaption"}


def _paragraphs_from_html(html: bytes) -> tuple[str, ...]:
    doc = parse_html(html)
    for bad in doc.xpath("//script|//style|//noscript"):
        bad.drop_tree()
    paras = []
    for el in doc.iter():
        if not isinstance(el.tag, str) or el.tag not in _BLOCKS:
            continue
        # leaf-most blocks only: skip a block that contains another block
        if any(isinstance(d.tag, str) and d.tag in _BLOCKS for d in el.iterdescendants()):
            continue
        text = re.sub(r"\s+", " ", el.text_content()).strip()
        if text:
            paras.append(text)
    if not paras:
        body = doc.find("body")
        text = re.sub(r"\s+", " ", (body if body is not None else doc).text_content()).strip()
        paras = [text] if text else []
    return tuple(paras)


# --------------------------------------------------------------------------- loaders

def load_article_benchmark(root: Path = DATA) -> list[Record]:
    base = root / "article-extraction-benchmark"
    truth = json.loads((base / "ground-truth.json").read_text("utf-8"))
    records = []
    for key in sorted(truth):
        path = base / "html" / f"{key}.html.gz"
        if not path.exists():
            continue
        entry = truth[key]
        body = entry.get("articleBody") or ""
        records.append(Record(
            id=f"aeb:{key}", dataset="article-extraction-benchmark",
            site=_site_from_url(entry.get("url") or ""), url=entry.get("url"),
            html=gzip.decompress(path.read_bytes()), main_text=body,
            paragraphs=_paragraphs_from_text(body)))
    return records


def load_readability(root: Path = DATA) -> list[Record]:
    base = root / "readability-test-pages" / "pages"
    records = []
    for d in sorted(p for p in base.iterdir() if p.is_dir()):
        source = d / "source.html"
        if not source.exists():
            continue
        expected = d / "expected.html"
        readable = expected.read_bytes() if expected.exists() else None
        paras = _paragraphs_from_html(readable) if readable else ()
        records.append(Record(
            id=f"rtp:{d.name}", dataset="readability-test-pages",
            site=re.sub(r"-\d+$", "", d.name), url=None, html=source.read_bytes(),
            main_text="\n\n".join(paras) if paras else None, paragraphs=paras,
            readable_html=readable))
    return records


def load_trafilatura_cache(root: Path = DATA) -> list[Record]:
    base = root / "trafilatura-cache" / "pages"
    return [Record(id=f"tfc:{p.name}", dataset="trafilatura-cache",
                   site=_site_from_filename(p.name), url=None, html=p.read_bytes())
            for p in sorted(base.glob("*.html"))]


DATASETS = {"article-extraction-benchmark": load_article_benchmark,
            "readability-test-pages": load_readability,
            "trafilatura-cache": load_trafilatura_cache}


def load_all(root: Path = DATA) -> list[Record]:
    """All records of the datasets under ``root``, sorted by id.

    A root may hold only some of the three datasets (the example project
    ships a subset of one); a root with none of them is an error.
    """
    present = [name for name in DATASETS if (Path(root) / name).is_dir()]
    if not present:
        raise FileNotFoundError(f"{root}: none of the datasets {', '.join(DATASETS)} is there")
    records = [r for name in present for r in DATASETS[name](Path(root))]
    return sorted(records, key=lambda r: r.id)


def iter_pages(root: Path = DATA) -> Iterator[tuple[str, bytes]]:
    """(id, html bytes) of every real page: the benchmark input."""
    for r in load_all(root):
        yield r.id, r.html


def split(records) -> tuple[list, list]:
    """Stable hold-out split: (tune, report) by the parity of a hash of the id.

    The same record always lands in the same half, on every machine. Works on
    ``Record`` and ``SitePage`` (by ``source_id``, so all variants of one
    article stay together) and on plain id strings.
    """
    tune, report = [], []
    for r in records:
        key = r if isinstance(r, str) else getattr(r, "source_id", None) or r.id
        (tune if stable_hash(key) % 2 == 0 else report).append(r)
    return tune, report


# --------------------------------------------------------------------------- variant builder

def _tokens(text: str | None) -> list[str]:
    return _WORD.findall(text.lower()) if text else []


_SKIP_TEXT = {"script", "style", "noscript", "template"}


def find_main_node(doc, reference: str, with_recall: bool = False):
    """The element whose text best matches ``reference`` (token F1).

    Independent of the package's own extractor (so the evaluation is not
    circular). Returns ``(element, f1)`` or ``(None, 0.0)`` (and the recall of
    the reference tokens as a third item with ``with_recall``).
    """
    ref = set(_tokens(reference))
    n_ref = len(_tokens(reference))
    if not ref:
        return (None, 0.0, 0.0) if with_recall else (None, 0.0)
    body = doc.find("body")
    if body is None:
        return (None, 0.0, 0.0) if with_recall else (None, 0.0)
    total: dict = {}
    hits: dict = {}

    def add(el, text):
        toks = _tokens(text)
        if not toks:
            return
        h = sum(1 for t in toks if t in ref)
        node = el
        while node is not None:
            total[node] = total.get(node, 0) + len(toks)
            hits[node] = hits.get(node, 0) + h
            if node is body:
                break
            node = node.getparent()

    for el in body.iter():
        if not isinstance(el.tag, str):
            if el.tail and el.getparent() is not None:
                add(el.getparent(), el.tail)
            continue
        if el.tag in _SKIP_TEXT or any(a.tag in _SKIP_TEXT for a in el.iterancestors()):
            if el.tail and el.getparent() is not None and el.getparent().tag not in _SKIP_TEXT:
                add(el.getparent(), el.tail)
            continue
        add(el, el.text)
        if el is not body and el.tail and el.getparent() is not None:
            add(el.getparent(), el.tail)
    best, best_f1, best_r = None, 0.0, 0.0
    for el in body.iter():
        if el not in total or el.tag in ("p", "span", "a", "li", "b", "i", "em", "strong"):
            continue
        p = hits[el] / total[el]
        r = min(1.0, hits[el] / n_ref)
        f1 = 2 * p * r / (p + r) if p + r else 0.0
        if f1 >= best_f1:      # pre-order: ties go to the deeper element
            best, best_f1, best_r = el, f1, r
    if with_recall:
        return best, best_f1, best_r
    return best, best_f1


def _title_of(doc) -> str:
    h1 = doc.find(".//h1")
    if h1 is not None and h1.text_content().strip():
        return re.sub(r"\s+", " ", h1.text_content()).strip()
    t = doc.find(".//title")
    return re.sub(r"\s+", " ", t.text_content()).strip() if t is not None and t.text_content() else ""


def _set_headline(doc, headline: str) -> None:
    head = doc.find("head")
    title = doc.find(".//title")
    if title is None and head is not None:
        title = etree.SubElement(head, "title")
    if title is not None:
        for c in list(title):
            title.remove(c)
        title.text = headline
    h1 = doc.find(".//h1")
    if h1 is not None:
        for c in list(h1):
            h1.remove(c)
        h1.text = headline
    for meta in doc.xpath('//meta[@property="og:title" or @name="twitter:title"]'):
        meta.set("content", headline)


def _fill(node, paragraphs, headline: str | None = None) -> None:
    """Replace the children of ``node`` with ``paragraphs`` as <p> elements."""
    tail = node.tail
    for c in list(node):
        node.remove(c)
    node.text = "\n"
    node.tail = tail
    if headline:
        h = etree.SubElement(node, "h2")
        h.text = headline
        h.tail = "\n"
    for p in paragraphs:
        el = etree.SubElement(node, "p")
        el.text = p
        el.tail = "\n"


def _serialize(doc) -> bytes:
    for meta in doc.xpath('//meta[@charset] | //meta[translate(@http-equiv,'
                          '"CONTENTYP","contentyp")="content-type"]'):
        meta.drop_tree()
    head = doc.find("head")
    if head is None:
        head = etree.Element("head")
        doc.insert(0, head)
    meta = etree.Element("meta", charset="utf-8")
    head.insert(0, meta)
    return lxml.html.tostring(doc, encoding="utf-8", doctype="<!DOCTYPE html>")


def _slug(text: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return s[:40] or "page"


def _trim(paragraphs, rng, fraction=(0.1, 0.2)):
    """Drop trailing paragraphs: at most ``fraction`` of the words, at least one paragraph."""
    words = [len(p.split()) for p in paragraphs]
    total = sum(words)
    limit = total * rng.uniform(*fraction)
    out = list(paragraphs)
    dropped = 0
    while len(out) > 2 and dropped + words[len(out) - 1] <= limit:
        dropped += words[len(out) - 1]
        out.pop()
    if len(out) == len(paragraphs) and len(out) > 3 and words[-1] <= total * 0.25:
        out.pop()
    return out


def _comment_block(rng, pool, n_comments) -> etree._Element:
    block = etree.Element("section", id="comments", **{"class": "comments"})
    h = etree.SubElement(block, "h3")
    h.text = f"{n_comments} Comments"
    for _ in range(n_comments):
        c = etree.SubElement(block, "div", **{"class": "comment"})
        a = etree.SubElement(c, "span", **{"class": "comment-author"})
        a.text = f"reader{rng.randrange(10000)}"
        p = etree.SubElement(c, "p")
        p.text = rng.choice(pool)[:300]
    return block


def _shingle_set(text: str, k: int = 3) -> set:
    toks = _tokens(text)
    return {" ".join(toks[i:i + k]) for i in range(max(1, len(toks) - k + 1))} if toks else set()


def _reference_clusters(records, min_jaccard: float = 0.5) -> dict:
    """Cluster id per record: records whose reference texts are near-identical
    (Jaccard of word 3-shingle sets >= ``min_jaccard``) share a cluster.

    The data has such pairs (several readability test pages reuse one lorem
    ipsum text); labelling them different would count correct matches as
    false positives. Exact set comparison, independent of any fingerprint.
    """
    sets = {r.id: _shingle_set(r.main_text) for r in records if r.main_text}
    parent = {r.id: r.id for r in records}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    ids = sorted(sets)
    for i, a in enumerate(ids):
        sa = sets[a]
        if not sa:
            continue
        for b in ids[i + 1:]:
            sb = sets[b]
            if sb and len(sa & sb) >= min_jaccard * len(sa | sb):
                ra, rb = find(a), find(b)
                if ra != rb:
                    parent[max(ra, rb)] = min(ra, rb)
    return {r.id: find(r.id) for r in records}


def build_near_duplicate_site(records, seed: int = 0, min_words: int = 60) -> list[SitePage]:
    """Labelled near-duplicate pages built the way the web makes them.

    For every record with reference text of at least ``min_words`` words whose
    main node can be located in its own page (cluster = the record id):

    * ``original``       the real page;
    * ``syndicated``     the article placed in another page's template (its
                         boilerplate, navigation, related links), same headline;
    * ``syndicated-trimmed`` in a third page's template, re-headlined and with the
                         last 10-20 % of the words cut (syndication trims);
    * ``reheadlined``    its own page with a new headline (title, h1, og:title);
    * ``paragraph-added`` its own page with one short paragraph from another
                         article inserted in the middle of the body;
    * ``comments-changed`` its own page with a comment section appended;
    * ``readable``       (readability pages) the readable content only, like a
                         printer-friendly or reader-mode copy.

    Records without reference text (or whose main node is not found) contribute
    their ``original`` and a ``reheadlined`` + ``comments-changed`` copy of
    their own page. Hard negatives come for free: every template carries several
    different articles (its own and other articles syndicated into it), so pages
    of one template with different content are in different clusters; real
    pages of the same site (nytimes-1..5, rtl-1..4, ...) are different clusters too.

    Deterministic in (records, seed). Returns SitePage tuples in a stable order.
    """
    rng = random.Random(seed)
    records = sorted(records, key=lambda r: r.id)
    parsed = {}
    main = {}
    for r in records:
        try:
            doc = parse_html(r.html)
        except (etree.ParserError, ValueError):
            continue
        parsed[r.id] = doc
        if r.paragraphs and r.main_text and len(r.main_text.split()) >= min_words:
            node, f1, recall = find_main_node(doc, r.main_text, with_recall=True)
            # the node must hold (nearly) the whole article, or replacing its
            # content would leave part of the old article in the page
            if node is not None and f1 >= 0.6 and recall >= 0.9:
                main[r.id] = node
    by_id = {r.id: r for r in records}
    hosts = [rid for rid in by_id if rid in main]
    sentence_pool = [s.strip() for r in records for p in r.paragraphs
                     for s in re.split(r"(?<=[.!?])\s+", p) if 8 <= len(s.split()) <= 40]
    if not sentence_pool:
        sentence_pool = ["Great article, thanks for sharing this with us."]
    paragraph_pool = [p for r in records for p in r.paragraphs if 15 <= len(p.split()) <= 45]
    headline_pool = [_title_of(parsed[rid]) for rid in sorted(parsed)]
    headline_pool = [h for h in headline_pool if len(h.split()) >= 3] or ["Breaking news update"]

    cluster_of = _reference_clusters(records)
    pages: list[SitePage] = []

    def emit(doc, cluster, kind, source, template):
        tpl_site = _slug(by_id[template].site or template)
        path = f"/{tpl_site}/{_slug(by_id[source].id.split(':', 1)[1])}-{kind}.html"
        pages.append(SitePage(path, _serialize(doc), cluster, kind, source, template))

    def copy(rid):
        doc = parse_html(by_id[rid].html)
        node = find_main_node(doc, by_id[rid].main_text)[0] if rid in main else None
        return doc, node

    def replace_article(doc, node, rid, paragraphs):
        """Fill ``node`` and every other copy of the article (some pages carry
        it twice, e.g. a second hidden or AMP copy)."""
        _fill(node, paragraphs)
        for _ in range(3):
            other, f1, recall = find_main_node(doc, by_id[rid].main_text, with_recall=True)
            if other is None or recall < 0.3 or other is node:
                break
            _fill(other, paragraphs)

    order = list(hosts)
    rng.shuffle(order)
    position = {rid: i for i, rid in enumerate(order)}
    n_hosts = len(order)
    for r in records:
        if r.id not in parsed:
            continue
        cluster = cluster_of[r.id]
        pages.append(SitePage(f"/{_slug(r.site or r.id)}/{_slug(r.id.split(':', 1)[1])}-original.html",
                              r.html, cluster, "original", r.id, r.id))
        own_title = _title_of(parsed[r.id]) or (r.paragraphs[0][:80] if r.paragraphs else r.site)
        new_headline = rng.choice(headline_pool)
        if new_headline == own_title:
            new_headline = "Update: " + own_title
        if r.id in main and n_hosts >= 3:
            i = position[r.id]
            h1 = order[(i + 1) % n_hosts]
            h2 = order[(i + 2) % n_hosts]
            # syndicated
            doc, node = copy(h1)
            replace_article(doc, node, h1, r.paragraphs)
            _set_headline(doc, own_title)
            emit(doc, cluster, "syndicated", r.id, h1)
            # syndicated, re-headlined, trimmed
            doc, node = copy(h2)
            replace_article(doc, node, h2, _trim(r.paragraphs, rng))
            _set_headline(doc, new_headline)
            emit(doc, cluster, "syndicated-trimmed", r.id, h2)
            # re-headlined (own page)
            doc, _ = copy(r.id)
            _set_headline(doc, new_headline)
            emit(doc, cluster, "reheadlined", r.id, r.id)
            # paragraph added (own page)
            doc, node = copy(r.id)
            paras = list(r.paragraphs)
            extra = rng.choice(paragraph_pool) if paragraph_pool else rng.choice(sentence_pool)
            words = sum(len(p.split()) for p in paras)
            while len(extra.split()) > max(8, words // 8):
                extra = " ".join(extra.split()[: max(8, words // 8)])
            paras.insert(len(paras) // 2, extra)
            replace_article(doc, node, r.id, paras)
            emit(doc, cluster, "paragraph-added", r.id, r.id)
            # comments changed (own page)
            doc, node = copy(r.id)
            block = _comment_block(rng, sentence_pool, rng.randint(3, 8))
            parent = node.getparent() if node.getparent() is not None else node
            parent.insert(parent.index(node) + 1 if node.getparent() is not None else len(node), block)
            emit(doc, cluster, "comments-changed", r.id, r.id)
        else:
            doc = parse_html(r.html)
            _set_headline(doc, new_headline)
            emit(doc, cluster, "reheadlined", r.id, r.id)
            doc = parse_html(r.html)
            body = doc.find("body")
            if body is not None:
                body.append(_comment_block(rng, sentence_pool, rng.randint(3, 8)))
                emit(doc, cluster, "comments-changed", r.id, r.id)
        if r.readable_html and r.id in main:
            title = html_escape(_title_of(parsed[r.id]))
            text = r.readable_html.decode("utf-8", "replace")
            readable = (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{title}</title>"
                        f"</head><body>{text}</body></html>").encode()
            pages.append(SitePage(f"/{_slug(r.site)}/{_slug(r.id.split(':', 1)[1])}-readable.html",
                                  readable, cluster, "readable", r.id, r.id))
    return pages
