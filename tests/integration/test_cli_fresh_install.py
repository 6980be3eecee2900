"""The README's "Run the main job" command on a fresh virtual environment: ``pip install -e
'.[server]'`` brings only what the plain demo needs (no Spark), the demo passes, and ``jssync
demo spark`` says in one line which extra to install.

Slow (it builds a venv and installs from PyPI): marked ``slow``, skipped when PyPI cannot be
reached."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

TREE = Path(__file__).resolve().parents[2]


def _pypi_reachable() -> str | None:
    """None when the PyPI index answers, else why not."""
    try:
        with urllib.request.urlopen("https://pypi.org/simple/msgspec/", timeout=5) as r:  # noqa: S310
            return None if r.status == 200 else f"PyPI answered {r.status}"
    except OSError as exc:
        return f"PyPI is not reachable: {exc}"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "NATS_URL", "VIRTUAL_ENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def test_the_main_job_installs_only_the_server_extra_and_runs(tmp_path: Path) -> None:
    why = _pypi_reachable()
    if why:
        pytest.skip(why)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=60)
    py, jssync = str(venv / "bin" / "python"), str(venv / "bin" / "jssync")
    install = subprocess.run([py, "-m", "pip", "install", "-q", "-e", f"{TREE}[server]"], env=_env(),
                             capture_output=True, text=True, timeout=240)
    assert install.returncode == 0, install.stdout + install.stderr

    # Only the plain demo's needs: no Spark, no test tools.
    probe = "import importlib.util as u; print([m for m in ('pyspark', 'pyarrow', 'pytest') if u.find_spec(m)])"
    found = subprocess.run([py, "-c", probe], env=_env(), capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert found.stdout.strip() == "[]", found.stdout + found.stderr

    demo = subprocess.run([jssync, "demo"], env=_env(), capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert demo.stdout.rstrip().endswith("demo passed")
    assert "FAILED" not in demo.stdout

    spark = subprocess.run([jssync, "demo", "spark"], env=_env(), capture_output=True, text=True, timeout=60,
                           cwd=tmp_path)
    assert spark.returncode == 1
    assert spark.stdout == ""
    assert spark.stderr.count("\n") == 1, spark.stderr
    assert "pip install -e '.[spark]'" in spark.stderr and "pyspark" in spark.stderr
