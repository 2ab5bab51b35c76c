"""The Scrapy integration: the only layer that imports Scrapy.

The add-on, the settings read once per crawler (``SimdupConfig``), the
downloader middleware, the item pipeline, the log-stats extension, the
backend factory that turns the config into the plain values of the layers
below, and the ``scrapy simdup`` command.
"""
