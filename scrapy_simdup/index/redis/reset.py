"""Starting afresh on Redis (``SIMDUP_RESET``): delete an index's keys.

One function, called before the index is opened, so that the layout of the
store can change without touching the crawl's side of it.
"""
from __future__ import annotations

from scrapy_simdup.exceptions import IndexUnavailableError
from scrapy_simdup.index.redis.log import CONNECTION_DEFAULTS, _redis, safe_url, stored_size

__all__ = ["reset_redis_index"]


def reset_redis_index(url: str, key_prefix: str, params: dict | None = None,
                      keep: tuple[str, ...] = ()) -> tuple[int, int]:
    """Delete every key under ``key_prefix + ":"`` at ``url`` (SCAN, then
    UNLINK in batches), but those under ``key_prefix + ":" + k + ":"`` for
    ``k`` in ``keep`` (another namespace's index). Returns ``(fingerprints,
    keys)``: the index size before (of this layout or an older one) and the
    keys removed.
    Redis unreachable: :class:`IndexUnavailableError` naming the URL."""
    redis = _redis()
    options = {**CONNECTION_DEFAULTS, **(params or {})}
    kept = tuple(f"{key_prefix}:{k}:".encode() for k in keep)
    removed = 0
    try:
        client = redis.Redis.from_url(url, **options)
        try:
            fingerprints = stored_size(client, key_prefix)
            batch = []
            for key in client.scan_iter(match=f"{key_prefix}:*", count=1000):
                key = key.encode() if isinstance(key, str) else key
                if key.startswith(kept):
                    continue
                batch.append(key)
                if len(batch) >= 1000:
                    removed += client.unlink(*batch)
                    batch = []
            if batch:
                removed += client.unlink(*batch)
        finally:
            client.close()
    except redis.RedisError as exc:
        raise IndexUnavailableError(f"cannot reset the index at {safe_url(url)}: {exc}") from exc
    return fingerprints, removed
