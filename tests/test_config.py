"""SimdupConfig and component start-up: defaults, parsing, and a ValueError naming
the setting for every bad value; NotConfigured only when disabled."""
from __future__ import annotations

import pytest
from scrapy import Spider
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured
from scrapy.settings import Settings
from scrapy.statscollectors import MemoryStatsCollector

from scrapy_simdup import (
    Addon,
    SimdupConfig,
    SimdupDownloaderMiddleware,
    SimdupLogStats,
    SimdupPipeline,
)
from scrapy_simdup.integration.addon import MIDDLEWARE_PRIORITY, PIPELINE_PRIORITY
from scrapy_simdup.integration.backends import make_backend
from scrapy_simdup.integration.config import SETTINGS_DEFAULTS
from tests.scrapy_crawler import make_crawler


def test_defaults():
    config = SimdupConfig.from_settings(Settings())
    assert config == SimdupConfig()
    assert config.enabled is False and config.action == "drop" and config.distance == 22
    assert config.min_similarity == 0.18
    assert config.search == "psm" and config.index == "memory" and config.dir is None
    assert config.batch_size == 100_000 and config.on_error == "keep"
    assert config.redis_key == "simdup:%(spider)s" and config.redis_params == {}
    assert config.feature_options == {}
    assert config.bands == 12 and config.probes_per_key == 128
    assert set(SETTINGS_DEFAULTS) >= {
        "SIMDUP_ENABLED", "SIMDUP_ACTION", "SIMDUP_DISTANCE", "SIMDUP_RECALL",
        "SIMDUP_MAX_PROBES", "SIMDUP_SEARCH", "SIMDUP_CONTENT_XPATH", "SIMDUP_CONTENT_CSS",
        "SIMDUP_MIN_FEATURES", "SIMDUP_ITEM_FIELDS", "SIMDUP_INDEX", "SIMDUP_DIR",
        "SIMDUP_LOG_INTERVAL", "SIMDUP_DEBUG", "SIMDUP_BATCH_SIZE", "SIMDUP_REDIS_KEY",
        "SIMDUP_REDIS_PARAMS", "SIMDUP_ON_ERROR"}


def test_parsing_of_good_values():
    config = SimdupConfig.from_settings(Settings({
        "SIMDUP_ENABLED": "true", "SIMDUP_ACTION": "TAG", "SIMDUP_DISTANCE": "5",
        "SIMDUP_RECALL": "0.95", "SIMDUP_SEARCH": "PSM", "SIMDUP_SHINGLE_SIZE": 4,
        "SIMDUP_CONTENT_CSS": "article", "SIMDUP_MIN_FEATURES": "8",
        "SIMDUP_ITEM_FIELDS": "title, body", "SIMDUP_INDEX": "redis://localhost:6379/0",
        "SIMDUP_REDIS_PARAMS": '{"socket_timeout": 5}', "SIMDUP_LOG_INTERVAL": "30",
        "SIMDUP_DEBUG": 1, "SIMDUP_ON_ERROR": "stop", "SIMDUP_BATCH_SIZE": 1000.0,
        "SIMDUP_BANDS": "12"}))
    assert config.enabled and config.action == "tag" and config.distance == 5
    assert config.bands == 12
    assert config.recall == 0.95 and config.search == "psm"
    assert config.feature_options == {"shingle_size": 4, "content_css": "article",
                                      "min_features": 8}
    assert config.item_fields == ("title", "body")
    assert config.index == "redis://localhost:6379/0"
    assert config.redis_params == {"socket_timeout": 5}
    assert config.log_interval == 30.0 and config.debug is True
    assert config.on_error == "stop" and config.batch_size == 1000
    assert config.redis_key_for("news") == "simdup:news"


