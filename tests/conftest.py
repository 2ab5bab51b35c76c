import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

from scrapy_simdup import simhash
from scrapy_simdup.storage.batchwriter import BatchWriter
from tests.data_root import DATA_ROOT

# A real redis-server for the Redis backend tests (see tests/redis_server.py).
from tests.redis_server import private_redis, redis_server  # noqa: F401

# CI machines are shared and noisy: no deadlines, a fixed example budget.
settings.register_profile(
    "ci", max_examples=200, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The shared page data (``tests.data_root.DATA_ROOT``); skips when it is missing."""
    if not DATA_ROOT.is_dir():
        pytest.skip(f"shared data not found in {DATA_ROOT}")
    return DATA_ROOT


@pytest.fixture()
def crawl(tmp_path):
    """A SIMDUP_DIR of 60 pages in clusters of 3 near-duplicates, in 3 batch
    files (25, 25 and 10 pages)."""
    rng = np.random.default_rng(3)
    d = tmp_path / "crawl"
    with BatchWriter(d, batch_size=25) as w:
        for c in range(20):
            base = [f"w{int(x)}" for x in rng.integers(0, 10_000, 300)]
            for v in range(3):
                doc = list(base)
                doc[int(rng.integers(len(doc)))] = "changed"
                value, W = simhash(doc)
                w.append(value, W, f"https://example.com/{c}/{v}")
    return d
