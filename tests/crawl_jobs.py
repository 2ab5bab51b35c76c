"""Running ``tests/crawl_runner.py`` in a fresh process: one real crawl per job."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNNER = HERE / "crawl_runner.py"


def write_job(job_path: Path, job: dict) -> Path:
    job_path.write_text(json.dumps(job))
    return job_path


def checkout_env() -> dict:
    # the checkout first: the runner imports scrapy_simdup and tests from it
    return {**os.environ,
            "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])}


def start_job(job_path: Path, result_path: Path, cwd: Path, **popen_kwargs) -> subprocess.Popen:
    """The crawl of ``job_path`` started, reporting to ``result_path``."""
    return subprocess.Popen([sys.executable, str(RUNNER), str(job_path), str(result_path)],
                            env=checkout_env(), cwd=cwd, **popen_kwargs)


def run_job(job_path: Path, result_path: Path, cwd: Path, timeout: float = 120) -> dict:
    """The crawl of ``job_path`` run to its end: its result, with ``stderr``."""
    proc = subprocess.run([sys.executable, str(RUNNER), str(job_path), str(result_path)],
                          capture_output=True, text=True, timeout=timeout, env=checkout_env(), cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(result_path.read_text())
    result["stderr"] = proc.stderr
    return result
