"""A page's fingerprint by the references: the Fingerprinter's pipeline with
the Python walk and selection (``tests.reference.extract``) and the NumPy
features (``tests.reference.features``) in place of the compiled ones.

Decoding and parsing are the package's own (they have no compiled twin);
the final weighted simhash is ``hashing.simhash_hashes``, the core that
``tests/test_hashing.py`` checks against ``tests.reference.simhash``.
"""
from __future__ import annotations

import numpy as np

from scrapy_simdup._ext import hashing
from scrapy_simdup.exceptions import SkippedPage
from scrapy_simdup.fingerprint.decode import parse_html_text
from scrapy_simdup.fingerprint.fingerprinter import Fingerprinter
from tests.reference.extract import extract_lxml_py
from tests.reference.features import text_token_hashes_py, weighted_features_py


def fingerprint_html_py(f: Fingerprinter, html, encoding=None) -> tuple[int, np.ndarray, int]:
    """``(value, W, n_features)`` of ``f.fingerprint_html(html, encoding=encoding)``
    (lxml parser, no content selector); raises SkippedPage as it does."""
    if f.parser != "lxml" or f.content_xpath is not None or f.content_css is not None:
        raise NotImplementedError("the reference pipeline covers the lxml parser and "
                                  "the extract modes only")
    text, _, _ = f._decode(html, encoding)
    want_tags = "structure" in f.feature_sets
    text, _, tags = extract_lxml_py(parse_html_text(text), f.extract, want_tags)
    if f.feature_sets - {"structure"}:
        th = text_token_hashes_py(text)
    else:
        th = np.empty(0, np.uint64)
    th = th[: f.max_tokens]
    if not th.shape[0] and not (want_tags and tags):
        raise SkippedPage("empty")
    hashes, weights = weighted_features_py(th, f.feature_sets, f.shingle_size, tags,
                                           f.weighting, f.idf)
    n = int(hashes.shape[0])
    if n < f.min_features:
        raise SkippedPage("too_few_features", f"{n} < {f.min_features}")
    value, W = hashing.simhash_hashes(hashes, weights)
    return int(value), W, n
