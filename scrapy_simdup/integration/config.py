"""Every ``SIMDUP_*`` setting, parsed and checked once into a frozen dataclass.

Components call :meth:`SimdupConfig.from_crawler` in ``from_crawler``: the
settings are parsed once per crawler (warnings about them logged then), and
every component of the crawler gets the same config. A bad value raises
``ValueError`` naming the setting, at start-up. ``NotConfigured`` is raised by
the components (not here) and only means "turned off". Nothing below the
Scrapy integration reads settings: it gets the config's values.
"""
from __future__ import annotations

import json
import logging
import math
import os
import re
import weakref
from dataclasses import dataclass, field, fields
from typing import Any

from scrapy_simdup._limits import (
    BANDED_PROBES_PER_KEY,
    DEFAULT_BANDS,
    DEFAULT_BATCH_SIZE,
    DEFAULT_DISTANCE,
    DEFAULT_MIN_SIMILARITY,
    DEFAULT_PROBES_PER_KEY,
    MAX_BANDS,
    MAX_BATCH_SIZE,
    MAX_CALIBRATED_DISTANCE,
    MAX_DISTANCE,
    MAX_PROBES,
    MAX_RECALL_PROBES,
    MAX_REPLICA_PAGES,
    MIN_BATCH_SIZE,
    MIN_PROBES,
)
from scrapy_simdup.exceptions import ParameterError
from scrapy_simdup.fingerprint.fingerprinter import Fingerprinter
from scrapy_simdup.index.volatility import VolatilityModel

__all__ = ["SimdupConfig", "SETTINGS_DEFAULTS"]

logger = logging.getLogger(__name__)

#: each crawler's config (SimdupConfig.from_crawler), dropped with the crawler
_CONFIGS: weakref.WeakKeyDictionary[Any, SimdupConfig] = weakref.WeakKeyDictionary()

_ACTIONS = ("drop", "tag")
_SEARCHES = ("psm", "exact")
_ON_ERROR = ("keep", "stop")
_ON_RESET = ("stop", "reseed")
_ON_REVISIT = ("keep", "drop", "tag")
_INDEX_SCHEMES = ("redis://", "rediss://", "unix://")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}

#: Feature settings passed through to :class:`scrapy_simdup.Fingerprinter`
#: (setting name -> keyword argument). ``None`` means "the Fingerprinter's
#: default"; the Fingerprinter validates the values.
FEATURE_SETTINGS = {
    "SIMDUP_FEATURES": "features",
    "SIMDUP_SHINGLE_SIZE": "shingle_size",
    "SIMDUP_WEIGHTING": "weighting",
    "SIMDUP_EXTRACT": "extract",
    "SIMDUP_CONTENT_XPATH": "content_xpath",
    "SIMDUP_CONTENT_CSS": "content_css",
    "SIMDUP_MIN_FEATURES": "min_features",
    "SIMDUP_PARSER": "parser",
    "SIMDUP_MAX_BYTES": "max_bytes",
    "SIMDUP_ON_TOO_LARGE": "on_too_large",
    "SIMDUP_MAX_TOKENS": "max_tokens",
    "SIMDUP_IDF_PAGES": "idf_pages",
}


def crawl_directory(settings) -> tuple[str | None, bool]:
    """``SIMDUP_DIR``, else ``JOBDIR/simdup``, else None; and whether it came
    from ``JOBDIR``. Read alone by the ``scrapy simdup`` command, which must
    not fail on an unrelated bad setting."""
    directory = settings.get("SIMDUP_DIR") if settings is not None else None
    if directory is None or directory == "":
        jobdir = settings.get("JOBDIR") if settings is not None else None
        directory = os.path.join(jobdir, "simdup") if jobdir else None
        return directory, directory is not None
    if not isinstance(directory, (str, os.PathLike)):
        raise ValueError(f"SIMDUP_DIR must be a directory path, got {directory!r}")
    directory = os.fspath(directory)
    if "\x00" in str(directory):
        raise ValueError(f"SIMDUP_DIR must be a directory path, got {directory!r} "
                         f"(a NUL character)")
    return directory, False


def _bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        low = value.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
    raise ValueError(f"{name} must be a boolean (True/False, 1/0, 'true'/'false'), got {value!r}")


#: upper bound of the SIMDUP_* count settings (2**63 would skip every page)
_INT_SETTING_MAX = 1 << 40


