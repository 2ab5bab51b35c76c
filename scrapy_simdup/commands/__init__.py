"""Scrapy commands shipped by scrapy-simdup (registered through the
``scrapy.commands`` entry point: ``scrapy simdup merge|stats``)."""
