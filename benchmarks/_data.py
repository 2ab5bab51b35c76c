"""The page loaders and the labelled near-duplicate site generator.

They live with the example project (``example_project/news/sitedata.py``),
which needs them to run on its own; the benchmarks and tests import them
from here, as the same module object.
"""
import sys
from pathlib import Path

_EXAMPLE = Path(__file__).resolve().parents[1] / "example_project"
if str(_EXAMPLE) not in sys.path:
    sys.path.insert(0, str(_EXAMPLE))

from news import sitedata as _sitedata

sys.modules[__name__] = _sitedata