def test_bands_follow_the_sketch_test_and_set_the_default_probes():
    config = SimdupConfig.from_settings(Settings({"SIMDUP_BANDS": 0}))
    assert config.bands == 0 and config.probes_per_key == 512
    config = SimdupConfig.from_settings(Settings({"SIMDUP_BANDS": 4, "SIMDUP_MAX_PROBES": 64}))
    assert config.bands == 4 and config.probes_per_key == 64
    # without the sketch test the keys alone decide: no bands unless asked for
    config = SimdupConfig.from_settings(Settings({"SIMDUP_MIN_SIMILARITY": 0}))
    assert config.bands == 0 and config.probes_per_key == 512
    with pytest.raises(ValueError, match="SIMDUP_BANDS needs the sketch test"):
        SimdupConfig.from_settings(Settings({"SIMDUP_MIN_SIMILARITY": 0, "SIMDUP_BANDS": 8}))


def test_simdup_dir_defaults_to_jobdir():
    assert SimdupConfig.from_settings(Settings({"JOBDIR": "/tmp/job"})).dir == "/tmp/job/simdup"
    assert SimdupConfig.from_settings(Settings({"JOBDIR": "/tmp/job",
                                                "SIMDUP_DIR": "/data/x"})).dir == "/data/x"


@pytest.mark.parametrize("name, value", [
    ("SIMDUP_ENABLED", "maybe"),
    ("SIMDUP_ACTION", "delete"),
    ("SIMDUP_ACTION", 3),
    ("SIMDUP_DISTANCE", "three"),
    ("SIMDUP_DISTANCE", -1),
    ("SIMDUP_DISTANCE", 2.5),
    ("SIMDUP_DISTANCE", True),
    ("SIMDUP_RECALL", 0),
    ("SIMDUP_RECALL", 1.5),
    ("SIMDUP_RECALL", "nan"),
    ("SIMDUP_MAX_PROBES", 0),
    ("SIMDUP_BANDS", 17),
    ("SIMDUP_BANDS", -1),
    ("SIMDUP_BANDS", "all"),
    ("SIMDUP_SEARCH", "fuzzy"),
    ("SIMDUP_SHINGLE_SIZE", "x"),
    ("SIMDUP_MIN_FEATURES", 0),
    ("SIMDUP_CONTENT_XPATH", 42),
    ("SIMDUP_ITEM_FIELDS", []),
    ("SIMDUP_ITEM_FIELDS", [1, 2]),
    ("SIMDUP_ITEM_ID_FIELD", 7),
    ("SIMDUP_TAG_FIELD", ""),
    ("SIMDUP_INDEX", "postgres://db"),
    ("SIMDUP_INDEX", ""),
    ("SIMDUP_DIR", 12),
    ("SIMDUP_BATCH_SIZE", 0),
    ("SIMDUP_BATCH_SIZE", 10 ** 12),              # held in memory until written
    ("SIMDUP_REDIS_KEY", "simdup:%(project)s"),
    ("SIMDUP_REDIS_PARAMS", "not json"),
    ("SIMDUP_REDIS_PARAMS", [1]),
    ("SIMDUP_ON_ERROR", "ignore"),
    ("SIMDUP_ON_REVISIT", "skip"),
    ("SIMDUP_ON_REVISIT", True),
    ("SIMDUP_DROP_START_REQUESTS", "sometimes"),
    ("SIMDUP_LOG_INTERVAL", -5),
    ("SIMDUP_LOG_INTERVAL", "often"),
    ("SIMDUP_DEBUG", "verbose"),
    ("SIMDUP_REDIS_MAX_PAGES", 0),              # checked whatever the index
    ("SIMDUP_REDIS_MAX_PAGES", "many"),
    ("SIMDUP_REDIS_MAX_PAGES", 2 ** 32),          # a log entry's base is 32 bits
    ("SIMDUP_LOG_INTERVAL", 1e-9),                # a line per reactor turn
    ("SIMDUP_DIR", "simdup\x00dir"),
    ("SIMDUP_REDIS_KEY", "%s"),                   # would format the whole dict
    ("SIMDUP_MIN_FEATURES", 2 ** 63),             # would skip every page
])
def test_bad_value_names_the_setting(name, value):
    with pytest.raises(ValueError, match=name):
        SimdupConfig.from_settings(Settings({name: value}))


