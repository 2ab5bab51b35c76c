"""Page fingerprints: HTML / Scrapy responses / text -> (value, W).

Pipeline (the same for every entry point): decode -> parse (``decode``: lxml,
exactly as Scrapy/parsel do, or reuse ``response.selector.root``) -> main-content text
(``extract``) -> tokens (``tokens``) -> features + weights (``features``)
-> 64-bit weighted simhash in compiled code (``hashing``).

Fingerprints are a pure function of the page bytes and the options, so the
same page gives the same ``(value, W)`` in every run and on every machine.
The one exception is ``weighting="idf"``, which learns document frequencies
from the crawl's first pages (``idf``) and then freezes them; its table is
stored with the index and named in the version. ``Fingerprinter.version``
names the pipeline version; store it with a persisted index and refuse to
mix versions.
"""
from __future__ import annotations

import functools
import re

import numpy as np
from lxml import etree

from scrapy_simdup._ext import hashing
from scrapy_simdup.exceptions import ParameterError, SkippedPage
from scrapy_simdup.fingerprint.decode import (
    DEEP_BRANCH,
    NO_TEXT,
    decode_head,
    decode_page,
    depth_limit_error,
    is_blank,
    last_branch_depth,
    looks_binary,
    needs_taming,
    page_head,
    parse_html_text,
)
from scrapy_simdup.fingerprint.extract import EXTRACTOR_VERSION, extract_lxml
from scrapy_simdup.fingerprint.features import (
    FEATURE_SETS,
    FEATURES_VERSION,
    WEIGHTINGS,
    text_token_hashes,
    weighted_features,
)
from scrapy_simdup.fingerprint.idf import DEFAULT_LEARN_PAGES, MAX_LEARN_PAGES, IdfTable
from scrapy_simdup.fingerprint.simhash import _check_features, _check_weights
from scrapy_simdup.fingerprint.sketch import (
    KEY2_XOR,
    SKETCH_BYTES,
    SKETCH_VERSION,
    page_sketch,
    second_key,
)
from scrapy_simdup.fingerprint.tokens import TOKENIZER_VERSION

__all__ = ["Fingerprint", "Fingerprinter", "SkippedPage", "fingerprint_html",
           "fingerprint_response", "SKIP_REASONS"]

# Chosen on the tune half by benchmarks/eval_quality.py: the best page F1 at a
# distance that stays precise in a million-page crawl (word 3-shingles plus
# spot signatures, log-tf, main content, at least 16 distinct features, at
# SIMDUP_DISTANCE 9).
DEFAULT_FEATURES = "shingles+spots"
DEFAULT_WEIGHTING = "logtf"
DEFAULT_SHINGLE_SIZE = 3
DEFAULT_MIN_FEATURES = 16
DEFAULT_MAX_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_TOKENS = 100_000
EXTRACT_MODES = ("main", "visible")
PARSERS = ("lxml", "bs4")

SKIP_REASONS = ("empty", "too_few_features", "binary", "not_html", "too_large",
                "parse_error", "decode_error", "too_deep")


class Fingerprint:
    """A page fingerprint; unpacks as ``value, W``.

    ``value`` (int in [0, 2**64)), ``W`` (float64[64] bit weights, bit ``j`` set
    iff ``W[j] >= 0``), ``n_features`` (distinct features), ``main_found``
    (main-content block found, or the visible-text fallback was used),
    ``truncated`` (the page was cut at ``max_bytes``/``max_tokens``),
    ``features`` (the distinct feature hashes, kept only with
    ``weighting="idf"`` for ``Fingerprinter.learn``); what an index verifies a
    match with (``fingerprint/sketch.py``): ``value2`` and ``W2`` (the second
    key and its weights) and ``sketch`` (``SKETCH_BYTES`` bytes of MinHash).
    """

    __slots__ = ("value", "W", "n_features", "main_found", "truncated", "features",
                 "value2", "W2", "sketch")

    def __init__(self, value: int, W: np.ndarray, n_features: int,
                 main_found: bool = False, truncated: bool = False,
                 features: np.ndarray | None = None, value2: int = 0,
                 W2: np.ndarray | None = None, sketch: bytes = bytes(SKETCH_BYTES)):
        self.value = value
        self.W = W
        self.value2 = value2
        self.W2 = W2
        self.sketch = sketch
        self.n_features = n_features
        self.main_found = main_found
        self.truncated = truncated
        self.features = features

    def __iter__(self):
        yield self.value
        yield self.W

    def __len__(self) -> int:
        return 2

    def __getitem__(self, i):
        return (self.value, self.W)[i]

    def __eq__(self, other):
        if not isinstance(other, Fingerprint):
            return NotImplemented
        return (self.value == other.value and np.array_equal(self.W, other.W)
                and self.value2 == other.value2 and self.sketch == other.sketch)

    __hash__ = None

    def __repr__(self) -> str:
        return (f"Fingerprint(value=0x{self.value:016x}, n_features={self.n_features}, "
                f"main_found={self.main_found}, truncated={self.truncated})")


