# Settings of the scrapy-simdup example project.
BOT_NAME = "news"
SPIDER_MODULES = ["news.spiders"]
NEWSPIDER_MODULE = "news.spiders"

# The one line that turns near-duplicate detection on.
ADDONS = {"scrapy_simdup.Addon": 0}

# A few settings spelled out (every setting and its default: docs/usage.rst,
# "Settings"). SIMDUP_ACTION and SIMDUP_SEARCH are the defaults;
# SIMDUP_DISTANCE and SIMDUP_LOG_INTERVAL are not.
SIMDUP_ACTION = "drop"        # or "tag": pass duplicates on with response.meta["simdup"]
# Hamming distance threshold. The default, 9, keeps chance matches rare up to
# about a million pages; a crawl of at most 10,000 pages like this one can use
# 12 (the table in docs/usage.rst, "Choosing SIMDUP_DISTANCE", set by
# benchmarks/eval_quality.py on the tune half of the data).
SIMDUP_DISTANCE = 12
SIMDUP_SEARCH = "psm"         # Probabilistic Simhash Matching ("exact": block-permuted search)
SIMDUP_LOG_INTERVAL = 10.0    # the periodic "Simdup: ..." line, seconds (default 60)

# A local site: no politeness delays needed, no robots.txt.
ROBOTSTXT_OBEY = False
CONCURRENT_REQUESTS = 16
DOWNLOAD_DELAY = 0
LOG_LEVEL = "INFO"
TELNETCONSOLE_ENABLED = False

# The items of this spider carry no text to compare (title and link count), so
# the item pipeline the add-on also enables is switched off here.
ITEM_PIPELINES = {"scrapy_simdup.SimdupPipeline": None}
