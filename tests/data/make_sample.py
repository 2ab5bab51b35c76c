"""Rebuild ``tests/data/sample`` from the shared data: the few pages the tests
run on when the large corpora are not there (a fresh clone).

    python tests/data/make_sample.py /path/to/shared/data

The sample keeps each corpus's layout and licence or README file, so the same
loaders read it. It holds the first pages of each corpus in the order the tests
take them (sorted names), so that a test picking "the first N" picks the same
pages from the sample as from the full data where it can.
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

SAMPLE = Path(__file__).resolve().parent / "sample"

AEB_HTML = 24        # pages with their HTML (ground-truth.json is whole: tests build pages from its text)
READABILITY = ["001", "base-url", "daringfireball-1", "hidden-nodes", "missing-paragraphs",
               "mozilla-2", "rtl-1", "social-buttons", "table-style-attributes", "visibility-hidden"]
TRAFILATURA = ["boingboing.net.millenials.html", "computerbase.de.htc.html",
               "creativecommons.at.faircoin.html", "de.creativecommons.org.endlich.html",
               "pluralsight.com.python.html", "simplyscience.ch.erdoel.html",
               "telemedicus.info.rezension.html", "wikimediafoundation.org.turkey.html"]
SPOTSIGS = ["Adobe", "Brandy", "Caffeine", "DVDs", "Fibroids", "Morning", "Planned",
            "Sanitation", "Shooting2", "Tsunami", "Tsunami3"]
DISTRACTORS = 40
CORPORA = ("article-extraction-benchmark", "readability-test-pages", "trafilatura-cache",
           "spotsigs-dev", "distractors-dragnet")


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)


def build(data: Path) -> None:
    for corpus in CORPORA:          # the sample's README.md stays
        shutil.rmtree(SAMPLE / corpus, ignore_errors=True)
    aeb = data / "article-extraction-benchmark"
    out = SAMPLE / "article-extraction-benchmark"
    keys = sorted(json.loads((aeb / "ground-truth.json").read_text("utf-8")))
    for key in keys[:AEB_HTML]:
        _copy(aeb / "html" / f"{key}.html.gz", out / "html" / f"{key}.html.gz")
    for name in ("ground-truth.json", "LICENSE", "README.rst"):
        _copy(aeb / name, out / name)

    rtp = data / "readability-test-pages"
    _copy(rtp / "LICENSE.md", SAMPLE / "readability-test-pages" / "LICENSE.md")
    for name in READABILITY:
        for f in sorted((rtp / "pages" / name).iterdir()):
            _copy(f, SAMPLE / "readability-test-pages" / "pages" / name / f.name)

    tfc = data / "trafilatura-cache"
    _copy(tfc / "LICENSE", SAMPLE / "trafilatura-cache" / "LICENSE")
    for name in TRAFILATURA:
        _copy(tfc / "pages" / name, SAMPLE / "trafilatura-cache" / "pages" / name)

    spot = data / "spotsigs-dev"
    _copy(spot / "README.md", SAMPLE / "spotsigs-dev" / "README.md")
    for story in SPOTSIGS:
        for f in sorted((spot / story).iterdir()):
            _copy(f, SAMPLE / "spotsigs-dev" / story / f.name)

    dis = data / "distractors-dragnet"
    _copy(dis / "README.md", SAMPLE / "distractors-dragnet" / "README.md")
    for f in sorted(dis.glob("*.gz"))[:DISTRACTORS]:
        _copy(f, SAMPLE / "distractors-dragnet" / f.name)


if __name__ == "__main__":
    build(Path(sys.argv[1]))
