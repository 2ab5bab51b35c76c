"""NumPy references of the compiled feature pass (``scrapy_simdup._ext.textfeat``).

``text_token_hashes_py`` tokenises in Python (``normalize`` + ``split_tokens``)
and hashes each token; ``features_from_token_hashes_py`` makes the word
shingles and spot signatures with NumPy; ``weigh_py`` counts with
``np.unique``. Together they are the whole feature step of a fingerprint
without ``textfeat``.
"""
from __future__ import annotations

import numpy as np

from scrapy_simdup.fingerprint.features import (
    _M,
    _SALT,
    STOP_HASHES,
    WEIGHTINGS,
    fmix64,
    shingle_hashes,
    token_hashes,
)
from scrapy_simdup.fingerprint.tokens import normalize, split_tokens


def text_token_hashes_py(text: str) -> np.ndarray:
    """``features.text_token_hashes(text)`` without the compiled tokenizer."""
    if not text:
        return np.empty(0, np.uint64)
    return token_hashes(split_tokens(normalize(text)))


def spot_hashes(th: np.ndarray, chain: int = 2) -> np.ndarray:
    """Spot signatures: stopword antecedent + the next ``chain`` content tokens."""
    n = th.shape[0]
    if n < chain + 1:
        return np.empty(0, np.uint64)
    is_stop = np.isin(th, STOP_HASHES)
    ante = np.flatnonzero(is_stop)
    content = np.flatnonzero(~is_stop)
    if ante.size == 0 or content.size < chain:
        return np.empty(0, np.uint64)
    j = np.searchsorted(content, ante, side="right")
    ok = j + chain <= content.size
    ante, j = ante[ok], j[ok]
    s = th[ante] ^ _SALT["spots"]
    for c in range(chain):
        s = s * _M + th[content[j + c]]
    return fmix64(s)


def features_from_token_hashes_py(th: np.ndarray | None, feature_sets, shingle_size: int,
                                  tags: list[str] | None = None,
                                  tag_shingle_size: int = 4) -> np.ndarray:
    """``features.features_from_token_hashes`` with NumPy word features."""
    parts = []
    if "shingles" in feature_sets:
        parts.append(shingle_hashes(th, shingle_size))
    if "spots" in feature_sets:
        parts.append(spot_hashes(th))
    if "structure" in feature_sets and tags:
        parts.append(shingle_hashes(token_hashes(tags), tag_shingle_size, _SALT["structure"]))
    if not parts:
        return np.empty(0, np.uint64)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def weigh_py(hashes: np.ndarray, weighting: str, idf=None) -> tuple[np.ndarray, np.ndarray]:
    """``features.weigh`` counting with ``np.unique``."""
    if hashes.size == 0:
        return hashes, np.empty(0, np.float64)
    uniq, counts = np.unique(hashes, return_counts=True)
    if weighting == "count":
        w = counts.astype(np.float64)
    elif weighting == "logtf":
        w = 1.0 + np.log(counts)
    elif weighting == "binary":
        w = np.ones(uniq.size, np.float64)
    elif weighting == "idf":
        w = idf.weights(uniq, counts.astype(np.float64))
    else:
        raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}")
    return uniq, w


def weighted_features_py(th: np.ndarray, feature_sets, shingle_size: int, tags=None,
                         weighting: str = "logtf", idf=None) -> tuple[np.ndarray, np.ndarray]:
    """``features.weighted_features``: distinct feature hashes and weights."""
    return weigh_py(features_from_token_hashes_py(th, feature_sets, shingle_size, tags),
                    weighting, idf)