def _log_interval(value) -> float:
    """SIMDUP_LOG_INTERVAL: 0 (no periodic line) or at least 0.1 s (1e-9
    would write a line per reactor turn)."""
    interval = _float("SIMDUP_LOG_INTERVAL", value, lo=0.0)
    if 0 < interval < 0.1:
        raise ValueError(f"SIMDUP_LOG_INTERVAL must be 0 (off) or at least 0.1 seconds, "
                         f"got {interval}")
    return interval


def _int(name: str, value: Any, lo: int | None = None, hi: int | None = None,
         optional: bool = False) -> int | None:
    if value is None or (optional and value == ""):
        if optional:
            return None
        raise ValueError(f"{name} must be an integer, got None")
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"{name} must be an integer, got {value!r}")
        value = int(value)
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise ValueError(f"{name} must be an integer, got {value!r}") from None
    if not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    if lo is not None and value < lo:
        raise ValueError(f"{name} must be >= {lo}, got {value}")
    if hi is not None and value > hi:
        raise ValueError(f"{name} must be <= {hi}, got {value}")
    return value


def _float(name: str, value: Any, lo: float | None = None, hi: float | None = None,
           lo_open: bool = False, optional: bool = False) -> float | None:
    if value is None or (optional and value == ""):
        if optional:
            return None
        raise ValueError(f"{name} must be a number, got None")
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a number, got {value!r}")
    try:
        number = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if lo is not None and (number <= lo if lo_open else number < lo):
        raise ValueError(f"{name} must be {'>' if lo_open else '>='} {lo}, got {number}")
    if hi is not None and number > hi:
        raise ValueError(f"{name} must be <= {hi}, got {number}")
    return number


def _choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value.strip().lower() not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value.strip().lower()


def _opt_str(name: str, value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {type(value).__name__} {value!r}")
    return value


def _str_list(name: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"{name} must be a non-empty list of field names, got {value!r}")
    for v in value:
        if not isinstance(v, str) or not v:
            raise ValueError(f"{name} must contain non-empty strings, got {v!r}")
    return tuple(value)


def _index(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} must be 'memory' or a redis://, rediss:// or unix:// URL, "
                         f"got {value!r}")
    value = value.strip()
    if value.lower() == "memory":
        return "memory"
    if value.lower().startswith(_INDEX_SCHEMES):
        _check_redis_url(name, value)
        return value
    raise ValueError(f"{name} must be 'memory' or a redis://, rediss:// or unix:// URL, "
                     f"got {value!r}")


#: the path of a redis:// URL: none, or the database number
_DB_PATH = re.compile(r"/?|/[0-9]+/?")


def _check_redis_url(name: str, url: str) -> None:
    """The database a Redis URL names must be a number >= 0 (the redis client
    silently takes db 0 for ``/abc``, reads ``/3/4`` as 34, takes -1), and
    it must not ask for decoded replies (see :func:`_redis_params`). The
    URL's password is not repeated in a message."""
    from urllib.parse import parse_qs, urlsplit  # noqa: PLC0415 (a Redis index only)

    parts = urlsplit(url)
    query = parse_qs(parts.query, keep_blank_values=True)
    db = query.get("db")
    if db is not None and not re.fullmatch(r"[0-9]+", db[0]):
        raise ValueError(f"{name}: the Redis database (db={db[0]!r} in the URL's query) must "
                         f"be a number >= 0")
    if parts.scheme.lower() != "unix" and db is None and not _DB_PATH.fullmatch(parts.path):
        raise ValueError(f"{name}: the Redis database is the number after the host "
                         f"(redis://host:6379/0), must be >= 0, got the path {parts.path!r}")
    if "decode_responses" in query and _truthy(query["decode_responses"][0]):
        raise ValueError(f"{name}: decode_responses in the URL's query must be off: "
                         f"{_DECODED_REPLIES}")


_DECODED_REPLIES = ("the index reads and writes binary values (packed buckets, sketches), "
                    "which replies decoded as text cannot carry")


def _truthy(value: Any) -> bool:
    """Whether a redis client option is on (a bool, or a string as the URL's
    query gives it: anything but false, 0, no, off, empty)."""
    if isinstance(value, str):
        return value.strip().lower() not in _FALSE
    return bool(value)


