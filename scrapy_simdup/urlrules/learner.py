"""URL rules learned from the crawl's own verdicts.

A *rule* says that one part of a URL does not change the page: a query
parameter (on one path template of a host, or on the whole host), a path
parameter such as ``;jsessionid=...``, a path segment such as ``print`` or
``amp``, or a host alias (``m.example.com`` serves what ``www.example.com``
serves). Query parameters are compared in sorted order, as Scrapy's request
fingerprint does: their order is never part of a page's identity.

Learning. Every page the index checked is *observed* with its cluster (the
kept page it duplicates, or itself when it was kept). A page confirmed as a
near-duplicate of another URL proposes the rules that would map one URL onto
the other (only when the two differ in one dimension: the host, up to three
query parameters, path parameters, or one path segment). Each rule keeps,
for the URLs of its host, the first URL met under each key the rule alone
produces; a later URL with the same key is a pair: *support* when the two
pages are in one cluster (each cluster counts once: the copies of one page
alone never make a rule), a *contradiction* when they are not. A new rule is
first replayed over the host's recent URLs, so that what was seen before it
counts too. A rule is used once it has ``min_support`` supporting pairs and
no contradiction; a parameter that changes the content (``?id=``,
``?page=``) meets contradictions at once and never is. Once in use, a rule's
hits are fetched anyway at the rate ``check`` (chosen by a hash of the URL):
a checked page that is not in the predicted cluster is a contradiction, and
a rule whose precision ``support / (support + contradictions)`` falls below
``min_precision`` is *retracted* for good.

Applying. :meth:`UrlRuleLearner.lookup` rewrites a URL with the rules in use
on its host and looks the result up among the URLs checked so far, rewritten
the same way: a hit names the kept page and the rules that made the two
URLs meet.

Memory is bounded per host (checked URLs, recent URLs, candidate rules, keys
per rule) and in the number of hosts followed (least recently used first).
"""
from __future__ import annotations

import functools
import re
import zlib
from collections import OrderedDict, deque
from typing import NamedTuple
from urllib.parse import urlsplit

__all__ = ["ParsedUrl", "Rule", "RuleHit", "UrlRuleLearner", "parse_url", "template",
           "FORMAT", "VERSION"]

FORMAT = "simdup-url-rules"
VERSION = 1

KINDS = ("param", "pathparam", "segment", "host")
STATES = ("candidate", "active", "retracted")
#: the counters of a rule: support, contradictions, checks, failed checks, skipped requests
COUNTERS = ("support", "contradictions", "checks", "failed_checks", "skipped")

_DIGITS = re.compile(r"\d+")
#: query parameters a confirmed pair may differ in for the pair to propose rules
_MAX_PARAMS_PER_PAIR = 3


class ParsedUrl(NamedTuple):
    """A URL as the rules see it: ``scheme://netloc`` (lower case), the path
    segments (each ``(name, path parameters)``) and the sorted query."""

    host: str
    segments: tuple
    query: tuple


