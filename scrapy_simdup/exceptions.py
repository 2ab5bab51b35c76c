"""Every error scrapy-simdup raises on purpose.

One base, :class:`SimdupError`, so that ``except SimdupError`` catches them
all; each also derives from the built-in exception a caller would otherwise
expect (``ValueError`` for bad data, ``OSError`` for a failed write,
``ConnectionError`` for an unreachable shared index). Messages name the file
or value at fault, never a Scrapy setting: the Scrapy integration maps them to
the setting a user can change.
"""
from __future__ import annotations

__all__ = ["SimdupError", "CorruptFileError", "CorruptIndexError", "DirectoryBusyError",
           "BatchWriteError", "IndexUnavailableError", "IndexConflictError", "ParameterError",
           "SkippedPage"]


class SimdupError(Exception):
    """Base class of the errors scrapy-simdup raises."""


class CorruptFileError(SimdupError, ValueError):
    """A scrapy-simdup file on disk is truncated, corrupt or of an unknown format
    (batch files, saved indexes, IDF tables, collections).

    ``path`` is the file, ``problem`` what is wrong with it; ``str(err)`` says both.
    """

    def __init__(self, path, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")

    def __reduce__(self):
        return (type(self), (self.path, self.problem))


class CorruptIndexError(CorruptFileError):
    """A saved :class:`~scrapy_simdup.PSMIndex` / :class:`~scrapy_simdup.BPHSIndex`
    file is truncated, corrupt, or not an index file."""


class DirectoryBusyError(SimdupError, ValueError):
    """Another process holds the lock of a directory; ``holder`` says which."""

    def __init__(self, message: str, holder: str) -> None:
        super().__init__(message)
        self.holder = holder

    def __reduce__(self):
        return (type(self), (self.args[0], self.holder))


class BatchWriteError(SimdupError, OSError):
    """A batch file could not be written; its records are still in memory."""


class ParameterError(SimdupError, ValueError):
    """A value given to a backend or store cannot be used, or does not match
    what the store already holds. ``parameter`` names the argument at fault
    (``"url"``, ``"key_prefix"``, ``"header_bits"``, ``"params"``,
    ``"distance"``, ``"max_probes"``, ``"fingerprint"``); the message names
    the value."""

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(message)
        self.parameter = parameter

    def __reduce__(self):
        return (type(self), (self.parameter, self.args[0]))


class IndexUnavailableError(SimdupError, ConnectionError):
    """A shared index (Redis) could not be reached or did not answer in time."""


class IndexConflictError(IndexUnavailableError):
    """The Redis index stopped being usable mid-crawl because of what is
    stored under its key prefix (keys of another type, an index re-created
    with other settings); ``parameter`` names the argument concerned, as for
    :class:`ParameterError`."""

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(message)
        self.parameter = parameter

    def __reduce__(self):
        return (type(self), (self.parameter, self.args[0]))


class SkippedPage(SimdupError, ValueError):
    """A page that gets no fingerprint; ``reason`` is a short stats slug.

    Reasons: ``empty`` (no text at all), ``too_few_features`` (fewer distinct
    features than ``min_features``), ``binary`` (bytes that are not text),
    ``not_html`` (a non-HTML response), ``too_large`` (above ``max_bytes`` with
    ``on_too_large="skip"``), ``parse_error``, ``decode_error`` (unknown
    encoding name), ``too_deep`` (lxml stopped at its nesting depth limit
    before the page's text).
    """

    def __init__(self, reason: str, detail: str = ""):
        self.reason = reason
        self.detail = detail
        super().__init__(f"page skipped ({reason})" + (f": {detail}" if detail else ""))

    def __reduce__(self):
        return (SkippedPage, (self.reason, self.detail))