def test_revisit_and_start_request_settings():
    config = SimdupConfig.from_settings(Settings())
    assert config.on_revisit == "keep" and config.drop_start_requests is False
    config = SimdupConfig.from_settings(Settings({"SIMDUP_ON_REVISIT": " Drop ",
                                                  "SIMDUP_DROP_START_REQUESTS": "true"}))
    assert config.on_revisit == "drop" and config.drop_start_requests is True
    assert SimdupConfig.from_settings(Settings({"SIMDUP_ON_REVISIT": "tag"})).on_revisit == "tag"


@pytest.mark.parametrize("name, value, argument", [
    ("SIMDUP_ON_TOO_LARGE", "explode", "on_too_large must be"),
    ("SIMDUP_FEATURES", "words", "unknown feature set 'words'"),
    ("SIMDUP_CONTENT_XPATH", "//div[@", "content_xpath is not a valid XPath"),
    ("SIMDUP_PARSER", "regex", "parser must be one of"),
])
def test_fingerprinter_errors_name_the_setting(name, value, argument):
    """The Fingerprinter names its argument; the config, which builds it from
    the settings, names the setting (when enabled: at parsing already)."""
    settings = Settings({"SIMDUP_ENABLED": True, name: value})
    with pytest.raises(ValueError, match=rf"^{name}: {argument}"):
        SimdupConfig.from_settings(settings)
    for component in COMPONENTS:
        with pytest.raises(ValueError, match=rf"^{name}: {argument}"):
            component.from_crawler(make_crawler({"SIMDUP_ENABLED": True, name: value}))
    # turned off, the value is not used: not refused
    config = SimdupConfig.from_settings(Settings({name: value}))
    with pytest.raises(ValueError, match=rf"^{name}: {argument}"):
        config.make_fingerprinter()


def test_exclusive_settings():
    with pytest.raises(ValueError, match="SIMDUP_RECALL and SIMDUP_MAX_PROBES"):
        SimdupConfig.from_settings(Settings({"SIMDUP_RECALL": 0.9, "SIMDUP_MAX_PROBES": 10}))
    with pytest.raises(ValueError, match="SIMDUP_CONTENT_XPATH and SIMDUP_CONTENT_CSS"):
        SimdupConfig.from_settings(Settings({"SIMDUP_CONTENT_XPATH": "//article",
                                             "SIMDUP_CONTENT_CSS": "article"}))


def test_unknown_setting_is_reported_once_per_crawl(caplog):
    crawler = make_crawler({"SIMDUP_ENABLED": True, "SIMDUP_DISTANSE": 4})
    for component in COMPONENTS:    # the middleware, the pipeline and the log extension
        component.from_crawler(crawler)
    assert caplog.text.count("SIMDUP_DISTANSE") == 1
    SimdupDownloaderMiddleware.from_crawler(                            # another crawl
        make_crawler({"SIMDUP_ENABLED": True, "SIMDUP_DISTANSE": 4}))
    assert caplog.text.count("SIMDUP_DISTANSE") == 2


def test_the_config_is_built_once_per_crawler(caplog):
    """Every component of a crawler gets the same SimdupConfig, parsed from the
    settings once (a warning about them logged once); another crawler its own."""
    settings = {"SIMDUP_ENABLED": True, "SIMDUP_SEARCH": "exact", "SIMDUP_MAX_PROBES": 5,
                "SIMDUP_REDIS_MAX_PAGES": "1000", "SIMDUP_REDIS_HEADER_BITS": 12,
                "JOBDIR": "/tmp/simdup-job-unused"}
    crawler = make_crawler(settings)
    config = SimdupConfig.from_crawler(crawler)
    assert SimdupConfig.from_crawler(crawler) is config
    logstats = SimdupLogStats.from_crawler(crawler)
    assert logstats.interval == config.log_interval
    assert caplog.text.count("SIMDUP_MAX_PROBES has no effect") == 1
    # a retired setting: warned about (once), not an unknown one, not refused
    assert caplog.text.count("SIMDUP_REDIS_HEADER_BITS no longer has an effect") == 1
    assert "Unknown setting" not in caplog.text
    # the values the layers below need are in the config, not read again
    assert config.redis_max_pages == 1000
    assert config.dir == "/tmp/simdup-job-unused/simdup" and config.dir_from_jobdir
    assert config.dir_setting == "SIMDUP_DIR (JOBDIR/simdup)"
    other = make_crawler(settings)
    assert SimdupConfig.from_crawler(other) is not config
    assert SimdupConfig.from_crawler(other) == config
    assert caplog.text.count("SIMDUP_MAX_PROBES has no effect") == 2


