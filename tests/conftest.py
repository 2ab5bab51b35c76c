import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.batch_pages import write_crawl
from tests.data_root import DATA_ROOT, PAGES_ROOT

# A real redis-server for the Redis backend tests (see tests/redis_server.py).
from tests.redis_server import aof_redis, private_redis, redis_server  # noqa: F401

# CI machines are shared and noisy: no deadlines, a fixed example budget.
settings.register_profile(
    "ci", max_examples=200, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The shared page data (``tests.data_root.DATA_ROOT``), for the tests that
    need the whole corpora; skips when it is missing (a fresh clone)."""
    if not DATA_ROOT.is_dir():
        pytest.skip(f"needs the whole shared data, not found in {DATA_ROOT} (set SIMDUP_DATA)")
    return DATA_ROOT


@pytest.fixture(scope="session")
def pages_root() -> Path:
    """Real pages: the shared data, or the sample committed under tests/data/sample."""
    return PAGES_ROOT


@pytest.fixture()
def crawl(tmp_path):
    """A SIMDUP_DIR of 60 pages in clusters of 3 near-duplicates, in 3 batch
    files (25, 25 and 10 pages)."""
    return write_crawl(tmp_path / "crawl")
