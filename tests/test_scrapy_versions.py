"""The oldest supported Scrapy: the real-crawl integration tests run again on it.

The minimum comes from ``setup.cfg`` (``scrapy>=X.Y``); the latest X.Y.* is
installed from PyPI into a temporary folder (``pip install --target``) with
the dependency versions it requires that the test environment does not have
(the others are the newer ones pip would give a user too), and put first on
the path of a nested pytest run of
``test_scrapy_integration.py`` and ``test_config.py``, whose crawl processes
check that they really run that version. The newest Scrapy is what the rest of
the suite runs on. Needs PyPI; set ``SIMDUP_SKIP_OLDEST_SCRAPY=1`` to skip
offline.
"""
from __future__ import annotations

import configparser
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("SIMDUP_SKIP_OLDEST_SCRAPY") == "1",
                       reason="SIMDUP_SKIP_OLDEST_SCRAPY=1"),
    # no recursion when this module is itself run inside the nested run
    pytest.mark.skipif(bool(os.environ.get("SIMDUP_EXPECT_SCRAPY")), reason="nested run"),
]


def minimum_scrapy() -> str:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    for line in cfg["options"]["install_requires"].splitlines():
        m = re.fullmatch(r"\s*scrapy\s*>=\s*([\d.]+)\s*", line, re.I)
        if m:
            return m.group(1)
    raise AssertionError("setup.cfg states no scrapy>= minimum")


def _installed(path: list[str]) -> dict:
    """{normalised name: Distribution}, the first found on ``path`` winning."""
    from importlib.metadata import distributions

    from packaging.utils import canonicalize_name
    found: dict = {}
    for dist in distributions(path=path):
        found.setdefault(canonicalize_name(dist.metadata["Name"]), dist)
    return found


def _pip_target(target: Path, *requirements: str) -> None:
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
         *requirements], capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, f"pip install {requirements} failed:\n{pip.stderr}"


def install_oldest_scrapy(target: Path, minimum: str) -> None:
    """Scrapy ``minimum``.* into ``target``, plus the dependency versions it
    needs that this environment does not satisfy (Scrapy 2.13 caps Twisted,
    for one): what pip would install for a user who pins that Scrapy."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    _pip_target(target, f"scrapy=={minimum}.*")
    for _ in range(4):
        path = [str(target)] + sys.path
        installed = _installed(path)
        unmet = []
        for dist in _installed([str(target)]).values():
            for spec in dist.requires or ():
                req = Requirement(spec)
                if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                    continue
                have = installed.get(canonicalize_name(req.name))
                if have is None or not req.specifier.contains(have.version, prereleases=True):
                    unmet.append(f"{req.name}{req.specifier}")
        if not unmet:
            return
        _pip_target(target, *sorted(set(unmet)))
    raise AssertionError(f"dependencies of scrapy {minimum} still unmet: {unmet}")


def test_integration_suite_passes_on_the_oldest_supported_scrapy(tmp_path):
    minimum = minimum_scrapy()
    target = tmp_path / "oldest-scrapy"
    install_oldest_scrapy(target, minimum)
    version = subprocess.run(
        [sys.executable, "-c", "import scrapy; print(scrapy.__version__)"],
        env={**os.environ, "PYTHONPATH": str(target)}, capture_output=True, text=True,
        check=True).stdout.strip()
    assert version.startswith(minimum + "."), version

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(ROOT)]),
           "SIMDUP_EXPECT_SCRAPY": version}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/test_scrapy_integration.py", "tests/test_config.py"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"Scrapy {version}:\n{run.stdout[-5000:]}\n{run.stderr[-2000:]}"
    assert re.search(r"\b\d+ passed\b", run.stdout), run.stdout[-2000:]
    assert " skipped" not in run.stdout.splitlines()[-1], run.stdout[-2000:]
