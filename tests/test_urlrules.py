"""The URL rule learner and the trap budget, without Scrapy."""
from __future__ import annotations

import json

import pytest

from scrapy_simdup.exceptions import CorruptFileError
from scrapy_simdup.urlrules import PatternBudget, UrlRuleLearner
from scrapy_simdup.urlrules.learner import Rule, diff_rules, parse_url
from scrapy_simdup.urlrules.persist import RULES_FILE, load_rules, read_rules, save_rules

H = "http://example.com"


def crawl(learner, pages):
    """Observe ``pages``: (url, duplicate_of or None)."""
    for url, dup in pages:
        learner.observe(url, dup)


def tracking_pairs(n, start=0):
    pages = []
    for i in range(start, start + n):
        pages.append((f"{H}/story/s{i}", None))
        pages.append((f"{H}/story/s{i}?utm_source=feed{i}", f"{H}/story/s{i}"))
    return pages


def test_parse_sorts_the_query_and_splits_path_parameters():
    url = parse_url("HTTP://Example.COM/a;jsessionid=X/b?z=1&a=2&a=1")
    assert url.host == "http://example.com"
    assert url.segments == (("a", ("jsessionid=X",)), ("b", ()))
    assert url.query == (("a", "1"), ("a", "2"), ("z", "1"))
    assert parse_url("not a url") is None


@pytest.mark.parametrize("dup, kept, expected", [
    (f"{H}/a?utm_source=x", f"{H}/a", [("param", H, "/a", "utm_source"), ("param", H, "*", "utm_source")]),
    (f"{H}/a?b=2&a=1", f"{H}/a?a=1&b=2", []),          # only the order differs: the same URL
    (f"{H}/a/b;jsessionid=1", f"{H}/a/b;jsessionid=2", [("pathparam", H, "*", "jsessionid")]),
    (f"{H}/print/a/b", f"{H}/a/b", [("segment", H, "*", "print")]),
    (f"{H}/a/b/amp", f"{H}/a/b", [("segment", H, "*", "amp")]),
    ("http://m.example.com/a", f"{H}/a", [("host", "http://m.example.com", "*", H)]),
    ("http://m.example.com/a?x=1", f"{H}/a", []),      # two dimensions at once: nothing
    (f"{H}/a?p=1&q=1&r=1&s=1", f"{H}/a", []),          # too many parameters at once
])
def test_diff_rules(dup, kept, expected):
    assert diff_rules(parse_url(dup), parse_url(kept)) == expected


def test_a_tracking_parameter_is_learned_after_enough_support_and_applied():
    learner = UrlRuleLearner(min_support=3)
    crawl(learner, tracking_pairs(2))
    assert learner.lookup(f"{H}/story/s0?utm_source=other") is None     # 2 pairs: not yet
    crawl(learner, tracking_pairs(1, start=2))
    events = learner.take_events()
    assert ("learned", learner.rules[f"param {H} /story/* utm_source"]) in events
    hit = learner.lookup(f"{H}/story/s1?utm_source=mail")
    assert hit is not None and hit.duplicate_of == f"{H}/story/s1"
    assert {r.arg for r in hit.rules} == {"utm_source"}
    # a URL no page was checked under is not a hit; nor is the very URL checked
    assert learner.lookup(f"{H}/story/s99?utm_source=x") is None
    assert learner.lookup(f"{H}/story/s1") is None


def test_a_content_parameter_never_becomes_a_rule():
    learner = UrlRuleLearner(min_support=2)
    pages = []
    for i in range(20):
        pages.append((f"{H}/read?id={i}", None))                      # all distinct pages
    # two listing pages that happen to be near-duplicates: a pair proposes `id`
    pages.append((f"{H}/read?id=100", f"{H}/read?id=3"))
    pages += [(f"{H}/read?id={i}&page={p}", None) for i in range(3) for p in range(1, 4)]
    pages.append((f"{H}/read?id=1&page=9", f"{H}/read?id=1&page=2"))
    crawl(learner, pages)
    for arg in ("id", "page"):
        for scope in ("/read", "*"):
            rule = learner.rules.get(f"param {H} {scope} {arg}")
            assert rule is None or rule.state == "candidate"
            if rule is not None:
                assert rule.count("contradictions") > 0
    assert not learner.active()
    assert learner.lookup(f"{H}/read?id=5") is None


def test_a_rule_whose_checks_fail_is_retracted():
    learner = UrlRuleLearner(min_support=3, check=1.0)
    crawl(learner, tracking_pairs(4))
    rule = learner.rules[f"param {H} /story/* utm_source"]
    assert rule.state == "active"
    learner.take_events()
    # the parameter starts to change the page: the check of a hit fails
    hit = learner.lookup(f"{H}/story/s0?utm_source=new")
    assert hit is not None and learner.should_check(f"{H}/story/s0?utm_source=new")
    learner.observe(f"{H}/story/s0?utm_source=new", None, checked=hit)
    assert rule.state == "retracted"
    assert ("retracted", rule) in learner.take_events()
    assert rule.count("failed_checks") + learner.rules[f"param {H} * utm_source"].count(
        "failed_checks") == 1
    assert not learner.active()
    assert learner.lookup(f"{H}/story/s3?utm_source=again") is None
    # retracted for good: more support does not bring it back
    crawl(learner, tracking_pairs(5, start=10))
    assert rule.state == "retracted"


