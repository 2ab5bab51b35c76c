"""The compiled core: Cython modules and C headers (NumPy and lxml's C API
only). Python code imports them as ``from scrapy_simdup._ext import psm``.
"""
