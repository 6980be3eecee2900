"""Spark fixtures: one local SparkSession for the whole session, and helpers on the real server.

Every test in this directory gets the ``spark`` marker (``-m 'not spark'`` leaves them out).
The session is ``local[2,3]``: two task slots and up to 3 attempts per task, so a task made to
fail on its first attempt is retried as on a cluster. The Spark UI is off, shuffles use 2
partitions and the Python workers run this interpreter (``PYSPARK_PYTHON``). Without pyspark,
pyarrow or a Java runtime the tests skip with the reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # (Called with every collected item of the run: mark only those of this directory.)
    for item in items:
        if _HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.spark)


def _spark_unavailable() -> str | None:
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        return f"pyspark/pyarrow not installed ({exc}); pip install -e '.[spark]' in the checkout"
    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    if not java or not os.path.exists(java):
        return "no Java runtime (java not on PATH and no JAVA_HOME): Spark needs Java 17+"
    try:
        subprocess.run([java, "-version"], capture_output=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"java does not run: {exc}"
    return None


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    reason = _spark_unavailable()
    if reason is not None:
        pytest.skip(reason)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # The executors import jssync and the tests package from this checkout.
    root = str(_HERE.parent.parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2,3]")
        .appName("jssync-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "768m")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def names() -> Any:
    """Unique stream names and subjects per test (the server is shared by the session)."""

    class Names:
        def __init__(self) -> None:
            tag = uuid.uuid4().hex[:10]
            self.stream = f"SPARK_{tag}"
            self.subject = f"spark.{tag}"

    return Names()


@pytest.fixture
def js(nats_url: str) -> Iterator[Any]:
    import jssync

    nc = jssync.connect(nats_url)
    try:
        yield nc.jetstream()
    finally:
        nc.close()