def _redis_params(name: str, value: Any) -> dict:
    """SIMDUP_REDIS_PARAMS: a dict (or JSON object string) of connection
    options; ``decode_responses`` refused: every look-up would fail."""
    params = _dict(name, value)
    if _truthy(params.get("decode_responses", False)):
        raise ValueError(f"{name}: decode_responses must be off (leave it out): "
                         f"{_DECODED_REPLIES}")
    return params


def _max_probes(name: str, value: Any) -> int | None:
    probes = _int(name, value, lo=MIN_PROBES, optional=True)
    if probes is not None and probes > MAX_PROBES:
        raise ValueError(f"{name} must be <= {MAX_PROBES:,} (2**30, every bucket of the "
                         f"largest index header: a larger budget probes no more), got {probes}")
    return probes


def _dict(name: str, value: Any) -> dict:
    if value is None:
        return {}
    if hasattr(value, "copy_to_dict"):  # a BaseSettings
        value = value.copy_to_dict()
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except json.JSONDecodeError as exc:
            raise ValueError(f"{name} must be a dict (or a JSON object string): {exc}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a dict, got {type(value).__name__} {value!r}")
    return dict(value)


#: Default of every setting (None: computed or left to the component).
SETTINGS_DEFAULTS: dict[str, Any] = {
    "SIMDUP_ENABLED": False,
    "SIMDUP_ACTION": "drop",
    "SIMDUP_DISTANCE": DEFAULT_DISTANCE,
    "SIMDUP_MIN_SIMILARITY": DEFAULT_MIN_SIMILARITY,
    "SIMDUP_RECALL": None,
    "SIMDUP_MAX_PROBES": None,
    "SIMDUP_BANDS": None,
    "SIMDUP_SEARCH": "psm",
    "SIMDUP_FEATURES": None,
    "SIMDUP_SHINGLE_SIZE": None,
    "SIMDUP_WEIGHTING": None,
    "SIMDUP_EXTRACT": None,
    "SIMDUP_CONTENT_XPATH": None,
    "SIMDUP_CONTENT_CSS": None,
    "SIMDUP_MIN_FEATURES": None,
    "SIMDUP_PARSER": None,
    "SIMDUP_MAX_BYTES": None,
    "SIMDUP_ON_TOO_LARGE": None,
    "SIMDUP_MAX_TOKENS": None,
    "SIMDUP_IDF_PAGES": None,
    "SIMDUP_ITEM_FIELDS": ("text",),
    "SIMDUP_ITEM_ID_FIELD": "url",
    "SIMDUP_TAG_FIELD": "simdup",
    "SIMDUP_INDEX": "memory",
    "SIMDUP_DIR": None,
    "SIMDUP_BATCH_SIZE": DEFAULT_BATCH_SIZE,
    "SIMDUP_REDIS_KEY": "simdup:%(spider)s",
    "SIMDUP_REDIS_PARAMS": {},
    "SIMDUP_REDIS_MAX_PAGES": None,
    "SIMDUP_REDIS_ON_RESET": "stop",
    "SIMDUP_ON_ERROR": "keep",
    "SIMDUP_ON_REVISIT": "keep",
    "SIMDUP_DROP_START_REQUESTS": False,
    "SIMDUP_LOG_INTERVAL": 60.0,
    "SIMDUP_DEBUG": False,
    "SIMDUP_RESET": False,
    "SIMDUP_URL_RULES": False,
    "SIMDUP_URL_RULES_CHECK": 0.05,
    "SIMDUP_URL_RULES_SUPPORT": 3,
    "SIMDUP_PATTERN_BUDGET": None,
}


#: settings of earlier versions that are ignored now, and why
_RETIRED = {
    "SIMDUP_REDIS_HEADER_BITS": "every process keeps a replica of the Redis index and searches "
                                "it as the memory index does",
}


