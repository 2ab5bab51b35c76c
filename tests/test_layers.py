"""The package's layers stay layers.

``pyproject.toml`` declares them for import-linter: integration > cli > report > merge |
urlrules (side by side) > index > fingerprint > storage > the compiled core, and only the integration
imports Scrapy or Twisted. These tests run that contract on the source tree,
show that it catches a violation, and check the compiled sources, which
import-linter cannot read.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "scrapy_simdup"
LOWER_LAYERS = ("merge", "urlrules", "index", "fingerprint", "storage")

pytest.importorskip("importlinter")


def lint_imports(cwd: Path) -> subprocess.CompletedProcess:
    """import-linter with the project's contracts, on the package found in ``cwd``."""
    return subprocess.run(
        [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command;"
         " sys.exit(lint_imports_command())",
         str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=cwd, env={"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=300)


def copy_sources(dest: Path) -> Path:
    """The package's Python sources (no compiled modules: the contract reads source)."""
    shutil.copytree(PACKAGE, dest / "scrapy_simdup",
                    ignore=shutil.ignore_patterns("*.so", "*.c", "__pycache__", "*.html"))
    return dest


def test_the_layer_contracts_hold(tmp_path):
    result = lint_imports(copy_sources(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 kept, 0 broken" in result.stdout


@pytest.mark.parametrize("layer", LOWER_LAYERS)
def test_the_contract_fails_when_a_lower_layer_imports_scrapy(tmp_path, layer):
    tree = copy_sources(tmp_path)
    module = sorted((tree / "scrapy_simdup" / layer).glob("*.py"))[-1]
    module.write_text(module.read_text() + "\nimport scrapy.http  # a layer violation\n")
    result = lint_imports(tree)
    assert result.returncode != 0
    assert "Only the integration imports Scrapy" in result.stdout
    assert f"scrapy_simdup.{layer} is not allowed to import scrapy" in result.stdout


def test_the_contract_fails_when_a_layer_imports_one_above_it(tmp_path):
    tree = copy_sources(tmp_path)
    module = tree / "scrapy_simdup" / "storage" / "atomic.py"
    module.write_text(module.read_text() + "\nfrom scrapy_simdup.index import memory  # upward\n")
    result = lint_imports(tree)
    assert result.returncode != 0
    assert "scrapy_simdup.storage is not allowed to import scrapy_simdup.index" in result.stdout


def test_urlrules_and_merge_stay_side_by_side(tmp_path):
    tree = copy_sources(tmp_path)
    module = tree / "scrapy_simdup" / "urlrules" / "traps.py"
    module.write_text(module.read_text() + "\nfrom scrapy_simdup.merge import report  # beside\n")
    result = lint_imports(tree)
    assert result.returncode != 0
    assert "scrapy_simdup.urlrules is not allowed to import scrapy_simdup.merge" in result.stdout


_SCRAPY_IMPORT = re.compile(r"^\s*(c?import\s+(scrapy|twisted)\b|from\s+(scrapy|twisted)\b)", re.M)


def test_no_compiled_source_imports_scrapy():
    sources = [p for p in (PACKAGE / "_ext").iterdir()
               if p.suffix in (".pyx", ".pxd", ".pxi", ".h", ".py")]
    assert any(p.suffix == ".pyx" for p in sources)
    offenders = [str(p.relative_to(ROOT)) for p in sources if _SCRAPY_IMPORT.search(p.read_text())]
    assert offenders == []
    assert _SCRAPY_IMPORT.search("from scrapy.http import HtmlResponse\n")  # the pattern bites
