"""scrapy-simdup: near-duplicate page detection for Scrapy crawls.

Public names are re-exported here; modules starting with ``_`` are private.
"""
from ._version import __version__
from ._simhash import SimhashResult, hamming, simhash, simhash_many
from ._index import BPHSIndex, CorruptIndexError, PSMIndex, flip_masks
from ._volatility import VolatilityModel
from ._config import SimdupConfig
from ._fingerprinter import (Fingerprint, Fingerprinter, SkippedPage,
                             fingerprint_html, fingerprint_response)
from ._atomic import CorruptFileError
from ._batch import BatchWriter
from ._batchfile import read_batch
from ._merge import merge as merge_batches

# Scrapy components, imported on first use (PEP 562) so that ``import
# scrapy_simdup`` stays light for code that only fingerprints.
_SCRAPY_NAMES = {
    "Addon": "._addon",
    "SimdupDownloaderMiddleware": "._middleware",
    "NearDuplicateResponse": "._middleware",
    "SimdupPipeline": "._pipeline",
    "NearDuplicateItem": "._pipeline",
    "SimdupLogStats": "._logstats",
}


def __getattr__(name):
    module = _SCRAPY_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "__version__",
    "SimhashResult",
    "hamming",
    "simhash",
    "simhash_many",
    "PSMIndex",
    "BPHSIndex",
    "VolatilityModel",
    "CorruptIndexError",
    "flip_masks",
    "SimdupConfig",
    "Fingerprint",
    "Fingerprinter",
    "SkippedPage",
    "fingerprint_html",
    "fingerprint_response",
    "CorruptFileError",
    "BatchWriter",
    "read_batch",
    "merge_batches",
    "Addon",
    "SimdupDownloaderMiddleware",
    "NearDuplicateResponse",
    "SimdupPipeline",
    "NearDuplicateItem",
    "SimdupLogStats",
]