def test_path_variants_and_host_alias():
    learner = UrlRuleLearner(min_support=3)
    for i in range(4):
        base = f"{H}/news/a{i}"
        crawl(learner, [(base, None), (f"{H}/print/news/a{i}", base), (f"{base}/amp", base),
                        (f"{H}/news;jsessionid={i}/a{i}", base),
                        (f"http://m.example.com/news/a{i}", base)])
    kinds = {r.kind for r in learner.active()}
    assert kinds == {"segment", "pathparam", "host"}
    learner.observe(f"{H}/news/a9", None)
    for variant in (f"{H}/print/news/a9", f"{H}/news/a9/amp", f"{H}/news;jsessionid=zz/a9",
                    "http://m.example.com/news/a9", "http://m.example.com/print/news/a9"):
        hit = learner.lookup(variant)
        assert hit is not None and hit.duplicate_of == f"{H}/news/a9", variant


def test_rules_survive_a_save_and_load(tmp_path):
    learner = UrlRuleLearner(min_support=3)
    crawl(learner, tracking_pairs(3))
    save_rules(learner, tmp_path)
    again = read_rules(tmp_path)
    rule = again.rules[f"param {H} /story/* utm_source"]
    assert rule.state == "active" and rule.count("support") == 3
    # a new crawl: the page, then a variant is a hit at once
    again.observe(f"{H}/story/new", None)
    assert again.lookup(f"{H}/story/new?utm_source=x").duplicate_of == f"{H}/story/new"


@pytest.mark.parametrize("content", [
    b"", b"{", b"[]", b'{"format": "other"}',
    b'{"format": "simdup-url-rules", "version": 1, "rules": [{"kind": "x"}]}',
    b'{"format": "simdup-url-rules", "version": 9, "rules": []}'])
def test_a_damaged_rules_file_is_moved_aside(tmp_path, content):
    (tmp_path / RULES_FILE).write_bytes(content)
    with pytest.raises(CorruptFileError, match=RULES_FILE):
        read_rules(tmp_path)
    with pytest.raises(CorruptFileError):
        load_rules(UrlRuleLearner(), tmp_path, on_error="stop")
    assert (tmp_path / RULES_FILE).exists()
    learner = UrlRuleLearner()
    assert load_rules(learner, tmp_path) == (0, True)
    assert not (tmp_path / RULES_FILE).exists()
    assert [p.name for p in tmp_path.glob("corrupt-*/*")] == [RULES_FILE]


def test_memory_is_bounded_per_host():
    learner = UrlRuleLearner(max_urls_per_host=50, max_rules_per_host=4, keys_per_rule=20,
                             history=10, max_hosts=3)
    for i in range(300):
        learner.observe(f"{H}/x?k{i % 40}={i}", f"{H}/x" if i % 2 else None)
    assert len(learner.hosts[H].checked) <= 50
    assert len(learner.hosts[H].history) <= 10
    assert sum(r.state == "candidate" for r in learner.rules.values()) <= 4
    assert all(len(r.groups) <= 20 for r in learner.rules.values())
    for h in range(10):
        learner.observe(f"http://h{h}.example/", None)
    assert len(learner.hosts) <= 3


def test_rule_ids_round_trip_and_json():
    rule = Rule("param", H, "/a/*", "utm_source")
    assert Rule.from_id(rule.id).id == rule.id
    with pytest.raises(ValueError):
        Rule.from_id("nonsense")
    json.dumps(UrlRuleLearner().to_json())


def test_pattern_budget_cuts_a_trap_and_not_content():
    budget = PatternBudget(10)
    cut = []
    for month in range(1, 40):
        pattern = budget.observe(f"{H}/calendar/2024/{month}", duplicate=month > 1)
        if pattern:
            cut.append(pattern)
    assert cut == [f"{H}/calendar/N/N"]
    assert budget.over_budget(f"{H}/calendar/1999/1") == f"{H}/calendar/N/N"
    for i in range(40):
        assert budget.observe(f"{H}/read?id={i}", duplicate=False) is None
    assert budget.over_budget(f"{H}/read?id=99") is None
    assert budget.counts[f"{H}/calendar/N/N"][2] == 1


def test_parameters_that_come_together_make_one_rule():
    learner = UrlRuleLearner(min_support=3)
    for i in range(3):
        crawl(learner, [(f"{H}/s/{i}", None),
                        (f"{H}/s/{i}?utm_source=a{i}&utm_medium=b{i}", f"{H}/s/{i}")])
    rule = learner.rules[f"param {H} /s/* utm_medium,utm_source"]
    assert rule.state == "active"
    assert rule.describe() == f"query parameters utm_medium+utm_source on {H}/s/*"
    learner.observe(f"{H}/s/9", None)
    hit = learner.lookup(f"{H}/s/9?utm_medium=x&utm_source=y")
    assert hit is not None and hit.duplicate_of == f"{H}/s/9"


