"""SimdupPipeline: drop or tag near-duplicate items by their text fields."""
from __future__ import annotations

import itertools
import logging

from itemadapter import ItemAdapter
from scrapy.exceptions import DropItem

from scrapy_simdup.fingerprint.fingerprinter import has_text_features
from scrapy_simdup.integration.component import TAG_KEYS, SimdupComponent

__all__ = ["SimdupPipeline", "NearDuplicateItem"]

logger = logging.getLogger("scrapy_simdup")


class NearDuplicateItem(DropItem):
    """Raised for a dropped near-duplicate item (``SIMDUP_ACTION = "drop"``).

    Scrapy logs it at DEBUG, like a dropped near-duplicate response (every
    drop is counted in ``simdup/items/dropped``), instead of a WARNING line
    per duplicate. Attributes: ``key``, ``duplicate_of``, ``distance``,
    ``similarity`` and ``simhash``, as for a dropped response.
    """

    def __init__(self, key: str, duplicate_of: str, distance: int, simhash: int,
                 similarity: float | None = None) -> None:
        super().__init__(f"near-duplicate of {duplicate_of} (distance {distance}): {key}")
        self.log_level = "DEBUG"     # read by Scrapy's LogFormatter.dropped
        self.key = key
        self.duplicate_of = duplicate_of
        self.distance = distance
        self.similarity = similarity
        self.simhash = simhash


def _as_text(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (list, tuple)):
        parts = [t for t in map(_as_text, value) if t]
        return "\n".join(parts)
    return str(value)


class SimdupPipeline(SimdupComponent):
    """Fingerprints the text of ``SIMDUP_ITEM_FIELDS`` (joined) of every item.

    The item's key is its ``SIMDUP_ITEM_ID_FIELD`` (default ``url``) or, when
    missing, ``item-<n>``. Duplicates are dropped (``DropItem``) or, with
    ``SIMDUP_ACTION = "tag"``, get ``SIMDUP_TAG_FIELD`` (default ``simdup``)
    set to ``{"simhash", "duplicate_of", "distance"}``. An item whose key is
    the key of the stored match is a revisit (``SIMDUP_ON_REVISIT``). Stats:
    ``simdup/items/*``.

    An item that is not fingerprinted (no text in ``SIMDUP_ITEM_FIELDS``, a
    field that cannot be read) goes on unchanged. A tag field that already
    holds a value (the spider's own) is never replaced: the item goes on
    with it, counted in ``simdup/items/tag_field_in_use``, with one warning
    naming ``SIMDUP_TAG_FIELD``.
    """

    kind = "items"
    prefix = "simdup/items/"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._counter = itertools.count(1)
        self._warned_tag = False
        self._warned_in_use = False

    @classmethod
    def applies(cls, config) -> bool:
        features = config.feature_options.get("features")
        if features is not None and not has_text_features(features):
            # items are text: HTML structure features cannot describe them
            logger.warning("SimdupPipeline is off: SIMDUP_FEATURES = %r has no text features "
                           "for items (add 'shingles' or 'spots' to check items)", features)
            return False
        return True

    async def process_item(self, item, spider=None):
        if self.refused:     # the crawl is being stopped: no item goes through unchecked
            raise DropItem(f"scrapy-simdup refused to check items ({self.refused})")
        adapter = ItemAdapter(item)
        n = next(self._counter)
        key = None
        if self.config.item_id_field and adapter.get(self.config.item_id_field) is not None:
            try:
                key = str(adapter.get(self.config.item_id_field))
            except Exception:  # noqa: BLE001 (an id whose str() fails: the item keeps a number)
                key = None
        own_key = bool(key)     # item-<n> is no id: the same number in another crawl is not it
        key = key or f"item-{n}"
        try:
            texts = [_as_text(adapter.get(name)) for name in self.config.item_fields]
        except Exception:  # noqa: BLE001 (a field whose str() fails, a list holding itself)
            texts = None
        if texts is None:
            self.skip("unreadable_field", key)
            return item         # not fingerprinted: unchanged
        if not any(texts):
            self.skip("no_text", key)
            return item
        text = "\n".join(t for t in texts if t)
        verdict = await self.check(lambda: self.fingerprinter.fingerprint_text(text), key,
                                   own_key=own_key)
        if verdict.skipped is not None:     # too few features, ...: unchanged
            return item
        if verdict.error is not None and self.config.on_error == "stop":
            # counted and logged; the spider is being closed
            raise DropItem(f"scrapy-simdup could not check item {key} ({verdict.error}); "
                           f"SIMDUP_ON_ERROR=stop")
        match = verdict.match
        show = True     # the match goes into the tag
        if match is not None:
            if verdict.revisit:
                drop = self.config.on_revisit == "drop"
                show = self.config.on_revisit == "tag"
            else:
                drop = self.config.action == "drop"
            if drop:
                self.stats.inc_value(self.prefix + "dropped")
                self.log_drop("revisit" if verdict.revisit else "near-duplicate", key, match)
                raise NearDuplicateItem(key, match.duplicate_of, match.distance,
                                        verdict.simhash, match.similarity)
        if self.config.action == "tag" or (verdict.revisit and show):
            try:
                if self._in_use(adapter, item):
                    return item     # the spider's own value stays
                adapter[self.config.tag_field] = verdict.as_tag(with_match=show)
                if match is not None and not verdict.revisit:   # counted once the tag is on
                    self.stats.inc_value(self.prefix + "tagged")
            except (KeyError, AttributeError, TypeError) as exc:
                # no such field (scrapy.Item), a frozen dataclass or attrs
                # class: the item goes on untagged, counted
                self.stats.inc_value(self.prefix + "errors")
                if not self._warned_tag:
                    self._warned_tag = True
                    logger.warning("Cannot tag %s items with a %r field (%s: %s); declare a "
                                   "writable field or set SIMDUP_TAG_FIELD",
                                   type(item).__name__, self.config.tag_field,
                                   type(exc).__name__, exc,
                                   extra={"spider": self.crawler.spider})
        return item

    def _in_use(self, adapter, item) -> bool:
        """Whether the tag field already holds a value (the spider's: the
        pipeline tags an item once, on its way out). Counted; warned once
        per crawl, naming SIMDUP_TAG_FIELD."""
        try:
            existing = adapter.get(self.config.tag_field)
        except Exception:  # noqa: BLE001 (the assignment that follows reports it)
            return False
        if existing is None:
            return False
        self.stats.inc_value(self.prefix + "tag_field_in_use")
        if not self._warned_in_use:
            self._warned_in_use = True
            looks = (" (it looks like a page's meta['simdup'], copied by the spider)"
                     if isinstance(existing, dict) and set(existing) <= TAG_KEYS else "")
            logger.warning("The %s item field %r already holds a value%s: %s. scrapy-simdup "
                           "leaves it as it is and does not tag these items; set "
                           "SIMDUP_TAG_FIELD to another field name to get the items' verdict "
                           "(counted in simdup/items/tag_field_in_use; warned once per crawl)",
                           type(item).__name__, self.config.tag_field, looks,
                           _preview(existing), extra={"spider": self.crawler.spider})
        return True


def _preview(value) -> str:
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 (a value whose repr fails)
        text = f"a {type(value).__name__}"
    return text if len(text) <= 80 else text[:80] + "..."
