"""URL rules shared by a fleet of crawler processes through Redis.

One Redis hash, ``<prefix>:rules``, independent of the index's own keys: a
field ``<rule id>|<counter>`` per rule and counter, which every process
increments (``HINCRBY``) by what it counted since its last push, and a field
``<rule id>|retracted`` set by a process that retracted the rule, and
``<rule id>|active`` by one that put it in use (the others then use it on
the fleet's counts, without the evidence only that process saw). A
:meth:`RuleShare.sync` pushes this process's increments and reads the fleet's
totals back into the learner, so every process decides on the fleet's counts.
"""
from __future__ import annotations

from scrapy_simdup.urlrules.learner import COUNTERS, UrlRuleLearner

__all__ = ["RuleShare"]


class RuleShare:
    """``client``: a ``redis.asyncio.Redis``; ``key``: the hash's name."""

    def __init__(self, client, key: str) -> None:
        self.client = client
        self.key = key
        self.retracted_pushed: set[str] = set()
        self.active_pushed: set[str] = set()

    async def sync(self, learner: UrlRuleLearner) -> int:
        """Push the increments, read the totals; the number of fields pushed."""
        pipe = self.client.pipeline(transaction=False)
        pushed = []
        for rule in list(learner.rules.values()):
            for name in COUNTERS:
                delta = rule.own[name] - rule.pushed[name]
                if delta:
                    pipe.hincrby(self.key, f"{rule.id}|{name}", delta)
                    pushed.append((rule, name, rule.own[name]))
            if rule.state == "active" and rule.id not in self.active_pushed:
                pipe.hset(self.key, f"{rule.id}|active", 1)
                self.active_pushed.add(rule.id)
            if rule.state == "retracted" and rule.id not in self.retracted_pushed:
                pipe.hset(self.key, f"{rule.id}|retracted", 1)
                self.retracted_pushed.add(rule.id)
        pipe.hgetall(self.key)
        replies = await pipe.execute()
        for rule, name, value in pushed:
            rule.pushed[name] = value
        totals: dict[str, dict[str, int]] = {}
        retracted, active = [], []
        for field, value in replies[-1].items():
            field = field.decode() if isinstance(field, bytes) else field
            rule_id, _, name = field.rpartition("|")
            if name == "retracted":
                retracted.append(rule_id)
            elif name == "active":
                active.append(rule_id)
            elif name in COUNTERS:
                try:
                    totals.setdefault(rule_id, {})[name] = int(value)
                except ValueError:
                    continue
        learner.merge_fleet(totals, retracted, active)
        return len(pushed)
