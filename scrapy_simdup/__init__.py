"""scrapy-simdup: near-duplicate page detection for Scrapy crawls.

Public names are re-exported here; the packages below are the layers
(integration, cli, merge, index, fingerprint, storage, _ext: see
docs/architecture.rst), and modules starting with ``_`` are private.
"""
import importlib

from scrapy_simdup._version import __version__
from scrapy_simdup.exceptions import CorruptFileError, CorruptIndexError, SimdupError, SkippedPage
from scrapy_simdup.fingerprint.fingerprinter import (
    Fingerprint,
    Fingerprinter,
    fingerprint_features,
    fingerprint_html,
    fingerprint_response,
)
from scrapy_simdup.fingerprint.simhash import SimhashResult, hamming, simhash, simhash_many
from scrapy_simdup.index.memory import BPHSIndex, PSMIndex, flip_masks
from scrapy_simdup.index.verified import VerifiedIndex, VerifiedMatch
from scrapy_simdup.index.volatility import VolatilityModel
from scrapy_simdup.integration.config import SimdupConfig
from scrapy_simdup.merge import merge as merge_batches
from scrapy_simdup.storage.batchfile import read_batch
from scrapy_simdup.storage.batchwriter import BatchWriter

# Scrapy components, imported on first use (PEP 562) so that ``import
# scrapy_simdup`` stays light for code that only fingerprints.
_SCRAPY_NAMES = {
    "Addon": ".integration.addon",
    "SimdupDownloaderMiddleware": ".integration.middleware",
    "NearDuplicateResponse": ".integration.middleware",
    "NearDuplicateRequest": ".integration.urlrules",
    "SimdupPipeline": ".integration.pipeline",
    "NearDuplicateItem": ".integration.pipeline",
    "SimdupLogStats": ".integration.logstats",
}


def __getattr__(name):
    module = _SCRAPY_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
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
    "VerifiedIndex",
    "VerifiedMatch",
    "VolatilityModel",
    "CorruptIndexError",
    "SimdupError",
    "flip_masks",
    "SimdupConfig",
    "Fingerprint",
    "Fingerprinter",
    "SkippedPage",
    "fingerprint_features",
    "fingerprint_html",
    "fingerprint_response",
    "CorruptFileError",
    "BatchWriter",
    "read_batch",
    "merge_batches",
    "Addon",
    "SimdupDownloaderMiddleware",
    "NearDuplicateResponse",
    "NearDuplicateRequest",
    "SimdupPipeline",
    "NearDuplicateItem",
    "SimdupLogStats",
]
