# Settings of the scrapy-simdup example project.
BOT_NAME = "news"
SPIDER_MODULES = ["news.spiders"]
NEWSPIDER_MODULE = "news.spiders"

# The one line that turns near-duplicate detection on.
ADDONS = {"scrapy_simdup.Addon": 0}

# The defaults, spelled out (see the README's "Settings" table):
SIMDUP_ACTION = "drop"        # or "tag": pass duplicates on with response.meta["simdup"]
# Hamming distance threshold. The default is 3; on this site different
# articles are at least 14 bits apart while heavily edited copies (syndicated
# into another template and trimmed by 10-20 %) are 6-10 bits from the
# original, so the example uses the largest threshold the index supports.
SIMDUP_DISTANCE = 8
# Single words as features (the default is 2-word shingles): trimmed and
# re-templated copies keep more of their features. Chosen on the "tune" half of
# the data (precision 1.000, recall 0.930 at h = 8); this crawl uses the other
# ("report") half.
SIMDUP_SHINGLE_SIZE = 1
SIMDUP_SEARCH = "psm"         # Probabilistic Simhash Matching ("exact": block-permuted search)
SIMDUP_LOG_INTERVAL = 10.0    # the periodic "Simdup: ..." line, seconds

# A local site: no politeness delays needed, no robots.txt.
ROBOTSTXT_OBEY = False
CONCURRENT_REQUESTS = 16
DOWNLOAD_DELAY = 0
LOG_LEVEL = "INFO"
TELNETCONSOLE_ENABLED = False

# The items of this spider carry no text to compare (title and link count), so
# the item pipeline the add-on also enables is switched off here.
ITEM_PIPELINES = {"scrapy_simdup.SimdupPipeline": None}
