# Settings of the scrapy-simdup example project.
BOT_NAME = "news"
SPIDER_MODULES = ["news.spiders"]
NEWSPIDER_MODULE = "news.spiders"

# The one line that turns near-duplicate detection on.
ADDONS = {"scrapy_simdup.Addon": 0}

# A few settings spelled out (every setting and its default: docs/usage.rst,
# "Settings"). All but SIMDUP_LOG_INTERVAL are the defaults.
SIMDUP_ACTION = "drop"        # or "tag": pass duplicates on with response.meta["simdup"]
SIMDUP_DISTANCE = 22          # search radius of each 64-bit key (candidates)
SIMDUP_MIN_SIMILARITY = 0.18  # estimated Jaccard a candidate needs to be a near-duplicate
SIMDUP_SEARCH = "psm"         # Probabilistic Simhash Matching ("exact": every flip set)
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
