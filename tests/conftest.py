import os

from hypothesis import HealthCheck, settings

# CI machines are shared and noisy: no deadlines, a fixed example budget.
settings.register_profile(
    "ci", max_examples=200, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

# A real redis-server for the Redis backend tests (see tests/redis_server.py).
from redis_server import private_redis, redis_server  # noqa: E402,F401
