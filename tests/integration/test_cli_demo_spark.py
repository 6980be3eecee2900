"""``jssync demo spark`` as a user runs it: a fresh process (so a fresh JVM), nothing from
Spark's or the JVM's start-up before the demo's own output; without pyspark it says which
extra to install, in one line."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

CLI = [sys.executable, "-m", "jssync"]


def test_without_pyspark_the_demo_names_the_extra_in_one_line() -> None:
    code = ("import sys; sys.modules['pyspark'] = None; from jssync.cli import main; "
            "raise SystemExit(main(['demo', 'spark']))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("jssync demo spark: pyspark is not installed")
    assert "pip install -e '.[spark]'" in r.stderr


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_spark_demo_prints_no_logging_banner(nats_url: str) -> None:
    pytest.importorskip("pyspark", reason="the spark extra is not installed")
    env = {**os.environ, "NATS_URL": nats_url}
    r = subprocess.run(CLI + ["demo", "spark", "--server", nats_url], capture_output=True, text=True, timeout=280,
                       env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.rstrip().endswith("spark demo passed")
    # Nothing of log4j's or the JVM's start-up: no profile banner, no default-level notice,
    # no native-hadoop or incubator-module warning.
    for noise in ("log4j", "Setting default log level", "setLogLevel", "NativeCodeLoader", "incubator",
                  "WARN", "[Stage"):
        assert noise not in r.stderr, r.stderr
    assert r.stderr == "", r.stderr
