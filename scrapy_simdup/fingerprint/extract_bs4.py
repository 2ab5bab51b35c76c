"""Main-content extraction from a BeautifulSoup document.

For spiders that already hold a soup. The walk feeds the same events to the
same :class:`~scrapy_simdup.fingerprint.extract.BlockBuilder` as the lxml walker, so a
page gives the same text (and fingerprint) whichever parser built the tree,
up to differences between the parsers' repair of broken HTML.
"""
from __future__ import annotations

from bs4 import BeautifulSoup, FeatureNotFound, NavigableString, Tag
from bs4.element import CData, Comment, Declaration, Doctype, ProcessingInstruction

from scrapy_simdup.fingerprint.extract import BlockBuilder


def parse_soup(text: str):
    """Parse decoded HTML with BeautifulSoup (lxml tree builder if present)."""
    try:
        return BeautifulSoup(text, "lxml")
    except FeatureNotFound:  # no lxml tree builder
        return BeautifulSoup(text, "html.parser")


def walk_soup(root, builder: BlockBuilder) -> BlockBuilder:
    """Feed the events of a soup (or a Tag) to ``builder`` (explicit stack)."""
    skip_types = (Comment, CData, Declaration, Doctype, ProcessingInstruction)
    start = builder.start
    data = builder.data
    finish = builder.finish

    def tag_start(tag) -> bool:
        attrs = tag.attrs
        cls = attrs.get("class")
        if isinstance(cls, list):
            cls = " ".join(cls)
        name = tag.name.lower()
        return start(name, cls, attrs.get("id"),
                     attrs.get("hidden") is not None or attrs.get("aria-hidden") == "true")

    if isinstance(root, Tag) and root.name != "[document]":
        if tag_start(root):
            builder.close()
            return builder
        iters = [iter(root.contents)]
    else:
        iters = [iter(root.contents)]
        builder.stack.append(0)          # the document node: closed below
    while iters:
        child = next(iters[-1], None)
        if child is None:
            iters.pop()
            finish()
            continue
        if isinstance(child, NavigableString):
            if not isinstance(child, skip_types):
                data(str(child))
            continue
        if not isinstance(child, Tag):
            continue
        if tag_start(child):
            finish()
            continue
        iters.append(iter(child.contents))
    builder.close()
    return builder


def extract_soup(soup, mode: str = "main", content_nodes=None, want_tags: bool = False,
                 **params) -> tuple[str, bool, list[str]]:
    """Same contract as :func:`scrapy_simdup.fingerprint.extract.extract_lxml`."""
    if content_nodes is not None:
        texts, tags = [], []
        for node in content_nodes:
            b = walk_soup(node, BlockBuilder("visible", want_tags))
            texts.append(b.all_text())
            tags.extend(b.tags)
        return "\n".join(t for t in texts if t), True, tags
    builder = walk_soup(soup, BlockBuilder(mode, want_tags))
    if mode == "main":
        text, found = builder.main_text(**params)
    else:
        text, found = builder.all_text(), False
    return text, found, builder.tags
