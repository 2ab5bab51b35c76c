"""Feature sets and weights: tokens -> (feature hashes, weights).

Tokens are hashed in compiled code (64-bit murmur3 of each token's UTF-8)
and combined into shingle/signature hashes with wrapping ``uint64``
arithmetic (identical on every machine). ``textfeat`` does tokenising,
hashing and combining in one compiled pass; its NumPy reference is in
``tests/reference/features.py``. Tag shingles (``structure``) are combined
here, with NumPy.

Feature sets (combine with ``+``, e.g. ``"shingles+structure"``):

* ``shingles``  word n-grams of ``shingle_size`` consecutive tokens;
* ``spots``     spot signatures (Theobald, Siddharth and Paepcke, SIGIR 2008):
  every occurrence of a stopword *antecedent* ("the", "is", "said", "der",
  "le", ...) followed by the next two non-stopword tokens;
* ``structure`` n-grams of the page's tag sequence (``tag.firstclass``),
  for template-level dedup (pages of one template look alike here).

Weights (per distinct feature, always positive):

* ``count``   number of occurrences;
* ``logtf``   ``1 + ln(count)``;
* ``binary``  1 (set semantics, like MinHash's Jaccard);
* ``idf``     ``logtf`` times the inverse document frequency learned from the
  crawl (``idf.IdfTable``).
"""
from __future__ import annotations

import numpy as np

from scrapy_simdup._ext import hashing as _core
from scrapy_simdup._ext import textfeat
from scrapy_simdup.fingerprint.tokens import fold_segments, fold_table, normalize, split_tokens

FEATURES_VERSION = 1
FEATURE_SETS = ("shingles", "spots", "structure")
WEIGHTINGS = ("count", "logtf", "binary", "idf")

_M = np.uint64(0x9E3779B97F4A7C15)
_C1 = np.uint64(0xFF51AFD7ED558CCD)
_C2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)
_SALT = {
    "shingles": np.uint64(0x5348494E474C4553),
    "spots": np.uint64(0x53504F5453494753),
    "structure": np.uint64(0x5354525543545552),
}

# Antecedents for spot signatures: very frequent function words of the
# languages in the development data (en, de, fr, es, it, pt, nl).
STOPWORDS = frozenset("""
a an the is are was were be been being has have had do does did will would can could
should may might must shall said says say to of in on at for with from by as and or
but not no this that these those there their they it its he she his her we our you
your i me my him them who which what when where how than then also just about after
before over into more most some any all one two new up out so if
der die das den dem des ein eine einer eines einem einen und ist sind war waren wird
werden hat haben hatte nicht mit von zu im auf für an auch sich es sie er wir ich
dass bei nach aus wie noch nur oder aber um so am vom zum zur über
le la les un une des du de et est sont était il elle ils elles nous vous je on que qui
dans pour par sur avec pas plus au aux ce cette ces son sa ses leur a été ont
el los las una unos unas y es son fue en por con para del al lo se que como más pero
il lo gli le una uno e è sono nel della di che per con non si
o os um uma é são foi em no na do da dos das com para não se
het een en is zijn was werd van op te voor met niet dat die er ook
""".split())
STOP_HASHES = np.unique(_core.hash_features(sorted(STOPWORDS)))


def fmix64(x: np.ndarray) -> np.ndarray:
    """murmur3's 64-bit finaliser on a uint64 array (in place on a copy)."""
    x = x ^ (x >> _S33)
    x *= _C1
    x ^= x >> _S33
    x *= _C2
    x ^= x >> _S33
    return x


def token_hashes(tokens: list[str]) -> np.ndarray:
    return _core.hash_features(tokens) if tokens else np.empty(0, np.uint64)


def text_token_hashes(text: str) -> np.ndarray:
    """Hashes of ``tokenize(text)``, made in compiled code."""
    if not text:
        return np.empty(0, np.uint64)
    # one compiled pass (normalise, cut, hash) for text whose characters all
    # normalise on their own; normalize()'s passes for the rest
    th = textfeat.fold_token_hashes(text, fold_table(), fold_segments())
    if th is not None:
        return th
    text = normalize(text)
    th = textfeat.token_hashes(text)
    return th if th is not None else token_hashes(split_tokens(text))  # no UTF-8 form


