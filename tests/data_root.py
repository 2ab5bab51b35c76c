"""Where the tests find real pages.

``DATA_ROOT``: the shared page data (the large corpora the benchmarks read):
``SIMDUP_DATA`` if set, else the ``shared/data`` folder beside the checkout (in
the checkout's parent). A fresh clone has none: the tests that need the whole
corpora skip (the ``shared_data`` fixture).

``PAGES_ROOT``: where the tests that need *some* real pages read them: the
shared data when it is there, else ``SAMPLE_ROOT``, the few pages of each
corpus committed under ``tests/data/sample`` (same layout). ``FULL_DATA`` says
which.
"""
from __future__ import annotations

import os
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
SAMPLE_ROOT = CHECKOUT / "tests" / "data" / "sample"


def find_data_root() -> Path:
    env = os.environ.get("SIMDUP_DATA")
    return Path(env) if env else CHECKOUT.parent / "shared" / "data"


DATA_ROOT = find_data_root()
FULL_DATA = DATA_ROOT.is_dir()
PAGES_ROOT = DATA_ROOT if FULL_DATA else SAMPLE_ROOT


def every(records: list, step: int) -> list:
    """Every ``step``-th of ``records`` from the full data; all of the sample's."""
    return records[::step] if FULL_DATA else list(records)


def by_data(full, sample):
    """A test's figure for the full data, or for the sample."""
    return full if FULL_DATA else sample
