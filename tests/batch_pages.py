"""Pages for the batch-file, merge and CLI tests: what a crawl hands the
batch writer (both keys, their weights, the sketch), made from plain
features the way the Fingerprinter makes them from a page's."""
from __future__ import annotations

import numpy as np

from scrapy_simdup._ext import hashing
from scrapy_simdup.fingerprint.sketch import page_sketch, second_key
from scrapy_simdup.index.backend import Page


def features_page(features) -> Page:
    """The :class:`Page` of a sequence of str features (each weight 1): key 1
    is ``simhash(features)``."""
    hashes = hashing.hash_features(list(features))
    value, W = hashing.simhash_hashes(hashes)
    value2, W2 = second_key(hashes, None)
    return Page(int(value), W, value2, W2, page_sketch(np.unique(hashes)))


def raw_page(value, W, value2=None, W2=None, sketch=bytes(32)) -> Page:
    """A page from given values (key 2 defaults to key 1, the sketch to 32
    zero bytes: every such page verifies against every other)."""
    return Page(value, W, value if value2 is None else value2, W if W2 is None else W2, sketch)


def write_crawl(directory):
    """A SIMDUP_DIR of 60 pages in clusters of 3 near-duplicates, in 3 batch
    files (25, 25 and 10 pages)."""
    from scrapy_simdup.storage.batchwriter import BatchWriter

    rng = np.random.default_rng(3)
    with BatchWriter(directory, batch_size=25) as w:
        for c in range(20):
            base = [f"w{int(x)}" for x in rng.integers(0, 10_000, 300)]
            for v in range(3):
                doc = list(base)
                doc[int(rng.integers(len(doc)))] = "changed"
                w.append(features_page(doc), f"https://example.com/{c}/{v}")
    return directory