def test_components_of_one_crawler_share_the_config():
    crawler = make_crawler({"SIMDUP_ENABLED": True})
    middleware = SimdupDownloaderMiddleware.from_crawler(crawler)
    pipeline = SimdupPipeline.from_crawler(crawler)
    assert middleware.config is pipeline.config is SimdupConfig.from_crawler(crawler)
    assert middleware.logstats is pipeline.logstats is SimdupLogStats.from_crawler(crawler)


def test_search_settings_that_cannot_apply(caplog):
    # a Redis index searches its replica in the process: exact search applies
    assert SimdupConfig.from_settings(Settings({"SIMDUP_SEARCH": "exact",
                                                "SIMDUP_INDEX": "redis://localhost:6379/0"})
                                      ).search == "exact"
    config = SimdupConfig.from_settings(Settings({"SIMDUP_SEARCH": "exact",
                                                  "SIMDUP_RECALL": 0.5, "SIMDUP_DISTANCE": 12}))
    assert config.search == "exact"
    assert "SIMDUP_RECALL has no effect with SIMDUP_SEARCH = 'exact'" in caplog.text


def test_recall_is_calibrated_at_the_default_distance():
    """SIMDUP_RECALL works at the default radius: the index picks the fewest
    probes per key whose stated recall reaches it, and re-picks them as its
    header grows."""
    config = SimdupConfig.from_settings(Settings({"SIMDUP_RECALL": 0.97}))
    index = make_backend(config, None).index
    assert index.recall == 0.97 and index.recall_held
    assert index.expected_recall >= 0.97
    config = SimdupConfig.from_settings(Settings({"SIMDUP_RECALL": 0.9, "SIMDUP_DISTANCE": 12}))
    assert make_backend(config, None).index.max_probes >= 1


@pytest.mark.parametrize("value", [-0.1, 1.5, "many", True])
def test_bad_min_similarity(value):
    with pytest.raises(ValueError, match="SIMDUP_MIN_SIMILARITY"):
        SimdupConfig.from_settings(Settings({"SIMDUP_MIN_SIMILARITY": value}))




COMPONENTS = (SimdupDownloaderMiddleware, SimdupPipeline, SimdupLogStats)


@pytest.mark.parametrize("component", COMPONENTS)
def test_disabled_means_not_configured(component):
    with pytest.raises(NotConfigured):
        component.from_crawler(make_crawler({}))
    with pytest.raises(NotConfigured):
        component.from_crawler(make_crawler({"SIMDUP_ENABLED": False}))


@pytest.mark.parametrize("component", COMPONENTS)
def test_bad_value_fails_at_start_up(component):
    with pytest.raises(ValueError, match="SIMDUP_ACTION"):
        component.from_crawler(make_crawler({"SIMDUP_ENABLED": True, "SIMDUP_ACTION": "nuke"}))


