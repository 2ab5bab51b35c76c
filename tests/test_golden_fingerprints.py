"""Fingerprints of the shared pages do not drift.

``tests/data/golden_fingerprints.json.gz`` holds, for every page of the shared
data sets (of which ``tests/data/sample`` holds a few) and five sets of
options, the fingerprint's value, the CRC-32 of its ``W`` vector and its
feature count (or the skip reason). Any change to parsing, extraction,
tokens, features, weights or the simhash that moves one of them fails here.
A change that is meant to move fingerprints (a new features
version) rewrites the file on purpose::

    python -m tests.test_golden_fingerprints /path/to/shared/data
"""
from __future__ import annotations

import gzip
import json
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from scrapy_simdup import Fingerprinter, SkippedPage
from tests.data_root import FULL_DATA, every

GOLDEN = Path(__file__).parent / "data" / "golden_fingerprints.json.gz"

# options name -> Fingerprinter options; every page for the default, every
# fourth for the others (the test stays a few seconds long)
OPTIONS = {
    "default": {},
    "shingles-visible": {"features": "shingles", "extract": "visible", "shingle_size": 2},
    "spots-count": {"features": "spots", "weighting": "count"},
    "structure-binary": {"features": "structure+shingles", "weighting": "binary"},
    "bs4": {"parser": "bs4"},
}
EVERY = {"default": 1}


def shared_pages(data: Path) -> list[Path]:
    pages = sorted((data / "readability-test-pages" / "pages").glob("*/source.html"))
    for sub in ("article-extraction-benchmark/html", "trafilatura-cache/pages",
                "spotsigs-dev", "distractors-dragnet"):
        pages += sorted(p for p in (data / sub).rglob("*") if p.is_file())
    return pages


def fingerprint_record(fingerprinter: Fingerprinter, path: Path):
    raw = path.read_bytes()
    if path.suffix == ".gz":
        raw = gzip.decompress(raw)
    try:
        fp = fingerprinter.fingerprint_html(raw)
    except SkippedPage as exc:
        return exc.reason
    return [f"{fp.value:016x}", zlib.crc32(np.ascontiguousarray(fp.W).tobytes()), fp.n_features]


def load_golden() -> dict:
    with gzip.open(GOLDEN, "rt") as fh:
        return json.load(fh)


@pytest.mark.parametrize("name", list(OPTIONS))
def test_shared_pages_keep_their_fingerprints(name, pages_root):
    """Every page of the shared data (every fourth but for the default
    options), or every page of the tests' sample of it (a fresh clone)."""
    golden = load_golden()[name]
    assert golden["options"] == OPTIONS[name]
    pages = shared_pages(pages_root)
    keys = {str(p.relative_to(pages_root)) for p in pages}
    if FULL_DATA:
        assert keys == set(golden["pages"])
    else:
        assert len(pages) > 150 and keys <= set(golden["pages"])
    fingerprinter = Fingerprinter(**OPTIONS[name])
    drifted = []
    for path in every(pages, EVERY.get(name, 4)):
        key = str(path.relative_to(pages_root))
        got = fingerprint_record(fingerprinter, path)
        if got != golden["pages"][key]:
            drifted.append((key, golden["pages"][key], got))
    assert drifted == [], f"{len(drifted)} fingerprints changed, e.g. {drifted[:3]}"


def write_golden(data: Path) -> None:
    pages = shared_pages(data)
    out = {}
    for name, options in OPTIONS.items():
        fingerprinter = Fingerprinter(**options)
        out[name] = {"options": options,
                     "pages": {str(p.relative_to(data)): fingerprint_record(fingerprinter, p)
                               for p in pages}}
    with gzip.open(GOLDEN, "wt") as fh:
        json.dump(out, fh, sort_keys=True, separators=(",", ":"))


if __name__ == "__main__":
    write_golden(Path(sys.argv[1]))
