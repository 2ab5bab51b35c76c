"""scrapy-simdup: near-duplicate page detection for Scrapy crawls.

Public names are re-exported here; modules starting with ``_`` are private.
"""
from ._version import __version__
from ._simhash import SimhashResult, hamming, simhash, simhash_many

__all__ = [
    "__version__",
    "SimhashResult",
    "hamming",
    "simhash",
    "simhash_many",
]