def _check_option(name, value, allowed):
    if value not in allowed:
        raise ParameterError(name, f"{name} must be one of {', '.join(map(repr, allowed))}, got {value!r}")


def _bs4_extraction():
    """The BeautifulSoup extraction module (``parser="bs4"``)."""
    # imported on first use: BeautifulSoup is loaded only by crawls that use it
    from scrapy_simdup.fingerprint import extract_bs4  # noqa: PLC0415
    return extract_bs4


def _scrapy_response_classes(response) -> frozenset:
    """Names of the Scrapy classes ``response`` is an instance of: the
    fingerprint layer does not import Scrapy, so ``TextResponse``,
    ``HtmlResponse`` and ``XmlResponse`` (or subclasses of them) are told
    apart by the class names in the response's MRO."""
    return _scrapy_classes(type(response))


@functools.lru_cache(maxsize=64)
def _scrapy_classes(cls: type) -> frozenset:
    return frozenset(c.__name__ for c in cls.__mro__
                     if c.__module__ == "scrapy" or c.__module__.startswith("scrapy."))


def has_text_features(features: str) -> bool:
    """Whether a ``features`` option (``"shingles+structure"``, ...) has a
    feature set made of the text (items and ``fingerprint_text`` need one)."""
    return bool({s.strip() for s in features.split("+")} - {"structure"})


def fingerprint_features(features, weights=None) -> Fingerprint:
    """A :class:`Fingerprint` (both keys and the sketch) of your own features:
    a sequence of ``str``/``bytes``, each occurrence weighted 1 unless
    ``weights`` gives one number per feature (as :func:`simhash`)."""
    features = _check_features(features)
    hashes = hashing.hash_features(features)
    w = None if weights is None else _check_weights(weights, len(features))
    value, W = hashing.simhash_hashes(hashes, w)
    value2, W2 = second_key(hashes, w)
    return Fingerprint(int(value), W, int(np.unique(hashes).shape[0]), value2=value2, W2=W2,
                       sketch=page_sketch(hashes))


# ----------------------------------------------------------------- content_xpath

#: a small page with every kind of node a parsed page has (the parser drops
#: comments and processing instructions): an XPath is evaluated on it once
_XPATH_SAMPLE = ("<html><head><title>t</title><meta name='m' content='c'/></head><body>"
                 "<div id='main' class='content'><h1>h</h1><p class='x'>x <a href='/'>a</a>"
                 " y</p><p>z</p></div></body></html>")
_XPATH_LITERAL = re.compile(r"\"[^\"]*\"|'[^']*'")
_XPATH_PREDICATE = re.compile(r"\[[^\[\]]*\]")
_AXIS = (r"(?:(?:child|descendant|descendant-or-self|self|parent|ancestor|ancestor-or-self"
         r"|following|following-sibling|preceding|preceding-sibling)\s*::\s*)?")
#: a final location step that selects no element: what it selects
_NON_ELEMENT_STEPS = (
    (re.compile(r"(?:@|attribute\s*::)"), "attributes"),
    (re.compile(r"namespace\s*::"), "namespace nodes"),
    (re.compile(_AXIS + r"text\s*\("), "text nodes"),
    (re.compile(_AXIS + r"comment\s*\("), "comments"),
    (re.compile(_AXIS + r"processing-instruction\s*\("), "processing instructions"),
    (re.compile(_AXIS + r"node\s*\("), "nodes of every kind (text too)"),
)


def _spaces(match) -> str:
    return " " * len(match.group(0))