@dataclass(frozen=True)
class SimdupConfig:
    """Typed, validated ``SIMDUP_*`` settings (see the README's "Settings")."""

    enabled: bool = False
    action: str = "drop"                  # "drop" | "tag"
    distance: int = DEFAULT_DISTANCE      # search radius h of each 64-bit key
    min_similarity: float = DEFAULT_MIN_SIMILARITY   # verification: estimated Jaccard
    recall: float | None = None           # PSM target recall in (0, 1] (calibrated radii)
    max_probes: int | None = None         # PSM probe budget per key (flip sets per query)
    bands: int = DEFAULT_BANDS            # sketch bands searched beside the keys
    search: str = "psm"                   # "psm" | "exact" (every flip set)
    #: keyword arguments for Fingerprinter (only the settings the user set)
    feature_options: dict = field(default_factory=dict)
    item_fields: tuple[str, ...] = ("text",)
    item_id_field: str | None = "url"
    tag_field: str = "simdup"
    index: str = "memory"                 # "memory" or a redis:// / rediss:// / unix:// URL
    dir: str | None = None                # persistence directory (None: no persistence)
    dir_from_jobdir: bool = False         # dir is JOBDIR/simdup (SIMDUP_DIR not set)
    batch_size: int = DEFAULT_BATCH_SIZE
    redis_key: str = "simdup:%(spider)s"
    redis_params: dict = field(default_factory=dict)
    redis_max_pages: int | None = None    # most pages a Redis index replica may hold
    redis_on_reset: str = "stop"          # "stop" | "reseed": the Redis index emptied under us
    on_error: str = "keep"                # "keep" | "stop"
    on_revisit: str = "keep"              # "keep" | "drop" | "tag": a match stored under the same key
    drop_start_requests: bool = False     # start requests may be dropped as near-duplicates
    log_interval: float = 60.0            # seconds; 0 disables the periodic line
    debug: bool = False
    reset: bool = False                   # clear the saved / shared index at start-up
    url_rules: bool = False               # learn URL rules and skip requests they match
    url_rules_check: float = 0.05         # share of rule hits fetched anyway and checked
    url_rules_support: int = 3            # confirmed pairs a rule needs before it is used
    pattern_budget: int | None = None     # pages per URL pattern before a trap is cut

    @classmethod
    def from_crawler(cls, crawler) -> SimdupConfig:
        """The crawler's config: parsed from ``crawler.settings`` on the first
        call (which logs the warnings about them), the same object after."""
        config = _CONFIGS.get(crawler)
        if config is None:
            config = _CONFIGS[crawler] = cls.from_settings(crawler.settings)
        return config

    @classmethod
    def from_settings(cls, settings) -> SimdupConfig:
        """Parse a Scrapy ``Settings`` (or a plain dict) into a new config,
        then log a warning for each setting that has no effect.

        Raises ``ValueError`` naming the first bad setting.
        """
        def get(name):
            value = settings.get(name, None) if settings is not None else None
            return SETTINGS_DEFAULTS[name] if value is None else value

        unknown = [k for k in (settings.keys() if hasattr(settings, "keys") else ())
                   if isinstance(k, str) and k.startswith("SIMDUP_")
                   and k not in SETTINGS_DEFAULTS and k not in _RETIRED]
        warnings = []   # logged once the config is built
        if unknown:  # most likely a typo: say so, but do not refuse to start
            warnings.append(f"Unknown setting(s) {', '.join(sorted(unknown))} ignored "
                            f"(scrapy-simdup knows: {', '.join(sorted(SETTINGS_DEFAULTS))})")

        recall = _float("SIMDUP_RECALL", get("SIMDUP_RECALL"), lo=0.0, hi=1.0,
                        lo_open=True, optional=True)
        max_probes = _max_probes("SIMDUP_MAX_PROBES", get("SIMDUP_MAX_PROBES"))
        if recall is not None and max_probes is not None:
            raise ValueError("SIMDUP_RECALL and SIMDUP_MAX_PROBES are exclusive: set only one "
                             "of them (a target recall, or a probe budget per lookup)")
        distance = _int("SIMDUP_DISTANCE", get("SIMDUP_DISTANCE"), lo=0, hi=MAX_DISTANCE)
        if recall is not None and distance > MAX_CALIBRATED_DISTANCE and \
                VolatilityModel.default().expected_recall(distance, 8, MAX_RECALL_PROBES) is None:
            raise ValueError(f"SIMDUP_RECALL is not calibrated at SIMDUP_DISTANCE = {distance}: "
                             f"set a probe budget per key with SIMDUP_MAX_PROBES instead")

        feature_options = {}
        for name, kwarg in FEATURE_SETTINGS.items():
            value = get(name)
            if value is None or value == "":
                continue
            if name in ("SIMDUP_SHINGLE_SIZE", "SIMDUP_MIN_FEATURES", "SIMDUP_MAX_BYTES",
                        "SIMDUP_MAX_TOKENS", "SIMDUP_IDF_PAGES"):
                value = _int(name, value, lo=1, hi=_INT_SETTING_MAX)
            elif name in ("SIMDUP_CONTENT_XPATH", "SIMDUP_CONTENT_CSS", "SIMDUP_EXTRACT",
                          "SIMDUP_PARSER", "SIMDUP_ON_TOO_LARGE", "SIMDUP_FEATURES",
                          "SIMDUP_WEIGHTING"):
                value = _opt_str(name, value)
            feature_options[kwarg] = value
        if "idf_pages" in feature_options and feature_options.get("weighting") != "idf":
            warnings.append("SIMDUP_IDF_PAGES has no effect without SIMDUP_WEIGHTING = 'idf'")
            del feature_options["idf_pages"]
        if "content_xpath" in feature_options and "content_css" in feature_options:
            raise ValueError("SIMDUP_CONTENT_XPATH and SIMDUP_CONTENT_CSS are exclusive: "
                             "set only one of them")

        item_id_field = get("SIMDUP_ITEM_ID_FIELD")
        if item_id_field is not None and (not isinstance(item_id_field, str)
                                          or not item_id_field):
            raise ValueError(f"SIMDUP_ITEM_ID_FIELD must be a field name, got {item_id_field!r}")
        tag_field = get("SIMDUP_TAG_FIELD")
        if not isinstance(tag_field, str) or not tag_field:
            raise ValueError(f"SIMDUP_TAG_FIELD must be a field name, got {tag_field!r}")

        redis_key = get("SIMDUP_REDIS_KEY")
        if not isinstance(redis_key, str) or not redis_key:
            raise ValueError(f"SIMDUP_REDIS_KEY must be a non-empty string, got {redis_key!r}")
        if "%" in redis_key.replace("%%", "").replace("%(spider)s", ""):
            raise ValueError(f"SIMDUP_REDIS_KEY may use only %(spider)s (and %% for a "
                             f"percent sign), got {redis_key!r}")

        # used by the Redis index only, checked here so a typo fails with any index
        redis_max_pages = get("SIMDUP_REDIS_MAX_PAGES")
        if redis_max_pages is not None:
            redis_max_pages = _int("SIMDUP_REDIS_MAX_PAGES", redis_max_pages, lo=1,
                                   hi=MAX_REPLICA_PAGES)
        for name, why in _RETIRED.items():
            if settings is not None and settings.get(name, None) is not None:
                warnings.append(f"{name} no longer has an effect: {why} (remove the setting)")
        index = _index("SIMDUP_INDEX", get("SIMDUP_INDEX"))
        if feature_options.get("weighting") == "idf" and index != "memory":
            raise ValueError("SIMDUP_WEIGHTING = 'idf' cannot be used with a shared Redis "
                             "SIMDUP_INDEX: each process would learn its own IDF table, and "
                             "their fingerprints could not be compared. Use 'logtf' (the "
                             "default) with Redis.")

        search = _choice("SIMDUP_SEARCH", get("SIMDUP_SEARCH"), _SEARCHES)
        if search == "exact" and (recall is not None or max_probes is not None):
            warnings.append(f"{'SIMDUP_RECALL' if recall is not None else 'SIMDUP_MAX_PROBES'} "
                            f"has no effect with SIMDUP_SEARCH = 'exact' (it finds every "
                            f"match within SIMDUP_DISTANCE)")

        min_similarity = _float("SIMDUP_MIN_SIMILARITY", get("SIMDUP_MIN_SIMILARITY"),
                                lo=0.0, hi=1.0)
        bands = _int("SIMDUP_BANDS", get("SIMDUP_BANDS"), lo=0, hi=MAX_BANDS, optional=True)
        if bands is None:       # the sketch's bands need the sketch test
            bands = DEFAULT_BANDS if min_similarity > 0 else 0
        elif bands and not min_similarity > 0:
            raise ValueError("SIMDUP_BANDS needs the sketch test: with SIMDUP_MIN_SIMILARITY = 0 "
                             "set SIMDUP_BANDS = 0 (or leave it unset)")

        directory, dir_from_jobdir = crawl_directory(settings)

        config = cls(
            enabled=_bool("SIMDUP_ENABLED", get("SIMDUP_ENABLED")),
            action=_choice("SIMDUP_ACTION", get("SIMDUP_ACTION"), _ACTIONS),
            distance=distance,
            min_similarity=min_similarity,
            recall=recall,
            max_probes=max_probes,
            bands=bands,
            search=search,
            feature_options=feature_options,
            item_fields=_str_list("SIMDUP_ITEM_FIELDS", get("SIMDUP_ITEM_FIELDS")),
            item_id_field=item_id_field,
            tag_field=tag_field,
            index=index,
            dir=directory,
            dir_from_jobdir=dir_from_jobdir,
            batch_size=_int("SIMDUP_BATCH_SIZE", get("SIMDUP_BATCH_SIZE"), lo=MIN_BATCH_SIZE,
                            hi=MAX_BATCH_SIZE),
            redis_key=redis_key,
            redis_params=_redis_params("SIMDUP_REDIS_PARAMS", get("SIMDUP_REDIS_PARAMS")),
            redis_max_pages=redis_max_pages,
            redis_on_reset=_choice("SIMDUP_REDIS_ON_RESET", get("SIMDUP_REDIS_ON_RESET"),
                                   _ON_RESET),
            on_error=_choice("SIMDUP_ON_ERROR", get("SIMDUP_ON_ERROR"), _ON_ERROR),
            on_revisit=_choice("SIMDUP_ON_REVISIT", get("SIMDUP_ON_REVISIT"), _ON_REVISIT),
            drop_start_requests=_bool("SIMDUP_DROP_START_REQUESTS",
                                      get("SIMDUP_DROP_START_REQUESTS")),
            log_interval=_log_interval(get("SIMDUP_LOG_INTERVAL")),
            debug=_bool("SIMDUP_DEBUG", get("SIMDUP_DEBUG")),
            reset=_bool("SIMDUP_RESET", get("SIMDUP_RESET")),
            url_rules=_bool("SIMDUP_URL_RULES", get("SIMDUP_URL_RULES")),
            url_rules_check=_float("SIMDUP_URL_RULES_CHECK", get("SIMDUP_URL_RULES_CHECK"),
                                   lo=0.0, hi=1.0),
            url_rules_support=_int("SIMDUP_URL_RULES_SUPPORT", get("SIMDUP_URL_RULES_SUPPORT"),
                                   lo=1, hi=_INT_SETTING_MAX),
            pattern_budget=_int("SIMDUP_PATTERN_BUDGET", get("SIMDUP_PATTERN_BUDGET"), lo=0,
                                hi=_INT_SETTING_MAX, optional=True) or None,   # 0: off
        )
        if config.enabled and feature_options:
            # the Fingerprinter checks the feature values: a bad one fails
            # here, named by its setting (make_fingerprinter)
            config.make_fingerprinter()
        for warning in warnings:
            logger.warning(warning)
        return config

    def make_fingerprinter(self, idf=None):
        """Build the :class:`scrapy_simdup.Fingerprinter` for these settings
        (``idf``: a saved IdfTable to go on with, for ``weighting="idf"``).

        The Fingerprinter validates its options; its ``ParameterError`` names
        the option, and is re-raised naming the ``SIMDUP_*`` setting.
        """
        try:
            return Fingerprinter(**self.feature_options, idf=idf)
        except ParameterError as exc:
            setting_of = {kwarg: name for name, kwarg in FEATURE_SETTINGS.items()}
            names = " / ".join(setting_of.get(p, p) for p in exc.parameter.split(","))
            raise ValueError(f"{names}: {exc}") from None

    @property
    def probes_per_key(self) -> int:
        """PSM probes per key and look-up: SIMDUP_MAX_PROBES, else the
        default for the bands (fewer with them: they find the loose pairs)."""
        if self.max_probes is not None:
            return self.max_probes
        return BANDED_PROBES_PER_KEY if self.bands else DEFAULT_PROBES_PER_KEY

    def redis_key_for(self, spider_name: str) -> str:
        return self.redis_key % {"spider": spider_name}

    @property
    def dir_setting(self) -> str:
        """Where ``dir`` comes from, for messages."""
        return "SIMDUP_DIR (JOBDIR/simdup)" if self.dir_from_jobdir else "SIMDUP_DIR"

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}
