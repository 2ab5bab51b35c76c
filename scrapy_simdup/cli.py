"""The ``simdup`` console script: ``simdup merge``, ``stats``, ``rescore`` and ``report``.

Also used by the Scrapy command (``scrapy simdup merge|stats|rescore|report``),
which only supplies ``SIMDUP_DIR`` from the project settings when no DIR is given.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from scrapy_simdup._limits import DEFAULT_DISTANCE, DEFAULT_MIN_SIMILARITY, MAX_DISTANCE
from scrapy_simdup.exceptions import CorruptFileError
from scrapy_simdup.merge import MAX_MERGE_PROBES, crawl_distance, merge, stats
from scrapy_simdup.merge.distributed import ClusterError
from scrapy_simdup.merge.output import check_output_path
from scrapy_simdup.merge.report import CLUSTER_DEFINITION, write_clusters, write_pairs
from scrapy_simdup.merge.rescore import rescore
from scrapy_simdup.merge.run import DEFAULT_CHUNK
from scrapy_simdup.report import gather, write_report
from scrapy_simdup.urlrules.learner import COUNTERS
from scrapy_simdup.urlrules.persist import read_rules

#: exit status when damaged batches were found: `stats` lists them, `merge
#: --skip-damaged` merged the other batches and left them pending
EXIT_DAMAGED = 3


def _int_in(text: str, lo: int, hi: int | None, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < lo or (hi is not None and value > hi):
        bounds = f"in {lo}..{hi}" if hi is not None else f">= {lo}"
        raise argparse.ArgumentTypeError(f"expected {what} {bounds}, got {value}")
    return value


def _positive_int(text: str) -> int:
    return _int_in(text, 1, None, "an integer")


def _recall(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}") from None
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {value}")
    return value


def _similarity(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {value}")
    return value


def _distance(text: str) -> int:
    return _int_in(text, 0, MAX_DISTANCE, "a distance")


def _probes_phrase(summary) -> str:
    """", K probes on T header bits, expected recall R" of a PSM merge."""
    if summary.probes is None:
        return ""
    recall = summary.expected_recall
    return (f", {summary.probes} probes on {summary.header_bits} header bits"
            + (f", expected recall {recall:.3f}" if recall is not None else ""))


def _probes(text: str) -> int:
    return _int_in(text, 0, MAX_MERGE_PROBES, "a probe count")


def add_merge_options(parser: argparse.ArgumentParser) -> None:
    """The options of ``simdup merge`` (shared with ``scrapy simdup merge``)."""
    parser.add_argument("--collection", metavar="PATH",
                       help="the collection directory (by default DIR/collection of the first DIR)")
    parser.add_argument("--distance", type=_distance, default=None, metavar="H",
                       help=f"search radius of each key: a page within H bits of another on "
                       f"either key is a candidate (by default the crawls' SIMDUP_DISTANCE "
                       f"as recorded in their batch files, else {DEFAULT_DISTANCE}; `scrapy "
                       f"simdup merge` falls back on the project's SIMDUP_DISTANCE, and "
                       f"takes `-s SIMDUP_DISTANCE=H` as this option)")
    parser.add_argument("--min-similarity", type=_similarity, default=None, metavar="S",
                       help=f"estimated Jaccard similarity (from the 32-byte sketches) a "
                       f"candidate needs to be a near-duplicate (default "
                       f"{DEFAULT_MIN_SIMILARITY}; 0: the keys alone decide)")
    probes = parser.add_mutually_exclusive_group()
    probes.add_argument("--probes", type=_probes, metavar="K",
                        help="flipped headers probed per fingerprint (by default enough for "
                        "98%% recall by the calibrated volatility model, else 20)")
    probes.add_argument("--recall", type=_recall, metavar="R",
                        help="target recall; the probe count comes from the calibrated "
                        "volatility model")
    search = parser.add_mutually_exclusive_group()
    search.add_argument("--all", action="store_true",
                       help="report every earlier near-duplicate (PSM-A), not just the first "
                       "(PSM-F)")
    search.add_argument("--exact", action="store_true",
                       help="exact search (BPHS batch mode): every pair within the distance; "
                       "the reference for recall, slower")
    parser.add_argument("--batch-size", type=_positive_int, default=DEFAULT_CHUNK, metavar="M",
                       help=f"fingerprints per in-memory batch and per collection chunk "
                       f"(memory is O(M); default {DEFAULT_CHUNK})")
    parser.add_argument("--pairs", metavar="FILE",
                       help="write the duplicate pairs found by this merge as JSON Lines "
                       "({url, duplicate_of, distance, similarity})")
    parser.add_argument("--clusters", metavar="FILE",
                       help="write the clusters of the whole collection as JSON Lines "
                       "({representative, size, urls}): " + CLUSTER_DEFINITION)
    parser.add_argument("--no-revisits", action="store_true",
                       help="leave the revisits (a URL matched by its own earlier crawl, "
                       '"revisit": true) out of the --pairs file')
    parser.add_argument("--no-verify", action="store_true",
                       help="skip the checksum verification of batch and collection data")
    parser.add_argument("--skip-damaged", action="store_true",
                       help="merge the other batches when some are damaged: the damaged ones "
                       "are named, left pending (merged once repaired) and listed in the "
                       f"summary; exit status {EXIT_DAMAGED}")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                       help="progress bar on stderr (by default when stderr is a terminal)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    dask = parser.add_mutually_exclusive_group()
    dask.add_argument("--workers", type=_positive_int, metavar="N",
                      help="scan the collection on a local Dask cluster of N worker processes "
                      '(needs pip install "scrapy-simdup[dask]")')
    dask.add_argument("--scheduler", metavar="ADDRESS",
                      help="scan the collection on the Dask cluster of this scheduler (e.g. "
                      "tcp://host:8786); the collection must be on storage every worker sees")



def add_report_options(parser: argparse.ArgumentParser) -> None:
    """The options of ``simdup report`` that ``simdup merge`` has not."""
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="the HTML file to write (one self-contained page)")
    parser.add_argument("--title", help="the report's title")


def _rescore_parser(sub, name: str, report: bool) -> None:
    """``simdup rescore`` / ``simdup report``: the merge's matching options,
    without a collection."""
    helps = {
        "rescore": ("the pairs and clusters of the crawls at another threshold, from their "
                    "batch files, without touching the collection",
                    "Match every batch file of every DIR as a fresh `simdup merge` would, at "
                    "--min-similarity/--distance, in a temporary collection that is removed "
                    "afterwards: the crawls' own collection is neither read nor changed, and "
                    "the pairs are those of a fresh merge."),
        "report": ("one self-contained HTML page of what the crawls found",
                   "Write one HTML file (no script, no external resource: it opens offline) "
                   "from the batch files and crawl records of every DIR: a summary per crawl, "
                   "the distribution of each page's best earlier match with the threshold "
                   "drawn, near-duplicates per host and URL pattern, the largest clusters. "
                   "The pairs are re-scored at --min-similarity/--distance (as `simdup "
                   "rescore`); the collection is not touched."),
    }
    short, description = helps[name]
    p = sub.add_parser(name, help=short, description=description)
    p.add_argument("dirs", nargs="+", metavar="DIR", help="a SIMDUP_DIR with batch files")
    merge_parser = argparse.ArgumentParser(add_help=False)
    add_merge_options(merge_parser)
    keep = {"distance", "min_similarity", "probes", "recall", "batch_size", "no_verify",
            "skip_damaged", "progress", "json"}
    if not report:
        keep |= {"all", "exact", "pairs", "clusters", "no_revisits"}
    groups: dict = {}
    for action in merge_parser._actions:
        if action.dest not in keep:
            continue
        container = p
        group = next((g for g in merge_parser._mutually_exclusive_groups
                      if action in g._group_actions), None)
        if group is not None:
            if id(group) not in groups:
                groups[id(group)] = p.add_mutually_exclusive_group()
            container = groups[id(group)]
        kwargs = {"dest": action.dest, "default": action.default, "help": action.help}
        if isinstance(action, (argparse._StoreTrueAction, argparse.BooleanOptionalAction)):
            kwargs["action"] = type(action)
        else:
            kwargs.update(type=action.type, metavar=action.metavar)
        names = action.option_strings
        if isinstance(action, argparse.BooleanOptionalAction):
            names = names[:1]       # (it adds the --no- form itself)
        container.add_argument(*names, **kwargs)
    if report:
        p.add_argument("-o", "--output", metavar="FILE", required=True,
                       help="the HTML file to write")
        p.add_argument("--title", help="the report's title")


def build_parser(prog: str = "simdup", dirs_required: bool = True) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description="Offline near-duplicate detection over scrapy-simdup batch files "
        "(PSM batch mode).")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    nargs = "+" if dirs_required else "*"

    merge = sub.add_parser(
        "merge", help="merge pending batches of one or more SIMDUP_DIRs into the collection "
        "and report the near-duplicates found",
        description="Merge the pending batch files of every DIR into one collection on disk "
        "(PSM batch mode: the collection is read in chunks, each pending batch is matched "
        "against every chunk, then sorted and appended).")
    merge.add_argument("dirs", nargs=nargs, metavar="DIR", help="a SIMDUP_DIR with batch files")
    add_merge_options(merge)

    stats = sub.add_parser(
        "stats", help="what the directories and the collection hold",
        description="What the directories and the collection hold. Every pending batch is "
        "checked as a merge would read it (lengths and checksums: one read of its files); "
        f"damaged batches are listed and make the exit status {EXIT_DAMAGED}.")
    stats.add_argument("dirs", nargs=nargs, metavar="DIR", help="a SIMDUP_DIR")
    stats.add_argument("--collection", metavar="PATH",
                       help="the collection directory (by default DIR/collection of the first DIR)")
    stats.add_argument("--json", action="store_true", help="print JSON")
    _rescore_parser(sub, "rescore", report=False)
    _rescore_parser(sub, "report", report=True)

    rules = sub.add_parser(
        "rules", help="the URL rules a crawl learned (SIMDUP_URL_RULES)",
        description="The URL rules saved in each DIR (url-rules.json): what each says, its "
        "support (clusters of pages that confirmed it), contradictions, precision, checks "
        "and the requests it saved (skipped before download), most requests saved first.")
    rules.add_argument("dirs", nargs=nargs, metavar="DIR", help="a SIMDUP_DIR")
    rules.add_argument("--all", action="store_true",
                       help="candidates too (rules not in use: too little support, or "
                       "contradicted)")
    rules.add_argument("--json", action="store_true", help="print JSON")
    return parser


def run_rules(args, out=None) -> int:
    out = out or sys.stdout
    listing = []
    for directory in args.dirs:
        learner = read_rules(directory)     # a damaged file: CorruptFileError (exit 2)
        rules = [r for r in learner.rules.values() if args.all or r.state != "candidate"]
        rules.sort(key=lambda r: (r.state != "active", -r.count("skipped"), r.id))
        listing.append((directory, rules))
    if args.json:
        out.write(json.dumps([{"dir": str(d), "rules": [
            {**r.as_json(), "description": r.describe(), "precision": r.precision,
             "counts": {name: r.count(name) for name in COUNTERS}} for r in rules]}
            for d, rules in listing], indent=1) + "\n")
        return 0
    for directory, rules in listing:
        out.write(f"{directory}: {sum(r.state == 'active' for r in rules)} rules in use, "
                  f"{sum(r.state == 'retracted' for r in rules)} retracted\n")
        if not rules:
            out.write("  (none)\n")
            continue
        out.write(f"  {'state':<10} {'support':>7} {'contra':>6} {'precision':>9} "
                  f"{'checks':>9} {'saved':>7}  rule\n")
        for r in rules:
            precision = r.precision
            checks = f"{r.count('checks') - r.count('failed_checks')}/{r.count('checks')}"
            out.write(f"  {r.state:<10} {r.count('support'):>7} {r.count('contradictions'):>6} "
                      f"{'-' if precision is None else f'{precision:.3f}':>9} {checks:>9} "
                      f"{r.count('skipped'):>7}  {r.describe()}\n")
    return 0


def _human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def _batches(n: int) -> str:
    return f"{n:,} batch" if n == 1 else f"{n:,} batches"


def _histogram_lines(hist: dict) -> list[str]:
    if not hist:
        return ["  (no duplicates)"]
    top = max(hist.values())
    return [f"  d={d}: {c:>10,} {'#' * max(1, round(40 * c / top))}" for d, c in
            sorted(hist.items(), key=lambda kv: int(kv[0]))]


def _threshold(args) -> None:
    """Fill in ``args.distance`` and ``args.min_similarity`` when not given."""
    if args.distance is None:   # the crawls' own SIMDUP_DISTANCE, as recorded with them
        args.distance = crawl_distance(args.dirs)
        if args.distance is None:   # (`scrapy simdup merge`: the project's setting)
            fallback = getattr(args, "fallback_distance", None)
            args.distance = DEFAULT_DISTANCE if fallback is None else fallback
    if args.min_similarity is None:
        fallback = getattr(args, "fallback_min_similarity", None)
        args.min_similarity = DEFAULT_MIN_SIMILARITY if fallback is None else fallback


def run_merge(args, out=None) -> int:

    out = out or sys.stdout     # (the one of the moment: a caller may have replaced it)
    _threshold(args)
    summary = merge(args.dirs, args.collection, distance=args.distance,
                    min_similarity=args.min_similarity, probes=args.probes,
                    recall=args.recall,
                    first=not args.all, exact=args.exact, chunk_size=args.batch_size,
                    pairs_out=args.pairs, clusters_out=args.clusters, progress=args.progress,
                    revisits=not getattr(args, "no_revisits", False),
                    verify=not args.no_verify, skip_damaged=args.skip_damaged,
                    workers=getattr(args, "workers", None),
                    scheduler=getattr(args, "scheduler", None))
    info = summary.as_dict()
    code = EXIT_DAMAGED if summary.damaged else 0
    if args.json:
        out.write(json.dumps(info, indent=1) + "\n")
        return code
    out.write(f"simdup merge ({summary.method}, distance {summary.distance}, "
              f"min similarity {summary.min_similarity:g}"
              + _probes_phrase(summary)
              + (f", {summary.cluster}" if summary.cluster else "") + ")\n")
    out.write(f"  batches merged:      {summary.batches:,}\n")
    out.write(f"  fingerprints merged: {summary.fingerprints:,}\n")
    out.write(f"  collection:          {summary.collection_before:,} -> "
              f"{summary.collection_after:,}\n")
    out.write(f"  duplicate pairs:     {summary.pairs:,} ({summary.duplicates:,} fingerprints "
              f"with an earlier near-duplicate)\n")
    out.write(f"  time:                {summary.seconds:.2f} s"
              + (f" ({summary.throughput:,.0f} fingerprints/s)\n" if summary.seconds > 0 else "\n"))
    out.write("  distance histogram:\n")
    for line in _histogram_lines(summary.distance_histogram):
        out.write(line + "\n")
    for path in summary.skipped_unfinished:
        out.write(f"  skipped unfinished batch (no header, interrupted flush): {path}\n")
    for entry in summary.damaged:
        out.write(f"  damaged batch, left pending: {entry['file']}: {entry['problem']}\n")
    if summary.damaged:
        out.write(f"  {_batches(len(summary.damaged))} damaged, not merged: repair them or "
                  f"move them aside (a later merge tries them again)\n")
    earlier = summary.earlier_unreported_pairs
    if args.pairs:
        out.write(f"  pairs written to {args.pairs}"
                  + (f" (with {earlier:,} pairs of an earlier merge that was interrupted "
                     f"before writing its --pairs file)" if earlier else "") + "\n")
    elif earlier:
        out.write(f"  note: {earlier:,} pairs of an earlier merge that was interrupted were "
                  f"never written to a --pairs file; the next merge with --pairs writes them\n")
    if args.clusters:
        out.write(f"  clusters written to {args.clusters}\n")
    return code


def run_stats(args, out=None) -> int:

    out = out or sys.stdout

    info = stats(args.dirs, args.collection)
    # a damaged index snapshot is a corrupt file (2), whatever the batches say
    code = 2 if any(d["index_damaged"] for d in info["directories"]) else \
        EXIT_DAMAGED if any(d["damaged"] for d in info["directories"]) else 0
    if args.json:
        out.write(json.dumps(info, indent=1) + "\n")
        return code
    for d in info["directories"]:
        out.write(f"{d['path']}\n")
        out.write(f"  batches:        {d['batches']:,} ({d['fingerprints']:,} fingerprints)\n")
        out.write(f"  pending:        {d['pending_batches']:,} batches "
                  f"({d['pending_fingerprints']:,} fingerprints not merged yet)\n")
        out.write(f"  size on disk:   {_human_bytes(d['bytes'])}\n")
        if "index" in d:
            idx = d["index"]
            if isinstance(idx.get("count"), int):
                out.write(f"  online index:   {idx['count']:,} fingerprints saved "
                          f"(search {idx.get('search', '?')}, distance "
                          f"{idx.get('distance', '?')})\n")
        if d["fingerprints"]:
            out.write(f"  near-duplicates the crawl found online: {d['online_duplicates']:,} "
                      f"of {d['fingerprints']:,} checked\n")
            for line in _histogram_lines(d["online_histogram"]):
                out.write("  " + line + "\n")
        for path in d["unfinished"]:
            out.write(f"  unfinished batch (interrupted flush, ignored): {path}\n")
        for problem in d["corrupt"]:
            out.write(f"  CORRUPT: {problem}\n")
        if d["damaged"]:
            out.write(f"  damaged:        {_batches(len(d['damaged']))}, not counted above (a "
                      f"merge refuses them; `merge --skip-damaged` merges the others)\n")
    c = info["collection"]
    # (a merge that failed before its first commit leaves an empty header)
    if c is None or not (c["count"] or c["runs"] or c["merged_batches"]):
        out.write("collection: none yet (run `simdup merge`)\n")
        return code
    out.write(f"collection {c['path']}\n")
    out.write(f"  fingerprints:   {c['count']:,} in {c['runs']:,} sorted runs "
              f"({c['merged_batches']:,} batches merged)\n")
    out.write(f"  size on disk:   {_human_bytes(c['bytes'])}\n")
    out.write(f"  duplicate pairs: {c['pairs']:,} ({c['duplicates']:,} duplicates, "
              f"{c['clusters']:,} clusters)\n")
    out.write(f"  ({CLUSTER_DEFINITION})\n")
    out.write("  distance histogram of found duplicates:\n")
    for line in _histogram_lines(c["distance_histogram"]):
        out.write(line + "\n")
    return code


def run_rescore(args, out=None) -> int:

    out = out or sys.stdout
    _threshold(args)
    for option, path in (("--pairs", args.pairs), ("--clusters", args.clusters)):
        check_output_path(path, option, None, args.dirs)
    res = rescore(args.dirs, distance=args.distance, min_similarity=args.min_similarity,
                  probes=args.probes, recall=args.recall, first=not args.all, exact=args.exact,
                  chunk_size=args.batch_size, verify=not args.no_verify,
                  skip_damaged=args.skip_damaged, progress=args.progress)
    summary = res.summary
    written = write_pairs(res.urls, res.pairs, args.pairs, not args.no_revisits) \
        if args.pairs else None
    n_clusters = write_clusters(res.urls, res.pairs, args.clusters) if args.clusters else None
    revisits = sum(1 for u, v in zip(res.urls.urls(res.pairs["id"]),
                                     res.urls.urls(res.pairs["duplicate_of"])) if u == v)
    info = {"method": summary.method, "distance": summary.distance,
            "min_similarity": summary.min_similarity, "probes": summary.probes,
            "header_bits": summary.header_bits, "expected_recall": summary.expected_recall,
            "batches": summary.batches, "fingerprints": summary.fingerprints,
            "pairs": summary.pairs, "duplicates": summary.duplicates, "revisits": revisits,
            "pairs_written": written, "clusters": n_clusters,
            "seconds": round(summary.seconds, 3), "damaged": summary.damaged}
    code = EXIT_DAMAGED if summary.damaged else 0
    if args.json:
        out.write(json.dumps(info, indent=1) + "\n")
        return code
    out.write(f"simdup rescore ({summary.method}, distance {summary.distance}, min similarity "
              f"{summary.min_similarity:g}"
              + _probes_phrase(summary)
              + "; the collection is not touched)\n")
    out.write(f"  batches:        {summary.batches:,} ({summary.fingerprints:,} fingerprints)\n")
    out.write(f"  pairs:          {summary.pairs:,} ({summary.duplicates:,} fingerprints with an "
              f"earlier near-duplicate, {revisits:,} of them revisits)\n")
    out.write(f"  time:           {summary.seconds:.2f} s\n")
    for entry in summary.damaged:
        out.write(f"  damaged batch, left out: {entry['file']}: {entry['problem']}\n")
    if args.pairs:
        out.write(f"  {written:,} pairs written to {args.pairs}"
                  + (" (revisits left out)" if args.no_revisits else "") + "\n")
    if args.clusters:
        out.write(f"  {n_clusters:,} clusters written to {args.clusters} ({CLUSTER_DEFINITION})\n")
    return code


def run_report(args, out=None) -> int:

    out = out or sys.stdout
    _threshold(args)
    check_output_path(args.output, "--output", None, args.dirs)
    data = gather(args.dirs, distance=args.distance, min_similarity=args.min_similarity,
                  probes=args.probes, recall=args.recall, chunk_size=args.batch_size,
                  verify=not args.no_verify, skip_damaged=args.skip_damaged,
                  title=args.title, progress=args.progress)
    write_report(data, args.output)
    t = data.totals
    if args.json:
        out.write(json.dumps({"output": args.output, **t, "clusters": data.n_clusters,
                              "seconds": round(data.seconds, 3)}, indent=1) + "\n")
    else:
        out.write(f"simdup report: {t['checked']:,} pages checked, {t['near_duplicates']:,} "
                  f"near-duplicates and {t['revisits']:,} revisits at distance {args.distance}, "
                  f"min similarity {args.min_similarity:g}; {data.n_clusters:,} clusters; "
                  f"written to {args.output} in {data.seconds:.1f} s\n")
    return EXIT_DAMAGED if any("damaged batch" in n for n in data.notes) else 0


RUNS = {"merge": run_merge, "stats": run_stats, "rescore": run_rescore, "report": run_report,
        "rules": run_rules}


def main(argv=None, prog: str = "simdup") -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    return dispatch(parser, args)


def dispatch(parser: argparse.ArgumentParser, args) -> int:
    try:
        code = RUNS[args.command](args)
        sys.stdout.flush()      # a closed pipe shows here, not at the interpreter's exit
        return code
    except BrokenPipeError:
        # the reader went away (`simdup stats DIR | head -1`): stop quietly,
        # like a tool killed by SIGPIPE; stdout goes to /dev/null so that
        # the interpreter's final flush does not fail again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 141
    except CorruptFileError as exc:
        sys.stderr.write(f"{parser.prog}: error: corrupt or unreadable file: {exc}\n")
        return 2
    except (ValueError, OSError, ClusterError) as exc:
        sys.stderr.write(f"{parser.prog}: error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write(f"\n{parser.prog}: interrupted (the collection is unchanged since "
                         "the last completed batch)\n")
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