def shingle_hashes(th: np.ndarray, k: int, salt=_SALT["shingles"]) -> np.ndarray:
    """Hashes of every run of ``k`` consecutive token hashes.

    A text shorter than ``k`` tokens gives one shingle of all its tokens.
    """
    n = th.shape[0]
    if n == 0:
        return np.empty(0, np.uint64)
    k = min(k, n)
    m = n - k + 1
    s = th[:m] ^ salt
    for j in range(1, k):
        s = s * _M + th[j:j + m]
    return fmix64(s)


def weigh(hashes: np.ndarray, weighting: str, idf=None) -> tuple[np.ndarray, np.ndarray]:
    """Distinct features and their (positive) weights (``idf``: the IdfTable
    that ``weighting="idf"`` needs)."""
    if hashes.size == 0:
        return hashes, np.empty(0, np.float64)
    uniq, counts = textfeat.unique_counts(np.sort(hashes))
    if weighting == "count":
        w = counts.astype(np.float64)
    elif weighting == "logtf":
        w = 1.0 + np.log(counts)
    elif weighting == "binary":
        w = np.ones(uniq.size, np.float64)
    elif weighting == "idf":
        if idf is None:
            raise ValueError("weighting='idf' needs the IdfTable learned from the crawl")
        w = idf.weights(uniq, counts.astype(np.float64))
    else:
        raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}")
    return uniq, w


# weighted_features' compiled path: the weight of each count, made by the
# same NumPy call as weigh()'s (equal to it, value for value: tested)
_WEIGHT_CODES = {"count": 0, "logtf": 1, "binary": 2}
_LOGTF_COUNTS = 4096
_logtf_table = None


def _logtf_of_count() -> np.ndarray:
    global _logtf_table
    if _logtf_table is None:
        counts = np.arange(_LOGTF_COUNTS, dtype=np.int64)
        counts[0] = 1                          # (count 0 never occurs)
        _logtf_table = 1.0 + np.log(counts)
    return _logtf_table


def weighted_features(th: np.ndarray, feature_sets, shingle_size: int, tags=None,
                      weighting: str = "logtf", idf=None) -> tuple[np.ndarray, np.ndarray]:
    """``weigh(features_from_token_hashes(th, ...), weighting, idf)``: distinct
    feature hashes (ascending) and their weights. Word features with the
    count, logtf or binary weighting take one compiled call (a crawl pays
    for every NumPy call with cold caches); the rest takes the NumPy path."""
    code = _WEIGHT_CODES.get(weighting)
    if (code is not None and "structure" not in feature_sets
            and ("shingles" in feature_sets or "spots" in feature_sets)):
        th = np.ascontiguousarray(th, dtype=np.uint64)
        out = textfeat.weighted_features(th, shingle_size, "shingles" in feature_sets,
                                          "spots" in feature_sets, STOP_HASHES,
                                          _SALT["shingles"], _SALT["spots"], code,
                                          _logtf_of_count())
        if out is not None:
            return out
    raw = features_from_token_hashes(th, feature_sets, shingle_size, tags)
    return weigh(raw, weighting, idf)


def features_from_tokens(tokens: list[str], feature_sets, shingle_size: int,
                         tags: list[str] | None = None,
                         tag_shingle_size: int = 4) -> np.ndarray:
    """All feature hashes (with repeats) of the chosen feature sets."""
    th = None
    if "shingles" in feature_sets or "spots" in feature_sets:
        th = token_hashes(tokens)
    return features_from_token_hashes(th, feature_sets, shingle_size, tags, tag_shingle_size)


def features_from_token_hashes(th: np.ndarray | None, feature_sets, shingle_size: int,
                               tags: list[str] | None = None,
                               tag_shingle_size: int = 4) -> np.ndarray:
    """``features_from_tokens`` from the token hashes."""
    parts = []
    shingles = "shingles" in feature_sets
    spots = "spots" in feature_sets
    if shingles or spots:
        parts.append(textfeat.text_features(th, shingle_size, shingles, spots, STOP_HASHES,
                                             _SALT["shingles"], _SALT["spots"]))
    if "structure" in feature_sets and tags:
        parts.append(shingle_hashes(_core.hash_features(tags), tag_shingle_size,
                                    _SALT["structure"]))
    if not parts:
        return np.empty(0, np.uint64)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)
