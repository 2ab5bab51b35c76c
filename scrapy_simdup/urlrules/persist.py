"""The rules' file in a crawl's directory: ``url-rules.json``.

Written atomically (:func:`~scrapy_simdup.storage.atomic.atomic_write_json`)
at every save; read at start-up. A damaged file is moved aside into a
``corrupt-<time>/`` subdirectory, like the other saved state, and the crawl
starts learning afresh (or, with ``on_error="stop"``, the
:class:`~scrapy_simdup.exceptions.CorruptFileError` is raised).
"""
from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from scrapy_simdup.exceptions import CorruptFileError
from scrapy_simdup.index.crawldir import move_state_aside
from scrapy_simdup.storage.atomic import atomic_write_json, read_json
from scrapy_simdup.urlrules.learner import UrlRuleLearner

__all__ = ["RULES_FILE", "load_rules", "save_rules", "read_rules", "forget_rules"]

logger = logging.getLogger("scrapy_simdup")

RULES_FILE = "url-rules.json"


def read_rules(directory, learner: UrlRuleLearner | None = None) -> UrlRuleLearner:
    """The rules saved in ``directory`` (a new learner when there are none);
    a CorruptFileError naming the file when it is damaged."""
    learner = learner if learner is not None else UrlRuleLearner()
    path = Path(directory) / RULES_FILE
    if not path.exists() and not path.is_symlink():
        return learner
    obj = read_json(path, "URL rules file")
    try:
        learner.load_json(obj)
    except ValueError as exc:
        raise CorruptFileError(path, str(exc)) from None
    return learner


def load_rules(learner: UrlRuleLearner, directory, on_error: str = "keep") -> tuple[int, bool]:
    """Restore ``learner``'s rules from ``directory``: (rules loaded, whether
    a damaged file was moved aside)."""
    try:
        read_rules(directory, learner)
    except CorruptFileError as exc:
        if on_error == "stop":
            raise
        moved = move_state_aside(Path(directory), [RULES_FILE])
        logger.error("Simdup: the saved URL rules are damaged: %s; moved aside (%s), "
                     "learning afresh", exc, ", ".join(moved))
        learner.rules.clear()
        learner.by_host.clear()
        return 0, True
    return len(learner.rules), False


def forget_rules(directory) -> bool:
    """Remove the rules saved in ``directory`` (``SIMDUP_RESET``); whether
    there was a file."""
    path = Path(directory) / RULES_FILE
    if not os.path.lexists(path):
        return False
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        os.unlink(path)
    return True


def save_rules(learner: UrlRuleLearner, directory) -> None:
    atomic_write_json(Path(directory) / RULES_FILE, learner.to_json())
