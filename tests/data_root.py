"""Where the shared page data is: ``SIMDUP_DATA`` if set, else the
``shared/data`` folder beside the checkout (in the checkout's parent)."""
from __future__ import annotations

import os
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]


def find_data_root() -> Path:
    env = os.environ.get("SIMDUP_DATA")
    return Path(env) if env else CHECKOUT.parent / "shared" / "data"


DATA_ROOT = find_data_root()