def test_host_aliases_in_a_cycle_make_one_group():
    a, b, c = "http://a.example", "http://b.example", "http://c.example"
    learner = UrlRuleLearner(min_support=3)
    # a -> b, then b -> c, then c -> a: whichever copy came first was kept
    for i, (dup, kept) in enumerate([(a, b), (b, c), (c, a)] * 3):
        crawl(learner, [(f"{kept}/p{i}", None), (f"{dup}/p{i}", f"{kept}/p{i}")])
    assert len([r for r in learner.active() if r.kind == "host"]) == 3
    learner.observe(f"{b}/new", None)
    for host in (a, c):
        hit = learner.lookup(f"{host}/new")
        assert hit is not None and hit.duplicate_of == f"{b}/new", host


def test_a_parameter_seen_with_one_value_only_is_not_any_value():
    # /list?page=1 is /list: that says nothing of page=2
    learner = UrlRuleLearner(min_support=3)
    for i in range(6):
        crawl(learner, [(f"{H}/list{i}", None), (f"{H}/list{i}?page=1", f"{H}/list{i}")])
    assert not learner.active()
    assert learner.lookup(f"{H}/list0?page=2") is None
    # a set of parameters is not used while one of them alone was contradicted
    learner = UrlRuleLearner(min_support=3)
    crawl(learner, [(f"{H}/sec/0?page=1", None), (f"{H}/sec/0?page=2", None)])
    for i in range(5):
        crawl(learner, [(f"{H}/sec/{i}?page=1", None),
                        (f"{H}/sec/{i}?ref=r{i}", f"{H}/sec/{i}?page=1")])
    crawl(learner, [(f"{H}/sec/1?page=2", None)])
    assert learner.rules[f"param {H} * page"].count("contradictions")
    assert f"param {H} * page,ref" not in {r.id for r in learner.active()}


def test_simdup_rules_prints_them(tmp_path, capsys):
    from scrapy_simdup.cli import main

    learner = UrlRuleLearner(min_support=3)
    crawl(learner, tracking_pairs(3))
    crawl(learner, [(f"{H}/read?id={i}", None) for i in range(3)] +
          [(f"{H}/read?id=9", f"{H}/read?id=0")])
    learner.observe(f"{H}/story/s9", None)
    hit = learner.lookup(f"{H}/story/s9?utm_source=z")
    learner.skipped(hit)
    save_rules(learner, tmp_path)
    assert main(["rules", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "2 rules in use, 0 retracted" in out
    assert f"query parameter 'utm_source' on {H}/story/*" in out
    assert "'id'" not in out                                 # a candidate: only with --all
    assert main(["rules", str(tmp_path), "--all", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)[0]["rules"]
    assert {r["arg"] for r in listing} >= {"utm_source", "id"}
    assert sum(r["counts"]["skipped"] for r in listing) == 1  # the one request saved
    (tmp_path / RULES_FILE).write_text("[]")
    assert main(["rules", str(tmp_path)]) == 2
    assert "corrupt or unreadable file" in capsys.readouterr().err


@pytest.mark.parametrize("setting, value, message", [
    ("SIMDUP_URL_RULES", "maybe", "SIMDUP_URL_RULES must be a boolean"),
    ("SIMDUP_URL_RULES_CHECK", 1.5, "SIMDUP_URL_RULES_CHECK must be <= 1.0"),
    ("SIMDUP_URL_RULES_CHECK", "often", "SIMDUP_URL_RULES_CHECK must be a number"),
    ("SIMDUP_URL_RULES_SUPPORT", 0, "SIMDUP_URL_RULES_SUPPORT must be >= 1"),
    ("SIMDUP_PATTERN_BUDGET", -3, "SIMDUP_PATTERN_BUDGET must be >= 0"),
    ("SIMDUP_PATTERN_BUDGET", "lots", "SIMDUP_PATTERN_BUDGET must be an integer"),
])
def test_bad_url_rule_settings_are_named(setting, value, message):
    from scrapy_simdup.integration.config import SimdupConfig

    with pytest.raises(ValueError, match=message):
        SimdupConfig.from_settings({setting: value})


def test_url_rule_settings_are_read():
    from scrapy_simdup.integration.config import SimdupConfig

    config = SimdupConfig.from_settings({"SIMDUP_URL_RULES": "true", "SIMDUP_URL_RULES_CHECK": "0.2",
                                         "SIMDUP_URL_RULES_SUPPORT": 5, "SIMDUP_PATTERN_BUDGET": 0})
    assert (config.url_rules, config.url_rules_check, config.url_rules_support,
            config.pattern_budget) == (True, 0.2, 5, None)
    assert SimdupConfig.from_settings({"SIMDUP_PATTERN_BUDGET": "40"}).pattern_budget == 40