@pytest.mark.parametrize("settings, name", [
    ({"SIMDUP_FEATURES": "words"}, "SIMDUP_FEATURES"),
    ({"SIMDUP_WEIGHTING": "tfidf-ish"}, "SIMDUP_WEIGHTING"),
    ({"SIMDUP_EXTRACT": "everything"}, "SIMDUP_EXTRACT"),
    ({"SIMDUP_CONTENT_XPATH": "//div[@"}, "SIMDUP_CONTENT_XPATH"),
    ({"SIMDUP_CONTENT_CSS": "div[[["}, "SIMDUP_CONTENT_CSS"),
    ({"SIMDUP_SHINGLE_SIZE": 99}, "SIMDUP_SHINGLE_SIZE"),
    ({"SIMDUP_PARSER": "regex"}, "SIMDUP_PARSER"),
    ({"SIMDUP_DISTANCE": 30}, "SIMDUP_DISTANCE"),
    ({"SIMDUP_CONTENT_XPATH": "count(//p)"}, "SIMDUP_CONTENT_XPATH"),    # selects no nodes
    ({"SIMDUP_CONTENT_XPATH": "//p[$mine]"}, "SIMDUP_CONTENT_XPATH"),    # unknown variable
    ({"SIMDUP_CONTENT_XPATH": "//x:article"}, "SIMDUP_CONTENT_XPATH"),   # unknown prefix
])
def test_options_checked_by_the_fingerprinter_and_index_name_the_setting(settings, name):
    with pytest.raises(ValueError, match=name):
        SimdupDownloaderMiddleware.from_crawler(make_crawler({"SIMDUP_ENABLED": True, **settings}))


@pytest.mark.parametrize("search", ["psm", "exact"])
def test_memory_backend_check_and_add(search):
    import asyncio

    from scrapy_simdup import fingerprint_features
    config = SimdupConfig.from_settings(Settings({"SIMDUP_SEARCH": search}))
    backend = make_backend(config, None)
    words = [f"w{i}" for i in range(200)]
    a = fingerprint_features(words)
    b = fingerprint_features(words[:-1] + ["other"])  # one feature of 200 changed
    c = fingerprint_features([f"x{i}" for i in range(200)])

    async def run():
        first = await backend.check_and_add(a, "a")
        second = await backend.check_and_add(b, "b")
        batch = await backend.check_and_add_many([c, c], ["c1", "c2"])
        await backend.close()
        return first, second, batch

    first, second, batch = asyncio.run(run())
    assert first is None
    assert second is not None and second.duplicate_of == "a" and second.distance <= 3
    assert second.similarity > 0.8
    assert batch[0] is None and batch[1] == ("c1", 0, 1.0)  # within a batch too
    assert len(backend) == backend.size == 4   # near-duplicates join the index too
    assert backend.probes and backend.probes > 0


def test_addon_registers_components_and_keeps_user_priorities():
    settings = Settings({"DOWNLOADER_MIDDLEWARES": {
        "scrapy_simdup.integration.middleware.SimdupDownloaderMiddleware": 543}})
    Addon().update_settings(settings)
    assert settings.getbool("SIMDUP_ENABLED")
    dmw = settings.getdict("DOWNLOADER_MIDDLEWARES")
    assert list(dmw.values()) == [543]  # the project's entry wins, no duplicate
    assert settings.getdict("ITEM_PIPELINES") == {SimdupPipeline: PIPELINE_PRIORITY}
    assert SimdupLogStats in settings.getdict("EXTENSIONS")
    # below HttpCompression (590) and Redirect (600): sees their output
    assert MIDDLEWARE_PRIORITY < 590


def test_addon_respects_simdup_enabled_false_from_the_project():
    crawler = Crawler(Spider, {"ADDONS": {Addon: 0}, "SIMDUP_ENABLED": False})
    crawler.addons.load_settings(crawler.settings)
    crawler.stats = MemoryStatsCollector(crawler)
    assert crawler.settings.getbool("SIMDUP_ENABLED") is False
    with pytest.raises(NotConfigured):
        SimdupDownloaderMiddleware.from_crawler(crawler)


@pytest.mark.parametrize("make_bad", ["file", "file_parent", "jobdir_file"])
def test_unusable_simdup_dir_fails_at_start_up(tmp_path, make_bad):
    a_file = tmp_path / "a_file"
    a_file.write_text("not a directory")
    settings = {"file": {"SIMDUP_DIR": str(a_file)},
                "file_parent": {"SIMDUP_DIR": str(a_file / "simdup")},
                "jobdir_file": {"JOBDIR": str(a_file)}}[make_bad]
    with pytest.raises(ValueError, match="SIMDUP_DIR"):
        SimdupDownloaderMiddleware.from_crawler(make_crawler({"SIMDUP_ENABLED": True, **settings}))


