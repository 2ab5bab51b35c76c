"""``scrapy simdup merge|stats|rescore|report [DIR...]``.

The same as the ``simdup`` console script; without a DIR it uses the
project's ``SIMDUP_DIR`` (or ``JOBDIR/simdup``).
"""
from __future__ import annotations

import argparse
import os

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError
from scrapy.settings import SETTINGS_PRIORITIES

from scrapy_simdup.cli import add_merge_options, add_report_options, dispatch
from scrapy_simdup.integration.config import SimdupConfig, crawl_directory


class Command(ScrapyCommand):
    requires_project = False
    requires_crawler_process = False
    default_settings = {"LOG_ENABLED": False}

    def syntax(self) -> str:
        return "merge|stats|rescore|report [DIR...] [options]"

    def short_desc(self) -> str:
        return "Merge scrapy-simdup batch files and report near-duplicates (PSM batch mode)"

    def long_desc(self) -> str:
        return ("merge: match the pending batch files of every DIR (default: the SIMDUP_DIR "
                "setting) against the on-disk collection and append them; stats: what the "
                "directories and the collection hold; rescore: the pairs and clusters at "
                "another threshold without touching the collection; report -o FILE: one HTML "
                "page of what the crawls found. Same options as the `simdup` script.")

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        add_merge_options(parser)
        add_report_options(parser)

    #: the options each subcommand takes besides its DIRs (the script's parsers agree)
    _THRESHOLD = {"distance", "min_similarity", "probes", "recall", "batch_size", "no_verify",
                  "skip_damaged", "progress", "json"}
    TAKES = {"stats": {"collection", "json"},
             "rescore": _THRESHOLD | {"all", "exact", "pairs", "clusters", "no_revisits"},
             "report": _THRESHOLD | {"output", "title"}}

    @classmethod
    def _refuse_options(cls, command: str, opts: argparse.Namespace) -> None:
        """An option the subcommand does not take is an error, as with the script."""
        own = argparse.ArgumentParser(add_help=False)
        add_merge_options(own)
        add_report_options(own)
        takes = cls.TAKES.get(command)
        if takes is None:       # merge: every merge option
            takes = {a.dest for a in own._actions} - {"output", "title"}
        given = [action.option_strings[0] for action in own._actions
                 if action.dest not in takes
                 and getattr(opts, action.dest, action.default) != action.default]
        if given:
            raise UsageError(f"{', '.join(given)}: merge options, not for stats"
                             if command == "stats" else
                             f"{', '.join(given)}: not an option of {command}")
        if command == "report" and not opts.output:
            raise UsageError("report needs -o/--output FILE")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if not args or args[0] not in ("merge", "stats", "rescore", "report"):
            raise UsageError("expected a subcommand: merge, stats, rescore or report")
        opts.command = args[0]
        dirs = args[1:]
        unknown = [a for a in dirs if a.startswith("-")]
        if unknown:
            raise UsageError(f"unrecognized option(s): {' '.join(unknown)}")
        if not dirs:
            try:
                directory, _ = crawl_directory(self.settings)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
            if not directory:
                raise UsageError("no DIR given and the SIMDUP_DIR setting is not set")
            dirs = [os.fspath(directory)]
        opts.dirs = dirs
        self._refuse_options(args[0], opts)
        if args[0] != "stats" and self.settings:
            # like `simdup merge`, the distance the crawls recorded wins; the
            # project's SIMDUP_DISTANCE is the fallback, `-s SIMDUP_DISTANCE=H`
            # an override like --distance (a bad value: the settings' error);
            # SIMDUP_MIN_SIMILARITY likewise for --min-similarity
            try:
                config = SimdupConfig.from_settings(self.settings)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
            for setting, option, value in (("SIMDUP_DISTANCE", "distance", config.distance),
                                           ("SIMDUP_MIN_SIMILARITY", "min_similarity",
                                            config.min_similarity)):
                if getattr(opts, option, None) is not None \
                        or self.settings.get(setting) is None:
                    continue
                if self.settings.getpriority(setting) >= SETTINGS_PRIORITIES["cmdline"]:
                    setattr(opts, option, value)
                else:
                    setattr(opts, f"fallback_{option}", value)
        parser = argparse.ArgumentParser(prog=f"scrapy simdup {args[0]}")
        self.exitcode = dispatch(parser, opts)    # (it flushes stdout itself)
