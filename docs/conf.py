"""Sphinx configuration of the scrapy-simdup documentation.

Built with Sphinx's built-ins only (no extensions, the default theme) and
without importing the package, so the docs build without the compiled core:

    sphinx-build -W --keep-going -b html docs /tmp/docs_out
"""

project = "scrapy-simdup"
author = "scrapy-simdup contributors"
copyright = "scrapy-simdup contributors"

extensions = []

root_doc = "index"
exclude_patterns = ["_build"]
templates_path = []
html_static_path = []

highlight_language = "python3"
pygments_style = "sphinx"
html_theme = "alabaster"
html_title = "scrapy-simdup"