def test_a_component_that_fails_to_open_frees_its_simdup_dir(tmp_path):
    """The directory lock is taken before the index is opened; when opening
    fails (here a Redis index that cannot be reached), the lock is released,
    so another crawler of this process can use the directory."""
    from scrapy_simdup.index.crawldir import lock_crawl_directory
    d = tmp_path / "simdup"
    settings = {"SIMDUP_ENABLED": True, "SIMDUP_DIR": str(d),
                "SIMDUP_INDEX": "redis://127.0.0.1:1/0"}
    component = SimdupDownloaderMiddleware.from_crawler(make_crawler(settings))
    assert component.refused == "simdup_index_unavailable"
    lock_crawl_directory(d).close()     # free again (it said "another crawler" before)


# ------------------------------------------- values that started, then failed or did nothing

@pytest.mark.parametrize("xpath, what, instead", [
    ("//p[1]/text()", "text nodes", "//p[1]"),
    ("//a/@href", "attributes", "//a"),
    ("//article//text()", "text nodes", "//article"),
    ("//p/attribute::class", "attributes", "//p"),
    ("//div[@id='main']/node()", "nodes of every kind", "//div[@id='main']"),
    ("//h1 | //p/@class", "attributes", None),
    ("(//p/text())[1]", "text nodes", None),
    ("//p/following-sibling::text()", "text nodes", None),
    ("//div/comment()", "comments", "//div"),
])
def test_a_content_xpath_that_selects_no_elements_is_refused(xpath, what, instead):
    """Only elements are content (their text): an XPath selecting text or
    attributes started and was ignored on every page. Refused at start-up,
    naming the setting, what it selects and the elements to select instead;
    by the static form of its final steps, not only by what it selects on a
    sample (``//a/@href`` selects nothing there)."""
    with pytest.raises(ValueError) as err:
        SimdupConfig.from_settings(Settings({"SIMDUP_ENABLED": True,
                                             "SIMDUP_CONTENT_XPATH": xpath}))
    message = str(err.value)
    assert message.startswith("SIMDUP_CONTENT_XPATH: content_xpath must select elements"), message
    assert f"but {xpath!r} selects {what}" in message, message
    if instead is None:
        assert "instead" not in message, message
    else:
        assert message.endswith(f"select the elements instead, e.g. {instead!r}"), message
    with pytest.raises(ValueError, match="^SIMDUP_CONTENT_XPATH: content_xpath must select"):
        SimdupDownloaderMiddleware.from_crawler(make_crawler({"SIMDUP_ENABLED": True,
                                                              "SIMDUP_CONTENT_XPATH": xpath}))


@pytest.mark.parametrize("xpath", [
    "//article", "//div[@id='main']", "//div[p/text()='x']", "//a[@href]",
    "//*[contains(text(), '/@x | y/text()')]", "//p/..", "id('main')", "//h1 | //div/p",
    "(//p)[1]", "//p/following-sibling::*"])
def test_a_content_xpath_that_selects_elements_is_accepted(xpath):
    config = SimdupConfig.from_settings(Settings({"SIMDUP_ENABLED": True,
                                                  "SIMDUP_CONTENT_XPATH": xpath}))
    assert config.make_fingerprinter().content_xpath == xpath