# A small cache: a crawl parses a page's URL before its download and again
# after its check, a few dozen pages later. Each entry is two objects the
# garbage collector tracks, and a crawl's process runs a full collection
# every few hundred pages, each visiting every tracked object: a larger
# cache costs more in those than it saves in parsing.
@functools.lru_cache(maxsize=512)
def parse_url(url: str) -> ParsedUrl | None:
    """The parts of ``url``; None for a URL without scheme or host (cached)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if not parts.scheme or not parts.netloc:
        return None
    segments = []
    for segment in (parts.path or "/").split("/")[1:]:
        name, *params = segment.split(";")
        segments.append((name, tuple(params)))
    query = tuple(sorted(tuple(p.split("=", 1)) if "=" in p else (p, "")
                         for p in parts.query.split("&") if p))
    return ParsedUrl(f"{parts.scheme.lower()}://{parts.netloc.lower()}", tuple(segments), query)


def template(segments) -> str:
    """The path template a query-parameter rule is scoped to: the first
    segment (digits generalised to ``N``), ``/*`` when more follow."""
    if not segments:
        return "/"
    first = _DIGITS.sub("N", segments[0][0])
    return "/" + first + ("/*" if len(segments) > 1 else "")


def render(host: str, segments, query) -> str:
    path = "/".join(name + "".join(";" + p for p in params) for name, params in segments)
    return f"{host}/{path}" + ("?" + "&".join(f"{k}={v}" for k, v in query) if query else "")


def _param_name(path_param: str) -> str:
    return path_param.split("=", 1)[0].lower()


class Rule:
    """One rule and its counts. ``kind``: ``param`` (``arg`` a query
    parameter, ``scope`` a path template or ``*`` for the whole host),
    ``pathparam`` (``arg`` a path parameter name), ``segment`` (``arg`` a
    path segment) or ``host`` (``arg`` the host the rule's host is an alias
    of). Counts are this process's (``own``) plus, when shared, the fleet's
    (``fleet``, less what this process already ``pushed`` into it)."""

    __slots__ = ("kind", "host", "scope", "arg", "state", "own", "pushed", "fleet", "groups",
                 "clusters", "values", "fleet_active")

    def __init__(self, kind: str, host: str, scope: str, arg: str, state: str = "candidate"):
        self.kind, self.host, self.scope, self.arg, self.state = kind, host, scope, arg, state
        self.own = dict.fromkeys(COUNTERS, 0)
        self.pushed = dict.fromkeys(COUNTERS, 0)
        self.fleet = dict.fromkeys(COUNTERS, 0)
        #: rule-alone key -> (first URL met under it, its cluster)
        self.groups: OrderedDict[str, tuple[str, str]] = OrderedDict()
        #: hashes of the clusters whose pairs supported the rule (support counts each once)
        self.clusters: set[int] = set()
        #: query parameter rules: the values each parameter had in supporting pairs (a few)
        self.values: dict[str, set[str]] = {}
        #: another process of the fleet put the rule in use
        self.fleet_active = False

    @property
    def id(self) -> str:
        return f"{self.kind} {self.host} {self.scope} {self.arg}"

    @classmethod
    def from_id(cls, rule_id: str) -> Rule:
        parts = rule_id.split(" ")
        if len(parts) != 4 or parts[0] not in KINDS or "://" not in parts[1]:
            raise ValueError(f"not a URL rule id: {rule_id!r}")
        return cls(*parts)

    def count(self, name: str) -> int:
        return self.fleet[name] + self.own[name] - self.pushed[name]

    @property
    def precision(self) -> float | None:
        s, c = self.count("support"), self.count("contradictions")
        return s / (s + c) if s + c else None

    def describe(self) -> str:
        if self.kind == "param":
            where = self.host + ("" if self.scope == "*" else self.scope)
            if "," in self.arg:
                return f"query parameters {self.arg.replace(',', '+')} on {where}"
            return f"query parameter {self.arg!r} on {where}"
        if self.kind == "pathparam":
            return f"path parameter ;{self.arg}= on {self.host}"
        if self.kind == "segment":
            return f"path segment {self.arg!r} on {self.host}"
        return f"host {self.host} = {self.arg}"

    def hosts(self) -> tuple[str, ...]:
        return (self.host, self.arg) if self.kind == "host" else (self.host,)

    def key(self, url: ParsedUrl) -> str | None:
        """``url`` rewritten by this rule alone, or None when the rule does
        not concern it."""
        host, segments, query = url
        if self.kind == "host":
            if host not in (self.host, self.arg):
                return None
            return render(self.arg, segments, query)
        if host != self.host:
            return None
        if self.kind == "param":
            if self.scope != "*" and template(segments) != self.scope:
                return None
            names = self.arg.split(",")
            return render(host, segments, tuple(kv for kv in query if kv[0] not in names))
        if self.kind == "pathparam":
            return render(host, tuple((n, tuple(p for p in ps if _param_name(p) != self.arg))
                                      for n, ps in segments), query)
        return render(host, _drop_segment(segments, self.arg) or segments, query)

    def as_json(self) -> dict:
        return {"kind": self.kind, "host": self.host, "scope": self.scope, "arg": self.arg,
                "state": self.state, "counts": dict(self.own), "pushed": dict(self.pushed)}


def _drop_segment(segments, name: str):
    """``segments`` without the first segment called ``name`` (None: none
    is, or it is the only one)."""
    if len(segments) < 2:
        return None
    for i, (segment, _params) in enumerate(segments):
        if segment == name:
            return segments[:i] + segments[i + 1:]
    return None


class RuleHit(NamedTuple):
    """A request a rule maps onto a URL checked before: the kept page it
    would duplicate, the URL it met, and the rules used."""

    duplicate_of: str
    matched_url: str
    rules: tuple


class _Host:
    """What the learner keeps per host (bounded)."""

    __slots__ = ("checked", "history", "map", "map_version")

    def __init__(self, history: int):
        self.checked: OrderedDict[str, str] = OrderedDict()   # URL -> its cluster
        self.history: deque = deque(maxlen=history)           # recent (URL, parsed)
        self.map: dict[str, tuple[str, tuple]] = {}           # rewritten key -> (URL, rules)
        self.map_version = -1


def diff_rules(dup: ParsedUrl, kept: ParsedUrl) -> list[tuple[str, str, str, str]]:
    """The rules ``(kind, host, scope, arg)`` that would map one URL of a
    confirmed pair onto the other, when the two differ in one dimension."""
    if dup.host != kept.host:
        if dup.segments == kept.segments and dup.query == kept.query:
            return [("host", dup.host, "*", kept.host)]
        return []
    host = dup.host
    if dup.segments == kept.segments:
        values_a: dict[str, list] = {}
        values_b: dict[str, list] = {}
        for k, v in dup.query:
            values_a.setdefault(k, []).append(v)
        for k, v in kept.query:
            values_b.setdefault(k, []).append(v)
        names = sorted(n for n in set(values_a) | set(values_b)
                       if values_a.get(n) != values_b.get(n))
        if not names or len(names) > _MAX_PARAMS_PER_PAIR:
            return []
        if any(" " in n or "," in n or not n for n in names):
            return []
        scope = template(dup.segments)
        if len(names) > 1:      # parameters that come together (utm_*): one rule too
            names = [*names, ",".join(names)]
        return [("param", host, s, n) for s in (scope, "*") for n in names]
    if dup.query != kept.query:
        return []
    names_a = tuple(n for n, _ in dup.segments)
    names_b = tuple(n for n, _ in kept.segments)
    if names_a == names_b:
        differing = set()
        for (_, pa), (_, pb) in zip(dup.segments, kept.segments):
            da = {_param_name(p): p for p in pa}
            db = {_param_name(p): p for p in pb}
            differing |= {n for n in set(da) | set(db) if da.get(n) != db.get(n)}
        if not differing or len(differing) > _MAX_PARAMS_PER_PAIR:
            return []
        return [("pathparam", host, "*", n) for n in sorted(differing) if n and " " not in n]
    longer, shorter = (dup, kept) if len(dup.segments) > len(kept.segments) else (kept, dup)
    if len(longer.segments) != len(shorter.segments) + 1:
        return []
    for i, (name, params) in enumerate(longer.segments):
        if not params and " " not in name and \
                longer.segments[:i] + longer.segments[i + 1:] == shorter.segments:
            return [("segment", host, "*", name)]
    return []


class UrlRuleLearner:
    """Learns URL rules from verdicts and applies them (see the module
    docstring). ``check``: the share of rule hits to fetch anyway."""

    def __init__(self, min_support: int = 3, min_precision: float = 0.95, check: float = 0.05,
                 max_hosts: int = 10_000, max_urls_per_host: int = 20_000,
                 max_rules_per_host: int = 64, keys_per_rule: int = 2048,
                 history: int = 256) -> None:
        self.min_support = min_support
        self.min_precision = min_precision
        self.check = check
        self.max_hosts = max_hosts
        self.max_urls_per_host = max_urls_per_host
        self.max_rules_per_host = max_rules_per_host
        self.keys_per_rule = keys_per_rule
        self.history = history
        self.rules: dict[str, Rule] = {}
        self.by_host: dict[str, dict[str, Rule]] = {}
        self.hosts: OrderedDict[str, _Host] = OrderedDict()
        self.version = 0
        self._aliases: tuple[int, dict] = (-1, {})
        #: ("learned" | "retracted", rule), drained by take_events()
        self.events: list[tuple[str, Rule]] = []

    # -- rules -----------------------------------------------------------------
    def _add_rule(self, rule: Rule) -> Rule:
        self.rules[rule.id] = rule
        for host in rule.hosts():
            self.by_host.setdefault(host, {})[rule.id] = rule
        return rule

    def _remove_rule(self, rule: Rule) -> None:
        self.rules.pop(rule.id, None)
        for host in rule.hosts():
            self.by_host.get(host, {}).pop(rule.id, None)

    def rule(self, rule_id: str) -> Rule:
        """The rule of ``rule_id``, created (a candidate) when unknown."""
        rule = self.rules.get(rule_id)
        return rule if rule is not None else self._add_rule(Rule.from_id(rule_id))

    def active(self) -> list[Rule]:
        return [r for r in self.rules.values() if r.state == "active"]

    def take_events(self) -> list[tuple[str, Rule]]:
        events, self.events = self.events, []
        return events

    def judge(self, rule: Rule) -> None:
        """Put a rule in use, or retract it, by its counts."""
        s, c = rule.count("support"), rule.count("contradictions")
        if rule.state == "candidate" and c == 0 and s >= self.min_support and \
                (rule.fleet_active or self._varied(rule)) and not self._blocked(rule):
            rule.state = "active"
        elif rule.state == "active" and ((c and s / (s + c) < self.min_precision)
                                         or self._blocked(rule)):
            rule.state = "retracted"
        else:
            return
        self.version += 1
        self.events.append(("learned" if rule.state == "active" else "retracted", rule))

    @staticmethod
    def _varied(rule: Rule) -> bool:
        """A query parameter rule says *any value*: its supporting pairs must
        have shown each parameter with two values at least (``?page=1`` the
        same as no ``page`` says nothing of ``?page=2``)."""
        if rule.kind != "param":
            return True
        return all(len(rule.values.get(name, ())) >= 2 for name in rule.arg.split(","))

    def _blocked(self, rule: Rule) -> bool:
        """A rule of several parameters is not used while one of them, alone,
        has met a contradiction."""
        if rule.kind != "param" or "," not in rule.arg:
            return False
        for name in rule.arg.split(","):
            for scope in {rule.scope, "*"}:
                single = self.rules.get(f"param {rule.host} {scope} {name}")
                if single is not None and single.count("contradictions"):
                    return True
        return False

    def retract(self, rule: Rule) -> None:
        if rule.state != "retracted":
            was_active = rule.state == "active"
            rule.state = "retracted"
            self.version += 1
            if was_active:
                self.events.append(("retracted", rule))

    # -- hosts -------------------------------------------------------------------
    def _host(self, host: str) -> _Host:
        state = self.hosts.get(host)
        if state is None:
            state = self.hosts[host] = _Host(self.history)
            if len(self.hosts) > self.max_hosts:
                self.hosts.popitem(last=False)
        else:
            self.hosts.move_to_end(host)
        return state

    def cluster(self, url: str) -> str:
        """The kept page ``url`` is in (itself when unknown)."""
        for _ in range(8):      # near-duplicates of near-duplicates
            parsed_host = _host_of(url)
            state = self.hosts.get(parsed_host) if parsed_host else None
            nxt = state.checked.get(url) if state is not None else None
            if nxt is None or nxt == url:
                return url
            url = nxt
        return url

    # -- applying ----------------------------------------------------------------
    def aliases(self) -> dict[str, tuple[str, ...]]:
        """Every host in an alias group (of the host rules in use) -> the
        group's hosts, the canonical one (the smallest) first."""
        if self._aliases[0] != self.version:
            parent: dict[str, str] = {}

            def find(h):
                while parent.get(h, h) != h:
                    h = parent[h]
                return h
            for rule in self.rules.values():
                if rule.kind == "host" and rule.state == "active":
                    a, b = find(rule.host), find(rule.arg)
                    if a != b:
                        parent[max(a, b)] = min(a, b)
            groups: dict[str, list[str]] = {}
            for h in parent:
                groups.setdefault(find(h), []).append(h)
            for root, members in groups.items():
                if root not in members:
                    members.append(root)
            self._aliases = (self.version, {h: tuple(sorted(members))
                                            for members in groups.values() for h in members})
        return self._aliases[1]

    def normalize(self, url: ParsedUrl) -> tuple[str, tuple]:
        """``url`` rewritten by every rule in use on its host (and on the
        hosts it is an alias of); the rules that changed it."""
        host, segments, query = url
        applied = []
        group = self.aliases().get(host, (host,))
        rules = [r for h in group for r in self.by_host.get(h, {}).values()
                 if r.state == "active"]
        if group[0] != host:
            host = group[0]
            applied += [r for r in rules if r.kind == "host" and url.host in (r.host, r.arg)][:1]
        rules = list({(r.kind, r.scope, r.arg): r for r in rules if r.kind != "host"}.values())
        path_params = {r.arg: r for r in rules if r.kind == "pathparam"}
        if path_params:
            new = []
            for name, params in segments:
                kept = []
                for p in params:
                    rule = path_params.get(_param_name(p))
                    if rule is None:
                        kept.append(p)
                    elif rule not in applied:
                        applied.append(rule)
                new.append((name, tuple(kept)))
            segments = tuple(new)
        for rule in rules:
            if rule.kind == "segment":
                dropped = _drop_segment(segments, rule.arg)
                if dropped is not None:
                    segments = dropped
                    applied.append(rule)
        scope = template(segments)
        params = {name: r for r in rules if r.kind == "param" and r.scope in ("*", scope)
                  for name in r.arg.split(",")}
        if params:
            kept_query = []
            for kv in query:
                rule = params.get(kv[0])
                if rule is None:
                    kept_query.append(kv)
                elif rule not in applied:
                    applied.append(rule)
            query = tuple(kept_query)
        return render(host, segments, query), tuple(applied)

    def _map(self, host: str) -> dict:
        state = self.hosts.get(host)
        if state is None:
            return {}
        if state.map_version != self.version:
            state.map = {}
            for url in state.checked:
                parsed = parse_url(url)
                if parsed is not None:
                    key, applied = self.normalize(parsed)
                    state.map.setdefault(key, (url, applied))
            state.map_version = self.version
        return state.map

    def lookup(self, url: str) -> RuleHit | None:
        """The page a rule in use says ``url`` duplicates, or None."""
        if not self.rules:
            return None
        parsed = parse_url(url)
        if parsed is None:
            return None
        key, applied = self.normalize(parsed)
        hosts = self.aliases().get(parsed.host, (parsed.host,))
        for host in hosts:
            entry = self._map(host).get(key)
            if entry is None:
                continue
            matched, matched_rules = entry
            if matched == url:
                return None         # the same URL: not a rule's doing
            rules = tuple(dict.fromkeys(applied + matched_rules))
            if not rules:
                return None
            return RuleHit(self.cluster(matched), matched, rules)
        return None

    def should_check(self, url: str) -> bool:
        """Whether a rule hit on ``url`` is fetched anyway (a fixed share of
        URLs, by a hash of the URL)."""
        return zlib.crc32(url.encode("utf-8", "surrogatepass")) < self.check * 2**32

    def skipped(self, hit: RuleHit) -> None:
        for rule in hit.rules:
            rule.own["skipped"] += 1

    # -- learning ------------------------------------------------------------------
    def observe(self, url: str, duplicate_of: str | None = None,
                checked: RuleHit | None = None) -> None:
        """A checked page: ``duplicate_of`` the page the index matched (None:
        kept). ``checked``: the rule hit this page was fetched to check."""
        parsed = parse_url(url)
        if parsed is None:
            return
        cluster = self.cluster(duplicate_of) if duplicate_of and duplicate_of != url else url
        state = self._host(parsed.host)
        state.checked[url] = cluster
        state.checked.move_to_end(url)
        if len(state.checked) > self.max_urls_per_host:
            state.checked.popitem(last=False)
            state.map_version = -1
        elif state.map_version == self.version:
            state.map.setdefault(*self._map_entry(parsed, url))
        skip = set()
        if checked is not None:
            ok = self.cluster(checked.duplicate_of) == cluster
            for rule in checked.rules:
                rule.own["checks"] += 1
                if ok:
                    self._support(rule, cluster)
                else:
                    rule.own["contradictions"] += 1
                    rule.own["failed_checks"] += 1
                skip.add(rule.id)
                self.judge(rule)
        if duplicate_of and duplicate_of != url:
            other = parse_url(duplicate_of)
            if other is not None:
                for spec in diff_rules(parsed, other):
                    rule_id = " ".join(spec)
                    if spec[0] == "host" and f"host {spec[3]} * {spec[1]}" in self.rules:
                        continue        # the alias the other way round is known
                    if rule_id not in self.rules and self._room_for_rule(parsed.host):
                        self._new_rule(Rule(*spec), other, duplicate_of)
        for rule in list(self.by_host.get(parsed.host, {}).values()):
            if rule.id not in skip and rule.state != "retracted":
                self._pair(rule, parsed, url, cluster)
        state.history.append((url, parsed))

    def _map_entry(self, parsed, url):
        key, applied = self.normalize(parsed)
        return key, (url, applied)

    def _room_for_rule(self, host: str) -> bool:
        rules = self.by_host.get(host, {})
        candidates = [r for r in rules.values() if r.state == "candidate"]
        if len(candidates) < self.max_rules_per_host:
            return True
        # the weakest candidate makes room: contradicted first, then the least supported
        weakest = min(candidates, key=lambda r: (-r.count("contradictions"), r.count("support")))
        self._remove_rule(weakest)
        return True

    def _new_rule(self, rule: Rule, other: ParsedUrl, other_url: str) -> None:
        self._add_rule(rule)
        # what was seen before the rule counts too
        for host in rule.hosts():
            state = self.hosts.get(host)
            if state is None:
                continue
            for url, parsed in list(state.history):
                self._pair(rule, parsed, url, self.cluster(url))
        key = rule.key(other)
        if key is not None and key not in rule.groups:
            rule.groups[key] = (other_url, self.cluster(other_url))

    def _pair(self, rule: Rule, parsed: ParsedUrl, url: str, cluster: str) -> None:
        key = rule.key(parsed)
        if key is None:
            return
        entry = rule.groups.get(key)
        if entry is None:
            rule.groups[key] = (url, cluster)
            if len(rule.groups) > self.keys_per_rule:
                rule.groups.popitem(last=False)
            return
        first, first_cluster = entry
        if first == url:
            return
        if self.cluster(first_cluster) == cluster:
            self._support(rule, cluster, (parsed, parse_url(first)))
        else:
            rule.own["contradictions"] += 1
            if rule.kind == "param" and "," not in rule.arg:
                for other in list(self.by_host.get(rule.host, {}).values()):
                    if other.kind == "param" and "," in other.arg and \
                            rule.arg in other.arg.split(","):
                        self.judge(other)
        self.judge(rule)

    def _support(self, rule: Rule, cluster: str, pair=()) -> None:
        """A pair in ``cluster`` confirms ``rule``: support counts clusters,
        not pairs, so that the copies of one page alone never make a rule."""
        if rule.kind == "param":
            names = rule.arg.split(",")
            for url in pair:
                for name, value in (url.query if url is not None else ()):
                    if name in names:
                        values = rule.values.setdefault(name, set())
                        if len(values) < 4:
                            values.add(value)
        mark = zlib.crc32(cluster.encode("utf-8", "surrogatepass"))
        if mark not in rule.clusters:
            if len(rule.clusters) < self.keys_per_rule:
                rule.clusters.add(mark)
            rule.own["support"] += 1

    # -- fleet and files -------------------------------------------------------------
    def merge_fleet(self, totals: dict[str, dict[str, int]], retracted=(), active=()) -> None:
        """The fleet's counts per rule id (what every process pushed), the
        rules a process retracted, and those a process put in use."""
        for rule_id, counts in totals.items():
            try:
                rule = self.rule(rule_id)
            except ValueError:
                continue
            for name in COUNTERS:
                rule.fleet[name] = int(counts.get(name, 0))
        for rule_id in active:
            rule = self.rules.get(rule_id)
            if rule is not None:
                rule.fleet_active = True
        for rule_id in retracted:
            rule = self.rules.get(rule_id)
            if rule is not None:
                self.retract(rule)
        for rule in list(self.rules.values()):
            self.judge(rule)

    def to_json(self) -> dict:
        return {"format": FORMAT, "version": VERSION,
                "min_support": self.min_support, "min_precision": self.min_precision,
                "rules": [r.as_json() for r in self.rules.values()]}

    def load_json(self, obj: dict) -> int:
        """Restore the rules of :meth:`to_json`; a ValueError saying what is
        wrong with ``obj``. Returns the number of rules."""
        if obj.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} file (format={obj.get('format')!r})")
        if obj.get("version") != VERSION:
            raise ValueError(f"{FORMAT} version {obj.get('version')!r} is not supported "
                             f"(this scrapy-simdup reads version {VERSION})")
        rules = obj.get("rules")
        if not isinstance(rules, list):
            raise ValueError("field 'rules' is missing or not a list")
        loaded = []
        for i, item in enumerate(rules):
            try:
                rule = Rule(item["kind"], item["host"], item["scope"], item["arg"], item["state"])
                if rule.kind not in KINDS or rule.state not in STATES or \
                        not all(isinstance(getattr(rule, f), str) for f in ("host", "scope", "arg")):
                    raise ValueError
                for field in ("own", "pushed"):
                    counts = item["counts" if field == "own" else "pushed"]
                    for name in COUNTERS:
                        value = counts.get(name, 0)
                        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                            raise ValueError
                        getattr(rule, field)[name] = value
            except (KeyError, TypeError, ValueError, AttributeError):
                raise ValueError(f"rule {i} is not a valid rule: {item!r:.200}") from None
            loaded.append(rule)
        for rule in loaded:
            # the fleet's share was in Redis: until it is read again, what this
            # process pushed counts as the fleet's
            rule.fleet = dict(rule.pushed)
            self._add_rule(rule)
        self.version += 1
        return len(loaded)


def _host_of(url: str) -> str | None:
    scheme, sep, rest = url.partition("://")
    if not sep:
        return None
    netloc = rest.split("/", 1)[0].split("?", 1)[0]
    return f"{scheme.lower()}://{netloc.lower()}"