def _final_steps(masked: str, start: int, end: int, nested: bool = False):
    """``(start, slash, end, alone)`` of the final location step of each path
    of ``masked[start:end]`` (an XPath with its literals and predicates
    blanked out, so indexes are those of the expression): ``slash`` is the
    index of the ``/`` before the step, or -1; ``alone``: the expression is
    that one path (no union, no parentheses around the step)."""
    depth, cut = 0, start
    branches = []
    for i in range(start, end):         # the paths of a union, at the top level
        c = masked[i]
        depth += (c == "(") - (c == ")")
        if c == "|" and depth == 0:
            branches.append((cut, i))
            cut = i + 1
    branches.append((cut, end))
    for lo, hi in branches:
        while lo < hi and masked[lo].isspace():
            lo += 1
        while hi > lo and masked[hi - 1].isspace():
            hi -= 1
        depth, slash = 0, -1
        for i in range(lo, hi):
            c = masked[i]
            depth += (c == "(") - (c == ")")
            if c == "/" and depth == 0:
                slash = i
        first = slash + 1 if slash >= 0 else lo
        while first < hi and masked[first].isspace():
            first += 1
        if masked[first:first + 1] == "(" and masked[hi - 1:hi] == ")":
            yield from _final_steps(masked, first + 1, hi - 1, True)   # (a | b), (//p)
        else:
            yield first, slash, hi, not nested and len(branches) == 1


def _non_element_step(xpath: str) -> tuple[str, str, str] | None:
    """``(what, step, parent)`` when a path of ``xpath`` ends in a step that
    selects no element (``@href``: attributes, ``text()``: text nodes, ...),
    ``parent`` the path before it (``""`` when there is none or the path is
    one of several), else None."""
    masked = _XPATH_LITERAL.sub(lambda m: m.group(0)[0] + "x" * (len(m.group(0)) - 2)
                                + m.group(0)[-1], xpath)
    while True:     # predicates, innermost first: their paths are not selected
        unmasked = _XPATH_PREDICATE.sub(_spaces, masked)
        if unmasked == masked:
            break
        masked = unmasked
    for first, slash, end, alone in _final_steps(masked, 0, len(masked)):
        for pattern, what in _NON_ELEMENT_STEPS:
            if pattern.match(masked, first):
                step = xpath[first:end].strip()
                axis = step.split("::", 1)[0].strip() if "::" in masked[first:end] else ""
                # the elements that hold what it selects (not its siblings, ...)
                within = axis in ("", "attribute", "child", "self", "descendant",
                                  "descendant-or-self")
                parent = xpath[:slash].rstrip("/").strip() if alone and within and slash > 0 \
                    else ""
                return what, step, parent
    return None


def _check_content_xpath(compiled, xpath: str) -> None:
    """``content_xpath`` must select elements (their text is the content): an
    XPath that cannot be evaluated, gives no node list, or selects
    attributes, text or other nodes is a ParameterError at start-up (on
    every page it would fail, or match nothing and fall back to the page)."""
    try:    # an expression that cannot select nodes (count(), an unknown $variable or prefix)
        probe = compiled(etree.fromstring(_XPATH_SAMPLE))
    except etree.XPathError as exc:
        raise ParameterError("content_xpath", f"content_xpath cannot be evaluated: {exc}") from None
    if not isinstance(probe, list):
        raise ParameterError("content_xpath",
                             f"content_xpath must select elements, but {xpath!r} "
                             f"gives a {type(probe).__name__}")
    found = _non_element_step(xpath)
    if found is None and any(not isinstance(n, etree._Element) for n in probe):
        found = ("attributes, text or other nodes that are not elements", None, "")
    if found is not None:
        what, step, parent = found
        hint = f" (the step {step!r})" if step else ""
        if parent:
            hint += f": select the elements instead, e.g. {parent!r}"
        raise ParameterError("content_xpath",
                             f"content_xpath must select elements (the text of each is the "
                             f"content), but {xpath!r} selects {what}{hint}")