@pytest.mark.parametrize("settings, message", [
    ({"SIMDUP_REDIS_PARAMS": {"decode_responses": True}},
     "SIMDUP_REDIS_PARAMS: decode_responses must be off"),
    ({"SIMDUP_REDIS_PARAMS": '{"decode_responses": "yes"}'},
     "SIMDUP_REDIS_PARAMS: decode_responses must be off"),
    ({"SIMDUP_INDEX": "redis://127.0.0.1:6390/0?decode_responses=True"},
     "SIMDUP_INDEX: decode_responses in the URL's query must be off"),
    ({"SIMDUP_MAX_PROBES": 2 ** 70}, "SIMDUP_MAX_PROBES must be <= 1,073,741,824"),
    ({"SIMDUP_MAX_PROBES": str(2 ** 30 + 1)}, "SIMDUP_MAX_PROBES must be <= 1,073,741,824"),
    ({"SIMDUP_INDEX": "redis://host:6390/abc"},
     "SIMDUP_INDEX: the Redis database is the number after the host .* got the path '/abc'"),
    ({"SIMDUP_INDEX": "redis://host:6390/-1"}, "got the path '/-1'"),
    ({"SIMDUP_INDEX": "rediss://host/3/4"}, "got the path '/3/4'"),       # read as db 34
    ({"SIMDUP_INDEX": "redis://host/%33"}, "got the path '/%33'"),
    ({"SIMDUP_INDEX": "redis://host/0?db=x"}, r"db='x' in the URL's query\) must be a number"),
    ({"SIMDUP_INDEX": "unix:///run/redis.sock?db=-2"}, r"db='-2'"),
])
def test_redis_settings_that_failed_every_check_or_chose_db_0_are_refused(settings, message):
    """decode_responses made every look-up fail (UnicodeDecodeError), a huge
    SIMDUP_MAX_PROBES every Redis check (OverflowError), and a database path
    that is not a number >= 0 silently used db 0 (or another): refused at
    start-up, naming the setting."""
    with pytest.raises(ValueError, match=message):
        SimdupConfig.from_settings(Settings(settings))
    with pytest.raises(ValueError, match=message):
        SimdupDownloaderMiddleware.from_crawler(make_crawler({"SIMDUP_ENABLED": True,
                                                              **settings}))


def test_a_redis_url_error_does_not_repeat_its_password():
    with pytest.raises(ValueError) as err:
        SimdupConfig.from_settings(Settings({"SIMDUP_INDEX": "redis://u:s3cret@host/abc"}))
    assert "s3cret" not in str(err.value) and "'/abc'" in str(err.value)


@pytest.mark.parametrize("settings", [
    {"SIMDUP_INDEX": "redis://host:6390"}, {"SIMDUP_INDEX": "redis://host:6390/"},
    {"SIMDUP_INDEX": "redis://host:6390/15"}, {"SIMDUP_INDEX": "rediss://u:p@host/2/"},
    {"SIMDUP_INDEX": "redis://host/?db=3"}, {"SIMDUP_INDEX": "unix:///run/redis.sock?db=1"},
    {"SIMDUP_INDEX": "redis://host/0?decode_responses=false"},
    {"SIMDUP_REDIS_PARAMS": {"decode_responses": False, "socket_timeout": 2}},
    {"SIMDUP_MAX_PROBES": 2 ** 30}])
def test_redis_settings_that_work_are_accepted(settings):
    SimdupConfig.from_settings(Settings(settings))


def test_the_largest_probe_budget_works_on_a_real_redis(redis_server):
    """SIMDUP_MAX_PROBES at its bound checks pages on a real server (2**70
    raised OverflowError in every check); the budget is capped at the
    index's flip sets, so it finds what the default finds."""
    import asyncio
    import uuid

    from scrapy_simdup import fingerprint_features

    words = [f"w{i}" for i in range(200)]
    a = fingerprint_features(words)
    b = fingerprint_features(words[:-1] + ["other"])

    async def run(backend):
        first = await backend.check_and_add(a, "a")
        second = await backend.check_and_add(b, "b")
        await backend.close()
        return first, second

    for probes in (2 ** 30, None):
        settings = {"SIMDUP_INDEX": redis_server.url, "SIMDUP_MAX_PROBES": probes,
                    "SIMDUP_REDIS_KEY": f"simdup-test:{uuid.uuid4().hex}"}
        backend = make_backend(SimdupConfig.from_settings(Settings(settings)), None)
        first, second = asyncio.run(run(backend))
        assert first is None and second is not None and second.duplicate_of == "a"