class Fingerprinter:
    """Turns pages into fingerprints with one fixed set of options.

    ``features``: ``"shingles"`` (default), ``"spots"``, ``"structure"`` or a
    ``+`` combination. ``shingle_size``: words per shingle (default 2).
    ``weighting``: ``"logtf"`` (default), ``"count"``, ``"binary"`` or
    ``"idf"`` (log-tf times the IDF learned from the first ``idf_pages`` kept
    pages through :meth:`learn`; ``idf``: a saved ``IdfTable`` to go on with).
    ``extract``: ``"main"`` (main content, visible-text fallback; default) or
    ``"visible"``. ``content_xpath``/``content_css``: a selector whose matches
    are the content (overrides ``extract``; a page where it matches nothing
    falls back to ``extract``). ``min_features``: pages with fewer distinct
    features are skipped (``too_few_features``). ``parser``: ``"lxml"``
    (default) or ``"bs4"``. ``max_bytes``: larger HTML loses its invisible
    bulk and is then cut to its first ``max_bytes`` bytes
    (``on_too_large="truncate"``, default; the fingerprint says
    ``truncated``) or skipped (``"skip"``); of any page, no more than the
    first ``LOOK_FACTOR * max_bytes`` (8 x, bytes or characters of a str) is
    read at all, so the work per page is bounded by ``max_bytes``, not by the
    body (a longer page is ``truncated``). ``max_tokens`` caps the text that
    is fingerprinted. A page whose text lxml lost to its nesting depth limit
    is skipped as ``too_deep`` (``parser="bs4"`` reads it).
    """

    def __init__(self, features: str = DEFAULT_FEATURES, shingle_size: int = DEFAULT_SHINGLE_SIZE,
                 weighting: str = DEFAULT_WEIGHTING, extract: str = "main",
                 content_xpath: str | None = None, content_css: str | None = None,
                 min_features: int = DEFAULT_MIN_FEATURES, parser: str = "lxml",
                 max_bytes: int = DEFAULT_MAX_BYTES, on_too_large: str = "truncate",
                 max_tokens: int = DEFAULT_MAX_TOKENS, idf_pages: int = DEFAULT_LEARN_PAGES,
                 idf: IdfTable | None = None):
        if not isinstance(features, str) or not features:
            raise ParameterError("features",
                                 f"features must be a non-empty str such as 'shingles', got {features!r}")
        sets = tuple(s.strip() for s in features.split("+"))
        for s in sets:
            if s not in FEATURE_SETS:
                raise ParameterError("features",
                                     f"unknown feature set {s!r} in features "
                                     f"(choose from {', '.join(FEATURE_SETS)}, joined with '+')")
            if sets.count(s) > 1:
                raise ParameterError("features", f"features names {s!r} twice: {features!r}")
        if isinstance(shingle_size, bool) or not isinstance(shingle_size, int) or not 1 <= shingle_size <= 16:
            raise ParameterError("shingle_size",
                                 f"shingle_size must be an int in 1..16, got {shingle_size!r}")
        _check_option("weighting", weighting, WEIGHTINGS)
        if weighting == "idf":
            if isinstance(idf_pages, bool) or not isinstance(idf_pages, int) \
                    or not 1 <= idf_pages <= MAX_LEARN_PAGES:
                raise ParameterError("idf_pages",
                                     f"idf_pages must be an int in 1..{MAX_LEARN_PAGES}, got {idf_pages!r}")
            if idf is None:
                idf = IdfTable(idf_pages)
            elif idf.learn_pages != idf_pages:
                raise ParameterError("idf_pages",
                                     f"idf_pages is {idf_pages}, but the saved IDF table learns from "
                                     f"{idf.learn_pages} pages (set it back, or start a new table)")
        elif idf is not None:
            raise ParameterError("weighting",
                                 f"an IDF table needs weighting='idf', got weighting={weighting!r}")
        _check_option("extract", extract, EXTRACT_MODES)
        _check_option("parser", parser, PARSERS)
        _check_option("on_too_large", on_too_large, ("truncate", "skip"))
        if content_xpath is not None and content_css is not None:
            raise ParameterError("content_xpath,content_css",
                                 "content_xpath and content_css are exclusive: give one of them")
        self._content = None
        if content_css is not None:
            if not isinstance(content_css, str) or not content_css.strip():
                raise ParameterError("content_css",
                                     f"content_css must be a non-empty CSS selector, got {content_css!r}")
            # cssselect (parsel's CSS translator) is only needed for content_css
            from cssselect import HTMLTranslator  # noqa: PLC0415
            from cssselect.parser import SelectorError  # noqa: PLC0415
            try:
                xpath = HTMLTranslator().css_to_xpath(content_css)
            except SelectorError as exc:
                raise ParameterError("content_css",
                                     f"content_css is not a valid CSS selector: {exc}") from None
            self._content = etree.XPath(xpath)
        elif content_xpath is not None:
            if not isinstance(content_xpath, str) or not content_xpath.strip():
                raise ParameterError("content_xpath",
                                     f"content_xpath must be a non-empty XPath, got {content_xpath!r}")
            try:
                self._content = etree.XPath(content_xpath)
            except etree.XPathSyntaxError as exc:
                raise ParameterError("content_xpath", f"content_xpath is not a valid XPath: {exc}") from None
            _check_content_xpath(self._content, content_xpath)
        for name, value, low in (("min_features", min_features, 1), ("max_bytes", max_bytes, 1024),
                                 ("max_tokens", max_tokens, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ParameterError(name, f"{name} must be an int >= {low}, got {value!r}")
        self.features = "+".join(sets)
        self.feature_sets = frozenset(sets)
        self.shingle_size = shingle_size
        self.weighting = weighting
        self.extract = extract
        self.content_xpath = content_xpath
        self.content_css = content_css
        self.min_features = min_features
        self.parser = parser
        self.max_bytes = max_bytes
        self.on_too_large = on_too_large
        self.max_tokens = max_tokens
        self.idf = idf
        self._want_tags = "structure" in self.feature_sets
        self._text_sets = self.feature_sets - {"structure"}   # see has_text_features

    # ----------------------------------------------------------------- identity

    @property
    def version(self) -> str:
        """Pipeline version + options: equal strings give equal fingerprints."""
        weighting = self.weighting
        if self.idf is not None:     # each table learns its own weights
            weighting += f"{self.idf.learn_pages}-{self.idf.table_id:016x}"
        return (f"simdup-fp/t{TOKENIZER_VERSION}.x{EXTRACTOR_VERSION}.f{FEATURES_VERSION}"
                f".s{SKETCH_VERSION}"
                f":{self.features}:k{self.shingle_size}:{weighting}:{self.extract}"
                f":{self.content_xpath or ''}:{self.content_css or ''}:{self.parser}")

    def options(self) -> dict:
        return dict(features=self.features, shingle_size=self.shingle_size,
                    weighting=self.weighting, extract=self.extract,
                    content_xpath=self.content_xpath, content_css=self.content_css,
                    min_features=self.min_features, parser=self.parser,
                    max_bytes=self.max_bytes, on_too_large=self.on_too_large,
                    max_tokens=self.max_tokens,
                    **({"idf_pages": self.idf.learn_pages} if self.idf is not None else {}))

    def state(self) -> dict:
        """JSON-serialisable state to store with an index (no learned parameters)."""
        return {"version": self.version, "options": self.options()}

    def load_state(self, state: dict) -> None:
        """Check that a stored state matches this fingerprinter (ValueError if not)."""
        if not isinstance(state, dict) or state.get("version") != self.version:
            got = state.get("version") if isinstance(state, dict) else state
            raise ValueError(f"fingerprint state is for {got!r}, this fingerprinter is {self.version!r}")

    def __repr__(self) -> str:
        return f"Fingerprinter({self.version})"

    # ----------------------------------------------------------------- decoding

    def _decode(self, html, encoding, need_text: bool = True):
        """``(text, truncated, utf8)`` from str/bytes (:func:`decode_page`)."""
        return decode_page(html, encoding, max_bytes=self.max_bytes,
                           on_too_large=self.on_too_large, need_text=need_text)

    # ----------------------------------------------------------------- text

    def _text_from_root(self, root):
        if self._content is not None:
            try:
                nodes = [n for n in self._content(root) if isinstance(n, etree._Element)]
            except etree.XPathError as exc:
                raise SkippedPage("parse_error", f"content selector failed: {exc}") from None
            if nodes:
                text, found, tags = extract_lxml(root, content_nodes=nodes, want_tags=self._want_tags)
                if self._want_tags:   # structure features describe the whole page
                    _, _, tags = extract_lxml(root, "visible", want_tags=True)
                return text, found, tags
        return extract_lxml(root, self.extract, want_tags=self._want_tags)

    def _text_from_soup(self, soup):
        extract_soup = _bs4_extraction().extract_soup
        if self._content is not None and self.content_css is not None:
            nodes = soup.select(self.content_css)
            if nodes:
                return extract_soup(soup, content_nodes=nodes, want_tags=self._want_tags)
        elif self._content is not None:
            raise ValueError("content_xpath needs parser='lxml' (BeautifulSoup has no XPath); "
                             "use content_css")
        return extract_soup(soup, self.extract, want_tags=self._want_tags)

    def _finish(self, text: str, tags, main_found: bool, truncated: bool) -> Fingerprint:
        hashes, weights, truncated2 = self._features(text, tags)
        return self._simhash(hashes, weights, main_found, truncated or truncated2)

    def _features(self, text: str, tags):
        th = text_token_hashes(text) if self._text_sets else np.empty(0, np.uint64)
        truncated = False
        if th.shape[0] > self.max_tokens:
            th, truncated = th[: self.max_tokens], True
        if not th.shape[0] and not (self._want_tags and tags):
            raise SkippedPage("empty")
        hashes, weights = weighted_features(th, self.feature_sets, self.shingle_size, tags,
                                            self.weighting, self.idf)
        return hashes, weights, truncated

    def _simhash(self, hashes, weights, main_found, truncated) -> Fingerprint:
        n = int(hashes.shape[0])
        if n < self.min_features:
            raise SkippedPage("too_few_features", f"{n} < {self.min_features}")
        value, W, value2, W2, sketch = hashing.page_keys(hashes, weights, KEY2_XOR)
        return Fingerprint(int(value), W, n, main_found, truncated,
                           hashes if self.idf is not None else None, int(value2), W2, sketch)

    def learn(self, fingerprint: Fingerprint) -> bool:
        """Let ``weighting="idf"`` learn from a page the crawl keeps (not a
        duplicate); True if the table changed (False once it is frozen, or
        with another weighting)."""
        if self.idf is None or fingerprint.features is None:
            return False
        return self.idf.learn(fingerprint.features)

    # ----------------------------------------------------------------- public

    def extract_text_html(self, html, url=None, encoding=None) -> tuple[str, bool, list]:
        """``(text, main_found, tags)``: the text the fingerprint is made of."""
        text, _, utf8 = self._decode(html, encoding, need_text=self.parser == "bs4")
        if self.parser == "bs4":
            return self._text_from_soup(_bs4_extraction().parse_soup(text))
        return self._text_from_root(parse_html_text(text, utf8))

    def features_html(self, html, url=None, encoding=None) -> tuple[np.ndarray, np.ndarray]:
        """Distinct feature hashes (uint64) and their weights (float64)."""
        text, found, tags = self.extract_text_html(html, url, encoding)
        hashes, weights, _ = self._features(text, tags)
        return hashes, weights

    def features_text(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        text = self._check_text(text)
        hashes, weights, _ = self._features(text, None)
        return hashes, weights

    def fingerprint_html(self, html, url=None, encoding=None) -> Fingerprint:
        """Fingerprint an HTML page given as ``bytes`` (decoded like Scrapy
        does: BOM, ``encoding``, ``<meta charset>``, then UTF-8) or ``str``.
        ``url`` is accepted for symmetry and logging; it does not change the
        fingerprint (the same page at two URLs must match)."""
        return self._fingerprint_decoded(
            *self._decode(html, encoding, need_text=self.parser == "bs4"))

    def _fingerprint_decoded(self, text, truncated: bool, utf8) -> Fingerprint:
        """The fingerprint of ``_decode``'s ``(text, truncated, utf8)``."""
        if self.parser == "bs4":
            ptext, found, tags = self._text_from_soup(_bs4_extraction().parse_soup(text))
            return self._finish(ptext, tags, found, truncated)
        root = parse_html_text(text, utf8)
        try:
            ptext, found, tags = self._text_from_root(root)
            return self._finish(ptext, tags, found, truncated)
        except SkippedPage as exc:
            # a page with no text may have lost it to lxml's depth limit
            depth_error = depth_limit_error() if exc.reason in NO_TEXT else None
            if depth_error is None:
                raise
            raise SkippedPage("too_deep", depth_error) from None

    def fingerprint_soup(self, soup) -> Fingerprint:
        """Fingerprint a BeautifulSoup document the spider already holds."""
        text, found, tags = self._text_from_soup(soup)
        return self._finish(text, tags, found, False)

    def fingerprint_tree(self, root) -> Fingerprint:
        """Fingerprint an already parsed lxml tree (never modified)."""
        text, found, tags = self._text_from_root(root)
        return self._finish(text, tags, found, False)

    def fingerprint_response(self, response) -> Fingerprint:
        """Fingerprint a Scrapy response, reusing its cached selector tree.

        Non-text responses and text responses that are not HTML (XML, JSON,
        plain text) raise ``SkippedPage("not_html")``.
        """
        kinds = _scrapy_response_classes(response)
        if "TextResponse" not in kinds or "XmlResponse" in kinds:
            raise SkippedPage("not_html", type(response).__name__)
        if "HtmlResponse" not in kinds:
            ctype = response.headers.get(b"Content-Type", b"") or b""
            if b"html" not in ctype.lower():
                raise SkippedPage("not_html", ctype.decode("latin-1")[:60])
        body = response.body
        head, cut = page_head(body, self.max_bytes)     # a body over the bound: only its head is read
        if is_blank(head) and not (cut and self.on_too_large == "skip"):
            raise SkippedPage("empty")
        # (a page in a declared UTF-16/32 has NULs: then tested as Scrapy decodes it)
        if looks_binary(body[:1024]) and looks_binary(body[:1024], response.encoding):
            raise SkippedPage("binary")
        if needs_taming(body, self.max_bytes):
            # the byte path (invisible bulk stripped, then cut at max_bytes or
            # skipped), even when a tree exists: the same page, the same fingerprint
            return self._fingerprint_decoded(*decode_head(
                head, len(body), cut, "bytes", response.encoding, max_bytes=self.max_bytes,
                on_too_large=self.on_too_large, need_text=self.parser == "bs4"))
        if self.parser == "bs4":
            text, found, tags = self._text_from_soup(_bs4_extraction().parse_soup(response.text))
            return self._finish(text, tags, found, False)
        root = response.selector.root
        if not isinstance(root, etree._Element):
            raise SkippedPage("not_html", "selector has no lxml tree")
        try:
            text, found, tags = self._text_from_root(root)
            return self._finish(text, tags, found, False)
        except SkippedPage as exc:
            if exc.reason not in NO_TEXT or last_branch_depth(root) < DEEP_BRANCH:
                raise
        # a tree that may have been cut by lxml's depth limit (which says so
        # only in the log of the parser that built it): parse the body again,
        # as fingerprint_html does, to tell "too_deep" from a page with no text
        return self.fingerprint_html(body, url=response.url, encoding=response.encoding)

    def fingerprint_text(self, text: str) -> Fingerprint:
        """Fingerprint plain text (item fields); no extraction, same features."""
        text = self._check_text(text)
        hashes, weights, truncated = self._features(text, None)
        return self._simhash(hashes, weights, True, truncated)

    def _check_text(self, text) -> str:
        if not isinstance(text, str):
            raise TypeError(f"text must be str, not {type(text).__name__}")
        if not self._text_sets:
            raise ValueError(f"features={self.features!r} has no text features; "
                             "fingerprint_text needs 'shingles' or 'spots'")
        if not text.strip():
            raise SkippedPage("empty")
        return text


@functools.lru_cache(maxsize=32)
def _cached(items: tuple) -> Fingerprinter:
    return Fingerprinter(**dict(items))


def get_fingerprinter(**options) -> Fingerprinter:
    """A cached Fingerprinter for these options."""
    if options.get("weighting") == "idf":
        raise ValueError("weighting='idf' learns from the pages of a crawl, so a one-off "
                         "fingerprint has no table to use: make a Fingerprinter("
                         "weighting='idf') and call its learn() with the pages it keeps")
    try:
        return _cached(tuple(sorted(options.items())))
    except TypeError:        # unhashable option value: let the constructor complain
        return Fingerprinter(**options)


def fingerprint_html(html, url=None, encoding=None, **options) -> Fingerprint:
    """``value, W`` of an HTML page with the default pipeline (see Fingerprinter)."""
    return get_fingerprinter(**options).fingerprint_html(html, url=url, encoding=encoding)


def fingerprint_response(response, **options) -> Fingerprint:
    """``value, W`` of a Scrapy response, reusing its cached selector tree."""
    return get_fingerprinter(**options).fingerprint_response(response)
